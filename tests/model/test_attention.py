"""The attention math, checked against hand-computed examples, a reference loop and the fused kernel."""

import math
import zlib

import pytest
import torch

from tinygpt.model.attention import (
    attention_from_scores,
    CausalSelfAttention,
    causal_mask,
    masked_softmax,
    scaled_dot_product_attention,
)
from tinygpt.model.config import AttnConfig, scale_factor

# ----------------------------------------------------------------------------- worked examples


def test_three_token_example():
    q = torch.tensor([[1.0, 1.0]])  # (T_q=1, D=2)
    k = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    v = torch.tensor([[1.0, 0.0], [0.0, 2.0], [1.0, 1.0]])
    out, w = scaled_dot_product_attention(q, k, v, causal=False)
    # scores (1, 2, 1) / sqrt(2) -> softmax
    assert w[0].tolist() == pytest.approx([0.2483, 0.5035, 0.2483], abs=1e-3)
    assert w[0].tolist() == pytest.approx([0.25, 0.50, 0.25], abs=0.01)
    assert out[0].tolist() == pytest.approx([0.4965, 1.2552], abs=1e-3)
    # a single query is the last position: bottom-right causal sees every key
    out_c, w_c = scaled_dot_product_attention(q, k, v, causal=True)
    torch.testing.assert_close(w_c, w)


def test_softmax_example():
    w = masked_softmax(torch.tensor([-0.281, -0.031, -0.281]), None)
    assert w.tolist() == pytest.approx([0.305, 0.391, 0.305], abs=1e-3)


def test_scale_none_is_unscaled():
    q = torch.tensor([[1.0, 1.0]])
    k = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    v = torch.eye(2)
    _, w = scaled_dot_product_attention(q, k, v, causal=False, scale=1.0)
    e = math.exp(1.0)
    assert w[0].tolist() == pytest.approx([e / (e + e * e), e * e / (e + e * e)], abs=1e-6)


# ----------------------------------------------------------------------------- reference loop


def reference_attention(q, k, v, causal, padding_mask, scale):
    """Plain loops over batch, head, query and key: the formula one number at a time."""
    B, H, Tq, D = q.shape
    Tk = k.shape[2]
    out = torch.zeros(B, H, Tq, v.shape[-1], dtype=q.dtype)
    weights = torch.zeros(B, H, Tq, Tk, dtype=q.dtype)
    for b in range(B):
        for h in range(H):
            for i in range(Tq):
                qi_pos = i + Tk - Tq
                if padding_mask is not None and not padding_mask[b, qi_pos]:
                    continue
                visible = [
                    j
                    for j in range(Tk)
                    if (not causal or j <= qi_pos)
                    and (padding_mask is None or padding_mask[b, j])
                ]
                if not visible:
                    continue
                s = torch.stack([(q[b, h, i] * k[b, h, j]).sum() * scale for j in visible])
                a = torch.exp(s - s.max())
                a = a / a.sum()
                for n, j in enumerate(visible):
                    weights[b, h, i, j] = a[n]
                    out[b, h, i] += a[n] * v[b, h, j]
    return out, weights


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("tq", [5, 2])
def test_matches_reference_loop_float64(causal, padded, tq):
    g = torch.Generator().manual_seed(0)
    B, H, Tk, D = 2, 2, 5, 3
    q = torch.randn(B, H, tq, D, generator=g, dtype=torch.float64)
    k = torch.randn(B, H, Tk, D, generator=g, dtype=torch.float64)
    v = torch.randn(B, H, Tk, 4, generator=g, dtype=torch.float64)
    pad = None
    if padded:
        pad = torch.tensor([[True, True, True, False, False], [False, True, True, True, True]])
    out, w = scaled_dot_product_attention(q, k, v, causal=causal, padding_mask=pad, scale=0.7)
    ref_out, ref_w = reference_attention(q, k, v, causal, pad, 0.7)
    torch.testing.assert_close(w, ref_w, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(out, ref_out, rtol=1e-12, atol=1e-12)


def test_causal_mask_is_bottom_right_aligned():
    assert causal_mask(2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert causal_mask(3, 3).tolist() == [
        [True, False, False],
        [True, True, False],
        [True, True, True],
    ]


# ----------------------------------------------------------------------------- masks and rows


def test_rows_sum_to_one_and_future_is_exactly_zero():
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(3, 2, 6, 4, generator=g) for _ in range(3))
    pad = torch.ones(3, 6, dtype=torch.bool)
    pad[0, 4:] = False  # right padding
    pad[1, :2] = False  # left padding
    _, w = scaled_dot_product_attention(q, k, v, padding_mask=pad)
    sums = w.sum(-1)  # (B, H, T)
    expected = pad[:, None, :].expand_as(sums).float()
    torch.testing.assert_close(sums, expected)
    future = ~causal_mask(6, 6)
    assert (w[..., future] == 0).all()
    assert (w[0, :, :, 4:] == 0).all()  # padded keys get exactly zero weight


def test_padded_queries_output_zero_no_nan_forward_and_backward():
    q, k, v = (torch.randn(2, 1, 4, 3, requires_grad=True) for _ in range(3))
    pad = torch.tensor([[False, False, True, True], [True, True, True, False]])
    out, w = scaled_dot_product_attention(q, k, v, padding_mask=pad)
    assert torch.isfinite(out).all() and torch.isfinite(w).all()
    assert (out[0, :, :2] == 0).all() and (out[1, :, 3] == 0).all()
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


def test_all_masked_rows_are_zero_not_nan():
    scores = torch.randn(2, 3, requires_grad=True)
    mask = torch.tensor([[False, False, False], [True, False, True]])
    w = masked_softmax(scores, mask)
    assert w[0].tolist() == [0.0, 0.0, 0.0]
    assert w[1, 1].item() == 0.0 and w[1].sum().item() == pytest.approx(1.0)
    (w * torch.randn(2, 3)).sum().backward()
    assert torch.isfinite(scores.grad).all()
    assert scores.grad[0].tolist() == [0.0, 0.0, 0.0]


def test_masked_fill_is_not_a_finite_constant():
    # a finite fill like -1e4 is overpowered by logits this large; -inf is not
    scores = torch.tensor([[2e4, 1e5]])
    w = masked_softmax(scores, torch.tensor([[True, False]]))
    assert w.tolist() == [[1.0, 0.0]]


# ----------------------------------------------------------------------------- future-token perturbation


@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_future_tokens_do_not_change_the_past(backend):
    torch.manual_seed(0)
    attn = CausalSelfAttention(16, 4, AttnConfig(backend=backend)).eval()
    open_attn = CausalSelfAttention(16, 4, AttnConfig(causal=False, backend=backend)).eval()
    open_attn.load_state_dict(attn.state_dict())
    x = torch.randn(2, 8, 16)
    for t in range(7):
        x2 = x.clone()
        x2[:, t + 1 :] = torch.randn(2, 7 - t, 16)
        y, y2 = attn(x), attn(x2)
        assert torch.equal(y[:, : t + 1], y2[:, : t + 1]), f"position <= {t} saw the future"
        assert not torch.allclose(y[:, t + 1 :], y2[:, t + 1 :])
        # control: without the mask the past changes
        assert not torch.allclose(open_attn(x)[:, : t + 1], open_attn(x2)[:, : t + 1])


def test_future_keys_values_do_not_change_the_past_function():
    g = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 6, 4, generator=g) for _ in range(3))
    out, _ = scaled_dot_product_attention(q, k, v)
    for t in range(5):
        k2, v2 = k.clone(), v.clone()
        k2[..., t + 1 :, :] += 5.0
        v2[..., t + 1 :, :] -= 3.0
        out2, _ = scaled_dot_product_attention(q, k2, v2)
        assert torch.equal(out[..., : t + 1, :], out2[..., : t + 1, :])
        out3, _ = scaled_dot_product_attention(q, k2, v2, causal=False)
        assert not torch.allclose(out3[..., : t + 1, :], out[..., : t + 1, :])


# ----------------------------------------------------------------------------- math vs sdpa


@pytest.mark.parametrize("scale", ["sqrt_dk", "none", "inv_dk", 0.3])
@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("shape", [(2, 7, 32, 4), (3, 5, 24, 2), (1, 1, 8, 8)])
@pytest.mark.parametrize("qk_norm", [False, True])
def test_math_and_sdpa_agree(scale, causal, padded, shape, qk_norm):
    B, T, C, H = shape
    torch.manual_seed(zlib.crc32(repr((scale, causal, padded, shape)).encode()) % 1000)  # same in every process
    options = dict(causal=causal, scale=scale, qk_norm=qk_norm)
    math_attn = CausalSelfAttention(C, H, AttnConfig(backend="math", **options)).eval()
    sdpa_attn = CausalSelfAttention(C, H, AttnConfig(backend="sdpa", **options)).eval()
    if qk_norm:  # non-trivial gains and biases, so the norms matter on both paths
        torch.nn.init.uniform_(math_attn.q_norm.weight, 0.5, 2.0)
        torch.nn.init.uniform_(math_attn.k_norm.weight, 0.5, 2.0)
    sdpa_attn.load_state_dict(math_attn.state_dict())
    x = torch.randn(B, T, C)
    pad = None
    if padded:
        pad = torch.rand(B, T) > 0.3
        pad[:, 0] = False  # left padding: a real first query then has no visible key under causal
    y_math, y_sdpa = math_attn(x, pad), sdpa_attn(x, pad)
    assert torch.isfinite(y_sdpa).all()
    torch.testing.assert_close(y_math, y_sdpa, rtol=1e-5, atol=1e-5)


def test_sdpa_gets_the_explicit_scale_not_its_default():
    torch.manual_seed(0)
    a = CausalSelfAttention(16, 2, AttnConfig(scale="none", backend="sdpa")).eval()
    b = CausalSelfAttention(16, 2, AttnConfig(scale="sqrt_dk", backend="sdpa")).eval()
    b.load_state_dict(a.state_dict())
    x = torch.randn(1, 5, 16) * 3
    assert not torch.allclose(a(x), b(x), atol=1e-4)
    y_math = CausalSelfAttention(16, 2, AttnConfig(scale="none", backend="math")).eval()
    y_math.load_state_dict(a.state_dict())
    torch.testing.assert_close(a(x), y_math(x), rtol=1e-5, atol=1e-5)


def test_sdpa_dropout_off_in_eval():
    torch.manual_seed(0)
    attn = CausalSelfAttention(16, 2, AttnConfig(backend="sdpa"), dropout=0.5).eval()
    x = torch.randn(2, 6, 16)
    assert torch.equal(attn(x), attn(x))
    attn.train()
    assert not torch.equal(attn(x), attn(x))


def test_probe_gives_the_math_paths_weights_logits_and_queries_with_heads_layout():
    torch.manual_seed(0)
    attn = CausalSelfAttention(12, 3, AttnConfig(backend="sdpa")).eval()
    x = torch.randn(2, 5, 12)
    p = attn.dissect(x)
    w, s = p["weights"], p["logits"]
    assert w.shape == s.shape == (2, 3, 5, 5) and p["q"].shape == p["k"].shape == (2, 3, 5, 4)  # (B, H, T, ..)
    torch.testing.assert_close(w.sum(-1), torch.ones(2, 3, 5))
    assert (w.triu(1) == 0).all()  # causal: no weight on later keys
    expected = torch.softmax(s.masked_fill(~causal_mask(5, 5), float("-inf")), -1)  # softmax(logits + mask)
    torch.testing.assert_close(w, expected)
    v = attn.c_attn(x).split(12, dim=2)[2].view(2, 5, 3, 4).transpose(1, 2)  # (B, H, T, D)
    y = attn.c_proj((w @ v).transpose(1, 2).reshape(2, 5, 12))  # the weights reproduce the forward pass
    torch.testing.assert_close(y, attn(x), rtol=1e-5, atol=1e-5)


# ----------------------------------------------------------------------------- gradients


def test_gradcheck_math_path():
    g = torch.Generator().manual_seed(0)
    q, k, v = (
        torch.randn(1, 2, 4, 3, generator=g, dtype=torch.float64, requires_grad=True)
        for _ in range(3)
    )
    pad = torch.tensor([[True, True, True, False]])

    def f(q, k, v):
        return scaled_dot_product_attention(q, k, v, padding_mask=pad)[0]

    assert torch.autograd.gradcheck(f, (q, k, v))


def test_gradients_reach_every_projection():
    attn = CausalSelfAttention(8, 2, AttnConfig(backend="math"))
    attn(torch.randn(2, 4, 8)).pow(2).sum().backward()
    for name, p in attn.named_parameters():
        assert p.grad is not None and p.grad.abs().sum() > 0, name


# ----------------------------------------------------------------------------- additive score


# ----------------------------------------------------------------------------- bad arguments


def test_bad_arguments_raise_clear_errors():
    x3 = torch.randn(2, 4, 8)
    with pytest.raises(ValueError, match="same rank"):
        scaled_dot_product_attention(x3, torch.randn(4, 8), x3)
    with pytest.raises(ValueError, match="feature size D"):
        scaled_dot_product_attention(x3, torch.randn(2, 4, 6), x3)
    with pytest.raises(ValueError, match="same number of positions"):
        scaled_dot_product_attention(x3, x3, torch.randn(2, 5, 8))
    with pytest.raises(ValueError, match=r"padding_mask must be bool of shape \(B, T_k\)"):
        scaled_dot_product_attention(x3, x3, x3, padding_mask=torch.ones(2, 5, dtype=torch.bool))
    with pytest.raises(ValueError, match="must be bool"):
        scaled_dot_product_attention(x3, x3, x3, padding_mask=torch.ones(2, 4))
    with pytest.raises(ValueError, match="'sqrt_k'"):
        CausalSelfAttention(8, 2, AttnConfig(scale="sqrt_k"))
    with pytest.raises(ValueError, match="model.n_embd=10 must be divisible by model.n_head=3"):
        CausalSelfAttention(10, 3)
    with pytest.raises(ValueError, match=r"^model.attn.backend='flash' is not one of sdpa, math\.$"):
        CausalSelfAttention(8, 2, AttnConfig(backend="flash"))
    with pytest.raises(ValueError, match=r"expected input \(B, T, 8\)"):
        CausalSelfAttention(8, 2)(torch.randn(2, 4, 6))
    with pytest.raises(ValueError, match="padding_mask must be bool of shape"):
        CausalSelfAttention(8, 2)(x3, padding_mask=torch.ones(2, 3, dtype=torch.bool))
    with pytest.raises(ValueError, match="does not broadcast"):
        masked_softmax(torch.randn(2, 3), torch.ones(4, dtype=torch.bool))


def test_scale_factor_values():
    assert scale_factor("sqrt_dk", 16) == 0.25
    assert scale_factor("none", 16) == 1.0
    assert scale_factor("inv_dk", 16) == 1 / 16
    assert scale_factor(0.5, 16) == 0.5
    assert scale_factor("0.5", 16) == 0.5
    with pytest.raises(ValueError):
        scale_factor(True, 16)
    for bad in (-1, 0, 0.0, "-1", float("nan"), float("inf")):
        with pytest.raises(ValueError, match=r"^model.attn.scale=.* must be a positive number \(or sqrt_dk, none, "
                                             r"inv_dk\)\.$"):
            scale_factor(bad, 16)


@pytest.mark.parametrize("scale", ["sqrt_dk", "none", "inv_dk", 1e-3, 0.3, 7.0, "0.5"])
def test_every_scale_the_config_accepts_gives_the_same_output_on_both_backends(scale):
    """A negative scale gave NaN on the fused kernel and a trained model on the math path: every accepted value must
    give one function."""
    torch.manual_seed(0)
    math_attn = CausalSelfAttention(16, 2, AttnConfig(scale=scale, backend="math")).eval()
    sdpa_attn = CausalSelfAttention(16, 2, AttnConfig(scale=scale, backend="sdpa")).eval()
    sdpa_attn.load_state_dict(math_attn.state_dict())
    x = torch.randn(2, 8, 16)
    with torch.no_grad():
        y_math, y_sdpa = math_attn(x), sdpa_attn(x)
    assert torch.isfinite(y_sdpa).all()
    torch.testing.assert_close(y_math, y_sdpa, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------------------- qk-norm


def test_qk_norm_normalises_each_head_and_bounds_the_logits():
    torch.manual_seed(0)
    attn = CausalSelfAttention(32, 4, AttnConfig(scale="none", qk_norm=True), bias=False).eval()
    attn.c_attn.weight.data.mul_(1000)  # huge projections: unnormalised logits would be ~1e6
    x = torch.randn(2, 9, 32)
    q, k, _ = attn._heads(x)  # (B, H, T, D)
    torch.testing.assert_close(q.mean(-1), torch.zeros(2, 4, 9), atol=1e-5, rtol=0)
    torch.testing.assert_close(q.pow(2).mean(-1), torch.ones(2, 4, 9), atol=1e-3, rtol=0)  # unit RMS per head
    assert k.pow(2).mean(-1).allclose(torch.ones(2, 4, 9), atol=1e-3)
    D = 8
    assert attn.dissect(x)["logits"].abs().max().item() <= D + 1e-4  # Cauchy-Schwarz: |q.k| <= |q||k| = D
    plain = CausalSelfAttention(32, 4, AttnConfig(scale="none"), bias=False).eval()
    plain.c_attn.weight.data.copy_(attn.c_attn.weight.data)
    assert plain.dissect(x)["logits"].abs().max().item() > 1e4


def test_qk_norm_has_its_own_parameters_and_changes_the_output():
    torch.manual_seed(0)
    a = CausalSelfAttention(16, 2, AttnConfig(qk_norm=True))
    names = {n for n, _ in a.named_parameters()}
    assert {"q_norm.weight", "k_norm.weight", "q_norm.bias", "k_norm.bias"} <= names
    b = CausalSelfAttention(16, 2)
    b.load_state_dict({k: v for k, v in a.state_dict().items() if "norm" not in k})
    x = torch.randn(1, 5, 16)
    assert not torch.allclose(a(x), b(x))
    assert "qk_norm=True" in repr(a)


def test_masked_keys_get_zero_weight_even_when_the_visible_scores_are_far_below_any_finite_fill():
    # visible scores of -1e6: a fill of -1e4 (or any finite constant above -1e6) would hand the masked key
    # almost all the weight; with -inf it gets exactly 0, whatever the visible scores are
    scores = torch.tensor([[-1e6, -1e6 - 1.0, 0.0]])
    w = masked_softmax(scores, torch.tensor([[True, True, False]]))
    assert w[0, 2].item() == 0.0
    assert w[0].tolist() == pytest.approx([1 / (1 + math.exp(-1.0)), math.exp(-1.0) / (1 + math.exp(-1.0)), 0.0])
    k = torch.tensor([[[0.0, -1e6], [0.0, -1e6], [0.0, 0.0]]])  # the same through the whole function: q.k = -1e6
    _, w = scaled_dot_product_attention(torch.tensor([[[0.0, 1.0]]]), k, torch.eye(3)[None], causal=False,
                                        padding_mask=torch.tensor([[True, True, False]]), scale=1.0)
    assert w[0, 0, 2].item() == 0.0


# ----------------------------------------------------------------------------- closing what mutation testing found


@pytest.mark.parametrize("scale", ["none", 0.3])
def test_probe_uses_the_modules_scale_and_padding(scale):
    torch.manual_seed(0)
    attn = CausalSelfAttention(8, 2, AttnConfig(scale=scale, backend="math")).eval()
    x = torch.randn(2, 4, 8)
    pad = torch.tensor([[True, True, True, False], [True, True, True, True]])
    p = attn.dissect(x, padding_mask=pad)
    factor = 1.0 if scale == "none" else 0.3
    torch.testing.assert_close(p["logits"], (p["q"] @ p["k"].transpose(-2, -1)) * factor)
    assert (p["weights"][0, :, :, 3] == 0).all()  # the padded key gets no weight
    _, w = scaled_dot_product_attention(p["q"], p["k"], p["q"], padding_mask=pad, scale=factor)
    torch.testing.assert_close(p["weights"], w)


@pytest.mark.parametrize("q, k, v, message", [
    (torch.zeros(2, 3, 5, 4), torch.zeros(2, 3, 6, 8), torch.zeros(2, 3, 6, 4),
     "q and k must share the feature size D, got 4 and 8."),
    (torch.zeros(2, 3, 5, 4), torch.zeros(2, 3, 6, 4), torch.zeros(2, 3, 7, 4),
     "k and v must have the same number of positions, got 6 and 7."),
    (torch.zeros(2, 5, 4), torch.zeros(2, 6, 4), torch.zeros(2, 7, 4),  # 3-D: axis -2 is not axis 2 here
     "k and v must have the same number of positions, got 6 and 7."),
])
def test_shape_errors_name_the_right_sizes(q, k, v, message):
    with pytest.raises(ValueError) as err:
        scaled_dot_product_attention(q, k, v)
    assert str(err.value) == message


def test_attention_from_scores_errors_and_causal_default():
    scores = torch.zeros(2, 3, 4)
    with pytest.raises(ValueError) as err:
        attention_from_scores(scores, torch.zeros(2, 5, 2))
    assert str(err.value) == "v has 5 positions but the scores have 4 keys."
    with pytest.raises(ValueError) as err:
        attention_from_scores(torch.zeros(3, 2, 4), torch.zeros(3, 4, 2), padding_mask=torch.ones(2, 4).bool())
    assert str(err.value) == ("padding_mask must be bool of shape (B, T_k) = (3, 4) for scores (3, 2, 4), "
                              "got torch.bool (2, 4).")
    with pytest.raises(ValueError) as err:
        masked_softmax(torch.zeros(2, 3), torch.tensor([1, 2]))
    assert str(err.value) == ("mask must be bool (True = keep), got torch.int64; for valid lengths use "
                              "tinygpt.model.textbook.valid_length_softmax.")
    _, w = attention_from_scores(torch.zeros(1, 2, 2), torch.zeros(1, 2, 1))  # default: causal
    assert w[0].tolist() == [[1.0, 0.0], [0.5, 0.5]]


def test_a_row_without_keys_is_zero_and_has_zero_gradient_next_to_normal_rows():
    scores = torch.randn(2, 3, requires_grad=True)
    w = masked_softmax(scores, torch.tensor([[True, True, False], [False, False, False]]))
    assert w[1].tolist() == [0.0, 0.0, 0.0] and w[0].sum().item() == pytest.approx(1.0)
    (w * torch.arange(3.0)).sum().backward()
    assert torch.isfinite(scores.grad).all() and scores.grad[1].tolist() == [0.0, 0.0, 0.0]


@pytest.mark.parametrize("backend", ["sdpa", "math"])
def test_queries_before_the_first_key_get_zeros_on_both_backends(backend):
    """Bottom-right causal with T_q > T_k: the first T_q - T_k queries see no key."""
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 2, 5, 4), torch.randn(1, 2, 3, 4), torch.randn(1, 2, 3, 4)
    attn = CausalSelfAttention(8, 2, AttnConfig(backend=backend)).eval()
    y, _ = attn.attend(q, k, v)
    assert torch.isfinite(y).all() and (y[:, :, :2] == 0).all() and (y[:, :, 2:] != 0).any()


def test_the_math_backend_never_calls_the_fused_kernel(monkeypatch):
    import torch.nn.functional as F

    attn = CausalSelfAttention(8, 2, AttnConfig(backend="math")).eval()
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: pytest.fail("fused kernel called"))
    attn(torch.randn(2, 4, 8))
    assert "backend='math'" in repr(attn)


def test_module_description_names_every_setting():
    attn = CausalSelfAttention(12, 3, AttnConfig(causal=False, scale="inv_dk", backend="math", qk_norm=True))
    assert attn.extra_repr() == ("n_head=3, head_dim=4, causal=False, scale='inv_dk' (0.25), backend='math', "
                                 "qk_norm=True")


@pytest.mark.parametrize("bias", [True, False])
def test_bias_setting_reaches_every_projection_and_norm(bias):
    attn = CausalSelfAttention(8, 2, AttnConfig(qk_norm=True), bias=bias)
    for layer in (attn.c_attn, attn.c_proj, attn.q_norm, attn.k_norm):
        assert (layer.bias is not None) is bias


@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_dropout_only_in_training_on_both_backends_and_both_sdpa_paths(backend):
    torch.manual_seed(0)
    attn = CausalSelfAttention(16, 2, AttnConfig(backend=backend), dropout=0.5)
    plain = CausalSelfAttention(16, 2, AttnConfig(backend=backend), dropout=0.0)
    plain.load_state_dict(attn.state_dict())
    attn.resid_dropout.p = 0.0  # only the attention weights' dropout is under test
    x = torch.randn(2, 6, 16)
    pad = torch.tensor([[True] * 6, [True] * 4 + [False] * 2])
    for mask in (None, pad):  # sdpa: the kernel's own triangle, and the explicit mask
        attn.eval()
        torch.testing.assert_close(attn(x, padding_mask=mask), plain.eval()(x, padding_mask=mask))  # eval: none
        attn.train()
        assert not torch.equal(attn(x, padding_mask=mask), attn(x, padding_mask=mask))  # training: dropout


def test_with_a_kv_cache_the_padding_mask_covers_every_key():
    """The mask is over the cached keys and the new ones, (B, T_cached + T); a mask of the new tokens only is
    refused in one sentence naming the expected shape."""
    from tinygpt.model.kv_cache import KVCache

    torch.manual_seed(0)
    attn = CausalSelfAttention(8, 2, bias=False).eval()
    x = torch.randn(1, 3, 8)
    pad = torch.tensor([[False, True, True]])
    with torch.no_grad():
        full = attn(x, padding_mask=pad)  # (1, 3, 8)
        cache = KVCache(1, 1, 2, 4, 4)
        first = attn(x[:, :2], padding_mask=pad[:, :2], kv_cache=cache.layer(0))
        cache.advance(2)
        with pytest.raises(ValueError) as err:
            attn(x[:, 2:], padding_mask=pad[:, 2:], kv_cache=cache.layer(0))
        assert str(err.value) == "padding_mask must be bool of shape (B, T_k) = (1, 3), got torch.bool (1, 1)."
        last = attn(x[:, 2:], padding_mask=pad, kv_cache=cache.layer(0))
    torch.testing.assert_close(torch.cat([first, last], dim=1), full)
    assert torch.equal(full[0, 0], torch.zeros(8))  # the pad as a query sees nothing: output 0


def test_rank_error_and_the_default_scale_uses_the_feature_size():
    with pytest.raises(ValueError) as err:
        scaled_dot_product_attention(torch.zeros(3, 4), torch.zeros(2, 3, 4), torch.zeros(2, 3, 4))
    assert str(err.value) == ("q, k and v must have the same rank, at least 2 (..., T, D); got shapes (3, 4), "
                              "(2, 3, 4), (2, 3, 4).")
    torch.manual_seed(0)
    q, k, v = torch.randn(1, 3, 4, 5), torch.randn(1, 3, 4, 5), torch.randn(1, 3, 4, 5)  # H = 3, D = 5
    _, w = scaled_dot_product_attention(q, k, v, causal=False)
    torch.testing.assert_close(w, torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(5), -1))


def test_attention_from_scores_takes_the_key_and_the_query_masks_apart():
    """Cross-attention: a key mask hides keys only; self-attention's behaviour (padded queries output 0) needs
    both, as scaled_dot_product_attention passes them."""
    scores, v = torch.zeros(1, 2, 3), torch.tensor([[[1.0], [3.0], [100.0]]])  # (B, T_q, T_k), (B, T_k, 1)
    keys = torch.tensor([[True, True, False]])
    out, _ = attention_from_scores(scores, v, causal=False, padding_mask=keys)
    assert out[0, :, 0].tolist() == [2.0, 2.0]  # both queries real: the mean of the two real keys
    out, _ = attention_from_scores(scores, v, causal=False, padding_mask=keys, query_mask=torch.tensor([[True, False]]))
    assert out[0, :, 0].tolist() == [2.0, 0.0]
    with pytest.raises(ValueError) as err:
        attention_from_scores(scores, v, query_mask=torch.ones(1, 3, dtype=torch.bool))
    assert str(err.value) == ("query_mask must be bool of shape (B, T_q) = (1, 2) for scores (1, 2, 3), "
                              "got torch.bool (1, 3).")


def test_every_padding_mask_check_says_the_same_sentence():
    """The functional API, the attention module, the GPT and generate check a padding mask with one rule
    (check_padding_mask): bool of shape (B, T), and a float mask is named with what was expected."""
    from tinygpt.sampling.generate import generate
    from tinygpt.model.gpt import GPT, GPTConfig

    x3, bad = torch.randn(2, 4, 8), torch.ones(2, 4)
    gpt = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=2, n_embd=8)).eval()
    idx = torch.zeros(2, 4, dtype=torch.long)
    cases = {
        "padding_mask must be bool of shape (B, T_k) = (2, 4) for scores (2, 4, 4), got torch.float32 (2, 4).":
            lambda: scaled_dot_product_attention(x3, x3, x3, padding_mask=bad),
        "padding_mask must be bool of shape (B, T_k) = (2, 4), got torch.float32 (2, 4).":
            lambda: CausalSelfAttention(8, 2)(x3, padding_mask=bad),
        "padding_mask must be bool of shape (B, T) = (2, 4), got torch.float32 (2, 4).":
            lambda: gpt(idx, padding_mask=bad),
    }
    for message, call in cases.items():
        with pytest.raises(ValueError) as err:
            call()
        assert str(err.value) == message
    with pytest.raises(ValueError) as err:
        generate(gpt, idx, 1, padding_mask=bad)
    assert str(err.value) == "padding_mask must be bool of shape (B, T) = (2, 4), got torch.float32 (2, 4)."


def test_scores_without_a_batch_dim_take_no_padding_mask():
    with pytest.raises(ValueError) as err:
        attention_from_scores(torch.zeros(2, 2), torch.zeros(2, 1), padding_mask=torch.ones(2, 2, dtype=torch.bool))
    assert str(err.value) == "padding_mask needs scores with a batch dim (B, ..., T_q, T_k), got scores (2, 2)."


# ----------------------------------------------------------------------------- where the scale sits


def test_the_scale_on_q_and_k_before_the_product_is_the_same_function_in_float32_and_float64():
    """scale_at="qk" multiplies q and k by sqrt(scale) each (torch's math attention), "scores" multiplies q k^T by
    it: the same function, to float64's precision and within float32's rounding."""
    g = torch.Generator().manual_seed(0)
    for dtype, tol in ((torch.float64, 1e-12), (torch.float32, 2e-6)):
        q, k, v = (torch.randn(2, 3, 9, 16, generator=g, dtype=dtype) for _ in range(3))
        for scale in (0.25, 1.0, 1 / 256):
            after, w_after = scaled_dot_product_attention(q, k, v, scale=scale, scale_at="scores")
            before, w_before = scaled_dot_product_attention(q, k, v, scale=scale, scale_at="qk")
            assert torch.allclose(after, before, atol=tol, rtol=tol) and torch.allclose(w_after, w_before, atol=tol)
    with pytest.raises(ValueError, match="scale_at='q' is not one of scores, qk"):
        scaled_dot_product_attention(q, k, v, scale_at="q")


def test_in_float16_only_the_scale_after_the_product_overflows():
    """q.k = 16 * 64 * 64 = 65536 > 65504, float16's largest value, while the scaled score is 4096: the product
    computed before the scale is inf (and the weights NaN), the scale on q and k first keeps it finite."""
    q = torch.full((1, 1, 2, 16), 64.0, dtype=torch.float16)
    k = torch.full((1, 1, 2, 16), 64.0, dtype=torch.float16)
    v = torch.ones(1, 1, 2, 16, dtype=torch.float16)
    _, after = scaled_dot_product_attention(q, k, v, scale=1 / 16, scale_at="scores")
    out, before = scaled_dot_product_attention(q, k, v, scale=1 / 16, scale_at="qk")
    assert not torch.isfinite(after).all()
    assert torch.isfinite(before).all() and torch.equal(before[0, 0, 1], torch.tensor([0.5, 0.5], dtype=torch.float16))
    assert torch.equal(out, v)


def test_scale_at_belongs_to_the_math_backend_and_reaches_the_module():
    with pytest.raises(ValueError, match=r"^model.attn.scale_at='qk' places the scale in the explicit formula, "
                                         r"backend=math; the fused kernel \(backend=sdpa\) places it itself.$"):
        AttnConfig(scale_at="qk")
    with pytest.raises(ValueError, match=r"^model.attn.scale_at='q_and_k' is not one of scores, qk.$"):
        AttnConfig(backend="math", scale_at="q_and_k")
    torch.manual_seed(0)
    a = CausalSelfAttention(32, 2, AttnConfig(backend="math", scale="none"))
    b = CausalSelfAttention(32, 2, AttnConfig(backend="math", scale="none", scale_at="qk"))
    b.load_state_dict(a.state_dict())
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    a, b = a.double(), b.double()
    assert torch.allclose(a(x), b(x), atol=1e-12)
    assert torch.allclose(a.dissect(x)["logits"], b.dissect(x)["logits"], atol=1e-12)
    assert "scale_at='qk'" in repr(b) and "scale_at" not in repr(a)

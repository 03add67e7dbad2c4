"""Property-based tests of the attention math (Hypothesis): random shapes, masks, paddings and scales."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tinygpt.model.attention import CausalSelfAttention, masked_softmax, scaled_dot_product_attention, visibility_mask
from tinygpt.model.config import AttnConfig

SCALES = st.sampled_from(["sqrt_dk", "none", "inv_dk", 0.37])


@st.composite
def attention_case(draw):
    B, H = draw(st.integers(1, 3)), draw(st.integers(1, 3))
    t_k = draw(st.integers(1, 8))
    t_q = draw(st.integers(1, t_k))
    D = draw(st.integers(1, 6))
    causal = draw(st.booleans())
    padded = draw(st.booleans())
    seed = draw(st.integers(0, 2**16))
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(B, H, t, D, generator=g, dtype=torch.float64) for t in (t_q, t_k, t_k))
    pad = torch.rand(B, t_k, generator=g) > 0.3 if padded else None
    return q, k, v, causal, pad


@settings(max_examples=60, deadline=None)
@given(attention_case(), st.floats(0.05, 3.0))
def test_rows_sum_to_one_on_visible_keys_and_zero_elsewhere(case, scale):
    q, k, v, causal, pad = case
    out, w = scaled_dot_product_attention(q, k, v, causal=causal, padding_mask=pad, scale=scale)
    mask = visibility_mask(q.shape[-2], k.shape[-2], causal=causal, padding_mask=pad, extra_dims=1)
    mask = torch.ones_like(w, dtype=torch.bool) if mask is None else torch.broadcast_to(mask, w.shape)
    assert torch.all(w[~mask] == 0)  # exactly zero on every invisible key
    rows = mask.any(-1)  # (B, H, T_q): rows with at least one visible key
    torch.testing.assert_close(w.sum(-1)[rows], torch.ones_like(w.sum(-1)[rows]))
    assert torch.all(w.sum(-1)[~rows] == 0) and torch.all(out[~rows] == 0)  # no key: zero weights, zero output
    assert torch.isfinite(out).all() and torch.isfinite(w).all()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(2, 9), st.sampled_from([(8, 2), (12, 3), (6, 1)]), SCALES, st.booleans(),
       st.integers(0, 2**16))
def test_module_math_equals_sdpa_and_the_past_ignores_the_future(B, T, shape, scale, qk_norm, seed):
    C, H = shape
    torch.manual_seed(seed)
    math_attn = CausalSelfAttention(C, H, AttnConfig(scale=scale, backend="math", qk_norm=qk_norm)).eval()
    sdpa_attn = CausalSelfAttention(C, H, AttnConfig(scale=scale, backend="sdpa", qk_norm=qk_norm)).eval()
    sdpa_attn.load_state_dict(math_attn.state_dict())
    x = torch.randn(B, T, C, requires_grad=True)
    y = math_attn(x)
    torch.testing.assert_close(y, sdpa_attn(x), rtol=1e-5, atol=1e-5)
    t = int(torch.randint(0, T - 1, (1,)))
    x2 = x.detach().clone()
    x2[:, t + 1 :] = torch.randn(B, T - t - 1, C)  # replace everything after t
    for attn in (math_attn, sdpa_attn):
        assert torch.equal(attn(x2)[:, : t + 1], attn(x.detach())[:, : t + 1])  # bit-identical past
    y.square().sum().backward()
    assert torch.isfinite(x.grad).all()


@settings(max_examples=40, deadline=None)
@given(attention_case())
def test_no_nan_in_forward_or_backward_with_padding(case):
    q, k, v, causal, pad = case
    q, k, v = (t.clone().requires_grad_(True) for t in (q, k, v))
    out, _ = scaled_dot_product_attention(q, k, v, causal=causal, padding_mask=pad)
    out.sum().backward()
    for t in (q, k, v):
        assert torch.isfinite(t.grad).all()


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 4), st.integers(1, 7), st.integers(0, 2**16))
def test_masked_softmax_matches_softmax_over_the_kept_entries(rows, cols, seed):
    g = torch.Generator().manual_seed(seed)
    scores = torch.randn(rows, cols, generator=g, dtype=torch.float64) * 10
    keep = torch.rand(rows, cols, generator=g) > 0.4
    w = masked_softmax(scores, keep)
    for r in range(rows):
        if keep[r].any():
            expected = torch.softmax(scores[r][keep[r]], -1)
            torch.testing.assert_close(w[r][keep[r]], expected)
        else:
            assert torch.all(w[r] == 0)

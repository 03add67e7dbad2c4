import math

import pytest
import torch

from helpers import future_jacobian, past_moves_when_future_changes
from tinygpt.model.gpt import GPT, GPTConfig


def tiny(**kw):
    args = dict(vocab_size=31, block_size=12, n_layer=2, n_head=2, n_embd=8)
    args.update(kw)
    return GPTConfig(**args)


def test_shapes_and_loss():
    torch.manual_seed(0)
    m = GPT(tiny())
    idx = torch.randint(0, 31, (3, 10))
    logits, loss = m(idx)
    assert logits.shape == (3, 10, 31) and loss is None
    logits, loss = m(idx, idx)
    assert loss.ndim == 0
    probes = m.dissect_attention(idx)
    assert len(probes) == 2 and probes[0]["weights"].shape == (3, 2, 10, 10)


def test_attention_probe_sees_each_layers_actual_input():
    """Layer 1's probe equals its attention's probe on ln_1(output of block 0): the probe follows the
    residual stream, not the embeddings."""
    torch.manual_seed(0)
    m = GPT(tiny()).eval()
    idx = torch.randint(0, 31, (2, 7))
    with torch.no_grad():
        x0 = m.wte(idx) + m.wpe(torch.arange(7))
        expected = m.blocks[1].attn.dissect(m.blocks[1].ln_1(m.blocks[0](x0)))["weights"]
        got = m.dissect_attention(idx)[1]["weights"]
    torch.testing.assert_close(got, expected)


def test_head_is_tied_to_embedding():
    m = GPT(tiny())
    assert m.lm_head.weight is m.wte.weight
    n_unique = sum(p.numel() for p in {id(p): p for p in m.parameters()}.values())
    assert m.num_params(non_embedding=False) == n_unique
    assert len(list(m.parameters())) == len({id(p) for p in m.parameters()})


def test_initial_loss_near_ln_vocab():
    torch.manual_seed(0)
    cfg = tiny(vocab_size=65, n_embd=32, n_head=4)
    m = GPT(cfg)
    idx = torch.randint(0, 65, (16, 12))
    _, loss = m(idx, torch.randint(0, 65, (16, 12)))
    assert abs(loss.item() - math.log(65)) < 0.05


def test_residual_projections_use_scaled_init():
    torch.manual_seed(0)
    m = GPT(tiny(n_embd=64, n_head=4, n_layer=8))
    std = m.blocks[0].attn.c_proj.weight.std().item()
    assert std == pytest.approx(0.02 / math.sqrt(16), rel=0.1)
    assert m.blocks[0].mlp.c_fc.weight.std().item() == pytest.approx(0.02, rel=0.1)


@pytest.mark.parametrize("backend", ["sdpa", "math"])
def test_model_does_not_see_the_future(backend):
    torch.manual_seed(0)
    m = GPT(tiny(attn={"backend": backend})).eval()
    idx = torch.randint(0, 31, (2, 12))
    for t in (0, 5, 10):
        assert past_moves_when_future_changes(m, idx, t) == 0  # bit-identical
    leaky = GPT(tiny(attn={"causal": False, "backend": backend})).eval()
    leaky.load_state_dict(m.state_dict())
    assert past_moves_when_future_changes(leaky, idx, 5) > 1e-6


def test_config_errors_are_clear():
    with pytest.raises(ValueError, match="model.n_embd=10 must be divisible by model.n_head=3"):
        tiny(n_embd=10, n_head=3)
    with pytest.raises(ValueError, match="model.n_layer=0"):
        tiny(n_layer=0)
    with pytest.raises(ValueError, match="'sqrt'"):
        tiny(attn={"scale": "sqrt"})
    with pytest.raises(ValueError, match="model.attn.backend='flash'"):
        tiny(attn={"backend": "flash"})
    with pytest.raises(ValueError, match="exceeds model.block_size=12"):
        GPT(tiny())(torch.zeros(1, 13, dtype=torch.long))


@pytest.mark.parametrize("backend", ["sdpa", "math"])
def test_full_model_jacobian_is_zero_on_the_future_only_with_the_mask(backend):
    """d logits[t] / d embedding[j] is exactly 0 for every j > t under the mask, through all layers;
    without the mask the future reaches the past. One backward pass per t of a random projection of the
    logits r . logits[t]: its gradient is J_t^T r, exactly 0 where the Jacobian block is, non-zero otherwise."""
    T = 7
    future = torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T): j > t
    for causal in (True, False):
        torch.manual_seed(0)
        m = GPT(tiny(block_size=T, attn={"causal": causal, "backend": backend})).double().eval()
        size = future_jacobian(m, torch.randint(0, 31, (1, T)))  # (T, T)
        if causal:
            assert torch.all(size[future] == 0), "logits depend on a later token despite the mask"
        else:
            assert torch.all(size[future] > 1e-8), "without the mask every later token reaches every position"
        assert torch.all(size[~future] > 1e-8)  # the past and the token itself always matter


def test_unit_qk_init_gives_unit_variance_queries_and_keys():
    """qk_init=unit: q and k components have variance ~1 at init (Vaswani's premise); gpt2 init: ~0.02^2 * C."""
    torch.manual_seed(0)
    C = 256
    for qk_init, expected in (("unit", 1.0), ("gpt2", 0.02**2 * C)):
        m = GPT(tiny(n_embd=C, n_head=4, block_size=32, attn={"qk_init": qk_init}))
        attn = m.blocks[0].attn
        h = m.blocks[0].ln_1(torch.randn(16, 32, C))  # LN output: unit-variance components
        with torch.no_grad():
            q, k, v = attn._heads(h)  # (B, H, T, D)
        assert q.var().item() == pytest.approx(expected, rel=0.1)
        assert k.var().item() == pytest.approx(expected, rel=0.1)
        assert v.var().item() == pytest.approx(0.02**2 * C, rel=0.1)  # values keep the GPT-2 init


def test_activation_and_ln_eps_options():
    """gelu_tanh is GPT-2's tanh GELU, ln_eps every block's and the final LayerNorm's eps; the defaults are the exact
    GELU and 1e-5, and the options draw the same initial weights (no other random numbers)."""
    torch.manual_seed(0)
    default = GPT(tiny())
    torch.manual_seed(0)
    gpt2_like = GPT(tiny(activation="gelu_tanh", ln_eps=1e-6))
    assert default.blocks[0].mlp.gelu.approximate == "none" and default.ln_f.eps == 1e-5
    assert gpt2_like.blocks[1].mlp.gelu.approximate == "tanh"
    assert {m.eps for m in gpt2_like.modules() if isinstance(m, torch.nn.LayerNorm)} == {1e-6}
    assert all(torch.equal(a, b) for a, b in zip(default.state_dict().values(), gpt2_like.state_dict().values(),
                                                 strict=True))


def test_bad_activation_and_ln_eps_are_one_sentence():
    with pytest.raises(ValueError, match=r"^model.activation='relu' is not one of gelu, gelu_tanh\.$"):
        tiny(activation="relu")
    with pytest.raises(ValueError, match=r"^model.ln_eps=-1 must be a positive number \(the LayerNorms' eps, "):
        tiny(ln_eps=-1)


def test_bad_qk_init_is_one_sentence():
    with pytest.raises(ValueError, match="model.attn.qk_init='xavier' is not one of gpt2, unit"):
        tiny(attn={"qk_init": "xavier"})


def test_block_wiring_is_two_residual_branches():
    """x + attn(ln_1(x)), then + mlp(ln_2(.)): each branch checked with the other one switched off."""
    from tinygpt.model.gpt import Block

    torch.manual_seed(0)
    cfg = tiny(n_embd=16, n_head=2)
    x = torch.randn(2, 5, 16)
    b = Block(cfg).eval()
    with torch.no_grad():
        torch.nn.init.normal_(b.ln_1.weight, 1.0, 0.3)  # non-trivial gains: a swapped LayerNorm shows
        torch.nn.init.normal_(b.ln_2.weight, 1.0, 0.3)
        b.mlp.c_proj.weight.zero_()  # MLP off: the block is x + attn(ln_1(x))
        torch.testing.assert_close(b(x), x + b.attn(b.ln_1(x)))
        torch.nn.init.normal_(b.mlp.c_proj.weight, 0.0, 0.2)
        b.attn.c_proj.weight.zero_()  # attention off: the block is x + mlp(ln_2(x))
        torch.testing.assert_close(b(x), x + b.mlp(b.ln_2(x)))
        torch.nn.init.normal_(b.attn.c_proj.weight, 0.0, 0.2)
        h = x + b.attn(b.ln_1(x))
        torch.testing.assert_close(b(x), h + b.mlp(b.ln_2(h)))  # both on: the second branch reads the first


def test_final_layernorm_is_applied_before_the_head():
    torch.manual_seed(0)
    m = GPT(tiny()).eval()
    idx = torch.randint(0, 31, (2, 7))
    with torch.no_grad():
        torch.nn.init.normal_(m.ln_f.weight, 1.0, 0.5)
        h = m.wte(idx) + m.wpe(torch.arange(7))
        for blk in m.blocks:
            h = blk(h)
        torch.testing.assert_close(m(idx)[0], m.lm_head(m.ln_f(h)))


def test_parameter_count_and_flops_per_token_by_hand():
    """n_layer=1, C=8, V=10, T=4, no bias: wte 80 (tied with the head), wpe 32, per block LN 8 + 8,
    attention 8*24 + 8*8, MLP 8*32 + 32*8, final LN 8."""
    m = GPT(GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=2, n_embd=8, bias=False))
    block = 8 + 8 + 8 * 24 + 8 * 8 + 8 * 32 + 32 * 8
    assert m.num_params(non_embedding=False) == 80 + 32 + block + 8
    assert m.num_params() == 80 + block + 8  # without the position table
    assert m.flops_per_token() == 6 * (80 + block + 8) + 12 * 1 * 8 * 4


def test_config_to_dict_round_trips_without_derived_fields():
    cfg = GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=2, n_embd=8, attn={"causal": False})
    d = cfg.to_dict()
    assert "head_dim" not in d and d["attn"]["causal"] is False and d["n_embd"] == 8
    assert GPTConfig(**d) == cfg


def test_flops_per_token_counts_attention_per_layer():
    m = GPT(GPTConfig(vocab_size=10, block_size=4, n_layer=3, n_head=2, n_embd=8, bias=False))
    assert m.flops_per_token() == 6 * m.num_params() + 12 * 3 * 8 * 4


def test_a_sequence_longer_than_the_context_is_one_sentence():
    m = GPT(GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=2, n_embd=8))
    with pytest.raises(ValueError) as err:
        m(torch.zeros(1, 5, dtype=torch.long))
    assert str(err.value) == "sequence length 5 exceeds model.block_size=4."


def test_block_settings_reach_the_attention_and_bias_reaches_every_layer():
    cfg = GPTConfig(vocab_size=10, block_size=4, n_layer=1, n_head=2, n_embd=8, dropout=0.3, bias=True,
                    attn={"scale": "none", "backend": "math", "qk_norm": True, "causal": False})
    m = GPT(cfg)
    a = m.blocks[0].attn
    assert a.config is cfg.attn and a.scale_factor == 1.0 and a.dropout == 0.3 and a.q_norm is not None
    assert (a.config.backend, a.config.causal) == ("math", False)
    for layer in (m.blocks[0].ln_1, m.blocks[0].ln_2, m.ln_f, m.blocks[0].mlp.c_fc, m.blocks[0].mlp.c_proj,
                  a.c_attn, a.c_proj):
        assert layer.bias is not None
    assert m.lm_head.bias is None  # tied to the embedding: never a bias


def test_initial_weights_are_centred_with_gpt2_scales():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=300, block_size=64, n_layer=4, n_head=4, n_embd=128))
    proj = torch.cat([w.flatten() for b in m.blocks for w in (b.attn.c_proj.weight, b.mlp.c_proj.weight)])
    assert abs(proj.mean().item()) < 1e-3 and proj.std().item() == pytest.approx(0.02 / math.sqrt(8), rel=0.05)
    for w in (m.wte.weight, m.wpe.weight, m.blocks[0].attn.c_attn.weight, m.blocks[0].mlp.c_fc.weight):
        assert abs(w.mean().item()) < 2e-3 and w.std().item() == pytest.approx(0.02, rel=0.05)


def test_config_checks_by_exact_sentence_and_an_integer_head_size():
    with pytest.raises(ValueError) as err:
        GPTConfig(vocab_size=10, dropout=1.0)
    assert str(err.value) == "model.dropout=1.0 must be in [0, 1)."
    with pytest.raises(ValueError) as err:
        GPTConfig(vocab_size=10, attn={"backend": "flash"})
    assert str(err.value) == "model.attn.backend='flash' is not one of sdpa, math."
    cfg = GPTConfig(vocab_size=10, n_embd=24, n_head=3)
    assert cfg.head_dim == 8 and isinstance(cfg.head_dim, int)

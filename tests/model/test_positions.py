"""model.position, proved in float64: RoPE against transformers' own rotary helpers, ALiBi against the paper's slopes
and bias, each computed apart from our code; both depend on the offset i - j alone; with neither mask nor positions
the model is permutation-equivariant; each row of a padded batch is the row alone; the KV cache decodes greedily as
recomputing does, within block_size and past it (the window, or every token with model.extrapolate). Every path
agreeing with the formula for every position is tests/model/test_attention_paths.py's."""

import math

import pytest
import torch
from transformers import LlamaConfig
from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding, apply_rotary_pos_emb, rotate_half

from tinygpt.model.attention import CausalSelfAttention
from tinygpt.model.config import POSITIONS, AttnConfig
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.model.positions import alibi_bias, alibi_slopes, rotate
from tinygpt.sampling.generate import generate, pad_prompts

VOCAB = 13


def gpt(position: str, *, block_size: int = 8, causal: bool = True, backend: str = "sdpa", extrapolate: bool = False,
        seed: int = 0, n_head: int = 2) -> GPT:
    """A 2-layer float64 GPT in eval mode, every weight N(0, 0.5^2): positions change its outputs visibly."""
    torch.manual_seed(seed)
    cfg = GPTConfig(vocab_size=VOCAB, block_size=block_size, n_layer=2, n_head=n_head, n_embd=8, position=position,
                    extrapolate=extrapolate, attn=AttnConfig(causal=causal, backend=backend))
    m = GPT(cfg).double().eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 0.5)
    return m


def layer(position: str, backend: str = "math", causal: bool = True, n_head: int = 4, base: float = 10000.0):
    torch.manual_seed(0)
    return CausalSelfAttention(32, n_head, AttnConfig(backend=backend, causal=causal), position=position,
                               rope_base=base).double().eval()


# ----------------------------------------------------------------------------- RoPE against transformers


def paper_angles(positions: torch.Tensor, d: int, base: float) -> torch.Tensor:
    """theta_i = base^(-2i/d), i = 0 .. d/2 - 1 (Su et al. 2021, eq. 15), times each position, in float64, laid out as
    transformers' cos/sin take them (the d/2 angles twice: its half-split pairing). (..., T) -> (..., T, d)."""
    theta = torch.tensor([base ** (-2.0 * i / d) for i in range(d // 2)], dtype=torch.float64)  # (d/2,)
    angles = positions.double()[..., None] * theta  # (..., T, d/2)
    return torch.cat((angles, angles), dim=-1)  # (..., T, d)


@pytest.mark.parametrize("base", [10000.0, 500.0])
def test_rope_rotates_q_and_k_as_transformers_apply_rotary_pos_emb(base):
    """Our rotation of q and k (B, H, T, D) at per-row positions equals transformers.apply_rotary_pos_emb (Llama's,
    whose rotate_half pairs dim i with dim i + D/2: the half-split pairing, ours) given cos and sin of the paper's
    angles, to float64 rounding; and transformers' own LlamaRotaryEmbedding gives those cos and sin (it computes
    them in float32: to float32 rounding)."""
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(2, 3, 7, 16, generator=gen, dtype=torch.float64) for _ in range(2))  # (B, H, T, D)
    positions = torch.tensor([[0, 1, 2, 3, 4, 5, 6], [5, 6, 7, 8, 9, 10, 40]])  # (B, T): rows at other offsets
    angles = paper_angles(positions, 16, base)  # (B, T, D)
    want_q, want_k = apply_rotary_pos_emb(q, k, angles.cos(), angles.sin(), unsqueeze_dim=1)
    torch.testing.assert_close(rotate(q, positions, base), want_q, rtol=0, atol=1e-12)
    torch.testing.assert_close(rotate(k, positions, base), want_k, rtol=0, atol=1e-12)

    config = LlamaConfig(hidden_size=48, num_attention_heads=3, head_dim=16,
                         rope_parameters={"rope_type": "default", "rope_theta": base})
    cos, sin = LlamaRotaryEmbedding(config)(q.float(), positions)  # (B, T, D), float32
    torch.testing.assert_close(cos.double(), angles.cos(), rtol=0, atol=5e-5)  # float32 angles up to 40 rad
    torch.testing.assert_close(sin.double(), angles.sin(), rtol=0, atol=5e-5)


def test_rope_pairs_dim_i_with_dim_i_plus_half_not_its_neighbour():
    """The pairing named in positions.rotate: a vector with only dim 0 set turns into dims 0 and D/2 (half-split, as
    transformers' rotate_half), never dim 1 (the interleaved pairing of the paper's eq. 34)."""
    x = torch.zeros(1, 1, 1, 8, dtype=torch.float64)
    x[..., 0] = 1.0
    got = rotate(x, torch.tensor([1]), 10000.0)[0, 0, 0]  # (D,): position 1, pair 0 turns by 1 radian
    assert got.tolist() == pytest.approx([math.cos(1.0), 0, 0, 0, math.sin(1.0), 0, 0, 0], abs=1e-15)
    assert rotate_half(x)[0, 0, 0].tolist() == [0, 0, 0, 0, 1, 0, 0, 0]  # transformers' too: dim 0 goes to dim D/2


def test_the_module_rotates_q_and_k_and_not_v():
    """CausalSelfAttention(position=rope): dissect's q and k are the projections rotated (transformers' helper on the
    same projections), and the output is the formula on those with the values as projected (unrotated)."""
    attn = layer("rope")
    x = torch.randn(2, 6, 32, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    plain = layer("none")  # the same weights (same seed), no positions
    with torch.no_grad():
        q0, k0, v0 = plain._heads(x)  # (B, H, T, D) unrotated
        seen = attn.dissect(x)
        angles = paper_angles(torch.arange(6), 8, 10000.0)  # (T, D)
        want_q, want_k = apply_rotary_pos_emb(q0, k0, angles.cos(), angles.sin(), unsqueeze_dim=0)
        torch.testing.assert_close(seen["q"], want_q, rtol=0, atol=1e-12)
        torch.testing.assert_close(seen["k"], want_k, rtol=0, atol=1e-12)
        scores = want_q @ want_k.transpose(-2, -1) / math.sqrt(8)  # (B, H, T, T)
        w = torch.softmax(scores.masked_fill(~torch.ones(6, 6, dtype=torch.bool).tril(), float("-inf")), -1)
        y = (w @ v0).transpose(1, 2).reshape(2, 6, 32)  # (B, H, T, D) -> (B, T, C)
        torch.testing.assert_close(attn(x), attn.c_proj(y), rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- ALiBi against the paper


@pytest.mark.parametrize("n_head, slopes", [
    (1, [2 ** -8]),
    (4, [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8]),
    (8, [2 ** -1, 2 ** -2, 2 ** -3, 2 ** -4, 2 ** -5, 2 ** -6, 2 ** -7, 2 ** -8]),  # the paper's 1/2 .. 1/256
    (6, [2 ** -2, 2 ** -4, 2 ** -6, 2 ** -8, 2 ** -1, 2 ** -3]),  # 4's, then every other of 8's (its get_slopes)
])
def test_alibi_slopes_are_the_papers(n_head, slopes):
    assert alibi_slopes(n_head) == slopes


def test_alibi_slopes_are_two_to_the_minus_8i_over_h_for_every_power_of_two():
    for h in (1, 2, 4, 8, 16, 32):
        assert alibi_slopes(h) == [2.0 ** (-8.0 * i / h) for i in range(1, h + 1)]


@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_alibi_attention_is_the_papers_formula_by_loops(backend):
    """The module's output on both backends equals, by plain loops over head, query and key, softmax over j <= i of
    q.k / sqrt(d) - m_h (i - j), m_h = 2^(-8h/H); its dissected logits are q k^T / sqrt(d) - m_h (i - j)."""
    attn, T, H, D = layer("alibi", backend), 5, 4, 8
    x = torch.randn(1, T, 32, generator=torch.Generator().manual_seed(2), dtype=torch.float64)
    with torch.no_grad():
        q, k, v = layer("none")._heads(x)  # (1, H, T, D)
        y = torch.zeros(1, H, T, D, dtype=torch.float64)
        for h in range(H):
            m = 2.0 ** (-8.0 * (h + 1) / H)
            for i in range(T):
                s = [float(q[0, h, i] @ k[0, h, j]) / math.sqrt(D) - m * (i - j) for j in range(i + 1)]
                e = [math.exp(v_ - max(s)) for v_ in s]
                for j in range(i + 1):
                    y[0, h, i] += e[j] / sum(e) * v[0, h, j]
                logits = attn.dissect(x)["logits"][0, h, i]
                assert logits[: i + 1].tolist() == pytest.approx(s, abs=1e-12)
        torch.testing.assert_close(attn(x), attn.c_proj(y.transpose(1, 2).reshape(1, T, 32)), rtol=0, atol=1e-12)


def test_alibi_bias_is_minus_slope_times_distance_per_row():
    slopes = torch.tensor([0.5, 0.25], dtype=torch.float64)
    bias = alibi_bias(slopes, torch.tensor([[0, 1, 2], [0, 0, 1]]), 2)  # (B, H, T_q, T_k): the last 2 queries
    assert bias.shape == (2, 2, 2, 3)
    assert bias[0, 0].tolist() == [[-0.5, 0.0, -0.5], [-1.0, -0.5, 0.0]]  # row 0: queries at 1, 2
    assert bias[1, 1].tolist() == [[0.0, 0.0, -0.25], [-0.25, -0.25, 0.0]]  # row 1: a pad at 0 (position 0 too)


# ----------------------------------------------------------------------------- relative: i - j alone


@pytest.mark.parametrize("position", ["rope", "alibi"])
@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_scores_and_outputs_depend_on_the_offset_alone(position, backend):
    """Shifting every position by the same amount (both q's and k's) leaves the scores and the output unchanged, to
    float64 rounding; positions that are not a shift (a row restarting at 0 halfway) change them (the test's
    teeth)."""
    attn = layer(position, backend)
    x = torch.randn(2, 7, 32, generator=torch.Generator().manual_seed(3), dtype=torch.float64)
    at = torch.arange(7)
    with torch.no_grad():
        base = attn.dissect(x, positions=at)["logits"], attn(x, positions=at)
        for shift in (1, 9, 1000):
            moved = attn.dissect(x, positions=at + shift)["logits"], attn(x, positions=at + shift)
            for a, b in zip(base, moved, strict=True):
                torch.testing.assert_close(b, a, rtol=0, atol=1e-9)
        restart = torch.tensor([0, 1, 2, 3, 0, 1, 2])  # positions that restart inside the row
        assert (attn(x, positions=restart) - base[1]).abs().max() > 1e-3


def test_rope_scores_are_a_function_of_the_offset_between_a_query_and_a_key():
    """q at i and k at j score as q at i - j and k at 0: the rotation's angle difference is all that remains."""
    gen = torch.Generator().manual_seed(4)
    q, k = (torch.randn(1, 1, 1, 16, generator=gen, dtype=torch.float64) for _ in range(2))
    for i, j in ((5, 2), (40, 37), (3, 3), (2, 9)):
        s = rotate(q, torch.tensor([i]), 10000.0) @ rotate(k, torch.tensor([j]), 10000.0).transpose(-2, -1)
        s0 = rotate(q, torch.tensor([i - j]), 10000.0) @ k.transpose(-2, -1)
        torch.testing.assert_close(s, s0, rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- order without positions


@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_without_mask_or_positions_the_model_is_permutation_equivariant(backend):
    """causal=false, position=none: permuting the tokens permutes the logits the same way, to float64 rounding
    (attention is a weighted average over a set). With learned positions, or with the mask, it is not."""
    idx = torch.randint(0, VOCAB, (2, 8), generator=torch.Generator().manual_seed(5))
    perm = torch.randperm(8, generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        for position in ("none", "learned", "rope", "alibi"):
            for causal in (False, True):
                m = gpt(position, causal=causal, backend=backend)
                gap = (m(idx[:, perm])[0] - m(idx)[0][:, perm]).abs().max().item()
                if position == "none" and not causal:
                    assert gap < 1e-12, gap
                else:
                    assert gap > 1e-3, (position, causal, gap)


# ----------------------------------------------------------------------------- padding, the cache, past the context


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_each_row_of_a_left_padded_batch_is_the_row_alone(position, backend):
    """Positions per row count real tokens (GPT._positions): a prompt after 3 pads gives the logits it gives alone,
    in one pass and decoded with the cache."""
    m = gpt(position, backend=backend)
    prompts = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11]]
    idx, mask = pad_prompts(prompts)
    with torch.no_grad():
        padded = m(idx, padding_mask=mask)[0]  # (2, 7, V)
        for row, p in enumerate(prompts):
            alone = m(torch.tensor([p]))[0][0]  # (len, V)
            torch.testing.assert_close(padded[row, -len(p):], alone, rtol=0, atol=1e-12)
    greedy = generate(m, idx, 6, top_k=1, padding_mask=mask)
    for row, p in enumerate(prompts):
        assert greedy[row, -(len(p) + 6):].tolist() == generate(m, torch.tensor([p]), 6, top_k=1)[0].tolist()


@pytest.mark.parametrize("position", POSITIONS)
@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_the_cache_decodes_greedily_as_recomputing_does(position, backend):
    """generate with the KV cache and without it give the same tokens, past block_size too (24 new tokens after 3 at
    block_size 8: the window slides)."""
    m = gpt(position, backend=backend)
    prompt = torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(7))
    cached = generate(m, prompt, 24, top_k=1)
    assert torch.equal(cached, generate(m, prompt, 24, top_k=1, use_cache=False))


@pytest.mark.parametrize("position", ["none", "rope", "alibi"])
@pytest.mark.parametrize("backend", ["math", "sdpa"])
def test_extrapolate_attends_to_every_token_past_block_size_with_and_without_the_cache(position, backend):
    """model.extrapolate: the cache grows past block_size, and each new token is the argmax of the model run on the
    whole sequence so far (no window); the window's tokens differ from those."""
    m = gpt(position, backend=backend, extrapolate=True)
    prompt = torch.randint(0, VOCAB, (2, 3), generator=torch.Generator().manual_seed(8))
    out = generate(m, prompt, 21, top_k=1)
    assert torch.equal(out, generate(m, prompt, 21, top_k=1, use_cache=False))
    with torch.no_grad():
        for t in range(3, 24):
            assert torch.equal(out[:, t], m(out[:, :t])[0][:, -1].argmax(-1)), t
    windowed = gpt(position, backend=backend)  # the same weights, extrapolate=false
    assert not torch.equal(generate(windowed, prompt, 21, top_k=1), out)


def test_past_block_size_only_extrapolate_runs_and_learned_cannot():
    with pytest.raises(ValueError, match=r"^sequence length 9 exceeds model.block_size=8 \(model.extrapolate=true "
                                         r"attends past it\)\.$"):
        gpt("rope")(torch.zeros(1, 9, dtype=torch.long))
    assert gpt("rope", extrapolate=True)(torch.zeros(1, 30, dtype=torch.long))[0].shape == (1, 30, VOCAB)
    with pytest.raises(ValueError, match=r"^model.extrapolate=true attends past block_size, where "
                                         r"model.position=learned has no position \(its table ends there\); use "
                                         r"position=rope, alibi or none, or extrapolate=false\.$"):
        GPTConfig(extrapolate=True)


# ----------------------------------------------------------------------------- the setting


def test_only_learned_has_a_position_table():
    for position in POSITIONS:
        m = gpt(position)
        assert (m.wpe is not None) == (position == "learned")
        assert m.num_params() == gpt("none").num_params()  # the table is an embedding, not counted
        assert ("position=" in repr(m.blocks[0].attn)) == (position in ("rope", "alibi"))


@pytest.mark.parametrize("kw, message", [
    ({"position": "sinusoidal"}, "model.position='sinusoidal' is not one of learned, none, rope, alibi."),
    ({"position": "rope", "rope_base": 1.0}, "model.rope_base=1.0 must be a number greater than 1 (RoPE's angles slow "
                                             "from the first pair of dims to the last only then; 10000 is the "
                                             "paper's)."),
    ({"position": "rope", "n_embd": 12, "n_head": 4}, "model.position=rope turns pairs of dims, but the head size "
                                                      "model.n_embd / model.n_head = 3 is odd; give an even one."),
])
def test_bad_position_settings_are_one_sentence(kw, message):
    with pytest.raises(ValueError) as err:
        GPTConfig(**kw)
    assert str(err.value) == message


def test_positions_past_256_stay_whole_in_bfloat16():
    """bfloat16 holds whole numbers exactly only up to 256: the angles and distances are computed in float32, so a
    bfloat16 rotation or bias at positions 1000 and 1001 is the float32 one rounded, not that of rounded positions."""
    x = torch.randn(1, 1, 2, 16, generator=torch.Generator().manual_seed(9))
    at = torch.tensor([1000, 1001])
    torch.testing.assert_close(rotate(x.bfloat16(), at, 10000.0).float(), rotate(x, at, 10000.0), rtol=0, atol=0.05)
    slopes = torch.tensor([0.5], dtype=torch.bfloat16)
    assert alibi_bias(slopes, at, 1)[0, 0].tolist() == [-0.5, 0.0]  # 1001 - 1000 = 1, whatever bfloat16 makes of 1001

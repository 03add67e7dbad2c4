"""Sampling: the next-token distribution by hand, and greedy decoding against the model's own argmax."""

import math

import pytest
import torch

from tinygpt.sampling.generate import generate, next_token_probs, pad_prompts
from tinygpt.model.kv_cache import KVCache
from tinygpt.model.gpt import GPT, GPTConfig


def test_probs_are_softmax_of_logits_over_temperature_restricted_to_top_k():
    logits = torch.tensor([[1.0, 2.0, 3.0, 0.0]])
    p = next_token_probs(logits, temperature=2.0, top_k=2)
    # top 2 are 3.0 and 2.0; divided by T = 2: 1.5 and 1.0
    e15, e10 = math.exp(1.5), math.exp(1.0)
    assert p[0].tolist() == pytest.approx([0.0, e10 / (e10 + e15), e15 / (e10 + e15), 0.0], abs=1e-7)
    assert next_token_probs(logits, top_k=1)[0].tolist() == [0.0, 0.0, 1.0, 0.0]
    full = next_token_probs(logits, temperature=0.5)  # no cut: every token keeps a share
    assert torch.allclose(full, torch.softmax(logits / 0.5, -1)) and (full > 0).all()
    assert next_token_probs(logits, top_k=99).tolist() == torch.softmax(logits, -1).tolist()


@pytest.mark.parametrize("kw, message", [({"temperature": 0}, "temperature=0 must be a finite number > 0"),
                                         ({"temperature": float("inf")}, "temperature=inf must be a finite number > 0"),
                                         ({"top_k": 0}, "top_k=0 must be a positive integer")])
def test_bad_sampling_arguments_are_one_sentence(kw, message):
    with pytest.raises(ValueError, match=message):
        next_token_probs(torch.zeros(1, 3), **kw)


def test_non_finite_logits_say_the_model_diverged():
    message = r"^the model gives non-finite logits \(it has diverged\); nothing to sample\.$"
    with pytest.raises(FloatingPointError, match=message):
        next_token_probs(torch.tensor([[0.0, float("nan")]]))


def test_greedy_decoding_is_the_argmax_of_the_last_position_with_the_context_cut_at_block_size():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=17, block_size=6, n_layer=2, n_head=2, n_embd=16)).eval()
    prompt = torch.randint(0, 17, (2, 9))  # longer than block_size: only the last 6 tokens are fed
    out = generate(m, prompt, 8, top_k=1)
    assert out.shape == (2, 17) and torch.equal(out[:, :9], prompt)
    for t in range(9, 17):
        with torch.no_grad():
            expected = m(out[:, t - 6 : t])[0][:, -1].argmax(-1)  # (B,)
        assert torch.equal(out[:, t], expected), f"token {t}"


def test_each_step_feeds_exactly_the_last_block_size_tokens():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=17, block_size=6, n_layer=1, n_head=2, n_embd=16)).eval()
    seen = []

    class Spy(torch.nn.Module):
        config = m.config

        def forward(self, idx):
            seen.append(idx.clone())
            return m(idx)

    prompt = torch.randint(0, 17, (1, 4))
    out = generate(Spy(), prompt, 5, top_k=3, generator=torch.Generator().manual_seed(0), use_cache=False)
    assert [c.shape[1] for c in seen] == [4, 5, 6, 6, 6]  # the whole prefix until it reaches block_size
    for step, ctx in enumerate(seen):
        t = 4 + step  # tokens known before this step
        assert torch.equal(ctx, out[:, max(0, t - 6) : t])


def test_generate_appends_tokens_and_is_seeded():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=31, block_size=12, n_layer=2, n_head=2, n_embd=8)).eval()
    idx = torch.zeros(1, 3, dtype=torch.long)
    a = generate(m, idx, 20, generator=torch.Generator().manual_seed(1), top_k=5)
    b = generate(m, idx, 20, generator=torch.Generator().manual_seed(1), top_k=5)
    assert a.shape == (1, 23) and torch.equal(a, b) and torch.equal(a[:, :3], idx)
    assert int(a.max()) < 31


# ----------------------------------------------------------------------------- KV cache


@pytest.mark.parametrize("backend", ["sdpa", "math"])
@pytest.mark.parametrize("qk_norm", [False, True])
def test_token_by_token_with_the_cache_equals_one_forward_pass(backend, qk_norm):
    """Prefill 3 tokens, then feed the rest one or two at a time: the logits equal the full causal pass."""
    torch.manual_seed(0)
    cfg = GPTConfig(vocab_size=23, block_size=10, n_layer=2, n_head=2, n_embd=16,
                    attn={"backend": backend, "qk_norm": qk_norm})
    m = GPT(cfg).eval()
    idx = torch.randint(0, 23, (2, 10))
    with torch.no_grad():
        full, _ = m(idx)  # (2, 10, V)
        cache = KVCache.for_model(m, 2)
        pieces = [m(idx[:, a:b], cache=cache)[0] for a, b in ((0, 3), (3, 4), (4, 6), (6, 7), (7, 10))]
    assert cache.pos == 10
    assert torch.allclose(torch.cat(pieces, dim=1), full, atol=1e-5)


def test_cached_greedy_decoding_equals_recomputing_also_past_the_context():
    torch.manual_seed(1)
    m = GPT(GPTConfig(vocab_size=29, block_size=8, n_layer=2, n_head=2, n_embd=16)).eval()
    prompt = torch.randint(0, 29, (3, 2))
    cached = generate(m, prompt, 12, top_k=1)  # 2 + 12 > block_size 8: the window recompute takes over
    plain = generate(m, prompt, 12, top_k=1, use_cache=False)
    assert torch.equal(cached, plain)
    seeded = [generate(m, prompt, 12, top_k=5, generator=torch.Generator().manual_seed(3), use_cache=c)
              for c in (True, False)]
    assert torch.equal(*seeded)  # sampling too: the same probabilities, the same draws


def test_a_leaky_model_never_uses_the_cache():
    """Without the mask a token's keys depend on later tokens, so no cache is valid."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=17, block_size=6, n_layer=1, n_head=2, n_embd=16, attn={"causal": False})).eval()
    calls = []
    forward = m.forward
    m.forward = lambda idx, *a, **kw: calls.append(kw.get("cache")) or forward(idx, *a, **kw)
    generate(m, torch.zeros(1, 2, dtype=torch.long), 3, top_k=1)
    assert calls == [None, None, None]


def test_the_cache_holds_block_size_positions():
    m = GPT(GPTConfig(vocab_size=11, block_size=4, n_layer=1, n_head=1, n_embd=8)).eval()
    cache = KVCache.for_model(m, 1)
    m(torch.zeros(1, 3, dtype=torch.long), cache=cache)
    with pytest.raises(ValueError, match="sequence length 5 exceeds model.block_size=4"):
        m(torch.zeros(1, 2, dtype=torch.long), cache=cache)


# ----------------------------------------------------------------------------- padded batches


def test_pad_prompts_left_pads_with_a_mask():
    idx, mask = pad_prompts([[5], [1, 2, 3]], pad_id=9)
    assert idx.tolist() == [[9, 9, 5], [1, 2, 3]]
    assert mask.tolist() == [[False, False, True], [True, True, True]]
    with pytest.raises(ValueError, match="every prompt needs at least one token"):
        pad_prompts([[1], []])


PROMPTS = [[3], [7, 1, 4, 1], [2, 7, 1, 8, 2, 8, 1]]  # 1, 4 and 7 tokens


def opinionated_gpt(backend: str, block_size: int = 10, n_layer: int = 2) -> GPT:
    """A small GPT with weights N(0, 0.5^2): its greedy continuations depend on the prompt (GPT-2's init
    gives a near-uniform model that decodes one token forever)."""
    m = GPT(GPTConfig(vocab_size=11, block_size=block_size, n_layer=n_layer, n_head=2, n_embd=16,
                      attn={"backend": backend})).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 0.5)
    return m


@pytest.mark.parametrize("backend", ["sdpa", "math"])
def test_a_padded_row_gives_the_logits_it_gives_alone(backend):
    torch.manual_seed(0)
    m = opinionated_gpt(backend)
    idx, mask = pad_prompts(PROMPTS, pad_id=0)
    with torch.no_grad():
        batch, _ = m(idx, padding_mask=mask)  # (3, 7, V)
        for row, p in enumerate(PROMPTS):
            alone, _ = m(torch.tensor([p]))  # (1, len, V)
            torch.testing.assert_close(batch[row, -len(p):], alone[0], rtol=1e-5, atol=1e-5)
        other_pads, _ = m(idx.masked_fill(~mask, 5), padding_mask=mask)  # what the pads hold never matters
    torch.testing.assert_close(other_pads[mask], batch[mask], rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("backend", ["sdpa", "math"])
def test_padded_batch_decoding_with_the_cache_equals_recomputing_and_each_row_alone(backend):
    """Prompts of 1, 4 and 7 tokens, 12 greedy tokens with block_size 10: the cache runs while the batch fits,
    the window recompute after. Cached == recomputed == each prompt decoded alone at batch 1."""
    torch.manual_seed(1)
    m = opinionated_gpt(backend)
    idx, mask = pad_prompts(PROMPTS, pad_id=0)
    cached = generate(m, idx, 12, top_k=1, padding_mask=mask)
    assert torch.equal(cached, generate(m, idx, 12, top_k=1, padding_mask=mask, use_cache=False))
    for row, p in enumerate(PROMPTS):
        alone = generate(m, torch.tensor([p]), 12, top_k=1)  # (1, len + 12)
        assert torch.equal(cached[row, idx.shape[1] - len(p):], alone[0])
    assert len({tuple(r[-12:].tolist()) for r in cached}) > 1  # the rows did not all decode the same


def test_padded_decoding_without_the_cache_stays_aligned_past_the_context():
    """Recomputing only: the shortest prompt's row keeps its own positions when the window slides."""
    torch.manual_seed(2)
    m = opinionated_gpt("sdpa", block_size=6, n_layer=1)
    idx, mask = pad_prompts([[4], [1, 2, 3, 4, 5]], pad_id=0)
    out = generate(m, idx, 9, top_k=1, padding_mask=mask, use_cache=False)
    assert torch.equal(out[0, 4:], generate(m, torch.tensor([[4]]), 9, top_k=1, use_cache=False)[0])


def test_right_padding_is_refused_in_one_sentence():
    m = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=1, n_embd=8)).eval()
    idx = torch.tensor([[1, 2, 0]])
    with pytest.raises(ValueError, match="must be left padding"):
        generate(m, idx, 2, top_k=1, padding_mask=torch.tensor([[True, True, False]]))
    with pytest.raises(ValueError, match=r"^padding_mask must be bool of shape \(B, T\) = \(1, 3\), "
                                         r"got torch.bool \(1, 2\)\.$"):
        generate(m, idx, 2, top_k=1, padding_mask=torch.ones(1, 2, dtype=torch.bool))


@pytest.mark.parametrize("backend", ["sdpa", "math"])
def test_padded_prompts_token_by_token_with_the_cache_equal_one_padded_pass(backend):
    """Prefill the padded prompts, then feed 3 tokens one at a time: the logits at every real position equal
    one forward pass over the whole padded sequence (the cache keeps the mask and each row's positions)."""
    torch.manual_seed(3)
    m = opinionated_gpt(backend)
    idx, mask = pad_prompts(PROMPTS, pad_id=0)  # (3, 7)
    idx = torch.cat([idx, torch.randint(0, 11, (3, 3))], dim=1)  # (3, 10): three more tokens per row
    mask = torch.cat([mask, torch.ones(3, 3, dtype=torch.bool)], dim=1)
    with torch.no_grad():
        full, _ = m(idx, padding_mask=mask)  # (3, 10, V)
        cache = KVCache.for_model(m, 3)
        pieces = [m(idx[:, a:b], cache=cache, padding_mask=mask[:, a:b])[0] for a, b in ((0, 7), (7, 8), (8, 9))]
        pieces.append(m(idx[:, 9:], cache=cache)[0])  # no mask given: the new token is real
    assert cache.padded and cache.real_tokens().tolist() == [4, 7, 10]
    torch.testing.assert_close(torch.cat(pieces, dim=1)[mask], full[mask], rtol=1e-5, atol=1e-5)


def test_a_padding_mask_of_the_wrong_shape_is_one_sentence():
    m = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=1, n_embd=8)).eval()
    with pytest.raises(ValueError) as err:
        m(torch.zeros(1, 3, dtype=torch.long), padding_mask=torch.ones(1, 2, dtype=torch.bool))
    assert str(err.value) == "padding_mask must be bool of shape (B, T) = (1, 3), got torch.bool (1, 2)."


def test_the_cache_refuses_more_than_it_holds_in_one_sentence():
    cache = KVCache(n_layer=1, batch=1, n_head=1, max_len=4, head_dim=2)
    message = r"the KV cache holds 4 positions; 5 were asked for."
    with pytest.raises(ValueError, match=message):
        cache.layer(0).extend(torch.zeros(1, 1, 5, 2), torch.zeros(1, 1, 5, 2))
    with pytest.raises(ValueError, match=message):
        cache.extend_mask(torch.ones(1, 5, dtype=torch.bool))
    assert cache.pos == 0 and bool(cache.mask.all())  # nothing was written

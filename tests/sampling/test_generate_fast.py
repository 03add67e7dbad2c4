"""The fast decode path (tinygpt.sampling.generate's CachedStep and greedy_token, fast_linear's thread rule, the KV
cache's one buffer) computes what the modules compute: the same logits bit for bit, the same greedy tokens as
the path before it, with and without the cache, past the context window too."""

import contextlib
from unittest import mock

import pytest
import torch

from tinygpt.sampling import fast_linear
from tinygpt.sampling import generate as gen_module
from tinygpt.sampling.fast_linear import FastDecodeLinear, blocks_product, use_fast_decode
from tinygpt.sampling.generate import CachedStep, generate, greedy_token, next_token_probs
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.model.kv_cache import KVCache


@contextlib.contextmanager
def threads(n: int):
    before = torch.get_num_threads()
    torch.set_num_threads(n)
    try:
        yield
    finally:
        torch.set_num_threads(before)


@contextlib.contextmanager
def path_before():
    """The decode path before the levers: the modules' forward per token, softmax + multinomial for top_k=1,
    no_grad alone, oneDNN's kernels, the split products at any thread count."""
    with mock.patch.object(CachedStep, "for_model", lambda *a, **k: None), \
            mock.patch.object(gen_module, "greedy_token", lambda *a, **k: None), \
            mock.patch.object(gen_module, "_no_autograd", contextlib.nullcontext), \
            mock.patch.object(gen_module, "_native_kernels", contextlib.nullcontext), \
            mock.patch.object(FastDecodeLinear, "split_margin", 0.0):
        yield


def opinionated(block_size: int = 12, n_embd: int = 32, n_head: int = 4, vocab: int = 23, seed: int = 0,
                **kw) -> GPT:
    """Weights N(0, 0.3^2): greedy continuations that depend on the prompt (GPT-2's init decodes one token)."""
    torch.manual_seed(seed)
    m = GPT(GPTConfig(vocab_size=vocab, block_size=block_size, n_layer=2, n_head=n_head, n_embd=n_embd, **kw)).eval()
    with torch.no_grad():
        for p in m.parameters():
            p.normal_(0.0, 0.3)
    return m


VARIANTS = [
    dict(),
    dict(attn={"backend": "math"}),
    dict(attn={"qk_norm": True}),
    dict(bias=True, activation="gelu_tanh", ln_eps=1e-3),
    dict(attn={"backend": "math", "scale_at": "qk", "scale": "none"}),
]


@pytest.fixture
def split_always(monkeypatch):
    """The split products wherever they are allowed, whatever their timing on this machine."""
    monkeypatch.setattr(FastDecodeLinear, "split_margin", 0.0)


@pytest.mark.parametrize("kw", VARIANTS, ids=["default", "math", "qk_norm", "gpt2-like", "scale_at_qk"])
@pytest.mark.parametrize("batch", [1, 3])
@pytest.mark.parametrize("fast", [False, True], ids=["linear", "split"])
@pytest.mark.parametrize("native", [False, True], ids=["onednn", "native"])
def test_the_cached_step_gives_the_models_logits_bit_for_bit(kw, batch, fast, native, split_always):
    """Token by token from an empty cache (the first token at position 0 too): every logit and the cache itself
    equal GPT.forward's with the cache exactly, the split products (2 threads) included, with oneDNN's kernels
    (PyTorch's default) and with PyTorch's own (the decode loop's)."""
    m = opinionated(n_embd=256 if fast else 32, **kw)  # 256 wide: c_attn's weight is big enough to split
    if fast:
        use_fast_decode(m)
    idx = torch.randint(0, 23, (batch, 12), generator=torch.Generator().manual_seed(1))
    kernels = gen_module._native_kernels() if native else contextlib.nullcontext()
    with threads(2), torch.no_grad(), kernels:
        if fast:
            assert m.blocks[0].attn.c_attn.uses_split(torch.zeros(batch, 256))
        ref, fast_cache = KVCache.for_model(m, batch), KVCache.for_model(m, batch)
        step = CachedStep.for_model(m, fast_cache)
        assert step is not None
        for t in range(12):
            expected, _ = m(idx[:, t:t + 1], cache=ref)  # (B, 1, V)
            assert torch.equal(step(idx[:, t:t + 1]), expected[:, -1]), f"token {t}"
        assert torch.equal(ref.kv, fast_cache.kv) and ref.pos == fast_cache.pos == 12
        with pytest.raises(ValueError, match="sequence length 13 exceeds model.block_size=12"):
            step(idx[:, :1])


PROMPTS = [[3], [7, 1, 4, 1, 5], [2, 7, 1, 8, 2, 8, 1, 8, 2]]  # 1, 5 and 9 tokens; block_size 12


@pytest.mark.parametrize("kw", VARIANTS[:2], ids=["sdpa", "math"])
def test_greedy_generations_are_those_of_the_path_before_with_and_without_the_cache(kw):
    """Several prompts, 20 tokens each with block_size 12: the cache runs to the end of the context, the window
    recompute after it. The tokens equal the path before the levers, cached and recomputed."""
    m = opinionated(**kw)
    outs = set()
    for p in PROMPTS:
        prompt = torch.tensor([p])
        now = generate(m, prompt, 20, top_k=1)
        with path_before():
            before = generate(m, prompt, 20, top_k=1)
            before_plain = generate(m, prompt, 20, top_k=1, use_cache=False)
        assert torch.equal(now, before) and torch.equal(now, before_plain)
        assert torch.equal(now, generate(m, prompt, 20, top_k=1, use_cache=False))
        outs.add(tuple(now[0, -20:].tolist()))
    assert len(outs) == len(PROMPTS)  # the prompts decoded differently: the check has teeth


def test_a_batch_and_sampling_are_unchanged_too(split_always):
    """A batch of 3 prompts of one length, greedy and seeded top-k sampling: the same tokens as before."""
    m = opinionated(n_embd=256)
    use_fast_decode(m)
    prompt = torch.randint(0, 23, (3, 4), generator=torch.Generator().manual_seed(2))
    for kw in (dict(top_k=1), dict(top_k=5, temperature=0.8)):
        with threads(2):  # the split products on
            now = generate(m, prompt, 10, generator=torch.Generator().manual_seed(3), **kw)
            with path_before():
                before = generate(m, prompt, 10, generator=torch.Generator().manual_seed(3), **kw)
        assert torch.equal(now, before), kw


def test_greedy_token_is_what_top_1_sampling_draws():
    logits = torch.tensor([[0.5, 2.0, -1.0, 1.9], [3.0, 0.0, 0.0, 2.0]])
    assert greedy_token(logits).tolist() == [[1], [0]]
    assert greedy_token(logits, temperature=0.01).tolist() == [[1], [0]]
    drawn = torch.multinomial(next_token_probs(logits, 1.0, 1), 1, generator=torch.Generator().manual_seed(0))
    assert torch.equal(greedy_token(logits), drawn)


@pytest.mark.parametrize("logits, temperature", [
    ([[1.0, 2.0, 2.0]], 1.0),  # a tie: sampling breaks it at random
    ([[1.0, float("nan"), 0.0]], 1.0),  # non-finite: next_token_probs names it
    ([[1.0, float("-inf"), 0.0]], 1.0),
    ([[3.0]], 1.0),  # one token
    ([[1e38, 2e38, 0.0]], 1e-3),  # finite logits, infinite once divided by the temperature
])
def test_greedy_token_leaves_ties_and_odd_logits_to_sampling(logits, temperature):
    assert greedy_token(torch.tensor(logits), temperature) is None


def test_non_finite_logits_are_still_one_sentence_with_the_shortcut():
    class Diverged(torch.nn.Module):
        config = GPTConfig(vocab_size=5, block_size=8, attn={"causal": False})

        def forward(self, idx, **kw):
            return torch.full((idx.shape[0], idx.shape[1], 5), float("nan")), None

    with pytest.raises(FloatingPointError, match="non-finite logits"):
        generate(Diverged(), torch.zeros(1, 1, dtype=torch.long), 2, top_k=1)


def test_the_cached_step_is_only_for_what_it_copies():
    m = opinionated()
    cache = KVCache.for_model(m, 1)
    assert CachedStep.for_model(m, cache) is not None
    handle = m.blocks[1].mlp.register_forward_hook(lambda *a: None)  # a hook must run: the modules' path
    assert CachedStep.for_model(m, cache) is None
    handle.remove()
    m.blocks[0].forward = m.blocks[0].forward  # a forward replaced on the instance
    assert CachedStep.for_model(m, cache) is None
    del m.blocks[0].forward
    dropout = opinionated(dropout=0.1)
    assert CachedStep.for_model(dropout.train(), cache) is None  # live dropout
    assert CachedStep.for_model(dropout.eval(), cache) is not None
    assert CachedStep.for_model(opinionated(attn={"causal": False}), cache) is None

    class MyLinear(torch.nn.Linear):
        pass

    m.blocks[0].mlp.c_fc.__class__ = MyLinear
    assert CachedStep.for_model(m, cache) is None


def test_a_global_module_hook_takes_the_modules_path():
    """torch's public register_module_forward_hook: the step reads torch's private registry of such hooks, and this
    fails loudly if torch moves it."""
    m = opinionated()
    handle = torch.nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        assert CachedStep.for_model(m, KVCache.for_model(m, 1)) is None
    finally:
        handle.remove()
    assert CachedStep.for_model(m, KVCache.for_model(m, 1)) is not None


def test_padded_batches_take_the_modules_path():
    m = opinionated()
    with mock.patch.object(CachedStep, "__call__", side_effect=AssertionError("the fast step ran")):
        generate(m, torch.tensor([[0, 1, 2], [3, 4, 5]]), 3, top_k=1,
                 padding_mask=torch.tensor([[False, True, True], [True, True, True]]))


def test_each_thread_count_takes_the_split_by_its_own_timing(monkeypatch):
    """One thread has no second core, but the split's bmm may still stream the weights faster than the BLAS's
    one-row F.linear (1.7x over `small` on the AMD EPYC, where a rule had kept one thread on F.linear): the timing
    at the thread count in use decides, one count's timing never another's."""
    layer = FastDecodeLinear(384, 1152, bias=False)
    x = torch.randn(1, 384)
    shapes = ((1152, 384),)
    monkeypatch.setattr(FastDecodeLinear, "speedups", {(1, shapes, torch.float32): 1.7,
                                                       (2, shapes, torch.float32): 0.5})
    with torch.no_grad():
        with threads(1):
            assert layer.uses_split(x)
            torch.testing.assert_close(layer(x), torch.nn.functional.linear(x, layer.weight), rtol=1e-5, atol=1e-5)
        with threads(2):
            assert not layer.uses_split(x)
            assert torch.equal(layer(x), torch.nn.functional.linear(x, layer.weight))


def test_the_split_is_taken_where_it_was_timed_faster(monkeypatch):
    """With two threads the split is chosen by timing it against F.linear once per process and weight shape."""
    layer = FastDecodeLinear(384, 1152, bias=False)
    x = torch.randn(1, 384)
    monkeypatch.setattr(FastDecodeLinear, "speedups", {})
    with threads(2), torch.no_grad():
        speedup = fast_linear.split_speedup(layer.weight)
        key = (2, ((1152, 384),), torch.float32)
        assert speedup > 0 and list(FastDecodeLinear.speedups) == [key]
        assert layer.uses_split(x) == (speedup >= FastDecodeLinear.split_margin)
        monkeypatch.setitem(FastDecodeLinear.speedups, key, 1.0)  # no faster
        assert not layer.uses_split(x)
        monkeypatch.setitem(FastDecodeLinear.speedups, key, 2.7)  # the AMD EPYC's
        assert layer.uses_split(x)


def test_the_split_is_chosen_once_for_all_of_a_models_products(monkeypatch):
    """use_fast_decode gives every big block Linear the model's group of weights; the split is timed over the
    group (one token's products in a row, streamed from memory as in decoding: one weight alone sits in cache,
    where the AMD EPYC's F.linear looked as fast) and taken or left for all of them, the lean step included,
    whatever a weight timed alone would say."""
    m = use_fast_decode(GPT(GPTConfig(vocab_size=65, block_size=16, n_layer=2, n_head=4, n_embd=384)).eval())
    layers = [layer for layer in m.blocks.modules() if isinstance(layer, FastDecodeLinear)]
    group = layers[0].decode_group
    assert len(group) == 8 and all(layer.decode_group is group for layer in layers)  # 4 products a block
    assert [w.data_ptr() for w in group] == [layer.weight.data_ptr() for layer in layers]
    monkeypatch.setattr(FastDecodeLinear, "speedups", {})
    with threads(2), torch.no_grad():
        fast_linear.split_speedup(group)
        (key,) = FastDecodeLinear.speedups
        assert key == (2, tuple(tuple(w.shape) for w in group), torch.float32)
        for weight in group:  # each weight alone: no faster
            FastDecodeLinear.speedups[(2, (tuple(weight.shape),), torch.float32)] = 1.0
        FastDecodeLinear.speedups[key] = 2.8  # over the group: the AMD EPYC's
        assert all(layer.uses_split(torch.zeros(1, layer.in_features)) for layer in layers)
        cache = KVCache.for_model(m, 1)
        step = CachedStep.for_model(m, cache)
        assert all(product[0] is blocks_product for layer in step.layers
                   for product in (layer.qkv, layer.proj, layer.fc, layer.mlp_proj))
        FastDecodeLinear.speedups[key] = 1.0
        assert not any(layer.uses_split(torch.zeros(1, layer.in_features)) for layer in layers)


def test_the_cache_keeps_keys_and_values_in_one_buffer():
    cache = KVCache(n_layer=2, batch=1, n_head=2, max_len=4, head_dim=3)
    cache.layer(1).extend(torch.ones(1, 2, 1, 3), torch.full((1, 2, 1, 3), 2.0))
    assert cache.k.data_ptr() == cache.kv.data_ptr() and cache.v.shape == (2, 1, 2, 4, 3)
    assert cache.kv[1, 0, :, :, 0].eq(1).all() and cache.kv[1, 1, :, :, 0].eq(2).all()
    assert cache.kv[0].eq(0).all() and cache.kv[1, :, :, :, 1:].eq(0).all()


def test_the_loop_runs_pytorchs_own_kernels_and_gives_onednn_back_after():
    """oneDNN is off while the loop runs (its GELU's setup per call costs more than a row's GELU) and on again
    after, an error included; the logits differ from oneDNN's by float rounding only."""
    m = opinionated(activation="gelu")
    seen = []
    hook = m.register_forward_pre_hook(lambda *_: seen.append(torch.backends.mkldnn.enabled))
    assert torch.backends.mkldnn.enabled
    generate(m, torch.tensor([[1, 2]]), 3, top_k=1)
    assert seen == [False] * 3 and torch.backends.mkldnn.enabled
    hook.remove()
    hook = m.register_forward_pre_hook(lambda *_: 1 / 0)
    with pytest.raises(ZeroDivisionError):
        generate(m, torch.tensor([[1, 2]]), 3, top_k=1)
    assert torch.backends.mkldnn.enabled
    hook.remove()
    x = torch.randint(0, 23, (2, 12), generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        onednn = m(x)[0]
        with gen_module._native_kernels():
            native = m(x)[0]
    torch.testing.assert_close(native, onednn, rtol=1e-5, atol=1e-5)


def test_the_tokens_leave_inference_mode_as_a_plain_tensor():
    """The loop runs under inference_mode; what it returns can still feed a model that trains."""
    m = opinionated()
    out = generate(m, torch.tensor([[1, 2]]), 3, top_k=1)
    assert not out.is_inference() and not torch.is_inference_mode_enabled()
    m.train()
    m(out[:, :-1], out[:, 1:])[1].backward()  # the embedding saves its indices for backward
    assert m.wte.weight.grad is not None

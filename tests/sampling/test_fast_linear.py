"""The decoding path of tinygpt.sampling.fast_linear: when it is taken, that it computes F.linear, and that it is
swapped in explicitly (the architecture builds plain nn.Linear)."""

import pytest
import torch
import torch.nn.functional as F

from tinygpt.sampling import fast_linear
from tinygpt.sampling.generate import generate
from tinygpt.sampling.fast_linear import FastDecodeLinear, use_fast_decode
from tinygpt.model.gpt import GPT, GPTConfig


@pytest.fixture(autouse=True)
def two_threads_and_the_split_wherever_allowed(monkeypatch):
    """The split runs where it was timed faster than F.linear at the thread count in use: here it is taken whatever
    its timing (split_margin 0)."""
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    monkeypatch.setattr(FastDecodeLinear, "split_margin", 0.0)
    yield
    torch.set_num_threads(before)


def big_linear(bias: bool, out_features: int = 1152) -> FastDecodeLinear:
    torch.manual_seed(0)
    layer = FastDecodeLinear(384, out_features, bias=bias)
    if bias:
        torch.nn.init.normal_(layer.bias)
    return layer


@pytest.mark.parametrize("shape", [(1, 384), (1, 1, 384), (3, 2, 384), (8, 384)])
@pytest.mark.parametrize("bias", [False, True])
def test_the_split_product_equals_f_linear_to_rounding(shape, bias):
    layer = big_linear(bias)
    x = torch.randn(shape)
    with torch.no_grad():
        assert layer.uses_split(x)
        y = layer(x)
    expected = F.linear(x, layer.weight, layer.bias)
    assert y.shape == expected.shape
    torch.testing.assert_close(y, expected, rtol=1e-5, atol=1e-5)
    assert not torch.equal(layer.weight, torch.zeros_like(layer.weight))  # a real product, not zeros


@pytest.mark.parametrize("rows", [1, 3, 8])
@pytest.mark.parametrize("bias", [False, True])
def test_the_lean_steps_product_on_prebuilt_blocks_is_the_layers(rows, bias):
    """lean_product: the split on the weight's halves built once, called per token with the rows alone; the
    same bits as the layer's forward (the same bmm on the same views), F.linear to rounding; a strided row too."""
    layer = big_linear(bias)
    x = torch.randn(rows, 2 * 384)[:, ::2]  # (rows, 384), not contiguous
    with torch.no_grad():
        product, weight, b = fast_linear.lean_product(layer, rows)
        assert product is fast_linear.blocks_product and weight.shape == (2, 576, 384)
        assert weight.data_ptr() == layer.weight.data_ptr()  # a view: nothing copied
        y = product(x, weight, b)
        assert torch.equal(y, layer(x))
    torch.testing.assert_close(y, F.linear(x, layer.weight, layer.bias), rtol=1e-5, atol=1e-5)


def test_the_lean_step_takes_f_linear_where_the_layer_would():
    small = FastDecodeLinear(128, 384)  # 49k weights: they stay in cache
    plain = torch.nn.Linear(384, 1152)
    with torch.no_grad():
        assert fast_linear.lean_product(small, 1) == (F.linear, small.weight, small.bias)
        assert fast_linear.lean_product(plain, 1) == (F.linear, plain.weight, plain.bias)
        assert fast_linear.lean_product(big_linear(False), 9)[0] is F.linear  # more than max_rows rows


def test_the_split_is_for_few_rows_of_a_big_weight_without_gradients():
    layer = big_linear(False)
    one = torch.randn(1, 384)
    assert not layer.uses_split(one)  # gradients on: training always takes F.linear
    with torch.no_grad():
        assert not layer.uses_split(torch.randn(9, 384))  # more than max_rows rows
        assert not big_linear(False, out_features=1151).uses_split(one)  # no even split of the rows
        assert not FastDecodeLinear(128, 384).uses_split(torch.randn(1, 128))  # 49k weights: they stay in cache
        assert layer.uses_split(one)


def test_with_gradients_the_output_is_f_linear_exactly():
    layer = big_linear(True)
    x = torch.randn(1, 384, requires_grad=True)
    assert torch.equal(layer(x), F.linear(x, layer.weight, layer.bias))


def test_cached_greedy_decoding_through_the_split_equals_recomputing():
    """A model wide enough for the split (c_attn 256 x 768 weights): KV-cache decoding takes it and the
    greedy tokens equal recomputing the context (which never takes it: its rows exceed max_rows)."""
    torch.manual_seed(0)
    m = use_fast_decode(GPT(GPTConfig(vocab_size=31, block_size=24, n_layer=2, n_head=4, n_embd=256)).eval())
    with torch.no_grad():
        assert m.blocks[0].attn.c_attn.uses_split(torch.zeros(2, 1, 256))
    for prompt_len in (1, 5):
        prompt = torch.randint(0, 31, (2, prompt_len))
        cached = generate(m, prompt, 20, top_k=1)
        assert torch.equal(cached, generate(m, prompt, 20, top_k=1, use_cache=False))


def test_the_architecture_builds_plain_linears_and_use_fast_decode_swaps_them_in_place():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=31, block_size=24, n_layer=2, n_head=4, n_embd=256))
    assert not any(isinstance(mod, FastDecodeLinear) for mod in m.modules())
    before = {k: v.clone() for k, v in m.state_dict().items()}
    params = [id(p) for p in m.parameters()]
    assert use_fast_decode(m) is m
    swapped = [name for name, mod in m.named_modules() if isinstance(mod, FastDecodeLinear)]
    assert swapped == [f"blocks.{i}.{n}" for i in range(2) for n in ("attn.c_attn", "attn.c_proj", "mlp.c_fc",
                                                                     "mlp.c_proj")]
    assert type(m.lm_head) is torch.nn.Linear  # the tied head stays as it is
    assert [id(p) for p in m.parameters()] == params  # the same parameter objects
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items()) and before.keys() == m.state_dict().keys()

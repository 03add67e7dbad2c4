"""The memory check: the parameter count from the config is exact, an impossible model is refused in one line
without allocating anything, a normal one passes."""

import time
import tracemalloc

import pytest

from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.runtime.errors import ConfigError
from tinygpt.train import memory


@pytest.mark.parametrize("kw", [
    dict(vocab_size=65, block_size=64, n_layer=4, n_head=4, n_embd=128),
    dict(vocab_size=65, block_size=64, n_layer=2, n_head=2, n_embd=32, bias=True),
    dict(vocab_size=50, block_size=16, n_layer=1, n_head=1, n_embd=8, attn={"qk_norm": True}),
    dict(vocab_size=50, block_size=16, n_layer=3, n_head=2, n_embd=8, bias=True, attn={"qk_norm": True}),
    dict(vocab_size=65, block_size=64, n_layer=2, n_head=2, n_embd=32, position="rope"),
    dict(vocab_size=65, block_size=64, n_layer=2, n_head=2, n_embd=32, position="none"),
])
def test_the_parameter_count_from_the_config_is_the_models(kw):
    settings = {k: v for k, v in kw.items() if k != "vocab_size"}
    assert memory.parameters(settings, kw["vocab_size"]) == GPT(GPTConfig(**kw)).num_params(False)


def test_the_default_models_count_by_hand():
    """nanoGPT's CPU model: V*C + T*C + L*(12*C*C + 2*C) + C (the final LayerNorm, no biases)."""
    C, L = 128, 4
    assert memory.parameters({"n_layer": L, "n_embd": C, "n_head": 4, "block_size": 64}, 65) == \
        65 * C + 64 * C + L * (12 * C * C + 2 * C) + C == 804_096


def test_the_estimate_follows_the_position_setting():
    """No table without learned positions (T * C fewer parameters); RoPE keeps its rotated q and k (2 C per token
    and layer); ALiBi's bias is one (H, T, T) per layer, not per token: not counted."""
    base = {"n_layer": 4, "n_embd": 128, "n_head": 4, "block_size": 64}
    learned = memory.training_bytes(base, 65, 12)
    for position in ("none", "rope", "alibi"):
        p, need = memory.training_bytes({**base, "position": position}, 65, 12)
        assert p == learned[0] - 64 * 128, position
        rope = 4 * 12 * 64 * 4 * 2 * 128 if position == "rope" else 0  # bytes x batch x T x L x 2C
        assert need == learned[1] - 16 * 64 * 128 + rope, position


def test_an_impossible_model_is_refused_in_one_line_without_allocating(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda accelerator: (24 * 2**30, "this machine"))
    huge = {"n_layer": 48, "n_embd": 16384, "n_head": 64, "block_size": 64}
    tracemalloc.start()
    t0 = time.perf_counter()
    with pytest.raises(ConfigError) as err:
        memory.check(huge, 65, 12, "cpu")
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert time.perf_counter() - t0 < 1 and peak < 10 * 2**20  # arithmetic only
    msg = str(err.value)
    assert "\n" not in msg and "154,623M parameters" in msg and "more than the 24.0 GiB of this machine" in msg
    assert "check_memory=false" in msg


def test_the_default_model_passes(monkeypatch):
    monkeypatch.setattr(memory, "available_bytes", lambda accelerator: (2**30, "this machine"))
    memory.check({"n_layer": 4, "n_embd": 128, "n_head": 4, "block_size": 64}, 65, 12, "cpu")
    assert memory.available_bytes("cpu")[0] > 0  # this machine reports its memory


@pytest.mark.parametrize("settings", [
    {"n_layer": 4, "n_embd": 128, "n_head": 4, "block_size": 64},
    {"n_layer": 2, "n_embd": 32, "n_head": 2, "block_size": 64, "bias": True},
    {"n_layer": 48, "n_embd": 1600, "n_head": 25, "block_size": 1024},  # GPT-2 XL
])
def test_the_floor_checked_before_torch_is_never_above_the_estimate(settings):
    for vocab, batch in ((65, 12), (50257, 1)):
        p_floor, need_floor = memory.floor_bytes(settings, batch)
        if settings["n_layer"] < 48:  # the exact count builds the model on the meta device
            p, need = memory.training_bytes(settings, vocab, batch)
            assert p_floor <= p and need_floor <= need


def test_a_model_that_cannot_fit_is_refused_before_torch_on_a_machine_without_a_gpu(monkeypatch):
    """model=gpt2_xl at batch 12 on a 24 GiB CPU machine: refused at set-up after 8.7 s; the floor (attention weights
    and activations: 408 GiB) refuses it in the checks before torch."""
    monkeypatch.setattr(memory, "machine_bytes", lambda: (24 * 2**30, "this machine"))
    xl = {"n_layer": 48, "n_embd": 1600, "n_head": 25, "block_size": 1024}
    with pytest.raises(ConfigError) as err:
        memory.check_floor(xl, 12)
    assert str(err.value) == (
        "the model's attention weights alone are 492M parameters, and training it at batch 12 needs at least "
        "408.1 GiB (weights, "
        "gradients, AdamW state, activations), more than the 24.0 GiB of this machine; use a smaller model or "
        "batch, or check_memory=false to try anyway.")
    memory.check_floor({"n_layer": 4, "n_embd": 128, "n_head": 4, "block_size": 64}, 12)  # the default fits

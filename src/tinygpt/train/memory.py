"""Will training fit? An estimate of the memory a config needs, made from the config alone (nothing allocated),
checked against what the accelerator or the machine has before the model is built; on a machine with no GPU, a
floor of it (the activations and the attention weights alone, no vocabulary) is checked before torch is imported.

The estimate: fp32 weights, their gradients and AdamW's two moments (16 bytes a parameter), plus the activations
one batch keeps for the backward pass, roughly 34 x C + 5 x H x T values per token and layer (Korthikanti et al.
2022, counted in fp32 here; 2 x C more with model.position=rope, its rotated q and k) and the logits. The parameters
follow model.position too: only learned has the position table. Rough on purpose: it is there to refuse a model that
cannot possibly fit (which would otherwise allocate until the kernel kills the process, or another one), not to plan
a tight fit.
"""

from __future__ import annotations

import os
from dataclasses import replace

from tinygpt.runtime.console import count
from tinygpt.runtime.errors import ConfigError


def parameters(model: dict, vocab_size: int) -> int:
    """The GPT's parameter count (tied embedding counted once) for the model.* settings, exactly: a one-layer copy is
    built on the meta device (which allocates nothing), and its block counted once more for each other layer."""
    import torch

    from tinygpt.model.gpt import GPT, GPTConfig

    cfg = GPTConfig(vocab_size=vocab_size, **model)
    with torch.device("meta"):
        one = GPT(replace(cfg, n_layer=1))
    block = sum(p.numel() for p in one.blocks[0].parameters())
    return one.num_params(non_embedding=False) + (cfg.n_layer - 1) * block


def activation_bytes(model: dict, vocab_size: int, batch_size: int) -> int:
    """What one batch keeps for the backward pass (fp32): per token and layer 34 C + 5 H T values (2 C more for RoPE's
    rotated q and k), and the logits."""
    L, C, H, T = model["n_layer"], model["n_embd"], model["n_head"], model["block_size"]
    rope = 2 * C if model.get("position") == "rope" else 0
    return 4 * batch_size * T * (L * (34 * C + rope + 5 * H * T) + 2 * vocab_size)


def training_bytes(model: dict, vocab_size: int, batch_size: int) -> tuple[int, int]:
    """(parameters, bytes a training step needs) for a model config (the keys of configs/model/*.yaml)."""
    p = parameters(model, vocab_size)
    return p, 16 * p + activation_bytes(model, vocab_size, batch_size)


def floor_bytes(model: dict, batch_size: int) -> tuple[int, int]:
    """(a floor of the parameters, of the bytes a training step needs), without torch or the vocabulary: the
    attention's four C x C weights per layer and the activations without the logits. Never above training_bytes."""
    p = 4 * model["n_layer"] * model["n_embd"] ** 2
    return p, 16 * p + activation_bytes(model, 0, batch_size)


def available_bytes(accelerator: str | None) -> tuple[int, str] | None:
    """What the device has: a CUDA GPU's total memory, else the machine's available memory (None if unknown)."""
    if accelerator in ("gpu", "cuda", "auto", None):
        import torch

        if torch.cuda.is_available():
            return torch.cuda.mem_get_info()[1], f"GPU {torch.cuda.get_device_name()}"
    return machine_bytes()


def machine_bytes() -> tuple[int, str] | None:
    """The machine's available memory (None if unknown), read without torch."""
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024, "this machine (available memory)"
    except (OSError, KeyError, ValueError):
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this machine"
        except (ValueError, OSError):
            return None


def check_floor(model: dict, batch_size: int) -> None:
    """check() before torch, on a machine with no GPU: a ConfigError when even the floor of the estimate exceeds
    the machine's available memory."""
    p, need = floor_bytes(model, batch_size)
    have = machine_bytes()
    if have is not None and need > have[0]:
        raise ConfigError(
            f"the model's attention weights alone are {count(p)} parameters, and training it at batch {batch_size} "
            "needs at least "
            f"{need / 2**30:,.1f} GiB (weights, gradients, AdamW state, activations), more than the "
            f"{have[0] / 2**30:,.1f} GiB of {have[1]}; use a smaller model or batch, or check_memory=false to try "
            "anyway.")


def check_draw(n_tokens: int, need: int) -> None:
    """random_tokens draws its ids at once, in the machine's memory (``need`` bytes at the peak): a ConfigError, before
    torch, when that exceeds the machine's available memory (it had been numpy's 'Unable to allocate' after 9 s)."""
    have = machine_bytes()
    if have is not None and need > have[0]:
        raise ConfigError(
            f"corpus.n_tokens={n_tokens} draws {need / 2**30:,.1f} GiB of token ids at once, more than the "
            f"{have[0] / 2**30:,.1f} GiB of {have[1]}; lower corpus.n_tokens, or check_memory=false to try anyway.")


def check(model: dict, vocab_size: int, batch_size: int, accelerator: str | None) -> None:
    """A ConfigError (one line) when the estimate exceeds what the device has; ``check_memory=false`` skips it."""
    p, need = training_bytes(model, vocab_size, batch_size)
    have = available_bytes(accelerator)
    if have is not None and need > have[0]:
        raise ConfigError(
            f"the model has {count(p)} parameters and training it at batch {batch_size} needs about "
            f"{need / 2**30:,.1f} GiB (weights, gradients, AdamW state, activations), more than the "
            f"{have[0] / 2**30:,.1f} GiB of {have[1]}; use a smaller model or batch, or check_memory=false to try "
            "anyway.")

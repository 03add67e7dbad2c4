"""Will training fit? An estimate of the memory a config needs, made from the config alone (nothing allocated),
checked against what the accelerator or the machine has before the model is built.

The estimate: fp32 weights, their gradients and AdamW's two moments (16 bytes a parameter), plus the activations
one batch keeps for the backward pass, roughly 34 x C + 5 x H x T values per token and layer (Korthikanti et al.
2022, counted in fp32 here) and the logits. Rough on purpose: it is there to refuse a model that cannot possibly
fit (which would otherwise allocate until the kernel kills the process, or another one), not to plan a tight fit.
"""

from __future__ import annotations

import os

import torch

from tinygpt.runtime.errors import ConfigError


def parameters(n_layer: int, n_embd: int, n_head: int, block_size: int, vocab_size: int, bias: bool = False,
               qk_norm: bool = False) -> int:
    """The GPT's parameter count, exactly (tied embedding counted once): what GPT(...).num_params(False) gives."""
    C, D = n_embd, n_embd // n_head
    per_layer = 12 * C * C + 2 * C + (11 * C if bias else 0) + ((4 if bias else 2) * D if qk_norm else 0)
    return vocab_size * C + block_size * C + n_layer * per_layer + (2 * C if bias else C)


def training_bytes(model: dict, vocab_size: int, batch_size: int) -> tuple[int, int]:
    """(parameters, bytes a training step needs) for a model config (the keys of configs/model/*.yaml)."""
    attn = model.get("attn") or {}
    L, C, H, T = model["n_layer"], model["n_embd"], model["n_head"], model["block_size"]
    p = parameters(L, C, H, T, vocab_size, bool(model.get("bias", False)), bool(attn.get("qk_norm", False)))
    activations = 4 * batch_size * T * (L * (34 * C + 5 * H * T) + 2 * vocab_size)
    return p, 16 * p + activations


def available_bytes(accelerator: str | None) -> tuple[int, str] | None:
    """What the device has: a CUDA GPU's total memory, else the machine's available memory (None if unknown)."""
    if accelerator in ("gpu", "cuda", "auto", None) and torch.cuda.is_available():
        return torch.cuda.mem_get_info()[1], f"GPU {torch.cuda.get_device_name()}"
    try:
        with open("/proc/meminfo") as f:
            info = dict(line.split(":", 1) for line in f)
        return int(info["MemAvailable"].split()[0]) * 1024, "this machine (available memory)"
    except (OSError, KeyError, ValueError):
        try:
            return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "this machine"
        except (ValueError, OSError):
            return None


def check(model: dict, vocab_size: int, batch_size: int, accelerator: str | None) -> None:
    """A ConfigError (one line) when the estimate exceeds what the device has; ``check_memory=false`` skips it."""
    p, need = training_bytes(model, vocab_size, batch_size)
    have = available_bytes(accelerator)
    if have is not None and need > have[0]:
        raise ConfigError(
            f"the model has {p / 1e6:,.0f}M parameters and training it at batch {batch_size} needs about "
            f"{need / 2**30:,.1f} GiB (weights, gradients, AdamW state, activations), more than the "
            f"{have[0] / 2**30:,.1f} GiB of {have[1]}; use a smaller model or batch, or check_memory=false to try "
            "anyway.")

"""The optimizer recipe (configs/optim/adamw_cosine.yaml): AdamW with weight decay on 2-D weights only, linear
warmup then cosine decay per step, and gradient clipping by norm that skips the no-op multiply on the CPU.

``AdamWCosine`` is built from the config by Hydra at set-up (checking every value before any work) and injected
into the LightningModule, which calls it from ``configure_optimizers``.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from tinygpt.runtime.checks import as_written, is_int, is_number, true_or_false

if TYPE_CHECKING:
    from torch import nn


def lr_at(step: int, *, lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Linear warmup from 0 to lr over warmup_steps, then cosine to min_lr at decay_steps, then flat."""
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay 2-D weights (matmuls, embeddings); not biases or LayerNorm gains. Tied weights once."""
    decay, no_decay = [], []
    for p in model.parameters():  # yields a shared (tied) tensor once
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def clip_grad_norm_cpu_(parameters, max_norm: float):
    """torch.nn.utils.clip_grad_norm_ for gradients in CPU memory: the same norm and the same factor
    min(1, max_norm / (norm + 1e-6)), but the gradients are multiplied only when the factor is below 1 (torch
    multiplies every gradient by it on every step, so as not to read the norm back from a GPU; on the CPU
    reading it costs nothing). Bit-identical gradients; returns the total norm (a tensor)."""
    import torch  # here, so that the settings' class is read without torch (the config's schema: train.schema)

    params = [p for p in parameters if p.grad is not None]
    total = torch.nn.utils.get_total_norm([p.grad for p in params])
    if not bool(float(max_norm) / (total + 1e-6) >= 1.0):  # a NaN norm scales too, as torch does
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


class AdamWCosine:
    """AdamW over ``param_groups`` with the ``lr_at`` schedule (stepped every optimizer step). Checks every
    setting on construction: one sentence naming the first bad value (optim.<key>=...)."""

    def __init__(self, lr: float = 1e-3, min_lr: float = 1e-4, warmup_steps: int = 100, decay_steps: int = 2000,
                 betas: tuple[float, float] = (0.9, 0.99), weight_decay: float = 0.1, fused_adam: bool = True):
        for key, value in (("lr", lr), ("min_lr", min_lr), ("weight_decay", weight_decay)):
            if not is_number(value):
                raise ValueError(f"optim.{key}={value!r} must be a number.")
        for key, value in (("warmup_steps", warmup_steps), ("decay_steps", decay_steps)):
            if not is_int(value):
                raise ValueError(f"optim.{key}={value!r} must be an integer number of steps.")
        if not lr > 0:
            raise ValueError(f"optim.lr={as_written(lr)} must be > 0.")
        if not 0 <= min_lr <= lr:
            raise ValueError(f"optim.min_lr={as_written(min_lr)} must be in [0, optim.lr] = [0, {as_written(lr)}].")
        if warmup_steps < 0:
            raise ValueError(f"optim.warmup_steps={warmup_steps} must be >= 0.")
        if decay_steps < 1:
            raise ValueError(f"optim.decay_steps={decay_steps} must be >= 1.")
        if weight_decay < 0:
            raise ValueError(f"optim.weight_decay={as_written(weight_decay)} must be >= 0.")
        if not (len(betas) == 2 and all(is_number(b) and 0 <= b < 1 for b in betas)):
            raise ValueError(f"optim.betas={list(betas)!r} must be two numbers in [0, 1).")
        true_or_false("optim.fused_adam", fused_adam)
        self.lr, self.min_lr, self.warmup_steps, self.decay_steps = lr, min_lr, warmup_steps, decay_steps
        self.betas, self.weight_decay, self.fused_adam = tuple(betas), weight_decay, fused_adam

    def settings(self) -> dict:
        """The settings as plain data (the checkpoint's hyper-parameters)."""
        return {"lr": self.lr, "min_lr": self.min_lr, "warmup_steps": self.warmup_steps,
                "decay_steps": self.decay_steps, "betas": list(self.betas), "weight_decay": self.weight_decay,
                "fused_adam": self.fused_adam}

    def lr_factor(self, step: int) -> float:
        """The schedule as a multiple of lr (what LambdaLR takes)."""
        return lr_at(step, lr=self.lr, min_lr=self.min_lr, warmup_steps=self.warmup_steps,
                     decay_steps=self.decay_steps) / self.lr

    def __call__(self, model: nn.Module, fused: bool = True) -> dict:
        """configure_optimizers' answer for ``model``. ``fused=False`` takes the foreach implementation (the
        module asks for it where Lightning cannot clip a fused optimizer's gradients: mixed precision)."""
        import torch

        groups = param_groups(model, self.weight_decay)
        opt = torch.optim.AdamW(groups, lr=self.lr, betas=self.betas, fused=(self.fused_adam and fused) or None)
        schedule = torch.optim.lr_scheduler.LambdaLR(opt, self.lr_factor)
        for part in model.modules():  # a model patch may step its own parameters its own way (hooks on the step)
            attach = getattr(part, "attach_to_optimizer", None)
            if callable(attach):
                attach(opt)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

"""Experiment 2's reparametrisation controls (design 2): the unscaled attention with W_Q and W_K made to start,
and optionally to move, as the scaled attention's do under Adam.

With the scores q.k / sqrt(d_k), write W_Q = f W_Q' and W_K = f W_K' with f = d_k^(1/4): the scores are
(W_Q' x).(W_K' x) with no factor. An unscaled attention whose q and k rows start divided by f therefore computes
the scaled arm's scores at init (``step=False``: the init alone). Adam moves every parameter by about lr whatever
its gradient's scale, so W_Q' follows W_Q / f only when its updates are divided by f too (``step=True``); the
decoupled weight decay is kept at lr x wd, the relative decay W_Q has. What remains different from the scaled
arm is what sees the raw gradient: gradient clipping (the rows' gradient is f times the scaled arm's) and Adam's
eps. ``QKReparam(step=...)(model)`` is a model patch (``model.patch``); the step division attaches to the
optimizer the run builds (tinygpt.train.optim: a part of the model with ``attach_to_optimizer``).
"""

from __future__ import annotations

import torch

from tinygpt.model.gpt import GPT
from tinygpt.runtime.checks import true_or_false


class QKReparam:
    """The q and k rows of every layer's c_attn (weight and bias) divided by d_k^(1/4) (``init``), and each
    optimizer step's update of them too (``step``). Only for an unscaled attention (model.attn.scale=none):
    with the factor in the formula it would apply twice."""

    def __init__(self, init: bool = True, step: bool = False):
        true_or_false("QKReparam init", init)
        true_or_false("QKReparam step", step)
        if step and not init:
            raise ValueError("QKReparam step=true needs init=true: the rows move as the scaled arm's only from where "
                             "the scaled arm's start.")
        self.init, self.step = init, step

    def __call__(self, model: GPT) -> GPT:
        if model.config.attn.scale != "none":
            raise ValueError(f"QKReparam is the unscaled arm's control; model.attn.scale="
                             f"{model.config.attn.scale!r} would apply the factor twice (use scale=none).")
        for block in model.blocks:
            attn = block.attn
            f = (attn.n_embd // attn.n_head) ** 0.25  # d_k^(1/4)
            rows = 2 * attn.n_embd  # q's and k's rows of the fused (3C, C) weight
            if self.init:
                with torch.no_grad():
                    attn.c_attn.weight[:rows] /= f
                    if attn.c_attn.bias is not None:
                        attn.c_attn.bias[:rows] /= f
            if self.step:
                attn.attach_to_optimizer = StepDivider(attn.c_attn, rows, f).attach
        return model


class StepDivider:
    """Divides the first ``rows`` of a Linear's weight and bias's Adam update by ``factor`` at every optimizer step
    (hooks around ``optimizer.step``; a step the gradient scaler skips calls neither)."""

    def __init__(self, linear: torch.nn.Linear, rows: int, factor: float):
        self.params = [p for p in (linear.weight, linear.bias) if p is not None]
        self.rows, self.factor = rows, factor
        self._before: list[tuple[torch.Tensor, torch.Tensor, float]] = []

    def attach(self, optimizer: torch.optim.Optimizer) -> None:
        optimizer.register_step_pre_hook(self._save)
        optimizer.register_step_post_hook(self._divide)

    def _save(self, optimizer, args, kwargs) -> None:
        groups = {id(p): g for g in optimizer.param_groups for p in g["params"]}
        self._before = []
        for p in self.params:
            group = groups[id(p)]
            decay = 1.0 - group["lr"] * group.get("weight_decay", 0.0)  # AdamW: p *= 1 - lr * wd, then the update
            self._before.append((p, p.detach()[: self.rows].clone(), decay))

    def _divide(self, optimizer, args, kwargs) -> None:
        with torch.no_grad():
            for p, old, decay in self._before:
                now = p[: self.rows]
                decayed = old * decay
                now.copy_(decayed + (now - decayed) / self.factor)  # the Adam update, divided; the decay as it was
        self._before = []

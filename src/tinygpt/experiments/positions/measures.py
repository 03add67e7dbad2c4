"""What Experiment 4 measures of a model, torch-only (docs/experiments/positions/DESIGN.md, "Measures"):

- ``hidden_states``: the residual stream after the embedding and after each block, at every position;
- ``probe_errors``: a ridge regression from a hidden state to the position t, fitted on some windows and scored on
  the others (``fit_and_held``: the even-numbered and the odd-numbered ones): each held-out window's squared error
  and its total sum of squares (R^2 = 1 - sum SSE / sum SST);
- ``attention_output_power``: the mean square of the first layer's attention output at each position (the heads'
  outputs concatenated, before the output projection): the variance the causal mask makes shrink with position;
- ``long_window_losses``: the teacher-forced loss at every position of windows longer than the trained context.
"""

from __future__ import annotations

import torch
from torch import Tensor

from tinygpt.model.gpt import GPT
from tinygpt.train.probes.diagnostics import evaluating, window_losses

RIDGE = 1.0  # the probe's penalty, on standardised features


def hidden_states(model: GPT, x: Tensor) -> Tensor:
    """(L + 1, N, T, C) float64: the residual stream entering block 0 (the embedding) and leaving each block."""
    found: list[Tensor] = []
    hooks = [model.drop.register_forward_hook(lambda m, i, out: found.append(out.detach()))]
    hooks += [b.register_forward_hook(lambda m, i, out: found.append(out.detach())) for b in model.blocks]
    try:
        with evaluating(model):
            model(x)
    finally:
        for h in hooks:
            h.remove()
    return torch.stack(found).double().cpu()  # (L + 1, N, T, C)


def fit_and_held(n: int) -> tuple[Tensor, Tensor]:
    """The probe's split of ``n`` windows: fitted on the even-numbered ones, scored on the odd-numbered ones."""
    index = torch.arange(n)  # (n,)
    return index[index % 2 == 0], index[index % 2 == 1]


def probe_errors(states: Tensor, fit: Tensor, held: Tensor, ridge: float = RIDGE) -> tuple[Tensor, Tensor]:
    """A ridge probe per layer from the hidden state to the position: states (L + 1, N, T, C); ``fit`` and ``held``
    index the windows it is fitted on and scored on. Returns (SSE (L + 1, held windows), SST (held windows,)): each
    held-out window's squared error over its T positions, and its squared deviation from the fitted windows' mean
    position (the same for every window: each holds positions 0 .. T - 1)."""
    layers, _, T, C = states.shape
    t = torch.arange(T, dtype=torch.float64)  # (T,)
    sse = torch.empty(layers, len(held), dtype=torch.float64)
    for layer in range(layers):
        a = states[layer, fit].reshape(-1, C)  # (fit windows * T, C)
        b = states[layer, held].reshape(-1, C)  # (held windows * T, C)
        mean, sd = a.mean(0), a.std(0).clamp_min(1e-12)
        a, b = (a - mean) / sd, (b - mean) / sd
        target = t.repeat(len(fit))  # (fit windows * T,)
        w = torch.linalg.solve(a.T @ a + ridge * torch.eye(C, dtype=torch.float64), a.T @ (target - target.mean()))
        predicted = b @ w + target.mean()  # (held windows * T,)
        sse[layer] = ((predicted - t.repeat(len(held))) ** 2).reshape(len(held), T).sum(1)
    sst = torch.full((len(held),), float(((t - t.mean()) ** 2).sum()), dtype=torch.float64)
    return sse, sst


def attention_output_power(model: GPT, x: Tensor) -> Tensor:
    """(N, T) float64: for each window and position, the mean square over its components of the first layer's
    attention output before its output projection (the heads' outputs side by side)."""
    found: list[Tensor] = []
    hook = model.blocks[0].attn.c_proj.register_forward_pre_hook(lambda m, args: found.append(args[0].detach()))
    try:
        with evaluating(model):
            model(x)
    finally:
        hook.remove()
    y = found[0].double().cpu()  # (N, T, C)
    return (y**2).mean(-1)  # (N, T)


def long_window_losses(model: GPT, x: Tensor, y: Tensor, batch_size: int = 8) -> Tensor:
    """(N, T_long) float64: the teacher-forced loss at every position of windows longer than the trained context
    (the model must attend past it: model.extrapolate)."""
    return window_losses(model, x, y, batch_size=batch_size)

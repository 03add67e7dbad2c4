"""What a loss curve does not show: honest loss, leaks from the future, and what attention looks like.

- ``autoregressive_loss``: each position scored from its prefix alone (the model is run on x[:t+1]
  and only the last position is scored). Equals the teacher-forced loss for a causal model; for a
  model that can see the future it is the honest loss.
- ``future_leak``: max |change in logits at positions <= t| when the tokens after t are replaced.
  Exactly 0 for a correct causal model.
- ``attention_stats``: mean attention entropy (each query row divided by log(number of visible
  keys): 1 = uniform, 0 = one-hot) and the largest pre-softmax logit, on a probe batch, through the
  math path.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import Tensor

from tinygpt.attention import causal_mask
from tinygpt.model import GPT


@contextmanager
def evaluating(model: torch.nn.Module):
    """Eval mode and no grad inside; the previous mode is restored after."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            yield model
    finally:
        model.train(was_training)


def autoregressive_loss(model: GPT, x: Tensor, y: Tensor) -> float:
    """Mean cross-entropy of y[:, t] given x[:, :t+1] only, over all t. x, y: (N, T)."""
    N, T = x.shape
    total = 0.0
    with evaluating(model):
        for t in range(T):
            logits, _ = model(x[:, : t + 1])  # (N, t+1, V): only the last position is scored
            total += torch.nn.functional.cross_entropy(logits[:, -1], y[:, t], reduction="sum").item()
    return total / (N * T)


def teacher_forced_loss(model: GPT, x: Tensor, y: Tensor) -> float:
    with evaluating(model):
        return model(x, y)[1].item()


def future_leak(model: GPT, x: Tensor, positions: list[int] | None = None, seed: int = 0) -> float:
    """max |logits(x)[:, :t+1] - logits(x')[:, :t+1]| where x' replaces the tokens after t at random."""
    N, T = x.shape
    positions = positions if positions is not None else sorted({0, T // 4, T // 2, 3 * T // 4, T - 2})
    gen = torch.Generator(device="cpu").manual_seed(seed)
    worst = 0.0
    with evaluating(model):
        base, _ = model(x)  # (N, T, V)
        for t in positions:
            if not 0 <= t < T - 1:
                continue
            x2 = x.clone()
            x2[:, t + 1 :] = torch.randint(0, model.config.vocab_size, (N, T - t - 1), generator=gen).to(x.device)
            other, _ = model(x2)
            worst = max(worst, (base[:, : t + 1] - other[:, : t + 1]).abs().max().item())
    return worst


def attention_stats(model: GPT, x: Tensor) -> dict[str, float | list[float]]:
    """Normalised attention entropy and max pre-softmax logit on x (N, T), per layer and overall."""
    N, T = x.shape
    inputs = []
    hooks = [b.attn.register_forward_pre_hook(lambda m, args: inputs.append(args[0])) for b in model.blocks]
    try:
        with evaluating(model):
            _, _, maps = model(x, return_weights=True)  # n_layer x (N, H, T, T)
            logits = [b.attn.logits(inp) for b, inp in zip(model.blocks, inputs, strict=True)]  # n_layer x (N, H, T, T)
    finally:
        for h in hooks:
            h.remove()
    causal = model.config.attn.causal
    visible = causal_mask(T, T, x.device) if causal else torch.ones(T, T, dtype=torch.bool, device=x.device)
    n_visible = visible.sum(-1)  # (T,)
    rows = n_visible > 1  # a row with one visible key has no choice to make: skip it
    entropies, max_logits = [], []
    for w, s in zip(maps, logits, strict=True):
        p = w.clamp_min(1e-30)
        h = -(w * p.log()).sum(-1)  # (N, H, T)
        h = h[..., rows] / torch.log(n_visible[rows].float())  # each row / log(#visible keys)
        entropies.append(h.mean().item())
        max_logits.append(s.masked_fill(~visible, float("-inf")).max().item())
    return {
        "attn_entropy": sum(entropies) / len(entropies),
        "attn_max_logit": max(max_logits),
        "attn_entropy_per_layer": entropies,
        "attn_max_logit_per_layer": max_logits,
    }


def run_all(model: GPT, x: Tensor, y: Tensor) -> dict:
    """All diagnostics on a fixed batch of validation windows x, y (N, T)."""
    tf = teacher_forced_loss(model, x, y)
    out = {
        "val_loss_autoregressive": autoregressive_loss(model, x, y),
        "val_loss_probe": tf,  # teacher-forced on the same windows: equal for a causal model
        "future_leak": future_leak(model, x),
    }
    out.update(attention_stats(model, x))
    return out

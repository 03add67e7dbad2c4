"""Every training step's loss, kept where the loss is computed, in blocks made once per ``BLOCK`` steps.

A step's loss is written into a slot of its block (a device-to-device copy: no read-back, no sync on a GPU); no
tensor made during a step outlives it. Keeping each step's 0-dim loss instead left one small allocation per step
alive in the middle of the memory the step's activations had just freed: glibc could then reuse none of those
holes whole, took every next step's activations from fresh memory at the top of its heap, and a default run's
memory grew from step to step between trims (docs/benchmarks.md).
"""

from __future__ import annotations

import torch

BLOCK = 1024  # steps per block: 4 KiB of float32 each


class StepLosses:
    """Appended once per step, read at checkpoints and at the end: ``all()`` is the (steps,) tensor of every loss in
    order, ``tail_mean(n)`` the mean of the last n as torch computes it on that tensor's slice."""

    def __init__(self, losses: torch.Tensor | None = None):
        """``losses``: a (steps,) tensor to continue from (a checkpoint's), kept as the first block."""
        self.blocks: list[torch.Tensor] = []
        self.used = 0  # slots written in the last block
        if losses is not None and len(losses):
            self.blocks.append(losses.clone())  # (steps,)
            self.used = len(losses)

    def append(self, loss: torch.Tensor) -> None:
        """``loss``: a 0-dim tensor, detached."""
        if not self.blocks or self.used == len(self.blocks[-1]):
            self.blocks.append(torch.empty(BLOCK, dtype=loss.dtype, device=loss.device))  # (BLOCK,)
            self.used = 0
        self.blocks[-1][self.used].copy_(loss)
        self.used += 1

    def __len__(self) -> int:
        return sum(len(block) for block in self.blocks[:-1]) + self.used

    def all(self) -> torch.Tensor:
        """Every step's loss in order, (steps,), on the losses' device (an empty tensor before the first step)."""
        if not self.blocks:
            return torch.empty(0)
        return torch.cat([*self.blocks[:-1], self.blocks[-1][:self.used]])  # (steps,)

    def tail_mean(self, n: int) -> float:
        """The mean of the last ``n`` losses, in float32 (n >= 1, at most len(self))."""
        return self.all()[-n:].float().mean().item()

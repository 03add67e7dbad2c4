"""Windows of token ids: random training windows drawn per step, fixed evenly spaced validation windows.

Training batches are a pure function of (seed, step, rank, world size): step s draws the global batch,
world_size x batch_size window starts, from ``np.random.default_rng([seed, s, 0])``, and rank r takes
its r-th slice of batch_size. So a run on N processes with data.batch_size=b sees, step for step, the
same windows as one process with data.batch_size=N*b (its gradient is their mean: the same update up to
rounding), one process sees what it always saw, and a resumed run continues with exactly the batches it
would have seen, because the sampler's position is the global step stored in every checkpoint.
"""

from __future__ import annotations

import numpy as np
import torch
from torch.utils.data import IterableDataset


def windows_at(ids: np.ndarray, starts: np.ndarray, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of block_size + 1 tokens starting at ``starts`` -> inputs and next-token targets."""
    w = torch.from_numpy(ids[starts[:, None] + np.arange(block_size + 1)].astype(np.int64))  # (N, T+1)
    return w[:, :-1], w[:, 1:]  # x (N, T), y (N, T)


class RandomWindows(IterableDataset):
    """Endless (x, y) batches of random windows: step s draws world_size * batch_size starts from
    rng([seed, s, 0]) (the trailing 0 keeps the single-process stream of earlier versions) and this rank
    takes its slice of batch_size."""

    def __init__(self, ids: np.ndarray, block_size: int, batch_size: int, seed: int, overfit: bool = False):
        self.ids, self.block_size, self.batch_size, self.seed = ids, block_size, batch_size, seed
        self.overfit = overfit  # debug: every step gets step 0's batch
        self.start_step, self.rank, self.world_size, self.length = 0, 0, 1, None

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, 0 if self.overfit else step, 0])
        starts = rng.integers(0, len(self.ids) - self.block_size - 1, size=self.world_size * self.batch_size,
                              endpoint=True)  # (world_size * B,): the global batch
        mine = starts[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]  # (B,): this rank's slice
        return windows_at(self.ids, mine, self.block_size)  # x (B, T), y (B, T)

    def __len__(self) -> int:
        """All steps of the run, counted from step 0, so a resumed epoch's batch index (restored by Lightning)
        and its length agree, and progress bars know the total."""
        if self.length is None:
            raise TypeError("RandomWindows is endless unless a length is set")
        return self.length

    def __iter__(self):  # steps start_step .. length - 1
        step = self.start_step
        while self.length is None or step < self.length:
            yield self.batch(step)
            step += 1


def fixed_windows(ids: np.ndarray, block_size: int, max_windows: int,
                  end_aligned: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Evenly spaced validation windows over the whole split.

    ``end_aligned`` None: windows start evenly spaced from the split's first token, non-overlapping (all of them
    if they fit); the last position of each scores a token that depends on block_size. ``end_aligned`` L (at least
    block_size): the windows' last targets are evenly spaced over the split's tokens L .. end, wherever the window
    starts, so at every block_size up to L window i ends on the same token: runs at different context lengths
    score the same last tokens (a paired comparison). Up to (len - 1 - L) // L + 1 such windows have last targets
    at least L apart; more (at most one per token) overlap."""
    if end_aligned is None:
        n_all = (len(ids) - 1) // block_size
        n = min(n_all, max_windows)
        starts = np.linspace(0, len(ids) - block_size - 1, n).astype(np.int64)
        return windows_at(ids, starts, block_size)
    if end_aligned < block_size:
        raise ValueError(f"data.val_end_aligned={end_aligned} is shorter than data.block_size={block_size}; it must "
                         "be at least the context the windows are laid out for.")
    n = min(len(ids) - end_aligned, max_windows)  # one window per last target at most
    if n < 1:
        raise ValueError(f"data.val_end_aligned={end_aligned} leaves no window in a validation split of {len(ids)} "
                         "tokens; use a smaller value.")
    ends = np.linspace(end_aligned, len(ids) - 1, n).astype(np.int64)  # (n,) index of each window's last target
    return windows_at(ids, ends - block_size, block_size)  # the window starting at e - T ends its targets at e

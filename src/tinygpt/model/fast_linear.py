"""nn.Linear with a faster CPU path for a few rows: the matrix-vector products of KV-cache decoding.

Decoding one token multiplies every weight by one row: each product reads its whole weight for 2 FLOPs a
weight, so it is bound by memory, not arithmetic. Here (AMD EPYC, torch's MKL) ``F.linear`` on one row reads
the weight at ~10 GB/s whatever the thread count; the same product split into two half-weight products and
run as one ``torch.bmm`` reads it at ~30-40 GB/s on both cores: 2.7x faster over the 10.7M model's 24 weights
(scripts/benchmark.py, docs/benchmarks.md). Nothing changes for training (gradients on), for more than
``max_rows`` rows, for weights small enough to sit in a core's cache (the split then costs more than it
saves: 0.23 vs 0.12 ms over the 0.8M model's 16 weights) or off the CPU.

Same math, another summation kernel: the outputs agree with ``F.linear`` to float rounding (~1e-6 relative),
as F.linear on one row and on a hundred rows already do with each other.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class Linear(nn.Linear):
    max_rows = 8  # rows (B * T) up to which the split product is used
    min_weight_elements = 1 << 17  # 512 KiB of fp32: below this the weight stays in cache and F.linear wins

    def uses_split(self, x: Tensor) -> bool:
        """Whether ``forward(x)`` takes the split matrix-vector path."""
        w = self.weight
        return (
            x.device.type == "cpu"
            and not (torch.is_grad_enabled() and (w.requires_grad or x.requires_grad))
            and x.numel() <= self.max_rows * x.shape[-1]
            and w.numel() >= self.min_weight_elements
            and w.shape[0] % 2 == 0
        )

    def forward(self, x: Tensor) -> Tensor:
        if not self.uses_split(x):
            return F.linear(x, self.weight, self.bias)
        out_features = self.weight.shape[0]
        rows = x.reshape(-1, x.shape[-1])  # (R, in)
        halves = self.weight.view(2, out_features // 2, -1)  # (2, out/2, in): the weight's two row halves
        y = torch.bmm(halves, rows.t().expand(2, -1, -1))  # (2, out/2, in) @ (2, in, R) -> (2, out/2, R)
        y = y.reshape(out_features, -1).t()  # (out, R) -> (R, out)
        if self.bias is not None:
            y = y + self.bias
        return y.reshape(*x.shape[:-1], out_features)  # (..., out)

"""A faster CPU path for the matrix-vector products of KV-cache decoding, swapped in explicitly.

Decoding one token multiplies every weight by one row: each product reads its whole weight for 2 FLOPs a
weight, so it is bound by memory, not arithmetic. ``F.linear`` on one row (MKL) reads the weight on one core;
the same product split into two half-weight products and run as one ``torch.bmm`` reads it on both. Nothing
changes for training (gradients on), for more than ``max_rows`` rows, for weights small enough to sit in a
core's cache (the split then costs more than it saves) or off the CPU. Measured in docs/benchmarks.md.

Same math, another summation kernel: the outputs agree with ``F.linear`` to float rounding (~1e-6 relative),
as F.linear on one row and on a hundred rows already do with each other.

The architecture never names this class: ``use_fast_decode(model)`` turns a built GPT's block Linears into
``FastDecodeLinear`` in place (same parameters, same state dict), and the sampling CLI and the benchmark call it.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class FastDecodeLinear(nn.Linear):
    """nn.Linear whose forward takes the split product for a few rows of a big weight without gradients."""

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


def use_fast_decode(model: nn.Module) -> nn.Module:
    """Turn every plain ``nn.Linear`` inside the model's blocks into a ``FastDecodeLinear`` (in place; the
    parameters are the same objects), and return the model. The tied output head is left as it is."""
    for module in model.blocks.modules():
        if type(module) is nn.Linear:
            module.__class__ = FastDecodeLinear
    return model

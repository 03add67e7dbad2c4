"""A faster CPU path for the matrix-vector products of KV-cache decoding, swapped in explicitly.

Decoding one token multiplies every weight by one row: each product reads its whole weight for 2 FLOPs a
weight, so it is bound by memory, not arithmetic. On some machines ``F.linear`` on one row (MKL on a 2-core AMD
EPYC) reads the weight on one core; the same product split into two half-weight products and run as one
``torch.bmm`` reads it on two. Where the BLAS already reads a one-row product on every core (MKL on an Intel
Xeon), the split is slower, so it is taken only where it was timed faster on the machine at hand
(``split_speedup``, once per process and model shape). It is timed on all of a model's products in a row, as a
decoded token runs them: one weight timed alone sits in the last-level cache, where one core reads fast, while a
token's products stream every weight from memory. Timed one weight at a time, the AMD EPYC's split looked no
faster (0.7-1.3x per weight, 32 MiB of L3) and was left out; over the 42 MB of `small`'s products it is 2.8x.
The timing decides at every thread count: with one thread the split has no second core, yet on the AMD EPYC its
``bmm`` still streamed `small`'s products faster than MKL's one-row ``F.linear`` (1.7x over the model, where a
rule had kept one thread on ``F.linear``). Nothing changes for training (gradients on), for more than
``max_rows`` rows, for weights small enough to sit in a core's cache (the split then costs more than it saves) or
off the CPU. Measured in docs/benchmarks.md.

Same math, another summation kernel: the outputs agree with ``F.linear`` to float rounding (~1e-6 relative),
as F.linear on one row and on a hundred rows already do with each other.

The architecture never names this class: ``use_fast_decode(model)`` turns a built GPT's block Linears into
``FastDecodeLinear`` in place (same parameters, same state dict), and the sampling CLI and the benchmark call it.
The decode loop's lean step (tinygpt.sampling.generate.CachedStep) asks ``uses_split`` once per generate call and
calls ``split_product`` or ``F.linear`` directly.
"""

from __future__ import annotations

import time

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class FastDecodeLinear(nn.Linear):
    """nn.Linear whose forward takes the split product for a few rows of a big weight without gradients."""

    max_rows = 8  # rows (B * T) up to which the split product is used
    min_weight_elements = 1 << 17  # 512 KiB of fp32: below this the weight stays in cache and F.linear wins
    split_margin = 1.25  # the split is taken where it was timed this much faster than F.linear (0: always)
    speedups: dict = {}  # (threads, the weights' shapes, dtype) -> F.linear's time / the split's, once per process
    decode_group: tuple = ()  # the weights of the model's products, in order (use_fast_decode sets it)

    def uses_split(self, x: Tensor) -> bool:
        """Whether ``forward(x)`` takes the split matrix-vector path."""
        return uses_split(x, self.weight, self.decode_group)

    def forward(self, x: Tensor) -> Tensor:
        return decode_linear(x, self.weight, self.bias, self.decode_group)


def uses_split(x: Tensor, weight: Tensor, group: tuple = ()) -> bool:
    """Whether ``decode_linear(x, weight, ...)`` takes the split matrix-vector path: few rows of a big weight,
    no gradients, the CPU, and the split timed faster than F.linear on this machine at this thread count, over
    ``group`` (the model's weights whose products a token runs in a row; the weight alone when empty)."""
    if not (
        x.device.type == "cpu"
        and not (torch.is_grad_enabled() and (weight.requires_grad or x.requires_grad))
        and x.numel() <= FastDecodeLinear.max_rows * x.shape[-1]
        and weight.numel() >= FastDecodeLinear.min_weight_elements
        and weight.shape[0] % 2 == 0
    ):
        return False
    return split_speedup(group or (weight,)) >= FastDecodeLinear.split_margin


def split_speedup(weights: Tensor | tuple, trials: int = 7) -> float:
    """F.linear's time / the split product's on one row through every weight of ``weights`` in turn (a model's
    products, as one decoded token runs them; or one weight), at the current thread count, timed once per process
    and set of shapes (the two taking turns, medians of ``trials``; a few ms for a small model). Whether one-row
    products use every core is the BLAS's choice, and it differs between machines: MKL's F.linear read a one-row
    product on one core of a 2-core AMD EPYC (the split, on both, was 2.8x faster over `small`'s products) but on
    both cores of an Intel Xeon (there the split is 2x slower). docs/benchmarks.md shows both paths on the machine
    that ran it."""
    weights = (weights,) if isinstance(weights, Tensor) else tuple(weights)
    key = (torch.get_num_threads(), tuple(tuple(w.shape) for w in weights), weights[0].dtype)
    if key not in FastDecodeLinear.speedups:
        rows = [torch.randn(1, w.shape[1], dtype=w.dtype) for w in weights]
        times: dict[str, list[float]] = {"linear": [], "split": []}
        with torch.no_grad():
            for _ in range(trials + 1):  # the first round warms up
                for name, product in (("linear", F.linear), ("split", split_product)):
                    t0 = time.perf_counter()
                    for x, weight in zip(rows, weights, strict=True):
                        product(x, weight)
                    times[name].append(time.perf_counter() - t0)
        linear, split = (sorted(t[1:])[trials // 2] for t in times.values())
        FastDecodeLinear.speedups[key] = linear / split
    return FastDecodeLinear.speedups[key]


def decode_linear(x: Tensor, weight: Tensor, bias: Tensor | None, group: tuple = ()) -> Tensor:
    """``F.linear(x, weight, bias)``, through the split product where ``uses_split`` says so."""
    if not uses_split(x, weight, group):
        return F.linear(x, weight, bias)
    return split_product(x, weight, bias)


def lean_product(layer: nn.Linear, rows: int) -> tuple:
    """(product, weight, bias) such that ``product(x, weight, bias)`` is ``layer(x)`` for x (rows, in) without
    gradients: F.linear, or where the layer would take the split, ``blocks_product`` on the weight's and bias's
    blocks, built here once (the lean decode step calls it per token)."""
    x = torch.empty(rows, 1, device=layer.weight.device).expand(-1, layer.in_features)  # (rows, in): its shape
    if not (type(layer) is FastDecodeLinear and uses_split(x, layer.weight, layer.decode_group)):
        return F.linear, layer.weight, layer.bias
    return blocks_product, weight_blocks(layer.weight), None if layer.bias is None else bias_blocks(layer.bias)


def split_product(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x (..., in) @ weight.T (+ bias) as one bmm over the weight's two row halves."""
    rows = x.reshape(-1, x.shape[-1])  # (R, in)
    y = blocks_product(rows, weight_blocks(weight), None if bias is None else bias_blocks(bias))  # (R, out)
    return y.reshape(*x.shape[:-1], weight.shape[0])  # (..., out)


def blocks_product(rows: Tensor, blocks: Tensor, bias: Tensor | None = None) -> Tensor:
    """rows (R, in) @ the weight's row blocks (k, out/k, in) -> (R, out), + the bias's blocks (k, out/k, 1): one
    bmm (baddbmm with a bias), the blocks going to the threads (``weight_blocks``, ``bias_blocks``). The lean
    decode step builds the blocks once per generate call and calls this directly: three ops a product (a token's
    products are memory-bound, and every op around them is time the memory stands idle)."""
    R, n = rows.shape
    if rows.stride() != (n, 1):
        rows = rows.contiguous()
    # (R, in) -> (k, in, R): rows.T for every block, strided as rows.t().expand(k, -1, -1) is, which bmm hands to
    # the BLAS (other strides for the same elements, (0, 1, 1) for one row, can send it down a slow loop)
    cols = rows.as_strided((blocks.shape[0], n, R), (0, 1, n))
    y = torch.bmm(blocks, cols) if bias is None else torch.baddbmm(bias, blocks, cols)  # (k, out/k, R)
    return y.view(1, -1) if R == 1 else y.view(-1, R).t()  # (out, R) -> (R, out)


def weight_blocks(weight: Tensor) -> Tensor:
    """weight (out, in) as its two row halves (2, out/2, in), a view. (Four blocks decoded `small` no faster on
    the AMD EPYC.)"""
    return weight.view(2, weight.shape[0] // 2, weight.shape[1])  # (2, out/2, in)


def bias_blocks(bias: Tensor) -> Tensor:
    """bias (out,) as the halves of ``weight_blocks``: (2, out/2, 1), a view."""
    return bias.view(2, bias.shape[0] // 2, 1)  # (2, out/2, 1)


def use_fast_decode(model: nn.Module) -> nn.Module:
    """Turn every plain ``nn.Linear`` inside the model's blocks into a ``FastDecodeLinear`` (in place; the
    parameters are the same objects), and return the model. The tied output head is left as it is. Each gets the
    group of the big weights among them (``decode_group``), over which the split is timed and chosen for all."""
    linears = [module for module in model.blocks.modules() if type(module) is nn.Linear]
    group = tuple(m.weight for m in linears if m.weight.numel() >= FastDecodeLinear.min_weight_elements
                  and m.weight.shape[0] % 2 == 0)
    for module in linears:
        module.__class__ = FastDecodeLinear
        module.decode_group = group  # a plain attribute: no parameter or buffer is added
    return model

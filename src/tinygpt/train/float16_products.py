"""float16 matrix products on a CPU, computed as a GPU's float16 GEMM computes them: the inputs are float16, the
products are summed in float32, and the result is rounded to float16 (inf where it passes 65504).

trainer.precision=16-mixed on a CPU runs torch's float16 autocast (setup.cpu_float16). A CPU without float16
arithmetic (no AVX512-FP16 or AMX-FP16) runs torch's float16 ``mm`` in a slow reference kernel (docs/benchmarks.md
has the figures); ``Float16Products`` routes each float16 product through float32's fast kernel instead: it
upcasts the float16 inputs (exactly: every float16 is a float32), multiplies in float32, and rounds the result to
float16 once. Every other op, the dtypes autocast chooses and the gradient scaler are unchanged, and so is where a
float16 product overflows. The result equals torch's own CPU float16 kernel to the last bit except where the two
sum in different orders (tests/train/test_float16_products.py).

It is a TorchDispatchMode (below autograd), so the backward's products are caught too; the run enters it for its
whole scope (run.RunScope), only when it trains in float16 on the CPU.
"""

from __future__ import annotations

import torch

from tinygpt.runtime.internals import torch_dispatch_mode

DISPATCH_MODE = torch_dispatch_mode()  # None where this torch lacks it: float16 products then run torch's own kernel

aten = torch.ops.aten
# what F.linear, torch.matmul and @ become on the CPU, forward and backward
PRODUCTS = frozenset({aten.mm.default, aten.bmm.default, aten.addmm.default, aten.baddbmm.default})


class Float16Products(DISPATCH_MODE or object):
    """Inside it, a matrix product with a float16 input is computed in float32 and rounded to float16."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in PRODUCTS and any(isinstance(a, torch.Tensor) and a.dtype == torch.float16 for a in args):
            up = [a.float() if isinstance(a, torch.Tensor) and a.dtype == torch.float16 else a for a in args]
            return func(*up, **kwargs).to(torch.float16)
        return func(*args, **kwargs)


def wanted(trainer) -> bool:
    """True when the trainer trains in float16 autocast on the CPU (the plugin setup.cpu_float16 passes)."""
    from lightning.pytorch.plugins import MixedPrecision

    plugin = trainer.precision_plugin
    return (DISPATCH_MODE is not None and isinstance(plugin, MixedPrecision) and plugin.device == "cpu"
            and plugin.precision == "16-mixed")

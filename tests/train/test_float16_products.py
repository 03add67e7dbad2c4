"""Float16Products: a float16 product computed in float32 and rounded once equals torch's own CPU float16 kernel
(to one unit in the last place where the two sum in another order), overflows where it does, carries the gradient
the same way, and leaves every other dtype's product alone."""

from contextlib import nullcontext

import torch
import torch.nn.functional as F
import lightning as L
from omegaconf import OmegaConf

from tinygpt.train import float16_products
from tinygpt.train.float16_products import Float16Products
from tinygpt.train.setup import cpu_float16


def ulps(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """|a - b| in units of float16's last place at b's magnitude (both float16, finite)."""
    spacing = torch.finfo(torch.float16).eps * b.float().abs().clamp_min(2.0 ** -14)
    return (a.float() - b.float()).abs() / spacing


def products(a, b, bias, batch_bias):
    """The four products the mode catches, as the model's code writes them."""
    return {
        "mm": a[0] @ b[0].T,
        "bmm": a @ b.transpose(-2, -1),
        "addmm": F.linear(a[0], b[0], bias),
        "baddbmm": torch.baddbmm(batch_bias, a, b.transpose(-2, -1)),
    }


def test_each_product_equals_torch_float16_kernel_and_overflows_where_it_does():
    torch.manual_seed(0)
    # scale 60: a.b has sd 60 * 60 * 8 = 28800, so about 2% of the entries pass 65504 (2.3 sd)
    a = (torch.randn(3, 24, 64) * 60).half()
    b = (torch.randn(3, 20, 64) * 60).half()
    bias, batch_bias = torch.randn(20).half(), torch.randn(3, 24, 20).half()
    native = products(a, b, bias, batch_bias)
    with Float16Products():
        mine = products(a, b, bias, batch_bias)
    overflowed = 0
    for name, n in native.items():
        m = mine[name]
        assert m.dtype == torch.float16, name
        assert torch.equal(torch.isinf(m), torch.isinf(n)), name  # the same entries overflow
        overflowed += int(torch.isinf(n).sum())
        finite = torch.isfinite(n)
        assert ulps(m[finite], n[finite]).max() <= 1.0, name
        assert (m[finite] == n[finite]).float().mean() > 0.9, name  # mostly bit-equal
    assert overflowed > 0  # the case tests the overflow, not only ordinary values


def test_the_gradient_through_an_autocast_linear_matches_torch_float16():
    torch.manual_seed(1)
    w0 = torch.randn(48, 32) * 0.2
    x = torch.randn(16, 32)

    def grads(mode):
        w = w0.clone().requires_grad_()
        with mode, torch.autocast("cpu", dtype=torch.float16):
            y = F.linear(x, w)  # float16 under autocast
            loss = (y.float() ** 2).sum()
        with mode:
            loss.backward()
        return y, w.grad

    y_native, g_native = grads(nullcontext())
    y_mine, g_mine = grads(Float16Products())
    assert y_mine.dtype == y_native.dtype == torch.float16
    assert ulps(y_mine, y_native).max() <= 1.0
    assert g_mine.dtype == torch.float32
    assert torch.allclose(g_mine, g_native, rtol=2e-3, atol=1e-3)


def test_other_dtypes_are_left_alone():
    torch.manual_seed(2)
    for dtype in (torch.float32, torch.bfloat16, torch.float64):
        a, b = torch.randn(8, 16, dtype=dtype), torch.randn(16, 8, dtype=dtype)
        outside = a @ b
        with Float16Products():
            inside = a @ b
        assert inside.dtype == dtype and torch.equal(inside, outside), dtype


def test_a_run_enters_it_only_for_float16_on_the_cpu():
    def trainer(precision):
        plugins = cpu_float16(OmegaConf.create({"accelerator": "cpu", "precision": precision}))
        return L.Trainer(accelerator="cpu", logger=False, plugins=plugins or None,
                         **({} if plugins else {"precision": precision}))

    assert float16_products.wanted(trainer("16-mixed"))
    assert not float16_products.wanted(trainer("bf16-mixed"))
    assert not float16_products.wanted(trainer("32-true"))

"""The checks of an attention *function* ``(q, k, v, mask) -> out``: q, k, v (B, H, T, D); ``mask`` bool, (T, T)
or (B, 1, T, T), True where query i may attend key j (``mask=hide``: True where it may not); out (B, H, T, D).

Each check compares the function with the formula itself, softmax(q k^T * scale + mask) v, in float64 (16-bit:
against float32 on the same rounded inputs).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from tinygpt.runtime.errors import first_line
from tinygpt.verify.result import TOL64, Result, VerifyError, described, relative_change
from tinygpt.verify.settings import Settings

B, H, D = 2, 2, 16
FP16_MAX = 65504.0  # float16's largest finite value


class Function:
    """The user's function, called in the convention it was declared with."""

    def __init__(self, fn, settings: Settings):
        self.fn, self.settings = fn, settings

    def __call__(self, q: Tensor, k: Tensor, v: Tensor, keep: Tensor) -> Tensor:
        mask = keep if self.settings.mask == "keep" else ~keep
        try:
            out = self.fn(q, k, v, mask)
        except Exception as err:
            raise VerifyError(f"the function called as f(q, k, v, mask) with q, k, v {tuple(q.shape)} and mask "
                              f"{tuple(mask.shape)} raised {described(err)}") from None
        out = out[0] if isinstance(out, (tuple, list)) else out
        if not isinstance(out, Tensor) or out.shape != v.shape:
            got = tuple(out.shape) if isinstance(out, Tensor) else type(out).__name__
            raise VerifyError(f"the function returned {got}; expected out of v's shape (B, H, T, D) = "
                              f"{tuple(v.shape)}.")
        return out

    def scale(self, d: int) -> float:
        return self.settings.scale if self.settings.scale is not None else 1.0 / math.sqrt(d)


def formula(q: Tensor, k: Tensor, v: Tensor, keep: Tensor, scale: float, dim: int = -1) -> Tensor:
    """softmax(q k^T * scale + mask) v, as written (a row with no visible key gives 0)."""
    scores = (q @ k.transpose(-2, -1)) * scale  # (B, H, T_q, T_k)
    weights = torch.softmax(scores.masked_fill(~keep, float("-inf")), dim=dim)  # (B, H, T_q, T_k)
    return weights.nan_to_num(0.0) @ v  # (B, H, T_q, D)


def causal(t: int) -> Tensor:
    return torch.ones(t, t, dtype=torch.bool).tril()  # (T, T), True = may attend


def qkv(gen: torch.Generator, t: int, d: int = D, std: float = 1.0, dtype=torch.float64) -> tuple[Tensor, ...]:
    return tuple(torch.randn(B, H, t, d, generator=gen, dtype=dtype) * std for _ in range(3))  # 3 x (B, H, T, D)


def lengths(settings: Settings) -> list[int]:
    return sorted({t for t in (1, 2, 8, 33, 64, settings.max_len) if t <= settings.max_len})


def check_formula(f: Function, gen: torch.Generator) -> Result:
    """Equal to the formula in float64, under the causal mask, a random mask and no mask; when it is not, which
    common slip it equals instead."""
    worst, where = 0.0, ""
    for t in (1, 5, 33):
        q, k, v = qkv(gen, t, std=2.0)
        rand = torch.rand(B, 1, t, t, generator=gen) < 0.6
        rand[..., torch.arange(t), torch.randint(0, t, (t,), generator=gen)] = True  # every row sees a key
        everything = torch.ones(t, t, dtype=torch.bool)
        for name, keep in (("causal", causal(t)), ("random", rand), ("all-visible", everything)):
            out, ref = f(q, k, v, keep), formula(q, k, v, keep, f.scale(D))
            err = relative_change(out, ref)
            if err > worst:
                worst, where = err, (name, t, q, k, v, keep, out)
    if worst <= TOL64:
        return Result("formula", "pass", f"max relative error {worst:.1e} (float64, causal, random and no mask)")
    name, t, q, k, v, keep, out = where
    return Result("formula", "fail", f"max relative error {worst:.2g}",
                  f"differs from softmax(q k^T * {f.scale(D):.4g} + mask) v under the {name} mask at T={t}"
                  + slip(out, q, k, v, keep, f.scale(D)) + ".")


def slip(out: Tensor, q: Tensor, k: Tensor, v: Tensor, keep: Tensor, scale: float) -> str:
    """', and equals it with <the slip>' when the output is one of the common slips' (empty when none fits)."""
    t = q.shape[-2]
    everything = torch.ones(t, t, dtype=torch.bool)
    others = {
        "the scale applied twice": formula(q, k, v, keep, scale * scale),  # 1/d_k, when the scale is 1/sqrt(d_k)
        "no scale": formula(q, k, v, keep, 1.0),
        "the softmax over the queries (dim -2) instead of the keys": formula(q, k, v, keep, scale, dim=-2),
        "the mask ignored": formula(q, k, v, everything, scale),
        "the mask's meaning inverted (True read as hidden)": formula(q, k, v, ~keep, scale),
    }
    for name, other in others.items():
        if relative_change(out, other) <= 1e-8:
            return f"; it equals the formula with {name}"
    return ""


def check_causality(f: Function, gen: torch.Generator) -> Result:
    """Under the causal mask, no query's output moves when the keys and values after it change (every cut, every
    length tried, at ordinary scores and at scores of about 1e6, where a finite fill such as -1e4 is outgrown)."""
    cuts = 0
    for t in lengths(f.settings):
        for std in (1.0, 1e3):
            q, k, v = qkv(gen, t, std=std)
            base = f(q, k, v, causal(t))
            for cut in range(1, t):
                k2, v2 = k.clone(), v.clone()
                k2[..., cut:, :] = torch.randn(k2[..., cut:, :].shape, generator=gen, dtype=k.dtype) * std
                v2[..., cut:, :] = torch.randn(v2[..., cut:, :].shape, generator=gen, dtype=v.dtype) * std
                moved = (f(q, k2, v2, causal(t))[..., :cut, :] - base[..., :cut, :]).abs().amax(dim=(0, 1, 3))
                cuts += 1
                if not torch.isfinite(moved).all() or moved.max() > TOL64 * base.abs().max():
                    i = int(torch.nonzero(~(moved <= TOL64 * base.abs().max()))[0])
                    fill = "" if std == 1.0 else ("; at ordinary scores it does: a finite fill (such as -1e4) that "
                                                  "large scores outgrow, where -inf never is")
                    return Result("causality", "fail", f"position {i} moved by {float(moved[i]):.2g}",
                                  f"at T={t}, changing the keys and values from position {cut} on moved the output "
                                  f"at position {i} (q, k, v of std {std:g}): the causal mask does not hide "
                                  f"later keys{fill}.")
    return Result("causality", "pass", f"no past output moved over {cuts} cuts (T up to {max(lengths(f.settings))})")


def check_padding(f: Function, gen: torch.Generator) -> Result:
    """Padded keys are invisible, rows whose every key is masked stay finite, the real rows equal the formula."""
    t = 12
    q, k, v = qkv(gen, t)
    real = torch.ones(B, t, dtype=torch.bool)
    real[0, :4] = False  # left padding: queries 0-3 of sequence 0 see no real key (all masked under causality)
    real[1, -3:] = False
    keep = causal(t) & real[:, None, None, :]  # (B, 1, T, T)
    out = f(q, k, v, keep)
    if not torch.isfinite(out).all():
        return Result("padding", "fail", f"{int((~torch.isfinite(out)).sum())} non-finite outputs",
                      "a query whose every key is masked (left padding) gives a non-finite output (the usual guard: "
                      "fill the scores with -inf, then give the rows that have no visible key zeros).")
    padded = (~real)[:, None, :, None].expand_as(k)  # (B, H, T, D): the padded positions' keys and values
    k2 = torch.where(padded, torch.randn(k.shape, generator=gen, dtype=k.dtype), k)
    v2 = torch.where(padded, torch.randn(v.shape, generator=gen, dtype=v.dtype), v)
    seen = keep.any(-1).expand(B, H, t)  # (B, H, T): the rows that see a real key
    moved = (f(q, k2, v2, keep) - out).abs()[seen].max()
    err = relative_change(out[seen], formula(q, k, v, keep, f.scale(D))[seen])
    if moved > TOL64 * out.abs().max():
        return Result("padding", "fail", f"real outputs moved by {float(moved):.2g}",
                      "changing the padded keys and values moved a real query's output: padded keys are visible.")
    if err > TOL64:
        return Result("padding", "fail", f"relative error {err:.2g}", "under a padding mask the real rows differ "
                      "from the formula.")
    filled = float(out[~seen].abs().max())  # the rows that see no real key (sequence 0's first 4)
    return Result("padding", "pass", f"padded keys invisible; all-masked rows finite (max |out| {filled:.2g})")


def check_batch(f: Function, gen: torch.Generator) -> Result:
    """One sequence's output does not depend on its neighbours in the batch."""
    t = 16
    q, k, v = (x.repeat(2, 1, 1, 1) for x in qkv(gen, t))  # B = 4
    base = f(q, k, v, causal(t))
    q2, k2, v2 = (x.clone() for x in (q, k, v))
    for x in (q2, k2, v2):
        x[1] = torch.randn(x[1].shape, generator=gen, dtype=x.dtype)
    moved = relative_change(f(q2, k2, v2, causal(t))[[0, 2, 3]], base[[0, 2, 3]])
    if moved > TOL64:
        return Result("batch", "fail", f"neighbours moved by {moved:.2g}",
                      "changing sequence 1 of the batch moved the others' outputs: sequences are mixed.")
    return Result("batch", "pass", "no neighbour moved (float64)")


def check_gradients(f: Function, gen: torch.Generator) -> Result:
    """torch.autograd.gradcheck in float64 under the causal mask, and finite gradients where a row has no visible
    key (the NaN that -inf fills give in the backward pass)."""
    q, k, v = (x[:1, :1, :4, :3].clone().requires_grad_() for x in qkv(gen, 4))  # (1, 1, 4, 3) each
    try:
        torch.autograd.gradcheck(lambda a, b, c: f(a, b, c, causal(4)), (q, k, v), eps=1e-6, atol=1e-5)
    except Exception as err:  # gradcheck's GradcheckError, or a backward that raises
        return Result("gradients", "fail", "gradcheck failed", f"float64 gradcheck: {first_line(err)}")
    q, k, v = (x.clone().requires_grad_() for x in qkv(gen, 6))
    keep = causal(6) & torch.tensor([False, True, True, True, True, True])[None, None, None, :]  # row 0 sees nothing
    (f(q, k, v, keep) * torch.randn(B, H, 6, D, generator=gen, dtype=torch.float64)).sum().backward()
    bad = sum(int((~torch.isfinite(x.grad)).sum()) for x in (q, k, v) if x.grad is not None)
    if bad:
        return Result("gradients", "fail", f"{bad} non-finite gradients",
                      "with a row whose every key is masked, the backward pass gives non-finite gradients.")
    return Result("gradients", "pass", "gradcheck passes (float64); finite with an all-masked row")


def check_16bit(f: Function, gen: torch.Generator) -> Result:
    """float16 and bfloat16 outputs finite and close to the function's own float32 output on the same rounded inputs,
    at ordinary scores and
    at scores whose unscaled product q.k passes float16's largest value while the scaled scores do not."""
    d, t = 64, 32
    tolerance = {torch.float16: 1e-2, torch.bfloat16: 5e-2}
    worst = {}
    for dtype, tol in tolerance.items():
        for std in (1.0, 50.0):  # 50: the diagonal q.q reaches ~1.6e5 unscaled, ~2e4 after 1/sqrt(64)
            q = torch.randn(B, H, t, d, generator=gen) * std
            k = q.clone()  # each query's own key scores highest: a clear, tie-free softmax
            v = torch.randn(B, H, t, d, generator=gen)
            q, k, v = (x.to(dtype) for x in (q, k, v))
            keep = causal(t)
            try:
                out = f(q, k, v, keep).float()
            except VerifyError as err:
                return Result("16-bit", verdict(f.settings), f"{dtype_name(dtype)} raised", str(err))
            ref = f(q.float(), k.float(), v.float(), keep).float()  # the same function in float32, same inputs
            if not torch.isfinite(ref).all():
                break  # float32 overflows too: not a 16-bit finding
            err = relative_change(out, ref)
            worst[dtype] = max(worst.get(dtype, 0.0), err)
            if err > tol:
                raw = float((q.float() @ k.float().transpose(-2, -1)).abs().max())
                why = (f"in {dtype_name(dtype)} the output is {'not finite' if math.isinf(err) else 'far from float32'}"
                       f" with q and k of std {std:g}")
                if dtype == torch.float16 and raw > FP16_MAX >= raw * f.scale(d):
                    why += (f": q k^T reaches {raw:.3g} before its scale, past float16's largest {FP16_MAX:g}, though "
                            f"scaled by {f.scale(d):.3g} it would be {raw * f.scale(d):.3g}; a scale applied after the "
                            "product overflows: multiply q by the scale (or q and k by its square root) before the "
                            "product")
                return Result("16-bit", verdict(f.settings), f"{dtype_name(dtype)} relative error {err:.2g}", why + ".")
    return Result("16-bit", "pass", ", ".join(f"{dtype_name(k)} rel. error {v:.1e}" for k, v in worst.items())
                  + " (at q.k past 65504 too)")


def verdict(settings: Settings) -> str:
    return "fail" if settings.strict_16bit else "warn"


def dtype_name(dtype) -> str:
    return str(dtype).removeprefix("torch.")


CHECKS = {
    "formula": check_formula,
    "causality": check_causality,
    "padding": check_padding,
    "batch": check_batch,
    "gradients": check_gradients,
    "16-bit": check_16bit,
}

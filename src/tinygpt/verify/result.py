"""One check's outcome: its verdict, the number measured and, when it did not pass, one sentence of what failed
and where."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor
from torch.overrides import TorchFunctionMode

VERDICTS = ("pass", "warn", "fail", "n/a")  # n/a: the check does not apply to this attention (and says why)
TOL64 = 1e-10  # float64: a correct attention moves a past output by rounding at most (usually exactly 0)
TOL32 = 1e-5  # float32 (an attention that computes in it whatever it is given): ~100 units of its last place


@dataclass(frozen=True)
class Result:
    check: str
    verdict: str  # pass | warn (a finding that is not a wrong answer: 16-bit) | fail | n/a (does not apply)
    measured: str  # the number behind the verdict, with what it measures
    why: str = ""  # what failed and where, one sentence (empty on a pass)

    @property
    def ok(self) -> bool:
        return self.verdict != "fail"

    def as_dict(self) -> dict:
        return asdict(self)


class VerifyError(ValueError):
    """The attention cannot be checked as given (its target does not import, its call does not fit): one sentence,
    exit status 2 from the command; not a verdict on its math."""


class CheckFailed(AssertionError):
    """``tinygpt.verify.check`` in a user's test: the failed checks' sentences."""


def described(err: BaseException) -> str:
    """'TypeError: <its message's first line>', or the type alone when it has no message (a bare assert)."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0]}" if text else type(err).__name__


def relative_change(new: Tensor, old: Tensor) -> float:
    """max |new - old| / max(|old|, tiny), inf when ``new`` is not finite where ``old`` is: how far an output moved,
    relative to its size."""
    new, old = new.double(), old.double()
    if not torch.isfinite(new).all() and torch.isfinite(old).all():
        return float("inf")
    return float((new - old).abs().max() / old.abs().max().clamp_min(1e-300)) if old.numel() else 0.0


def tolerance(dtype: torch.dtype) -> float:
    """The relative change that rounding in ``dtype`` allows a correct attention."""
    return TOL64 if dtype == torch.float64 else TOL32


def precision(dtype: torch.dtype) -> str:
    """'float64', or 'float32, the precision it computes in (tolerance 1e-05)': for a measured number."""
    name = str(dtype).removeprefix("torch.")
    return name if dtype == torch.float64 else f"{name}, the precision it computes in (tolerance {tolerance(dtype):g})"


class WorksIn:
    """A checked target's working precision: ``work`` (float64, or float32 where it computes in float32), the
    tolerance its checks allow and the words for it beside a measured number."""

    work: torch.dtype = torch.float64

    @property
    def tol(self) -> float:
        return tolerance(self.work)

    @property
    def precision(self) -> str:
        return precision(self.work)


class Downcasts(TorchFunctionMode):
    """While an attention runs on float64 inputs, whether any op turns a float64 tensor into a narrower float (a
    softmax in float32, x.float(), .type_as): then it computes in float32 whatever it is given, and its checks
    run in float32, as its authors meant (a float64 mask value becomes -inf in float32: never the check's upcast)."""

    def __init__(self):
        super().__init__()
        self.narrowest = torch.float64

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        given = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, Tensor) and a.is_floating_point()]
        if any(a.dtype == torch.float64 for a in given):
            for o in out if isinstance(out, (tuple, list)) else (out,):
                if isinstance(o, Tensor) and o.is_floating_point() and o.dtype != torch.float64:
                    self.narrowest = torch.float32  # float16 inside a float64 call is rare: judged as float32
        return out


def computes_in(call) -> torch.dtype:
    """float64, or float32 when ``call()`` (an attention on float64 inputs) narrows a float64 tensor inside."""
    watch = Downcasts()
    with watch, torch.no_grad():
        call()
    return watch.narrowest


LISTENERS: list = []  # who hears a long check's progress: tinygpt.verify.run's ``progress`` while it runs


def tell(message: str, always: bool = False) -> None:
    """A long check's progress (``always``: a notice to show at once, such as a cost said before it starts)."""
    for listener in LISTENERS:
        listener(message, always)

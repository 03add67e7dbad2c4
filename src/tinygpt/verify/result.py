"""One check's outcome: its verdict, the number measured and, when it did not pass, one sentence of what failed
and where."""

from __future__ import annotations

from dataclasses import asdict, dataclass

import torch
from torch import Tensor

VERDICTS = ("pass", "warn", "fail")
TOL64 = 1e-10  # float64: a correct attention moves a past output by rounding at most (usually exactly 0)


@dataclass(frozen=True)
class Result:
    check: str
    verdict: str  # pass | warn (a finding that is not a wrong answer: 16-bit) | fail
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

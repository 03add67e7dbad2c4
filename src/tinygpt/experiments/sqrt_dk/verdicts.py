"""The verdict words of Experiment 2's design 2 (docs/experiments/sqrt_dk/DESIGN.md, "Predictions and criteria"),
each a function of the estimates or the run records a prediction names, tested on synthetic sweeps whose answer is
known by construction (tests/experiments/test_sqrt_dk_verdicts.py). A verdict is holds, fails or undecided.

Also the one measure design 2 adds that the runs do not log themselves: loss spikes above the running minimum.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np

from tinygpt.analysis.stats import Estimate, all_hold, direction, in_range
from tinygpt.experiments.sqrt_dk.lr_basin import sign_verdict


def side(est: Estimate, expected: int) -> str:
    """A difference predicted on the ``expected`` side of 0 (+1 above, -1 below): holds when its interval lies
    there, fails when it lies on the other side, undecided when it covers 0."""
    return sign_verdict(direction(est), expected)


def equivalent(est: Estimate, band: float) -> str:
    """A difference predicted to be 0 within +-``band``: holds when the whole interval lies inside the band, fails
    when none of it does, undecided otherwise (an equivalence test: more data can only decide it)."""
    return in_range(est, -band, band)


def saturation(unscaled_change: Estimate, scaled_change: Estimate, band: float) -> str:
    """M1: from d_k = 16 to 256 the unscaled Jacobian trace falls (its change below 0) and the scaled one stays
    (its change equivalent to 0 within ``band``)."""
    return all_hold([side(unscaled_change, -1), equivalent(scaled_change, band)])


def gradient_at_init(log_ratio_top: Estimate, ratio_growth: Estimate) -> str:
    """M2: the log of the unscaled / scaled gradient norm at W_Q, W_K is above 0 at the largest d_k, and grows from
    the smallest d_k to the largest."""
    return all_hold([side(log_ratio_top, +1), side(ratio_growth, +1)])


def matches(best_loss_diff: Estimate, optimum_diff: Estimate, loss_band: float, optimum_band: float) -> str:
    """R1: the control matches the scaled arm: its best loss and its optimum (log10 lr) each equivalent to the
    scaled arm's within their bands."""
    return all_hold([equivalent(best_loss_diff, loss_band), equivalent(optimum_diff, optimum_band)])


@dataclass(frozen=True)
class Fp16Run:
    """One float16 run as F1 and F2 read it: where the scale sat (scores, qk or sdpa), its rate and seed, whether a
    probed score was inf, and whether it diverged (a non-finite loss or the guard's limit)."""

    placement: str
    lr: float
    seed: int
    scores_inf: bool
    diverged: bool


def placement(runs: Iterable[Fp16Run]) -> str:
    """F1: where the scale after the product overflows, the scale on q and k before it does not. Fails when any
    ``qk`` run has an inf score; holds when none does and some ``scores`` run at a rate and seed that a ``qk`` run
    shares has one; undecided when no such ``scores`` run overflowed (nothing for the placement to remove)."""
    runs = list(runs)
    qk = {(r.lr, r.seed): r for r in runs if r.placement == "qk"}
    if any(r.scores_inf for r in qk.values()):
        return "fails"
    overflowed = [r for r in runs if r.placement == "scores" and r.scores_inf and (r.lr, r.seed) in qk]
    return "holds" if overflowed else "undecided"


FP16_MAX = 65504.0  # float16's largest finite value


@dataclass(frozen=True)
class BatchOverflow:
    """One float16 run as amendment 4's F1 reads it: the predicted range of batches at which its loss goes
    non-finite (the first whose formed product passes FP16_MAX / (1 + band), the first past FP16_MAX x (1 + band);
    None: no such batch), the batch that went non-finite (None: it completed), the formed product there, and the
    run's verdict with the failure's kind."""

    first_possible: int | None
    first_certain: int | None
    nonfinite: int | None
    formed_at: float | None
    verdict: str
    why: str  # '' when it holds; else what happened


def batch_overflow(formed: Sequence[float], nonfinite: int | None, band: float = 0.01) -> BatchOverflow:
    """F1 per run (amendment 4): ``formed[b]`` is the largest product the run's float16 forward forms on batch b,
    in float32 (the raw q.k, or the scaled one where the scale is folded into q and k), for every batch the run
    took; ``nonfinite`` the batch whose loss was not finite. The loss is predicted non-finite at the first batch
    whose formed product passes FP16_MAX, within ``band`` for float16's rounding of q and k, and never otherwise.
    Holds when the non-finite batch lies in the predicted range, or the run completed with no product past
    FP16_MAX x (1 + band); fails when it went non-finite before any product could overflow, after one surely did,
    or completed although one surely did."""
    f = np.asarray(formed, dtype=np.float64)
    over = np.flatnonzero(f > FP16_MAX / (1 + band))
    sure = np.flatnonzero(f > FP16_MAX * (1 + band))
    lo = int(over[0]) if over.size else None
    hi = int(sure[0]) if sure.size else None
    at = float(f[nonfinite]) if nonfinite is not None and 0 <= nonfinite < f.size else None
    if nonfinite is None:
        why = "" if hi is None else "completed although a formed product passed 65,504"
    elif lo is None or nonfinite < lo:
        why = "non-finite with every formed product up to then below 65,504"
    elif hi is not None and nonfinite > hi:
        why = "went on past a batch whose formed product passed 65,504"
    else:
        why = ""
    return BatchOverflow(lo, hi, nonfinite, at, "fails" if why else "holds", why)


def float32_reruns(outcomes: Sequence[tuple[bool, bool | None]]) -> str:
    """F2 from (the float16 run diverged, its float32 rerun diverged: None when there is no rerun) per float16
    run: holds when every diverged float16 run has a float32 rerun and none of those diverged; fails when a
    float32 rerun diverged too; undecided when no float16 run diverged or a rerun is missing."""
    diverged = [rerun for fp16, rerun in outcomes if fp16]
    if any(rerun is True for rerun in diverged):
        return "fails"
    if not diverged or any(rerun is None for rerun in diverged):
        return "undecided"
    return "holds"


def loss_spikes(steps: Sequence[int], losses: Sequence[float], after: int, nats: float) -> int:
    """How many logged steps after ``after`` (the warmup) have a training loss above the running minimum of the
    losses logged before them by more than ``nats``; a non-finite loss counts as a spike. The running minimum
    starts at the first step (during warmup too), so a run that only falls has none."""
    steps, losses = np.asarray(steps), np.asarray(losses, dtype=np.float64)
    order = np.argsort(steps, kind="stable")
    steps, losses = steps[order], losses[order]
    finite = np.where(np.isfinite(losses), losses, np.inf)
    before = np.minimum.accumulate(np.concatenate([[np.inf], finite[:-1]]))  # the minimum before each step
    spike = ~np.isfinite(losses) | (losses > before + nats)
    return int((spike & (steps > after)).sum())


def steps_to(steps: Sequence[int], losses: Sequence[float], threshold: float, window: int, budget: int) -> int:
    """How fast a run learns (amendment 3, reported without a verdict): the first logged step at which the mean of
    the last ``window`` logged training losses is below ``threshold``; ``budget`` (a lower bound) when it never is,
    a non-finite loss ending the count."""
    steps, losses = np.asarray(steps), np.asarray(losses, dtype=np.float64)
    order = np.argsort(steps, kind="stable")
    steps, losses = steps[order], losses[order]
    bad = np.flatnonzero(~np.isfinite(losses))
    if bad.size:
        steps, losses = steps[:bad[0]], losses[:bad[0]]
    if len(losses) < window:
        return budget
    trailing = np.convolve(losses, np.ones(window) / window, mode="valid")  # trailing[i]: steps i .. i + window - 1
    hit = np.flatnonzero(trailing < threshold)
    return int(steps[hit[0] + window - 1]) if hit.size else budget

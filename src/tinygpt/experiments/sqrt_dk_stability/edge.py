"""The learning rate at which training stops working: design 3's primary measure (docs/experiments/sqrt_dk_stability/
DESIGN.md), its interval and its verdicts.

Each run either trained or failed (a non-finite loss, the divergence guard, or a final validation loss above the
project's failed-to-train line). Per seed, an arm's rates are an evenly spaced ladder in log10(lr), and the seed's
**edge** is the Spearman-Karber estimate of where its outcome turns from trained to failed: the top rate plus half a
step, minus one step for every rate at which the seed failed. For a seed that trains up to some rate and fails above
it, that is the geometric midpoint of the last rate that trained and the first that failed; a seed whose outcomes
flip back and forth near its edge is counted by how many rates it failed at, which is what a logistic fit's
P(fail) = 0.5 point approaches when the curve is symmetric. A seed that failed at the grid's lowest rate has an edge
at or below it, one that trained at its highest at or above it: the edge is then a bound (``low`` / ``high``).

The interval is a seed-level t-interval with one addition. A seed's edge is known only to the ladder's step d (its
true edge lies anywhere between the two rates that bracket it), so each per-seed value carries a rounding error,
uniform on +-d/2, that the spread of the seeds does not show when the seeds agree: three seeds with the same edge
have a spread of 0, and a plain t-interval would be of width 0 (an impossible interval). The rounding errors of one
arm's seeds are not independent (they share the grid and, where the seeds agree, the same bracket), so the design
takes them as fully shared: the variance of a combination sum_a w_a edge_a is

    var = s^2 / S + (d^2 / 12) sum_a w_a^2

with s^2 the sample variance of the per-seed combination (S - 1 degrees of freedom) and the rounding part known
(infinite degrees of freedom); the interval is mean +- t(nu) sqrt(var), nu by Welch-Satterthwaite. Its coverage is
simulated in tests/experiments/sqrt_dk_stability/test_edge_coverage.py (seeds that agree, seeds that split,
flips near the edge, edges anywhere between two rates).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

from tinygpt.analysis.stats import LEVEL, Estimate, in_range
from tinygpt.experiments.sqrt_dk.lr_basin import censored_direction, sign_verdict

LADDER_TOLERANCE = 0.01  # decades: rates written with four digits (2.154e-3) are on a ladder to this precision


def ladder_step(log_rates: Sequence[float]) -> float:
    """The step in decades of an evenly spaced ladder of log10 rates, ascending; a gap or an uneven step is refused
    (the Spearman-Karber edge needs even steps)."""
    x = np.asarray(log_rates, dtype=np.float64)
    if x.ndim != 1 or len(x) < 2:
        raise ValueError(f"an edge needs at least two rates, got {len(x)}.")
    steps = np.diff(x)
    d = float(steps.mean())
    if d <= 0 or np.abs(steps - d).max() > LADDER_TOLERANCE:
        raise ValueError(f"the rates are not an ascending ladder of even steps in log10 (steps {np.round(steps, 3)}).")
    return d


@dataclass(frozen=True)
class Edges:
    """An arm's per-seed edges: ``values`` (S,) in log10(lr), ``low`` / ``high`` (S,) whether a seed's edge is a bound
    (it failed at the lowest rate / trained at the highest), and the ladder's ``step`` in decades."""

    values: np.ndarray
    low: np.ndarray
    high: np.ndarray
    step: float
    seed_ids: tuple

    @property
    def censored(self) -> int:
        """+1 when some seed's edge is only a lower bound (trained at the top rate), -1 when some seed's is only an
        upper bound, 2 when both happen, 0 when every seed's edge lies inside the grid."""
        hi, lo = bool(self.high.any()), bool(self.low.any())
        return 2 if hi and lo else 1 if hi else -1 if lo else 0


def edges(log_rates: Sequence[float], failed: np.ndarray, seed_ids: Sequence | None = None) -> Edges:
    """Per seed, the Spearman-Karber edge of ``failed`` (S, R): True where the seed's run at that rate failed. The
    rates are ``log_rates`` (R,), an ascending ladder."""
    x = np.asarray(log_rates, dtype=np.float64)
    d = ladder_step(x)
    f = np.asarray(failed, dtype=bool)
    if f.ndim != 2 or f.shape[1] != len(x):
        raise ValueError(f"failed must be (seeds, {len(x)} rates), got shape {f.shape}.")
    values = x[-1] + d / 2 - d * f.sum(axis=1)  # (S,)
    ids = tuple(range(f.shape[0])) if seed_ids is None else tuple(seed_ids)
    return Edges(values, f[:, 0].copy(), ~f[:, -1], d, ids)


def combination(parts: Mapping[str, Edges], weights: Mapping[str, float]) -> Estimate:
    """The estimate of sum_a w_a edge_a over arms paired by seed (the same seed ids in each), with the interval of the
    module's docstring: an arm's mean (weights {a: 1}), a shift ({a: 1, b: -1}), a dose-response slope."""
    names = list(weights)
    ids = parts[names[0]].seed_ids
    for n in names[1:]:
        if parts[n].seed_ids != ids:
            raise ValueError(f"arms {names[0]} and {n} are not paired by seed ({ids} against {parts[n].seed_ids}).")
    per_seed = sum(weights[n] * parts[n].values for n in names)  # (S,)
    value = float(per_seed.mean())
    S = len(per_seed)
    rounding = sum(weights[n] ** 2 * parts[n].step ** 2 / 12 for n in names)
    if S < 2:
        return Estimate(value, math.nan, math.nan)
    seed_var = float(per_seed.var(ddof=1)) / S
    total = seed_var + rounding
    df = math.inf if seed_var == 0 else total ** 2 / (seed_var ** 2 / (S - 1))
    half = float(scipy_stats.t.ppf(1 - (1 - LEVEL) / 2, df)) * math.sqrt(total)
    return Estimate(value, value - half, value + half, df=df)


def open_terms(parts: Mapping[str, Edges], weights: Mapping[str, float]) -> list[int]:
    """For each censored arm of a combination, the way its true edge could move the combination: an edge that is a
    lower bound moves it the way of its weight, an upper bound the other way."""
    out = []
    for n, w in weights.items():
        e = parts[n]
        if e.high.any():
            out.append(int(np.sign(w)))
        if e.low.any():
            out.append(-int(np.sign(w)))
    return out


def bound_word(parts: Mapping[str, Edges], weights: Mapping[str, float]) -> str:
    """'' for a combination of edges inside the grid; 'at least ' / 'at most ' when a censored edge makes it a bound
    on that side, 'a bound either way: ' when censored edges pull both ways."""
    terms = set(open_terms(parts, weights))
    return "" if not terms else "at least " if terms == {1} else "at most " if terms == {-1} else "a bound either way: "


def side(parts: Mapping[str, Edges], weights: Mapping[str, float], expected: int) -> tuple[str, Estimate]:
    """A combination predicted on the ``expected`` side of 0: holds when its interval lies there and no censored arm
    could carry it back, fails when it lies on the other side (likewise), undecided otherwise."""
    est = combination(parts, weights)
    return sign_verdict(censored_direction(est, open_terms(parts, weights)), expected), est


def within(parts: Mapping[str, Edges], weights: Mapping[str, float], lo: float, hi: float) -> tuple[str, Estimate]:
    """A combination predicted inside [lo, hi] (an equivalence): holds when its whole interval lies inside, fails
    when none of it does, undecided otherwise; with a censored arm in it, the value is a bound and nothing is called."""
    est = combination(parts, weights)
    if open_terms(parts, weights):
        return "undecided", est
    return in_range(est, lo, hi), est


def slope_weights(xs: Mapping[str, float]) -> dict[str, float]:
    """The least-squares slope's weights over arms at positions ``xs`` (e.g. log10 of each arm's scale factor):
    slope = sum_a w_a y_a with w_a = (x_a - mean x) / sum (x - mean x)^2."""
    x = np.array(list(xs.values()), dtype=np.float64)
    dx = x - x.mean()
    return {n: float(w) for n, w in zip(xs, dx / (dx @ dx), strict=True)}


def sensitivity(losses: np.ndarray, initial: float) -> np.ndarray:
    """Wortsman et al.'s LR sensitivity per seed: over the grid's rates, the mean of min(final loss, initial loss)
    minus the best of those capped losses. ``losses`` (S, R), one row a seed (a diverged run as its initial loss)."""
    capped = np.minimum(np.asarray(losses, dtype=np.float64), initial)
    return capped.mean(axis=1) - capped.min(axis=1)

"""The statistics the reports use, and the only code that turns numbers into verdict words.

Uncertainty: a quantity measured on validation windows is a sample twice over, of seeds and of windows.
``bootstrap`` resamples both: each replicate draws the windows with replacement (one draw shared by every
sample measured on the same windows, so paired comparisons stay paired) and, inside each sample, the seeds
with replacement. A statistic of several samples (a difference, a ratio, a slope, an LR sensitivity) is
computed on every replicate; ``Estimate`` holds its value on the data and the percentile interval of the
replicates (numpy, fixed seed: the same numbers on every run). With 3 seeds the seed level is coarse; the
window level is what the old seed-spread rule left out.

Verdicts: ``direction`` (above / below / no difference: the interval excludes 0 or not), ``in_range``
(holds / fails / undecided against a range written down before the sweep) and ``trend`` (rises / falls /
flat within noise, from the slope against log x and its interval, looking at both directions; "monotonically"
only when every step's interval excludes 0 the same way). Training-curve events come from the raw logged
series (``first_below``), never a smoothed one: a smoother delays and blurs them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

LEVEL = 0.95  # every interval in the reports
N_BOOT = 2000  # bootstrap replicates
SEED = 0  # the bootstrap's random generator: fixed, so a report is reproducible to the digit


@dataclass(frozen=True)
class Sample:
    """One arm's per-window values: rows are seeds, columns windows (the same windows in every row). Samples with
    the same ``windows`` key were measured on the same windows and share each replicate's window draw; samples
    with the same ``seeds`` key come from the same runs (two quantities of one arm) and share its seed draw.
    Without a ``seeds`` key a sample's seeds are drawn on their own."""

    values: np.ndarray  # (seeds, windows)
    windows: str = "val"
    seeds: str | None = None

    def __post_init__(self):
        v = np.asarray(self.values, dtype=np.float64)
        if v.ndim != 2 or not v.size:
            raise ValueError(f"a Sample needs a (seeds, windows) array, got shape {v.shape}.")
        object.__setattr__(self, "values", v)

    @property
    def mean(self) -> float:
        return float(self.values.mean())


@dataclass(frozen=True)
class Estimate:
    """A statistic's value on the data and its ``level`` percentile bootstrap interval [lo, hi]."""

    value: float
    lo: float
    hi: float
    level: float = LEVEL
    replicates: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)

    @classmethod
    def of(cls, value, replicates, level: float = LEVEL) -> Estimate:
        reps = np.asarray(replicates, dtype=np.float64)
        finite = reps[np.isfinite(reps)]
        a = (1 - level) / 2
        lo, hi = (np.quantile(finite, [a, 1 - a]) if len(finite) else (math.nan, math.nan))
        return cls(float(value), float(lo), float(hi), level, reps)

    def excludes(self, x: float = 0.0) -> bool:
        return self.lo > x or self.hi < x

    def format(self, digits: int = 3, signed: bool = False) -> str:
        """'0.047 [0.045, 0.049]'."""
        if not math.isfinite(self.value):
            return "n/a"
        f = f"{'+' if signed else ''}.{digits}f"
        return f"{self.value:{f}} [{self.lo:{f}}, {self.hi:{f}}]"

    def __sub__(self, other: Estimate) -> Estimate:
        return Estimate.of(self.value - other.value, self.replicates - other.replicates, self.level)

    def __truediv__(self, other: Estimate) -> Estimate:
        return Estimate.of(self.value / other.value, self.replicates / other.replicates, self.level)

    def scaled(self, factor: float) -> Estimate:
        return Estimate.of(self.value * factor, self.replicates * factor, self.level)


def bootstrap(samples: Mapping, n_boot: int = N_BOOT, seed: int = SEED) -> dict:
    """Each sample's mean as an Estimate, from replicates that resample windows (shared by samples with the same
    ``windows`` key) and seeds (shared by samples with the same ``seeds`` key, otherwise drawn per sample).
    Returns {key: Estimate}; combine them with ``-``, ``/`` or the functions below, which keep the replicates
    aligned (replicate b of every sample is one draw). Never combine Estimates from two calls."""
    rng = np.random.default_rng(seed)
    counts: dict[tuple[str, int], np.ndarray] = {}  # (key, n windows) -> (B, N) multiplicity of each window
    picks: dict[tuple[str, int], np.ndarray] = {}  # (key, n seeds) -> (B, S) the drawn seeds
    out = {}
    for name, s in samples.items():
        S, N = s.values.shape
        key = (s.windows, N)
        if key not in counts:
            counts[key] = rng.multinomial(N, np.full(N, 1.0 / N), size=n_boot)  # (B, N)
        per_seed = s.values @ counts[key].T / N  # (S, B): each seed's mean over the resampled windows
        if s.seeds is None or (s.seeds, S) not in picks:
            pick = rng.integers(0, S, size=(n_boot, S))  # (B, S): the resampled seeds
            if s.seeds is not None:
                picks[(s.seeds, S)] = pick
        pick = picks.get((s.seeds, S), pick)
        reps = np.take_along_axis(per_seed.T, pick, axis=1).mean(1)  # (B,)
        out[name] = Estimate.of(s.mean, reps)
    return out


def stack(estimates: Sequence[Estimate]) -> tuple[np.ndarray, np.ndarray]:
    """Values (K,) and replicates (B, K) of K estimates from one bootstrap call."""
    return np.array([e.value for e in estimates]), np.stack([e.replicates for e in estimates], axis=1)


def loglog_slope(xs, ys) -> np.ndarray | float:
    """Least-squares slope of log(y) against log(x); ys (K,) or (B, K) for one slope per row."""
    lx = np.log(np.asarray(xs, dtype=np.float64))
    ly = np.log(np.asarray(ys, dtype=np.float64))
    dx = lx - lx.mean()
    slope = (ly - ly.mean(-1, keepdims=True)) @ dx / (dx @ dx)
    return float(slope) if np.ndim(slope) == 0 else slope


def slope_estimate(xs, estimates: Sequence[Estimate]) -> Estimate:
    """The log-log slope of the estimates against xs, with its interval."""
    values, reps = stack(estimates)
    return Estimate.of(loglog_slope(xs, values), loglog_slope(xs, reps))


# ----------------------------------------------------------------------------- verdicts


def direction(est: Estimate) -> int:
    """+1 if the interval lies above 0, -1 if below, 0 if it contains 0 (no difference at this level)."""
    return 1 if est.lo > 0 else -1 if est.hi < 0 else 0


def difference_words(est: Estimate, above: str, below: str) -> str:
    """``above`` / ``below`` when the interval excludes 0 that way, else 'no difference at the 95% level'."""
    d = direction(est)
    return above if d > 0 else below if d < 0 else f"no difference at the {est.level:.0%} level"


def in_range(est: Estimate, lo: float, hi: float) -> str:
    """'holds' if the whole interval lies in [lo, hi], 'fails' if none of it does, else 'undecided'."""
    if lo <= est.lo and est.hi <= hi:
        return "holds"
    if est.hi < lo or est.lo > hi:
        return "fails"
    return "undecided"


def all_hold(verdicts: Sequence[str]) -> str:
    """One verdict from several: 'fails' if any fails, 'holds' if all hold, else 'undecided'."""
    if "fails" in verdicts:
        return "fails"
    return "holds" if verdicts and all(v == "holds" for v in verdicts) else "undecided"


@dataclass(frozen=True)
class Trend:
    word: str  # "rises", "falls" or "flat within noise"
    slope: Estimate  # of the values against log x
    monotonic: bool  # every consecutive step's interval excludes 0 in the word's direction

    def words(self, x: str = "x") -> str:
        """'rises monotonically (slope against ln T +0.247 [+0.085, +0.415])'."""
        verb = "is flat within noise" if self.word == "flat within noise" else self.word
        return (f"{verb}{' monotonically' if self.monotonic else ''} "
                f"(slope against ln {x} {self.slope.format(signed=True)})")


def trend(xs, estimates: Sequence[Estimate]) -> Trend:
    """Does a quantity rise or fall with x? The least-squares slope of the values against ln x, with its bootstrap
    interval: 'rises' if the interval lies above 0, 'falls' if below, 'flat within noise' otherwise; both
    directions are tested the same way. Values may be negative (a difference), so the fit is linear in y."""
    values, reps = stack(estimates)
    lx = np.log(np.asarray(xs, dtype=np.float64))
    dx = lx - lx.mean()

    def slope(y):
        return (y - y.mean(-1, keepdims=True)) @ dx / (dx @ dx)

    s = Estimate.of(float(slope(values)), slope(reps))
    d = direction(s)
    word = {1: "rises", -1: "falls", 0: "flat within noise"}[d]
    steps = [Estimate.of(values[i + 1] - values[i], reps[:, i + 1] - reps[:, i]) for i in range(len(values) - 1)]
    monotonic = d != 0 and all(direction(st) == d for st in steps)
    return Trend(word, s, monotonic)


def growth_verdict(gaps: Sequence[Estimate], t: Trend, predicted: str = "rises") -> str:
    """A prediction that a gap is above 0 at every x and ``predicted`` ('rises' or 'falls') with x: 'holds' when
    every gap's interval lies above 0 and the trend test gives the predicted word, 'fails' when some gap's interval
    lies below 0 or the trend goes the other way, 'undecided' otherwise (inside the noise)."""
    if predicted not in ("rises", "falls"):
        raise ValueError(f"a predicted trend is 'rises' or 'falls', got {predicted!r}.")
    other = "falls" if predicted == "rises" else "rises"
    signs = [direction(g) for g in gaps]
    if any(s < 0 for s in signs) or t.word == other:
        return "fails"
    return "holds" if all(s > 0 for s in signs) and t.word == predicted else "undecided"


# ----------------------------------------------------------------------------- learning-rate sweeps


def lr_sensitivity(losses: np.ndarray, initial: float) -> np.ndarray | float:
    """Wortsman et al.'s LR sensitivity over the last axis (the learning-rate grid): the mean of
    min(loss, initial) minus the best loss. losses (L,) or (B, L)."""
    capped = np.minimum(np.asarray(losses, dtype=np.float64), initial)
    out = capped.mean(-1) - capped.min(-1)
    return float(out) if np.ndim(out) == 0 else out


def failed_to_train(loss: float, unigram: float, bigram: float, fraction: float) -> bool:
    """A run failed to train when its final loss is not below the unigram baseline by at least ``fraction`` of
    the unigram - bigram gap (a diverged run, with no finite loss, is counted as diverged instead)."""
    return math.isfinite(loss) and unigram - loss < fraction * (unigram - bigram)


# ----------------------------------------------------------------------------- training curves


def first_below(steps, values, threshold: float) -> int | None:
    """The first logged step whose raw value is below ``threshold`` (None if none is)."""
    below = np.nonzero(np.asarray(values, dtype=np.float64) < threshold)[0]
    return int(np.asarray(steps)[below[0]]) if len(below) else None


def resolution(steps) -> int | None:
    """The logging interval of a series: the most common gap between logged steps."""
    gaps = np.diff(np.asarray(steps))
    return int(statistics.mode(gaps.tolist())) if len(gaps) else None


# ----------------------------------------------------------------------------- across runs, no windows


def mean_spread(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation over seeds (0 for a single value); NaN/None dropped. For quantities that
    are not window means (a maximum, the training loss): the reports show them as mean ± seed sd and draw no
    verdict from them."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return float("nan"), float("nan")
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0


def band(runs: list, key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Steps common to all runs, and the mean, min and max of ``key`` across runs at each."""
    series = [r.series(key) for r in runs]
    series = [s for s in series if len(s[0])]
    if not series:
        return None
    common = sorted(set.intersection(*(set(s[0].tolist()) for s in series)))
    if not common:
        return None
    stack_ = np.stack([np.interp(common, s[0], s[1]) for s in series])  # (runs, steps)
    return np.asarray(common), stack_.mean(0), stack_.min(0), stack_.max(0)


def smooth(values: np.ndarray, n: int = 5) -> np.ndarray:
    """Trailing moving average over n points, for drawing only (it delays events: never measure on it)."""
    c = np.cumsum(np.insert(np.asarray(values, dtype=np.float64), 0, 0.0))
    out = np.empty(len(values))
    for i in range(len(values)):
        lo = max(0, i + 1 - n)
        out[i] = (c[i + 1] - c[lo]) / (i + 1 - lo)
    return out

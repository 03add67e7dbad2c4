"""The statistics the reports use, and the only code that turns numbers into verdict words.

Uncertainty: a quantity measured on validation windows is a sample twice over, of seeds and of windows (every
run of a sweep is scored on the same windows, so the two are crossed). ``bootstrap`` draws replicates of each
sample's mean that vary both levels: the windows are resampled with replacement (one draw shared by every sample
measured on the same windows, so paired comparisons stay paired), and each group of seeds gets a Gaussian
multiplier per seed (one draw shared by the samples of the same runs, matched by seed id). The seed means carry
the window-by-seed noise, so the window level carries the rest of the two-way random-effects variance,
(MS_windows - MS_residual) / (S N), and the replicates' variance is the unbiased estimate of the mean's. A statistic
of several samples (a difference, a ratio, a slope, an LR sensitivity) is computed on every replicate and on each
level's own replicates (``combine``). Its interval is the percentile interval of the replicates widened by
t(nu) / 1.96, nu from the Welch-Satterthwaite formula over the levels (N - 1 for the windows, S - 1 for each group of
seeds): a mean over 3 seeds is as uncertain as a t-test on the seed means says (t(2) = 4.30), where resampling 3
seeds would behave like a normal interval shrunk by 2/3. Numpy, fixed seed: the same numbers on every run.
tests/analysis/test_coverage.py simulates sweeps with known truth and checks that the intervals cover it 95% of the
time.

Verdicts: ``direction`` (above / below / no difference: the interval excludes 0 or not), ``in_range``
(holds / fails / undecided against a range written down before the sweep) and ``trend`` (rises / falls /
flat within noise, from the slope against log x and its interval, looking at both directions; "monotonically"
only when every step's interval excludes 0 the same way). Training-curve events come from the raw logged
series (``first_below``), never a smoothed one: a smoother delays and blurs them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

LEVEL = 0.95  # every interval in the reports
N_BOOT = 2000  # bootstrap replicates
SEED = 0  # the bootstrap's random generator: fixed, so a report is reproducible to the digit
METHOD = ("bootstrap replicates that resample the validation windows and weight each seed's deviation from the "
          "mean by a Gaussian multiplier (a wild bootstrap of the seed level), the percentile interval widened to a t "
          "quantile with Welch-Satterthwaite degrees of freedom (S - 1 for S seeds)")


@dataclass(frozen=True)
class Sample:
    """One arm's per-window values: rows are seeds, columns windows (the same windows in every row). Samples with
    the same ``windows`` key were measured on the same windows and share each replicate's window draw; samples
    with the same ``seeds`` key come from the same runs (two quantities of one arm, or arms paired by seed) and
    share its seed draw, which needs the same ``seed_ids`` in the same order. Without a ``seeds`` key a sample's
    seeds are drawn on their own."""

    values: np.ndarray  # (seeds, windows)
    windows: str = "val"
    seeds: str | None = None
    seed_ids: tuple | None = None  # one per row; None = 0..S-1

    def __post_init__(self):
        v = np.asarray(self.values, dtype=np.float64)
        if v.ndim != 2 or not v.size:
            raise ValueError(f"a Sample needs a (seeds, windows) array, got shape {v.shape}.")
        object.__setattr__(self, "values", v)
        ids = tuple(range(v.shape[0])) if self.seed_ids is None else tuple(self.seed_ids)
        if len(ids) != v.shape[0]:
            raise ValueError(f"a Sample with {v.shape[0]} seed rows got {len(ids)} seed ids {list(ids)}.")
        object.__setattr__(self, "seed_ids", ids)

    @property
    def mean(self) -> float:
        return float(self.values.mean())


@dataclass(frozen=True)
class Estimate:
    """A statistic's value on the data and its ``level`` interval [lo, hi]. ``replicates`` vary every level at once,
    ``parts`` maps each level ('windows:val', 'seeds:causal', ...) to (replicates varying it alone, its degrees of
    freedom), ``df`` is their Welch-Satterthwaite combination and ``nonfinite`` counts replicates that were not
    finite (left out of the interval, and reported)."""

    value: float
    lo: float
    hi: float
    level: float = LEVEL
    replicates: np.ndarray = field(default_factory=lambda: np.empty(0), repr=False, compare=False)
    parts: dict = field(default_factory=dict, repr=False, compare=False)
    df: float = math.inf
    nonfinite: int = 0

    @classmethod
    def of(cls, value, replicates, parts: dict | None = None, level: float = LEVEL) -> Estimate:
        """The percentile interval of the replicates around the value, each side widened by t(df) / z (df from the
        parts; without parts the plain percentile interval)."""
        reps = np.asarray(replicates, dtype=np.float64)
        finite = reps[np.isfinite(reps)]
        parts = parts or {}
        df = satterthwaite(parts)
        bad = int(reps.size - finite.size)
        if len(finite) < 2 or not math.isfinite(float(value)):
            return cls(float(value), math.nan, math.nan, level, reps, parts, df, bad)
        a = (1 - level) / 2
        q_lo, q_hi = np.quantile(finite, [a, 1 - a])
        from scipy import stats as scipy_stats  # here, not at the top: a report's refusals answer before scipy

        widen = float(scipy_stats.t.ppf(1 - a, df) / scipy_stats.norm.ppf(1 - a)) if math.isfinite(df) else 1.0
        v = float(value)
        return cls(v, v - widen * (v - q_lo), v + widen * (q_hi - v), level, reps, parts, df, bad)

    def excludes(self, x: float = 0.0) -> bool:
        return self.lo > x or self.hi < x

    def format(self, digits: int = 3, signed: bool = False) -> str:
        """'0.047 [0.045, 0.049]' (with a note when some replicates were not finite)."""
        if not math.isfinite(self.value):
            return "n/a"
        f = f"{'+' if signed else ''}.{digits}f"
        note = f" ({self.nonfinite} of {len(self.replicates)} replicates not finite)" if self.nonfinite else ""
        return f"{self.value:{f}} [{self.lo:{f}}, {self.hi:{f}}]{note}"

    def __sub__(self, other) -> Estimate:
        if isinstance(other, Estimate):
            return combine(lambda y: y[..., 0] - y[..., 1], [self, other])
        return combine(lambda y: y[..., 0] - other, [self])

    def __truediv__(self, other) -> Estimate:
        if isinstance(other, Estimate):
            return combine(lambda y: y[..., 0] / y[..., 1], [self, other])
        return combine(lambda y: y[..., 0] / other, [self])

    def scaled(self, factor: float) -> Estimate:
        return combine(lambda y: y[..., 0] * factor, [self])


def satterthwaite(parts: Mapping) -> float:
    """Degrees of freedom of a sum of independent variance components (Welch-Satterthwaite):
    (sum V_c)^2 / sum(V_c^2 / df_c), V_c the variance of the replicates that vary level c alone."""
    vs = []
    for reps, df in parts.values():
        r = np.asarray(reps, dtype=np.float64)
        r = r[np.isfinite(r)]
        v = float(r.var(ddof=1)) if len(r) > 1 else 0.0
        if v > 0 and df > 0:
            vs.append((v, df))
    if not vs:
        return math.inf
    return sum(v for v, _ in vs) ** 2 / sum(v**2 / df for v, df in vs)


def combine(f: Callable[[np.ndarray], np.ndarray], estimates: Sequence[Estimate]) -> Estimate:
    """f of several Estimates from one bootstrap call: f takes a (..., K) array (the K values on the last axis) and
    is applied to the values, to the replicates and to each level's own replicates (the other estimates held at
    their values), so the interval and its degrees of freedom follow the statistic."""
    values = np.array([e.value for e in estimates], dtype=np.float64)  # (K,)
    reps = np.stack([e.replicates for e in estimates], axis=-1)  # (B, K)
    parts = {}
    with np.errstate(divide="ignore", invalid="ignore"):
        for key in dict.fromkeys(k for e in estimates for k in e.parts):
            cols = [e.parts[key][0] if key in e.parts else np.full(reps.shape[0], e.value) for e in estimates]
            parts[key] = (f(np.stack(cols, axis=-1)), min(e.parts[key][1] for e in estimates if key in e.parts))
        return Estimate.of(float(f(values)), f(reps), parts, estimates[0].level if estimates else LEVEL)


def level_scales(values: np.ndarray) -> tuple[float, float]:
    """Scales for the window and seed draws of a (S, N) sample, so that together they carry the two-way
    random-effects variance of its grand mean, var(m) / S + (var(c) - MS_res / S) / N (m: the S seed means,
    c: the N window means, MS_res: the window-by-seed residual mean square). The seed means carry the
    window-by-seed noise already, so it is taken out of the window level; a Gaussian multiplier per seed gives
    var(m) (S - 1) / S^2, hence the seed scale sqrt(S / (S - 1)). Returns (window scale, seed scale)."""
    S, N = values.shape
    if S < 2:
        return 1.0, 0.0
    m, c = values.mean(1), values.mean(0)  # (S,), (N,)
    seed = math.sqrt(S / (S - 1))
    var_c = float(c.var(ddof=1)) if N > 1 else 0.0
    if var_c <= 0:
        return 0.0, seed
    resid = values - m[:, None] - c[None, :] + values.mean()  # (S, N)
    ms_res = float((resid**2).sum() / ((S - 1) * (N - 1)))
    return math.sqrt(max(0.0, var_c - ms_res / S) / var_c), seed


def bootstrap(samples: Mapping, n_boot: int = N_BOOT, seed: int = SEED) -> dict:
    """Each sample's mean as an Estimate, from replicates that resample windows (shared by samples with the same
    ``windows`` key) and draw the seed level from its t distribution (shared by samples with the same ``seeds``
    key, matched by seed id, otherwise drawn per sample). Returns {key: Estimate}; combine them with ``-``, ``/``
    or ``combine``, which keep the replicates aligned (replicate b of every sample is one draw). Never combine
    Estimates from two calls."""
    rng = np.random.default_rng(seed)
    counts: dict[tuple[str, int], np.ndarray] = {}  # (key, n windows) -> (B, N) multiplicity of each window
    draws: dict[str, tuple[tuple, np.ndarray]] = {}  # seeds key -> (seed ids, (B, S) Gaussian multipliers)
    out = {}
    for i, (name, s) in enumerate(samples.items()):
        S, N = s.values.shape
        wkey = (s.windows, N)
        if wkey not in counts:
            picks = rng.integers(0, N, size=(n_boot, N)) + N * np.arange(n_boot)[:, None]  # (B, N) drawn windows
            counts[wkey] = np.bincount(picks.ravel(), minlength=n_boot * N).reshape(n_boot, N)  # (B, N) multiplicity
        skey = s.seeds if s.seeds is not None else f"#{i}:{name}"
        if skey in draws:
            ids, xi = draws[skey]
            if ids != s.seed_ids:
                raise ValueError(f"samples paired by seeds={s.seeds!r} have different seeds: {list(ids)} and "
                                 f"{list(s.seed_ids)}; pairing needs the same seeds (a lost run unpairs them).")
        else:
            xi = rng.standard_normal((n_boot, S))  # (B, S): one multiplier per seed
            draws[skey] = (s.seed_ids, xi)
        mean = s.mean
        w_scale, s_scale = level_scales(s.values)
        windows = w_scale * ((s.values @ counts[wkey].T / N).mean(0) - mean)  # (B,): the windows resampled
        m = s.values.mean(1)  # (S,): each seed's mean over the windows
        seeds = s_scale * (xi @ (m - mean)) / S  # (B,): the seed level
        parts = {f"windows:{s.windows}/{N}": (mean + windows, N - 1)}
        if S > 1:
            parts[f"seeds:{skey}"] = (mean + seeds, S - 1)
        out[name] = Estimate.of(mean, mean + windows + seeds, parts)
    return out


def stack(estimates: Sequence[Estimate]) -> tuple[np.ndarray, np.ndarray]:
    """Values (K,) and replicates (B, K) of K estimates from one bootstrap call."""
    return np.array([e.value for e in estimates]), np.stack([e.replicates for e in estimates], axis=1)


def level_sds(est: Estimate) -> dict[str, float]:
    """How much each sampled level contributes to an estimate's spread: {"windows": sd, "seeds": sd}, each the root of
    the summed variances of the parts that vary that level alone (Estimate.parts); a level with no part is absent."""
    out: dict[str, float] = {}
    for key, (reps, _) in est.parts.items():
        level = key.split(":")[0]
        reps = np.asarray(reps, dtype=np.float64)
        out[level] = out.get(level, 0.0) + float(np.var(reps[np.isfinite(reps)]))
    return {k: math.sqrt(v) for k, v in out.items()}


def loglog_slope(xs, ys) -> np.ndarray | float:
    """Least-squares slope of log(y) against log(x); ys (K,) or (B, K) for one slope per row."""
    lx = np.log(np.asarray(xs, dtype=np.float64))
    ly = np.log(np.asarray(ys, dtype=np.float64))
    dx = lx - lx.mean()
    slope = (ly - ly.mean(-1, keepdims=True)) @ dx / (dx @ dx)
    return float(slope) if np.ndim(slope) == 0 else slope


def slope_estimate(xs, estimates: Sequence[Estimate]) -> Estimate:
    """The log-log slope of the estimates against xs, with its interval."""
    return combine(lambda y: loglog_slope(xs, y), estimates)


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


def post_hoc(verdict: str) -> str:
    """A verdict against a band set after numbers of the kind it judges were known (a tolerance, not a blind
    prediction): 'within tolerance (post hoc)', 'outside tolerance (post hoc)' or 'undecided (post hoc)'."""
    return ({"holds": "within tolerance", "fails": "outside tolerance", "undecided": "undecided"}[verdict]
            + " (post hoc)")


def verb(verdict: str) -> str:
    """A verdict as a verb phrase: 'holds', 'fails', 'is undecided at the 95% level'."""
    return {"holds": "holds", "fails": "fails", "undecided": f"is undecided at the {LEVEL:.0%} level"}[verdict]


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
    steps: tuple[int, ...] = ()  # each consecutive step's direction (+1, -1, 0 within noise)

    @property
    def turns(self) -> bool:
        """Some step rises and another falls, each outside noise: not a trend in one direction."""
        return 1 in self.steps and -1 in self.steps

    def words(self, x: str = "x", digits: int = 3) -> str:
        """'rises monotonically (slope against ln T +0.247 [+0.085, +0.415])'; a quantity whose steps go both
        ways outside noise: 'is not monotone: between neighbouring values it falls, then rises (...)'."""
        if self.turns:
            moves = ", then ".join({1: "rises", -1: "falls", 0: "stays within noise"}[d] for d in self.steps)
            return (f"is not monotone: between neighbouring values it {moves}, each change outside noise where "
                    f"named (slope against ln {x} {self.slope.format(digits, signed=True)})")
        verb = "is flat within noise" if self.word == "flat within noise" else self.word
        how = (" monotonically" if self.monotonic else "" if self.word == "flat within noise" else
               " overall, though not every step between neighbouring values is outside noise")  # e.g. 0.0043,
        # 0.0036, 0.0052 (not monotone), or 1.18, 1.20, 1.33 (a first step within noise): the fit leans on the ends
        return f"{verb}{how} (slope against ln {x} {self.slope.format(digits, signed=True)})"


def trend(xs, estimates: Sequence[Estimate]) -> Trend:
    """Does a quantity rise or fall with x? The least-squares slope of the values against ln x, with its bootstrap
    interval: 'rises' if the interval lies above 0, 'falls' if below, 'flat within noise' otherwise; both
    directions are tested the same way. Values may be negative (a difference), so the fit is linear in y."""
    lx = np.log(np.asarray(xs, dtype=np.float64))
    dx = lx - lx.mean()

    def slope(y):
        return (y - y.mean(-1, keepdims=True)) @ dx / (dx @ dx)

    s = combine(slope, estimates)
    d = direction(s)
    word = {1: "rises", -1: "falls", 0: "flat within noise"}[d]
    steps = [combine(lambda y, i=i: y[..., i + 1] - y[..., i], estimates) for i in range(len(estimates) - 1)]
    monotonic = d != 0 and all(direction(st) == d for st in steps)
    return Trend(word, s, monotonic, tuple(direction(st) for st in steps))


# ----------------------------------------------------------------------------- runs that fail


def failed_to_train(loss: float, unigram: float, bigram: float, fraction: float) -> bool:
    """A run failed to train when its final loss is not below the unigram baseline by at least ``fraction`` of
    the unigram - bigram gap (a diverged run, with no finite loss, is counted as diverged instead)."""
    return math.isfinite(loss) and unigram - loss < fraction * (unigram - bigram)


# ----------------------------------------------------------------------------- training curves


def first_below(steps, values, threshold: float) -> int | None:
    """The first logged step whose raw value is below ``threshold`` (None if none is)."""
    below = np.nonzero(np.asarray(values, dtype=np.float64) < threshold)[0]
    return int(np.asarray(steps)[below[0]]) if len(below) else None


def first_below_band(steps, values, band_steps, band_low, run: int) -> int | None:
    """The first logged step from which a series stays below a band's lower edge (e.g. the lowest of the control
    seeds at each step) for ``run`` consecutive logged steps, both read at the steps they share; None if it never
    does. Raw values, so the step is the series' own."""
    low = dict(zip(np.asarray(band_steps).tolist(), np.asarray(band_low, dtype=np.float64).tolist(), strict=True))
    shared = [(s, v) for s, v in zip(np.asarray(steps).tolist(), np.asarray(values, dtype=np.float64).tolist(),
                                     strict=True) if s in low]
    streak = 0
    for i, (s, v) in enumerate(shared):
        streak = streak + 1 if v < low[s] else 0
        if streak == run:
            return int(shared[i - run + 1][0])
    return None


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

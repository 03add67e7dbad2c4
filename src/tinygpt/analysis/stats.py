"""The statistics the reports share: seed means and spreads, bands of a metric across runs, smoothing."""

from __future__ import annotations

import math
import statistics

import numpy as np

from tinygpt.analysis.sweep import Run


def mean_spread(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value); NaN/None dropped."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return float("nan"), float("nan")
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0


def band(runs: list[Run], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Steps common to all runs, and the mean, min and max of ``key`` across runs at each."""
    series = [r.series(key) for r in runs]
    series = [s for s in series if len(s[0])]
    if not series:
        return None
    common = sorted(set.intersection(*(set(s[0].tolist()) for s in series)))
    if not common:
        return None
    stack = np.stack([np.interp(common, s[0], s[1]) for s in series])  # (runs, steps)
    return np.asarray(common), stack.mean(0), stack.min(0), stack.max(0)


def smooth(values: np.ndarray, n: int = 5) -> np.ndarray:
    """Trailing moving average over n points (the first points average what exists)."""
    c = np.cumsum(np.insert(values, 0, 0.0))
    out = np.empty_like(values)
    for i in range(len(values)):
        lo = max(0, i + 1 - n)
        out[i] = (c[i + 1] - c[lo]) / (i + 1 - lo)
    return out

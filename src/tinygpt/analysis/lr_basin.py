"""Where a learning-rate curve's optimum sits and how wide its basin is: Experiment 2's measures (a) and (b), and
the verdict words built on them.

A curve is an arm's final loss at each rate of a grid, on log10(lr) (``xs``, increasing). Every function takes
losses of shape (L,) or (..., L) (a bootstrap's replicates on the leading axes) and works row by row, so that
``stats.combine`` can carry the intervals through them.

- ``optimum``: a parabola in log10(lr) through the lowest rate and its two neighbours; its vertex is the best
  log10(lr) and the best loss. At the grid's first or last rate there is no neighbour on one side: the optimum is
  that rate and is flagged as at the edge (the true one may lie beyond).
- ``basin``: the log10(lr) range around the optimum over which the loss stays within ``delta`` of the best (the
  vertex loss). Each edge is interpolated linearly between the last rate inside and the first outside; with no
  rate outside on a side the edge is the grid's end and is "open": the width is then a lower bound.
- Censoring in verdicts: a width with an open edge can only be larger, an optimum at the grid's lowest rate only
  lower, at its highest only higher. A difference is called (above or below 0) only when its interval excludes 0
  and no censored term could move it back across 0 (``censored_direction``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tinygpt.analysis.stats import Estimate, direction


def _rows(losses) -> tuple[np.ndarray, tuple]:
    y = np.asarray(losses, dtype=np.float64)
    return y.reshape(-1, y.shape[-1]), y.shape[:-1]  # (R, L), leading shape


def _vertex(x3: np.ndarray, y3: np.ndarray) -> tuple[float, float, float]:
    """The vertex of the parabola through three points (x increasing, the middle one lowest) and its x^2
    coefficient; the middle point itself (and 0) when the three are collinear or the parabola opens downward."""
    (x0, x1, x2), (y0, y1, y2) = x3, y3
    a = ((y2 - y1) / (x2 - x1) - (y1 - y0) / (x1 - x0)) / (x2 - x0)  # the x^2 coefficient
    if not a > 0:
        return float(x1), float(y1), 0.0
    b = (y1 - y0) / (x1 - x0) - a * (x0 + x1)
    xv = -b / (2 * a)
    yv = y1 + a * (xv - x1) ** 2 + (2 * a * x1 + b) * (xv - x1)  # the parabola at xv, expanded around x1
    return float(xv), float(yv), float(a)


def _optimum_row(xs: np.ndarray, row: np.ndarray) -> tuple[int, float, float, float, int]:
    """(index of the lowest rate, best log10 lr, best loss, the parabola's x^2 coefficient, edge) of one curve."""
    i = int(np.nanargmin(row)) if np.isfinite(row).any() else 0
    if i == 0 or i == len(xs) - 1:
        return i, float(xs[i]), float(row[i]), 0.0, -1 if i == 0 else 1
    return i, *_vertex(xs[i - 1:i + 2], row[i - 1:i + 2]), 0


def optimum(xs, losses) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(best log10 lr, best loss, edge) per row: edge -1 at the grid's first rate, +1 at its last, 0 inside."""
    xs = np.asarray(xs, dtype=np.float64)
    y, lead = _rows(losses)
    out = np.array([_optimum_row(xs, row)[1:] for row in y]).reshape(len(y), 4)  # (R, 4)
    return out[:, 0].reshape(lead), out[:, 1].reshape(lead), out[:, 3].astype(int).reshape(lead)


@dataclass(frozen=True)
class Basin:
    lo: np.ndarray  # log10(lr) of the lower edge
    hi: np.ndarray  # of the upper edge
    open_lo: np.ndarray  # bool: no rate below the edge is outside the basin (the grid's end)
    open_hi: np.ndarray

    @property
    def width(self) -> np.ndarray:
        return self.hi - self.lo

    @property
    def open(self) -> np.ndarray:
        return self.open_lo | self.open_hi


def _edge(xs: np.ndarray, row: np.ndarray, start: int, step: int, level: float) -> tuple[float, bool]:
    """Walk from ``start`` by ``step`` while the loss is within ``level``; interpolate where it leaves."""
    j = start
    while 0 <= j + step < len(xs):
        k = j + step
        if not row[k] <= level:  # outside (or not finite)
            if not np.isfinite(row[k]):
                return float(xs[k]), False
            f = (level - row[j]) / (row[k] - row[j])
            return float(xs[j] + f * (xs[k] - xs[j])), False
        j = k
    return float(xs[j]), True


def basin(xs, losses, delta: float) -> Basin:
    """The basin within ``delta`` of each row's best (the vertex loss of ``optimum``), edges interpolated."""
    xs = np.asarray(xs, dtype=np.float64)
    y, lead = _rows(losses)
    lo, hi = np.empty(len(y)), np.empty(len(y))
    olo, ohi = np.zeros(len(y), dtype=bool), np.zeros(len(y), dtype=bool)
    for r, row in enumerate(y):
        i, xv, best, a, _ = _optimum_row(xs, row)
        level = best + delta
        if row[i] > level:  # the vertex dips more than delta below the lowest rate: the parabola's own edges
            lo[r], hi[r] = xv - np.sqrt(delta / a), xv + np.sqrt(delta / a)
            continue
        lo[r], olo[r] = _edge(xs, row, i, -1, level)
        hi[r], ohi[r] = _edge(xs, row, i, +1, level)
    return Basin(lo.reshape(lead), hi.reshape(lead), olo.reshape(lead), ohi.reshape(lead))


def width(xs, losses, delta: float) -> np.ndarray | float:
    """The basin's width in decades of lr, per row (a lower bound where an edge is open)."""
    w = basin(xs, losses, delta).width
    return float(w) if np.ndim(w) == 0 else w


def sensitivity(xs, losses, initial: float, lo: float, hi: float) -> np.ndarray | float:
    """Wortsman et al.'s LR sensitivity over the rates with lo <= log10(lr) <= hi: the mean of min(loss, initial)
    minus the lowest loss there."""
    xs = np.asarray(xs, dtype=np.float64)
    keep = (xs >= lo - 1e-9) & (xs <= hi + 1e-9)
    capped = np.minimum(np.asarray(losses, dtype=np.float64)[..., keep], initial)
    out = capped.mean(-1) - capped.min(-1)
    return float(out) if np.ndim(out) == 0 else out


# ----------------------------------------------------------------------------- verdicts


def censored_direction(est: Estimate, open_terms: list[int]) -> int:
    """The direction of a difference (+1 above 0, -1 below, 0 undecided) that stays called only if no censored
    term could carry it back across 0. ``open_terms`` holds, for each censored term, the way its true value could
    move the difference: +1 up (an open width added, an optimum at the grid's top rate added, one at its lowest
    rate subtracted), -1 down. An interval above 0 survives +1 terms; one below 0 survives -1 terms."""
    d = direction(est)
    if d > 0 and any(s < 0 for s in open_terms):
        return 0
    if d < 0 and any(s > 0 for s in open_terms):
        return 0
    return d


def sign_verdict(d: int, expected: int) -> str:
    """A prediction that a difference is on the ``expected`` side of 0 (+1 or -1): holds / fails / undecided."""
    return "holds" if d == expected else "fails" if d == -expected else "undecided"


def all_verdict(dirs: list[int], expected: int) -> str:
    """Several differences all predicted on the ``expected`` side: holds if all are, fails if any is on the other."""
    if any(d == -expected for d in dirs):
        return "fails"
    return "holds" if dirs and all(d == expected for d in dirs) else "undecided"


def both_verdict(d1: int, e1: int, d2: int, e2: int) -> str:
    """Two differences predicted on given sides: holds if both are, fails if either is on the other side."""
    if d1 == -e1 or d2 == -e2:
        return "fails"
    return "holds" if d1 == e1 and d2 == e2 else "undecided"


def fp16_verdict(counts: dict, min_unscaled: int, max_scaled: int) -> str:
    """P7 from {rate: (unscaled diverged, scaled diverged)}: holds when at every rate the unscaled arm diverged in
    at least ``min_unscaled`` seeds and the scaled arm in at most ``max_scaled``; fails when at some rate the
    scaled arm diverged at least as often as the unscaled one and the unscaled one in fewer than
    ``min_unscaled``; undecided otherwise."""
    if not counts:
        return "undecided"
    if all(u >= min_unscaled and s <= max_scaled for u, s in counts.values()):
        return "holds"
    if any(s >= u and u < min_unscaled for u, s in counts.values()):
        return "fails"
    return "undecided"


def sensitivity_words(fixed_range: int, basin_gap: int) -> str:
    """What an arm's LR sensitivity difference means, from the fixed-range sensitivity (+1: the arm's is higher,
    -1 lower, 0 no difference) and its basin compared with the other arm's (+1: the other's basin is wider, so
    this arm's is narrower; -1: this arm's is wider; 0 no difference). "More sensitive" needs the narrower basin;
    a higher fixed-range sensitivity alone is a shifted optimum."""
    if basin_gap > 0:
        return "more sensitive (a narrower basin)"
    if basin_gap < 0:
        return "less sensitive (a wider basin)" + (
            "; its higher fixed-range sensitivity comes from where its optimum sits" if fixed_range > 0 else "")
    if fixed_range > 0:
        return ("not shown more sensitive: a higher fixed-range sensitivity, but no difference in basin width "
                "(where the optimum sits, not how wide the basin is)")
    if fixed_range < 0:
        return ("not shown less sensitive: a lower fixed-range sensitivity, but no difference in basin width "
                "(where the optimum sits, not how wide the basin is)")
    return "no difference in sensitivity by either measure"

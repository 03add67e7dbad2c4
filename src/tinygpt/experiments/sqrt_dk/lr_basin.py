"""Where a learning-rate curve's optimum sits and how wide its basin is: Experiment 2's measures (a) and (b), and
the verdict words built on them.

A curve is an arm's final loss at each rate of a grid, on log10(lr) (``xs``, increasing). Every function takes
losses of shape (L,) or (..., L) (a bootstrap's replicates on the leading axes) and works row by row, so that
``stats.combine`` can carry the intervals through them.

- ``optimum``: a parabola in log10(lr) through the lowest rate and its two neighbours; its vertex is the best
  log10(lr) and the best loss. At the grid's first or last rate there is no neighbour on one side: the optimum is
  that rate and is flagged as at the edge (the true one may lie beyond).
- ``basin``: the log10(lr) range around the optimum over which the loss stays within ``delta`` of the best (the
  vertex loss). The vertex is a point of the curve; each edge is interpolated linearly between the last point
  inside and the first outside; with no rate outside on a side the edge is the grid's end and is "open": the
  width is then a lower bound.
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


def _optimum_rows(xs: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per row of y (R, L): (index of the lowest rate, best log10 lr, best loss, edge). Inside the grid the best
    is the vertex of the parabola through the lowest rate and its two neighbours (the lowest rate itself when the
    three are collinear, the parabola opens downward or a neighbour is not finite)."""
    R, L = y.shape
    finite = np.where(np.isfinite(y), y, np.inf)
    i = finite.argmin(1)  # (R,): an all-NaN row gives 0
    rows = np.arange(R)
    edge = np.where(i == 0, -1, np.where(i == L - 1, 1, 0))
    j = np.clip(i, 1, L - 2) if L >= 3 else i
    bx, by = xs[i].astype(np.float64), y[rows, i].astype(np.float64)
    if L < 3:
        return i, bx, by, edge
    x0, x1, x2 = xs[j - 1], xs[j], xs[j + 1]
    y0, y1, y2 = y[rows, j - 1], y[rows, j], y[rows, j + 1]
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        a = ((y2 - y1) / (x2 - x1) - (y1 - y0) / (x1 - x0)) / (x2 - x0)  # the x^2 coefficient
        b = (y1 - y0) / (x1 - x0) - a * (x0 + x1)
        xv = -b / (2 * a)
        yv = y1 + a * (xv - x1) ** 2 + (2 * a * x1 + b) * (xv - x1)  # the parabola at xv, expanded around x1
    ok = (edge == 0) & (a > 0) & np.isfinite(xv) & np.isfinite(yv)
    return i, np.where(ok, xv, bx), np.where(ok, yv, by), edge


def optimum(xs, losses) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(best log10 lr, best loss, edge) per row: edge -1 at the grid's first rate, +1 at its last, 0 inside."""
    xs = np.asarray(xs, dtype=np.float64)
    y, lead = _rows(losses)
    _, bx, by, edge = _optimum_rows(xs, y)
    return bx.reshape(lead), by.reshape(lead), edge.reshape(lead)


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


def _edges(X: np.ndarray, Y: np.ndarray, start: np.ndarray, level: np.ndarray, step: int):
    """Per row: walk from ``start`` by ``step`` while Y <= level; the edge is interpolated linearly between the
    last point inside and the first outside (that point itself when its loss is not finite); with no point outside
    the edge is the grid's end and open. X, Y (R, M) sorted by X."""
    R, M = Y.shape
    rows = np.arange(R)
    idx = np.arange(M)[None, :]
    outside = ~(Y <= level[:, None])  # NaN counts as outside
    side = (idx < start[:, None]) if step < 0 else (idx > start[:, None])
    cand = outside & side
    if step < 0:
        k = np.where(cand.any(1), np.where(cand, idx, -1).max(1), -1)  # the nearest outside point below start
        inner, end = np.clip(k + 1, 0, M - 1), X[:, 0]
    else:
        k = np.where(cand.any(1), np.where(cand, idx, M).min(1), M)  # ... above start
        inner, end = np.clip(k - 1, 0, M - 1), X[:, -1]
    is_open = (k < 0) | (k >= M)
    kc = np.clip(k, 0, M - 1)
    xk, yk, xi, yi = X[rows, kc], Y[rows, kc], X[rows, inner], Y[rows, inner]
    with np.errstate(invalid="ignore", divide="ignore"):
        f = (level - yi) / (yk - yi)
        x = np.where(np.isfinite(yk), xi + f * (xk - xi), xk)
    return np.where(is_open, end, x), is_open


def basin(xs, losses, delta: float) -> Basin:
    """The basin within ``delta`` of each row's best (the vertex loss of ``optimum``), edges interpolated; the
    vertex is a point of the curve, so the width moves continuously with the losses."""
    xs = np.asarray(xs, dtype=np.float64)
    y, lead = _rows(losses)
    R, L = y.shape
    _, xv, best, _ = _optimum_rows(xs, y)
    X = np.concatenate([np.broadcast_to(xs, (R, L)), xv[:, None]], axis=1)  # (R, L+1): the vertex joins the curve
    Y = np.concatenate([y, best[:, None]], axis=1)
    order = np.argsort(X, axis=1, kind="stable")  # a vertex at a rate (an edge optimum) sorts after it: same loss
    X, Y = np.take_along_axis(X, order, 1), np.take_along_axis(Y, order, 1)
    start = (order == L).argmax(1)  # (R,): where the vertex went
    level = best + delta
    lo, olo = _edges(X, Y, start, level, -1)
    hi, ohi = _edges(X, Y, start, level, +1)
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
    if d and not est.value * d > 0:  # an interval on one side of 0 and a value on the other: not called
        return 0
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


def sensitivity_words(fixed_range: int, basin_gap: int, optimum_moved: bool = False) -> str:
    """What an arm's LR sensitivity difference means, from the fixed-range sensitivity (+1: the arm's is higher,
    -1 lower, 0 not distinguished), its basin against the other arm's (+1: the other's basin is wider, so this
    arm's is narrower; -1: this arm's is wider; 0 not distinguished) and whether the optimum moved (its difference
    called). "More sensitive" needs the narrower basin; a fixed-range difference alone is attributed to the optimum
    only when the optimum's own difference is called."""
    if basin_gap > 0:
        return "more sensitive (a narrower basin)"
    if basin_gap < 0:
        return "less sensitive (a wider basin)" + (
            "; its higher fixed-range sensitivity comes with a moved optimum" if fixed_range > 0 and optimum_moved
            else "; its fixed-range sensitivity is higher all the same" if fixed_range > 0 else "")
    if fixed_range:
        word = "higher" if fixed_range > 0 else "lower"
        why = ("with the optimum moved: the optimum's shift is established, a basin difference neither established "
               "nor excluded" if optimum_moved else "that no detected basin or optimum difference explains")
        return (f"not shown {'more' if fixed_range > 0 else 'less'} sensitive: a {word} fixed-range sensitivity, "
                f"basin widths not distinguished, {why}")
    return "not distinguished in sensitivity by either measure"

"""What design 3's report computes from the runs (docs/experiments/sqrt_dk_stability/DESIGN.md, "Measures"): each run's
arm, rate and outcome (trained or failed), each arm's per-seed edges, the verdicts Q1, S1-S3 and the numbers reported
beside them (the midpoint's shift, LR sensitivity, the mechanism at the edge)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
from scipy import stats as scipy_stats

from tinygpt.analysis.stats import LEVEL, Estimate, failed_to_train
from tinygpt.analysis.sweep import ReportError, Run
from tinygpt.experiments.sqrt_dk_stability import edge
from tinygpt.model.config import scale_factor

ORDER = ("sqrt", "mid", "none", "qknorm")  # the design's arms, in its table's order
LABELS = {"sqrt": "1/sqrt(d_k)", "mid": "4/sqrt(d_k)", "none": "unscaled", "qknorm": "1/sqrt(d_k) + qk-layernorm"}
SCALED = ("sqrt", "mid", "none")  # the dose response: the edge against log10 of the scale factor


def d_k(run: Run) -> int:
    m = run.config["model"]
    return int(m["n_embd"]) // int(m["n_head"])


def arm_of(run: Run) -> str:
    """sqrt | mid | none | qknorm, from the run's attention settings: the scale by name (sqrt_dk, none), or a number
    that is 4/sqrt(d_k) (the midpoint), and qk_norm."""
    attn = run.config["model"]["attn"]
    scale, norm = attn["scale"], bool(attn.get("qk_norm"))
    if scale == "sqrt_dk":
        return "qknorm" if norm else "sqrt"
    if scale == "none" and not norm:
        return "none"
    if not norm and scale != "inv_dk" and math.isclose(scale_factor(scale, d_k(run)) * math.sqrt(d_k(run)), 4.0):
        return "mid"
    raise ReportError(f"{run.dir} is not an arm of design 3 (scale {attn['scale']!r}, qk_norm {attn.get('qk_norm')}).")


def log_scale(name: str, dk: int) -> float:
    """log10 of an arm's scale factor at head size ``dk``."""
    return math.log10({"sqrt": 1.0, "mid": 4.0, "none": math.sqrt(dk)}[name] / math.sqrt(dk))


def lr(run: Run) -> float:
    return float(run.config["optim"]["lr"])


def final_loss(run: Run) -> float:
    """The final validation loss (the mean over the validation windows); NaN when the run diverged."""
    if run.summary.get("diverged"):
        return math.nan
    return float(run.window_means().mean())


def failed(run: Run, fraction: float) -> bool:
    """The design's failure: a non-finite loss, the divergence guard, or a final validation loss not below the unigram
    loss by ``fraction`` of the unigram - bigram gap (each run's own unigram and bigram losses)."""
    loss = final_loss(run)
    if not math.isfinite(loss):
        return True
    d = run.summary["diagnostics"]
    return failed_to_train(loss, float(d["unigram_loss"]), float(d["bigram_loss"]), fraction)


@dataclass
class Arm:
    """One arm's runs on the grid: ``rates`` (ascending), ``seeds``, ``runs[s][r]``, ``failed`` (S, R), ``losses``
    (S, R) final validation losses (NaN where diverged), and its per-seed ``edges``."""

    name: str
    rates: list[float]
    seeds: list[int]
    runs: list[list[Run]]
    failed: np.ndarray
    losses: np.ndarray
    edges: edge.Edges = field(init=False)

    def __post_init__(self):
        self.edges = edge.edges(np.log10(self.rates), self.failed, tuple(self.seeds))


def arms(runs: list[Run], fraction: float) -> dict[str, Arm]:
    """The runs as the design's arms, each a full seeds x rates grid; a hole in an arm's grid is refused (an edge
    needs every rate of every seed)."""
    cells: dict[str, dict[tuple[int, float], Run]] = {}
    for r in runs:
        cell = cells.setdefault(arm_of(r), {})
        key = (r.seed, lr(r))
        if key in cell:
            raise ReportError(f"{r.dir} and {cell[key].dir} are the same arm, rate and seed; give each run once.")
        cell[key] = r
    out = {}
    for name in [n for n in ORDER if n in cells]:
        cell = cells[name]
        seeds, rates = sorted({s for s, _ in cell}), sorted({x for _, x in cell})
        missing = [(s, x) for s in seeds for x in rates if (s, x) not in cell]
        if missing:
            s, x = missing[0]
            raise ReportError(f"arm {name} has no run at lr {x:g} with seed {s} ({len(missing)} of its "
                              f"{len(seeds) * len(rates)} cells missing); an edge needs every rate of every seed.")
        grid = [[cell[(s, x)] for x in rates] for s in seeds]
        out[name] = Arm(name, rates, seeds, grid,
                        np.array([[failed(r, fraction) for r in row] for row in grid]),
                        np.array([[final_loss(r) for r in row] for row in grid]))
    return out


@dataclass(frozen=True)
class Verdict:
    key: str
    verdict: str
    estimate: Estimate | None
    what: str  # the measure the estimate is


def verdicts(found: dict[str, Arm], pred: dict) -> list[Verdict]:
    """Q1, S1, S2, S3 where their arms ran (DESIGN.md, "Predictions and criteria")."""
    parts = {n: a.edges for n, a in found.items()}
    out = []
    if {"qknorm", "sqrt"} <= set(parts):
        v, e = edge.side(parts, {"qknorm": 1, "sqrt": -1}, +1)
        out.append(Verdict("Q1", v, e, "edge(qk-layernorm) - edge(1/sqrt(d_k)), decades"))
    if {"none", "sqrt"} <= set(parts):
        v, e = edge.side(parts, {"none": 1, "sqrt": -1}, -1)
        out.append(Verdict("S1", v, e, "edge(unscaled) - edge(1/sqrt(d_k)), decades"))
        lo, hi = pred["shift_none"] - pred["shift_band"], pred["shift_none"] + pred["shift_band"]
        v, e = edge.within(parts, {"none": 1, "sqrt": -1}, lo, hi)
        out.append(Verdict("S2", v, e, "edge(unscaled) - edge(1/sqrt(d_k)), decades"))
    if set(SCALED) <= set(parts):
        dk = d_k(found["sqrt"].runs[0][0])
        w = edge.slope_weights({n: log_scale(n, dk) for n in SCALED})
        v, e = edge.within(parts, w, pred["slope"] - pred["slope_band"], pred["slope"] + pred["slope_band"])
        out.append(Verdict("S3", v, e, "slope of the edge against log10(scale factor)"))
    return out


def edge_estimate(a: Arm) -> Estimate:
    return edge.combination({a.name: a.edges}, {a.name: 1})


def seed_interval(values: np.ndarray) -> Estimate:
    """A mean over seeds with its t-interval (S - 1 degrees of freedom)."""
    v = np.asarray(values, dtype=np.float64)
    m = float(v.mean())
    if len(v) < 2:
        return Estimate(m, math.nan, math.nan)
    half = float(scipy_stats.t.ppf(1 - (1 - LEVEL) / 2, len(v) - 1)) * float(v.std(ddof=1)) / math.sqrt(len(v))
    return Estimate(m, m - half, m + half, df=len(v) - 1)


def sensitivity(a: Arm) -> tuple[Estimate, float]:
    """Wortsman et al.'s LR sensitivity over the arm's grid, per seed, with the initial loss ln(vocab) (a diverged run
    counted at it), and that initial loss."""
    initial = math.log(float(a.runs[0][0].summary["vocab_size"]))
    losses = np.where(np.isfinite(a.losses), a.losses, initial)
    return seed_interval(edge.sensitivity(losses, initial)), initial


def last_probe(run: Run, key: str) -> float:
    """A probe series' value at its last step (NaN without one)."""
    steps, values = run.series(key)
    return float(values[np.argmax(steps)]) if len(steps) else math.nan


def at_the_edge(a: Arm) -> dict[str, list[Run]]:
    """Per seed the two runs on either side of its edge: the highest rate it trained at below the edge ('trained')
    and the lowest it failed at above it ('failed'); a seed whose edge is a bound has one of them only."""
    out: dict[str, list[Run]] = {"trained": [], "failed": []}
    for s, row in enumerate(a.runs):
        x = a.edges.values[s]
        below = [i for i, r in enumerate(row) if math.log10(a.rates[i]) < x and not a.failed[s, i]]
        above = [i for i, r in enumerate(row) if math.log10(a.rates[i]) > x and a.failed[s, i]]
        if below:
            out["trained"].append(row[max(below)])
        if above:
            out["failed"].append(row[min(above)])
    return out


def above_bigram(run: Run) -> bool:
    """Post hoc (not in the design): the run's final loss is not below its own bigram loss (or it diverged): it
    learned no more than a bigram table does."""
    loss = final_loss(run)
    return not math.isfinite(loss) or loss >= float(run.summary["diagnostics"]["bigram_loss"])


def bigram_edges(found: dict[str, Arm]) -> dict[str, edge.Edges]:
    """Post hoc: per arm, the edge (the same estimator) of the rate at which the final loss reaches the bigram loss."""
    return {n: edge.edges(np.log10(a.rates), np.array([[above_bigram(r) for r in row] for row in a.runs]),
                          tuple(a.seeds)) for n, a in found.items()}

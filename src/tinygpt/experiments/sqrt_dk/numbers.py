"""Experiment 2's numbers, apart from how the report words them: each arm's three measures (optimum, basin width,
LR sensitivity), the comparisons between arms, the predictions' verdicts and the float16 counts. Design:
docs/experiments/sqrt_dk/DESIGN.md.

An arm is (d_k, heads, width, scale, qk-norm, precision); a cell is an arm at one learning rate, a Sample of its
seeds' per-window final losses. All cells are drawn in one bootstrap, with one seed draw for every cell of the
same seeds (the same seed is the same data order, and at the same width the same init, in every arm), so that
every measure and difference is computed on aligned replicates (tinygpt.analysis.stats).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, field

import numpy as np

from tinygpt.experiments.sqrt_dk import lr_basin
from tinygpt.analysis.stats import Estimate, Sample, bootstrap, combine, failed_to_train, mean_spread
from tinygpt.analysis.sweep import ReportError, Run, group_by, window_measure


@dataclass(frozen=True, order=True)
class ArmKey:
    d_k: int
    heads: int
    width: int
    scale: str
    qk_norm: bool
    precision: str = "32-true"

    @property
    def fp16(self) -> bool:
        return self.precision.startswith("16")

    @property
    def scale_label(self) -> str:
        return {"sqrt_dk": "1/sqrt(d_k)", "none": "unscaled", "inv_dk": "1/d_k"}.get(self.scale, f"scale {self.scale}")

    @property
    def label(self) -> str:
        return (f"d_k = {self.d_k} ({self.heads} head{'s' if self.heads != 1 else ''}, width {self.width}), "
                f"{self.scale_label}" + (" + qk-layernorm" if self.qk_norm else "")
                + (f", {self.precision}" if self.fp16 else ""))

    def partner(self, **change) -> ArmKey:
        return ArmKey(**{**self.__dict__, **change})


def arm_of(run: Run) -> ArmKey:
    m = run.config["model"]
    return ArmKey(m["n_embd"] // m["n_head"], m["n_head"], m["n_embd"], str(m["attn"]["scale"]),
                  bool(m["attn"].get("qk_norm", False)), str(run.config["trainer"].get("precision", "32-true")))


def lr(run: Run) -> float:
    return float(run.config["optim"]["lr"])


def init_loss(run: Run) -> float:
    """The loss at initialisation, taken as ln(vocab): near-uniform predictions from the tied 0.02-std head."""
    return math.log(run.summary["vocab_size"])


def final_loss(run: Run) -> float:
    """Final validation loss; NaN for a diverged or non-finite run."""
    v = run.summary.get("val_loss")
    if run.summary.get("diverged") or v is None or not math.isfinite(v):
        return float("nan")
    return float(v)


def saved_window_losses(run: Run, n_windows: int) -> np.ndarray:
    """(windows,) final validation loss of each window; a diverged run counts as its initial loss on every window
    (Wortsman et al.)."""
    if not math.isfinite(final_loss(run)):
        return np.full(n_windows, init_loss(run))
    return window_measure(run, "mean")


def arms_of(runs: list[Run]) -> dict[ArmKey, dict[float, list[Run]]]:
    """arm -> {lr: [runs sorted by seed]}."""
    return group_by(runs, arm_of, lr)


def baselines(runs: list[Run]) -> tuple[float, float]:
    d = next(r.summary["diagnostics"] for r in runs if r.summary.get("diagnostics", {}).get("unigram_loss"))
    return d["unigram_loss"], d["bigram_loss"]


# ----------------------------------------------------------------------------- one arm


@dataclass
class Arm:
    """One arm's numbers from the shared bootstrap. ``opt_edge``: -1/+1 when the best rate is the grid's first/last
    (not interpolated); ``open_lo``/``open_hi``: the basin reaches the grid's end on that side (the width is a lower
    bound); the ``*_share`` fields: the share of bootstrap replicates in which that happens (an interval that
    mixes bounds with values); ``dip``: how far the interpolated best loss lies below the best rate's loss;
    ``trained``: the best rate's loss is below the failed-to-train line (an arm that never trains has no basin)."""

    key: ArmKey
    lrs: list[float]
    loss: dict[float, Estimate]
    opt_x: Estimate  # best log10(lr), interpolated
    opt_loss: Estimate
    opt_edge: int
    width: Estimate  # basin width in decades at the design's delta
    lo: float  # edges of the basin at the data's value (log10 lr)
    hi: float
    open_lo: bool
    open_hi: bool
    open_share: float
    open_lo_share: float
    open_hi_share: float
    edge_lo_share: float  # replicates whose optimum is at the grid's first rate
    edge_hi_share: float
    dip: float
    trained: bool
    widths: dict[float, Estimate]  # the robustness deltas
    sensitivity: Estimate
    diverged: dict[float, int]
    failed: dict[float, int]
    runs: dict[float, int]
    init: float  # ln(vocab): the loss at initialisation, the cap of the LR sensitivity
    beats_bigram: bool  # its best loss is below the bigram baseline: its attention learned something
    seed_curves: np.ndarray = field(repr=False, default=None)  # (S, L): each seed's window-mean loss per rate
    seeds: tuple = ()
    at_bigram: dict = field(default_factory=dict)  # runs per rate ending at or above the bigram baseline
    cells: list[Estimate] = field(repr=False, default_factory=list)

    @property
    def xs(self) -> np.ndarray:
        return np.log10(self.lrs)

    @property
    def open(self) -> bool:
        return self.open_lo or self.open_hi

    def may_be_open(self, side: int) -> bool:
        """Whether the basin is, or in more than 2.5% of the replicates may be, open below (-1) or above (+1)."""
        return (self.open_lo or self.open_lo_share > CENSORED) if side < 0 else (
            self.open_hi or self.open_hi_share > CENSORED)

    def may_be_at_edge(self, side: int) -> bool:
        """Whether the optimum is, or in more than 2.5% of the replicates may be, at the grid's first/last rate."""
        return (self.opt_edge == side) or (self.edge_lo_share if side < 0 else self.edge_hi_share) > CENSORED


CENSORED = 0.025  # a share of replicates with an open edge (or an edge optimum) above this makes the arm censored


@dataclass(frozen=True)
class Measures:
    """What the design fixes: the basin's delta, the robustness deltas, the fixed range of the LR sensitivity."""

    delta: float
    sensitivity_range: tuple[float, float]
    other_deltas: tuple[float, ...] = (0.05, 0.2)
    failed_fraction: float = 0.5


def cells_of(arms: dict) -> dict[tuple[ArmKey, float], Estimate]:
    """Every cell's final loss as an Estimate, all from one bootstrap; cells of the same seeds share the seed draw."""
    any_npz = next((r for by_lr in arms.values() for rs in by_lr.values() for r in rs if r.windows() is not None),
                   None)
    if any_npz is None:
        raise ReportError("no run has diagnostics.npz: rerun the sweep at this version.")
    n = len(any_npz.windows())
    samples = {}
    for key, by_lr in sorted(arms.items()):
        for x, rs in sorted(by_lr.items()):
            ids = tuple(r.seed for r in rs)
            samples[(key, x)] = Sample(np.stack([saved_window_losses(r, n) for r in rs]), seeds=f"seeds {ids}",
                                       seed_ids=ids)
    return bootstrap(samples)


def arm_numbers(key: ArmKey, by_lr: dict[float, list[Run]], est: dict, m: Measures, baseline: tuple) -> Arm:
    lrs = sorted(by_lr)
    xs = np.log10(lrs)
    cells = [est[(key, x)] for x in lrs]
    values = np.array([c.value for c in cells])
    init = init_loss(by_lr[lrs[0]][0])
    lo_r, hi_r = np.log10(m.sensitivity_range)
    b = lr_basin.basin(xs, values, m.delta)
    reps = np.stack([c.replicates for c in cells], axis=-1)  # (B, L)
    rb = lr_basin.basin(xs, reps, m.delta)
    r_edge = lr_basin.optimum(xs, reps)[2]
    _, best, edge = lr_basin.optimum(xs, values)
    unigram, bigram = baseline
    trained = float(np.nanmin(values)) < unigram - m.failed_fraction * (unigram - bigram)
    nan = Estimate(math.nan, math.nan, math.nan)
    seeds = tuple(r.seed for r in by_lr[lrs[0]])
    same_seeds = all(tuple(r.seed for r in by_lr[x]) == seeds for x in lrs)
    n = len(next(r for rs in by_lr.values() for r in rs if r.windows() is not None).windows())
    curves = (np.stack([[saved_window_losses(r, n).mean() for r in by_lr[x]] for x in lrs], axis=1)
              if same_seeds else None)
    return Arm(
        key, lrs, {x: est[(key, x)] for x in lrs},
        combine(lambda y: lr_basin.optimum(xs, y)[0], cells),
        combine(lambda y: lr_basin.optimum(xs, y)[1], cells),
        int(edge),
        combine(lambda y: lr_basin.width(xs, y, m.delta), cells) if trained else nan,
        float(b.lo), float(b.hi), bool(b.open_lo), bool(b.open_hi), float(rb.open.mean()),
        float(rb.open_lo.mean()), float(rb.open_hi.mean()), float((r_edge < 0).mean()), float((r_edge > 0).mean()),
        float(np.nanmin(values) - best), trained,
        {d: combine(lambda y, d=d: lr_basin.width(xs, y, d), cells) if trained else nan for d in m.other_deltas},
        combine(lambda y: lr_basin.sensitivity(xs, y, init, lo_r, hi_r), cells),
        {x: sum(not math.isfinite(final_loss(r)) for r in by_lr[x]) for x in lrs},
        {x: sum(failed_to_train(final_loss(r), unigram, bigram, m.failed_fraction) for r in by_lr[x]) for x in lrs},
        {x: len(by_lr[x]) for x in lrs},
        init,
        bool(float(np.nanmin(values)) < bigram),
        curves,
        seeds if same_seeds else (),
        {x: sum(not final_loss(r) < bigram for r in by_lr[x]) for x in lrs},
        cells,
    )


# ----------------------------------------------------------------------------- two arms


@dataclass
class Comparison:
    """Arm a minus arm b on each measure, with directions that respect censoring (lr_basin.censored_direction)."""

    a: Arm
    b: Arm
    d_opt: Estimate  # log10(lr*) of a minus b
    d_best: Estimate  # best loss of a minus b
    d_width: Estimate  # basin width of a minus b (decades)
    d_sens: Estimate  # LR sensitivity of a minus b
    d_widths: dict[float, Estimate]  # the width difference at the robustness deltas
    dir_opt: int
    dir_best: int
    dir_width: int
    dir_sens: int
    delta: float = 0.1


def _two(a: Arm, b: Arm, f) -> Estimate:
    """f(a's curve) - f(b's curve) on aligned replicates."""
    la = len(a.cells)
    return combine(lambda y: f(a, y[..., :la]) - f(b, y[..., la:]), a.cells + b.cells)


def opt_moves(arm: Arm, sign: int) -> list[int]:
    """Where a censored optimum could move a difference it enters with ``sign``: an optimum at (or, in some
    replicates, near enough to be at) the grid's first rate could be lower, at its last higher."""
    return [sign * side for side in (-1, 1) if arm.may_be_at_edge(side)]


def best_moves(arm: Arm, sign: int) -> list[int]:
    """A best loss read at the grid's edge could be lower beyond it."""
    return [-sign] if arm.may_be_at_edge(-1) or arm.may_be_at_edge(1) else []


def width_moves(arm: Arm, sign: int) -> list[int]:
    """An open basin (or one open in some replicates) could be wider."""
    return [sign] if arm.may_be_open(-1) or arm.may_be_open(1) else []


def compare(a: Arm, b: Arm, m: Measures) -> Comparison:
    lo_r, hi_r = np.log10(m.sensitivity_range)
    d_opt = _two(a, b, lambda arm, y: lr_basin.optimum(arm.xs, y)[0])
    d_best = _two(a, b, lambda arm, y: lr_basin.optimum(arm.xs, y)[1])
    d_width = _two(a, b, lambda arm, y: lr_basin.width(arm.xs, y, m.delta))
    d_sens = _two(a, b, lambda arm, y: lr_basin.sensitivity(arm.xs, y, arm.init, lo_r, hi_r))
    d_widths = {d: _two(a, b, lambda arm, y, d=d: lr_basin.width(arm.xs, y, d)) for d in m.other_deltas}
    cd = lr_basin.censored_direction
    return Comparison(a, b, d_opt, d_best, d_width, d_sens, d_widths,
                      cd(d_opt, opt_moves(a, +1) + opt_moves(b, -1)),
                      cd(d_best, best_moves(a, +1) + best_moves(b, -1)),
                      cd(d_width, width_moves(a, +1) + width_moves(b, -1)),
                      cd(d_sens, []), m.delta)


def growth(s_big: Arm, n_big: Arm, s_small: Arm, n_small: Arm, m: Measures) -> tuple[Estimate, int]:
    """(scaled - unscaled width at the larger d_k) - (the same at the smaller): the growth of the scale's basin
    advantage, and its censored direction."""
    arms = [s_big, n_big, s_small, n_small]
    sizes = np.cumsum([0] + [len(a.cells) for a in arms])
    signs = [+1, -1, -1, +1]

    def f(y):
        return sum(s * lr_basin.width(a.xs, y[..., sizes[i]:sizes[i + 1]], m.delta)
                   for i, (a, s) in enumerate(zip(arms, signs, strict=True)))

    est = combine(f, [c for a in arms for c in a.cells])
    moves = [mv for a, s in zip(arms, signs, strict=True) for mv in width_moves(a, s)]
    return est, lr_basin.censored_direction(est, moves)


# ----------------------------------------------------------------------------- the whole sweep


@dataclass
class Numbers:
    arms: dict[ArmKey, Arm]
    measures: Measures
    bigram: float = math.nan  # the bigram baseline's loss on the validation windows

    def get(self, **kw) -> Arm | None:
        key = ArmKey(**{"precision": "32-true", **kw})
        return self.arms.get(key)


def numbers(arms: dict, m: Measures, baseline: tuple) -> Numbers:
    """Every float32 arm's numbers from one bootstrap (the float16 arms are counted apart: fp16_counts). An arm
    that lacks a rate of the fixed range the others have gets no LR sensitivity (it would average other rates)."""
    main = {k: v for k, v in arms.items() if not k.fp16}
    if not main:
        raise ReportError("no float32 runs: give the sweep of experiment=sqrt_dk, not only the float16 one.")
    est = cells_of(main)
    out = {k: arm_numbers(k, by_lr, est, m, baseline) for k, by_lr in sorted(main.items())}
    lo, hi = m.sensitivity_range
    in_range = {x for a in out.values() for x in a.lrs if lo * (1 - 1e-9) <= x <= hi * (1 + 1e-9)}
    for a in out.values():
        if not in_range <= set(a.lrs):
            a.sensitivity = Estimate(math.nan, math.nan, math.nan)
    return Numbers(out, m, baseline[1])


def stage_two(nums: Numbers, ladder: list[float]) -> tuple[dict[ArmKey, list[float]], list[ArmKey]]:
    """The design's stage-2 rule at the data's values: an arm still on the stage-1 grid (the rates every arm has)
    whose loss at the outermost rate on a side is within delta of its best, or whose best rate is that outermost
    rate, gets the next two rates of the ladder on that side. Returns (what stage 2 needs, the arms it extended
    that are still open: reported open, the design runs no third stage)."""
    stage1 = set.intersection(*(set(a.lrs) for a in nums.arms.values()))
    need, still_open = {}, []
    for k, a in nums.arms.items():
        values = np.array([a.loss[x].value for x in a.lrs])
        best = float(np.nanmin([a.opt_loss.value, *values]))
        low = values[0] <= best + nums.measures.delta or a.opt_edge < 0
        high = values[-1] <= best + nums.measures.delta or a.opt_edge > 0
        if set(a.lrs) != stage1:  # extended by stage 2 already
            if low or high:
                still_open.append(k)
            continue
        rates = ([x for x in ladder if x < a.lrs[0] * (1 - 1e-6)][-2:] if low else []) + (
            [x for x in ladder if x > a.lrs[-1] * (1 + 1e-6)][:2] if high else [])
        if rates:
            need[k] = rates
    return need, still_open


FP16_ARMS = {"sqrt_dk", "none"}  # the float16 sweep's two arms, at d_k = 256 (one head at width 256)


def fp16_counts(arms: dict) -> dict[float, dict[str, tuple[int, int]]]:
    """{lr: {scale: (diverged, runs)}} of the float16 arms of the design (d_k = 256, one head, width 256)."""
    out: dict = defaultdict(dict)
    for k, by_lr in arms.items():
        if k.fp16 and (k.d_k, k.heads, k.width, k.qk_norm) == (256, 1, 256, False) and k.scale in FP16_ARMS:
            for x, rs in by_lr.items():
                out[x][k.scale] = (sum(not math.isfinite(final_loss(r)) for r in rs), len(rs))
    return dict(sorted(out.items()))


def fp16_complete(counts: dict, rates: int = 3, seeds: int = 5) -> bool:
    """Whether the float16 counts hold the design's sweep: both arms, at least ``rates`` rates, ``seeds`` each."""
    return len(counts) >= rates and all(set(by) == FP16_ARMS and all(n == seeds for _, n in by.values())
                                        for by in counts.values())


def diverged_step(run: Run) -> int | None:
    """The step at which a diverged run stopped (summary.json's steps: the guard stops at the first bad loss)."""
    if run.summary.get("steps") is not None:
        return int(run.summary["steps"])
    steps, _ = run.series("train/loss")
    return int(steps[-1]) if len(steps) else None


@dataclass(frozen=True)
class SeedLevel:
    """A difference computed seed by seed (each seed's own curves, paired by seed id): the mean, a t interval over
    the seeds and how many seeds lie above 0. A robustness check beside the bootstrap, no verdict."""

    mean: float
    lo: float
    hi: float
    above: int
    n: int

    def format(self, digits: int = 2) -> str:
        if not math.isfinite(self.mean):
            return "n/a"
        f = f"+.{digits}f"
        return f"{self.mean:{f}} [{self.lo:{f}}, {self.hi:{f}}] ({self.above} of {self.n} seeds above 0)"


def seed_level(a: Arm, b: Arm, f) -> SeedLevel:
    """f(a's curve of seed s) - f(b's curve of seed s) for each seed both arms have, with a t(S-1) interval."""
    from scipy import stats as scipy_stats

    if a.seed_curves is None or b.seed_curves is None or a.seeds != b.seeds or len(a.seeds) < 2:
        return SeedLevel(math.nan, math.nan, math.nan, 0, 0)
    d = np.asarray(f(a, a.seed_curves) - f(b, b.seed_curves), dtype=np.float64)  # (S,)
    S = len(d)
    half = float(scipy_stats.t.ppf(0.975, S - 1) * d.std(ddof=1) / math.sqrt(S))
    return SeedLevel(float(d.mean()), float(d.mean() - half), float(d.mean() + half), int((d > 0).sum()), S)


def max_logit(runs: list[Run]) -> tuple[float, float] | None:
    """Mean ± sd over seeds of the max attention logit at the end (end-of-run diagnostics)."""
    vals = [v for r in runs if (v := r.summary.get("attn_max_logit")) is not None and math.isfinite(v)]
    return mean_spread(vals) if vals else None

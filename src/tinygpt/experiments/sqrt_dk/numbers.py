"""Design 2's numbers: every estimate a prediction of docs/experiments/sqrt_dk/DESIGN.md names, with its interval,
from one bootstrap over the runs (windows and seeds resampled, paired by seed and window across arms,
t-calibrated at the seed level: tinygpt.analysis.stats), and each prediction's verdict from
tinygpt.experiments.sqrt_dk.verdicts.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from tinygpt.analysis.stats import Estimate, Sample, bootstrap, combine
from tinygpt.analysis.sweep import ReportError, Run, group_by
from tinygpt.experiments.sqrt_dk import lr_basin, readings, verdicts
from tinygpt.experiments.sqrt_dk.readings import Arm

D_KS = (16, 64, 256)
DESCRIBED = ("softmax_gain", "entropy")  # the mechanism's other probes at init (mean of the layers), without verdicts
SEED_SD_SHOWN = 0.05  # nats: a cell whose seeds' final losses have a larger sd has its per-seed outcomes printed


@dataclass
class Curve:
    """One float32 arm's learning-rate curve: the final loss at each rate, its optimum, basin half-widths."""

    arm: Arm
    lrs: list[float]
    cells: list[Estimate]
    opt_x: Estimate  # best log10(lr), interpolated
    best: Estimate  # the vertex loss
    lower: Estimate  # half-widths of the basin, decades: optimum - lower edge
    upper: Estimate  # upper edge - optimum
    open_lo: bool
    open_hi: bool
    best_lr: float  # the rate with the lowest final loss on the data
    runs: dict[float, list[Run]] = field(repr=False, default_factory=dict)
    seeds: SeedCurves | None = field(repr=False, default=None)


@dataclass(frozen=True)
class SeedCurves:
    """One arm's curve seed by seed (each seed's final loss, its mean over the windows, at each rate): the
    statistics whose bootstrap replicates pile on a bound (an argmin vertex, a basin edge at the grid's end) are
    reported as these per-seed values, never as an interval. ``losses`` (S, L), NaN where a seed did not run a rate;
    per seed the vertex optimum (log10 lr), the basin's half-widths and whether each edge is open."""

    seeds: tuple[int, ...]
    losses: np.ndarray
    optimum: np.ndarray
    lower: np.ndarray
    upper: np.ndarray
    open_lo: np.ndarray
    open_hi: np.ndarray


def seed_curves(xs: np.ndarray, by_lr: dict[float, list[Run]], n: int, delta: float) -> SeedCurves:
    lrs = sorted(by_lr)
    seeds = tuple(sorted({r.seed for rs in by_lr.values() for r in rs}))
    y = np.full((len(seeds), len(lrs)), np.nan)
    for j, x in enumerate(lrs):
        for r in by_lr[x]:
            y[seeds.index(r.seed), j] = float(readings.final_windows(r, n).mean())
    x0 = lr_basin.optimum(xs, y)[0]
    b = lr_basin.basin(xs, y, delta)
    return SeedCurves(seeds, y, np.atleast_1d(x0), np.atleast_1d(x0 - b.lo), np.atleast_1d(b.hi - x0),
                      np.atleast_1d(b.open_lo), np.atleast_1d(b.open_hi))


def best_cell(curves: list[Curve]) -> Estimate:
    """The first curve's lowest cell minus the second's, cell by cell (no parabola): each arm's best measured rate,
    with the interval of the difference of the two minima over the bootstrap's replicates."""
    a, b = curves
    k = len(a.cells)
    return combine(lambda y: np.min(y[..., :k], axis=-1) - np.min(y[..., k:], axis=-1), [*a.cells, *b.cells])


def split_seeds(c: Curve) -> dict[float, tuple[tuple[int, ...], np.ndarray]]:
    """The cells whose seeds' final losses (each the mean over the windows) have a sample sd above SEED_SD_SHOWN:
    {rate: (seeds, each seed's final loss)}."""
    out = {}
    if c.seeds is None:
        return out
    for j, x in enumerate(c.lrs):
        v = c.seeds.losses[:, j]
        ok = np.isfinite(v)
        if ok.sum() > 1 and float(np.std(v[ok], ddof=1)) > SEED_SD_SHOWN:
            out[x] = (tuple(s for s, good in zip(c.seeds.seeds, ok, strict=True) if good), v[ok])
    return out


def float32_arms(runs: list[Run]) -> dict[Arm, dict[float, list[Run]]]:
    """The main sweep's runs by arm and rate (not the float16 runs, nor their float32 reruns)."""
    main = [r for r in runs if not readings.arm_of(r).fp16 and r.experiment != FP32]
    return group_by(main, readings.arm_of, readings.lr)


def window_count(runs: list[Run]) -> int:
    """How many validation windows the runs' end-of-run losses cover (a diverged run has none: the first that has)."""
    for r in runs:
        try:
            return r.window_count()
        except ReportError:
            continue
    raise ReportError("no run has diagnostics.npz: rerun the sweep at this version.")


def scalar(values: list[float], ids: tuple, name: str) -> Sample:
    """Per-run scalars (one per seed) as a one-window Sample: the seed level alone, paired by seed id."""
    return Sample(np.asarray(values, dtype=np.float64)[:, None], windows=f"scalar:{name}", seeds=f"seeds {ids}",
                  seed_ids=ids)


def samples(arms: dict[Arm, dict[float, list[Run]]], n: int, pred: dict) -> dict:
    """Every sample the estimates need: each cell's final window losses, and per arm the per-run scalars (the
    mechanism at init and through training at pred['mechanism_lr'], the gradient at init, the loss spikes averaged
    over its rates, the half-budget loss and the steps to the bigram loss at each rate)."""
    out = {}
    for arm, by_lr in sorted(arms.items()):
        for x, rs in sorted(by_lr.items()):
            ids = tuple(r.seed for r in rs)
            out[("final", arm, x)] = Sample(np.stack([readings.final_windows(r, n) for r in rs]), seeds=f"seeds {ids}",
                                            seed_ids=ids)
            out[("half", arm, x)] = scalar([readings.half_budget_loss(r) for r in rs], ids, "half")
            out[("steps", arm, x)] = scalar([readings.steps_to_bigram(r)[0] for r in rs], ids, "steps")
        at = by_lr.get(pred["mechanism_lr"]) or by_lr[sorted(by_lr)[0]]  # the init does not depend on the rate
        ids = tuple(r.seed for r in at)
        out[("trace0", arm)] = scalar([readings.trace_at_init(r) for r in at], ids, "trace0")
        out[("grad0", arm)] = scalar([readings.gradient_at_init(r) for r in at], ids, "grad0")
        for name in DESCRIBED:  # reported without verdicts (DESIGN.md, "Measures")
            out[(name, arm)] = scalar([readings.at_init(r, name) for r in at], ids, name)
        out[("raw_qk", arm)] = scalar([readings.largest_at_init(r, "raw_qk") for r in at], ids, "raw_qk")
        if pred["mechanism_lr"] in by_lr:
            out[("trace", arm)] = scalar([readings.trace_in_training(r) for r in by_lr[pred["mechanism_lr"]]], ids,
                                         "trace")
        seeds = sorted({r.seed for rs in by_lr.values() for r in rs})
        spikes = [np.mean([readings.spikes(r, pred["spike_nats"]) for rs in by_lr.values() for r in rs if r.seed == s])
                  for s in seeds]
        out[("spikes", arm)] = scalar(spikes, tuple(seeds), "spikes")
    return out


def curve(arm: Arm, by_lr: dict[float, list[Run]], est: dict, delta: float, n: int | None = None) -> Curve:
    lrs = sorted(by_lr)
    xs = np.log10(lrs)
    cells = [est[("final", arm, x)] for x in lrs]
    values = np.array([c.value for c in cells])
    b = lr_basin.basin(xs, values, delta)

    def half(side):
        def f(y):
            bb = lr_basin.basin(xs, y, delta)
            x0 = lr_basin.optimum(xs, y)[0]
            return (x0 - bb.lo) if side < 0 else (bb.hi - x0)
        return combine(f, cells)

    return Curve(arm, lrs, cells, combine(lambda y: lr_basin.optimum(xs, y)[0], cells),
                 combine(lambda y: lr_basin.optimum(xs, y)[1], cells), half(-1), half(+1), bool(b.open_lo),
                 bool(b.open_hi), float(lrs[int(np.nanargmin(values))]), by_lr,
                 None if n is None else seed_curves(xs, by_lr, n, delta))


@dataclass
class Verdict:
    key: str  # M1 ... F2
    verdict: str
    numbers: dict[str, Estimate | str]  # what it was read from, named (a count or per-seed values as words)


def arm(init: str, d_k: int, scale: str, control: str = "") -> Arm:
    return Arm(init, d_k, scale, control)


def verdicts_of(curves: dict[Arm, Curve], est: dict, pred: dict) -> list[Verdict]:
    """M1-M3, C1-C5, G1, R1 where their arms ran (a prediction whose arms are missing is left out and said so by
    the report)."""
    out = []

    def have(*keys):
        return all(k in est for k in keys)

    u16, u256 = ("trace0", arm("unit", 16, "none")), ("trace0", arm("unit", 256, "none"))
    s16, s256 = ("trace0", arm("unit", 16, "sqrt_dk")), ("trace0", arm("unit", 256, "sqrt_dk"))
    if have(u16, u256, s16, s256):
        du, ds = est[u256] - est[u16], est[s256] - est[s16]
        out.append(Verdict("M1", verdicts.saturation(du, ds, pred["saturation_band"]),
                           {"unscaled trace change 16 -> 256": du, "scaled trace change 16 -> 256": ds}))
    g = {(d, s): ("grad0", arm("unit", d, s)) for d in (16, 256) for s in ("none", "sqrt_dk")}
    if have(*g.values()):
        cells = [est[g[(256, "none")]], est[g[(256, "sqrt_dk")]], est[g[(16, "none")]], est[g[(16, "sqrt_dk")]]]
        top = combine(lambda y: np.log(y[..., 0] / y[..., 1]), cells[:2])
        growth = combine(lambda y: np.log(y[..., 0] / y[..., 1]) - np.log(y[..., 2] / y[..., 3]), cells)
        out.append(Verdict("M2", verdicts.gradient_at_init(top, growth),
                           {"log gradient ratio at d_k = 256": top, "its growth from d_k = 16": growth}))
    t = ("trace", arm("unit", 256, "none")), ("trace", arm("unit", 256, "sqrt_dk"))
    if have(*t):
        d = est[t[0]] - est[t[1]]
        out.append(Verdict("M3", verdicts.side(d, -1), {"trace through training, unscaled - scaled": d}))
    c = {k: curves.get(arm(i, dk, s)) for k, (i, dk, s) in {
        "u256n": ("unit", 256, "none"), "u256s": ("unit", 256, "sqrt_dk"), "u16n": ("unit", 16, "none"),
        "u16s": ("unit", 16, "sqrt_dk"), "g256n": ("gpt2", 256, "none"), "g256s": ("gpt2", 256, "sqrt_dk")}.items()}
    if c["u256n"] and c["u256s"]:
        gap = c["u256n"].best - c["u256s"].best
        out.append(Verdict("C1", verdicts.side(gap, +1), {"best loss (vertex), unscaled - scaled": gap,
                                                          "best cell, unscaled - scaled (cell by cell)":
                                                              best_cell([c["u256n"], c["u256s"]])}))
        if c["u16n"] and c["u16s"]:
            growth = combine(lambda y: (y[..., 0] - y[..., 1]) - (y[..., 2] - y[..., 3]),
                             [c["u256n"].best, c["u256s"].best, c["u16n"].best, c["u16s"].best])
            out.append(Verdict("C2", verdicts.side(growth, +1), {"gap at 256 - gap at 16": growth}))
        hn, hs = (("half", arm("unit", 256, s), c[k].best_lr) for s, k in (("none", "u256n"), ("sqrt_dk", "u256s")))
        if have(hn, hs):
            d = est[hn] - est[hs]
            out.append(Verdict("C3", verdicts.side(d, +1), {"half-budget loss at each arm's best rate": d}))
        up = c["u256s"].upper - c["u256n"].upper
        censored = ([+1] if c["u256s"].open_hi else []) + ([-1] if c["u256n"].open_hi else [])
        out.append(Verdict("C4", lr_basin.sign_verdict(lr_basin.censored_direction(up, censored), +1),
                           {"upper half-width, scaled - unscaled": up}))
        sp = ("spikes", arm("unit", 256, "none")), ("spikes", arm("unit", 256, "sqrt_dk"))
        if have(*sp):
            d = est[sp[0]] - est[sp[1]]  # the verdict reads the registered difference; the report prints counts
            out.append(Verdict("C5", verdicts.side(d, +1), {
                "unscaled:": spike_words(c["u256n"], pred["spike_nats"]),
                "scaled:": spike_words(c["u256s"], pred["spike_nats"])}))
        if c["g256n"] and c["g256s"]:
            inter = combine(lambda y: (y[..., 0] - y[..., 1]) - (y[..., 2] - y[..., 3]),
                            [c["u256n"].best, c["u256s"].best, c["g256n"].best, c["g256s"].best])
            out.append(Verdict("G1", verdicts.side(inter, +1), {"unit gap - GPT-2 gap at d_k = 256": inter,
                                                                "unit gap": gap,
                                                                "GPT-2 gap": c["g256n"].best - c["g256s"].best,
                                                                "GPT-2 gap, cell by cell":
                                                                    best_cell([c["g256n"], c["g256s"]])}))
    full = curves.get(arm("unit", 256, "none", "full"))
    if full and c["u256s"]:
        db, do = full.best - c["u256s"].best, full.opt_x - c["u256s"].opt_x
        out.append(Verdict("R1", verdicts.matches(db, do, pred["match_loss_band"], pred["match_optimum_band"]),
                           {"best loss (vertex), control - scaled": db,
                            "best cell, control - scaled (cell by cell)": best_cell([full, c["u256s"]]),
                            "optimum (vertex), control - scaled (decades)": do,
                            "per seed": per_seed_optimum_gap(full, c["u256s"])}))
    return out


def spike_counts(c: Curve, nats: float) -> tuple[int, int, int, dict[int, int]]:
    """An arm's loss spikes over every rate it ran: (spikes, runs with one, runs, {seed: spikes})."""
    per_run = [(r.seed, readings.spikes(r, nats)) for rs in c.runs.values() for r in rs]
    per_seed: dict[int, int] = {}
    for seed, k in per_run:
        per_seed[seed] = per_seed.get(seed, 0) + k
    return sum(k for _, k in per_run), sum(k > 0 for _, k in per_run), len(per_run), dict(sorted(per_seed.items()))


def spike_words(c: Curve, nats: float) -> str:
    """C5's counts, never an interval (a count of rare events piles on 0): '0 spikes in 21 runs (0 runs with one;
    per seed 0, 0, 0)'."""
    k, runs_with, runs, per_seed = spike_counts(c, nats)
    return (f"{k} spike{'s' * (k != 1)} in {runs} runs ({runs_with} run{'s' * (runs_with != 1)} with one; per seed "
            f"{', '.join(str(v) for v in per_seed.values())})")


def per_seed_optimum_gap(a: Curve, b: Curve) -> str:
    """Each seed's vertex optimum of ``a`` minus ``b``'s, in decades, paired by seed (an argmin vertex: per-seed
    values, no interval)."""
    if a.seeds is None or b.seeds is None:
        return "-"
    pairs = [(s, a.seeds.optimum[i] - b.seeds.optimum[b.seeds.seeds.index(s)])
             for i, s in enumerate(a.seeds.seeds) if s in b.seeds.seeds]
    return ", ".join(f"{d:+.3f} (seed {s})" for s, d in pairs)


def compute(runs: list[Run], pred: dict) -> tuple[dict[Arm, Curve], list[Verdict], dict]:
    """The float32 arms' curves, the verdicts, and every estimate (one bootstrap)."""
    arms = float32_arms(runs)
    if not arms:
        raise ReportError("no float32 run of design 2's arms; nothing to report.")
    est = bootstrap(samples(arms, window_count(runs), pred))
    n = window_count(runs)
    curves = {a: curve(a, by_lr, est, pred["basin_delta"], n) for a, by_lr in arms.items()}
    return curves, verdicts_of(curves, est, pred), est


FP16, FP32, REPLAY = "sqrt_dk_fp16", "sqrt_dk_fp32", "sqrt_dk_fp16_probe"  # the float16 sweep, its float32
# reruns, and amendment 2's replay of some of its runs probed after every step


def fp16_records(runs: list[Run]) -> list[tuple[Run, verdicts.Fp16Run, readings.Overflow]]:
    """The float16 sweep's runs as F1 reads them (not the replay's: amendment 2 carries no verdict)."""
    out = []
    for r in runs:
        a = readings.arm_of(r)
        if a.fp16 and r.experiment != REPLAY:
            o = readings.overflow(r)
            out.append((r, verdicts.Fp16Run(a.place, readings.lr(r), r.seed, o.scores_inf, o.ended != "completed"), o))
    return out


def fp32_twins(runs: list[Run], records) -> list[Run | None]:
    """Per float16 run that diverged, its float32 rerun at the same arm, rate and seed (None where it did not run)."""
    fp32 = {(readings.arm_of(r).placement, readings.arm_of(r).scale, readings.lr(r), r.seed): r
            for r in runs if r.experiment == FP32}
    out = []
    for r, rec, _ in records:
        if rec.diverged:
            a = readings.arm_of(r)
            out.append(fp32.get((a.placement, a.scale, rec.lr, rec.seed)))
    return out


def fp32_reruns(runs: list[Run], records) -> list[tuple[bool, bool | None]]:
    """F2's input: per float16 run, (it diverged, its float32 rerun at the same arm, rate and seed diverged)."""
    fp32 = {(readings.arm_of(r).placement, readings.arm_of(r).scale, readings.lr(r), r.seed): readings.diverged(r)
            for r in runs if r.experiment == FP32}
    out = []
    for r, rec, _ in records:
        a = readings.arm_of(r)
        out.append((rec.diverged, fp32.get((a.placement, a.scale, rec.lr, rec.seed))))
    return out


@dataclass(frozen=True)
class Replay:
    """One run of amendment 2's replay (a float16 run probed after every step) beside its sweep run: where each
    ended (the last step; ``nonfinite`` the step of a non-finite loss, None when it completed), the largest gap
    between their training losses at the steps both logged (0 when the replay repeats the run), the first probed
    step with an inf score and with an inf raw q.k (None: none), and the last probe before a non-finite loss (its
    step and largest raw q.k and scaled score; None for a run that completed)."""

    arm: Arm
    lr: float
    seed: int
    sweep_steps: int | None
    steps: int
    nonfinite: int | None
    loss_gap: float
    first_inf_score: int | None
    first_inf_raw: int | None
    last_probe: tuple[int, float, float] | None


def largest_of(values) -> float:
    """The largest of a probe's per-layer values, inf where any layer's was (a NaN layer, after an inf one, is
    skipped; NaN only when every layer is)."""
    v = np.asarray(values, dtype=np.float64)
    return math.nan if np.isnan(v).all() else float(np.nanmax(v))


def nonfinite_step(run: Run) -> int | None:
    """The step whose training loss was not finite, numbered as the history numbers steps (from 0), None for a run
    without one. The divergence guard's reason counts the steps taken, one more ("at step 67": the 67th step, step
    66 of the history, right after the last finite loss logged at 65)."""
    words = str(run.summary.get("divergence") or "").split()
    if words[:2] == ["training", "loss"] and not math.isfinite(float(words[2])) and "step" in words:
        return int(words[words.index("step") + 1]) - 1
    return None


def first_step(steps: np.ndarray, flags: np.ndarray) -> int | None:
    hit = np.flatnonzero(flags)
    return int(steps[hit[0]]) if hit.size else None


def replays(runs: list[Run]) -> list[Replay]:
    """Amendment 2's replayed runs, each beside the float16 sweep's run of the same arm, rate and seed."""
    key = lambda r: (readings.arm_of(r), readings.lr(r), r.seed)  # noqa: E731
    sweep = {key(r): r for r in runs if r.experiment == FP16}
    out = []
    for r in sorted((r for r in runs if r.experiment == REPLAY), key=key):
        twin = sweep.get(key(r))
        gap = math.nan
        if twin is not None:
            (s1, v1), (s2, v2) = r.series("train/loss"), twin.series("train/loss")
            both, i1, i2 = np.intersect1d(s1, s2, return_indices=True)
            a1, a2 = np.asarray(v1)[i1], np.asarray(v2)[i2]
            same = np.isfinite(a1) & np.isfinite(a2)
            gap = float(np.max(np.abs(a1[same] - a2[same]))) if same.any() else math.nan
            if (np.isfinite(a1) != np.isfinite(a2)).any():
                gap = math.inf  # one ended where the other went on
        steps, inf = readings.probe(r, "scores_inf")
        _, raw = readings.probe(r, "raw_qk")
        _, scaled = readings.probe(r, "scaled_qk")
        bad = nonfinite_step(r)
        last = None
        if bad is not None and (steps < bad).any():
            i = int(np.flatnonzero(steps < bad)[-1])
            last = (int(steps[i]), largest_of(raw[i]), largest_of(scaled[i]))
        out.append(Replay(readings.arm_of(r), readings.lr(r), r.seed,
                          None if twin is None else int(twin.summary.get("steps") or 0),
                          int(r.summary.get("steps") or 0), bad, gap,
                          first_step(steps, (inf > 0).any(axis=1)), first_step(steps, np.isinf(raw).any(axis=1)),
                          last))
    return out


def nan_estimate() -> Estimate:
    return Estimate(math.nan, math.nan, math.nan)


F1_BAND = 0.01  # amendment 4: a formed product within this fraction of 65,504 counts either way (float16 rounding)


@dataclass(frozen=True)
class BatchF1:
    """One replayed float16 run as amendment 4's F1 reads it: its arm, rate and seed, whether its seed had been seen
    (the float16 sweep ran it: amendment 2's replay) or is new, the series it is predicted from, how it ended, the
    divergence guard's step for a non-finite loss (nonfinite_step, history numbering: the cross-check of the batch
    probe's last batch) and the verdict with its predicted range (verdicts.batch_overflow)."""

    arm: Arm
    lr: float
    seed: int
    seen: bool
    series: str
    ended: str
    guard_step: int | None
    result: verdicts.BatchOverflow
    peak: float = math.nan  # the largest formed product over the batches the run took


F3_SEEN = frozenset(range(11, 17))  # amendment 5: the seeds F1 (amendment 4) had been read on when F3 was written


def batch_f1(runs: list[Run], signed: bool = False) -> list[BatchF1]:
    """F1 per run (DESIGN.md, amendment 4) for every replayed run that logged the batch probe: the formed product
    (readings.formed_product) against the batch that went non-finite, the last batch the probe logged for a run that
    ended on a non-finite loss (None for one that did not). A seed is seen when the float16 sweep ran it. With
    ``signed``, F3 (amendment 5): the same from the largest signed product, a seed seen when F1 had been read on it."""
    sweep_seeds = F3_SEEN if signed else {r.seed for r in runs if r.experiment == FP16}
    out = []
    for r in sorted((r for r in runs if r.experiment == REPLAY), key=lambda r: (readings.arm_of(r), readings.lr(r),
                                                                                 r.seed)):
        a = readings.arm_of(r)
        if a.placement == "sdpa":  # the fused kernel's own product is not the formula's: not predicted
            continue
        name, formed = readings.formed_product(r, signed)
        if not formed.size:
            continue
        ended = readings.overflow(r).ended
        bad = readings.last_batch(r) if ended == "non-finite loss" else None
        out.append(BatchF1(a, readings.lr(r), r.seed, r.seed in sweep_seeds, name, ended, nonfinite_step(r),
                           verdicts.batch_overflow(formed, bad, F1_BAND), float(np.nanmax(formed))))
    return out

"""Experiment 2's report, design 2 (docs/experiments/sqrt_dk/DESIGN.md): does 1/sqrt(d_k) keep the softmax out of
saturation, and does that make training better? Every number comes from the runs' kept records (numbers, readings;
tinygpt.analysis.records: ``KEEP`` is what this report reads), from the init draws beside it (init_draws.json,
tinygpt.experiments.sqrt_dk.init_draws) or from design 3's headline (its verdict words, quoted); every verdict word
from tinygpt.experiments.sqrt_dk.verdicts, every sentence from report.md's blocks.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tinygpt.experiments import index
from tinygpt.experiments.index import Headline
from tinygpt.analysis.records import Reads
from tinygpt.analysis.stats import (LEVEL, METHOD, N_BOOT, Estimate, all_hold, difference_words, direction,
                                    in_range)
from tinygpt.analysis.sweep import ReportError, Run, predictions, sweep_wall_seconds
from tinygpt.analysis.figures import markdown_table
from tinygpt.analysis.templates import DOCS, design_commit, plural, prose
from tinygpt.experiments.sqrt_dk import init_draws, numbers, readings, verdicts
from tinygpt.experiments.sqrt_dk.numbers import Curve, Verdict
from tinygpt.experiments.sqrt_dk.readings import Arm

LAYERS = [f"stab/{name}/" for name in ("jacobian_trace", "softmax_gain", "grad_wq", "grad_wk", "raw_qk", "scaled_qk",
                                       "scores_inf", "entropy")]  # the stability probe's per-layer series it reads
KEEP = Reads(summary=("status", "diverged", "divergence", "val_loss", "vocab_size", "steps", "diagnostics",
                      "train_seconds"),
             history=("train/loss", "val/loss", *LAYERS, "stab/batch_raw_qk", "stab/batch_scaled_qk",
                      "stab/batch_raw_qk_pos", "stab/batch_scaled_qk_pos"))
INPUTS = (init_draws.FILE,)  # committed beside the report, read by it, not written by it
INIT_DRAWS = DOCS / "sqrt_dk" / init_draws.FILE  # the mechanism at init over many init draws (init_draws.py)
STABILITY = DOCS / "sqrt_dk_stability"  # design 3, which answers the stability question design 2 could not
STATEMENTS = {  # each prediction as DESIGN.md states it (the table's "prediction" column; {lr}, {steps}: the config's)
    "M1": "unit init, at init: without the factor the softmax saturates more as d_k grows; with it, it does not",
    "M2": "unit init, at init: the gradient reaching W_Q, W_K is larger without the factor, more so as d_k grows",
    "M3": "unit init, d_k = 256, at the rate the design fixed for it ({lr}): the unscaled softmax stays more "
          "saturated through training",
    "C1": "unit init, d_k = 256: the best loss within {steps} steps is worse without the factor",
    "C2": "unit init: the best-loss cost of dropping the factor grows with d_k",
    "C3": "unit init, d_k = 256: without the factor training is slower (half-budget loss)",
    "C4": "unit init, d_k = 256: with the factor the basin reaches further toward high rates",
    "C5": "unit init, d_k = 256: without the factor the training loss spikes more",
    "G1": "the best-loss cost of dropping the factor at d_k = 256 is smaller under GPT-2's init than under unit init",
    "R1": "the init-and-step control matches the scaled arm (d_k = 256, unit init)",
    "F1": "float16: a run's loss goes non-finite at the first batch whose formed product passes float16's largest "
          "value, never before, and never if none does (amendment 4, per run)",
    "F2": "float16: every float16 run that diverged runs to its end without diverging in float32 at the same rate and "
          "seed (DESIGN.md's criterion; its words, \"trains in float32\", promise more: F2's numbers say how far "
          "they got)",
    "F3": "float16: F1 with the formed product's sign: a run's loss goes non-finite at the first batch whose largest "
          "positive formed product passes float16's largest value, never before, and never if none does "
          "(amendment 5, per run)",
}
ARITHMETIC = ("M1", "M2")  # checks of the init's arithmetic: what unit-variance q and k give at init, by computation


def statement(key: str, pred: dict | None = None, steps: int | None = None) -> str:
    """A prediction's statement with the config's values in place of its placeholders (words, never a key name)."""
    pred = pred or {}
    lr = rate(pred["mechanism_lr"]) if "mechanism_lr" in pred else "a fixed rate"
    return STATEMENTS[key].format(lr=lr, steps=steps if steps is not None else "the budget's")




def rate(x: float) -> str:
    return f"{x:.3g}"


def number_text(numbers: dict[str, Estimate | str]) -> str:
    """Each measured number with its interval (a count, for the float16 predictions, as words)."""
    return "; ".join(f"{name} {e if isinstance(e, str) else e.format(3, signed=True)}" for name, e in numbers.items())


INFORMED = {  # DESIGN.md's "informed by" column: what was known when each prediction was written
    "M1": "the computation in DESIGN.md (a check of the init's arithmetic)",
    "M2": "the computation in DESIGN.md (a check of the init's arithmetic)", "C1": "the unit-init pilot",
    "M3": "the unit-init pilot (its entropy after training at this d_k and rate; DESIGN.md's column says no): a "
          "replication",
    "C2": "the unit-init pilot (weakly)", "G1": "design 1 (GPT-2 gaps small)",
    "F1": "amendment 2's replay, for the seeds the float16 sweep ran (seen); not for the others (new)",
    "F3": "F1's per-run results and a referee's reading of them, for the seeds F1 was read on (seen); not for the "
          "others (new)"}


NOT_RUN = {"F3": "no replayed run logged the product's sign (amendment 5's series)"}  # why a prediction is untested


def predictions_table(found: list[Verdict], missing: list[str], pred: dict | None = None,
                      steps: int | None = None) -> str:
    def said(k):
        return statement(k, pred, steps)
    rows = [[v.key, said(v.key), INFORMED.get(v.key, "no"), number_text(v.numbers), f"**{v.verdict}**"]
            for v in found]
    rows += [[k, said(k), INFORMED.get(k, "no"), NOT_RUN.get(k, "its arms did not run"), "not tested"]
             for k in missing]
    return markdown_table(["", "prediction (DESIGN.md)", "informed by", "measured (95% interval)", "verdict"], rows)


def mechanism_table(curves: dict[Arm, Curve], est: dict, pred: dict | None = None) -> str:
    """Each arm's mechanism at init and through training: per run a probe's value (the mean of the layers, or the
    largest over them where the column says so), its mean over seeds with the seed-level interval."""
    rows = []
    for a in sorted(curves, key=lambda a: (a.control, a.init, a.d_k, a.scale)):
        def cell(key, a=a):
            e = est.get((key, a))
            return e.format(significant(e)) if e is not None and math.isfinite(e.value) else "-"
        rows.append([a.label, cell("trace0"), cell("trace"), cell("grad0"), cell("softmax_gain"), cell("entropy"),
                     cell("raw_qk")])
    lr = rate(pred["mechanism_lr"]) if pred and "mechanism_lr" in pred else "the design's rate"
    return markdown_table(["arm", "Jacobian trace at init (mean of the layers)",
                           f"Jacobian trace through training at lr {lr} (mean of the layers and of the probes "
                           "after init)",
                           "gradient at W_Q, W_K at init "
                           f"({readings.GRADIENT_LABEL.replace('|', chr(92) + '|')})",
                           "softmax gain at init (mean of the layers)",
                           "attention entropy at init (mean of the layers)",
                           "largest raw q.k at init (the largest over the layers)"], rows)


def significant(e: Estimate, figures: int = 3) -> int:
    """Decimals that show an estimate to ``figures`` significant figures (at least 3): 0.000123 -> 6."""
    top = max(abs(e.value), abs(e.lo) if math.isfinite(e.lo) else 0.0, abs(e.hi) if math.isfinite(e.hi) else 0.0)
    return 3 if top == 0 or top >= 0.1 else max(3, figures - 1 - math.floor(math.log10(top)))


def draws_label(arm: dict) -> str:
    return (f"{'unit' if arm['init'] == 'unit' else 'GPT-2'} init, d_k = {arm['d_k']}, "
            f"{'1/sqrt(d_k)' if arm['scale'] == 'sqrt_dk' else 'unscaled'}")


def interval_text(m: tuple[float, float, float], digits: int = 3) -> str:
    v, lo, hi = m
    return f"{v:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}]" if math.isfinite(lo) else f"{v:.{digits}f}"


def percent_text(m: tuple[float, float, float]) -> str:
    v, lo, hi = m
    return f"{100 * v:+.1f}% [{100 * lo:+.1f}%, {100 * hi:+.1f}%]"


def init_draws_section(data: dict | None) -> list[str]:
    """The softmax gain and the Jacobian trace at init over many init draws (init_draws.json: no training), each
    arm's mean with its interval over the draws, and each measure's relative change from the smallest d_k to the
    largest, unscaled and scaled; or how to compute them where the file is absent."""
    if not data or not data.get("arms"):
        return [prose("sqrt_dk", "draws_missing"), ""]
    arms = sorted(data["arms"].values(), key=lambda a: (a["init"], a["d_k"], a["scale"]))
    rows = [[draws_label(a), *(interval_text(init_draws.mean_interval(a[m])) for m in init_draws.MEASURES)]
            for a in arms]
    table = markdown_table(["arm", f"softmax gain at init, {data['draws']} init draws",
                            f"Jacobian trace at init, {data['draws']} init draws"], rows)
    dks = sorted({a["d_k"] for a in arms})
    change = {}
    for scale in ("none", "sqrt_dk"):
        ends = [next((a for a in arms if a["d_k"] == d and a["scale"] == scale), None) for d in (dks[0], dks[-1])]
        if None in ends:
            return [table, ""]
        change[scale] = {m: percent_text(init_draws.relative_change(ends[0][m], ends[1][m]))
                         for m in init_draws.MEASURES}
    return [prose("sqrt_dk", "draws", n=data["draws"], windows=data["windows"], lo=dks[0], hi=dks[-1],
                  level=f"{LEVEL:.0%}"), "", table, "",
            prose("sqrt_dk", "draws_change", lo=dks[0], hi=dks[-1], n=data["draws"],
                  gain_none=change["none"]["softmax_gain"], trace_none=change["none"]["jacobian_trace"],
                  gain_sqrt=change["sqrt_dk"]["softmax_gain"], trace_sqrt=change["sqrt_dk"]["jacobian_trace"]), ""]


def draws_gain(data: dict | None, d_k: int) -> str:
    """The softmax gain's difference, unscaled - scaled, at ``d_k`` over the init draws paired by draw (its
    t-interval, and whether it excludes 0), as words; "" without the draws."""
    arms = {(a["d_k"], a["scale"]): a for a in (data or {}).get("arms", {}).values() if a["init"] == "unit"}
    if (d_k, "none") not in arms or (d_k, "sqrt_dk") not in arms:
        return ""
    v, lo, hi = init_draws.paired_difference(arms[(d_k, "none")]["softmax_gain"],
                                             arms[(d_k, "sqrt_dk")]["softmax_gain"])
    e = Estimate(v, lo, hi)
    lower = sum(a < b for a, b in zip(arms[(d_k, "none")]["softmax_gain"], arms[(d_k, "sqrt_dk")]["softmax_gain"],
                                      strict=True))
    return (f"; over the {data['draws']} init draws above, paired by draw (the same weights, the scale aside), "
            f"{e.format(4, signed=True)}: {difference_word(e)}; the unscaled gain is the lower in {lower} of "
            f"{data['draws']} draws")


def described_reading(curves: dict[Arm, Curve], est: dict, draws: dict | None = None) -> list[str]:
    """The measures the design reports without verdicts, read at the largest d_k under unit init: the softmax gain
    and the entropy, unscaled against scaled, with the difference's interval (and the gain's over the init draws)."""
    top = max((a.d_k for a in curves), default=None)
    none, sqrt = Arm("unit", top or 0, "none"), Arm("unit", top or 0, "sqrt_dk")
    keys = [(m, a) for m in ("softmax_gain", "entropy") for a in (none, sqrt)]
    if top is None or not all(k in est for k in keys):
        return []
    gain = est[("softmax_gain", none)] - est[("softmax_gain", sqrt)]
    ent = est[("entropy", none)] - est[("entropy", sqrt)]
    fast = []
    if none in curves and sqrt in curves:
        fast = [prose("sqrt_dk", "described_steps", dk=top, window=readings.STEPS_WINDOW,
                      steps_none=steps_words(curves[none]), steps_sqrt=steps_words(curves[sqrt])), ""]
    return [prose("sqrt_dk", "described", dk=top, gain_none=est[("softmax_gain", none)].format(3),
                  gain_sqrt=est[("softmax_gain", sqrt)].format(3), gain_diff=gain.format(3, signed=True),
                  gain_word=difference_word(gain), draws_gain=draws_gain(draws, top),
                  ent_none=est[("entropy", none)].format(3),
                  ent_sqrt=est[("entropy", sqrt)].format(3), ent_diff=ent.format(3, signed=True),
                  ent_word=difference_word(ent)), "", *fast]


def steps_words(c: Curve) -> str:
    """Steps to the bigram loss at an arm's best rate, per seed, and how many runs got there: a count capped at the
    budget piles on it, so per-seed values, never an interval ('per seed 111, 76, 146; 3 of 3 reached it')."""
    rs = sorted(c.runs.get(c.best_lr, []), key=lambda r: r.seed)
    got = [readings.steps_to_bigram(r) for r in rs]
    per = ", ".join(str(n) if ok else f"none within {n}" for n, ok in got)
    return f"per seed {per} (seeds {', '.join(str(r.seed) for r in rs)}; {sum(ok for _, ok in got)} of {len(got)} " \
           "reached it)"


def seed_values(values, fmt, opens=None) -> str:
    """Per-seed values as words, an open basin edge marked (a lower bound)."""
    out = []
    for i, v in enumerate(values):
        out.append("-" if not math.isfinite(v) else fmt(v) + (" (open)" if opens is not None and opens[i] else ""))
    return ", ".join(out)


def difference_word(e: Estimate) -> str:
    """stats.difference_words: 'higher unscaled' / 'lower unscaled', or no difference at the interval's level."""
    return difference_words(e, "higher unscaled", "lower unscaled")


def curves_table(curves: dict[Arm, Curve], est: dict, spike_nats: float) -> str:
    """Per arm: the vertex best loss and the best cell (interval over seeds and windows); the statistics whose
    replicates pile on a bound as per-seed values (the vertex optimum, the basin's half-widths, the steps to the
    bigram loss) and counts (the loss spikes, the runs diverged)."""
    rows = []
    for a in sorted(curves, key=lambda a: (a.control, a.init, a.d_k, a.scale)):
        c = curves[a]
        sc = c.seeds
        half = est.get(("half", a, c.best_lr))
        cells = [e.value for e in c.cells]
        j = int(np.nanargmin(cells))
        k, with_one, n_runs, _ = numbers.spike_counts(c, spike_nats)
        rows.append([a.label, c.best.format(3), f"{c.cells[j].format(3)} at {rate(c.lrs[j])}",
                     seed_values(10 ** sc.optimum, rate) if sc else "-",
                     seed_values(sc.lower, lambda v: f"{v:.2f}", sc.open_lo) if sc else "-",
                     seed_values(sc.upper, lambda v: f"{v:.2f}", sc.open_hi) if sc else "-",
                     half.format(3) if half is not None else "-", steps_words(c),
                     f"{k} ({with_one} of {n_runs} runs with one)", diverged_text(c)])
    return markdown_table(["arm", "best loss (vertex)",
                           "best cell (its rate; the interval at that rate, not over the choice of cell)",
                           "optimum lr* (vertex), per seed",
                           "lower half-width (decades), per seed", "upper half-width (decades), per seed",
                           "half-budget loss", "steps to the bigram loss at the best rate",
                           "loss spikes over all rates", "runs diverged"], rows)


def bigram_loss(runs: list[Run], key: str = "bigram_loss") -> float:
    """A bigram model's loss on the validation windows (each run's own diagnostic; the same windows in every run), or
    with ``key="unigram_loss"`` a unigram model's."""
    vals = [float(r.summary["diagnostics"][key]) for r in runs
            if (r.summary.get("diagnostics") or {}).get(key) is not None]
    return float(np.median(vals)) if vals else math.nan


def above_bigram(curves: dict[Arm, Curve], bigram: float) -> list[str]:
    """The arms whose best loss does not reach below a bigram model's (its interval's lower end at or above it)."""
    if not math.isfinite(bigram):
        return []
    arms = [a.label for a, c in sorted(curves.items(), key=lambda kv: (kv[0].control, kv[0].init, kv[0].d_k,
                                                                        kv[0].scale)) if c.best.value >= bigram]
    return [prose("sqrt_dk", "bigram", bigram=f"{bigram:.3f}", arms="; ".join(arms) if arms else "none"), ""]


def reads(key: str) -> list[Arm]:
    """The float32 arms a consequence prediction compares (numbers.verdicts' C1 ... R1)."""
    top, low = numbers.D_KS[-1], numbers.D_KS[0]
    unit = [Arm("unit", top, "none"), Arm("unit", top, "sqrt_dk")]
    return {"C1": unit, "C3": unit, "C4": unit, "C5": unit,
            "C2": unit + [Arm("unit", low, "none"), Arm("unit", low, "sqrt_dk")],
            "G1": unit + [Arm("gpt2", top, "none"), Arm("gpt2", top, "sqrt_dk")],
            "R1": [Arm("unit", top, "none", "full"), Arm("unit", top, "sqrt_dk")]}.get(key, [])


def bigram_predictions(curves: dict[Arm, Curve], bigram: float) -> str:
    """The predictions that compare an arm whose best loss is not below a bigram model's, with those arms."""
    above = {a for a, c in curves.items() if math.isfinite(bigram) and c.best.value >= bigram}
    out = [f"{k} ({', '.join(a.label for a in reads(k) if a in above)})" for k in ("C1", "C2", "C3", "C4", "C5",
                                                                                 "G1", "R1")
           if any(a in above for a in reads(k))]
    return "; ".join(out) if out else "none"


def diverged_text(c: Curve) -> str:
    """How many of an arm's runs diverged, of how many, and at which rates (each counted as ln(vocab))."""
    runs = [(x, r) for x, rs in sorted(c.runs.items()) for r in rs]
    bad = [(x, r) for x, r in runs if readings.diverged(r)]
    if not bad:
        return f"0 of {len(runs)}"
    rates = sorted({x for x, _ in bad})
    return f"{len(bad)} of {len(runs)} (at {', '.join(rate(x) for x in rates)})"


def split_cells(c: Curve) -> dict[float, tuple[int, int]]:
    """The rates at which an arm's seeds split between outcomes: {rate: (runs diverged, runs)} where some, not all,
    diverged. Such a cell's interval covers less than 95% (the glossary's "Split seeds")."""
    out = {}
    for x, rs in c.runs.items():
        k = sum(readings.diverged(r) for r in rs)
        if 0 < k < len(rs):
            out[x] = (k, len(rs))
    return out


def loss_grid(curves: dict[Arm, Curve]) -> list[str]:
    """The final loss at every rate, a cell whose seeds split marked with its count, and the sentence that says
    what such a cell's interval is worth."""
    lrs = sorted({x for c in curves.values() for x in c.lrs})
    ordered = sorted(curves.items(), key=lambda kv: (kv[0].control, kv[0].init, kv[0].d_k, kv[0].scale))
    splits = {a: split_cells(c) for a, c in ordered}

    def cell(a: Arm, c: Curve, x: float) -> str:
        e = next((e for x2, e in zip(c.lrs, c.cells, strict=True) if x2 == x), None)
        if e is None:
            return "-"
        split = splits[a].get(x)
        return e.format(3) + (f" ({split[0]} of {split[1]} diverged)" if split else "")

    rows = [[a.label] + [cell(a, c, x) for x in lrs] for a, c in ordered]
    spread = [(a, x, seeds, v) for a, c in ordered for x, (seeds, v) in sorted(numbers.split_seeds(c).items())]
    outcomes = ([prose("sqrt_dk", "seed_outcomes", sd=f"{numbers.SEED_SD_SHOWN:g}", n=len(spread)), ""]
                + [f"- {a.label}, at {rate(x)}: " + ", ".join(f"{v:.3f} (seed {s})" for s, v in zip(seeds, vals,
                                                                                                    strict=True))
                   for a, x, seeds, vals in spread] + [""] if spread else
                [prose("sqrt_dk", "seed_outcomes_none", sd=f"{numbers.SEED_SD_SHOWN:g}"), ""])
    n_split = sum(len(s) for s in splits.values())
    seeds = min((len(rs) for _, c in ordered for rs in c.runs.values() if rs), default=0)
    bound = 1 - (1 - LEVEL) ** (1 / seeds) if seeds else math.nan
    note = (f"{n_split} cells have seeds that split between diverging and not (marked with their counts): their "
            "intervals assume seeds that vary smoothly and cover less than 95% (the glossary's \"Split seeds\"); "
            f"a cell none of whose {seeds} seeds diverged bounds its rate of divergence only below {bound:.0%} "
            f"({LEVEL:.0%})." if n_split else "No cell has seeds that split between diverging and not.")
    return [markdown_table(["arm"] + [rate(x) for x in lrs], rows), "", note, "", *outcomes]


def fig_trace(curves: dict[Arm, Curve], est: dict, path: Path) -> Path:
    """The Jacobian trace at init against d_k, for each init and scale: the premise's slope, measured."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 4))
    for init in ("unit", "gpt2"):
        for scale, colour in (("sqrt_dk", "tab:blue"), ("none", "tab:red")):
            pts = [(a.d_k, est[("trace0", a)]) for a in curves if a.init == init and a.scale == scale
                   and not a.control and ("trace0", a) in est]
            if not pts:
                continue
            pts.sort()
            xs = [p[0] for p in pts]
            ys = np.array([p[1].value for p in pts])
            err = np.array([[p[1].value - p[1].lo for p in pts], [p[1].hi - p[1].value for p in pts]])
            ax.errorbar(xs, ys, yerr=err, marker="o", color=colour, linestyle="-" if init == "unit" else "--",
                        label=f"{'unit' if init == 'unit' else 'GPT-2'} init, "
                              f"{'1/sqrt(d_k)' if scale == 'sqrt_dk' else 'unscaled'}", capsize=3)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("d_k")
    ax.set_ylabel("Jacobian trace at init\n(1 uniform, 0 one-hot)")
    ax.set_ylim(0, 1.05)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def fig_loss_vs_lr(curves: dict[Arm, Curve], path: Path, bigram: float = math.nan) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dks = sorted({a.d_k for a in curves})
    fig, axes = plt.subplots(1, len(dks), figsize=(4.5 * len(dks), 3.8), squeeze=False)
    for ax, dk in zip(axes[0], dks, strict=True):
        for a, c in sorted(curves.items()):
            if a.d_k != dk:
                continue
            colour = "tab:blue" if a.scale == "sqrt_dk" else {"full": "tab:purple", "init": "tab:green"}.get(
                a.control, "tab:red")
            style = "-" if a.init == "unit" else "--"
            v = np.array([e.value for e in c.cells])
            lo, hi = np.array([e.lo for e in c.cells]), np.array([e.hi for e in c.cells])
            ax.plot(c.lrs, v, marker="o", color=colour, linestyle=style, label=a.label.split(", ", 2)[-1]
                    + (" (unit)" if a.init == "unit" else " (GPT-2)"))
            ax.fill_between(c.lrs, lo, hi, color=colour, alpha=0.15)
        if math.isfinite(bigram):
            ax.axhline(bigram, color="grey", linestyle=":", linewidth=1, label="bigram model")
        ax.set_xscale("log")
        ax.set_title(f"d_k = {dk}")
        ax.set_xlabel("peak learning rate")
        ax.set_ylabel("final validation loss (nats)")
        ax.legend(fontsize=6)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


PLACES = {"scores": "1/sqrt(d_k) after the product", "qk": "1/sqrt(d_k) on q and k before the product",
          "sdpa": "1/sqrt(d_k), fused sdpa", "scores (unscaled)": "unscaled, explicit formula",
          "sdpa (unscaled)": "unscaled, fused sdpa"}


def largest(values: list[float]) -> str:
    """The largest of a probe's values over runs: inf when any was, '-' when none was measured."""
    vals = [v for v in values if not math.isnan(v)]
    if not vals:
        return "-"
    top = max(vals)
    return "inf" if math.isinf(top) else f"{top:,.0f}"


def steps_text(steps: list[int]) -> str:
    return ", ".join(str(x) for x in sorted(steps))


def fp16_table(records) -> str:
    """One row per placement and rate: how its runs ended, and what the probes saw in them."""
    cells: dict = {}
    for r, rec, o in records:
        cells.setdefault((place_order(rec.placement), rec.placement, rec.lr), []).append((r, rec, o))
    rows = []
    for (_, place, x), items in sorted(cells.items()):
        nonfinite = [numbers.nonfinite_step(r) for r, _, o in items if o.ended == "non-finite loss"]
        guard = sum(o.ended == "past the guard's limit" for _, _, o in items)
        rows.append([PLACES.get(place, place), rate(x), str(len(items)),
                     str(sum(o.ended == "completed" for _, _, o in items)),
                     f"{len(nonfinite)}" + (f" (steps {steps_text([n for n in nonfinite if n is not None])})"
                                            if nonfinite else ""),
                     str(guard), str(sum(o.scores_inf for _, _, o in items)),
                     str(sum(math.isinf(o.raw_qk) for _, _, o in items)),
                     largest([o.raw_qk for _, _, o in items]), largest([o.scaled_qk for _, _, o in items]),
                     final_losses([r for r, _, o in items if o.ended == "completed"])])
    return markdown_table(["scale", "rate", "runs", "completed", "non-finite loss", "past the guard",
                           "runs with an inf score at a probe", "runs with an inf raw q.k at a probe",
                           "largest raw q.k", "largest scaled score", "final validation loss of those completed"],
                          rows)


def final_losses(runs: list[Run]) -> str:
    """The range of the runs' final validation losses ('-' for none)."""
    vals = sorted(float(r.summary["val_loss"]) for r in runs if r.summary.get("val_loss") is not None)
    if not vals:
        return "-"
    return f"{vals[0]:.3f}" if len(vals) == 1 else f"{vals[0]:.3f} to {vals[-1]:.3f}"


def reruns_table(runs: list[Run], records, outcomes) -> str:
    """F2's pairs: each float16 run that diverged beside its float32 rerun."""
    fp32 = {(readings.arm_of(r).placement, readings.arm_of(r).scale, readings.lr(r), r.seed): r
            for r in runs if r.experiment == numbers.FP32}
    rows = []
    pairs = sorted(zip(records, outcomes, strict=True), key=lambda p: (place_order(p[0][1].placement), p[0][1].lr,
                                                                       p[0][1].seed))
    for (r, rec, o), (fp16, _) in pairs:
        if not fp16:
            continue
        a = readings.arm_of(r)
        twin = fp32.get((a.placement, a.scale, rec.lr, rec.seed))
        ended = ("not run" if twin is None else
                 f"diverged ({twin.summary.get('divergence')})" if readings.diverged(twin) else
                 f"completed, final validation loss {twin.summary['val_loss']:.3f}")
        rows.append([PLACES.get(rec.placement, rec.placement), rate(rec.lr), str(rec.seed),
                     o.ended + (f" at step {numbers.nonfinite_step(r)}" if numbers.nonfinite_step(r) else ""),
                     ended])
    return markdown_table(["scale", "rate", "seed", "float16", "float32 rerun"], rows)


def place_order(place: str) -> int:
    return list(PLACES).index(place) if place in PLACES else len(PLACES)


NO_TWIN = "no sweep run"  # a replay whose seed the float16 sweep did not run (amendment 4's new seeds)


def replay_table(replays: list[numbers.Replay]) -> str:
    rows = []
    for p in sorted(replays, key=lambda p: (place_order(p.arm.place), p.lr, p.seed)):
        place = p.arm.place
        last = p.last_probe
        rows.append([PLACES.get(place, place), rate(p.lr), str(p.seed),
                     NO_TWIN if p.sweep_steps is None else str(p.sweep_steps), str(p.steps),
                     "-" if p.nonfinite is None else str(p.nonfinite),
                     NO_TWIN if p.sweep_steps is None else "-" if math.isnan(p.loss_gap) else
                     "inf" if math.isinf(p.loss_gap) else f"{p.loss_gap:.3g}",
                     "none" if p.first_inf_score is None else str(p.first_inf_score),
                     "none" if p.first_inf_raw is None else str(p.first_inf_raw),
                     "-" if last is None else f"step {last[0]}: {largest([last[1]])} / {largest([last[2]])}"])
    return markdown_table(["scale", "rate", "seed", "steps in the sweep", "steps in the replay",
                           "non-finite loss at step", "largest training-loss gap to the sweep run",
                           "first probe with an inf score", "first probe with an inf raw q.k",
                           "a diverged run's last probe: step, raw q.k / scaled score"], rows)


def replay_reading(replays: list[numbers.Replay]) -> str:
    """What the every-step replay shows, in counts (no verdict): whether it repeats the sweep's runs, whether the
    diverged runs had an inf score at a probe before their non-finite loss, and whether the scale on q and k
    kept the scores finite where the raw product overflowed."""
    twins = [p for p in replays if p.sweep_steps is not None]
    same = sum(p.loss_gap == 0 and p.steps == p.sweep_steps for p in twins)
    diverged = [p for p in replays if p.nonfinite is not None]
    before = [p for p in diverged if p.first_inf_score is not None]
    qk = [p for p in replays if p.arm.placement == "qk"]
    qk_raw = sum(p.first_inf_raw is not None for p in qk)
    qk_score = sum(p.first_inf_score is not None for p in qk)
    return prose("sqrt_dk", "replay_reading", same=same, n=len(twins),
                 new=(f" ({plural(len(replays) - len(twins), 'replay')} of a seed the float16 sweep did not run "
                      "ha" + ("s" if len(replays) - len(twins) == 1 else "ve") + " no sweep run to repeat)"
                      if len(twins) < len(replays) else ""), n_div=len(diverged),
                 before=len(before), n_qk=len(qk), qk_done=sum(p.nonfinite is None for p in qk), qk_raw=qk_raw,
                 qk_score=qk_score)


def predicted_range(b: verdicts.BatchOverflow) -> str:
    if b.first_possible is None:
        return "none: no batch's product passes it"
    if b.first_certain is None:
        return f"from batch {b.first_possible} (no batch surely past it)"
    if b.first_certain == b.first_possible:
        return f"batch {b.first_possible}"
    return f"batches {b.first_possible} to {b.first_certain}"


SERIES = {"stab/batch_raw_qk": "largest absolute q.k before the scale",
          "stab/batch_scaled_qk": "largest absolute q.k after the scale",
          "stab/batch_raw_qk_pos": "largest signed q.k before the scale",
          "stab/batch_scaled_qk_pos": "largest signed q.k after the scale"}  # the batch probe's series, in words


def f1_table(rows: list[numbers.BatchF1]) -> str:
    """Amendment 4's F1 (or amendment 5's F3), one row per replayed run."""
    out = []
    for b in sorted(rows, key=lambda b: (not b.seen, place_order(b.arm.place), b.lr, b.seed)):
        r = b.result
        out.append([PLACES.get(b.arm.place, b.arm.place), str(b.seed), "seen" if b.seen else "new",
                    SERIES.get(b.series, b.series), predicted_range(r),
                    "- (" + b.ended + ")" if r.nonfinite is None else str(r.nonfinite),
                    "-" if r.formed_at is None else largest([r.formed_at]), f"**{r.verdict}**", r.why or "-"])
    return markdown_table(["scale", "seed", "seen or new", "formed product (float32, the step's own batch)",
                           f"predicted non-finite batch (its product past {verdicts.FP16_MAX:,.0f}, within "
                           "float16's rounding)", "non-finite batch", "formed product there", "verdict", "why"], out)


def f1_cross_check(rows: list[numbers.BatchF1]) -> str:
    """The non-finite batch (the batch probe's last) against the divergence guard's step (numbers.nonfinite_step):
    the same in every run, or the runs where they differ."""
    bad = [b for b in rows if b.result.nonfinite is not None]
    differ = [b for b in bad if b.guard_step != b.result.nonfinite]
    if not differ:
        return prose("sqrt_dk", "f1_cross_check", n=len(bad))
    return prose("sqrt_dk", "f1_cross_check_differs", n=len(bad), k=len(differ), runs="; ".join(
        f"{PLACES.get(b.arm.place, b.arm.place)}, seed {b.seed}: batch {b.result.nonfinite}, guard "
        f"{'none' if b.guard_step is None else b.guard_step}" for b in differ))


def f1_words(rows: list[numbers.BatchF1]) -> dict[str, str]:
    """F1 (or F3) over the runs (all_hold) and over the seen and the new seeds apart; and the runs with the scale on
    q and k that held, whose formed product stayed far below the limit (such a run could hardly fail)."""
    def over(items):
        return all_hold([b.result.verdict for b in items]) if items else "not tested (no run)"
    seen, new = [b for b in rows if b.seen], [b for b in rows if not b.seen]
    qk = [b for b in rows if b.arm.placement == "qk" and b.result.verdict == "holds"
          and b.result.first_possible is None]
    peak = max((b.peak for b in qk), default=math.nan)
    qk_note = (f"{len(qk)} of the runs that hold have the scale on q and k, whose formed product stayed at or below "
               f"{peak:,.0f}, {peak / verdicts.FP16_MAX:.0%} of the limit: they could hardly have failed. "
               if qk else "")
    return {"all": over(rows), "seen": over(seen), "new": over(new), "n": str(len(rows)), "n_seen": str(len(seen)),
            "n_new": str(len(new)), "held": str(sum(b.result.verdict == "holds" for b in rows)), "qk_note": qk_note}


def amendment_splits(rows: list[numbers.BatchF1]) -> str:
    """F1 over each amendment's new seeds apart: amendment 4's (not run by the float16 sweep, among those F3 calls
    seen) and amendment 5's (the rest), as each amendment registered its split."""
    def over(items):
        return all_hold([b.result.verdict for b in items]) if items else "not tested (no run)"
    a4 = [b for b in rows if not b.seen and b.seed in numbers.F3_SEEN]
    a5 = [b for b in rows if not b.seen and b.seed not in numbers.F3_SEEN]
    if not a4 or not a5:
        return ""
    seeds = lambda items: ", ".join(map(str, sorted({b.seed for b in items})))  # noqa: E731
    return (f" (by each amendment's own split: amendment 4's new seeds, {seeds(a4)}, **{over(a4)}** "
            f"({sum(b.result.verdict == 'holds' for b in a4)} of {len(a4)}); amendment 5's, {seeds(a5)}, "
            f"**{over(a5)}** ({sum(b.result.verdict == 'holds' for b in a5)} of {len(a5)}))")


def sign_words(runs: list[Run], f1: list[numbers.BatchF1], f3: list[numbers.BatchF1]) -> tuple[str, str]:
    """What F3's verdict over its new seeds can show: how many of them are sharp tests (not the scale on q and k,
    not decided inside the rounding band only), and whether any new run had a batch whose product surely passed the
    limit negatively (its largest |q.k| past it, its largest signed q.k surely below): the case F1 and F3 tell apart."""
    new = [b for b in f3 if not b.seen]
    if not new:
        return "", ""
    qk = sum(b.arm.placement == "qk" for b in new)
    band = sum(b.arm.placement != "qk" and b.result.first_possible is not None and b.result.first_certain is None
               for b in new)
    sharp = (f"Of the {len(new)} new runs, {qk} have the scale on q and k and {band} are decided inside the rounding "
             f"band only (no batch surely past the limit), leaving {len(new) - qk - band} sharp tests; a +inf on a "
             "visible score makes the softmax NaN by IEEE arithmetic, so what a sharp test shows is that nothing else "
             "went non-finite first. ")
    f1_of = {(b.arm, b.seed): b.result.verdict for b in f1}
    differ = [b for b in f3 if f1_of.get((b.arm, b.seed)) not in (None, b.result.verdict)]
    limit_hi, limit_lo = verdicts.FP16_MAX * (1 + numbers.F1_BAND), verdicts.FP16_MAX / (1 + numbers.F1_BAND)
    negative = 0
    for r in runs:
        if r.experiment != numbers.REPLAY or r.seed in numbers.F3_SEEN or readings.arm_of(r).placement == "sdpa":
            continue
        _, absolute = readings.formed_product(r)
        _, signed = readings.formed_product(r, signed=True)
        n = min(len(absolute), len(signed))
        negative += bool(n and ((absolute[:n] > limit_hi) & (signed[:n] <= limit_lo)).any())
    differ_new = [b for b in differ if not b.seen]
    where = "; ".join(f"{PLACES.get(b.arm.place, b.arm.place)}, seed {b.seed} ({'new' if not b.seen else 'seen'})"
                      for b in differ) or "none"
    sign = (f"F1 and F3 give different verdicts on {len(differ)} run(s) ({where}), {len(differ_new)} of them new; "
            f"{negative} new run(s) had a batch whose product surely passed the limit negatively"
            + (", so on new data F3 could not differ from F1: the sign reading (only +inf ends a run) rests on the "
               "seen run(s) alone." if negative == 0 else "."))
    return sharp, sign


def fp16_section(runs: list[Run]) -> tuple[list[str], list[Verdict], list[str], dict]:
    """The float16 tables, F1 and F2, amendment 2's replay, the float32 reruns the design still asks for (as
    commands), and the facts the answer's float16 part names."""
    records = numbers.fp16_records(runs)
    if not records:
        return [], [], [], {}

    def counted(place):
        items = [(rec, o) for _, rec, o in records if rec.placement == place]
        return (f"{sum(o.scores_inf for _, o in items)} of {len(items)} runs with an inf score at a probe, "
                f"{sum(rec.diverged for rec, _ in items)} diverged")
    old_counts = f"scale after the product: {counted('scores')}; on q and k: {counted('qk')}"
    old_f1 = verdicts.placement([rec for _, rec, _ in records])
    per_run = numbers.batch_f1(runs)
    words = f1_words(per_run)
    signed = numbers.batch_f1(runs, signed=True)  # F3 (amendment 5): runs that logged the signed series
    words3 = f1_words(signed)
    words["splits"] = amendment_splits(per_run)
    words3["splits"] = ""
    words3["sharp"], words3["sign"] = sign_words(runs, per_run, signed)
    f1 = words["all"] if per_run else old_f1
    outcomes = numbers.fp32_reruns(runs, records)
    f2 = verdicts.float32_reruns(outcomes)
    asks = [f"python train.py -m experiment=sqrt_dk_fp32 arm/sqrt_dk={arm_name(r)} optim.lr={rec.lr:g} "
            f"seed={rec.seed}" for (r, rec, _), (fp16, rerun) in zip(records, outcomes, strict=True)
            if fp16 and rerun is None]
    cfg = records[0][0].config
    stab = cfg["callbacks"]["stability"]
    scores = [(r, rec, o) for r, rec, o in records if rec.placement == "scores"]
    fused = [o for _, rec, o in records if rec.placement.startswith("sdpa") and rec.lr == max(r.lr for _, r, _ in
                                                                                              records)]
    facts = {"sdpa_inf": (sum(o.scores_inf for o in fused), len(fused), sum(o.ended == "completed" for o in fused)),
             "scores_diverged": sum(o.ended != "completed" for _, _, o in scores),
             "scores_inf": sum(o.scores_inf for _, _, o in scores),
             "scores_raw": largest([o.raw_qk for _, _, o in scores]),
             "diverged": sum(fp16 for fp16, _ in outcomes), "reruns": sum(r is not None for f, r in outcomes if f)}
    lines = ["## Float16: where the scale sits", "",
             prose("sqrt_dk", "fp16_setup", dk=readings.arm_of(records[0][0]).d_k,
                   steps=cfg["trainer"]["max_steps"], rates=", ".join(rate(x) for x in sorted({rec.lr for _, rec, _
                                                                                             in records})),
                   seeds=", ".join(str(x) for x in sorted({rec.seed for _, rec, _ in records})),
                   every=stab["every_n_steps"], windows=stab["windows"]), "",
             fp16_table(records), ""]
    if facts["diverged"]:
        lines += ["Each float16 run that diverged, and its float32 rerun at the same arm, rate and seed (F2):", "",
                  reruns_table(runs, records, outcomes), ""]
    replayed = numbers.replays(runs)
    if replayed:
        every = replayed_every(runs)
        lines += ["### Amendment 2: the replay probed after every step (no verdict)", "",
                  prose("sqrt_dk", "replay_intro", every=every), "", replay_table(replayed), "",
                  replay_reading(replayed), ""]
    limits = {"max": f"{verdicts.FP16_MAX:,.0f}", "inf_at": f"{verdicts.FP16_MAX + 16:,.0f}"}
    if per_run:
        lines += ["### Amendment 4: F1 per run, from each step's own training batch", "",
                  prose("sqrt_dk", "f1_intro", band=f"{numbers.F1_BAND:.0%}", **limits), "", f1_table(per_run), "",
                  prose("sqrt_dk", "f1_reading", old=old_counts, **limits, **words), "", f1_cross_check(per_run), ""]
    if signed:
        lines += ["### Amendment 5: F3, F1 with the product's sign", "",
                  prose("sqrt_dk", "f3_intro", **limits), "", f1_table(signed), "",
                  prose("sqrt_dk", "f3_reading", **words3), ""]
    top = max(rec.lr for _, rec, _ in records)
    by_place: dict = {}
    for r, rec, o in records:
        if rec.lr == top:
            by_place.setdefault(rec.placement, []).append((r, o))
    parts = []
    for place, items in sorted(by_place.items(), key=lambda kv: place_order(kv[0])):
        bad = [numbers.nonfinite_step(r) for r, o in items if o.ended == "non-finite loss"]
        bad = [n for n in bad if n is not None]
        parts.append(f"{PLACES.get(place, place)}: {sum(o.ended != 'completed' for _, o in items)} of {len(items)} "
                     "diverged" + (f" (non-finite at steps {steps_text(bad)})" if bad else ""))
    facts["top_rate"] = f"in the float16 sweep at {rate(top)}, " + "; ".join(parts)
    facts["replayed"] = bool(replayed)
    facts["f1_per_run"] = words if per_run else None
    facts["f3"] = words3 if signed else None
    facts["f1_old"] = old_counts
    facts["replay_div"] = sum(p.nonfinite is not None for p in replayed)
    facts["replay_inf"] = sum(p.nonfinite is not None and p.first_inf_score is not None for p in replayed)
    after = [p for p in replayed if p.nonfinite is not None and p.arm.place == "scores"]
    facts["replay_scores"] = (sum(p.first_inf_score is not None for p in after), len(after))
    f1_numbers = ({"per run (amendment 4):": f"{words['held']} of {words['n']} runs hold; seen seeds "
                                              f"{words['seen']}, new seeds {words['new']}"} if per_run else {})
    f1_numbers.update({("the old measure, an inf score at a probe (counts, no verdict): scale after the product:"
                        if per_run else "scale after the product:"): counted("scores"), "on q and k:": counted("qk")})
    reruns = [r for f, r in outcomes if f]
    twins = [t for t in numbers.fp32_twins(runs, records) if t is not None and not readings.diverged(t)]
    f2_numbers = {"float16 runs diverged:": str(facts["diverged"]),
                  "their float32 reruns:": f"{sum(r is False for r in reruns)} completed, "
                                           f"{sum(r is True for r in reruns)} diverged, "
                                           f"{sum(r is None for r in reruns)} not run"
                                           + (f"; those completed end at validation losses {final_losses(twins)}, "
                                              f"against a bigram model's {bigram_loss(runs):.3f} and a unigram "
                                              f"model's {bigram_loss(runs, 'unigram_loss'):.3f}: the criterion (no "
                                              "divergence) holds, but they did not train to a useful loss"
                                              if twins else "")}
    out = [Verdict("F1", f1, f1_numbers), Verdict("F2", f2, f2_numbers)]
    if signed:
        out.append(Verdict("F3", words3["new"], {
            "per run (amendment 5):": f"{words3['held']} of {words3['n']} runs hold; the verdict is the new seeds' "
                                      f"({words3['n_new']} runs); seen seeds ({words3['n_seen']} runs) "
                                      f"{words3['seen']}"}))
    return lines, out, asks, facts


def replayed_every(runs: list[Run]) -> str:
    r = next(r for r in runs if r.experiment == numbers.REPLAY)
    n = int(r.config["callbacks"]["stability"]["every_n_steps"])
    return "after every step" if n == 1 else f"every {n} steps"


def fp16_answer(found: dict[str, str], facts: dict) -> str:
    """The answer's float16 part, from F1's and F2's verdicts, with what made an undecided one undecided."""
    if "F1" not in found and "F2" not in found:
        return "not run"
    per_run = facts.get("f1_per_run")
    if per_run:
        f1 = (f"F1, per run (amendment 4), {per_run['all']}: {per_run['held']} of {per_run['n']} replayed runs went "
              "non-finite at their predicted batch or completed with no formed product past float16's largest value "
              "by more than the rounding band "
              f"(the {per_run['n_seen']} runs of seeds the float16 sweep had run: {per_run['seen']}; the "
              f"{per_run['n_new']} of new seeds: {per_run['new']})")
        f3 = facts.get("f3")
        if f3:
            f1 += (f"; F3 (amendment 5: the product's sign, since only +inf ends a run), over the {f3['n_new']} runs "
                   f"of new seeds, {f3['new']} ({f3['held']} of {f3['n']} runs in all as predicted); "
                   + f3["sign"].rstrip("."))
    else:
        f1 = {"holds": "F1 (the old measure) holds: where the scale after the product overflowed, the scale on q and "
                       "k before it did not",
              "fails": "F1 (the old measure) fails: a run with the scale on q and k had an inf score"}.get(
                  found.get("F1"))
    if f1 is None:
        inf, n = facts.get("replay_scores", (0, 0))
        replay = (f" (amendment 2's replay, probed after every step, saw one in {facts['replay_inf']} of "
                  f"{facts['replay_div']} diverged runs, {inf} of the {n} with the scale after the product, without "
                  "a verdict)" if facts.get("replayed") else "")
        seen, runs, done = facts.get("sdpa_inf", (0, 0, 0))
        if seen:
            replay += (f"; on the fused sdpa arms, which F1 does not count (DESIGN.md), the explicit formula's scores "
                       f"at their weights were inf at a probe in {seen} of {runs} runs at the top rate, and {done} of "
                       "them completed")
        f1 = ("F1 undecided: runs with the scale after the product diverged, but no probe of theirs saw an inf score "
              f"on its windows{replay}" if facts.get("scores_diverged") and not facts.get("scores_inf")
              else "F1 undecided: no run with the scale after the product had an inf score in this budget (largest "
                   f"raw q.k {facts.get('scores_raw', '-')})")
    f2 = {"holds": f"F2 holds: each of the {facts.get('diverged')} float16 runs that diverged ran to its end in "
                   "float32 at the same rate and seed without diverging (how little they learned there: the float32 "
                   "reruns' table)",
          "fails": "F2 fails: a float32 rerun diverged too"}.get(found.get("F2"))
    if f2 is None:
        f2 = ("F2 undecided: no float16 run diverged" if not facts.get("diverged") else
              "F2 undecided: the float32 reruns the report asks for below have not run")
    top = facts.get("top_rate")
    return f"{f1}; {f2}" + (f". Where the scale sits, counted (no verdict): {top}" if top else "")


def ladder(x: float, steps: int) -> float:
    """The rate ``steps`` rungs from x on the design's ladder of three rates a decade (10^(k/3))."""
    return float(f"{10 ** ((round(3 * math.log10(x)) + steps) / 3):.4g}")


def main_grid(curves: dict[Arm, Curve]) -> list[float]:
    """The rates every arm ran: the main sweep's grid (stage 2 adds rates beyond it for some arms)."""
    common = set.intersection(*(set(c.lrs) for c in curves.values())) if curves else set()
    return sorted(common)


def stage_two(curves: dict[Arm, Curve]) -> list[str]:
    """The design's stage 2 as commands: an arm whose basin is open on a side, or whose best rate is the outermost
    it ran, runs the next two rates of the ladder on that side with the same seeds (none it already ran). Once: a
    side whose stage 2 ran (rates beyond the main grid) is reported open, not extended again."""
    grid = main_grid(curves)
    asks = []
    for _, c in sorted(curves.items()):
        runs_ = [r for rs in c.runs.values() for r in rs]
        seeds = ",".join(str(s) for s in sorted({r.seed for r in runs_}))
        for side, edge, is_open in ((-1, c.lrs[0], c.open_lo), (+1, c.lrs[-1], c.open_hi)):
            if not (is_open or c.best_lr == edge) or (grid and not grid[0] <= edge <= grid[-1]):
                continue
            new = [ladder(edge, side * k) for k in (1, 2)]
            new = [x for x in new if all(abs(math.log10(x / y)) > 0.01 for y in c.lrs)]
            if new:
                asks.append(f"python train.py -m experiment=sqrt_dk arm/sqrt_dk={arm_name(runs_[0])} "
                            f"optim.lr={','.join(f'{x:g}' for x in sorted(new))} seed={seeds}")
    return asks


def arm_name(run: Run) -> str:
    """The arm/sqrt_dk option the job ran (its override, else the name configs/arm/sqrt_dk/ gives its arm): from the
    run's record, never its dir's files, so a kept run answers it too."""
    given = next((o.split("=", 1)[1] for o in run.overrides if o.startswith("arm/sqrt_dk=")), None)
    return given or option_of(readings.arm_of(run))


def option_of(a: Arm) -> str:
    """An arm's option name in configs/arm/sqrt_dk/ (unit_dk256_none, unit_dk256_reparam_full, fp16_sqrt_qk, ...)."""
    scale = "sqrt" if a.scale == "sqrt_dk" else "none"
    if a.fp16:
        where = {"qk": "qk", "sdpa": "sdpa"}.get(a.placement, "scores" if scale == "sqrt" else "math")
        return f"fp16_{scale}_{where}"
    if a.control:
        return f"{a.init}_dk{a.d_k}_reparam_{a.control}"
    return f"{a.init}_dk{a.d_k}_{scale}"


def design3() -> Headline | None:
    """Design 3's committed headline (docs/experiments/sqrt_dk_stability/headline.json), read at render time."""
    return index.read(STABILITY)


def design3_words(h: Headline | None) -> str:
    """Design 3's verdicts as its headline gives them: 'S1 holds (the factor raises ...), S2 undecided (...)'."""
    if h is None:
        return "design 3 has no committed report yet"
    parts = []
    for said, word in h.verdicts:
        key, _, what = said.partition(": ")
        parts.append(f"{key} {word}: {what}")
    return "; ".join(parts)


def gap_word(gap: Estimate) -> str:
    """Whether an unscaled - scaled gap is established (verdicts.side: its interval above 0)."""
    return {"holds": "established (worse without the factor)", "fails": "reversed (better without the factor)",
            "undecided": f"not established at the {LEVEL:.0%} level"}[verdicts.side(gap, +1)]


def answer(found: dict[str, str], spiked: bool = True, fp16: dict | None = None, steps: int | None = None,
           spikes: tuple[int, int] | None = None, gpt2_gaps: dict | None = None, edges: str = "",
           other_gaps: str = "", c4: str = "", gpt2_edges: str = "") -> dict[str, str]:
    """Each part of the answer from its verdicts only (DESIGN.md, "The headline answers ..."); ``spikes``: (loss
    spikes, runs) over the two arms C5 compares; ``gpt2_gaps``: the gap at GPT-2's init by the vertex and cell by
    cell, whose words say whether it is established."""
    def say(keys, yes, no):
        vs = [found[k] for k in keys if k in found]
        if not vs:
            return "not tested (its arms did not run)"
        if all(v == "holds" for v in vs):
            return yes
        if any(v == "fails" for v in vs):
            return no + f" ({', '.join(f'{k} {found[k]}' for k in keys if k in found)})"
        return "undecided at the 95% level (" + ", ".join(f"{k} {found[k]}" for k in keys if k in found) + ")"
    def named(keys):
        return ", ".join(f"{k} {found[k]}" for k in keys if k in found)

    budget = f"within {steps} steps, " if steps is not None else ""
    if not any(k in found for k in ("C1", "C2", "C3", "C4", "C5")):
        consequence = "not tested (its arms did not run)"
    else:
        better = [found.get(k) for k in ("C1", "C3")]
        top = numbers.D_KS[-1]
        consequence = (f"better {budget}at unit-variance init and d_k = {top}: without the factor the best loss is "
                       "worse, and so is the loss at half the budget" if better == ["holds"] * 2 else
                       "better: not shown") + f" ({named(['C1', 'C3'])}); " + (
            f"at the smaller d_k, without a verdict, {other_gaps}; " if other_gaps else "")
        lo, hi = numbers.D_KS[0], numbers.D_KS[-1]
        consequence += ("the cost is larger at the largest d_k than at the smallest (C2 holds), but those are "
                        f"different models (one head {lo} wide against one {hi} wide: they differ in everything, not "
                        "in d_k alone)" if found.get("C2") == "holds" else
                        f"the cost at the largest d_k against the smallest: not shown larger ({named(['C2'])}), and "
                        f"those are different models (one head {lo} wide against one {hi} wide)")
    return {
        "mechanism": say(["M1", "M3"], "yes: at init the unscaled softmax saturates more as d_k grows and the scaled "
                                       "one does not (M1, a check of the init's arithmetic), and through training "
                                       "the unscaled one stays the more saturated (M3)", "not as predicted"),
        "gradient": say(["M2"], "no: at init the gradient reaching W_Q and W_K is larger without the factor (M2, a "
                                "check of the init's arithmetic; under Adam an update's size does not follow the "
                                "gradient's norm, an argument this report does not test, and gradient clipping acts "
                                "on the raw gradient); what falls with d_k is the softmax Jacobian's trace (M1)",
                                "not as predicted"),
        "consequence": consequence,
        "stability": stability_answer(found, spikes, spiked, edges, c4, gpt2_edges),
        "gpt2": say(["G1"], "the cost of dropping the factor is smaller than under the premise's init",
                    "not smaller") + ("; the gap itself at GPT-2's init is " + gpt2_gap_words(gpt2_gaps)
                                      if gpt2_gaps else ""),
        "reparam": say(["R1"], "under Adam, yes: the control that starts and steps W_Q, W_K as the scaled arm's "
                               "matches it", "no: the control departs from the scaled arm") + (
            " (a post-hoc reading cell by cell follows the consequences table)" if found.get("R1") == "undecided"
            else ""),
        "fp16": fp16_answer(found, fp16 or {}),
    }


def gpt2_gap_words(gaps: dict) -> str:
    return "; ".join(f"{gap_word(e)} {how} ({e.format(3, signed=True)} nats)" for how, e in gaps.items())


def seed_edges(c: Curve) -> np.ndarray:
    """Each seed's upper basin edge, log10(lr): its vertex optimum plus its upper half-width."""
    return c.seeds.optimum + c.seeds.upper


def edges_words(curves: dict[Arm, Curve], init: str) -> str:
    """The rate at each seed's upper basin edge at ``init`` and the largest d_k, with and without the factor (an open
    edge marked), and in how many seeds both arms' edges fall between the same two rates of the grid (a third of a
    decade apart: edges there are not told apart by the grid). What C4's half-widths, measured from each arm's own
    optimum, leave out; no verdict."""
    top = max((a.d_k for a in curves), default=0)
    arms = [curves.get(Arm(init, top, scale)) for scale in ("sqrt_dk", "none")]
    if any(c is None or c.seeds is None for c in arms):
        return ""
    (cs, cn) = arms
    grid = np.log10(np.asarray(cs.lrs, dtype=np.float64))
    es, en = seed_edges(cs), seed_edges(cn)
    same = int(sum(np.searchsorted(grid, a) == np.searchsorted(grid, b) for a, b in zip(es, en, strict=True)))
    which = "unit" if init == "unit" else "GPT-2's"
    return (f"at {which} init and d_k = {top}, the rate at each seed's upper basin "
            f"edge (seeds {', '.join(map(str, cs.seeds.seeds))}) is, with the factor, "
            f"{seed_values(10 ** es, rate, cs.seeds.open_hi)}; without, {seed_values(10 ** en, rate, cn.seeds.open_hi)}"
            f" (the unscaled edge the lower in {int((en < es).sum())} of {len(es)} seeds; in {same} of {len(es)} both "
            "edges lie between the same two rates of the grid)")


def c4_words(found: list[Verdict], curves: dict[Arm, Curve]) -> str:
    """C4's verdict with what its numbers show: the point estimate and the seeds on each side of the prediction (the
    factor's upper half-width the larger), and what its measure cannot see."""
    c4 = next((v for v in found if v.key == "C4"), None)
    top = max((a.d_k for a in curves), default=0)
    cs, cn = curves.get(Arm("unit", top, "sqrt_dk")), curves.get(Arm("unit", top, "none"))
    if c4 is None or cs is None or cn is None or cs.seeds is None or cn.seeds is None:
        return "C4 was not tested."
    e = c4.numbers["upper half-width, scaled - unscaled"]
    per = cs.seeds.upper - cn.seeds.upper
    against = int((per < 0).sum())
    return (f"C4 {c4.verdict}: the factor's upper half-width minus the unscaled one is {e.format(3, signed=True)} "
            f"decades; per seed {', '.join(f'{v:+.2f}' for v in per)}: {against} of {len(per)} seeds on the side "
            "against the prediction. C4 measures each half-width from its arm's own optimum, so it would also miss a "
            "curve that moves as a whole.")


def stability_answer(found: dict[str, str], spikes: tuple[int, int] | None, spiked: bool = True,
                     edges: str = "", c4: str = "", gpt2_edges: str = "") -> str:
    """Design 2's answer to "does 1/sqrt(d_k) help stability?": what C4 and C5 could decide, said plainly, the basin's
    upper edges per seed beside C4 (no verdict), and design 3's answer, quoted from its headline."""
    if "C4" not in found and "C5" not in found:
        return "not tested here (its arms did not run)"
    k, n = spikes if spikes is not None else (None, None)
    c5 = (f"C5 counted no loss spike in any of the {n} runs of the two arms it compares, so it had nothing to compare"
          if k == 0 else f"C5 counted {k} loss spikes in the {n} runs of the two arms it compares"
          if k is not None else "C5 was not computed")
    h = design3()
    return prose("sqrt_dk", "stability", c4_words=c4 or f"C4 {found.get('C4', 'not tested')}.", c5_counts=c5,
                 c5=found.get("C5", "not tested"), edges=f" Read directly (no verdict), {edges}." if edges else "",
                 design3=(f"{h.answer} Its verdicts: {design3_words(h)}" if h is not None else design3_words(h)),
                 gpt2_edges=(f". Read the same way on this report's own arms, {gpt2_edges}" if gpt2_edges else ""))


def any_spike(runs: list[Run], nats: float) -> bool:
    """Whether any run of the main sweep had a loss spike (C5's count)."""
    return any(readings.spikes(r, nats) for r in runs if r.experiment == "sqrt_dk")


def smaller_gaps(curves: dict[Arm, Curve], only_none: bool = False) -> str:
    """The best-loss gap, unscaled - scaled, at unit init and each d_k below the largest, by the vertex and cell by
    cell, with no verdict (C1 reads the largest only); ``only_none``: only where the cell-by-cell interval covers 0
    (stats.direction: no difference at its level)."""
    out = []
    for d in numbers.D_KS[:-1]:
        cn, cs = curves.get(Arm("unit", d, "none")), curves.get(Arm("unit", d, "sqrt_dk"))
        if cn is not None and cs is not None:
            gap = cn.best - cs.best
            piled = any(c.open_lo or c.open_hi for c in (cn, cs))  # a vertex at the grid's edge piles on a bound
            vertex = (f"{gap.value:+.3f} (an arm's basin is open at the grid's edge: no interval)" if piled else
                      gap.format(3, signed=True))
            cell = numbers.best_cell([cn, cs])
            if only_none and direction(cell) != 0:
                continue
            out.append(f"d_k = {d}: {vertex} nats by the vertex, {cell.format(3, signed=True)} cell by cell")
    return "; ".join(out)


def r1_cell_words(found: list[Verdict], band: float) -> str:
    """R1 read cell by cell (post hoc: the registered estimator is the vertex), against the registered loss band."""
    r1 = next((v for v in found if v.key == "R1"), None)
    e = r1.numbers.get("best cell, control - scaled (cell by cell)") if r1 is not None else None
    if not isinstance(e, Estimate):
        return ""
    return (f"R1 read cell by cell (post hoc, not the registered estimator): the control's best loss minus the scaled "
            f"arm's is {e.format(3, signed=True)} nats: inside the registered band of {band:g} nats "
            f"{ {'holds': 'wholly', 'fails': 'not at all', 'undecided': 'only in part'}[in_range(e, -band, band)]}; "
            "the vertex's interval, widened for few seeds, is what leaves R1 undecided")


def c4_short(found: list[Verdict], curves: dict[Arm, Curve]) -> str:
    """', its point estimate and 3 of 3 seeds against the prediction' for the headline ('' without C4)."""
    c4 = next((v for v in found if v.key == "C4"), None)
    top = max((a.d_k for a in curves), default=0)
    cs, cn = curves.get(Arm("unit", top, "sqrt_dk")), curves.get(Arm("unit", top, "none"))
    if c4 is None or cs is None or cn is None or cs.seeds is None or cn.seeds is None:
        return ""
    per = cs.seeds.upper - cn.seeds.upper
    side = "against" if c4.numbers["upper half-width, scaled - unscaled"].value < 0 else "for"
    return f", its point estimate {side} the prediction and {int((per < 0).sum())} of {len(per)} seeds against it"


def absent_words(curves: dict[Arm, Curve], found: list[Verdict], facts: dict) -> str:
    """The headline's list of where no effect shows: the gaps at the smaller d_k (no verdict), the gap at GPT-2's
    init where it is not established, F1's failure and what F3's new seeds could not tell apart."""
    out = []
    small = smaller_gaps(curves, only_none=True)
    if small:
        out.append(f"at a smaller d_k the best-loss gap is not told from 0 (cell by cell; no verdict): {small}")
    g1 = next((v for v in found if v.key == "G1"), None)
    if g1 is not None:
        e = g1.numbers["GPT-2 gap"]
        if verdicts.side(e, +1) != "holds":
            out.append(f"under GPT-2's init the gap at d_k = {numbers.D_KS[-1]} is {gap_word(e)} "
                       f"({e.format(3, signed=True)} nats)")
    f1 = facts.get("f1_per_run")
    if f1 and f1["all"] == "fails":
        out.append(f"F1 fails ({f1['held']} of {f1['n']} runs as predicted)")
    f3 = facts.get("f3")
    if f3 and f3.get("sign"):
        out.append("F3 " + f3["new"] + " on new seeds, where " + f3["sign"].split("; ", 1)[-1].rstrip("."))
    return "; ".join(out)


def wall_minutes(runs: list[Run]) -> float:
    """The main sweep's wall time: the first job's start to the last job's end (analysis.sweep.sweep_wall_seconds)
    in the sweep dir that holds most of ``runs`` (stage 2's runs, in a dir of their own, are not counted)."""
    by_dir: dict = {}
    for r in runs:
        by_dir.setdefault(r.dir.parent, []).append(r)
    return sweep_wall_seconds(max(by_dir.values(), key=len)) / 60 if by_dir else math.nan


def write_report(runs: list[Run], out: Path, sweeps: list[Path]) -> Path:
    pred = predictions(runs, "sqrt_dk")
    missing_keys = [k for k in ("basin_delta", "spike_nats", "saturation_band", "mechanism_lr") if k not in pred]
    if missing_keys:
        raise ReportError(f"these runs carry design 1's predictions, not design 2's ({missing_keys[0]} missing); "
                          "rerun the sweep at this version.")
    curves, found, est = numbers.compute(runs, pred)
    fp16_lines, fp16_verdicts, asks, fp16_facts = fp16_section(runs)
    c5_arms = [curves[a] for a in (Arm("unit", 256, "none"), Arm("unit", 256, "sqrt_dk")) if a in curves]
    counts = [numbers.spike_counts(c, pred["spike_nats"]) for c in c5_arms]
    spikes = (sum(k for k, *_ in counts), sum(n for _, _, n, _ in counts)) if counts else None
    g1 = next((v for v in found if v.key == "G1"), None)
    gpt2_gaps = ({"by the vertex": g1.numbers["GPT-2 gap"], "cell by cell": g1.numbers["GPT-2 gap, cell by cell"]}
                 if g1 is not None else None)
    stage2 = stage_two(curves)
    found += [v for v in fp16_verdicts]
    words = {v.key: v.verdict for v in found}
    missing = [k for k in STATEMENTS if k not in words]
    cfg = runs[0].config
    steps = int(cfg["trainer"]["max_steps"])
    fig_trace(curves, est, out / "trace_vs_dk.png")
    fig_loss_vs_lr(curves, out / "loss_vs_lr.png", bigram_loss(runs))
    seeds = sorted({r.seed for r in runs if r.experiment == "sqrt_dk"})  # the main sweep's (the replay adds its own)
    lrs = main_grid(curves)
    added = sorted({x for c in curves.values() for x in c.lrs} - set(lrs))
    stage2_arms = [a for a, c in curves.items() if set(c.lrs) - set(lrs)]
    lines = [
        prose("sqrt_dk", "intro", n_runs=plural(len(runs), "run"), sweeps=", ".join(f"`{s}`" for s in sweeps),
              design=design_commit(DOCS / "sqrt_dk" / "DESIGN.md", "-S# Experiment 2, design 2")), "",
        prose("sqrt_dk", "setup", n_layer=cfg["model"]["n_layer"], block=cfg["model"]["block_size"],
              batch=cfg["data"]["batch_size"], steps=cfg["trainer"]["max_steps"], warmup=cfg["optim"]["warmup_steps"],
              min_lr=f"{cfg['optim']['min_lr']:g}", clip=cfg["trainer"]["gradient_clip_val"],
              lrs=", ".join(rate(x) for x in lrs), seeds=", ".join(map(str, seeds)),
              stage2=(prose("sqrt_dk", "stage2_ran", rates=", ".join(rate(x) for x in added),
                            arms="; ".join(a.label for a in sorted(stage2_arms))) if added else ""),
              wall=f"{wall_minutes([r for r in runs if r.experiment == 'sqrt_dk']):.1f}"), "",
        prose("sqrt_dk", "answer", **answer(words, any_spike(runs, pred["spike_nats"]), fp16_facts, steps, spikes,
                                            gpt2_gaps, edges_words(curves, "unit"), smaller_gaps(curves),
                                            c4_words(found, curves), edges_words(curves, "gpt2"))), "",
        "## Predictions", "", predictions_table(found, missing, pred, steps), "",
        prose("sqrt_dk", "terms", n_layer=cfg["model"]["n_layer"], every=cfg["callbacks"]["stability"]["every_n_steps"],
              val=cfg["data"]["val_windows"], half=cfg["trainer"]["val_check_interval"],
              delta=f"{pred['basin_delta']:g}", spike=f"{pred['spike_nats']:g}", method=METHOD, n_boot=N_BOOT,
              level=f"{LEVEL:.0%}"), "",
        "## The mechanism", "", "![trace vs d_k](trace_vs_dk.png)", "",
        prose("sqrt_dk", "bars", level=f"{LEVEL:.0%}"), "",
        mechanism_table(curves, est, pred), "",
        *init_draws_section(init_draws.load(INIT_DRAWS)),
        *described_reading(curves, est, init_draws.load(INIT_DRAWS)),
        "## The consequences", "", "![loss vs lr](loss_vs_lr.png)", "",
        prose("sqrt_dk", "bands", level=f"{LEVEL:.0%}"), "",
        curves_table(curves, est, pred["spike_nats"]), "",
        *([r1_cell_words(found, pred["match_loss_band"]) + ".", ""] if words.get("R1") == "undecided"
          and r1_cell_words(found, pred["match_loss_band"]) else []),
        *above_bigram(curves, bigram_loss(runs)),
        "Final loss at each rate (95% interval):", "", *loss_grid(curves), "",
        *(fp16_lines or [prose("sqrt_dk", "fp16_missing"), ""]),
        *([("The design's float32 reruns still to run:"), "", *[f"    {a}" for a in asks], ""] if asks else []),
        *(["The design's stage 2 still to run (an arm whose basin is open on a side, or whose best rate is the "
           "outermost it ran, runs the next two rates of the ladder there; DESIGN.md, \"Grid, seeds, stages\"):", "",
           *[f"    {a}" for a in stage2], ""] if stage2 else []),
        prose("sqrt_dk", "changes"), "",
        prose("sqrt_dk", "threats", steps=cfg["trainer"]["max_steps"], n_layer=cfg["model"]["n_layer"],
              n_pred=len(STATEMENTS),
              every=cfg["callbacks"]["stability"]["every_n_steps"],
              n_stab=cfg["callbacks"]["stability"]["windows"], n_seeds=plural(len(seeds), "seed"),
              dof=len(seeds) - 1, top_dk=max(a.d_k for a in curves),
              bigram_preds=bigram_predictions(curves, bigram_loss(runs))), "",
        prose("sqrt_dk", "literature"), "",
    ]
    path = out / "README.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    headline(found, pred, steps, spikes, absent_words(curves, found, fp16_facts), c4_short(found, curves)).write(out)
    return path


def headline(found: list, pred: dict | None = None, steps: int | None = None,
             spikes: tuple[int, int] | None = None, absent: str = "", c4: str = "") -> Headline:
    """The front page's entry (tinygpt.experiments.index): one sentence from the saturation and training verdicts
    (M1, C1), what design 2 could not decide about stability (C4, C5) and design 3's verdicts on it, quoted from its
    headline; the verdict list with the per-run F1 (amendment 4)."""
    words = {v.key: v.verdict for v in found}
    numbers_ = {v.key: v.numbers for v in found}
    lo, hi = numbers.D_KS[0], numbers.D_KS[-1]

    def number(key: str, name: str) -> str:
        est = numbers_.get(key, {}).get(name)
        return est.format(3, signed=True) if isinstance(est, Estimate) else "n/a"

    keeps = ("keeps the softmax out of saturation as d_k grows" if words.get("M1") == "holds" else
             "is not shown to keep the softmax out of saturation as d_k grows")
    better = (f"the best loss within {steps} steps is worse without it" if words.get("C1") == "holds" else
              f"the best loss within {steps} steps is not shown worse without it")
    k, n = spikes if spikes is not None else ("n/a", "n/a")
    h3 = design3()
    d3 = (", ".join(f"{said.partition(': ')[0]} {word}" for said, word in h3.verdicts) if h3 is not None else
          "no committed report yet")
    answer = (f"With unit-variance q and k, the argument's premise, the factor {keeps} (M1 {words.get('M1', 'n/a')}, "
              "a check of the init's arithmetic: without it the Jacobian trace changes by "
              f"{number('M1', 'unscaled trace change 16 -> 256')} from d_k = {lo} to {hi}), and {better} (C1 "
              f"{words.get('C1', 'n/a')}: at d_k = {hi}, "
              f"{number('C1', 'best loss (vertex), unscaled - scaled')} nats by the parabola's vertex, "
              f"{number('C1', 'best cell, unscaled - scaled (cell by cell)')} cell by cell). Whether it helps "
              f"stability design 2 could not decide (C4 {words.get('C4', 'n/a')}{c4}; C5 {words.get('C5', 'n/a')}: {k} "
              f"loss spikes in {n} runs); design 3 (sqrt_dk_stability) asks it at GPT-2's init as the rate at which "
              f"training stops leaving the unigram plateau: {d3}." + (f" Where no effect shows: {absent}." if absent
                                                                       else ""))
    return Headline("sqrt_dk", "What 1/sqrt(d_k) is for",
                    "Does 1/sqrt(d_k) keep attention's softmax out of saturation, and does that make training better?",
                    answer, "loss_vs_lr.png",
                    [(f"{k}: {statement(k, pred, steps)}", words[k]) for k in STATEMENTS if k in words],
                    status="M1 and M2 are checks of the init's arithmetic; C1 and C2 were informed by a pilot; F1's "
                           "and F3's verdicts over seen seeds are reported apart from those over new ones, and F3 was "
                           "written after F1's results were seen")

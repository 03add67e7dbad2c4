"""Experiment 2's report: does 1/sqrt(d_k) keep training stable? (design: docs/experiments/sqrt_dk/DESIGN.md)

The numbers come from numbers.py beside it (each arm's optimum, basin width and LR sensitivity with their
intervals, the comparisons and the float16 counts); the verdict words from lr_basin.py; the prose from report.md.
``compute`` gathers what the report states (SqrtDkFindings: the arms' numbers, the predictions' verdicts, the
float16 sweep, the huge logits); the sections render those findings as tables and filled prose, and draw the
figures. It works on any set of runs that differ in learning rate and attention
variant, drawing what they support (a quick sweep has one seed and a few rates).
"""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from tinygpt.experiments.sqrt_dk import lr_basin
from tinygpt.analysis.figures import explorers, finish_axes, fmt_pm, markdown_table, save
from tinygpt.analysis.init_stats import logits_at_init, slopes
from tinygpt.experiments.sqrt_dk.numbers import (
    Arm,
    ArmKey,
    Comparison,
    Measures,
    Numbers,
    SeedLevel,
    arms_of,
    baselines,
    compare,
    diverged_step,
    final_loss,
    fp16_complete,
    fp16_counts,
    growth,
    max_logit,
    numbers,
    seed_level,
    stage_two,
)
from tinygpt.analysis.stats import LEVEL, METHOD, N_BOOT, Estimate, direction, failed_to_train, mean_spread, verb
from tinygpt.analysis.sweep import ReportError, Run, group_by, seeds_words, sweep_wall_seconds
from tinygpt.analysis.templates import Report, plural, prose

LADDER = [10 ** (k / 3) for k in range(-18, -2)]  # the design's rates, three a decade, for stage 2
COLOURS = {("sqrt_dk", False): "tab:blue", ("none", False): "tab:red", ("sqrt_dk", True): "tab:green",
           ("none", True): "tab:purple", ("inv_dk", False): "tab:olive"}
ROOT = Path(__file__).resolve().parents[4]


def colour(k: ArmKey) -> str:
    return COLOURS.get((k.scale, k.qk_norm), "tab:gray")


def rate(x: float) -> str:
    return f"{x:.3g}"


def lr_est(e: Estimate) -> str:
    """A best log10(lr) as a rate: '1.2e-03 [8.1e-04, 1.9e-03]'."""
    if not math.isfinite(e.value):
        return "n/a"
    return f"{10 ** e.value:.2g} [{10 ** e.lo:.2g}, {10 ** e.hi:.2g}]"


def factor(e: Estimate) -> str:
    """A difference of log10(lr) as the ratio of the rates: 'lr* ratio 0.46 [0.45, 0.47]'."""
    return f"lr* ratio {10 ** e.value:.2g} [{10 ** e.lo:.2g}, {10 ** e.hi:.2g}]"


def nonneg(e: Estimate) -> Estimate:
    """A width's interval cut at 0 (the bootstrap's Gaussian seed weights can carry it below; a width cannot)."""
    return replace(e, lo=max(0.0, e.lo)) if math.isfinite(e.lo) else e


def width_text(a: Arm) -> str:
    """'0.84 [0.71, 0.97] decades (2.1e-04 to 1.5e-03)', with what is open."""
    if not a.trained:
        return "n/a (the arm never trains: its best rate fails to train)"
    if not a.beats_bigram:
        return "n/a (the arm never beats the bigram baseline)"
    opens = [side for side, o in (("below", a.open_lo), ("above", a.open_hi)) if o]
    note = f"; open {' and '.join(opens)}: a lower bound" if opens else ""
    if a.open_share and not opens:
        note = f"; open in {a.open_share:.0%} of the replicates"
    return f"{nonneg(a.width).format(2)} decades ({10 ** a.lo:.2g} to {10 ** a.hi:.2g}{note})"


def opt_text(a: Arm) -> str:
    edge = {-1: ", the grid's lowest rate: not interpolated", 1: ", the grid's highest rate: not interpolated"}
    return f"lr* {lr_est(a.opt_x)}{edge.get(a.opt_edge, '')}"


def bracket_text(a: Arm) -> str:
    """The grid's own bracket of the optimum: the best rate and how far the loss rises to each neighbour (a rise on
    one side over three times the other's is a cliff, where the parabola is a poor shape)."""
    v = [a.loss[x].value for x in a.lrs]
    i = int(np.nanargmin(v))
    left = v[i - 1] - v[i] if i > 0 else math.nan
    right = v[i + 1] - v[i] if i < len(v) - 1 else math.nan
    cliff = math.isfinite(left) and math.isfinite(right) and max(left, right) > 3 * min(left, right)
    return (f"{rate(a.lrs[i])}; up {left:.3f} and {right:.3f} nats to the neighbours"
            + ("; a cliff on one side" if cliff else ""))


# ----------------------------------------------------------------------------- figures


def errbars(estimates: list[Estimate]) -> tuple[np.ndarray, np.ndarray]:
    v = np.array([e.value for e in estimates])
    return v, np.array([[e.value - e.lo for e in estimates], [e.hi - e.value for e in estimates]])


def panels(nums: Numbers) -> list[tuple[str, list[ArmKey]]]:
    """The loss-vs-lr panels: one per (d_k, heads, width), the qk-layernorm arms in their own."""
    groups: dict = {}
    for k in nums.arms:
        title = f"d_k = {k.d_k}, {plural(k.heads, 'head')}, width {k.width}" + (", qk-layernorm" if k.qk_norm else "")
        groups.setdefault((k.qk_norm, -k.d_k, -k.width, title), []).append(k)
    return [(t, ks) for (_, _, _, t), ks in sorted(groups.items())]


def fig_loss_vs_lr(nums: Numbers, path: Path) -> Path:
    ps = panels(nums)
    fig = Figure(figsize=(4.3 * len(ps), 4.6))
    axes = fig.subplots(1, len(ps), squeeze=False)[0]
    for ax, (title, keys) in zip(axes, ps, strict=True):
        for k in sorted(keys):
            a = nums.arms[k]
            v, err = errbars([a.loss[x] for x in a.lrs])
            c = colour(k)
            ax.errorbar(a.lrs, v, yerr=err, fmt="-o", color=c, ms=3, capsize=2, label=k.scale_label
                        + (" + qk-LN" if k.qk_norm else ""))
            ax.plot([10 ** a.opt_x.value], [a.opt_loss.value], "*", color=c, ms=11, mec="black", mew=0.5)
            level = a.opt_loss.value + nums.measures.delta
            ax.plot([10 ** a.lo, 10 ** a.hi], [level, level], "|-", color=c, lw=2.5, ms=12, alpha=0.7)
            div = [(x, a.loss[x].value) for x in a.lrs if a.diverged[x]]
            if div:
                ax.plot(*zip(*div, strict=True), "x", color=c, ms=9, mew=2)
        top = max(c.hi for k in keys for c in nums.arms[k].loss.values() if math.isfinite(c.hi))
        init = nums.arms[keys[0]].init
        if init < top + 0.1:  # drawn only where the curves come near it
            ax.axhline(init, color="black", lw=0.8, ls=":")
        ax.axhline(nums.bigram, color="gray", lw=0.8, ls="--")
        ax.set_ylim(top=min(top, init) + 0.08)
        ax.set_xscale("log")
        finish_axes(ax, "peak learning rate", "final validation loss (95% interval)" if ax is axes[0] else "",
                    title, legend=False)
        ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, -0.16), ncol=2, frameon=False)
    fig.suptitle(f"Final loss against learning rate (error bars: 95% interval of each cell's mean, mostly window noise "
                 f"that all arms share, so overlapping bars are no test: the paired comparisons are in the text). "
                 f"Star: the interpolated optimum (it may dip below the points); bar: the basin (within "
                 f"{nums.measures.delta:g} nats of it); dashed: the bigram baseline; dotted: ln(vocab); x: diverged",
                 fontsize=8, wrap=True)
    return save(fig, path)


def fig_measures(nums: Numbers, path: Path) -> Path:
    """Each arm's optimum rate, basin width and LR sensitivity with their intervals (a forest plot)."""
    order = sorted(nums.arms, key=lambda k: (k.qk_norm, -k.d_k, -k.width, k.scale))
    fig = Figure(figsize=(12, 0.42 * len(order) + 1.8))
    axes = fig.subplots(1, 3, sharey=True)
    y = np.arange(len(order))
    for ax, (name, get, xlabel) in zip(axes, (
            ("optimum", lambda a: a.opt_x, "best learning rate, log10 (interpolated)"),
            ("basin", lambda a: a.width, f"basin width within {nums.measures.delta:g} nats (decades of lr)"),
            ("sensitivity", lambda a: a.sensitivity,
             f"LR sensitivity over {rate(nums.measures.sensitivity_range[0])} to "
             f"{rate(nums.measures.sensitivity_range[1])} (nats)")), strict=True):
        ests = [nonneg(get(nums.arms[k])) if name == "basin" else get(nums.arms[k]) for k in order]
        v, err = errbars(ests)
        for i, k in enumerate(order):
            a = nums.arms[k]
            hollow = (name == "basin" and a.open) or (name == "optimum" and a.opt_edge)
            ax.errorbar([v[i]], [y[i]], xerr=err[:, i:i + 1], fmt="o", color=colour(k), capsize=3,
                        mfc="white" if hollow else colour(k))
        ax.set_xlabel(xlabel, fontsize=8)
        ax.grid(alpha=0.3, axis="x")
    axes[0].set_yticks(y, [k.label for k in order], fontsize=8)
    axes[0].invert_yaxis()
    fig.suptitle("The three measures per arm, 95% intervals (hollow: an optimum at the grid's edge or an open "
                 "basin, a bound)", fontsize=9)
    return save(fig, path)


def fig_sensitivity_vs_width(nums: Numbers, path: Path) -> Path:
    """Scaled vs unscaled at each (d_k, heads, width): what the fixed-range sensitivity and the basin say."""
    fig = Figure(figsize=(9.5, 4.8))
    ax = fig.subplots()
    shapes = {}  # one marker per (d_k, heads, width); colour by scale and qk-layernorm
    for k, a in sorted(nums.arms.items()):
        shape = shapes.setdefault((k.d_k, k.heads, k.width), "osD^v"[len(shapes) % 5])
        ax.errorbar([a.width.value], [a.sensitivity.value], xerr=errbars([a.width])[1],
                    yerr=errbars([a.sensitivity])[1], fmt=shape, color=colour(k), capsize=2, label=k.label, ms=6)
    ax.set_xlabel(f"(b) basin width within {nums.measures.delta:g} nats (decades; 95% interval)")
    ax.set_ylabel("(c) LR sensitivity over the fixed range (nats)")
    ax.set_title("Basin width against fixed-range sensitivity, per arm", fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=6, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return save(fig, path)


def fig_stability(arms: dict, keys: list[ArmKey], lrs: list[float], windows: int, path: Path) -> Path:
    """Max logit and mean attention entropy over steps, one column per learning rate, one line per seed."""
    fig = Figure(figsize=(5.0 * len(lrs), 7.4))
    axes = fig.subplots(2, len(lrs), squeeze=False)
    for col, x in enumerate(lrs):
        for k in keys:
            for i, r in enumerate(arms.get(k, {}).get(x, [])):
                for row, key in enumerate(("stab/max_logit", "stab/entropy")):
                    steps, vals = r.series(key)
                    if len(steps):
                        axes[row, col].plot(steps, np.abs(vals) if row == 0 else vals, color=colour(k), lw=1.1,
                                            alpha=0.8, label=(k.scale_label + (" + qk-LN" if k.qk_norm else ""))
                                            if i == 0 else None)
        axes[0, col].set_yscale("log")
        axes[0, col].set_title(f"d_k = {keys[0].d_k}, learning rate {rate(x)} (one line per seed)", fontsize=10)
        axes[0, col].set_ylabel(f"|max pre-softmax logit| ({windows} windows)")
        axes[1, col].set_ylabel("mean normalised attention entropy (1 = uniform)")
        axes[1, col].set_xlabel("step")
        for row in range(2):
            axes[row, col].grid(alpha=0.3, which="both")
    if axes[1, -1].get_legend_handles_labels()[0]:
        axes[1, -1].legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    return save(fig, path)


def fig_init(rows: list[dict], width: int, path: Path) -> Path:
    fig = Figure(figsize=(11, 4.2))
    ax1, ax2 = fig.subplots(1, 2)
    colors = {"none": "tab:red", "sqrt_dk": "tab:blue", "inv_dk": "tab:olive"}
    for init, ls in (("gpt2", "-"), ("unit", "--")):
        for scale, color in colors.items():
            sel = sorted((r["d_k"], r["logit_std"], r["entropy"]) for r in rows
                         if r["init"] == init and r["scale"] == scale)
            if not sel:
                continue
            dks, std, ent = zip(*sel, strict=True)
            name = {"none": "unscaled", "sqrt_dk": "1/sqrt(d_k)", "inv_dk": "1/d_k"}[scale]
            label = f"{name}, {'GPT-2 init (std 0.02)' if init == 'gpt2' else 'unit-variance q, k'}"
            ax1.plot(dks, std, ls, marker="o", ms=3, color=color, label=label)
            ax2.plot(dks, ent, ls, marker="o", ms=3, color=color, label=label)
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"head dim d_k (width {width}, random tokens)")
        ax.grid(alpha=0.3, which="both")
    ax1.set_yscale("log")
    ax1.set_ylabel("std of pre-softmax logits at init")
    ax2.set_ylabel("normalised attention entropy at init")
    ax2.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False,
               title="scale, init (solid: GPT-2, dashed: unit)", title_fontsize=7)
    fig.suptitle("Layer 0 at initialisation: logit size and attention entropy against d_k", fontsize=10)
    return save(fig, path)


# ----------------------------------------------------------------------------- sections


def design_commit() -> str:
    """The commit that added DESIGN.md (the design came before the sweep), from git where the checkout has it."""
    try:
        out = subprocess.run(["git", "log", "--diff-filter=A", "--format=%h", "--",
                              "docs/experiments/sqrt_dk/DESIGN.md"], cwd=ROOT, capture_output=True, text=True,
                             timeout=10, check=False).stdout.split()
    except (OSError, subprocess.SubprocessError):
        out = []
    return f"commit {out[-1]}" if out else "its first commit"


def init_section(rep: Report, width: int, block: int, out: Path) -> None:
    """Logits at initialisation against d_k, measured on a fresh model of the sweep's largest width."""
    head_dims = tuple(d for d in (8, 16, 32, 64, 128, 256, 512) if d <= width and width % d == 0)
    rows = logits_at_init(n_embd=width, head_dims=head_dims, block_size=block)
    lo_d, hi_d = head_dims[0], head_dims[-1]
    s = slopes(rows)
    fig_init(rows, width, out / "init_slopes.png")
    std = {(r["init"], r["scale"], r["d_k"]): r["logit_std"] for r in rows}
    ent = {(r["init"], r["scale"], r["d_k"]): r["entropy"] for r in rows}
    table = markdown_table(["init", "unscaled", "1/sqrt(d_k)", "1/d_k"],
                           [[name] + [f"{s[(init, sc)]:+.3f}" for sc in ("none", "sqrt_dk", "inv_dk")]
                            for init, name in (("unit", "unit-variance q, k"), ("gpt2", "GPT-2 (std 0.02)"))])
    rep.sections += ["## At initialisation", "", "![init](init_slopes.png)", "", table, "", prose(
        "sqrt_dk", "init", u_none=f"{s[('unit', 'none')]:+.2f}", u_sqrt=f"{s[('unit', 'sqrt_dk')]:+.2f}",
        u_inv=f"{s[('unit', 'inv_dk')]:+.2f}", hi_d=hi_d, lo_d=lo_d, width=width,
        u_std=f"{std[('unit', 'sqrt_dk', hi_d)]:.2f}", u_ent_none=f"{ent[('unit', 'none', hi_d)]:.2f}",
        u_ent_sqrt=f"{ent[('unit', 'sqrt_dk', hi_d)]:.2f}", g_std_lo=f"{std[('gpt2', 'none', lo_d)]:.2f}",
        g_std_hi=f"{std[('gpt2', 'none', hi_d)]:.2f}", g_ent_lo=f"{ent[('gpt2', 'none', lo_d)]:.2f}",
        g_ent_hi=f"{ent[('gpt2', 'none', hi_d)]:.2f}", g_ent_sqrt=f"{ent[('gpt2', 'sqrt_dk', hi_d)]:.2f}"), ""]


def loss_table(nums: Numbers) -> str:
    lrs = sorted({x for a in nums.arms.values() for x in a.lrs})
    rows = []
    for k, a in sorted(nums.arms.items(), key=lambda kv: (kv[0].qk_norm, -kv[0].d_k, -kv[0].width, kv[0].scale)):
        cells = []
        for x in lrs:
            if x not in a.loss:
                cells.append("")
                continue
            notes = [f"{a.failed[x]} failed" for _ in [0] if a.failed[x]] + [
                f"{a.at_bigram[x]} at or above the bigram" for _ in [0] if a.at_bigram.get(x)] + [
                f"{a.diverged[x]} diverged" for _ in [0] if a.diverged[x]]
            cells.append(a.loss[x].format() + (f" ({', '.join(notes)})" if notes else ""))
        rows.append([k.label] + cells)
    return markdown_table(["arm"] + [f"lr {rate(x)}" for x in lrs], rows)


def measures_table(nums: Numbers) -> str:
    m = nums.measures
    rows = []
    for k, a in sorted(nums.arms.items(), key=lambda kv: (kv[0].qk_norm, -kv[0].d_k, -kv[0].width, kv[0].scale)):
        n = sum(a.runs.values())
        rows.append([k.label, opt_text(a), bracket_text(a),
                     f"{a.opt_loss.format()} ({a.dip:.3f} below its best rate's)", width_text(a)]
                    + [nonneg(a.widths[d]).format(2) if a.beats_bigram else "n/a" for d in m.other_deltas]
                    + [a.sensitivity.format() if a.beats_bigram else "n/a (never beats the bigram)",
                       f"{sum(a.diverged.values())}/{n}", f"{sum(a.failed.values())}/{n}"])
    return markdown_table(["arm", "(a) best rate", "the grid's best rate (its bracket)",
                           "(a) best loss (the vertex's dip)",
                           f"(b) basin width, delta {m.delta:g} (its rates)"]
                          + [f"width, delta {d:g}" for d in m.other_deltas]
                          + ["(c) LR sensitivity", "diverged", "failed to train"], rows)


def called(est: Estimate, d: int, above: str, below: str) -> str:
    """The words of a censored direction: the side, 'not called' when the interval excludes 0 but an open basin
    edge or an optimum at the grid's edge could undo it, else no difference."""
    if d:
        return above if d > 0 else below
    if direction(est):
        return "not called: an open basin edge or an optimum at the grid's edge could undo it"
    return "no difference at the 95% level"


def comparison_line(c: Comparison, what: str) -> str:
    """One comparison (a minus b) on the three measures, with the words the directions give. A basin difference
    that is not on the same side at every delta is marked; an arm whose best loss does not beat the bigram baseline
    has no meaningful basin or sensitivity (a flat floor), so the line says so instead of reading them."""
    if not (c.a.beats_bigram and c.b.beats_bigram):
        flat = c.a if not c.a.beats_bigram else c.b
        return prose("sqrt_dk", "comparison_flat", a=c.a.key.label, b=c.b.key.label,
                     d_opt=c.d_opt.format(2, signed=True), factor=factor(c.d_opt),
                     d_best=c.d_best.format(3, signed=True), flat=flat.key.label)
    only = c.dir_width and any(direction(e) != c.dir_width for e in c.d_widths.values())
    return prose(
        "sqrt_dk", "comparison", a=c.a.key.label, b=c.b.key.label,
        d_opt=c.d_opt.format(2, signed=True), factor=factor(c.d_opt),
        opt_words=called(c.d_opt, c.dir_opt, f"{what}: higher", f"{what}: lower"),
        d_best=c.d_best.format(3, signed=True),
        best_words=called(c.d_best, c.dir_best, f"{what}: worse", f"{what}: better"),
        d_width=c.d_width.format(2, signed=True), other_deltas=other_deltas(c),
        width_words=called(c.d_width, c.dir_width, f"{what}: wider", f"{what}: narrower")
        + (f"; at delta {c.delta:g} only, not at every delta" if only else ""),
        d_sens=c.d_sens.format(3, signed=True),
        sens_words=called(c.d_sens, c.dir_sens, f"{what}: higher", f"{what}: lower"),
        reading=lr_basin.sensitivity_words(c.dir_sens, 0 if only else -c.dir_width, c.dir_opt != 0) + (
            f", around a best loss worse by {c.d_best.format(3)} nats"
            if c.dir_width > 0 and c.dir_best > 0 and not only else ""))


def other_deltas(c: Comparison) -> str:
    """'at delta 0.05: +0.10 [+0.02, +0.18]; at 0.2: ...' (the robustness check of a basin difference)."""
    return "; ".join(f"{d:g}: {e.format(2, signed=True)}" for d, e in c.d_widths.items())


def verdict(v: str) -> str:
    return f"**{verb(v)}**"


def scale_pairs(nums: Numbers) -> list[tuple[Arm, Arm]]:
    """(unscaled, scaled) at each (d_k, heads, width) without qk-layernorm."""
    out = []
    for k, a in sorted(nums.arms.items(), key=lambda kv: (-kv[0].d_k, -kv[0].width)):
        if k.scale == "none" and not k.qk_norm:
            s = nums.arms.get(k.partner(scale="sqrt_dk"))
            if s:
                out.append((a, s))
    return out


WORDS = {  # each prediction's word in the config's prediction block -> the side of 0 it expects
    "optimum_shift": {"lower": -1, "higher": +1},
    "best_loss_gap": {"above": +1, "below": -1},
    "basin_gap": {"wider_scaled": +1, "narrower_scaled": -1},
    "basin_growth": {"grows": +1, "shrinks": -1},
    "sensitivity_gap": {"above": +1, "below": -1},
    "qknorm_effect": {"wider_and_less_sensitive": (+1, -1), "narrower_and_more_sensitive": (-1, +1)},
}
DESIGNED = {"optimum_shift": "lower", "best_loss_gap": "above", "basin_gap": "wider_scaled", "basin_growth": "grows",
            "sensitivity_gap": "above", "qknorm_effect": "wider_and_less_sensitive"}


def expected(pred: dict) -> dict:
    """The sides of 0 the config's prediction block expects (the design's words where a key is missing)."""
    out = {}
    for key, words in WORDS.items():
        word = str(pred.get(key, DESIGNED[key]))
        if word not in words:
            raise ReportError(f"prediction.{key}={word!r} is not one of {', '.join(words)}.")
        out[key] = words[word]
    return out


def entropy_at_best(a: Arm, arms: dict) -> float | None:
    """The arm's mean normalised attention entropy at the end of training at its best grid rate (seed mean)."""
    x = a.lrs[int(np.nanargmin([a.loss[y].value for y in a.lrs]))]
    vals = [e[-1] for e in (r.series("stab/entropy")[1] for r in arms.get(a.key, {}).get(x, [])) if len(e)]
    return float(np.mean(vals)) if vals else None


@dataclass
class Growth:
    """P4 at one of the two comparisons: the growth of the scale's basin advantage from d_k = 64 to 256."""

    where: str  # "fixed width" or "fixed head count"
    est: Estimate  # (scaled - unscaled width at 256) - (the same at 64)
    direction: int  # its censored direction
    scaled: Arm  # the d_k = 64 arms
    unscaled: Arm
    entropy_scaled: float | None  # their attention entropy at their best rate
    entropy_unscaled: float | None


@dataclass
class Predictions:
    """P1-P7 as the design wrote them, each verdict from lr_basin's tested functions, with the numbers they rest on.
    ``p4``, ``p6`` and ``p7`` are None where the sweep does not test them."""

    measures: Measures
    scaled: Arm  # d_k = 256, one head at width 256
    unscaled: Arm
    comparison: Comparison  # unscaled minus scaled
    p1: str
    p2: str
    p3: str
    p4: str | None
    p5: str
    p6: str | None
    p7: str | None
    seedwise_opt: SeedLevel  # the P1-P3 differences seed by seed, beside the bootstrap
    seedwise_best: SeedLevel
    seedwise_width: SeedLevel
    growth: list[Growth]
    qknorm: Arm | None  # d_k = 256 with qk-layernorm and the factor
    qknorm_comparison: Comparison | None  # qk-layernorm minus without
    fp16: dict  # the float16 counts (fp16_counts)


def prediction_findings(nums: Numbers, pred: dict, fp16: dict, arms_by_key: dict) -> Predictions | None:
    """None where the sweep lacks the d_k = 256 pair every prediction needs."""
    m = nums.measures
    s256, n256 = nums.get(d_k=256, heads=1, width=256, scale="sqrt_dk", qk_norm=False), nums.get(
        d_k=256, heads=1, width=256, scale="none", qk_norm=False)
    if not (s256 and n256):
        return None
    c = compare(n256, s256, m)  # unscaled minus scaled
    e = expected(pred)
    xs_opt = lambda a, y: lr_basin.optimum(a.xs, y)  # noqa: E731
    grow = []
    for small_heads, small_width, name in ((4, 256, "fixed width"), (1, 64, "fixed head count")):
        s64 = nums.get(d_k=64, heads=small_heads, width=small_width, scale="sqrt_dk", qk_norm=False)
        n64 = nums.get(d_k=64, heads=small_heads, width=small_width, scale="none", qk_norm=False)
        if s64 and n64:
            est, d = growth(s256, n256, s64, n64, m)
            grow.append(Growth(name, est, d, s64, n64, entropy_at_best(s64, arms_by_key),
                               entropy_at_best(n64, arms_by_key)))
    p4 = None
    if grow:
        p4 = lr_basin.all_verdict([g.direction for g in grow], e["basin_growth"]) if len(grow) == 2 else "undecided"
    q = nums.get(d_k=256, heads=1, width=256, scale="sqrt_dk", qk_norm=True)
    cq = compare(q, s256, m) if q else None  # qk-layernorm minus without
    p7 = None
    if fp16:
        counts = {x: (by.get("none", (0, 0))[0], by.get("sqrt_dk", (0, 0))[0]) for x, by in fp16.items()}
        p7 = lr_basin.fp16_verdict(counts, int(pred.get("fp16_min_unscaled", 3)),
                                   int(pred.get("fp16_max_scaled", 1))) if fp16_complete(fp16) else "undecided"
    return Predictions(
        m, s256, n256, c,
        p1=lr_basin.sign_verdict(c.dir_opt, e["optimum_shift"]),
        p2=lr_basin.sign_verdict(c.dir_best, e["best_loss_gap"]),
        p3=lr_basin.sign_verdict(-c.dir_width, e["basin_gap"]),  # scaled minus unscaled width
        p4=p4,
        p5=lr_basin.sign_verdict(c.dir_sens, e["sensitivity_gap"]),
        p6=lr_basin.both_verdict(cq.dir_width, e["qknorm_effect"][0], cq.dir_sens, e["qknorm_effect"][1])
        if cq else None,
        p7=p7,
        seedwise_opt=seed_level(n256, s256, lambda a, y: xs_opt(a, y)[0]),
        seedwise_best=seed_level(n256, s256, lambda a, y: xs_opt(a, y)[1]),
        seedwise_width=seed_level(s256, n256, lambda a, y: lr_basin.width(a.xs, y, m.delta)),
        growth=grow, qknorm=q, qknorm_comparison=cq, fp16=fp16)


def predictions_text(p: Predictions | None) -> list[str]:
    """The findings' lines of P1-P7, then the answer they give."""
    if p is None:
        return [prose("sqrt_dk", "no_predictions")]
    m, c, s256, n256 = p.measures, p.comparison, p.scaled, p.unscaled
    out = [
        prose("sqrt_dk", "p1", verdict=verdict(p.p1), d=c.d_opt.format(2, signed=True), factor=factor(c.d_opt),
              s=opt_text(s256), n=opt_text(n256), seedwise=p.seedwise_opt.format(2)),
        prose("sqrt_dk", "p2", verdict=verdict(p.p2), d=c.d_best.format(3, signed=True), s=s256.opt_loss.format(),
              n=n256.opt_loss.format(), seedwise=p.seedwise_best.format(3)),
        prose("sqrt_dk", "p3", verdict=verdict(p.p3), d=(s256.width - n256.width).format(2, signed=True),
              s=width_text(s256), n=width_text(n256), delta=f"{m.delta:g}", seedwise=p.seedwise_width.format(2),
              other_deltas="; ".join(f"{d:g}: {e.scaled(-1).format(2, signed=True)}" for d, e in c.d_widths.items())),
    ]
    if p.growth:
        out.append(prose("sqrt_dk", "p4", verdict=verdict(p.p4), small_dk=64, big_dk=256, parts="; ".join(
            prose("sqrt_dk", "p4_part", where=g.where, d=g.est.format(2, signed=True),
                  entropy=entropy_words(g.entropy_scaled), entropy_n=entropy_words(g.entropy_unscaled),
                  small=f"d_k = {g.scaled.key.d_k} with {plural(g.scaled.key.heads, 'head')} at width "
                        f"{g.scaled.key.width}",
                  small_gap=(g.scaled.width - g.unscaled.width).format(2, signed=True),
                  big_gap=(s256.width - n256.width).format(2, signed=True))
            for g in p.growth)))
    out.append(prose("sqrt_dk", "p5", verdict=verdict(p.p5), d=c.d_sens.format(3, signed=True),
                     s=s256.sensitivity.format(), n=n256.sensitivity.format(),
                     lo=rate(m.sensitivity_range[0]), hi=rate(m.sensitivity_range[1]),
                     reading=lr_basin.sensitivity_words(c.dir_sens, -c.dir_width, c.dir_opt != 0)))
    if p.qknorm_comparison is not None:
        cq = p.qknorm_comparison
        out.append(prose("sqrt_dk", "p6", verdict=verdict(p.p6), d_width=cq.d_width.format(2, signed=True),
                         d_sens=cq.d_sens.format(3, signed=True), d_best=cq.d_best.format(3, signed=True),
                         q_width=width_text(p.qknorm), s_width=width_text(s256)))
    if p.p7 is not None:
        out.append(prose("sqrt_dk", "p7", verdict=verdict(p.p7), counts="; ".join(
            f"lr {rate(x)}: unscaled {by.get('none', (0, 0))[0]} of {by.get('none', (0, 0))[1]}, scaled "
            f"{by.get('sqrt_dk', (0, 0))[0]} of {by.get('sqrt_dk', (0, 0))[1]}" for x, by in p.fp16.items())))
    said = {v: f"the prediction {verb(v)}" for v in ("holds", "fails", "undecided")}
    out.append(prose(
        "sqrt_dk", "answer", p1=said[p.p1], p2=said[p.p2], p3=said[p.p3], seedwise=p.seedwise_width.format(2),
        p4=said[p.p4] if p.p4 is not None else "not tested here",
        p6=said[p.p6] if p.p6 is not None else "not tested here",
        p7=said[p.p7] if p.p7 is not None else "not tested here"))
    return out


def entropy_words(v: float | None) -> str:
    return f"{v:.2f}" if v is not None else "n/a"


def pairs_section(rep: Report, nums: Numbers) -> None:
    rep.sections += ["## Scaled against unscaled", "", prose("sqrt_dk", "pairs_intro"), ""]
    for n, s in scale_pairs(nums):
        rep.sections += ["- " + comparison_line(compare(n, s, nums.measures), "unscaled"), ""]
    a4 = nums.get(d_k=64, heads=4, width=256, scale="sqrt_dk", qk_norm=False)
    a1 = nums.get(d_k=64, heads=1, width=64, scale="sqrt_dk", qk_norm=False)
    if a4 and a1:
        rep.sections += ["Head count and width at d_k = 64 (four heads at width 256 against one at width 64; no "
                         "verdict was predicted):", ""]
        for scale in ("sqrt_dk", "none"):
            b4, b1 = a4.key.partner(scale=scale), a1.key.partner(scale=scale)
            if b4 in nums.arms and b1 in nums.arms:
                rep.sections += ["- " + comparison_line(compare(nums.arms[b4], nums.arms[b1], nums.measures),
                                                        "4 heads at width 256"), ""]


def qknorm_section(rep: Report, nums: Numbers, arms: dict) -> None:
    s = nums.get(d_k=256, heads=1, width=256, scale="sqrt_dk", qk_norm=False)
    n = nums.get(d_k=256, heads=1, width=256, scale="none", qk_norm=False)
    qs = nums.get(d_k=256, heads=1, width=256, scale="sqrt_dk", qk_norm=True)
    qn = nums.get(d_k=256, heads=1, width=256, scale="none", qk_norm=True)
    if not ((s and qs) or (n and qn)):
        return
    rep.sections += ["## qk-layernorm", "", prose("sqrt_dk", "qknorm_intro"), ""]
    for a, b, what in ((qs, s, "with qk-layernorm"), (qn, n, "with qk-layernorm"), (qn, qs, "unscaled")):
        if a and b:
            rep.sections += ["- " + comparison_line(compare(a, b, nums.measures), what), ""]
    for a in (qs, qn):
        if a and not a.beats_bigram:
            rep.sections += [prose("sqrt_dk", "never_beats_bigram", arm=a.key.label, best=a.opt_loss.format()), ""]
    shown = [x for x in (s, n, qs, qn) if x]
    lrs = sorted({y for a in shown for y in a.lrs if y >= 1e-3})
    rows = [[a.key.label] + ["" if (ml := max_logit(arms.get(a.key, {}).get(x, []))) is None else fmt_pm(*ml, 1)
                             for x in lrs] for a in shown]
    rep.sections += [prose("sqrt_dk", "max_logit_table", lo=rate(lrs[0]), hi=rate(lrs[-1])), "",
                     markdown_table(["arm"] + [f"lr {rate(x)}" for x in lrs], rows), ""]


@dataclass
class Fp16Row:
    """One float16 arm at one rate."""

    lr: float
    arm: ArmKey
    diverged: int
    runs: int
    stopped: list[int]  # the diverged runs' last steps, sorted
    others: tuple[float, float] | None  # the other runs' final loss, mean ± seed sd
    raw: tuple[float, float] | None  # the smallest and largest raw |q.k| at the last probe
    float32_max_logit: tuple[float, float] | None  # the float32 partner's max logit at the end, mean ± seed sd


@dataclass
class Fp16:
    """The float16 sweep: what diverged and when, the raw products, the step times against float32."""

    rows: list[Fp16Row]
    runs: int
    wall: float  # minutes
    step16: float  # median step seconds, float16 runs
    step32: float  # the same arms in float32 (d_k = 256, rates from 1e-3)


def fp16_findings(arms: dict, fp16: dict) -> Fp16 | None:
    if not fp16:
        return None
    rows = []
    for x, by in fp16.items():
        for scale in ("none", "sqrt_dk"):
            if scale not in by:
                continue
            k16 = next(k for k in arms if k.fp16 and k.scale == scale)
            rs = arms[k16][x]
            ok = [final_loss(r) for r in rs if math.isfinite(final_loss(r))]
            raw = [v for r in rs if (v := raw_product(r, k16)) is not None]
            rows.append(Fp16Row(
                x, k16, by[scale][0], by[scale][1],
                sorted(s for r in rs if not math.isfinite(final_loss(r)) and (s := diverged_step(r)) is not None),
                mean_spread(ok) if ok else None, (min(raw), max(raw)) if raw else None,
                max_logit(arms.get(k16.partner(precision="32-true"), {}).get(x, []))))
    f16 = [r for k, by in arms.items() if k.fp16 for rs in by.values() for r in rs]
    f32 = [r for k, by in arms.items() if not k.fp16 and k.d_k == 256 and k.heads == 1 and not k.qk_norm
           and k.scale in ("none", "sqrt_dk") for x, rs in by.items() if x >= 1e-3 for r in rs]
    return Fp16(rows, len(f16), wall_minutes(f16), step_seconds(f16), step_seconds(f32))


def fp16_section(rep: Report, f: Fp16 | None) -> None:
    if f is None:
        rep.sections += ["## Float16", "", prose("sqrt_dk", "fp16_missing"), ""]
        return
    rows = [[rate(r.lr), r.arm.scale_label, f"{r.diverged} of {r.runs}", ", ".join(map(str, r.stopped)) or "-",
             fmt_pm(*r.others, 3) if r.others else "-",
             f"{r.raw[0]:,.0f} to {r.raw[1]:,.0f}" if r.raw else "-",
             fmt_pm(*r.float32_max_logit, 0) if r.float32_max_logit else "(not in the float32 grid)"] for r in f.rows]
    rep.sections += ["## Float16", "", prose("sqrt_dk", "fp16_intro", n_runs=plural(f.runs, "run"),
                                             fp16_max=f"{float(np.finfo(np.float16).max):.0f}",
                                             wall=f"{f.wall:.1f}",
                                             step16=f"{1000 * f.step16:.0f}", step32=f"{1000 * f.step32:.0f}"), "",
                     markdown_table(["lr", "arm", "diverged (float16)", "stopped at step", "final loss of the others",
                                     "largest raw q.k at a probe (float16 runs; the last probe before a stop)",
                                     "max logit at the end, float32 runs"], rows),
                     "", prose("sqrt_dk", "fp16_reading"), ""]


def raw_product(run: Run, key: ArmKey) -> float | None:
    """The largest |q.k| before the scale (the stability probe's max logit divided by the scale) at the run's last
    probe: what float16 has to hold before the multiplication."""
    _, vals = run.series("stab/max_logit")
    if not len(vals):
        return None
    scale = 1 / math.sqrt(key.d_k) if key.scale == "sqrt_dk" else 1.0 if key.scale == "none" else math.nan
    return float(abs(vals[-1]) / scale)


def step_seconds(runs: list[Run]) -> float:
    """The median over runs of each run's median training step (summary.json's step_seconds_median)."""
    vals = [v for r in runs if (v := r.summary.get("step_seconds_median")) is not None and math.isfinite(v)]
    return float(np.median(vals)) if vals else math.nan


def stability_section(rep: Report, arms: dict, nums: Numbers, cfg: dict, out: Path) -> None:
    """Max logit and entropy over training at the largest head dim, one line per seed."""
    big = max(k.d_k for k in nums.arms)
    order = {("sqrt_dk", False): 0, ("none", False): 1, ("sqrt_dk", True): 2, ("none", True): 3}
    keys = sorted((k for k in nums.arms if k.d_k == big and (k.scale, k.qk_norm) in order),
                  key=lambda k: (k.width, order[(k.scale, k.qk_norm)]))
    if not keys:
        return
    lrs = sorted({x for k in keys for x in arms[k]})
    shown = sorted({min(lrs, key=lambda x: abs(math.log10(x) + 3)), lrs[-1]})
    n_stab = cfg["callbacks"]["stability"]["windows"]
    fig_stability(arms, keys, shown, n_stab, out / "stability.png")
    ends = []
    for k in keys:
        vals = [e[-1] for e in (r.series("stab/entropy")[1] for r in arms[k].get(shown[0], [])) if len(e)]
        if vals:
            ends.append(f"{k.scale_label}{' + qk-layernorm' if k.qk_norm else ''} {fmt_pm(*mean_spread(vals), 2)}")
    links = explorers({f"d_k = {big}, {k.scale_label}{' + qk-layernorm' if k.qk_norm else ''}, lr {rate(x)}, "
                       f"seed {arms[k][x][0].seed}": arms[k][x][0] for k in keys[:2] for x in shown if x in arms[k]},
                      out)
    rep.sections += [f"## Logit growth and entropy at d_k = {big}", "", "![stability](stability.png)", ""]
    if ends:
        rep.sections += [prose("sqrt_dk", "stability", lr=rate(shown[0]), n_stab=n_stab, ends="; ".join(ends)), ""]
    if links:
        rep.sections += [prose("sqrt_dk", "explorers", links=", ".join(links)), ""]


@dataclass
class HugeLogits:
    """The float32 runs whose max attention logit passed HUGE at the end, and how they trained."""

    runs: int  # such runs
    float32_runs: int
    above_bigram: int  # of those that finished, how many ended at or above the bigram baseline
    lo: float  # their final losses' range (NaN if none finished)
    hi: float
    diverged: int
    failed: int  # failed to train
    largest: float  # the largest max logit (0 if none)


HUGE = 1e4  # a max logit past this is "huge" (the published cases' 1e4-ish logits)


def huge_logits(runs: list[Run], nums: Numbers, baseline: tuple) -> HugeLogits:
    huge = [r for r in runs if not arm_is_fp16(r) and (r.summary.get("attn_max_logit") or 0) > HUGE]
    ok = [v for r in huge if math.isfinite(v := final_loss(r))]
    return HugeLogits(len(huge), sum(not arm_is_fp16(r) for r in runs), sum(not v < baseline[1] for v in ok),
                      min(ok, default=math.nan), max(ok, default=math.nan), len(huge) - len(ok),
                      sum(failed_to_train(v, *baseline, nums.measures.failed_fraction) for v in ok),
                      max((r.summary["attn_max_logit"] for r in huge), default=0))


def literature(rep: Report, h: HugeLogits) -> None:
    rep.comparison.append(prose("sqrt_dk", "huge_logits", n_huge=h.runs, n_runs=h.float32_runs, threshold="1e4",
                                n_above=h.above_bigram, lo=f"{h.lo:.2f}", hi=f"{h.hi:.2f}", n_div=h.diverged,
                                n_failed=h.failed, largest=f"{h.largest:.3g}"))


def arm_is_fp16(run: Run) -> bool:
    return str(run.config["trainer"].get("precision", "32-true")).startswith("16")


def setup_text(runs: list[Run], arms: dict, nums: Numbers, baseline: tuple) -> str:
    cfg = next(r for r in runs if not arm_is_fp16(r)).config
    lrs = sorted({x for a in nums.arms.values() for x in a.lrs})
    main = [r for r in runs if not arm_is_fp16(r)]
    return prose(
        "sqrt_dk", "setup", n_layer=cfg["model"]["n_layer"], block=cfg["model"]["block_size"],
        batch=cfg["data"]["batch_size"], steps=cfg["trainer"]["max_steps"], warmup=cfg["optim"]["warmup_steps"],
        min_lr=f"{cfg['optim']['min_lr']:g}", clip=cfg["trainer"]["gradient_clip_val"],
        arms="; ".join(k.label for k in sorted(nums.arms, key=lambda k: (k.qk_norm, -k.d_k, -k.width, k.scale))),
        lrs=", ".join(rate(x) for x in lrs), seeds=", ".join(map(str, sorted({r.seed for r in main}))),
        val=cfg["data"]["val_windows"], n_stab=cfg["callbacks"]["stability"]["windows"],
        every=cfg["callbacks"]["stability"]["every_n_steps"], n_diag=cfg["diagnostics"]["windows"],
        wide=max(k.width for k in nums.arms), narrow=min(k.width for k in nums.arms),
        unigram=f"{baseline[0]:.3f}", bigram=f"{baseline[1]:.3f}", wall=f"{wall_minutes(main):.1f}",
        n_seeds=seeds_words(rs for by_lr in arms.values() for rs in by_lr.values()),
        n_main=plural(len(main), "run"), threads=plural(runs[0].summary.get("threads") or 1, "thread"))


def wall_minutes(runs: list[Run]) -> float:
    """The sweeps' wall time: each sweep dir's own (first config.yaml to last summary.json), summed, so the wait
    between two sweeps (stage 1 and stage 2) is not counted."""
    return sum(sweep_wall_seconds(rs) for rs in group_by(runs, lambda r: r.dir.parent).values()) / 60


def stage_two_text(nums: Numbers) -> str:
    need, still_open = stage_two(nums, LADDER)
    stage1 = set.intersection(*(set(a.lrs) for a in nums.arms.values()))
    extended = [a.key.label for a in nums.arms.values() if set(a.lrs) != stage1]
    if need:
        return prose("sqrt_dk", "stage2_needed", arms="; ".join(
            f"{k.label}: {', '.join(rate(x) for x in xs)}" for k, xs in need.items()))
    return prose("sqrt_dk", "stage2_done", extended=", ".join(extended) if extended else "none",
                 still_open=", ".join(k.label for k in still_open) if still_open else "none")


def adam_shift(nums: Numbers) -> dict[str, str]:
    """The optimum shift Adam's reparametrisation predicts (-log10(d_k) / 4) beside the measured one, at the largest
    head dim and at the middle one (four heads)."""
    out = {}
    for name, d_k, heads in (("big", 256, 1), ("small", 64, 4)):
        n = nums.get(d_k=d_k, heads=heads, width=256, scale="none", qk_norm=False)
        s = nums.get(d_k=d_k, heads=heads, width=256, scale="sqrt_dk", qk_norm=False)
        out[f"pred_{name}"] = f"{-math.log10(d_k) / 4:+.2f}"
        out[f"obs_{name}"] = compare(n, s, nums.measures).d_opt.format(2, signed=True) if n and s else "n/a"
    return out


@dataclass
class Outcomes:
    """How the float32 runs ended: diverged, failed to train (at rates below their arm's best rate or above it)."""

    runs: int
    diverged: int
    failed: int
    failed_slow: int  # failed at a rate below the arm's best grid rate
    fraction: float  # the failed-to-train rule's fraction of the unigram - bigram gap


def outcomes(nums: Numbers) -> Outcomes:
    arms = nums.arms.values()
    return Outcomes(sum(sum(a.runs.values()) for a in arms), sum(sum(a.diverged.values()) for a in arms),
                    sum(sum(a.failed.values()) for a in arms),
                    sum(n for a in arms for x, n in a.failed.items()
                        if x < a.lrs[int(np.nanargmin([a.loss[y].value for y in a.lrs]))]),
                    nums.measures.failed_fraction)


@dataclass
class SqrtDkFindings:
    """Everything experiment 2's report states, computed from the runs: each arm's measures (``nums``), the
    predictions' verdicts, the float16 sweep and the huge logits."""

    arms: dict  # ArmKey -> {lr: [runs]}
    cfg: dict  # a float32 run's config: the recipe
    pred: dict
    baseline: tuple[float, float]  # the unigram and bigram losses
    nums: Numbers
    outcomes: Outcomes
    predictions: Predictions | None
    fp16: Fp16 | None
    huge: HugeLogits


def compute(runs: list[Run]) -> SqrtDkFindings:
    arms = arms_of(runs)
    cfg = next((r for r in runs if not arm_is_fp16(r)), runs[0]).config
    pred = cfg.get("prediction") or {}
    m = Measures(float(pred.get("basin_delta", 0.1)), tuple(pred.get("sensitivity_range", (1e-4, 1e-2))),
                 failed_fraction=float(pred.get("failed_to_train", 0.5)))
    baseline = baselines(runs)
    nums = numbers(arms, m, baseline)
    fp16 = fp16_counts(arms)
    return SqrtDkFindings(arms, cfg, pred, baseline, nums, outcomes(nums),
                          prediction_findings(nums, pred, fp16, arms), fp16_findings(arms, fp16),
                          huge_logits(runs, nums, baseline))


def write_report(runs: list[Run], out: Path, sweeps: list[Path]) -> Path:
    """The report (README.md and its PNGs in ``out``) from experiment 2's runs."""
    f = compute(runs)
    arms, cfg, nums, m, o = f.arms, f.cfg, f.nums, f.nums.measures, f.outcomes
    rep = Report()
    rep.findings.append(prose("sqrt_dk", "in_short", n_div=o.diverged, n_failed=o.failed, n_slow=o.failed_slow,
                              n_fast=o.failed - o.failed_slow, n_runs=o.runs, fraction=f"{o.fraction:g}"))
    rep.findings += predictions_text(f.predictions)
    width = max(k.width for k in nums.arms)
    init_section(rep, width, cfg["model"]["block_size"], out)
    fig_loss_vs_lr(nums, out / "loss_vs_lr.png")
    fig_measures(nums, out / "measures.png")
    fig_sensitivity_vs_width(nums, out / "sensitivity_vs_width.png")
    rep.sections += ["## Final loss against learning rate", "", "![loss vs lr](loss_vs_lr.png)", "",
                     loss_table(nums), "", stage_two_text(nums), "",
                     "## The three measures per arm", "", "![measures](measures.png)", "", measures_table(nums), "",
                     "![sensitivity vs width](sensitivity_vs_width.png)", "", prose("sqrt_dk", "measures_reading"), ""]
    pairs_section(rep, nums)
    qknorm_section(rep, nums, arms)
    fp16_section(rep, f.fp16)
    stability_section(rep, arms, nums, cfg, out)
    literature(rep, f.huge)
    head = [prose("sqrt_dk", "intro", n_runs=plural(len(runs), "run"), sweeps=", ".join(f"`{s}`" for s in sweeps),
                  design=design_commit()), "",
            setup_text(runs, arms, nums, f.baseline), "",
            prose("sqrt_dk", "terms", level=f"{LEVEL:.0%}", n_boot=N_BOOT, method=METHOD, delta=f"{m.delta:g}",
                  lo=rate(m.sensitivity_range[0]), hi=rate(m.sensitivity_range[1]),
                  fraction=f"{m.failed_fraction:g}",
                  n_seeds=seeds_words((rs for by_lr in arms.values() for rs in by_lr.values()), noun=True)), ""]
    sections = head + ["## Finding", ""] + [f"- {x}" for x in rep.findings] + [""]
    sections += [prose("sqrt_dk", "changes"), ""] + rep.sections
    sections += ["## How this compares with the literature", "", prose("sqrt_dk", "literature")]
    sections += [f"- {c}" for c in rep.comparison] + [""]
    sections += [prose("sqrt_dk", "threats", **adam_shift(nums)), ""]
    path = out / "README.md"
    path.write_text("\n".join(sections))
    return path

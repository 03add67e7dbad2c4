"""Experiment 2's report: does 1/sqrt(d_k) keep training stable? (see configs/experiment/sqrt_dk.yaml)

Works on any set of runs that differ in learning rate and attention variant (scale, qk_norm, qk_init,
head dim), drawing what they support. An arm is (d_k, variant); a variant is (scale, qk-norm, init); a cell is an
arm at one learning rate. Every cell's final loss is a bootstrap sample over its seeds and the validation windows
(diagnostics.npz), all cells drawn in one bootstrap so that LR sensitivities, best losses and gaps between arms
are computed on aligned replicates (tinygpt.analysis.stats).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from tinygpt.analysis.figures import explorers, finish_axes, fmt, markdown_table, save
from tinygpt.analysis.init_stats import logits_at_init, slopes
from tinygpt.analysis.stats import (
    LEVEL,
    METHOD,
    N_BOOT,
    Estimate,
    combine,
    Sample,
    bootstrap,
    difference_words,
    direction,
    failed_to_train,
    growth_verdict,
    lr_sensitivity,
    mean_spread,
    stack,
    trend,
)
from tinygpt.analysis.sweep import ReportError, Run, seeds_words, sweep_wall_seconds
from tinygpt.analysis.templates import Report, plural, prose

VARIANT_STYLE = {  # variant -> (label, colour, line style)
    ("sqrt_dk", False, "gpt2"): ("1/sqrt(d_k)", "tab:blue", "-"),
    ("none", False, "gpt2"): ("unscaled", "tab:red", "-"),
    ("inv_dk", False, "gpt2"): ("1/d_k", "tab:green", "-"),
    ("none", True, "gpt2"): ("unscaled + qk-norm", "tab:purple", "-"),
    ("sqrt_dk", False, "unit"): ("1/sqrt(d_k), unit init", "tab:blue", "--"),
    ("none", False, "unit"): ("unscaled, unit init", "tab:red", "--"),
}
INITS = {"gpt2": "GPT-2 init", "unit": "unit-variance init"}


def sentence(text: str) -> str:
    """The first letter capitalised, the rest kept (GPT-2 stays GPT-2)."""
    return text[:1].upper() + text[1:]
# what sqrt_dk.yaml's ``prediction`` says: for runs made before it was written into the config
DEFAULT_PREDICTION = {"sensitivity_gap": "rises", "best_loss_gap": "rises", "failed_to_train": 0.5}


def variant(run: Run) -> tuple[str, bool, str]:
    a = run.config["model"]["attn"]
    return (str(a["scale"]), bool(a.get("qk_norm", False)), a.get("qk_init", "gpt2"))


def variant_label(v) -> str:
    if v in VARIANT_STYLE:
        return VARIANT_STYLE[v][0]
    scale, qk_norm, init = v
    return f"scale {scale}" + (" + qk-norm" if qk_norm else "") + (f", {init} init" if init != "gpt2" else "")


def style(v) -> tuple[str, str]:
    return VARIANT_STYLE.get(v, (None, "tab:gray", ":"))[1:]


def head_dim(run: Run) -> int:
    m = run.config["model"]
    return m["n_embd"] // m["n_head"]


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


def arms_of(runs: list[Run]) -> dict[tuple[int, tuple], dict[float, list[Run]]]:
    """(d_k, variant) -> {lr: [runs sorted by seed]}."""
    arms: dict = defaultdict(lambda: defaultdict(list))
    for r in runs:
        arms[(head_dim(r), variant(r))][lr(r)].append(r)
    for by_lr in arms.values():
        for rs in by_lr.values():
            rs.sort(key=lambda r: r.seed)
    return arms


def arm_name(arm) -> str:
    return f"d_k = {arm[0]}, {variant_label(arm[1])}"


def edge(x: float, lrs: list[float]) -> str:
    """A warning when a best learning rate sits at an end of the grid (the optimum may lie beyond it)."""
    if len(lrs) > 2 and x in (lrs[0], lrs[-1]):
        return " (the grid's " + ("lowest" if x == lrs[0] else "highest") + " rate: its optimum may lie beyond)"
    return ""


# ----------------------------------------------------------------------------- the numbers


def window_losses(run: Run, n_windows: int) -> np.ndarray:
    """(windows,) final validation loss of each window; a diverged run (no diagnostics.npz) counts as its initial
    loss on every window (Wortsman et al.)."""
    if not math.isfinite(final_loss(run)):
        return np.full(n_windows, init_loss(run))
    v = run.windows()
    if v is None:
        raise ReportError(f"{run.dir} has no diagnostics.npz (run before the per-window diagnostics); rerun the "
                          "sweep at this version.")
    return v.mean(1)


@dataclass
class Arm:
    """One arm's numbers, from the shared bootstrap: the final loss per learning rate, LR sensitivity, best loss."""

    lrs: list[float]
    loss: dict[float, Estimate]  # per learning rate
    sensitivity: Estimate
    best: Estimate  # the lowest final loss on the grid (per replicate: biased low, see numbers())
    best_lr: float
    best_lr_share: np.ndarray  # (B,) index of the best rate in each replicate
    failed: dict[float, int]  # runs that failed to train, per learning rate
    diverged: dict[float, int]
    runs: dict[float, int]


def numbers(arms, fraction: float) -> dict:
    """Every arm's Arm, from one bootstrap over all cells (aligned replicates: arms can be compared). The best loss is
    the minimum over the grid in every replicate, so its replicates, and its interval, sit a little below the best
    cell's own (the minimum of noisy cells is biased low); the report says so."""
    any_npz = next((r for by_lr in arms.values() for rs in by_lr.values() for r in rs if r.windows() is not None),
                   None)
    if any_npz is None:
        raise ReportError("no run has diagnostics.npz: rerun the sweep at this version.")
    n = len(any_npz.windows())
    base = any_npz.summary.get("diagnostics", {})
    samples = {(arm, x): Sample(np.stack([window_losses(r, n) for r in rs]))
               for arm, by_lr in arms.items() for x, rs in by_lr.items()}
    est = bootstrap(samples)
    out = {}
    for arm, by_lr in arms.items():
        lrs = sorted(by_lr)
        init = init_loss(by_lr[lrs[0]][0])
        cells = [est[(arm, x)] for x in lrs]
        values, reps = stack(cells)  # (L,), (B, L)
        failed = {x: sum(failed_to_train(final_loss(r), base["unigram_loss"], base["bigram_loss"], fraction)
                         for r in by_lr[x]) for x in lrs}
        out[arm] = Arm(lrs, {x: est[(arm, x)] for x in lrs},
                       combine(lambda y, init=init: lr_sensitivity(y, init), cells),
                       combine(lambda y, init=init: np.minimum(y, init).min(-1), cells), lrs[int(values.argmin())],
                       reps.argmin(1),
                       failed, {x: sum(not math.isfinite(final_loss(r)) for r in by_lr[x]) for x in lrs},
                       {x: len(by_lr[x]) for x in lrs})
    return out


def baselines(runs: list[Run]) -> tuple[float, float]:
    d = next(r.summary["diagnostics"] for r in runs if r.summary.get("diagnostics", {}).get("unigram_loss"))
    return d["unigram_loss"], d["bigram_loss"]


# ----------------------------------------------------------------------------- figures


def errbars(estimates: list[Estimate]) -> tuple[np.ndarray, np.ndarray]:
    v = np.array([e.value for e in estimates])
    return v, np.array([[e.value - e.lo for e in estimates], [e.hi - e.value for e in estimates]])


def fig_loss_vs_lr(arms, nums: dict, path: Path) -> Path:
    dks = sorted({dk for dk, _ in arms})
    fig = Figure(figsize=(4.2 * len(dks), 4.2))
    axes = fig.subplots(1, len(dks), squeeze=False)[0]
    for ax, dk in zip(axes, dks, strict=True):
        for arm in sorted((a for a in arms if a[0] == dk), key=lambda a: str(a[1])):
            a = nums[arm]
            v, err = errbars([a.loss[x] for x in a.lrs])
            color, ls = style(arm[1])
            ax.errorbar(a.lrs, v, yerr=err, fmt=ls, color=color, marker="o", ms=3, capsize=2,
                        label=variant_label(arm[1]))
            div = [(x, a.loss[x].value) for x in a.lrs if a.diverged[x]]
            if div:
                ax.plot(*zip(*div, strict=True), "x", color=color, ms=9, mew=2)
        any_run = next(r for (d, _), by_lr in arms.items() if d == dk for rs in by_lr.values() for r in rs)
        ax.axhline(init_loss(any_run), color="black", lw=0.8, ls=":", label="ln(vocab): initial loss")
        ax.set_xscale("log")
        finish_axes(ax, "peak learning rate", "final validation loss, 95% interval (x: diverged)" if dk == dks[0]
                    else "", f"d_k = {dk}", legend=dk == dks[-1])
    return save(fig, path)


def fig_sensitivity(nums: dict, path: Path) -> Path:
    order = sorted(nums, key=lambda a: (a[0], str(a[1])))
    v, err = errbars([nums[a].sensitivity for a in order])
    fig = Figure(figsize=(7.5, 0.35 * len(order) + 1.5))
    ax = fig.subplots()
    y = np.arange(len(order))
    ax.barh(y, v, xerr=err, color=[style(a[1])[0] for a in order], alpha=0.8)
    ax.set_yticks(y, [arm_name(a) for a in order], fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("LR sensitivity (nats; lower = more stable across learning rates; 95% interval)")
    ax.grid(alpha=0.3, axis="x")
    return save(fig, path)


def fig_stability(arms, dk: int, lrs: list[float], windows: int, path: Path) -> Path:
    """Max logit and mean attention entropy over steps at d_k = dk, one column per learning rate."""
    fig = Figure(figsize=(5.0 * len(lrs), 7))
    axes = fig.subplots(2, len(lrs), squeeze=False)
    for col, x in enumerate(lrs):
        for (d, v), by_lr in sorted(arms.items(), key=lambda kv: str(kv[0][1])):
            if d != dk or x not in by_lr:
                continue
            color, ls = style(v)
            for i, r in enumerate(by_lr[x]):
                for row, key in enumerate(("stab/max_logit", "stab/entropy")):
                    steps, vals = r.series(key)
                    if len(steps):
                        axes[row, col].plot(steps, np.abs(vals) if row == 0 else vals, ls, color=color, lw=1.3,
                                            alpha=0.85, label=variant_label(v) if i == 0 else None)
        axes[0, col].set_yscale("log")
        axes[0, col].set_title(f"d_k = {dk}, learning rate {x:g} (one line per seed)", fontsize=10)
        axes[0, col].set_ylabel(f"|max pre-softmax logit| ({windows} windows)")
        axes[1, col].set_ylabel("mean normalised attention entropy (1 = uniform)")
        axes[1, col].set_xlabel("step")
        for row in range(2):
            axes[row, col].grid(alpha=0.3, which="both")
    axes[0, 0].legend(fontsize=7)
    return save(fig, path)


def fig_gap(rows_by_init: dict[str, list[dict]], path: Path) -> Path:
    fig = Figure(figsize=(6.5, 4.3))
    ax = fig.subplots()
    lrs = sorted({r["lr"] for rows in rows_by_init.values() for r in rows})
    for init, rows in rows_by_init.items():
        for i, x in enumerate(lrs):
            sel = [r for r in rows if r["lr"] == x]
            if not sel:
                continue
            v, err = errbars([r["gap"] for r in sel])
            ax.errorbar([r["d_k"] for r in sel], v, yerr=err, fmt="-o" if init == "gpt2" else "--s", color=f"C{i}",
                        ms=4, capsize=3, label=f"lr {x:g}" + ("" if init == "gpt2" else ", unit init"))
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xscale("log", base=2)
    finish_axes(ax, "head dim d_k", "final loss, unscaled minus 1/sqrt(d_k) (nats)",
                "Cost of dropping 1/sqrt(d_k) (95% intervals over windows and seeds)")
    return save(fig, path)


def fig_init(rows: list[dict], width: int, path: Path) -> Path:
    fig = Figure(figsize=(10, 4))
    ax1, ax2 = fig.subplots(1, 2)
    colors = {"none": "tab:red", "sqrt_dk": "tab:blue", "inv_dk": "tab:green"}
    for init, ls in (("gpt2", "-"), ("unit", "--")):
        for scale, color in colors.items():
            sel = sorted((r["d_k"], r["logit_std"], r["entropy"]) for r in rows
                         if r["init"] == init and r["scale"] == scale)
            if not sel:
                continue
            dks, std, ent = zip(*sel, strict=True)
            ax1.plot(dks, std, ls, marker="o", ms=3, color=color, label=f"{scale}, {init} init")
            ax2.plot(dks, ent, ls, marker="o", ms=3, color=color, label=f"{scale}, {init} init")
    for ax in (ax1, ax2):
        ax.set_xscale("log", base=2)
        ax.set_xlabel(f"head dim d_k (width {width})")
        ax.grid(alpha=0.3, which="both")
    ax1.set_yscale("log")
    ax1.set_ylabel("std of pre-softmax logits at init")
    ax2.set_ylabel("normalised attention entropy at init")
    ax1.legend(fontsize=7)
    return save(fig, path)


# ----------------------------------------------------------------------------- sections


def init_section(rep: Report, cfg: dict, out: Path) -> None:
    """Logits at initialisation against d_k, measured on a fresh model of the sweep's width."""
    width = cfg["model"]["n_embd"]
    head_dims = tuple(d for d in (8, 16, 32, 64, 128, 256, 512) if d <= width and width % d == 0)
    init_rows = logits_at_init(n_embd=width, head_dims=head_dims, block_size=cfg["model"]["block_size"])
    lo_d, hi_d = head_dims[0], head_dims[-1]
    s = slopes(init_rows)
    fig_init(init_rows, width, out / "init_slopes.png")
    std = {(r["init"], r["scale"], r["d_k"]): r["logit_std"] for r in init_rows}
    ent = {(r["init"], r["scale"], r["d_k"]): r["entropy"] for r in init_rows}
    rep.sections += [
        "## At initialisation",
        "",
        "![init](init_slopes.png)",
        "",
        markdown_table(["init", "none", "sqrt_dk", "inv_dk"],
                       [[init] + [f"{s[(init, sc)]:+.3f}" for sc in ("none", "sqrt_dk", "inv_dk")]
                        for init in ("unit", "gpt2")]),
        "",
        "Log-log slope of the logit std against d_k (layer 0 of the real model at init, random tokens). Under the "
        "unit-variance init (Vaswani's premise) the unscaled logits grow like sqrt(d_k) (slope "
        f"{s[('unit', 'none')]:+.2f}), 1/sqrt(d_k) keeps them flat ({s[('unit', 'sqrt_dk')]:+.2f}; std "
        f"{std[('unit', 'sqrt_dk', hi_d)]:.2f} at d_k = {hi_d}) and 1/d_k shrinks them "
        f"({s[('unit', 'inv_dk')]:+.2f}); unscaled, the softmax saturates: normalised entropy "
        f"{ent[('unit', 'none', hi_d)]:.2f} at d_k = {hi_d} vs {ent[('unit', 'sqrt_dk', hi_d)]:.2f} scaled. Under "
        f"GPT-2's init the exponents are the same but the constant is small (q, k components have variance "
        f"0.02² x {width}): unscaled logits have std {std[('gpt2', 'none', lo_d)]:.2f} at d_k = {lo_d} and "
        f"{std[('gpt2', 'none', hi_d)]:.2f} at {hi_d}, normalised entropy {ent[('gpt2', 'none', lo_d)]:.2f} and "
        f"{ent[('gpt2', 'none', hi_d)]:.2f} (1 = uniform; scaled: {ent[('gpt2', 'sqrt_dk', hi_d)]:.2f}).",
        "",
    ]


# ----------------------------------------------------------------------------- text


def arm_table(nums: dict) -> str:
    lrs = sorted({x for a in nums.values() for x in a.lrs})
    header = ["arm", "LR sensitivity", "best loss on the grid (its rate)", "diverged", "failed to train"] + [
        f"lr {x:g}" for x in lrs]
    rows = []
    for arm in sorted(nums, key=lambda a: (a[0], str(a[1]))):
        a = nums[arm]
        n = sum(a.runs.values())
        cells = [a.loss[x].format() + (f" ({a.failed[x]} failed)" if a.failed.get(x) else "")
                 + (f" ({a.diverged[x]} diverged)" if a.diverged.get(x) else "") if x in a.loss else "" for x in lrs]
        rows.append([arm_name(arm), a.sensitivity.format(), f"{a.best.format()} ({a.best_lr:g}{edge_mark(a)})",
                     f"{sum(a.diverged.values())}/{n}", f"{sum(a.failed.values())}/{n}"] + cells)
    return markdown_table(header, rows)


def edge_mark(a: Arm) -> str:
    return ", the grid's end" if len(a.lrs) > 2 and a.best_lr in (a.lrs[0], a.lrs[-1]) else ""


def setup_text(runs: list[Run], arms) -> str:
    """The **Setup.** paragraph: the recipe from the first run's config, the grid, the sweep's wall time."""
    cfg = runs[0].config
    wall = sweep_wall_seconds(runs)
    lrs = sorted({x for by_lr in arms.values() for x in by_lr})
    dks = sorted({d for d, _ in arms})
    seeds = sorted({r.seed for r in runs})
    uni, bi = baselines(runs)
    return (
        f"**Setup.** {cfg['model']['n_layer']} layers, {cfg['model']['n_embd']} wide, context "
        f"{cfg['model']['block_size']}, batch {cfg['data']['batch_size']}, {cfg['trainer']['max_steps']} steps of "
        f"AdamW ({cfg['optim']['warmup_steps']} warmup steps, cosine to {cfg['optim']['min_lr']:g}), grad clip "
        f"{cfg['trainer']['gradient_clip_val']}, fp32, on the embedded Shakespeare corpus (characters). Head dims "
        f"{', '.join(map(str, dks))} at a fixed width; peak learning rates {', '.join(f'{x:g}' for x in lrs)}; "
        f"seeds {', '.join(map(str, seeds))}. The final loss is scored on {cfg['data']['val_windows']} validation "
        f"windows, the stability probes on {cfg['callbacks']['stability']['windows']} every "
        f"{cfg['callbacks']['stability']['every_n_steps']} steps, the end-of-run attention diagnostics on "
        f"{cfg['diagnostics']['windows']}. Count baselines on the same windows (fitted on the training split): "
        f"unigram {uni:.3f}, bigram {bi:.3f} nats. Sweep wall time: {wall / 60:.1f} min "
        f"({plural(runs[0].summary.get('threads') or 1, 'thread')} per job)."
    )


def best_lower_share(a: Arm, b: Arm) -> float:
    """The share of bootstrap replicates in which arm a's best learning rate is lower than arm b's."""
    la, lb = np.array(a.lrs)[a.best_lr_share], np.array(b.lrs)[b.best_lr_share]
    return float((la < lb).mean())


def pair(nums: dict, dk: int, init: str) -> tuple[Arm, Arm] | None:
    a, b = nums.get((dk, ("none", False, init))), nums.get((dk, ("sqrt_dk", False, init)))
    return (a, b) if a and b else None


def sensitivity_section(rep: Report, nums: dict, dks: list[int], pred: dict) -> dict[str, dict]:
    """Per init: the scaled and unscaled arms at each d_k, and the prediction that the benefit grows with d_k.
    Returns, per init, the gaps and verdicts for the summary."""
    result = {}
    for init in ("gpt2", "unit"):
        at = [d for d in dks if pair(nums, d, init)]
        if not at:
            continue
        rep.sections += [f"### {sentence(INITS[init])}", ""]
        sens_gaps, best_gaps = [], []
        for dk in at:
            a, b = pair(nums, dk, init)
            sg, bg = a.sensitivity - b.sensitivity, a.best - b.best
            sens_gaps.append(sg)
            best_gaps.append(bg)
            lrs = a.lrs
            rep.sections.append(
                f"- d_k = {dk}: LR sensitivity {b.sensitivity.format()} with 1/sqrt(d_k), {a.sensitivity.format()} "
                f"unscaled; unscaled minus scaled {sg.format(signed=True)}: "
                f"**{difference_words(sg, 'unscaled more sensitive', 'unscaled less sensitive')}**. Best loss on the "
                f"grid {b.best.format()} at lr {b.best_lr:g}{edge(b.best_lr, lrs)} scaled, {a.best.format()} at lr "
                f"{a.best_lr:g}{edge(a.best_lr, lrs)} unscaled; unscaled minus scaled {bg.format(signed=True)}: "
                f"**{difference_words(bg, 'unscaled worse', 'unscaled better')}**. The unscaled arm's best rate is "
                f"lower than the scaled arm's in {best_lower_share(a, b):.0%} of the bootstrap replicates.")
        rep.sections.append("")
        result[init] = {"dks": at, "sens": sens_gaps, "best": best_gaps}
        if len(at) < 2:
            continue
        t_sens, t_best = trend(at, sens_gaps), trend(at, best_gaps)
        v_sens = growth_verdict(sens_gaps, t_sens, pred["sensitivity_gap"])
        v_best = growth_verdict(best_gaps, t_best, pred["best_loss_gap"])
        rep.sections += [
            f"Does the benefit grow with d_k ({INITS[init]})? The unscaled arm's extra LR sensitivity "
            f"{t_sens.words('d_k')} with d_k; the prediction (above 0 at every d_k and {pred['sensitivity_gap']}) "
            f"**{v_sens}**{why_not(v_sens, at, sens_gaps, t_sens, pred['sensitivity_gap'])}. Its best-loss gap "
            f"{t_best.words('d_k')}; the prediction (above 0 and {pred['best_loss_gap']}) "
            f"**{v_best}**{why_not(v_best, at, best_gaps, t_best, pred['best_loss_gap'])}.",
            "",
        ]
        result[init].update(t_sens=t_sens, t_best=t_best, v_sens=v_sens, v_best=v_best)
    return result


def why_not(verdict: str, dks: list[int], gaps: list[Estimate], t, predicted: str) -> str:
    """Why a growth prediction did not hold: where the gap is not above 0, and whether the trend went the other
    way or stayed inside the noise."""
    if verdict == "holds":
        return ""
    parts = [f"{'below' if direction(g) < 0 else 'not above'} 0 at d_k = {d}" for d, g in zip(dks, gaps, strict=True)
             if direction(g) <= 0]
    if t.word != predicted:
        parts.append("the trend " + ("is flat within noise" if t.word == "flat within noise" else t.word))
    return f" ({'; '.join(parts)})" if parts else ""


def gap_rows(nums: dict, init: str) -> list[dict]:
    """Final loss gap (unscaled minus 1/sqrt(d_k)) per (d_k, lr), with its interval."""
    rows = []
    for dk in sorted({d for d, _ in nums}):
        p = pair(nums, dk, init)
        if not p:
            continue
        a, b = p
        for x in sorted(set(a.loss) & set(b.loss)):
            rows.append({"d_k": dk, "lr": x, "gap": a.loss[x] - b.loss[x]})
    return rows


def gap_section(rep: Report, nums: dict, out: Path) -> dict[str, list[dict]]:
    """Where dropping the factor costs: the (d_k, lr) cells whose final-loss gap excludes 0."""
    gaps = {init: gap_rows(nums, init) for init in ("gpt2", "unit")}
    gaps = {k: v for k, v in gaps.items() if v}
    if gaps:
        fig_gap(gaps, out / "gap_vs_dk.png")
        rep.sections += ["## Where dropping the factor costs", "", "![gap](gap_vs_dk.png)", ""]
        for init, rows in gaps.items():
            worse = [r for r in rows if direction(r["gap"]) > 0]
            better = [r for r in rows if direction(r["gap"]) < 0]
            rep.sections += [
                f"{sentence(INITS[init])}: of {len(rows)} (d_k, learning rate) cells, the unscaled arm is worse in "
                f"{len(worse)}" + (": " + "; ".join(f"d_k = {r['d_k']}, lr {r['lr']:g}: {r['gap'].format(signed=True)}"
                                                    for r in worse) if worse else "")
                + f"; better in {len(better)}" + (": " + "; ".join(
                    f"d_k = {r['d_k']}, lr {r['lr']:g}: {r['gap'].format(signed=True)}" for r in better)
                    if better else "")
                + f"; in the other {len(rows) - len(worse) - len(better)} the interval contains 0.",
                "",
            ]
    return gaps


def logit_at(arms, arm, x) -> tuple[float, float] | None:
    rs = arms.get(arm, {}).get(x)
    vals = [r.summary.get("attn_max_logit") for r in rs or []]
    vals = [v for v in vals if v is not None and math.isfinite(v)]
    return mean_spread(vals) if vals else None


def logit_words(arms, arm, x) -> str:
    m = logit_at(arms, arm, x)
    return "n/a" if m is None else f"{m[0]:.1f} ± {m[1]:.1f}"


def stability_section(rep: Report, arms, nums: dict, dks: list[int], lrs: list[float], gaps, cfg: dict,
                      out: Path) -> None:
    """Logit growth and entropy collapse at the largest d_k."""
    big = max(dks)
    at_big = {v: by_lr for (d, v), by_lr in arms.items() if d == big}
    gap_big = [r for r in gaps.get("gpt2", []) if r["d_k"] == big]
    stable = min((x for x in lrs if x >= 1e-3), default=lrs[0])
    unstable = max(gap_big, key=lambda r: r["gap"].value)["lr"] if gap_big else lrs[-1]
    shown = sorted({stable, unstable})
    n_stab, n_diag = cfg["callbacks"]["stability"]["windows"], cfg["diagnostics"]["windows"]
    fig_stability(arms, big, shown, n_stab, out / "stability.png")
    ends = []
    for v in sorted(at_big, key=str):
        vals = [e[-1] for e in (r.series("stab/entropy")[1] for r in at_big[v].get(stable, [])) if len(e)]
        if vals:
            ends.append(f"{variant_label(v)}: {fmt(*mean_spread(vals), 2)}")
    if ends:
        rep.findings.append(
            f"Saturation: at d_k = {big} and lr {stable:g}, the mean normalised attention entropy at the end of "
            f"training ({n_stab} probe windows, ± seed sd) is {'; '.join(ends)} (1 = uniform, 0 = one-hot).")
    rep.sections += [f"## Logit growth and entropy collapse at d_k = {big}", "", "![stability](stability.png)", ""]
    links = explorers({f"d_k = {big}, {variant_label(v)}, lr {x:g}": at_big[v][x][0]
                       for v in (("sqrt_dk", False, "gpt2"), ("none", False, "gpt2")) for x in shown
                       if x in at_big.get(v, {})}, out)
    if links:
        rep.sections += ["The final attention, interactive (every head, the weight under the pointer; open from a "
                         "clone, the pages work offline): " + ", ".join(links) + ".", ""]
    for x in shown:
        rep.sections.append(f"Max logit at the end ({n_diag} diagnostics windows, ± seed sd), lr {x:g}: " + ", ".join(
            f"{variant_label(v)} {logit_words(arms, (big, v), x)}" for v in sorted(at_big, key=str)) + ".")
    rep.sections.append("")
    qk, none = (big, ("none", True, "gpt2")), (big, ("none", False, "gpt2"))
    if qk in nums and none in nums:
        q, n = nums[qk], nums[none]
        d = difference_words(q.sensitivity - n.sensitivity, "qk-norm more sensitive", "qk-norm less sensitive")
        rep.findings.append(
            f"The positive control (d_k = {big}, unscaled + qk-layernorm): LR sensitivity {q.sensitivity.format()} "
            f"vs {n.sensitivity.format()} unscaled without it ({d}); max logit at lr {unstable:g}: "
            f"{logit_words(arms, qk, unstable)} vs "
            f"{logit_words(arms, none, unstable)}; but its best loss on the grid is {q.best.format()} (lr "
            f"{q.best_lr:g}) against {n.best.format()} without it. With qk-norm the q and k components have unit "
            "RMS (times the LayerNorm gains), so without the 1/sqrt(d_k) factor its logits start with std "
            f"~sqrt(d_k) = {math.sqrt(big):.0f} (the unit-init row of the table above): bounded and stable across "
            "learning rates, but saturated from the first step.")
        rep.comparison.append(
            "Wortsman et al.: attention-logit growth precedes instability and qk-layernorm removes it. Here, at "
            f"d_k = {big} and lr {unstable:g}, the unscaled arm ends with max logit "
            f"{logit_words(arms, none, unstable)}, "
            f"the qk-norm arm {logit_words(arms, qk, unstable)} (|q.k| is at most d_k = {big} times the product of "
            f"the two LayerNorms' gains, which training moves away from 1); diverged runs: unscaled "
            f"{sum(n.diverged.values())}/{sum(n.runs.values())}, qk-norm {sum(q.diverged.values())}/"
            f"{sum(q.runs.values())}; LR sensitivity unscaled {n.sensitivity.format()}, qk-norm "
            f"{q.sensitivity.format()}.")
    inv, sq = (big, ("inv_dk", False, "gpt2")), (big, ("sqrt_dk", False, "gpt2"))
    if inv in nums and sq in nums:
        i, s = nums[inv], nums[sq]
        rep.comparison.append(
            f"muP (Yang et al. 2022) argues for 1/d_k. At d_k = {big}: LR sensitivity 1/d_k {i.sensitivity.format()} "
            f"vs 1/sqrt(d_k) {s.sensitivity.format()} "
            f"({difference_words(i.sensitivity - s.sensitivity, '1/d_k more sensitive', '1/d_k less sensitive')}); "
            f"best final loss 1/d_k {i.best.format()} (lr {i.best_lr:g}) vs {s.best.format()} (lr {s.best_lr:g}) "
            f"({difference_words(i.best - s.best, '1/d_k worse', '1/d_k better')}).")


def huge_logits_comparison(rep: Report, runs: list[Run], unigram: float, bigram: float, fraction: float) -> None:
    """Runs whose max logit passed 1e4, against Wortsman et al.'s divergence threshold."""
    huge = [r for r in runs if (r.summary.get("attn_max_logit") or 0) > 1e4]
    if huge:
        ok = [v for r in huge if math.isfinite(v := final_loss(r))]
        failed = sum(failed_to_train(v, unigram, bigram, fraction) for v in ok)
        rep.comparison.append(
            f"Wortsman et al. saw runs diverge once the max logit passed ~1e4. Here {len(huge)} of {len(runs)} runs "
            f"ended with a max logit above 1e4 (largest {max(r.summary['attn_max_logit'] for r in huge):.3g}); "
            f"{len(huge) - len(ok)} of them diverged"
            + (f"; the others ended at a final loss of {min(ok):.2f} to {max(ok):.2f}, {failed} of them failed to "
               "train by this report's criterion (near-one-hot attention: a degraded model rather than NaNs, in fp32 "
               "with gradient clipping)." if ok else "."))


def summary_and_literature(rep: Report, runs: list[Run], nums: dict, growth: dict, fraction: float) -> None:
    """The finding at the top (in short; diverged and failed runs) and the comparison with the literature."""
    n_div = sum(sum(a.diverged.values()) for a in nums.values())
    n_failed = sum(sum(a.failed.values()) for a in nums.values())
    parts = []
    for init, g in growth.items():
        best = ", ".join(f"{e.format(signed=True)} at d_k = {d}" for d, e in zip(g["dks"], g["best"], strict=True))
        sens = ", ".join(f"{e.format(signed=True)} at d_k = {d}" for d, e in zip(g["dks"], g["sens"], strict=True))
        if "t_best" in g:
            best += f" ({g['t_best'].word} with d_k; the prediction that it is above 0 and rises: **{g['v_best']}**)"
            sens += f" ({g['t_sens'].word} with d_k; the same prediction: **{g['v_sens']}**)"
        parts.append(f"{INITS[init]}: the unscaled arm's best loss on the grid minus the scaled arm's is {best}; "
                     f"its extra LR sensitivity {sens}")
    rep.findings.insert(0, (
        f"**In short.** {n_div} of {len(runs)} runs diverged and {n_failed} failed to train (final loss not below "
        f"the unigram baseline by {fraction:g} of the unigram-bigram gap)."
        + "".join(f" {sentence(p)}." for p in parts)))
    rep.comparison += [
        "Vaswani et al.'s footnote assumes unit-variance q and k; the init table above shows that GPT-2's init "
        "does not meet it, which is why the scaled and unscaled arms start alike. The unit-init arms test the "
        "premise itself.",
        "References: Vaswani et al. 2017 (arXiv 1706.03762); Yang et al. 2022, muP (arXiv 2203.03466); Wortsman "
        "et al. 2023 (arXiv 2309.14322); Dehghani et al. 2023 (arXiv 2302.05442); Zhai et al. 2023 "
        "(arXiv 2303.06296); Henry et al. 2020 (arXiv 2010.04245). Small models train without the factor: GPT-Neo "
        "applies none (transformers issue 20828), and TinyStories-1M (d_k = 4) trains fine.",
    ]


def bracket_text(nums: dict) -> str:
    """Which arms' best rate sits at an end of the grid, and which needed the grid's lowest two rates."""
    at_end = [arm_name(k) for k, a in sorted(nums.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
              if edge_mark(a)]
    second = [arm_name(k) for k, a in sorted(nums.items(), key=lambda kv: (kv[0][0], str(kv[0][1])))
              if len(a.lrs) > 3 and a.best_lr == a.lrs[1]]
    return ("Every arm's best learning rate is inside the grid." if not at_end else
            "Arms whose best learning rate is at an end of the grid (their optimum may lie beyond): "
            + ", ".join(at_end) + ".") + (
        " Arms whose best rate is the grid's second-lowest (bracketed only by its lowest rate): "
        + ", ".join(second) + "." if second else "")


def limits(rep: Report, cfg: dict, runs: list[Run]) -> None:
    """What this sweep cannot tell."""
    rep.limits += [
        f"Short runs ({cfg['trainer']['max_steps']} steps) of a {cfg['model']['n_layer']}-layer character model on "
        "the CPU: instabilities that need long training or large models are out of reach; the learning-rate grid "
        "stands in for them, as in Wortsman et al. LR sensitivity depends on the grid it is averaged over.",
        "Adam normalises gradient scale, so a constant factor on the logits is partly absorbed by the learning rate "
        "and the init of W_Q, W_K: only a learning-rate sweep compares fairly, and the factor moves the stability "
        "boundary rather than removing logit growth.",
        f"fp32 with gradient clipping at {cfg['trainer']['gradient_clip_val']}: NaNs are rarer than in bf16 without "
        "clipping.",
        f"Seeds per cell: {len({r.seed for r in runs})}; with so few the seed level of the bootstrap is coarse.",
    ]


def write_report(runs: list[Run], out: Path, sweeps: list[Path]) -> Path:
    """The report (README.md and its PNGs in ``out``) from experiment 2's runs, each section drawn where the runs
    support it."""
    arms = arms_of(runs)
    cfg = runs[0].config
    pred = cfg.get("prediction") or DEFAULT_PREDICTION
    fraction = pred["failed_to_train"]
    nums = numbers(arms, fraction)
    unigram, bigram = baselines(runs)
    lrs = sorted({x for by_lr in arms.values() for x in by_lr})
    dks = sorted({d for d, _ in arms})
    head = [prose("sqrt_dk", "intro", n_runs=plural(len(runs), "run"), sweeps=", ".join(f"`{s}`" for s in sweeps)), "",
            setup_text(runs, arms), "",
            prose("sqrt_dk", "terms", level=f"{LEVEL:.0%}", n_boot=N_BOOT, fraction=fraction, method=METHOD,
                  n_seeds=seeds_words(rs for by_lr in arms.values() for rs in by_lr.values())), ""]
    rep = Report()
    init_section(rep, cfg, out)
    fig_loss_vs_lr(arms, nums, out / "loss_vs_lr.png")
    fig_sensitivity(nums, out / "lr_sensitivity.png")
    rep.sections += ["## Final loss against learning rate", "", "![loss vs lr](loss_vs_lr.png)", "",
                     "## LR sensitivity", "", "![sensitivity](lr_sensitivity.png)", "", arm_table(nums), "",
                     bracket_text(nums), "", "## Scaled against unscaled, per head dim", ""]
    growth = sensitivity_section(rep, nums, dks, pred)
    gaps = gap_section(rep, nums, out)
    stability_section(rep, arms, nums, dks, lrs, gaps, cfg, out)
    huge_logits_comparison(rep, runs, unigram, bigram, fraction)
    summary_and_literature(rep, runs, nums, growth, fraction)
    limits(rep, cfg, runs)
    sections = head + ["## Finding", ""] + [f"- {f}" for f in rep.findings] + [""]
    sections += [prose("sqrt_dk", "changes"), ""] + rep.sections
    sections += ["## How this compares with the literature", ""] + [f"- {c}" for c in rep.comparison] + [""]
    sections += [prose("sqrt_dk", "threats"), ""]
    sections += ["## Limits", ""] + [f"- {x}" for x in rep.limits] + [""]
    path = out / "README.md"
    path.write_text("\n".join(sections))
    return path

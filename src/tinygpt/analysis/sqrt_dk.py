"""Experiment 2's report: does 1/sqrt(d_k) keep training stable? (see configs/experiment/sqrt_dk.yaml)

Works on any set of runs that differ in learning rate and attention variant (scale, qk_norm, qk_init,
head dim), drawing what they support. An arm is (d_k, variant); a variant is (scale, qk-norm, init).
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from tinygpt.analysis.figures import finish_axes, fmt, markdown_table, save
from tinygpt.analysis.init_stats import logits_at_init, slopes
from tinygpt.analysis.stats import mean_spread
from tinygpt.analysis.sweep import Run, sweep_wall_seconds
from tinygpt.analysis.templates import Report, prose

VARIANT_STYLE = {  # variant -> (label, colour, line style)
    ("sqrt_dk", False, "gpt2"): ("1/sqrt(d_k)", "tab:blue", "-"),
    ("none", False, "gpt2"): ("unscaled", "tab:red", "-"),
    ("inv_dk", False, "gpt2"): ("1/d_k", "tab:green", "-"),
    ("none", True, "gpt2"): ("unscaled + qk-norm", "tab:purple", "-"),
    ("sqrt_dk", False, "unit"): ("1/sqrt(d_k), unit init", "tab:blue", "--"),
    ("none", False, "unit"): ("unscaled, unit init", "tab:red", "--"),
}


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
    """Final validation loss; a diverged or non-finite run counts as its initial loss (Wortsman et al.)."""
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


def sensitivity_per_seed(by_lr: dict[float, list[Run]]) -> list[float]:
    """Wortsman et al.'s LR sensitivity, per seed: mean over the grid of min(final, initial) minus the best
    final loss on the grid (diverged runs count as the initial loss)."""
    seeds = sorted({r.seed for rs in by_lr.values() for r in rs})
    out = []
    for s in seeds:
        vals = []
        for rs in by_lr.values():
            run = next((r for r in rs if r.seed == s), None)
            if run is None:
                continue
            f = final_loss(run)
            vals.append(init_loss(run) if not math.isfinite(f) else min(f, init_loss(run)))
        if vals:
            out.append(float(np.mean(vals) - np.min(vals)))
    return out


def losses(rs: list[Run]) -> list[float]:
    """Final losses with diverged runs at their initial loss."""
    return [f if math.isfinite(f := final_loss(r)) else init_loss(r) for r in rs]


def best(by_lr: dict[float, list[Run]]) -> tuple[float, float]:
    """The lowest seed-mean final loss on the grid, and its learning rate."""
    return min((float(np.mean(losses(rs))), x) for x, rs in by_lr.items())


def edge(x: float, lrs: list[float]) -> str:
    """A warning when a best learning rate sits at an end of the grid (the optimum may lie beyond it)."""
    if len(lrs) > 2 and x in (lrs[0], lrs[-1]):
        return " (the grid's " + ("lowest" if x == lrs[0] else "highest") + " rate: its optimum may lie beyond)"
    return ""


def diverged_fraction(by_lr) -> tuple[int, int]:
    rs = [r for v in by_lr.values() for r in v]
    return sum(1 for r in rs if not math.isfinite(final_loss(r))), len(rs)


# ----------------------------------------------------------------------------- figures


def fig_loss_vs_lr(arms, path: Path) -> Path:
    dks = sorted({dk for dk, _ in arms})
    fig = Figure(figsize=(4.2 * len(dks), 4.2))
    axes = fig.subplots(1, len(dks), squeeze=False)[0]
    for ax, dk in zip(axes, dks, strict=True):
        for (d, v), by_lr in sorted(arms.items(), key=lambda kv: str(kv[0][1])):
            if d != dk:
                continue
            lrs = sorted(by_lr)
            mean = [np.mean(losses(by_lr[x])) for x in lrs]
            lo = [np.min(losses(by_lr[x])) for x in lrs]
            hi = [np.max(losses(by_lr[x])) for x in lrs]
            color, ls = style(v)
            ax.plot(lrs, mean, ls, color=color, marker="o", ms=3, label=variant_label(v))
            ax.fill_between(lrs, lo, hi, color=color, alpha=0.12, lw=0)
            div = [(x, init_loss(r)) for x in lrs for r in by_lr[x] if not math.isfinite(final_loss(r))]
            if div:
                ax.plot(*zip(*div, strict=True), "x", color=color, ms=9, mew=2)
        any_run = next(r for (d, _), by_lr in arms.items() if d == dk for rs in by_lr.values() for r in rs)
        ax.axhline(init_loss(any_run), color="black", lw=0.8, ls=":", label="ln(vocab): initial loss")
        ax.set_xscale("log")
        finish_axes(ax, "peak learning rate", "final validation loss (x: diverged)" if dk == dks[0] else "",
                    f"d_k = {dk}", legend=dk == dks[-1])
    return save(fig, path)


def fig_sensitivity(arms, path: Path) -> Path:
    names, means, spreads, colors = [], [], [], []
    for arm, by_lr in sorted(arms.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        m, s = mean_spread(sensitivity_per_seed(by_lr))
        names.append(arm_name(arm))
        means.append(m)
        spreads.append(s)
        colors.append(style(arm[1])[0])
    fig = Figure(figsize=(7.5, 0.35 * len(names) + 1.5))
    ax = fig.subplots()
    y = np.arange(len(names))
    ax.barh(y, means, xerr=spreads, color=colors, alpha=0.8)
    ax.set_yticks(y, names, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel("LR sensitivity (nats; lower = more stable across learning rates)")
    ax.grid(alpha=0.3, axis="x")
    return save(fig, path)


def fig_stability(arms, dk: int, lrs: list[float], path: Path) -> Path:
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
        axes[0, col].set_title(f"d_k = {dk}, learning rate {x:g}", fontsize=10)
        axes[0, col].set_ylabel("max |pre-softmax logit| (probe)")
        axes[1, col].set_ylabel("mean normalised attention entropy (1 = uniform)")
        axes[1, col].set_xlabel("step")
        for row in range(2):
            axes[row, col].grid(alpha=0.3, which="both")
    axes[0, 0].legend(fontsize=7)
    return save(fig, path)


def gap_rows(arms, init: str) -> list[dict]:
    """Final loss gap (unscaled minus 1/sqrt(d_k)) per (d_k, lr), with the larger of the two seed spreads."""
    rows = []
    for dk in sorted({d for d, _ in arms}):
        a, b = arms.get((dk, ("none", False, init))), arms.get((dk, ("sqrt_dk", False, init)))
        if not a or not b:
            continue
        for x in sorted(set(a) & set(b)):
            (ma, sa), (mb, sb) = mean_spread(losses(a[x])), mean_spread(losses(b[x]))
            n = min(len(a[x]), len(b[x]))
            rows.append({"d_k": dk, "lr": x, "gap": ma - mb, "spread": max(sa, sb), "n": n,
                         "real": n >= 2 and abs(ma - mb) > 2 * max(sa, sb)})
    return rows


def fig_gap(rows_by_init: dict[str, list[dict]], path: Path) -> Path:
    fig = Figure(figsize=(6.5, 4.3))
    ax = fig.subplots()
    lrs = sorted({r["lr"] for rows in rows_by_init.values() for r in rows})
    cmap = [f"C{i}" for i in range(len(lrs))]
    for init, rows in rows_by_init.items():
        for color, x in zip(cmap, lrs, strict=True):
            sel = [r for r in rows if r["lr"] == x]
            if not sel:
                continue
            ax.errorbar([r["d_k"] for r in sel], [r["gap"] for r in sel], yerr=[2 * r["spread"] for r in sel],
                        fmt="-o" if init == "gpt2" else "--s", color=color, ms=4, capsize=3,
                        label=f"lr {x:g}" + ("" if init == "gpt2" else ", unit init"))
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xscale("log", base=2)
    finish_axes(ax, "head dim d_k", "final loss, unscaled minus 1/sqrt(d_k) (nats)",
                "Cost of dropping 1/sqrt(d_k) (error bars: 2 x seed spread)")
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


# ----------------------------------------------------------------------------- text


def arm_table(arms) -> str:
    lrs = sorted({x for by_lr in arms.values() for x in by_lr})
    header = ["arm", "seeds", "LR sensitivity", "diverged"] + [f"lr {x:g}" for x in lrs]
    rows = []
    for arm, by_lr in sorted(arms.items(), key=lambda kv: (kv[0][0], str(kv[0][1]))):
        d, n = diverged_fraction(by_lr)
        seeds = sorted({r.seed for rs in by_lr.values() for r in rs})
        cells = [fmt(*mean_spread(losses(by_lr[x])), 3) if x in by_lr else "" for x in lrs]
        rows.append([arm_name(arm), ",".join(map(str, seeds)), fmt(*mean_spread(sensitivity_per_seed(by_lr))),
                     f"{d}/{n}"] + cells)
    return markdown_table(header, rows)


def nan_if_none(v: float | None) -> float:
    return float("nan") if v is None else v


def logit_at(arms, arm, x) -> float | None:
    rs = arms.get(arm, {}).get(x)
    vals = [r.summary.get("attn_max_logit") for r in rs or []]
    vals = [v for v in vals if v is not None and math.isfinite(v)]
    return float(np.mean(vals)) if vals else None


def setup_text(runs: list[Run], arms) -> str:
    """The **Setup.** paragraph: the recipe from the first run's config, the grid, the sweep's wall time."""
    cfg = runs[0].config
    wall = sweep_wall_seconds(runs)
    lrs = sorted({x for by_lr in arms.values() for x in by_lr})
    dks = sorted({d for d, _ in arms})
    return (
        f"**Setup.** {cfg['model']['n_layer']} layers, {cfg['model']['n_embd']} wide, context "
        f"{cfg['model']['block_size']}, batch {cfg['data']['batch_size']}, {cfg['trainer']['max_steps']} steps of "
        f"AdamW ({cfg['optim']['warmup_steps']} warmup steps, cosine to {cfg['optim']['min_lr']:g}), grad clip "
        f"{cfg['trainer']['gradient_clip_val']}, fp32, on the embedded Shakespeare corpus (characters). Head dims "
        f"{', '.join(map(str, dks))} at a fixed width; peak learning rates {', '.join(f'{x:g}' for x in lrs)}. "
        f"Sweep wall time: {wall / 60:.1f} min."
    )


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


def lr_section(rep: Report, arms, out: Path) -> None:
    """Final loss against learning rate, LR sensitivity and the arm table."""
    fig_loss_vs_lr(arms, out / "loss_vs_lr.png")
    fig_sensitivity(arms, out / "lr_sensitivity.png")
    rep.sections += ["## Final loss against learning rate", "", "![loss vs lr](loss_vs_lr.png)", "",
             "## LR sensitivity", "", "![sensitivity](lr_sensitivity.png)", "", arm_table(arms), ""]


def sensitivity_section(rep: Report, arms, dks: list[int], lrs: list[float]) -> dict[str, list[tuple[int, float]]]:
    """Per init, the unscaled arm's extra LR sensitivity and best-loss gap against d_k; returns the gaps by init."""
    best_gap_by_init: dict[str, list[tuple[int, float]]] = {}
    for init in ("gpt2", "unit"):
        extra = []  # (d_k, extra sensitivity of the unscaled arm, real?)
        for dk in dks:
            a, b = arms.get((dk, ("none", False, init))), arms.get((dk, ("sqrt_dk", False, init)))
            if not a or not b:
                continue
            sa, sb = mean_spread(sensitivity_per_seed(a)), mean_spread(sensitivity_per_seed(b))
            seeds = min(len(sensitivity_per_seed(a)), len(sensitivity_per_seed(b)))
            real = seeds >= 2 and abs(sa[0] - sb[0]) > 2 * max(sa[1], sb[1])
            best_a, lr_a = best(a)
            best_b, lr_b = best(b)
            extra.append((dk, sa[0] - sb[0], real))
            rep.findings.append(
                f"d_k = {dk}{', unit-variance init' if init == 'unit' else ', GPT-2 init'}: LR sensitivity "
                f"{sb[0]:.3f} ± {sb[1]:.3f} with 1/sqrt(d_k) vs {sa[0]:.3f} ± {sa[1]:.3f} unscaled: "
                + ("**a real difference**" if real else "no difference beyond twice the seed spread" if seeds >= 2
                   else "one seed per arm: no spread to judge the difference by")
                + f" ({'unscaled more sensitive' if sa[0] > sb[0] else 'unscaled less sensitive'}); best final loss "
                f"on the grid {best_b:.3f} at lr {lr_b:g}{edge(lr_b, lrs)} scaled vs {best_a:.3f} at lr {lr_a:g}"
                f"{edge(lr_a, lrs)} unscaled.")
        if len(extra) >= 2:
            grows = all(x[1] < y[1] for x, y in zip(extra, extra[1:], strict=False))
            best_gaps = [(d, best(arms[(d, ("none", False, init))])[0] - best(arms[(d, ("sqrt_dk", False, init))])[0])
                         for d, _, _ in extra]
            best_grows = all(x[1] < y[1] for x, y in zip(best_gaps, best_gaps[1:], strict=False))
            rep.findings.append(
                f"Does the benefit grow with d_k ({'GPT-2' if init == 'gpt2' else 'unit-variance'} init)? The unscaled "
                "arm's extra LR sensitivity is " + ", ".join(f"{e:+.3f} at d_k = {d}" for d, e, _ in extra) + ": "
                + ("it rises monotonically with d_k" if grows else "not monotonic in d_k")
                + "; its best loss on the grid minus the scaled arm's is "
                + ", ".join(f"{g:+.3f} at d_k = {d}" for d, g in best_gaps) + ": "
                + ("it rises monotonically with d_k." if best_grows else "not monotonic in d_k."))
            best_gap_by_init[init] = best_gaps
    return best_gap_by_init


def gap_section(rep: Report, arms, out: Path) -> dict[str, list[dict]]:
    """Where dropping the factor costs: the (d_k, lr) cells whose final-loss gap is beyond the seed spread."""
    gaps = {init: gap_rows(arms, init) for init in ("gpt2", "unit")}
    gaps = {k: v for k, v in gaps.items() if v}
    if gaps:
        fig_gap(gaps, out / "gap_vs_dk.png")
        rep.sections += ["## Where dropping the factor costs", "", "![gap](gap_vs_dk.png)", ""]
        for init, rows in gaps.items():
            real = [r for r in rows if r["real"]]
            rep.sections += [
                f"{'GPT-2 init' if init == 'gpt2' else 'Unit-variance init'}: of {len(rows)} (d_k, learning rate) "
                f"cells, {len(real)} show a final-loss gap beyond twice the seed spread"
                + (": " + "; ".join(f"d_k = {r['d_k']}, lr {r['lr']:g}: {r['gap']:+.3f}" for r in real)
                   if real else "") + ". "
                + ("In the other cells the two arms are indistinguishable at this scale." if len(real) < len(rows)
                   else ""),
                "",
            ]
    return gaps


def stability_section(rep: Report, arms, dks: list[int], lrs: list[float], gaps, out: Path) -> None:
    """Logit growth and entropy collapse at the largest d_k."""
    big = max(dks)
    if big:
        at_big = {v: by_lr for (d, v), by_lr in arms.items() if d == big}
        gap_big = [r for r in gaps.get("gpt2", []) if r["d_k"] == big]
        stable = min((x for x in lrs if x >= 1e-3), default=lrs[0])
        unstable = max(gap_big, key=lambda r: r["gap"])["lr"] if gap_big else lrs[-1]
        shown = sorted({stable, unstable})
        fig_stability(arms, big, shown, out / "stability.png")
        ends = []
        for v in sorted(at_big, key=str):
            series = [r.series("stab/entropy")[1] for r in at_big[v].get(stable, [])]
            vals = [e[-1] for e in series if len(e)]
            if vals:
                ends.append(f"{variant_label(v)}: {np.mean(vals):.2f}")
        if ends:
            rep.findings.append(
                f"Saturation: at d_k = {big} and lr {stable:g} (a stable rate), the mean normalised attention "
                f"entropy at the end of training is {'; '.join(ends)} (1 = uniform, 0 = one-hot).")
        rep.sections += [f"## Logit growth and entropy collapse at d_k = {big}", "", "![stability](stability.png)", ""]
        for x in shown:
            parts = [f"{variant_label(v)} {logit_at(arms, (big, v), x):.1f}" for v in sorted(at_big, key=str)
                     if logit_at(arms, (big, v), x) is not None]
            rep.sections.append(f"Max logit at the end, lr {x:g}: " + ", ".join(parts) + ".")
        rep.sections.append("")
        qk, none = (big, ("none", True, "gpt2")), (big, ("none", False, "gpt2"))
        if qk in arms and none in arms:
            sq_, sn_ = mean_spread(sensitivity_per_seed(arms[qk])), mean_spread(sensitivity_per_seed(arms[none]))
            lq, ln_ = logit_at(arms, qk, unstable), logit_at(arms, none, unstable)
            rep.findings.append(
                f"The positive control (d_k = {big}, unscaled + qk-layernorm): LR sensitivity {sq_[0]:.3f} ± "
                f"{sq_[1]:.3f} vs {sn_[0]:.3f} ± {sn_[1]:.3f} unscaled without it; max logit at lr {unstable:g}: "
                f"{nan_if_none(lq):.1f} vs {nan_if_none(ln_):.1f}; but its best loss on the grid is "
                f"{best(arms[qk])[0]:.3f} (lr {best(arms[qk])[1]:g}) against {best(arms[none])[0]:.3f} without it. "
                "With qk-norm the q and k components have unit RMS by construction, so without the 1/sqrt(d_k) "
                f"factor its logits start with std ~sqrt(d_k) = {math.sqrt(big):.0f} (the unit-init row of the table "
                "below): bounded and stable across learning rates, but saturated from the first step.")
            dq, dn = diverged_fraction(arms[qk]), diverged_fraction(arms[none])
            rep.comparison.append(
                f"Wortsman et al.: attention-logit growth precedes instability and qk-layernorm removes it. Here, at "
                f"d_k = {big} and lr {unstable:g}, the unscaled arm ends with max logit "
                f"{nan_if_none(ln_):.1f}, the qk-norm arm {nan_if_none(lq):.1f} (|q.k| <= d_k = {big} while the "
                f"LayerNorm gains stay 1); diverged runs: unscaled {dn[0]}/{dn[1]}, "
                f"qk-norm {dq[0]}/{dq[1]}; LR sensitivity unscaled "
                f"{mean_spread(sensitivity_per_seed(arms[none]))[0]:.3f}, qk-norm "
                f"{mean_spread(sensitivity_per_seed(arms[qk]))[0]:.3f}.")
        inv = (big, ("inv_dk", False, "gpt2"))
        sq = (big, ("sqrt_dk", False, "gpt2"))
        if inv in arms and sq in arms:
            rep.comparison.append(
                f"muP (Yang et al. 2022) argues for 1/d_k. At d_k = {big}: LR sensitivity 1/d_k "
                f"{mean_spread(sensitivity_per_seed(arms[inv]))[0]:.3f} vs 1/sqrt(d_k) "
                f"{mean_spread(sensitivity_per_seed(arms[sq]))[0]:.3f}; best final loss 1/d_k "
                f"{best(arms[inv])[0]:.3f} (lr {best(arms[inv])[1]:g}) vs {best(arms[sq])[0]:.3f} "
                f"(lr {best(arms[sq])[1]:g}).")


def huge_logits_comparison(rep: Report, runs: list[Run]) -> None:
    """Runs whose max logit passed 1e4, against Wortsman et al.'s divergence threshold."""
    huge = [r for r in runs if (r.summary.get("attn_max_logit") or 0) > 1e4]
    if huge:
        ok = [v for r in huge if math.isfinite(v := final_loss(r))]
        rep.comparison.append(
            f"Wortsman et al. saw runs diverge once the max logit passed ~1e4. Here {len(huge)} of {len(runs)} runs "
            f"ended with a max logit above 1e4 (largest {max(r.summary['attn_max_logit'] for r in huge):.3g}); "
            f"{len(huge) - len(ok)} of them diverged"
            + (f", the others ended at a final loss of {min(ok):.2f} to {max(ok):.2f} (near-one-hot attention: a "
               "degraded model rather than NaNs, in fp32 with gradient clipping at 1.0)." if ok else "."))


def summary_and_literature(rep: Report, runs: list[Run], arms, dks: list[int], best_gap_by_init) -> None:
    """The finding at the top (in short; diverged runs) and the comparison with the literature."""
    n_div = sum(diverged_fraction(by_lr)[0] for by_lr in arms.values())
    if best_gap_by_init:
        shifted = [d for d in dks if (d, ("none", False, "gpt2")) in arms and (d, ("sqrt_dk", False, "gpt2")) in arms
                   and best(arms[(d, ("none", False, "gpt2"))])[1] < best(arms[(d, ("sqrt_dk", False, "gpt2"))])[1]]
        rep.findings.insert(0, (
            f"**In short.** {n_div} of {len(runs)} runs diverged. What dropping 1/sqrt(d_k) changes is the best "
            "reachable loss: the unscaled arm's best loss on the grid minus the scaled arm's is "
            + "; ".join(("GPT-2 init: " if init == "gpt2" else "unit-variance init: ")
                        + ", ".join(f"{g:+.3f} at d_k = {d}" for d, g in gaps_)
                        for init, gaps_ in best_gap_by_init.items())
            + " (nats)"
            + (f", and its best learning rate is lower at d_k = {', '.join(map(str, shifted))}" if shifted else "")
            + ". Details and where the difference is within seed noise below."))
    rep.findings.append(f"Diverged runs (non-finite or exploding loss, stopped cleanly): {n_div} of {len(runs)}"
                    + (", by arm in the table above." if n_div else "."))
    rep.comparison += [
        "Vaswani et al.'s footnote assumes unit-variance q and k; the init table above shows that GPT-2's init "
        "does not meet it, which is why the scaled and unscaled arms start alike. The unit-init arms test the "
        "premise itself.",
        "References: Vaswani et al. 2017 (arXiv 1706.03762); Yang et al. 2022, muP (arXiv 2203.03466); Wortsman "
        "et al. 2023 (arXiv 2309.14322); Dehghani et al. 2023 (arXiv 2302.05442); Zhai et al. 2023 "
        "(arXiv 2303.06296); Henry et al. 2020 (arXiv 2010.04245). Small models train without the factor: GPT-Neo "
        "applies none (transformers issue 20828), and TinyStories-1M (d_k = 4) trains fine.",
    ]


def limits(rep: Report, cfg: dict) -> None:
    """What this sweep cannot tell."""
    rep.limits += [
        f"Short runs ({cfg['trainer']['max_steps']} steps) of a {cfg['model']['n_layer']}-layer character model on "
        "2 CPU cores: instabilities that need long training or large models are out of reach; the learning-rate "
        "grid stands in for them, as in Wortsman et al.",
        "Adam normalises gradient scale, so a constant factor on the logits is partly absorbed by the learning rate "
        "and the init of W_Q, W_K: only a learning-rate sweep compares fairly, and the factor moves the stability "
        "boundary rather than removing logit growth.",
        "fp32 with gradient clipping at 1.0: NaNs are rarer than in bf16 without clipping.",
    ]


def write_report(runs: list[Run], out: Path, sweeps: list[Path]) -> Path:
    """The report (README.md and its PNGs in ``out``) from experiment 2's runs, each section drawn where the runs
    support it."""
    arms = arms_of(runs)
    cfg = runs[0].config
    lrs = sorted({x for by_lr in arms.values() for x in by_lr})
    dks = sorted({d for d, _ in arms})
    head = [prose("sqrt_dk", "intro", n_runs=len(runs), sweeps=", ".join(f"`{s}`" for s in sweeps)), "",
            setup_text(runs, arms), "", prose("sqrt_dk", "terms"), ""]
    rep = Report()
    init_section(rep, cfg, out)
    lr_section(rep, arms, out)
    best_gap_by_init = sensitivity_section(rep, arms, dks, lrs)
    gaps = gap_section(rep, arms, out)
    stability_section(rep, arms, dks, lrs, gaps, out)
    huge_logits_comparison(rep, runs)
    summary_and_literature(rep, runs, arms, dks, best_gap_by_init)
    limits(rep, cfg)
    sections = head + ["## Finding", ""] + [f"- {f}" for f in rep.findings] + [""] + rep.sections
    sections += ["## How this compares with the literature", ""] + [f"- {c}" for c in rep.comparison] + [""]
    sections += ["## Limits", ""] + [f"- {x}" for x in rep.limits] + [""]
    path = out / "README.md"
    path.write_text("\n".join(sections))
    return path

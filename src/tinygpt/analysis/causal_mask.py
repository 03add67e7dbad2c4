"""Experiment 1's report: what the causal mask prevents (see configs/experiment/causal_mask.yaml).

Works on any set of runs that differ in model.attn.causal, drawing what they support:
curves and loss by position need a corpus arm with both settings; the 1/T test needs leaky runs
of one corpus at two or more context lengths; the control needs random_tokens runs.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

import numpy as np
from matplotlib.colors import PowerNorm
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from tinygpt.analysis.figures import finish_axes, fmt, markdown_table, save
from tinygpt.analysis.stats import band, mean_spread, smooth
from tinygpt.analysis.sweep import Run, sweep_wall_seconds
from tinygpt.analysis.templates import Report, prose

COLORS = {True: "tab:blue", False: "tab:red"}
LABELS = {True: "causal (masked)", False: "leaky (no mask)"}


def dataset_label(run: Run) -> str:
    d = run.config["data"]
    if d["source"] == "text_file":
        paths = d["path"] if isinstance(d["path"], list) else [d["path"]]
        return "text_file:" + "+".join(Path(p).name for p in paths)
    if d["source"] == "hf_hub":
        return f"hf_hub:{d['name']}"
    if d["source"] == "random_tokens":
        return f"random_tokens (vocab {d['vocab_size']})"
    return d["source"]


def causal(run: Run) -> bool:
    return bool(run.config["model"]["attn"]["causal"])


def block(run: Run) -> int:
    return int(run.config["model"]["block_size"])


def group_runs(runs: list[Run]) -> dict[tuple[str, int], dict[bool, list[Run]]]:
    """(dataset, T) -> {causal: [runs sorted by seed]}."""
    arms: dict[tuple[str, int], dict[bool, list[Run]]] = defaultdict(lambda: defaultdict(list))
    for r in runs:
        arms[(dataset_label(r), block(r))][causal(r)].append(r)
    for by_causal in arms.values():
        for rs in by_causal.values():
            rs.sort(key=lambda r: r.seed)
    return arms


def is_random(label: str) -> bool:
    return label.startswith("random_tokens")


def main_arm(arms) -> tuple[str, int] | None:
    """The corpus arm with both settings, the most runs and the longest context."""
    both = [k for k, v in arms.items() if True in v and False in v]
    corpus = [k for k in both if not is_random(k[0])] or both
    if not corpus:
        return None
    return max(corpus, key=lambda k: (sum(len(v) for v in arms[k].values()), k[1]))


def diag(run: Run, key: str):
    """A summary value, top level first, then the full diagnostics block."""
    return run.summary[key] if key in run.summary else run.summary.get("diagnostics", {}).get(key)


def values(runs: list[Run], key: str) -> list[float]:
    return [r.summary.get(key) for r in runs]


def ms(runs: list[Run], key: str) -> tuple[float, float]:
    return mean_spread(values(runs, key))


# ----------------------------------------------------------------------------- figures


def log_y(ax) -> None:
    """Log y axis labelled with plain numbers at 1, 2, 5 x 10^k."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(LogLocator(subs=(1.0, 2.0, 5.0)))
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())


def plot_curves(ax, by_causal: dict[bool, list[Run]], title: str, chance: float | None = None) -> None:
    """Teacher-forced training loss (smoothed) and the honest autoregressive validation loss over steps,
    mean over seeds with the min-max band."""
    for c in (True, False):
        rs = by_causal.get(c)
        if not rs:
            continue
        for key, style, what in (("train/loss", "-", "train loss (teacher-forced)"),
                                 ("val/loss_autoregressive", "--", "val loss, autoregressive (honest)")):
            b = band(rs, key)
            if b is None:
                continue
            steps, mean, lo, hi = b
            if key == "train/loss":
                mean, lo, hi = smooth(mean), smooth(lo), smooth(hi)
            ax.plot(steps, mean, style, color=COLORS[c], label=f"{LABELS[c]}: {what}", lw=1.6)
            ax.fill_between(steps, lo, hi, color=COLORS[c], alpha=0.15, lw=0)
    if chance is not None:
        ax.axhline(chance, color="black", lw=1, ls=":", label=f"ln(vocab) = {chance:.3f}: chance")
    log_y(ax)
    finish_axes(ax, "step", "loss (nats, log scale)", title)


def fig_curves(by_causal, title: str, path: Path, chance: float | None = None) -> Path:
    fig = Figure(figsize=(7.5, 4.5))
    plot_curves(fig.subplots(), by_causal, title, chance)
    return save(fig, path)


def fig_loss_by_position(by_causal, title: str, path: Path) -> Path:
    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.subplots()
    for c in (True, False):
        rs = by_causal.get(c)
        if not rs:
            continue
        for key, style, what in (("loss_by_position", "-o", "teacher-forced"),
                                 ("loss_by_position_autoregressive", "--", "autoregressive")):
            rows = [diag(r, key) for r in rs]
            rows = np.array([row for row in rows if row])  # (seeds, T)
            if not len(rows):
                continue
            t = np.arange(rows.shape[1])
            ax.plot(t, rows.mean(0), style, color=COLORS[c], ms=2.5, lw=1.3, label=f"{LABELS[c]}: {what}")
            ax.fill_between(t, rows.min(0), rows.max(0), color=COLORS[c], alpha=0.15, lw=0)
    log_y(ax)
    finish_axes(ax, "position t in the window (target x[t+1])", "validation loss (nats, log scale)", title)
    return save(fig, path)


def last_position_loss(run: Run) -> float:
    return diag(run, "loss_by_position")[-1]


def copy_loss(run: Run) -> float:
    """Mean teacher-forced loss over the positions whose target is inside the window (t < T-1)."""
    return float(np.mean(diag(run, "loss_by_position")[:-1]))


def one_over_t_rows(leaky_by_t: dict[int, list[Run]]) -> list[dict]:
    rows = []
    for T in sorted(leaky_by_t):
        rs = leaky_by_t[T]
        measured = [r.summary["val_loss_probe"] for r in rs]
        predicted = [last_position_loss(r) / T for r in rs]
        rows.append({"T": T, "n": len(rs), "measured": mean_spread(measured), "predicted": mean_spread(predicted),
                     "l_last": mean_spread([last_position_loss(r) for r in rs]),
                     "copy": mean_spread([copy_loss(r) for r in rs]),
                     "train": mean_spread([r.summary["train_loss"] for r in rs]),
                     "ratio": mean_spread([m / p for m, p in zip(measured, predicted, strict=True)])})
    return rows


def fig_one_over_t(leaky_by_t: dict[int, list[Run]], rows: list[dict], path: Path) -> Path:
    fig = Figure(figsize=(6.5, 4.5))
    ax = fig.subplots()
    for T, rs in sorted(leaky_by_t.items()):
        x = [1 / T] * len(rs)
        ax.plot(x, [r.summary["val_loss_probe"] for r in rs], "o", color="tab:red", ms=6, alpha=0.7,
                label="measured: leaky val loss (teacher-forced)" if T == min(leaky_by_t) else None)
        ax.plot(x, [last_position_loss(r) / T for r in rs], "s", mfc="none", color="black", ms=8,
                label="predicted: L_last / T, each run's own L_last" if T == min(leaky_by_t) else None)
    slope = np.mean([r["l_last"][0] for r in rows])
    xs = np.linspace(0, 1.1 / min(leaky_by_t), 50)
    ax.plot(xs, slope * xs, ":", color="gray", label=f"L_last / T with L_last = {slope:.2f} (mean over T)")
    ax.set_xlim(0, None)
    ax.set_ylim(0, None)
    ax.set_xticks([1 / T for T in sorted(leaky_by_t)], [f"1/{T}" for T in sorted(leaky_by_t)])
    finish_axes(ax, "1 / context length T", "loss (nats)", "Leaky model: teacher-forced loss vs 1/T")
    return save(fig, path)


def fig_attention(by_causal, path: Path) -> Path | None:
    """Final attention of the first seed of each arm: one row per arm, one column per layer, heads averaged."""
    maps = {c: rs[0].attention() for c, rs in by_causal.items() if rs and rs[0].attention() is not None}
    if len(maps) < 2:
        return None
    n_layer = maps[True]["weights"].shape[0]
    fig = Figure(figsize=(2.6 * n_layer + 1, 5.6))
    axes = fig.subplots(2, n_layer, squeeze=False)
    for row, c in enumerate((True, False)):
        w = maps[c]["weights"]  # (n_layer, H, T, T)
        T = w.shape[-1]
        future = np.triu(np.ones((T, T), dtype=bool), 1)
        for layer in range(n_layer):
            ax = axes[row, layer]
            mean = w[layer].mean(0)  # (T, T): heads averaged
            im = ax.imshow(mean, cmap="viridis", norm=PowerNorm(0.5, vmin=0, vmax=1), interpolation="nearest")
            mass = (w[layer] * future).sum(-1).mean()  # future mass, heads and rows averaged
            nxt = np.mean([w[layer][:, i, i + 1].mean() for i in range(T - 1)])  # weight on key i+1
            ax.set_title(f"layer {layer}: future {mass:.2f}\nnext token {nxt:.2f}", fontsize=8)
            ax.set_xticks([])
            ax.set_yticks([])
            if layer == 0:
                ax.set_ylabel(f"{LABELS[c]}\nquery", fontsize=8)
            if row == 1:
                ax.set_xlabel("key", fontsize=8)
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.7)
    fig.suptitle(f"Attention on the probe text at step {maps[True]['step']} (heads averaged; colour: sqrt scale)",
                 fontsize=10)
    fig.savefig(path, dpi=110)
    return path


# ----------------------------------------------------------------------------- text


def onset_step(run: Run, threshold: float) -> int | None:
    """First logged step where the (smoothed) training loss falls below ``threshold``."""
    steps, vals = run.series("train/loss")
    if not len(steps):
        return None
    below = np.nonzero(smooth(vals) < threshold)[0]
    return int(steps[below[0]]) if len(below) else None


def onset_text(by_causal: dict[bool, list[Run]], causal_final: float) -> str:
    """When the leaky arm finds the leak, per seed, and how fast the drop is."""
    leaky = by_causal[False]
    half = [onset_step(r, causal_final / 2) for r in leaky]
    text = ("When does the leaky arm find the leak? Step at which its smoothed training loss first falls below "
            f"half the causal arm's final loss ({causal_final / 2:.2f}), per seed: "
            + ", ".join(f"seed {r.seed}: {s if s is not None else 'never'}" for r, s in zip(leaky, half, strict=True))
            + ".")
    if all(s is not None for s in half) and min(half) > 40:
        early = min(half) // 2
        widths = [(onset_step(r, 0.25 * causal_final) or 0) - (onset_step(r, 0.75 * causal_final) or 0) for r in leaky]
        text += (f" Before that it trains like the causal model (step {early}: leaky {at_step(leaky, early):.3f}, "
                 f"causal {at_step(by_causal[True], early):.3f}); the drop from 75% to 25% of the causal loss then "
                 f"takes {', '.join(str(w) for w in widths)} steps (the loss is logged every 10 steps).")
    return text


def at_step(runs: list[Run], step: int) -> float:
    """Mean over runs of the smoothed training loss at the logged step nearest ``step``."""
    vals = []
    for r in runs:
        steps, v = r.series("train/loss")
        vals.append(smooth(v)[int(np.abs(steps - step).argmin())])
    return float(np.mean(vals))


def arm_table(arms) -> str:
    header = ["data", "T", "attention", "seeds", "train loss", "val loss (teacher-forced)",
              "val loss (autoregressive)", "future leak", "future attention mass", "attention entropy"]
    rows = []
    for (label, T), by_causal in sorted(arms.items(), key=lambda kv: (is_random(kv[0][0]), -kv[0][1])):
        for c in (True, False):
            rs = by_causal.get(c)
            if not rs:
                continue
            rows.append([label, str(T), LABELS[c], ", ".join(str(r.seed) for r in rs),
                         fmt(*ms(rs, "train_loss")), fmt(*ms(rs, "val_loss")),
                         fmt(*ms(rs, "val_loss_autoregressive")), fmt(*ms(rs, "future_leak"), 2),
                         fmt(*ms(rs, "attn_future_mass")), fmt(*ms(rs, "attn_entropy"))])
    return markdown_table(header, rows)


def separation(a: list[Run], b: list[Run], key: str) -> str:
    """Words for whether mean(a) and mean(b) differ by more than twice the larger seed spread."""
    if min(len(a), len(b)) < 2:
        return "one seed per arm: no spread to judge the difference by"
    (ma, sa), (mb, sb) = ms(a, key), ms(b, key)
    if abs(ma - mb) > 2 * max(sa, sb):
        return f"a difference of {abs(ma - mb):.3f}, more than twice the larger seed spread ({max(sa, sb):.3f})"
    return f"NOT separated: the difference {abs(ma - mb):.3f} is within twice the seed spread ({max(sa, sb):.3f})"


def setup_text(runs: list[Run]) -> str:
    """The **Setup.** paragraph: the recipe from the first run's config, the sweep's wall time."""
    cfg = runs[0].config
    wall = sweep_wall_seconds(runs)
    ar_cfg = (cfg.get("callbacks") or {}).get("autoregressive_loss") or {}
    return (
        f"**Setup.** {cfg['model']['n_layer']} layers, {cfg['model']['n_head']} heads, {cfg['model']['n_embd']} "
        f"wide, {cfg['trainer']['max_steps']} steps of AdamW (lr {cfg['optim']['lr']:g}, "
        f"{cfg['optim']['warmup_steps']} warmup steps, cosine to {cfg['optim']['min_lr']:g}); validation every "
        f"{cfg['trainer']['val_check_interval']} steps on {cfg['data']['val_windows']} fixed windows, with the "
        f"honest (autoregressive) loss on {ar_cfg.get('windows', 16)} of them at {ar_cfg.get('positions', 'all')} "
        "positions each; end-of-run diagnostics (all positions) on "
        f"{cfg['diagnostics']['windows']} validation windows. Sweep wall time: {wall / 60:.1f} min "
        "(first job's config to last job's summary)."
    )


def main_arm_section(rep: Report, by_causal: dict[bool, list[Run]], label: str, T: int, cfg: dict, out: Path) -> None:
    """The main arm: training vs honest loss, loss by position, attention maps, samples."""
    fig_curves(by_causal, f"{label}, T = {T}: training loss vs honest loss", out / "curves.png")
    fig_loss_by_position(by_causal, f"{label}, T = {T}: loss by position at the end", out / "loss_by_position.png")
    rep.sections += ["## Training loss vs honest loss", "", "![curves](curves.png)", ""]
    c_tr, l_tr = ms(by_causal[True], "train_loss"), ms(by_causal[False], "train_loss")
    c_ar, l_ar = ms(by_causal[True], "val_loss_autoregressive"), ms(by_causal[False], "val_loss_autoregressive")
    c_tf = ms(by_causal[True], "val_loss_probe")
    rep.sections += [
        f"On {label} at T = {T}, the leaky arm's training loss ends at **{fmt(*l_tr)}** against "
        f"**{fmt(*c_tr)}** with the mask ({c_tr[0] / max(l_tr[0], 1e-9):.1f}x lower; "
        f"{separation(by_causal[False], by_causal[True], 'train_loss')}), while its honest "
        f"autoregressive loss is **{fmt(*l_ar)}** against **{fmt(*c_ar)}** "
        f"({separation(by_causal[False], by_causal[True], 'val_loss_autoregressive')}). "
        f"For the causal arm the autoregressive and teacher-forced losses on the same windows agree "
        f"({fmt(*c_ar)} vs {fmt(*c_tf)}), as they must.",
        "",
        onset_text(by_causal, c_tr[0]),
        "",
        "## Loss by position",
        "",
        "![loss by position](loss_by_position.png)",
        "",
    ]
    l_last = mean_spread([last_position_loss(r) for r in by_causal[False]])
    l_copy = mean_spread([copy_loss(r) for r in by_causal[False]])
    c_last = mean_spread([last_position_loss(r) for r in by_causal[True]])
    ar_leaky = np.mean([diag(r, "loss_by_position_autoregressive") for r in by_causal[False]], axis=0)
    ar_causal = np.mean([diag(r, "loss_by_position_autoregressive") for r in by_causal[True]], axis=0)
    rep.sections += [
        f"The leaky model's teacher-forced loss is {fmt(*l_copy)} on average over positions 0..{T - 2}, whose "
        f"target is in the window, and {fmt(*l_last)} at position {T - 1}, whose target is not (the causal "
        f"model: {fmt(*c_last)} there). Its honest, autoregressive loss is above the causal model's at "
        f"{int((ar_leaky > ar_causal).sum())} of {T} positions (seed means).",
        "",
    ]
    rep.findings.append(
        f"Without the mask the training loss falls to {l_tr[0]:.3f} (causal: {c_tr[0]:.3f}) while the honest "
        f"loss is {l_ar[0]:.3f} (causal: {c_ar[0]:.3f}).")
    rep.comparison.append(
        f"The published cases describe the training loss going \"to ~0\". We agree on the symptom and refine it: "
        f"the loss does not reach 0 but floors near L_last / T ({l_tr[0]:.3f} nats here at T = {T}), because the "
        "last position of every window has no future to copy; at the context lengths of real models "
        "(T = 1024 and more) that floor is small enough to read as 0. We also agree that generation is broken: "
        f"the honest loss is {l_ar[0]:.2f} against {c_ar[0]:.2f} with the mask.")
    attn = fig_attention(by_causal, out / "attention.png")
    if attn:
        rep.sections += [
            "## Attention maps",
            "",
            "![attention](attention.png)",
            "",
            "Masked: a lower triangle. Without the mask the weight moves onto keys after the query; where a "
            "layer has learned to copy, a band sits one step right of the diagonal (the key holding the "
            "target). The titles give the future mass and the mean weight on key i+1.",
            "",
        ]
    samples = [(c, by_causal[c][0].last_sample()) for c in (True, False)]
    if all(s for _, s in samples):
        rep.sections += ["## Text samples (first seed, end of training)", ""]
        for c, s in samples:
            rep.sections += [f"{LABELS[c]}:", "", "```", s.strip()[:400], "```", ""]
    if not is_random(label):
        rep.limits.append(
            f"The runs are short ({cfg['trainer']['max_steps']} steps): the causal model is not converged "
            "(the default 2000-step run reaches ~1.87 on this corpus), so compare arms, not absolute losses.")


def one_over_t_section(rep: Report, leaky_corpus: dict[int, list[Run]], out: Path) -> None:
    """The 1/T prediction on the leaky runs of one corpus at two or more context lengths."""
    rows = one_over_t_rows(leaky_corpus)
    fig_one_over_t(leaky_corpus, rows, out / "one_over_t.png")
    Ts = np.array([r["T"] for r in rows], dtype=float)
    measured = np.array([r["measured"][0] for r in rows])
    slope = np.polyfit(np.log(Ts), np.log(measured), 1)[0]
    l_lasts = [r["l_last"][0] for r in rows]
    ratios = [r["ratio"][0] for r in rows]
    level_holds = all(0.67 <= q <= 1.5 for q in ratios)
    scaling_holds = -1.3 <= slope <= -0.7
    rep.sections += [
        "## The 1/T prediction",
        "",
        "![1/T](one_over_t.png)",
        "",
        markdown_table(
            ["T", "seeds", "measured: val loss (teacher-forced)", "predicted: L_last / T", "measured / predicted",
             "L_last", "loss at positions < T-1"],
            [[str(r["T"]), str(r["n"]), fmt(*r["measured"]), fmt(*r["predicted"]), fmt(*r["ratio"], 2),
              fmt(*r["l_last"]), fmt(*r["copy"])] for r in rows]),
        "",
        "The prediction has two parts, each checked against a criterion fixed in advance (in the report script):",
        "",
        f"1. **Level: the leaky loss sits near L_last / T** (measured within a factor 1.5 of each run's own "
        f"L_last / T at every T): measured / predicted = {', '.join(f'{q:.2f}' for q in ratios)} at "
        f"T = {', '.join(str(r['T']) for r in rows)}. **{'Holds' if level_holds else 'Fails'}.** "
        "The remainder is the copy error: measured = L_last / T + (T - 1) / T x (loss at positions < T-1), "
        f"and that loss is {', '.join(format(r['copy'][0], '.4f') for r in rows)} nats.",
        f"2. **Scaling: the leaky loss falls as 1/T** (log-log slope of the measured loss against T in "
        f"[-1.3, -0.7]): slope **{slope:.2f}**. **{'Holds' if scaling_holds else 'Fails'}.** "
        + ("" if scaling_holds else
           f"L_last is not a constant: {', '.join(f'{v:.2f}' for v in l_lasts)} nats at T = "
           f"{', '.join(str(r['T']) for r in rows)}. A likely reason: the last position is the one place where the "
           "leaky model must predict honestly, it gets 1/T of the training signal, and how well that one "
           "prediction is learned changes with T. The 1/T law holds only with L_last measured at each T (part 1)."),
        "",
    ]
    rep.findings.append(
        "The leaky loss against context length: " + ", ".join(
            f"T = {r['T']}: {r['measured'][0]:.3f} measured vs {r['predicted'][0]:.3f} = L_last / T" for r in rows)
        + f". The level prediction {'holds' if level_holds else 'fails'}; a pure 1/T law "
        + f"{'holds' if scaling_holds else 'fails'} (slope {slope:.2f})"
        + ("." if scaling_holds else ", because L_last itself varies with T."))


def control_section(rep: Report, label: str, T: int, by_causal: dict[bool, list[Run]], cfg: dict, out: Path) -> None:
    """A random-token control arm: nothing to learn, so a loss below ln(vocab) can only be a leak."""
    vocab = by_causal[True][0].summary.get("vocab_size") or by_causal[True][0].config["data"]["vocab_size"]
    chance = math.log(vocab)
    name = f"control_T{T}.png"
    fig_curves(by_causal, f"{label}, T = {T}: nothing to learn", out / name, chance=chance)
    c_tr, l_tr = ms(by_causal[True], "train_loss"), ms(by_causal[False], "train_loss")
    c_ar, l_ar = ms(by_causal[True], "val_loss_autoregressive"), ms(by_causal[False], "val_loss_autoregressive")
    rep.sections += [
        f"## Control: {label}, T = {T}",
        "",
        f"![control]({name})",
        "",
        f"Uniform random tokens: no model can beat ln({vocab}) = {chance:.3f} honestly. The causal arm's "
        f"training loss ends at {fmt(*c_tr)} (honest: {fmt(*c_ar)}); the leaky arm's at **{fmt(*l_tr)}**, "
        f"{chance / max(l_tr[0], 1e-9):.0f}x below chance, while its honest loss is {fmt(*l_ar)}, "
        f"{'above' if l_ar[0] > chance else 'at or below'} chance. A loss below ln(vocab) on this data can only "
        "come from reading the answer.",
        "",
    ]
    rep.sections += [onset_text(by_causal, c_tr[0]), ""]
    rep.findings.append(
        f"On random tokens (ln {vocab} = {chance:.3f}) the leaky training loss is {l_tr[0]:.3f}; "
        f"its honest loss {l_ar[0]:.3f}.")
    rep.comparison.append(
        f"transformers issue 48745 saw a near-zero loss on random tokens within a few hundred steps; our control "
        f"agrees: {l_tr[0]:.3f} nats after {cfg['trainer']['max_steps']} steps, with the drop at step(s) "
        f"{', '.join(str(onset_step(r, c_tr[0] / 2)) for r in by_causal[False])}.")


def write_report(runs: list[Run], out: Path, sweeps: list[Path]) -> Path:
    """The report (README.md and its PNGs in ``out``) from experiment 1's runs, each section drawn where the runs
    support it."""
    arms = group_runs(runs)
    main = main_arm(arms)
    cfg = runs[0].config
    header = [prose("causal_mask", "intro", n_runs=len(runs), sweeps=", ".join(f"`{s}`" for s in sweeps)), "",
              setup_text(runs), "", prose("causal_mask", "terms"), ""]
    rep = Report(sections=["## Final numbers per arm", "", arm_table(arms), ""])
    if main is not None:
        main_arm_section(rep, arms[main], *main, cfg, out)
    leaky_corpus = {T: by_c[False] for (label, T), by_c in arms.items()
                    if main is not None and label == main[0] and False in by_c}
    if len(leaky_corpus) >= 2:
        one_over_t_section(rep, leaky_corpus, out)
    controls = {k: v for k, v in arms.items() if is_random(k[0]) and True in v and False in v}
    for (label, T), by_causal in sorted(controls.items()):
        control_section(rep, label, T, by_causal, cfg, out)
    findings, comparison, limits = rep.findings, rep.comparison, rep.limits
    sections = header + (["## Finding", ""] + [f"- {f}" for f in findings] + [""] if findings else []) + rep.sections
    sections += ["## How this compares with the published cases", "", prose("causal_mask", "literature") + "\n"]
    sections += [f"- {c}" for c in comparison] + [""]
    limits += [
        "One small character-level model on one corpus (plus the random control); 3 seeds per arm in the full "
        "sweep. The honest loss during training uses 16 windows at a few positions each, the end-of-run "
        "diagnostics 32 windows at every position: both are noisier than the teacher-forced validation loss.",
        "CPU, fp32. The mask is removed from every layer at once; a partial leak (one layer, an off-by-one mask) "
        "is not measured here.",
    ]
    sections += ["## Limits", ""] + [f"- {x}" for x in limits] + [""]
    path = out / "README.md"
    path.write_text("\n".join(sections))
    return path

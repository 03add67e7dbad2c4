"""Experiment 3's report: the leaks real code has, how each looks in the curves, and whether the leak alarm catches
it (see configs/experiment/partial_leaks.yaml).

Each run's arm is read from its config (the injected ``attention_bug``, ``model.attn.causal`` and the scale), so a
report works on any subset of the arms: the sections need an arm and its control (causal for the structural leaks,
fill_inf for fill_1e4).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from tinygpt.analysis.figures import explorers, finish_axes, fmt, markdown_table, save
from tinygpt.analysis.stats import (
    LEVEL,
    METHOD,
    N_BOOT,
    Estimate,
    Sample,
    all_hold,
    band,
    bootstrap,
    difference_words,
    direction,
    failed_to_train,
    first_below,
    first_below_band,
    in_range,
    mean_spread,
    resolution,
    smooth,
    verb,
)
from tinygpt.analysis.sweep import (
    ReportError,
    Run,
    alarm_of,
    honest_gap_step,
    seed_ids,
    seeds_words,
    sweep_wall_seconds,
)
from tinygpt.analysis.templates import Report, plural, prose

STRUCTURAL = ("no_mask", "off_by_one", "first_layer", "last_layer", "sliding_window")  # leaky in the mask itself
ARMS = ("causal", *STRUCTURAL, "fill_1e4", "fill_where_1e4", "fill_inf")
CONTROL = {**{a: "causal" for a in STRUCTURAL}, "fill_1e4": "fill_inf", "fill_where_1e4": "fill_inf"}
LEAKY = (*STRUCTURAL, "fill_1e4", "fill_where_1e4")
LABELS = {
    "causal": "causal (control)", "no_mask": "no mask", "off_by_one": "off by one", "first_layer": "first layer leaky",
    "last_layer": "last layer leaky", "sliding_window": "sliding window", "fill_1e4": "finite fill (added)",
    "fill_where_1e4": "finite fill (replacing: GPT-2's masked_bias)",
    "fill_inf": "-inf fill (its control)",
}
COLORS = {"causal": "tab:blue", "no_mask": "tab:red", "off_by_one": "tab:orange", "first_layer": "tab:purple",
          "last_layer": "tab:brown", "sliding_window": "tab:pink", "fill_1e4": "tab:olive",
          "fill_where_1e4": "tab:green", "fill_inf": "tab:cyan"}


def arm_of(run: Run) -> str:
    """The arm a run belongs to, from what its config builds."""
    cfg = run.config
    bug = cfg.get("attention_bug")
    if bug:
        kind, layers = bug.get("kind"), bug.get("layers")
        if kind == "no_mask":
            return {(0,): "first_layer", (-1,): "last_layer"}.get(tuple(layers or ()), "no_mask")
        return {"finite_fill": "fill_1e4", "replace_fill": "fill_where_1e4"}.get(kind, kind)
    if not cfg["model"]["attn"]["causal"]:
        return "no_mask"
    return "fill_inf" if cfg["model"]["attn"]["scale"] == "none" else "causal"


def group(runs: list[Run]) -> dict[str, list[Run]]:
    """arm -> its runs sorted by seed, in ARMS order."""
    out: dict[str, list[Run]] = {}
    for r in runs:
        out.setdefault(arm_of(r), []).append(r)
    return {a: sorted(out[a], key=lambda r: r.seed) for a in ARMS if a in out}


# ----------------------------------------------------------------------------- per-window samples


def per_window(runs: list[Run], what: str) -> np.ndarray:
    """(seeds, windows): ``tf`` the teacher-forced loss of each validation window (mean over positions), ``last``
    at its last position, ``rest`` over the others, ``tf_probe`` the teacher-forced loss of each probe window and
    ``honest`` its autoregressive loss (every position of a 64-token window is scored in this experiment)."""
    rows = []
    for r in runs:
        v = r.windows()  # (N, T)
        if v is None:
            raise ReportError(f"{r.dir} has no diagnostics.npz; rerun the sweep at this version.")
        if what == "honest":
            rows.append(r.windows("autoregressive_window_position").mean(1))
        elif what == "tf_probe":
            rows.append(v[r.windows("probe_index").astype(int)].mean(1))
        else:
            rows.append({"tf": v.mean(1), "last": v[:, -1], "rest": v[:, :-1].mean(1)}[what])
    return np.stack(rows)


def samples(arms: dict[str, list[Run]], onsets: dict[str, list[int | None]]) -> dict:
    """Every per-window quantity of every arm ({(arm, what): Sample}: seeds shared within an arm, windows shared by
    every run measured on them) and each arm's onsets ((arm, "onset"), one column; seeds paired across arms: seed s
    of every arm starts from the same weights and sees the same batches)."""
    out = {}
    for arm, rs in arms.items():
        for what in ("tf", "last", "rest", "tf_probe", "honest"):
            key = "probe" if what in ("tf_probe", "honest") else "val"
            out[(arm, what)] = Sample(per_window(rs, what), windows=key, seeds=arm, seed_ids=seed_ids(rs))
        steps = onsets.get(arm)
        if steps and all(s is not None for s in steps):
            out[(arm, "onset")] = Sample(np.array(steps, dtype=float)[:, None], windows="onset", seeds="paired",
                                        seed_ids=seed_ids(rs))
    return out


# ----------------------------------------------------------------------------- verdicts


def loss_visibility(ratio: Estimate, difference: Estimate, collapse_fraction: float) -> str:
    """How a leak looks in the teacher-forced loss next to its control: 'collapses' when the ratio's whole interval
    lies below ``collapse_fraction``, 'lower' when the difference's lies below 0, 'higher' when above, else
    'indistinguishable'."""
    if ratio.hi < collapse_fraction:
        return "collapses"
    return {-1: "lower", 1: "higher", 0: "indistinguishable"}[direction(difference)]


def opening(steps, signal, leaks, threshold: float, tolerance: float, above: bool = True) -> dict:
    """A finite fill's prediction on one run's probe series (same steps). ``predicted``: the first probe whose
    signal passes ``threshold`` (the mask margin above |fill| - slack for the added fill, the visible floor below
    fill + slack for the replacing one: ``above=False``); ``observed``: the first probe whose future leak exceeds
    ``tolerance`` (the leak is *open*); ``closed_before``: the leak at or below the tolerance at every probe before
    the predicted one. Verdict 'holds' when the leak opened at the predicted probe or the one after it and was
    closed before, or when neither happened; 'fails' otherwise."""
    steps, signal, leaks = (np.asarray(a, dtype=float) for a in (steps, signal, leaks))
    passed = signal if above else -signal
    predicted = first_above(steps, passed, threshold if above else -threshold)
    observed = first_above(steps, leaks, tolerance)
    end = predicted if predicted is not None else math.inf
    closed_before = bool(np.all(leaks[steps < end] <= tolerance))
    if predicted is None and observed is None:
        verdict = "holds"
    elif predicted is None or observed is None:
        verdict = "fails"
    else:
        i = int(np.nonzero(steps == predicted)[0][0])
        allowed = {predicted} | ({int(steps[i + 1])} if i + 1 < len(steps) else set())
        verdict = "holds" if observed in allowed and closed_before else "fails"
    at = np.nonzero(steps == observed)[0] if observed is not None else []
    return {"predicted": predicted, "observed": observed, "closed_before": closed_before, "verdict": verdict,
            "signal_at_open": float(signal[at[0]]) if len(at) else math.nan}


def closing(steps, signal, leaks, opened: int | None, threshold: float, tolerance: float,
            above: bool = True) -> tuple[int, int]:
    """After the mask opened (step ``opened``): how many probes had the signal back on the closed side of
    ``threshold``, and at how many of those the leak was closed again (at or below ``tolerance``); the others are
    counter-examples to the mechanism. (0, 0) if it never opened."""
    if opened is None:
        return 0, 0
    steps, signal, leaks = (np.asarray(a, dtype=float) for a in (steps, signal, leaks))
    back = (steps > opened) & ((signal <= threshold) if above else (signal >= threshold))
    return int(back.sum()), int((back & (leaks <= tolerance)).sum())


def honest_no_better(difference: Estimate) -> str:
    """Prediction 1's honest-loss rule, two-sided: leaky minus causal honest loss 'holds' when its interval lies
    above 0 (worse than causal), 'fails' when below (better: a leak cannot make generation better), 'undecided'
    when it contains 0."""
    return {1: "holds", -1: "fails", 0: "undecided"}[direction(difference)]


def first_above(steps, values, threshold: float) -> int | None:
    """The first step whose value exceeds ``threshold`` (NaN never does)."""
    hit = np.nonzero(np.nan_to_num(np.asarray(values, dtype=float), nan=-math.inf) > threshold)[0]
    return int(np.asarray(steps)[hit[0]]) if len(hit) else None


def alarm_verdict(detected: list[int | None], leaky: bool, first_validation: int | None = None) -> str:
    """The alarm against prediction 4 on one arm's runs: a leaky arm's every run detected (at ``first_validation``
    when given), a control's none. 'holds' or 'fails'."""
    if leaky:
        ok = all(d is not None and (first_validation is None or d == first_validation) for d in detected)
    else:
        ok = all(d is None for d in detected)
    return "holds" if ok and detected else "fails"


# ----------------------------------------------------------------------------- per-run readings


def taken(run: Run, key: str) -> tuple[np.ndarray, np.ndarray]:
    """A logged series with its steps as the number of training steps taken. The history files log the training
    loss, the validations and the stability probes at the 0-based index of the batch just taken (the validation
    after 50 steps at 49), the leak alarm's ``leak/*`` at the steps taken (50). Every step in this report is counted
    as steps taken, as the alarm counts them."""
    steps, values = run.series(key)
    return (steps if key.startswith("leak/") else steps + 1), values


def collapse_steps(runs: list[Run], threshold: float) -> list[int | None]:
    """Per run: the loss-collapse step, the first step whose raw training loss is below ``threshold``."""
    return [first_below(*taken(r, "train/loss"), threshold) for r in runs]


def onset_steps(runs: list[Run], controls: list[Run], run: int) -> list[int | None]:
    """Per run: the loss onset, the first step from which its raw training loss stays below the lowest of the
    control arm's seeds at the same step for ``run`` consecutive logged steps (prediction 2's definition)."""
    b = taken_band(controls, "train/loss")  # (steps, mean, min, max) over the control seeds
    if b is None:
        return [None] * len(runs)
    return [first_below_band(*taken(r, "train/loss"), b[0], b[2], run) for r in runs]


def taken_band(runs: list[Run], key: str):
    """stats.band with the steps as steps taken (``taken``): (steps, mean, min, max over the runs) or None."""
    b = band(runs, key)
    return None if b is None else (b[0] + (0 if key.startswith("leak/") else 1), *b[1:])


def steps_text(steps: list[int | None]) -> str:
    return ", ".join("never" if s is None else str(s) for s in steps)


def val_interval(run: Run) -> int | None:
    return resolution(taken(run, "val/loss")[0])


# ----------------------------------------------------------------------------- figures


def fig_curves(arms: dict[str, list[Run]], path: Path, alarms: dict[str, list[int | None]]) -> Path:
    """The training loss a user watches (mean over seeds of the raw loss, lightly smoothed for drawing), with each
    arm's alarm steps marked."""
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2)
    panels = ((axes[0], [a for a in ("causal", *STRUCTURAL) if a in arms]),
              (axes[1], [a for a in ("fill_inf", "fill_1e4", "fill_where_1e4") if a in arms]))
    for ax, names in panels:
        title = model_words(arms[names[0]][0]) if names else None
        for a in names:
            b = taken_band(arms[a], "train/loss")
            if b is None:
                continue
            steps, mean, lo, hi = b
            ax.plot(steps, smooth(mean, 5), color=COLORS[a], lw=1.2, label=LABELS[a])
            ax.fill_between(steps, smooth(lo, 5), smooth(hi, 5), color=COLORS[a], alpha=0.12, lw=0)
            if arms[a][0].config["model"]["attn"]["causal"]:  # no mask is causal=false: recorded, not an alarm
                for s in sorted({s for s in alarms.get(a, []) if s is not None}):
                    ax.axvline(s, color=COLORS[a], ls=":", lw=0.8)
        ax.set_yscale("log")
        finish_axes(ax, "step", "training loss (seed mean, min-max band)", title, legend=bool(names))
    fig.suptitle("Training loss, mean over seeds drawn smoothed (5-step trailing mean), band min-max over seeds; "
                 "dotted: the steps the leak alarm fired", fontsize=10)
    return save(fig, path)


def model_words(run: Run) -> str:
    """'4 layers x 4 heads of 32, T = 64, sqrt_dk scale, lr 0.001': a panel's model, from a run's config."""
    m = run.config["model"]
    lr = run.config.get("optim", {}).get("lr")
    return (f"{plural(m.get('n_layer'), 'layer')} x {plural(m.get('n_head'), 'head')} of "
            f"{m.get('n_embd', 0) // max(m.get('n_head', 1), 1)}"
            f", T = {m['block_size']}, {m['attn'].get('scale')} scale" + (f", lr {lr:g}" if lr else ""))


def fig_honest(arms: dict[str, list[Run]], path: Path) -> Path:
    """At every validation: teacher-forced and honest loss on the same probe windows, one panel per arm, with what
    the probe averages in the title (fewer windows and positions than the end-of-run table, the last included)."""
    names = list(arms)
    cols = 4
    fig = Figure(figsize=(12, 2.8 * math.ceil(len(names) / cols) + 0.4))
    axes = np.atleast_1d(fig.subplots(math.ceil(len(names) / cols), cols, sharey=True)).ravel()
    for ax, a in zip(axes, names, strict=False):
        for key, ls, what in (("val/loss_probe", "-", "teacher-forced"), ("val/loss_autoregressive", "--", "honest")):
            b = taken_band(arms[a], key)
            if b is not None:
                ax.plot(b[0], b[1], ls=ls, color=COLORS[a], label=what)
        ax.set_yscale("log")
        finish_axes(ax, "step", "loss (probe windows)", LABELS[a].split(": ")[0].replace("(replacing", "(replacing)"))
    for ax in axes[len(names):]:
        ax.set_visible(False)
    ar = (next(iter(arms.values()))[0].config.get("callbacks") or {}).get("autoregressive_loss") or {}
    positions = ar.get("positions")
    fig.suptitle(f"At each validation, mean over seeds: the honest-loss probe, {ar.get('windows', 16)} windows x "
                 + (f"{positions} positions, the last (target outside the window) included,\nso a leaky model's "
                    f"teacher-forced probe ends near its last-position loss / {positions}" if positions
                    else "every position")
                 + "; the table's losses are the end-of-run ones, on more windows at every position", fontsize=9)
    return save(fig, path)


def fig_positions(arms: dict[str, list[Run]], path: Path) -> Path:
    """Teacher-forced (solid) and honest (dashed) loss at each position at the end, mean over seeds."""
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2)
    for ax, names in ((axes[0], [a for a in ("causal", *STRUCTURAL) if a in arms]),
                      (axes[1], [a for a in ("fill_inf", "fill_1e4", "fill_where_1e4") if a in arms])):
        for a in names:
            tf = np.mean([r.windows().mean(0) for r in arms[a]], axis=0)  # (T,)
            ar = np.mean([r.windows("autoregressive_window_position").mean(0) for r in arms[a]], axis=0)
            ax.plot(np.arange(len(tf)), tf, color=COLORS[a], label=LABELS[a])
            ax.plot(np.arange(len(ar)), ar, color=COLORS[a], ls="--", lw=0.8)
        if ax is axes[0]:
            ax.set_yscale("log")
        finish_axes(ax, "position t", "loss at t (solid: teacher-forced, dashed: honest)",
                    "Loss by position at the end (mean over seeds and windows)", legend=bool(names))
    return save(fig, path)


def fig_fill(runs: list[Run], key: str, what: str, threshold: float, tol: float, path: Path) -> Path:
    """Each seed of a fill arm: its opening signal against the predicted threshold (left) and the future leak
    against the open threshold (right), at every probe, one line per seed."""
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2, sharex=True)
    for r in runs:
        steps, signal = taken(r, key)
        ls, leak = taken(r, "stab/future_leak")
        axes[0].plot(steps, signal, marker=".", ms=3, lw=1, label=f"seed {r.seed}")
        axes[1].plot(ls, leak, marker=".", ms=3, lw=1, label=f"seed {r.seed}")
    axes[0].axhline(threshold, color="k", ls=":", lw=0.8, label=f"predicted threshold {threshold:g}")
    axes[1].axhline(tol, color="k", ls=":", lw=0.8, label=f"open above {tol:g}")
    axes[1].set_yscale("symlog", linthresh=tol)
    axes[1].set_ylim(bottom=0)  # a leak is a size: nothing below 0
    finish_axes(axes[0], "step (steps taken)", what, f"the {what} at each stability probe")
    finish_axes(axes[1], "step (steps taken)", "future leak (max change of earlier logits)",
                "the future leak at each stability probe")
    return save(fig, path)


def fig_future_mass(arms: dict[str, list[Run]], path: Path) -> Path:
    """The future attention mass at every stability probe and the future leak at every validation (seed means)."""
    fig = Figure(figsize=(11, 4))
    axes = fig.subplots(1, 2)
    for a, rs in arms.items():
        for ax, key in ((axes[0], "stab/future_mass"), (axes[1], "leak/future_leak")):
            b = taken_band(rs, key)
            if b is not None:
                ax.plot(b[0], b[1], color=COLORS[a], label=LABELS[a], marker="." if ax is axes[1] else None)
    finish_axes(axes[0], "step", "attention weight on later keys (seed mean)",
                "Future attention mass (stability probes)",
                legend=bool(axes[0].lines))
    finish_axes(axes[1], "step", "max change of earlier logits (seed mean)",
                "Future leak (the leak alarm's probe, each validation)", legend=bool(axes[1].lines))
    return save(fig, path)


# ----------------------------------------------------------------------------- sections


def arm_table(arms: dict[str, list[Run]], est: dict, pred: dict) -> tuple[str, dict[str, str]]:
    """The headline table, and each arm's loss-visibility word."""
    n_val = len(next(iter(arms.values()))[0].windows())
    n_probe = len(next(iter(arms.values()))[0].windows("autoregressive_window_position"))
    rows, seen = [], {}
    for a, rs in arms.items():
        ctrl = CONTROL.get(a)
        gap = est[(a, "honest")] - est[(a, "tf_probe")]
        ratio = diff = None
        if ctrl in arms:
            ratio = est[(a, "tf")] / est[(ctrl, "tf")]
            diff = est[(a, "tf")] - est[(ctrl, "tf")]
            seen[a] = loss_visibility(ratio, diff, pred["collapse_fraction"])
        rows.append([LABELS[a], str(len(rs)), fmt(*mean_spread([r.summary["train_loss"] for r in rs])),
                     est[(a, "tf")].format(), est[(a, "honest")].format(), gap.format(signed=True),
                     ratio.format() if ratio else "—", seen.get(a, "—"),
                     fmt(*mean_spread([r.summary.get("future_leak") for r in rs]), 2),
                     fmt(*mean_spread([r.summary.get("attn_future_mass") for r in rs]), 3)])
    header = ["arm", "seeds", "training loss, last 10% (± seed sd)", f"val loss, teacher-forced ({n_val} windows)",
              f"honest loss, autoregressive ({n_probe} windows)",
              f"honest - teacher-forced (same {n_probe} windows)", "teacher-forced / its control's",
              "in the loss, next to its control", "future leak (± sd)", "future attention mass (± sd)"]
    return markdown_table(header, rows), seen


def fill_trains(arms: dict[str, list[Run]], a: str, fraction: float = 0.5) -> str:
    """Whether a fill arm and its control trained, by Experiment 2's rule: a run failed to train when its final loss
    is not below the unigram baseline by ``fraction`` of the unigram - bigram gap."""
    diag = next((r.summary.get("diagnostics") or {} for r in arms[a]), {})
    uni, bi = diag.get("unigram_loss"), diag.get("bigram_loss")
    if not uni or not bi:
        return ""
    groups = [(LABELS[a], arms[a])] + ([("its control", arms["fill_inf"])] if "fill_inf" in arms else [])
    failed = {name: sum(failed_to_train(r.summary["val_loss"], uni, bi, fraction) for r in rs)
              for name, rs in groups}
    finals = ", ".join(f"{name} {np.mean([r.summary['val_loss'] for r in rs]):.3f}" for name, rs in groups)
    n = sum(len(rs) for _, rs in groups)
    return (f"At this learning rate {sum(failed.values())} of {n} runs of the arm and its control fail to train "
            f"by Experiment 2's rule (final loss not below the unigram baseline {uni:.3f} by {fraction:g} of its gap "
            f"to the bigram baseline {bi:.3f}; final val loss {finals}).")


def seen_section(rep: Report, arms, est, pred, seen: dict[str, str], out: Path) -> None:
    verdicts = []
    lines = []
    for a in STRUCTURAL:
        if a not in arms or "causal" not in arms:
            continue
        ratio = est[(a, "tf")] / est[("causal", "tf")]
        collapse = in_range(ratio, 0.0, pred["collapse_fraction"])
        honest = est[(a, "honest")] - est[("causal", "honest")]
        honest_verdict = honest_no_better(honest)
        v = all_hold([collapse, honest_verdict])
        verdicts.append(v)
        lines.append(f"- {LABELS[a]}: teacher-forced / causal {ratio.format()} (collapse below "
                     f"{pred['collapse_fraction']:g}: **{collapse}**); honest loss minus the causal arm's "
                     f"{honest.format(signed=True)}: "
                     f"{difference_words(honest, 'worse than causal', '**better than causal**')}. Prediction "
                     f"**{v}**.")
    fill_words = []
    for a in ("fill_1e4", "fill_where_1e4"):
        if a not in seen:
            continue
        d = est[(a, "tf")] - est[("fill_inf", "tf")]
        gap = est[(a, "honest")] - est[(a, "tf_probe")]
        use = difference_words(gap, "the model uses the open mask", "the honest loss is the lower")
        fill_words += [prose("partial_leaks", "fill_seen", arm=LABELS[a], word=seen[a], diff=d.format(signed=True),
                             words=difference_words(d, "above", "below"), gap=gap.format(signed=True), use=use,
                             trains=fill_trains(arms, a)), ""]
    healthy = [LABELS[a] for a, w in seen.items() if w == "indistinguishable"]
    collapsed = [LABELS[a] for a, w in seen.items() if w == "collapses"]
    rep.findings.append(f"Seen in the loss: collapsed far below the control: {', '.join(collapsed) or 'none'}; "
                        f"indistinguishable from the control run: {', '.join(healthy) or 'none'}. Prediction 1 "
                        f"(every structural leak collapses, none has a better honest loss): **{all_hold(verdicts)}**.")
    rep.sections += ["## Which leaks show in the loss", "", prose("partial_leaks", "seen"), "", *lines, "",
                     *fill_words, "![training loss](curves.png)", "",
                     "![honest and teacher-forced loss at each validation](honest.png)", "",
                     "![loss by position](positions.png)", "",
                     "![future attention mass and future leak](future_mass.png)", ""]


def onset_section(rep: Report, arms, est, pred, onsets, collapses) -> None:
    lo, hi = pred["onset_ratio"]
    rows, verdicts = [], []
    ref = ("no_mask", "onset") in est
    for a in STRUCTURAL:
        if a not in arms:
            continue
        o = est.get((a, "onset"))
        ratio = o / est[("no_mask", "onset")] if o is not None and ref and a != "no_mask" else None
        verdict = in_range(ratio, lo, hi) if ratio is not None else ("—" if a == "no_mask" else "fails")
        if a != "no_mask":
            verdicts.append(verdict)
        rows.append([LABELS[a], steps_text(onsets[a]), o.format(0) if o is not None else "not every seed",
                     ratio.format(2) if ratio is not None else "—",
                     difference_words(ratio - 1, "later", "earlier") if ratio is not None else "—", verdict,
                     steps_text(collapses[a])])
    runs0 = next(iter(arms.values()))
    interval = resolution(taken(runs0[0], "train/loss")[0])
    header = ["arm", "loss onset per seed (step)", "mean onset", "/ no mask's (paired by seed)", "than no mask",
              f"prediction 2 ({lo:g} to {hi:g})", "loss-collapse step per seed"]
    rep.findings.append(f"Onset: prediction 2 (each structural leak leaves the causal band when the full one does, "
                        f"within {lo:g} to {hi:g} of its step): **{all_hold(verdicts)}**. Exploratory: these seeds "
                        "repeat the first sweep's runs, whose curves were seen before the onset was redefined; the "
                        "verdicts of the one-layer leaks depend on the onset's definition (the table of other "
                        "definitions), off by one's and the sliding window's do not.")
    rep.sections += ["## When each leak shows in the training loss", "",
                     prose("partial_leaks", "onset", run=pred["onset_run"], fraction=pred["onset_fraction"], lo=lo,
                           hi=hi, interval="at every step" if interval == 1 else f"every {interval} steps",
                           n_causal=len(arms.get("causal", []))), "",
                     markdown_table(header, rows), ""]
    rep.sections += onset_sensitivity(arms, pred, collapses)
    if ("off_by_one", "onset") in est and ref:
        ratio = est[("off_by_one", "onset")] / est[("no_mask", "onset")]
        word = {-1: "earlier", 0: "same", 1: "later"}[direction(ratio - 1)]
        rep.sections += [prose("partial_leaks", f"onset_why_{word}"), ""]
    words = {}
    for a in ("first_layer", "last_layer", "sliding_window"):
        if (a, "onset") in est and ref:
            r = est[(a, "onset")] / est[("no_mask", "onset")]
            words[a] = {1: "later", -1: "earlier", 0: "neither earlier nor later (within noise)"}[direction(r - 1)]
    if len(words) == 3:
        shape = ("onset_shapes_seen" if (words["last_layer"], words["sliding_window"]) == ("later", "earlier")
                 else "onset_shapes_other")
        rep.sections += [prose("partial_leaks", shape, first=words["first_layer"], last=words["last_layer"],
                               window=words["sliding_window"]), ""]


def onset_sensitivity(arms: dict[str, list[Run]], pred: dict, collapses: dict) -> list[str]:
    """Prediction 2 under other onset definitions (read after the sweep: how much the verdicts owe to the
    pre-registered run length), and how often the rule fires on a control seed against the other control seeds
    (its false-onset rate, where the config's comment guessed it from independent steps)."""
    lo, hi = pred["onset_ratio"]
    n = pred["onset_run"]
    variants = [(f"run of {k} steps" + (" (pre-registered)" if k == n else ""),
                 {a: onset_steps(arms[a], arms["causal"], k) for a in STRUCTURAL if a in arms})
                for k in (n, 2 * n, 3 * n)]
    variants.append(("loss-collapse step", {a: collapses[a] for a in STRUCTURAL if a in arms}))
    others = [a for a in STRUCTURAL[1:] if a in arms]
    rows = []
    for name, steps in variants:
        ok = {a: v for a, v in steps.items() if all(x is not None for x in v)}
        if "no_mask" not in ok:
            continue
        est = bootstrap({a: Sample(np.array(v, dtype=float)[:, None], windows="onset", seeds="paired",
                                   seed_ids=seed_ids(arms[a])) for a, v in ok.items()})
        cells = []
        for a in others:
            if a not in ok:
                cells.append("not every seed")
                continue
            ratio = est[a] / est["no_mask"]
            cells.append(f"{ratio.format(2)} {in_range(ratio, lo, hi)}")
        rows.append([name, *cells])
    false = []
    for ctrl in ("causal", "fill_inf"):
        rs = arms.get(ctrl, [])
        for k in (n // 2, n):
            if len(rs) > 2:
                trips = sum(onset_steps([r], [o for o in rs if o is not r], k)[0] is not None for r in rs)
                false.append(f"{trips} of {len(rs)} {LABELS[ctrl]} seeds with a run of {k}")
    return ["Prediction 2's ratios under other onset definitions (read after the sweep, not pre-registered):", "",
            markdown_table(["onset", *(LABELS[a] for a in others)], rows), "",
            "The rule against a band of seeds is not as safe as the config's comment guessed from independent "
            "steps: applied to each control seed against its arm's other seeds, it fires on "
            + ", ".join(false) + ": per-seed offsets make consecutive steps move together, and the leaky runs are "
            "protected mainly because their own seed-matched causal run sits in the band.", ""]


def false_alarm_bound(n: int, level: float = LEVEL) -> float:
    """The exact one-sided upper confidence bound on a per-run rate after 0 events in n runs: 1 - (1 - level)^(1/n)
    (about 3 / n, the rule of three)."""
    return 1 - (1 - level) ** (1 / n) if n else math.nan


def alarm_section(rep: Report, arms, pred, onsets, collapses) -> None:
    rows, verdicts, literal, leads, opened_verdicts, collapse_leads = [], [], [], [], [], []
    first_val = None
    for a, rs in arms.items():
        alarm = alarm_of(rs[0])
        detected = [r.summary.get("leak_detected_step") for r in rs]
        signals = sorted({r.summary.get("leak_signal") for r in rs if r.summary.get("leak_signal")})
        first_val = val_interval(rs[0])
        leaky = a in LEAKY
        stab = [first_above(*taken(r, "stab/future_leak"), alarm.tolerance) for r in rs]
        v = alarm_verdict(detected, leaky, first_val if pred.get("alarm_first_validation") and a in STRUCTURAL
                          else None)
        if leaky and all(s is None for s in stab):  # a bug whose mask never opened: nothing leaked to be found
            literal.append(f"{LABELS[a]} ({len(rs)} runs, alarm fired on "
                           f"{sum(d is not None for d in detected)})")
            opened_verdicts.append("holds" if all(d is None for d in detected) else "fails")
            v = f"{v} as written; never leaked"
        else:
            opened_verdicts.append(v)
        verdicts.append(v.split()[0])
        mass = [first_above(*taken(r, "stab/future_mass"), 0.0) for r in rs]
        gaps = [honest_gap_step(r) for r in rs]
        lead = [o - d for o, d in zip(onsets.get(a, []), detected, strict=False) if o is not None and d is not None]
        never = sum(o is None and d is not None for o, d in zip(onsets.get(a, []), detected, strict=False))
        if lead and a in STRUCTURAL:
            leads.append(f"{LABELS[a]} {fmt(*mean_spread(lead), 0)}")
            to_collapse = [c - d for c, d in zip(collapses[a], detected, strict=True)
                           if c is not None and d is not None]
            collapse_leads.append(f"{LABELS[a]} {fmt(*mean_spread(to_collapse), 0)}")
        rows.append([LABELS[a], steps_text(detected), ", ".join(signals) or "—", steps_text(stab), steps_text(mass),
                     steps_text(gaps),
                     steps_text(onsets.get(a, [None] * len(rs))),
                     (fmt(*mean_spread(lead), 0) if lead else "—")
                     + (f"; {plural(never, 'seed')} never in the loss" if never and a in LEAKY else ""), v])
    n_causal = sum(len(rs) for a, rs in arms.items() if a not in LEAKY)
    false = sum(r.summary.get("leak_detected_step") is not None for a, rs in arms.items() if a not in LEAKY
                for r in rs)
    header = ["arm", "alarm fired at (per seed)", "signal", "future leak first > tolerance, stability probe",
              "future attention mass first > 0, stability probe", "honest-gap rule first met",
              "loss onset (leaves the control's band)", "lead: onset - alarm (± seed sd)", "prediction 4"]
    leaky_runs = [r for a in LEAKY if a in arms for r in arms[a]]
    fired = sum(r.summary.get("leak_detected_step") is not None for r in leaky_runs)
    bound = false_alarm_bound(n_causal) if false == 0 else math.nan
    bound_words = (f" (0 of {n_causal} bounds the per-run false-alarm rate below {bound:.0%} at 95% confidence)"
                   if false == 0 and n_causal else "")
    opened = [r for a in LEAKY if a in arms for r in arms[a]
              if first_above(*taken(r, "stab/future_leak"), alarm_of(r).tolerance) is not None]
    fired_open = sum(r.summary.get("leak_detected_step") is not None for r in opened)
    warned = [r for r in opened if r.config["model"]["attn"]["causal"]]
    rep.findings.append(
        f"The leak alarm recorded the leak on {fired_open} of the {len(opened)} buggy runs whose mask opened (it "
        f"warned on {sum(r.summary.get('leak_detected_step') is not None for r in warned)} of the {len(warned)} "
        "configured causal=true; the no-mask arm is configured causal=false, so its leak is recorded without a "
        f"warning), on {fired} of all {len(leaky_runs)} buggy runs, and on {false} of {n_causal} causal "
        f"runs{bound_words}. Prediction 4 as written (every run of every leaky arm): **{all_hold(verdicts)}**"
        + (f", because {'; '.join(literal)} never leaked, so the alarm had nothing to find; on the runs whose mask "
           f"opened (a reading chosen after the sweep) it {verb(all_hold(opened_verdicts))}" if literal else "")
        + ". Its 'at the first validation' for the structural leaks is true by construction of the probe.")
    if leads:
        rep.findings.append("The alarm's lead (steps, seed mean ± sd) over the loss onset, which compares each run "
                            "with seed-matched causal runs a user would not have: " + ", ".join(leads)
                            + "; over the loss-collapse step, which a user watching the curve would see: "
                            + ", ".join(collapse_leads) + ". The alarm's step is its first validation for every "
                            "structural leak, so the leads measure the loss, not the alarm.")
    rep.sections += ["## The leak alarm", "", prose("partial_leaks", "alarm", first_val=first_val), "",
                     markdown_table(header, rows), ""]


OTHER = {"fill_1e4": "stab/visible_floor", "fill_where_1e4": "stab/mask_margin"}  # the other fill's signal
FILLS = {  # arm -> (its signal, the signal's words, whether the signal opens the mask by rising, its prediction)
    "fill_1e4": ("stab/mask_margin", "mask margin", True, 3),
    "fill_where_1e4": ("stab/visible_floor", "visible floor", False, 5),
}


def fill_rows(runs: list[Run], arm: str, pred: dict) -> tuple[list[list[str]], list[str], list[tuple], float, float]:
    """Per seed of a fill arm: the predicted and observed opening, the signals then, the verdict and the
    backwards count. Returns (rows, verdicts, (seed, future mass, leak) where the leak came early, threshold,
    tolerance)."""
    key, _, rising, _ = FILLS[arm]
    fill, slack = float(runs[0].config["attention_bug"].get("fill", -1e4)), float(pred["fill_slack"])
    threshold = abs(fill) - slack if rising else fill + slack
    tol = alarm_of(runs[0]).tolerance
    rows, verdicts, early = [], [], []
    for r in runs:
        steps, signal = taken(r, key)
        lsteps, leaks = taken(r, "stab/future_leak")
        if not np.array_equal(steps, lsteps):
            raise ReportError(f"{r.dir}: {key} and the future leak were not logged at the same probes.")
        o = opening(steps, signal, leaks, threshold, tol, above=rising)
        verdicts.append(o["verdict"])
        other, ml = (value_at(r, k, o["observed"]) for k in (OTHER[arm], "stab/max_logit"))
        closest = float(np.max(signal) if rising else np.min(signal))  # the nearest the signal came to opening
        back, closed = closing(steps, signal, leaks, o["observed"], threshold, tol, above=rising)
        if not o["closed_before"]:  # open before the predicted probe: what the unperturbed windows showed there
            first_open = first_above(steps, leaks, tol)
            m_steps, mass = taken(r, "stab/future_mass")
            at_mass = mass[np.nonzero(m_steps == first_open)[0]]
            early.append((r.seed, float(at_mass[0]) if len(at_mass) else math.nan,
                          float(leaks[np.nonzero(steps == first_open)[0][0]])))
        rows.append([str(r.seed), steps_text([o["predicted"]]), steps_text([o["observed"]]),
                     f"{o['signal_at_open']:.0f}" if math.isfinite(o["signal_at_open"]) else "—",
                     f"{other[0]:.0f}" if len(other) else "—", f"{ml[0]:.0f}" if len(ml) else "—",
                     f"{closest:.0f}", "yes" if o["closed_before"] else "**no**", o["verdict"], f"{back}, {closed}"])
    return rows, verdicts, early, threshold, tol


def value_at(run: Run, key: str, step: int | None) -> np.ndarray:
    """The logged value of ``key`` at ``step`` (steps taken), as a 0- or 1-element array."""
    steps, values = taken(run, key)
    return values[np.nonzero(steps == step)[0]] if step is not None else values[:0]


def fill_section(rep: Report, arms, pred, out: Path, arm: str) -> None:
    runs = arms[arm]
    key, what, rising, number = FILLS[arm]
    fill, slack = float(runs[0].config["attention_bug"].get("fill", -1e4)), float(pred["fill_slack"])
    rows, verdicts, early, threshold, tol = fill_rows(runs, arm, pred)
    probe = resolution(taken(runs[0], key)[0])
    ctrl = arms.get("fill_inf", [])
    ctrl_leak = max((float(np.max(taken(r, "stab/future_leak")[1])) for r in ctrl), default=math.nan)
    side = "above" if rising else "below"
    other_what = FILLS[next(a for a in FILLS if a != arm)][1]
    header = ["seed", f"predicted: {what} first {side} {threshold:g} (probes every {probe} steps)",
              f"observed: future leak first > {tol:g}", f"{what} then", f"{other_what} then", "max logit then",
              f"{'highest' if rising else 'lowest'} {what} at any probe", "closed before?", "verdict",
              f"after it opened: probes with the {what} back on the closed side, and closed again"]
    verdict = all_hold(verdicts)
    n_open = sum(r[2] != "never" for r in rows)
    closest = [float(r[6]) for r in rows]
    nearest = max(closest) if rising else min(closest)
    at_predicted = sum(o == p != "never" for o, p in zip((r[2] for r in rows), (r[1] for r in rows), strict=True))
    mass_first = [steps_text([first_above(*taken(r, "stab/future_mass"), 0.0)]) for r in runs]
    mass_at = sum(m == r[1] for m, r in zip(mass_first, rows, strict=True))
    shown = (f"**not tested** (it holds only vacuously, in its 'never, if the {what} never passes the threshold' "
             f"clause: the {what} came no closer than {nearest:.0f} to the threshold {threshold:g})"
             if n_open == 0 and verdict == "holds" else f"**{verdict}**")
    rep.findings.append(
        f"{LABELS[arm]}: the leak opened in {n_open} of {len(rows)} seeds"
        + (f", at the predicted probe in {at_predicted}, at it or the next in {verdicts.count('holds')}" if n_open
           else "") + f"; prediction {number}: {shown}"
        + (f". Read after the sweep: the future attention mass on the unperturbed windows first passed 0 at the "
           f"predicted probe in {mass_at} of {len(rows)} seeds, so where the prediction fails it is the leak probe "
           "that saw the opening late (it changes the tokens after a few split points only)" if n_open else "")
        + f"; the -inf control's largest future leak at any probe: {ctrl_leak:g}.")
    if arm == "fill_1e4":
        opened = [(float(r[3]), float(r[5])) for r in rows if r[3] != "—" and r[5] != "—"]  # margin, max logit
        rep.comparison.append(
            f"The added fill here opened at mask margins of {min(m for m, _ in opened):.0f} to "
            f"{max(m for m, _ in opened):.0f}, with max logits of {min(x for _, x in opened):.0f} to "
            f"{max(x for _, x in opened):.0f}: the additive mechanism, which needs a masked score to beat the "
            "visible ones by the fill's magnitude." if opened else
            "The added fill never opened here.")
    else:
        floors = [float(r[3]) for r in rows if r[3] != "—"]
        rep.comparison.append(
            f"GPT-2's replacing fill opened here in {n_open} of {len(rows)} seeds"
            + (f", at visible floors of {min(floors):.0f} to {max(floors):.0f} (a row whose every visible score had "
               "fallen below the fill), the mechanism of issue 15199's printout" if floors else
               f": no row's visible scores fell below the fill at this rate and length (the lowest visible floor at "
               f"any probe: {nearest:.0f}, against the fill's {fill:g}), so the published bug did not arise here; it "
               "needs visible scores far more negative than these runs reached") + ".")
    block = "fill" if rising else "replace"
    text = [prose("partial_leaks", block, fill=f"{fill:g}", slack=f"{slack:g}", absfill=f"{abs(fill):g}",
                  threshold=f"{threshold:g}", tol=f"{tol:g}", ctrl_leak=f"{ctrl_leak:g}",
                  rounded=f"{np.float32(1) + np.float32(math.exp(-slack)):.7f}"), "",
            markdown_table(header, rows), ""]
    if n_open:
        text += [prose("partial_leaks", "probe_blind", what=what, mass=", ".join(mass_first),
                       predicted=", ".join(r[1] for r in rows), at=mass_at, n=len(rows)), ""]
    if early:
        text += [prose("partial_leaks", "fill_misses", what=what, seeds=", ".join(str(e[0]) for e in early),
                       masses=", ".join(f"{m:.1e}" for _, m, _ in early),
                       leaks=", ".join(f"{v:.2f}" for *_, v in early), tol=f"{tol:g}"), ""]
    backs = [tuple(int(x) for x in r[9].split(", ")) for r in rows]
    back, closed = sum(b for b, _ in backs), sum(c for _, c in backs)
    if back:
        text += [prose("partial_leaks", "fill_closing", back=back, closed=closed, open=back - closed, what=what,
                       counter=plural(back - closed, "counter-example")), ""]
    name = "fill.png" if rising else "fill_where.png"
    rep.sections += [f"## {LABELS[arm]}: when the mask opens (prediction {number})", "", *text,
                     f"![{LABELS[arm]}]({name})", ""]
    fig_fill(runs, key, what, threshold, tol, out / name)


def setup_text(arms: dict[str, list[Run]], runs: list[Run]) -> str:
    wall = sweep_wall_seconds(runs)
    seeds = sorted({r.seed for r in runs})
    steps = sorted({r.summary["steps"] for r in runs})
    return (f"{len(runs)} runs: {len(arms)} arms x seeds {', '.join(map(str, seeds))}; "
            f"{' and '.join(map(str, steps))} steps; sweep wall time {wall / 60:.1f} min (first job's start to "
            f"last job's end, from the files).")


def write_report(runs: list[Run], out: Path, sweeps: list[Path]) -> Path:
    arms = group(runs)
    cfg = runs[0].config
    pred = {**DEFAULT_PREDICTION, **(cfg.get("prediction") or {})}
    onsets, collapses = {}, {}
    for a, rs in arms.items():
        ctrl = arms.get(CONTROL.get(a, ""), [])
        onsets[a] = onset_steps(rs, ctrl, pred["onset_run"]) if ctrl else [None] * len(rs)
        final = float(np.mean([r.summary["train_loss"] for r in ctrl])) if ctrl else math.nan
        collapses[a] = collapse_steps(rs, pred["onset_fraction"] * final) if ctrl else [None] * len(rs)
    est = bootstrap(samples(arms, onsets))
    table, seen = arm_table(arms, est, pred)
    fill_cfg = arms["fill_1e4"][0].config if "fill_1e4" in arms else {}
    m = fill_cfg.get("model", {})
    header = [prose("partial_leaks", "intro", n_runs=plural(len(runs), "run"),
                    sweeps=", ".join(f"`{s}`" for s in sweeps),
                    fill=f"{(fill_cfg.get('attention_bug') or {}).get('fill', float('nan')):g}",
                    d_k=m.get("n_embd", 0) // max(m.get("n_head", 1), 1) if m else "n/a",
                    lr=f"lr {fill_cfg.get('optim', {}).get('lr', float('nan')):g}"), "",
              setup_text(arms, runs), "",
              prose("partial_leaks", "terms", level=f"{LEVEL:.0%}", n_boot=N_BOOT, method=METHOD,
                    n_seeds=seeds_words(arms.values())), ""]
    rep = Report(sections=["## Every arm at the end", "", table, ""])
    seen_section(rep, arms, est, pred, seen, out)
    if "no_mask" in arms and "causal" in arms:
        onset_section(rep, arms, est, pred, onsets, collapses)
    alarm_section(rep, arms, pred, onsets, collapses)
    for arm in FILLS:
        if arm in arms:
            fill_section(rep, arms, pred, out, arm)
    fig_curves(arms, out / "curves.png", {a: [r.summary.get("leak_detected_step") for r in rs]
                                          for a, rs in arms.items()})
    fig_honest(arms, out / "honest.png")
    fig_positions(arms, out / "positions.png")
    fig_future_mass(arms, out / "future_mass.png")
    links = explorers({LABELS[a]: arms[a][0] for a in ("causal", "off_by_one", "last_layer", "fill_1e4",
                                                       "fill_where_1e4") if a in arms}, out)
    if links:
        rep.sections += ["Attention at the end, interactive (first seed): " + ", ".join(links) + ".", ""]
    sections = header + ["## Findings", ""] + [f"- {f}" for f in rep.findings] + [""]
    sections += [prose("partial_leaks", "changes"), ""] + rep.sections
    structural = [a for a in STRUCTURAL if a in seen]
    collapsed = [a for a in structural if seen[a] == "collapses"]
    rep.comparison.insert(0, (
        f"Here {len(collapsed)} of {len(structural)} structural arms collapse "
        + ("(every one, the single-layer and off-by-one leaks included): agrees; a partial leak is as visible in the "
           "loss as a full one once training finds it, and the loss onsets above say when that is."
           if collapsed == structural else
           f"(not: {', '.join(LABELS[a] for a in structural if a not in collapsed)}): where a partial leak does "
           "not collapse the loss, the published symptom would miss it.")))
    for a in FILLS:
        if a in seen:
            falls = seen[a] in ("collapses", "lower")
            rep.comparison.append(
                f"{LABELS[a]}: " + ("as in the published reports" if falls else "unlike the published reports")
                + f", the loss here {'falls' if falls else 'does not fall'} next to the -inf control (it is "
                f"{seen[a]}). {fill_trains(arms, a)}")
    sections += ["## How this compares with the published cases", "", prose("partial_leaks", "literature")]
    sections += [f"- {c}" for c in rep.comparison] + [""]
    sections += [prose("partial_leaks", "threats"), ""]
    sections += ["## Limits", "", prose("partial_leaks", "limits", n_seeds=seeds_words(arms.values())), ""]
    path = out / "README.md"
    path.write_text("\n".join(sections))
    return path


# what partial_leaks.yaml's ``prediction`` says: for runs made without it
DEFAULT_PREDICTION = {"collapse_fraction": 0.5, "onset_run": 10, "onset_fraction": 0.5, "onset_ratio": [0.8, 1.25],
                      "fill_slack": 16, "alarm_first_validation": True}

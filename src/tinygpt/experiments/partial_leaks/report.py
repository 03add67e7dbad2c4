"""Experiment 3's report: the leaks real code has, how each looks in the curves, and whether the leak alarm catches
it (see configs/experiment/partial_leaks.yaml).

Each run's arm is read from its config (the bug in ``model.patch``, ``model.attn.causal`` and the scale), so a
report works on any subset of the arms: the sections need an arm and its control (causal for the structural leaks,
fill_inf for fill_1e4, fill_inf_where for fill_where_1e4 where it trained at another rate: ``control_of``).

``compute`` gathers what the report states (PartialLeaksFindings: ArmEnd per arm, then Seen, Onsets, Alarm and a
Fill per fill arm, one per section); the sections render those findings as tables and prose and draw the figures.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from tinygpt.analysis.figures import explorers, finish_axes, fmt_pm, markdown_table, save
from tinygpt.analysis.records import Reads
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
)
from tinygpt.analysis.sweep import (
    predictions,
    ReportError,
    Run,
    alarm_of,
    group_by,
    honest_gap_step,
    seed_ids,
    seeds_words,
    summary_spread,
    sweep_wall_seconds,
    window_samples,
)
from tinygpt.analysis.templates import Report, plural, prose
from tinygpt.experiments.index import Headline
from tinygpt.experiments.partial_leaks.onset import exceedances, false_onsets, loss_onset

STRUCTURAL = ("no_mask", "off_by_one", "first_layer", "last_layer", "sliding_window")  # leaky in the mask itself
ARMS = ("causal", *STRUCTURAL, "fill_1e4", "fill_where_1e4", "fill_inf", "fill_inf_where")
CONTROLS = ("causal", "fill_inf", "fill_inf_where")  # the arms with the production mask
FILL_ARMS = ("fill_1e4", "fill_where_1e4")  # the finite fills: a mask that opens only once training moves the scores
SUMMARY = ("status", "steps", "interrupted", "train_loss", "val_loss", "vocab_size", "future_leak", "attn_future_mass",
           "attn_entropy", "leak_detected_step", "leak_signal", "diagnostics")
LEAKY = (*STRUCTURAL, "fill_1e4", "fill_where_1e4")
FILL_PANEL = ("fill_inf", "fill_inf_where", "fill_1e4", "fill_where_1e4")  # the figures' second panel
LABELS = {
    "causal": "causal (control)", "no_mask": "no mask", "off_by_one": "off by one", "first_layer": "first layer leaky",
    "last_layer": "last layer leaky", "sliding_window": "sliding window", "fill_1e4": "finite fill (added)",
    "fill_where_1e4": "finite fill (replacing: GPT-2's masked_bias)",
    "fill_inf": "-inf fill (its control)", "fill_inf_where": "-inf fill at the replacing fill's rate (its control)",
}
COLORS = {"causal": "tab:blue", "no_mask": "tab:red", "off_by_one": "tab:orange", "first_layer": "tab:purple",
          "last_layer": "tab:brown", "sliding_window": "tab:pink", "fill_1e4": "tab:olive",
          "fill_where_1e4": "tab:green", "fill_inf": "tab:cyan", "fill_inf_where": "tab:gray"}


def bug_of(cfg: dict) -> dict | None:
    """A run's attention bug: the AttentionBug in its model.patch; None for a run without one."""
    for node in (cfg.get("model") or {}).get("patch") or []:
        if str(node.get("_target_", "")).endswith(".AttentionBug"):
            return node
    return None


def arm_of(run: Run) -> str:
    """The arm a run belongs to, from what its config builds."""
    cfg = run.config
    bug = bug_of(cfg)
    if bug:
        kind, layers = bug.get("kind"), bug.get("layers")
        if kind == "no_mask":
            return {(0,): "first_layer", (-1,): "last_layer"}.get(tuple(layers or ()), "no_mask")
        return {"finite_fill": "fill_1e4", "replace_fill": "fill_where_1e4"}.get(kind, kind)
    if not cfg["model"]["attn"]["causal"]:
        return "no_mask"
    return "fill_inf" if cfg["model"]["attn"]["scale"] == "none" else "causal"


EXPLORED = ("causal", "off_by_one", "last_layer", "fill_1e4", "fill_where_1e4")  # the arms with an explorer page


def explored(runs: list[Run]) -> list[Run]:
    """The runs whose attention maps the report draws: the first seed of each EXPLORED arm."""
    arms = group(runs)
    return [arms[a][0] for a in EXPLORED if a in arms]


def lr_of(run: Run) -> float:
    return float(run.config["optim"]["lr"])


def group(runs: list[Run]) -> dict[str, list[Run]]:
    """arm -> its runs sorted by seed, in ARMS order. The -inf runs at the replacing fill's rate, where it differs
    from the added fill's (design 3), are that fill's control, fill_inf_where."""
    by_arm = group_by(runs, arm_of)
    where = {lr_of(r) for r in by_arm.get("fill_where_1e4", [])}
    added = {lr_of(r) for r in by_arm.get("fill_1e4", [])}
    if where - added and "fill_inf" in by_arm:
        inf = by_arm.pop("fill_inf")
        by_arm["fill_inf"] = [r for r in inf if lr_of(r) not in where - added]
        by_arm["fill_inf_where"] = [r for r in inf if lr_of(r) in where - added]
    return {a: by_arm[a] for a in ARMS if by_arm.get(a)}


def control_of(arm: str, arms: dict[str, list[Run]]) -> str | None:
    """The arm a leaky arm is compared with: causal for the structural leaks; for a fill, the -inf runs at its rate."""
    if arm in STRUCTURAL:
        return "causal"
    if arm == "fill_where_1e4" and "fill_inf_where" in arms:
        return "fill_inf_where"
    return "fill_inf" if arm in ("fill_1e4", "fill_where_1e4") else None


# ----------------------------------------------------------------------------- per-window samples


def samples(arms: dict[str, list[Run]], onsets: dict[str, list[int | None]]) -> dict:
    """Every per-window measure of every arm ({(arm, what): Sample}, sweep.WINDOW_MEASURES: seeds shared within an
    arm, windows shared by every run measured on them) and each arm's onsets ((arm, "onset"), one column; seeds
    paired across arms: seed s of every arm starts from the same weights and sees the same batches)."""
    out = {}
    for arm, rs in arms.items():
        for what, sample in window_samples(rs, "val", seeds=arm).items():
            out[(arm, what)] = sample
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


# ----------------------------------------------------------------------------- per-run readings


def taken(run: Run, key: str) -> tuple[np.ndarray, np.ndarray]:
    """A logged series with its steps as the number of training steps taken. The history files log the training
    loss, the validations and the stability probes at the 0-based index of the batch just taken (the validation
    after 50 steps at 49), the leak alarm's ``leak/*`` at the steps taken (50), and the stability probe at init, before
    any step, at 0. Every step in this report is counted as steps taken, as the alarm counts them."""
    steps, values = run.series(key)
    if key.startswith("leak/"):
        return steps, values
    if key.startswith("stab/"):  # the probe at init (callbacks.stability at_start) is logged at 0: 0 steps taken
        return np.where(steps == 0, 0, steps + 1), values
    return steps + 1, values


def collapse_steps(runs: list[Run], threshold: float) -> list[int | None]:
    """Per run: the loss-collapse step, the first step whose raw training loss is below ``threshold``."""
    return [first_below(*taken(r, "train/loss"), threshold) for r in runs]


def control_losses(controls: list[Run]) -> tuple[np.ndarray, np.ndarray] | None:
    """The control seeds' raw training loss at the steps every one of them logged: (steps taken, (K, S)); None
    without two controls sharing a step."""
    series = [taken(r, "train/loss") for r in controls]
    if len(series) < 2:
        return None
    common = sorted(set.intersection(*(set(st.tolist()) for st, _ in series)))
    if not common:
        return None
    return np.asarray(common), np.stack([v[np.isin(st, common)] for st, v in series])  # (K, S)


def onset_steps(runs: list[Run], controls: list[Run], run: int, alpha: float | None) -> list[int | None]:
    """Per run: the loss onset, the first step from which its raw training loss stays below the control seeds'
    lower prediction bound at ``alpha`` for ``run`` consecutive logged steps (prediction 2, design 3: onset.py).
    ``alpha=None`` is design 2's rule, below the lowest control seed (kept for comparison)."""
    c = control_losses(controls)
    if c is None:
        return [None] * len(runs)
    if alpha is None:
        return [first_below_band(*taken(r, "train/loss"), c[0], c[1].min(0), run) for r in runs]
    return [loss_onset(*taken(r, "train/loss"), c[0], c[1], alpha, run) for r in runs]


def false_onset_count(controls: list[Run], run: int, alpha: float | None) -> int | None:
    """How many control seeds the onset rule calls leaky against the arm's other seeds (leave one out); None with
    fewer than 3 seeds."""
    if len(controls) < 3:
        return None
    if alpha is None:
        return sum(onset_steps([r], [o for o in controls if o is not r], run, None)[0] is not None for r in controls)
    c = control_losses(controls)
    return None if c is None else sum(x is not None for x in false_onsets(c[0], c[1], alpha, run))


def taken_band(runs: list[Run], key: str):
    """stats.band with the steps as steps taken (``taken``): (steps, mean, min, max over the runs) or None."""
    b = band(runs, key)
    return None if b is None else (b[0] + (0 if key.startswith("leak/") else 1), *b[1:])


def data_status(seeds: list[int], seen: list[int]) -> str:
    """Whether these runs can confirm the predictions: 'confirmatory' when none of their seeds had been seen when
    the predictions were written (deterministic runs repeat, so a seen seed is seen data), 'exploratory' when every
    one had, 'mixed' otherwise."""
    old = set(seeds) & set(seen)
    return "confirmatory" if not old else "exploratory" if old == set(seeds) else "mixed"


def status_text(seeds: list[int], seen: list[int]) -> str:
    status = data_status(seeds, seen)
    listed, old = ", ".join(map(str, sorted(set(seeds)))), ", ".join(map(str, sorted(set(seen))))
    if status == "confirmatory":
        return (f"**Confirmatory.** These runs' seeds ({listed}) include none of the seeds whose runs had been seen "
                f"when the predictions were written ({old}): every verdict below is judged on data no prediction "
                "had seen.")
    if status == "exploratory":
        return (f"**Exploratory.** Every seed of these runs ({listed}) had been seen when the predictions were "
                "written: the verdicts below describe these runs, they confirm nothing.")
    return (f"**Partly exploratory.** Seeds {', '.join(map(str, sorted(set(seeds) & set(seen))))} of these runs had "
            "been seen when the predictions were written: only a verdict on the others could confirm.")


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
              (axes[1], [a for a in FILL_PANEL if a in arms]))
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
        for key, ls, what in (("val/loss_probe", "-", "teacher-forced"), ("val/loss_honest", "--", "honest")):
            b = taken_band(arms[a], key)
            if b is not None:
                ax.plot(b[0], b[1], ls=ls, color=COLORS[a], label=what)
        ax.set_yscale("log")
        finish_axes(ax, "step", "loss (probe windows)", LABELS[a].split(": ")[0].replace("(replacing", "(replacing)"))
    for ax in axes[len(names):]:
        ax.set_visible(False)
    ar = (next(iter(arms.values()))[0].config.get("callbacks") or {}).get("honest_loss") or {}
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
                      (axes[1], [a for a in FILL_PANEL if a in arms])):
        for a in names:
            tf = np.mean([r.position_means() for r in arms[a]], axis=0)  # (T,)
            ar = np.mean([r.windows("honest_window_position").mean(0) for r in arms[a]], axis=0)
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


# ----------------------------------------------------------------------------- findings


@dataclass
class ArmEnd:
    """One arm at the end of training, next to its control where the sweep has it."""

    arm: str
    seeds: int
    train: tuple[float, float]  # training loss over the last 10% of steps, mean ± seed sd
    loss: Estimate  # teacher-forced, every validation window
    honest: Estimate  # autoregressive, the probe windows
    honest_gap: Estimate  # honest minus teacher-forced on the same probe windows
    ratio: Estimate | None  # teacher-forced / its control's
    seen: str | None  # how it looks in the loss next to its control (loss_visibility)
    future_leak: tuple[float, float]  # mean ± seed sd
    future_mass: tuple[float, float]


def arm_ends(arms: dict[str, list[Run]], est: dict, pred: dict) -> list[ArmEnd]:
    out = []
    for a, rs in arms.items():
        ctrl = control_of(a, arms)
        ratio = diff = None
        if ctrl in arms:
            ratio = est[(a, "mean")] / est[(ctrl, "mean")]
            diff = est[(a, "mean")] - est[(ctrl, "mean")]
        out.append(ArmEnd(a, len(rs), summary_spread(rs, "train_loss"), est[(a, "mean")], est[(a, "honest")],
                          est[(a, "honest")] - est[(a, "probe")], ratio,
                          loss_visibility(ratio, diff, pred["collapse_fraction"]) if ratio is not None else None,
                          summary_spread(rs, "future_leak"), summary_spread(rs, "attn_future_mass")))
    return out


@dataclass
class Training:
    """Whether a fill arm and its control trained, by Experiment 2's rule: a run failed to train when its final loss
    is not below the unigram baseline by ``fraction`` of the unigram - bigram gap."""

    unigram: float
    bigram: float
    fraction: float
    failed: int  # runs of the arm and its control that failed to train
    runs: int
    finals: list[tuple[str, float]]  # (the arm's or "its control", mean final val loss)


def training(arms: dict[str, list[Run]], a: str, fraction: float = 0.5) -> Training | None:
    diag = next((r.summary.get("diagnostics") or {} for r in arms[a]), {})
    uni, bi = diag.get("unigram_loss"), diag.get("bigram_loss")
    if not uni or not bi:
        return None
    ctrl = control_of(a, arms)
    groups = [(LABELS[a], arms[a])] + ([("its control", arms[ctrl])] if ctrl in arms else [])
    failed = sum(failed_to_train(r.summary["val_loss"], uni, bi, fraction) for _, rs in groups for r in rs)
    return Training(uni, bi, fraction, failed, sum(len(rs) for _, rs in groups),
                    [(name, float(np.mean([r.summary["val_loss"] for r in rs]))) for name, rs in groups])


@dataclass
class LeakSeen:
    """Prediction 1 on one structural leak: its loss collapses next to the causal arm's, its honest loss is no
    better."""

    arm: str
    ratio: Estimate  # teacher-forced / causal
    collapse: str  # the ratio's verdict against collapse_fraction
    honest: Estimate  # honest loss minus the causal arm's
    honest_verdict: str  # honest_no_better
    verdict: str


@dataclass
class FillSeen:
    """A fill arm in the loss next to the -inf control."""

    arm: str
    word: str  # loss_visibility
    diff: Estimate  # teacher-forced minus the control's
    gap: Estimate  # honest minus teacher-forced on the same probe windows
    training: Training | None


@dataclass
class Seen:
    """Which leaks show in the loss (prediction 1)."""

    collapse_fraction: float
    leaks: list[LeakSeen]
    fills: list[FillSeen]
    verdict: str  # prediction 1 over every structural leak
    collapsed: list[str]  # arms whose loss collapses next to their control
    healthy: list[str]  # arms indistinguishable from their control

    @property
    def fills_untrained(self) -> bool:
        """Every run of every fill arm and of its control failed to train (Experiment 2's rule)."""
        return bool(self.fills) and all(x.training is not None and x.training.failed == x.training.runs
                                        for x in self.fills)


def seen_findings(arms: dict[str, list[Run]], est: dict, pred: dict, seen: dict[str, str]) -> Seen:
    leaks = []
    for a in STRUCTURAL:
        if a not in arms or "causal" not in arms:
            continue
        ratio = est[(a, "mean")] / est[("causal", "mean")]
        collapse = in_range(ratio, 0.0, pred["collapse_fraction"])
        honest = est[(a, "honest")] - est[("causal", "honest")]
        honest_verdict = honest_no_better(honest)
        leaks.append(LeakSeen(a, ratio, collapse, honest, honest_verdict, all_hold([collapse, honest_verdict])))
    fills = [FillSeen(a, seen[a], est[(a, "mean")] - est[(control_of(a, arms), "mean")],
                      est[(a, "honest")] - est[(a, "probe")], training(arms, a))
             for a in ("fill_1e4", "fill_where_1e4") if a in seen]
    return Seen(pred["collapse_fraction"], leaks, fills, all_hold([x.verdict for x in leaks]),
                [a for a, w in seen.items() if w == "collapses"],
                [a for a, w in seen.items() if w == "indistinguishable"])


@dataclass
class OnsetRow:
    """One structural arm's loss onset (prediction 2) against the no-mask arm's, paired by seed."""

    arm: str
    steps: list[int | None]  # the loss onset per seed
    mean: Estimate | None  # None unless every seed has one
    ratio: Estimate | None  # mean onset / the no-mask arm's
    verdict: str  # against onset_ratio ("—" for the no-mask arm itself)
    collapses: list[int | None]  # the loss-collapse step per seed


@dataclass
class OnsetDefinition:
    """Prediction 2's ratios under one onset definition (read after the sweep): per arm (OnsetSensitivity.arms)
    the ratio and its verdict, None where not every seed has an onset."""

    name: str
    cells: list[tuple[Estimate, str] | None]


@dataclass
class Onsets:
    """When each leak shows in the training loss (prediction 2), and how much the verdicts owe to the onset's
    definition."""

    lo: float
    hi: float
    run: int  # the pre-registered run length
    fraction: float  # the loss-collapse threshold, of the causal final loss
    interval: int | None  # the training loss's logging interval
    n_causal: int
    rows: list[OnsetRow]
    verdict: str  # prediction 2 over every structural arm but no_mask
    off_by_one: str | None  # off by one's onset against no mask's: earlier, same or later
    shapes: dict[str, str] | None  # the one-layer and sliding-window arms' words, when all three have onsets
    others: list[str]  # the arms of the definitions table
    definitions: list[OnsetDefinition]
    alpha: float  # the pre-registered prediction bound's level
    false_onsets: list[tuple[int, int, str, str]]  # (control seeds a rule fires on, seeds, control arm, the rule)
    calibration: list[tuple[str, float, int]]  # per control arm: the mean per-step rate below the others' bound
    # at the pre-registered alpha, and the longest run of such steps (onset.exceedances)
    n_layer: int = 0  # the structural arms' model depth (for the prose's layer counts)


def onset_findings(arms, est, pred, onsets, collapses) -> Onsets:
    lo, hi = pred["onset_ratio"]
    rows = []
    ref = ("no_mask", "onset") in est
    for a in STRUCTURAL:
        if a not in arms:
            continue
        o = est.get((a, "onset"))
        ratio = o / est[("no_mask", "onset")] if o is not None and ref and a != "no_mask" else None
        verdict = in_range(ratio, lo, hi) if ratio is not None else ("—" if a == "no_mask" else "fails")
        rows.append(OnsetRow(a, onsets[a], o, ratio, verdict, collapses[a]))
    off_by_one = None
    if ("off_by_one", "onset") in est and ref:
        ratio = est[("off_by_one", "onset")] / est[("no_mask", "onset")]
        off_by_one = {-1: "earlier", 0: "same", 1: "later"}[direction(ratio - 1)]
    words = {}
    for a in ("first_layer", "last_layer", "sliding_window"):
        if (a, "onset") in est and ref:
            r = est[(a, "onset")] / est[("no_mask", "onset")]
            words[a] = {1: "later", -1: "earlier", 0: "neither earlier nor later (within noise)"}[direction(r - 1)]
    others, definitions, false_onsets = onset_sensitivity(arms, pred, collapses, rows)
    runs0 = next(iter(arms.values()))
    return Onsets(lo, hi, pred["onset_run"], pred["onset_fraction"], resolution(taken(runs0[0], "train/loss")[0]),
                  len(arms.get("causal", [])), rows, all_hold([r.verdict for r in rows if r.arm != "no_mask"]),
                  off_by_one, words if len(words) == 3 else None, others, definitions, pred["onset_alpha"],
                  false_onsets, calibration(arms, pred["onset_alpha"]),
                  int(arms["causal"][0].config["model"].get("n_layer", 0)))


def calibration(arms: dict[str, list[Run]], alpha: float) -> list[tuple[str, float, int]]:
    """Per control arm with 3 seeds or more: how often a control seed lies below the other seeds' bound (its mean
    over seeds, alpha if calibrated) and the longest run of consecutive steps it does so."""
    out = []
    for ctrl in CONTROLS:
        c = control_losses(arms.get(ctrl, []))
        if c is not None and c[1].shape[0] >= 3:
            ex = exceedances(c[1], alpha)
            out.append((ctrl, float(np.mean([r for r, _ in ex])), max(n for _, n in ex)))
    return out


def onset_sensitivity(arms: dict[str, list[Run]], pred: dict, collapses: dict, rows: list[OnsetRow]):
    """Prediction 2 under other onset definitions (read after the sweep: how much the verdicts owe to the
    pre-registered rule; the pre-registered row is the main table's estimates, not a second bootstrap), and how
    often each rule fires on a control seed against the other control seeds (its false-onset rate). Returns (the
    arms compared with no mask, the definitions, the false onsets)."""
    lo, hi = pred["onset_ratio"]
    n, alpha = pred["onset_run"], pred["onset_alpha"]
    variants = [(f"run of {k} steps, bound at {a:g}", k, a) for k, a in ((2 * n, alpha), (3 * n, alpha),
                                                                          (n, 5 * alpha))]
    variants.append((f"run of {n} steps, below the lowest control seed (design 2's rule)", n, None))
    others = [a for a in STRUCTURAL[1:] if a in arms]
    main = {r.arm: r for r in rows}
    definitions = [OnsetDefinition(f"run of {n} steps, bound at {alpha:g} (pre-registered)",
                                   [(main[a].ratio, main[a].verdict) if main[a].ratio is not None else None
                                    for a in others])]
    steps_of = [(name, {a: onset_steps(arms[a], arms["causal"], k, al) for a in STRUCTURAL if a in arms})
                for name, k, al in variants]
    steps_of.append(("loss-collapse step", {a: collapses[a] for a in STRUCTURAL if a in arms}))
    for name, steps in steps_of:
        ok = {a: v for a, v in steps.items() if all(x is not None for x in v)}
        if "no_mask" not in ok:
            continue
        est = bootstrap({a: Sample(np.array(v, dtype=float)[:, None], windows="onset", seeds="paired",
                                   seed_ids=seed_ids(arms[a])) for a, v in ok.items()})
        cells = []
        for a in others:
            if a not in ok:
                cells.append(None)
                continue
            ratio = est[a] / est["no_mask"]
            cells.append((ratio, in_range(ratio, lo, hi)))
        definitions.append(OnsetDefinition(name, cells))
    false_onsets = []
    for ctrl in CONTROLS:
        rs = arms.get(ctrl, [])
        for rule, k, al in ((f"the pre-registered rule (bound at {alpha:g}, a run of {n})", n, alpha),
                            (f"design 2's rule (below the lowest other seed, a run of {n})", n, None)):
            trips = false_onset_count(rs, k, al)
            if trips is not None:
                false_onsets.append((trips, len(rs), ctrl, rule))
    return others, definitions, false_onsets


def false_alarm_bound(n: int, level: float = LEVEL) -> float:
    """The exact one-sided upper confidence bound on a per-run rate after 0 events in n runs: 1 - (1 - level)^(1/n)
    (about 3 / n, the rule of three)."""
    return 1 - (1 - level) ** (1 / n) if n else math.nan


@dataclass
class AlarmRow:
    """The leak alarm on one arm's runs (per seed) beside the other signals of the leak (prediction 4)."""

    arm: str
    detected: list[int | None]  # the alarm's step per seed
    signals: list[str]  # which of its rules fired
    stab: list[int | None]  # the first stability probe whose future leak passes the alarm's tolerance
    opened: list[int | None]  # the first stability probe at which the mask was open (opened_step), per seed
    gaps: list[int | None]  # the first validation the honest-gap rule passes
    onsets: list[int | None]  # the loss onset per seed
    lead: list[int]  # onset - alarm step, the seeds with both
    collapse_lead: list[int]  # loss-collapse step - alarm step, the seeds with both (structural arms)
    never: int  # seeds the alarm fired on whose loss never showed the leak
    verdict: str  # prediction 4 on this arm's runs (alarm_verdict)


@dataclass
class Alarm:
    """Prediction 4 over every arm, and the alarm's counts."""

    rows: list[AlarmRow]
    first_val: int | None  # the validation interval
    open_mass: float  # a mask is open when a row puts more than this on future keys
    verdict: str  # prediction 4 over every arm
    opened: int  # runs whose mask opened (any arm)
    fired_open: int  # alarms on those
    closed: int  # runs whose mask never opened (the controls among them)
    fired_closed: int  # alarms on those
    n_causal: int  # runs of the control arms
    false: int  # alarms on those
    bound: float  # the false-alarm rate's 95% upper bound (NaN after a false alarm)
    warned: int  # runs whose mask opened, configured causal=true
    warned_fired: int  # alarms on those
    late: list[str] = field(default_factory=list)  # alarms after the first validation that followed an opening
    fill_opened: int = 0  # runs of the finite-fill arms whose mask opened: what the alarm could miss
    fill_fired: int = 0  # alarms on those
    fill_delays: list[int] = field(default_factory=list)  # steps from opening to alarm, each late alarm
    probe_only: list[tuple[str, int, list[int], bool]] = field(default_factory=list)  # (arm, seed, steps, alarmed):
    # runs whose mask never opened by the attention weights, though their leak probe read a leak at these probes

    @property
    def closed_are_controls(self) -> bool:
        """The runs whose mask never opened are exactly the control arms' (no leaky run stayed closed)."""
        return self.closed == self.n_causal


def opened_step(run: Run, open_mass: float) -> int | None:
    """The first stability probe (steps taken), up to the run's last validation, at which some query row of the
    probe's windows put more than ``open_mass`` of its attention on keys after it (stab/future_mass_max: the
    attention weights themselves, not the perturbation probe the alarm uses); None if none did."""
    steps, mass = taken(run, "stab/future_mass_max")
    if not len(steps):
        if not len(taken(run, "train/loss")[0]):  # no series at all: the run logged nothing (debug=fast, logger=none)
            raise ReportError(f"{run.dir}: kept no history (it ran without a logger, as debug=fast or logger=none "
                              "does); rerun it with a logger (the default, or logger=csv): this report reads its "
                              "curves.")
        raise ReportError(f"{run.dir}: no stab/future_mass_max in its history (a run from before design 3); "
                          "prediction 4 reads whether its mask opened from it.")
    last_val = taken(run, "val/loss")[0]
    hit = first_above(steps, mass, open_mass)
    return hit if hit is not None and (not len(last_val) or hit <= last_val.max()) else None


def alarm_verdict(detected: list[int | None], opened: list[int | None], first_validation: int | None = None) -> str:
    """Prediction 4 (design 3) on one arm's runs: the alarm fired on every run whose mask opened (at
    ``first_validation`` when given) and on no run whose mask never opened. 'holds' or 'fails'."""
    ok = all((d is not None and (first_validation is None or d == first_validation)) if o is not None
             else d is None for d, o in zip(detected, opened, strict=True))
    return "holds" if ok and detected else "fails"


def alarm_findings(arms, pred, onsets, collapses) -> Alarm:
    rows = []
    first_val = None
    every = [r for rs in arms.values() for r in rs]
    opened_at = {id(r): opened_step(r, pred["open_mass"]) for r in every}
    for a, rs in arms.items():
        alarm = alarm_of(rs[0])
        detected = [r.summary.get("leak_detected_step") for r in rs]
        first_val = val_interval(rs[0])
        opened = [opened_at[id(r)] for r in rs]
        v = alarm_verdict(detected, opened, first_val if pred.get("alarm_first_validation") and a in STRUCTURAL
                          else None)
        lead = [o - d for o, d in zip(onsets.get(a, []), detected, strict=False) if o is not None and d is not None]
        collapse_lead = ([c - d for c, d in zip(collapses[a], detected, strict=True) if c is not None and d is not None]
                         if lead and a in STRUCTURAL else [])
        rows.append(AlarmRow(
            a, detected, sorted({r.summary.get("leak_signal") for r in rs if r.summary.get("leak_signal")}),
            [first_above(*taken(r, "stab/future_leak"), alarm.tolerance) for r in rs], opened,
            [honest_gap_step(r) for r in rs], onsets.get(a, [None] * len(rs)), lead, collapse_lead,
            sum(o is None and d is not None for o, d in zip(onsets.get(a, []), detected, strict=False)), v))
    controls = [r for a in CONTROLS if a in arms for r in arms[a]]
    false = sum(r.summary.get("leak_detected_step") is not None for r in controls)
    opened = [r for r in every if opened_at[id(r)] is not None]
    closed = [r for r in every if opened_at[id(r)] is None]
    warned = [r for r in opened if r.config["model"]["attn"]["causal"]]
    fill_open = [r for a in FILL_ARMS if a in arms for r in arms[a] if opened_at[id(r)] is not None]

    def fired(runs):
        return sum(r.summary.get("leak_detected_step") is not None for r in runs)

    late, delays = [], []  # a fill whose alarm came after the first validation that followed its opening: why
    for row in rows:
        for r, o, d in zip(arms[row.arm], row.opened, row.detected, strict=True):
            if o is None or d is None or not first_val:
                continue
            next_val = -(-max(o, 1) // first_val) * first_val  # the first validation at or after the opening
            if d > next_val:
                delays.append(d - o)
                steps, mass = taken(r, "stab/future_mass_max")
                shut = [v for v in range(next_val, d, first_val)  # the mask at the last probe at or before v
                        if len(mass[steps <= v]) and mass[steps <= v][-1] <= pred["open_mass"]]
                late.append(f"{LABELS[row.arm]} seed {r.seed} opened at {o} and was first caught at {d}"
                            + (f" (closed again at the probes before the validations at {', '.join(map(str, shut))})"
                               if shut else ""))
    probe_only = []
    for a in FILL_ARMS:
        for r in arms.get(a, []):
            steps, leak = taken(r, "stab/future_leak")
            hits = [int(st) for st, v in zip(steps, leak, strict=True) if v > alarm_of(r).tolerance]
            if opened_at[id(r)] is None and hits:
                probe_only.append((a, r.seed, hits, r.summary.get("leak_detected_step") is not None))
    return Alarm(rows, first_val, float(pred["open_mass"]), all_hold([r.verdict for r in rows]), len(opened),
                 fired(opened), len(closed), fired(closed), len(controls), false,
                 false_alarm_bound(len(controls)) if false == 0 else math.nan, len(warned), fired(warned), late,
                 len(fill_open), fired(fill_open), delays, probe_only)


OTHER = {"fill_1e4": "stab/visible_floor", "fill_where_1e4": "stab/mask_margin"}  # the other fill's signal
FILLS = {  # arm -> (its signal, the signal's words, whether the signal opens the mask by rising, its prediction)
    "fill_1e4": ("stab/mask_margin", "mask margin", True, 3),
    "fill_where_1e4": ("stab/visible_floor", "visible floor", False, 5),
}


@dataclass
class FillSeed:
    """One seed of a fill arm: the predicted and observed opening, the signals then, the verdict and the backwards
    count."""

    seed: int
    predicted: int | None  # the first probe whose signal passes the threshold
    observed: int | None  # the first probe whose future leak passes the tolerance
    signal_at_open: float  # NaN if it never opened
    other: float | None  # the other fill's signal then
    max_logit: float | None  # then
    closest: float  # the nearest the signal came to opening
    closed_before: bool
    verdict: str  # 'holds' or 'fails' (opening)
    back: int  # probes after the opening with the signal back on the closed side ...
    closed: int  # ... and the leak closed again there
    mass_first: int | None  # the first probe at which the mask was open by design 3's definition (opened_step)


@dataclass
class Fill:
    """A finite fill's prediction (3 for the added fill, 5 for the replacing one), per seed."""

    arm: str
    what: str  # the signal's words
    rising: bool  # the signal opens the mask by rising (the added fill) or falling (the replacing one)
    number: int  # the prediction's number
    fill: float
    slack: float
    threshold: float
    tol: float  # the alarm's tolerance: the leak is open above it
    probe: int | None  # the stability probes' interval
    ctrl_leak: float  # the -inf control's largest future leak at any probe
    seeds: list[FillSeed]
    early: list[tuple[int, float, float]]  # (seed, future mass, leak) where the leak opened before the predicted probe
    verdict: str
    n_open: int  # seeds whose leak opened
    at_predicted: int  # seeds whose leak opened at the predicted probe
    holds: int  # seeds whose opening holds (at the predicted probe or the next)
    nearest: float  # the nearest any seed's signal came to opening
    mass_at: int  # seeds whose mask opened (opened_step) at the predicted probe
    open_mass: float


def fill_jumps(runs: list[Run], key: str, seeds: list[FillSeed]) -> list[float]:
    """Per seed with a predicted opening: how far the fill's signal moved across the predicted crossing (from the
    probe before it to the probe that crossed): how finely the probes resolve the threshold."""
    out = []
    for r, x in zip(runs, seeds, strict=True):
        steps, signal = taken(r, key)
        at = np.nonzero(steps == x.predicted)[0] if x.predicted is not None else []
        if len(at) and at[0] > 0:
            out.append(abs(float(signal[at[0]] - signal[at[0] - 1])))
    return out


def value_at(run: Run, key: str, step: int | None) -> float | None:
    """The logged value of ``key`` at ``step`` (steps taken), None if none was logged there."""
    steps, values = taken(run, key)
    at = values[np.nonzero(steps == step)[0]] if step is not None else values[:0]
    return float(at[0]) if len(at) else None


def fill_seed(r: Run, arm: str, threshold: float, tol: float,
              open_mass: float) -> tuple[FillSeed, tuple[int, float, float] | None]:
    key, _, rising, _ = FILLS[arm]
    steps, signal = taken(r, key)
    lsteps, leaks = taken(r, "stab/future_leak")
    if not np.array_equal(steps, lsteps):
        raise ReportError(f"{r.dir}: {key} and the future leak were not logged at the same probes.")
    o = opening(steps, signal, leaks, threshold, tol, above=rising)
    back, closed = closing(steps, signal, leaks, o["observed"], threshold, tol, above=rising)
    early = None
    if not o["closed_before"]:  # open before the predicted probe: what the unperturbed windows showed there
        first_open = first_above(steps, leaks, tol)
        m_steps, mass = taken(r, "stab/future_mass")
        at_mass = mass[np.nonzero(m_steps == first_open)[0]]
        early = (r.seed, float(at_mass[0]) if len(at_mass) else math.nan,
                 float(leaks[np.nonzero(steps == first_open)[0][0]]))
    return FillSeed(r.seed, o["predicted"], o["observed"], o["signal_at_open"], value_at(r, OTHER[arm], o["observed"]),
                    value_at(r, "stab/max_logit", o["observed"]),
                    float(np.max(signal) if rising else np.min(signal)), o["closed_before"], o["verdict"], back,
                    closed, opened_step(r, open_mass)), early


def fill_findings(arms, pred, arm: str) -> Fill:
    runs = arms[arm]
    key, what, rising, number = FILLS[arm]
    fill, slack = float(bug_of(runs[0].config).get("fill", -1e4)), float(pred["fill_slack"])
    threshold = abs(fill) - slack if rising else fill + slack
    tol = alarm_of(runs[0]).tolerance
    seeds, early = [], []
    for r in runs:
        s, e = fill_seed(r, arm, threshold, tol, float(pred["open_mass"]))
        seeds.append(s)
        if e is not None:
            early.append(e)
    closest = [s.closest for s in seeds]
    verdicts = [s.verdict for s in seeds]
    return Fill(
        arm, what, rising, number, fill, slack, threshold, tol, resolution(taken(runs[0], key)[0]),
        max((float(np.max(taken(r, "stab/future_leak")[1])) for r in arms.get(control_of(arm, arms), [])),
            default=math.nan),
        seeds, early, all_hold(verdicts), sum(s.observed is not None for s in seeds),
        sum(s.observed == s.predicted and s.predicted is not None for s in seeds), verdicts.count("holds"),
        max(closest) if rising else min(closest), sum(s.mass_first == s.predicted for s in seeds),
        float(pred["open_mass"]))


@dataclass
class PartialLeaksFindings:
    """Everything experiment 3's report states, computed from the runs."""

    arms: dict[str, list[Run]]
    pred: dict
    onsets: dict[str, list[int | None]]  # the loss onset per seed of each arm (None: never, or no control)
    collapses: dict[str, list[int | None]]  # the loss-collapse step per seed
    est: dict  # {(arm, measure): Estimate}, measures sweep.WINDOW_MEASURES and "onset"
    ends: list[ArmEnd]
    seen: Seen
    onset: Onsets | None  # None without the no-mask and causal arms
    alarm: Alarm
    fills: list[Fill]

    @property
    def seen_words(self) -> dict[str, str]:
        """arm -> how it looks in the loss next to its control, for the arms with a control."""
        return {e.arm: e.seen for e in self.ends if e.seen is not None}


def compute(runs: list[Run]) -> PartialLeaksFindings:
    arms = group(runs)
    pred = predictions(runs, "partial_leaks")
    onsets, collapses = {}, {}
    for a, rs in arms.items():
        ctrl = arms.get(control_of(a, arms) or "", [])
        onsets[a] = onset_steps(rs, ctrl, pred["onset_run"], pred["onset_alpha"]) if ctrl else [None] * len(rs)
        final = float(np.mean([r.summary["train_loss"] for r in ctrl])) if ctrl else math.nan
        collapses[a] = collapse_steps(rs, pred["onset_fraction"] * final) if ctrl else [None] * len(rs)
    est = bootstrap(samples(arms, onsets))
    ends = arm_ends(arms, est, pred)
    seen = {e.arm: e.seen for e in ends if e.seen is not None}
    return PartialLeaksFindings(
        arms, pred, onsets, collapses, est, ends, seen_findings(arms, est, pred, seen),
        onset_findings(arms, est, pred, onsets, collapses) if "no_mask" in arms and "causal" in arms else None,
        alarm_findings(arms, pred, onsets, collapses), [fill_findings(arms, pred, a) for a in FILLS if a in arms])


# ----------------------------------------------------------------------------- sections


def arm_table(f: PartialLeaksFindings) -> str:
    """The headline table: every arm at the end."""
    some = next(iter(f.arms.values()))[0]
    n_val, n_probe = some.window_count(), len(some.windows("honest_window_position"))
    rows = [[LABELS[e.arm], str(e.seeds), fmt_pm(*e.train), e.loss.format(), e.honest.format(),
             e.honest_gap.format(signed=True), e.ratio.format() if e.ratio else "—", e.seen or "—",
             fmt_pm(*e.future_leak, 2), fmt_pm(*e.future_mass, 3)] for e in f.ends]
    header = ["arm", "seeds", "training loss, last 10% (± seed sd)", f"val loss, teacher-forced ({n_val} windows)",
              f"honest loss, autoregressive ({n_probe} windows)",
              f"honest - teacher-forced (same {n_probe} windows)", "teacher-forced / its control's",
              "in the loss, next to its control", "future leak (± sd)", "future attention mass (± sd)"]
    return markdown_table(header, rows)


def training_text(t: Training | None) -> str:
    if t is None:
        return ""
    finals = ", ".join(f"{name} {loss:.3f}" for name, loss in t.finals)
    return (f"At this learning rate {t.failed} of {t.runs} runs of the arm and its control fail to train "
            f"by Experiment 2's rule (final loss not below the unigram baseline {t.unigram:.3f} by {t.fraction:g} of "
            f"its gap to the bigram baseline {t.bigram:.3f}; final val loss {finals}).")


def seen_section(rep: Report, s: Seen) -> None:
    lines = [f"- {LABELS[x.arm]}: teacher-forced / causal {x.ratio.format()} (collapse below "
             f"{s.collapse_fraction:g}: **{x.collapse}**); honest loss minus the causal arm's "
             f"{x.honest.format(signed=True)}: "
             f"{difference_words(x.honest, 'worse than causal', '**better than causal**')}. Prediction "
             f"**{x.verdict}**." for x in s.leaks]
    fill_words = []
    for x in s.fills:
        use = difference_words(x.gap, "the model uses the open mask", "the honest loss is the lower")
        fill_words += [prose("partial_leaks", "fill_seen", arm=LABELS[x.arm], word=x.word,
                             diff=x.diff.format(signed=True), words=difference_words(x.diff, "above", "below"),
                             gap=x.gap.format(signed=True), use=use, trains=training_text(x.training)), ""]
    rep.findings.append(f"Seen in the loss: collapsed far below the control: "
                        f"{', '.join(LABELS[a] for a in s.collapsed) or 'none'}; indistinguishable from the control "
                        f"run: {', '.join(LABELS[a] for a in s.healthy) or 'none'}. Prediction 1 (every structural "
                        f"leak collapses, none has a better honest loss): **{s.verdict}**.")
    rep.sections += ["## Which leaks show in the loss", "", prose("partial_leaks", "seen"), "", *lines, "",
                     *fill_words, "![training loss](curves.png)", "",
                     "![honest and teacher-forced loss at each validation](honest.png)", "",
                     "![loss by position](positions.png)", "",
                     "![future attention mass and future leak](future_mass.png)", ""]


def onset_section(rep: Report, o: Onsets) -> None:
    lo, hi = o.lo, o.hi
    rows = [[LABELS[r.arm], steps_text(r.steps), r.mean.format(0) if r.mean is not None else "not every seed",
             r.ratio.format(2) if r.ratio is not None else "—",
             difference_words(r.ratio - 1, "later", "earlier") if r.ratio is not None else "—", r.verdict,
             steps_text(r.collapses)] for r in o.rows]
    header = ["arm", "loss onset per seed (step)", "mean onset",
              "/ no mask's (ratio of seed means, seeds paired in the bootstrap)", "than no mask",
              f"prediction 2 ({lo:g} to {hi:g})", "loss-collapse step per seed"]
    per_arm = "; ".join(f"{LABELS[r.arm]} {r.ratio.format(2)} ({difference_words(r.ratio - 1, 'later', 'earlier')}"
                        f", {r.verdict})" for r in o.rows if r.ratio is not None)
    rep.findings.append(f"Onset: prediction 2 (each structural leak leaves the causal band when the full one does, "
                        f"within {lo:g} to {hi:g} of its step; it holds only if it holds for every arm): "
                        f"**{o.verdict}**. Each arm's onset over the no-mask arm's: {per_arm}.")
    rep.sections += ["## When each leak shows in the training loss", "",
                     prose("partial_leaks", "onset", run=o.run, fraction=o.fraction, lo=lo, hi=hi, alpha=o.alpha,
                           interval="at every step" if o.interval == 1 else f"every {o.interval} steps",
                           n_causal=o.n_causal), "",
                     markdown_table(header, rows), ""]
    rep.sections += onset_sensitivity_text(o)
    if o.off_by_one is not None:
        rep.sections += [prose("partial_leaks", f"onset_why_{o.off_by_one}"), ""]
    if o.shapes is not None:
        words = o.shapes
        shape = ("onset_shapes_seen" if (words["last_layer"], words["sliding_window"]) == ("later", "earlier")
                 else "onset_shapes_other")
        n_layer = o.n_layer
        rep.sections += [prose("partial_leaks", shape, first=words["first_layer"], last=words["last_layer"],
                               window=words["sliding_window"], later=n_layer - 1, deep=n_layer - 1), ""]


def loo_widening(k: int, alpha: float) -> float:
    """How much larger the prediction bound's multiplier of the sd is with k - 1 control seeds than with k."""
    from scipy import stats as scipy_stats

    if k < 3:
        return math.nan
    return (float(scipy_stats.t.ppf(1 - alpha, k - 2)) * math.sqrt(1 + 1 / (k - 1))
            / (float(scipy_stats.t.ppf(1 - alpha, k - 1)) * math.sqrt(1 + 1 / k)) - 1)


def onset_sensitivity_text(o: Onsets) -> list[str]:
    rows = [[d.name, *("not every seed" if c is None else f"{c[0].format(2)} {c[1]}" for c in d.cells)]
            for d in o.definitions]
    ctrls = list(dict.fromkeys(ctrl for _, _, ctrl, _ in o.false_onsets))
    rules = list(dict.fromkeys(rule for _, _, _, rule in o.false_onsets))
    count = {(ctrl, rule): f"{trips} of {n}" for trips, n, ctrl, rule in o.false_onsets}
    false_rows = [[rule, *(count.get((c, rule), "—") for c in ctrls)] for rule in rules]
    calibration = {c: (rate, n) for c, rate, n in o.calibration}
    false_rows.append([f"the bound: share of logged steps a control seed lay below it (nominal {o.alpha:.0%}), "
                       "longest run of such steps",
                       *(f"{calibration[c][0]:.1%}, {plural(calibration[c][1], 'step')}" if c in calibration else "—"
                         for c in ctrls)])
    return ["Prediction 2's ratios under other onset definitions (the first row is the pre-registered one, the "
            "main table's estimates; the others were chosen with the design as checks, and carry no verdict of "
            "their own):", "",
            markdown_table(["onset", *(LABELS[a] for a in o.others)], rows), "",
            f"False onsets on these runs: each control seed against its arm's other seeds (leave one out), the "
            f"seeds a rule calls leaky; the onset needs {o.run} steps in a row below the bound, and with one of "
            f"{o.n_causal} seeds left out the bound's multiplier of the sd is {loo_widening(o.n_causal, o.alpha):.0%} "
            "larger than the analysis's:", "",
            markdown_table(["rule", *(LABELS[c] for c in ctrls)], false_rows), ""]


def alarm_section(rep: Report, f: Alarm) -> None:
    rows, leads, collapse_leads = [], [], []
    for r in f.rows:
        if r.lead and r.arm in STRUCTURAL:
            leads.append(f"{LABELS[r.arm]} {fmt_pm(*mean_spread(r.lead), 0)}")
            collapse_leads.append(f"{LABELS[r.arm]} {fmt_pm(*mean_spread(r.collapse_lead), 0)}")
        rows.append([LABELS[r.arm], steps_text(r.opened), steps_text(r.detected), ", ".join(r.signals) or "—",
                     steps_text(r.stab), steps_text(r.gaps), steps_text(r.onsets),
                     (fmt_pm(*mean_spread(r.lead), 0) if r.lead else "—")
                     + (f"; {plural(r.never, 'seed')} never in the loss" if r.never and r.arm in LEAKY else ""),
                     r.verdict])
    header = ["arm", f"mask opened: a row's future attention mass first > {f.open_mass:g}, stability probe",
              "alarm fired at (per seed)", "signal", "future leak first > tolerance, stability probe",
              "honest-gap rule first met", "loss onset (leaves the control's band)",
              "lead: onset - alarm (± seed sd)", "prediction 4"]
    bound_words = (f": a per-run false-alarm rate below {f.bound:.0%}, one-sided 95%, for the honest-gap rule alone "
                   "(the controls' future-leak signal is 0 by construction)" if f.false == 0 and f.n_causal else "")
    closed_words = (f"the {f.closed} runs whose mask never opened, which here are exactly the -inf controls, where "
                    "in float32 the future-leak signal is zero and only the honest-gap rule could fire"
                    if f.closed_are_controls else
                    f"the {f.closed} runs whose mask never opened (the {f.n_causal} runs of the control arms among "
                    "them)")
    rep.findings.append(
        f"The leak alarm fired on {f.fired_open} of the {f.opened} runs whose mask opened (a row's future attention "
        f"mass above {f.open_mass:g} at a stability probe; it warned on {f.warned_fired} of the {f.warned} configured "
        "causal=true; the no-mask arm is configured causal=false, so its leak is recorded without a warning) and on "
        f"{f.fired_closed} of {closed_words} ({f.false} alarms on the controls{bound_words}). Prediction 4: "
        f"**{f.verdict}**. Its 'at the first validation' for the structural leaks is true by construction of the "
        "probe." + (f" Late alarms: {'; '.join(f.late)}." if f.late else ""))
    if leads:
        rep.findings.append("The alarm's lead (steps, seed mean ± sd) over the loss onset, which compares each run "
                            "with the control seeds, which a user would not have: " + ", ".join(leads)
                            + "; over the loss-collapse step, which a user watching the curve would see: "
                            + ", ".join(collapse_leads) + ". The alarm's step is its first validation for every "
                            "structural leak, so the leads measure the loss, not the alarm.")
    rep.sections += ["## The leak alarm", "", prose("partial_leaks", "alarm", first_val=f.first_val,
                                                    open_mass=f"{f.open_mass:g}"), "",
                     markdown_table(header, rows), ""]


def fill_section(rep: Report, f: Fill, runs: list[Run], out: Path) -> None:
    arm, what, rising, number, threshold, tol = f.arm, f.what, f.rising, f.number, f.threshold, f.tol
    rows = [[str(s.seed), steps_text([s.predicted]), steps_text([s.observed]),
             f"{s.signal_at_open:.0f}" if math.isfinite(s.signal_at_open) else "—",
             f"{s.other:.0f}" if s.other is not None else "—",
             f"{s.max_logit:.0f}" if s.max_logit is not None else "—",
             f"{s.closest:.0f}", "yes" if s.closed_before else "**no**", s.verdict, f"{s.back}, {s.closed}"]
            for s in f.seeds]
    side = "above" if rising else "below"
    other_what = FILLS[next(a for a in FILLS if a != arm)][1]
    header = ["seed", f"predicted: {what} first {side} {threshold:g} (probes every {f.probe} steps)",
              f"observed: future leak first > {tol:g}", f"{what} then", f"{other_what} then", "max logit then",
              f"{'highest' if rising else 'lowest'} {what} at any probe", "closed before?", "verdict",
              f"after it opened: probes with the {what} back on the closed side, and closed again"]
    n_open, n = f.n_open, len(f.seeds)
    shown = (f"**not tested** (it holds only vacuously, in its 'never, if the {what} never passes the threshold' "
             f"clause: the {what} came no closer than {f.nearest:.0f} to the threshold {threshold:g})"
             if n_open == 0 and f.verdict == "holds" else f"**{f.verdict}**")
    misses = [f"seed {x.seed} opened at {steps_text([x.observed])} against the predicted "
              f"{steps_text([x.predicted])}" + ("" if x.closed_before else " (before it)")
              for x in f.seeds if x.verdict == "fails"]
    jumps = fill_jumps(runs, FILLS[arm][0], f.seeds)
    rep.findings.append(
        f"{LABELS[arm]}: prediction {number} (the leak opens at the predicted probe or the next, in every seed): "
        f"{shown}; the leak opened in {n_open} of {n} seeds"
        + (f", at the predicted probe in {f.at_predicted}, at it or the next in {f.holds}" if n_open else "")
        + (f" ({'; '.join(misses)})" if misses else "")
        + (f". The probes are {f.probe} steps apart and the {what} jumped by {min(jumps):.0f} to {max(jumps):.0f} "
           f"across the predicted crossing: the test resolves the threshold to about that, not to the slack of "
           f"{f.slack:g}" if jumps else "")
        + "".join(f"; seed {x.seed} opened at a {what} of {x.signal_at_open:.0f}, "
                  f"{abs(x.signal_at_open - threshold):.0f} on the closed side of the threshold"
                  for x in f.seeds if x.verdict == "fails" and math.isfinite(x.signal_at_open)
                  and (x.signal_at_open <= threshold if rising else x.signal_at_open >= threshold))
        + f"; the -inf control's largest future leak at any probe: {f.ctrl_leak:g}.")
    if arm == "fill_1e4":
        opened = [(s.signal_at_open, s.max_logit) for s in f.seeds
                  if math.isfinite(s.signal_at_open) and s.max_logit is not None]  # margin, max logit
        past = [(m, x) for m, x in opened if m > threshold]
        short = [m for m, _ in opened if m <= threshold]
        rep.comparison.append(
            (f"The added fill here opened in {len(past)} of {len(opened)} seeds at mask margins past its threshold, "
             f"{min(m for m, _ in past):.0f} to {max(m for m, _ in past):.0f} (max logits "
             f"{min(x for _, x in past):.0f} to {max(x for _, x in past):.0f}): the additive mechanism, which needs "
             "a masked score to beat the visible ones by the fill's magnitude" if past else
             "The added fill never opened here past its threshold")
            + (f"; {plural(len(short), 'seed')} opened at a margin below it ({', '.join(f'{m:.0f}' for m in short)}), "
               "against the mechanism as the probe sees it." if short else ".") if opened else
            "The added fill never opened here.")
    else:
        floors = [s.signal_at_open for s in f.seeds if math.isfinite(s.signal_at_open)]
        rep.comparison.append(
            f"GPT-2's replacing fill opened here in {n_open} of {n} seeds"
            + (f", at visible floors of {min(floors):.0f} to {max(floors):.0f} (a row whose every visible score had "
               "fallen below the fill), the condition issue 15199's printout shows (visible scores below the fill); "
               "unlike the published reports it did not show in the loss here (below)" if floors else
               f": in no row did every visible score fall below the fill at this rate and length (the lowest row "
               f"maximum of the visible scores at any probe: {f.nearest:.0f}, against the fill's {f.fill:g}), so "
               "the published bug did not arise here") + ".")
    block = "fill" if rising else "replace"
    text = [prose("partial_leaks", block, fill=f"{f.fill:g}", slack=f"{f.slack:g}", absfill=f"{abs(f.fill):g}",
                  threshold=f"{threshold:g}", tol=f"{tol:g}", ctrl_leak=f"{f.ctrl_leak:g}",
                  rounded=f"{np.float32(1) + np.float32(math.exp(-f.slack)):.7f}"), "",
            markdown_table(header, rows), ""]
    if n_open:
        text += [prose("partial_leaks", "probe_blind" if rising else "probe_blind_replace", what=what,
                       mass=", ".join(steps_text([s.mass_first]) for s in f.seeds), open_mass=f"{f.open_mass:g}",
                       ln_open=f"{-math.log(f.open_mass):.1f}", absfill=f"{abs(f.fill):g}",
                       predicted=", ".join(r[1] for r in rows), at=f.mass_at, n=n), ""]
    if f.early:
        text += [prose("partial_leaks", "fill_misses", what=what, seeds=", ".join(str(e[0]) for e in f.early),
                       masses=", ".join(f"{m:.1e}" for _, m, _ in f.early),
                       leaks=", ".join(f"{v:.2f}" for *_, v in f.early), tol=f"{tol:g}"), ""]
    blind = blind_probes(runs, f.open_mass, tol)
    if blind:
        text += [f"At {plural(blind, 'probe')} over all seeds the attention weights put more than {f.open_mass:g} of "
                 f"a row's weight past the mask while the leak probe read at most {tol:g}: the perturbation probe's "
                 "blind spot, which the leak alarm shares (it uses the same probe on the same windows).", ""]
    back, closed = sum(s.back for s in f.seeds), sum(s.closed for s in f.seeds)
    if back:
        text += [prose("partial_leaks", "fill_closing", back=back, closed=closed, open=back - closed, what=what,
                       counter=plural(back - closed, "counter-example")), ""]
    name = "fill.png" if rising else "fill_where.png"
    rep.sections += [f"## {LABELS[arm]}: when the mask opens (prediction {number})", "", *text,
                     f"![{LABELS[arm]}]({name})", ""]
    fig_fill(runs, FILLS[arm][0], what, threshold, tol, out / name)


def windows_words(runs: list[Run]) -> str:
    """Which windows the leak alarm and the stability probe read, from the runs' config: the same evenly spread
    fixed validation windows when they ask for as many."""
    cb = runs[0].config.get("callbacks") or {}
    alarm, stab = (cb.get("leak_alarm") or {}).get("windows"), (cb.get("stability") or {}).get("windows")
    if alarm is not None and alarm == stab:
        return (f"The alarm and the stability probe read the same {alarm} fixed validation windows (spread evenly "
                "over the split), so the alarm's catch of an opening the attention weights show there is close to "
                "mechanical: it can miss one only through this blind spot or when the leak closes again before the "
                "next validation.")
    return (f"The alarm reads {alarm} fixed validation windows and the stability probe {stab}: a mask open on one "
            "set and closed on the other is a disagreement of windows, not of probes.")


def closed_words(a: Alarm) -> str:
    """Which runs the alarm's silence rests on: the -inf controls, and any other run whose mask never opened."""
    text = (f"the runs whose mask never opened are the {a.n_causal} -inf controls, where in float32 the future-leak "
            "signal is exactly zero, so only the honest-gap rule could have raised a false alarm")
    for arm, seed, steps, alarmed in a.probe_only:
        text += (f"; and {LABELS[arm]} seed {seed}, whose attention weights never put weight past the mask but whose "
                 f"leak probe read a leak at {plural(len(steps), 'probe')} ({', '.join(map(str, steps))}), "
                 + ("which the alarm caught" if alarmed else "none of them at a validation: the alarm missed it by "
                    "its own measure, and its silence there is counted as a correct one"))
    return text


def blind_probes(runs: list[Run], open_mass: float, tol: float) -> int:
    """Stability probes, over the runs, at which some row put more than ``open_mass`` of its weight on future keys
    (the attention weights: the mask open) while the perturbation probe read a future leak of at most ``tol``."""
    n = 0
    for r in runs:
        ms, mass = taken(r, "stab/future_mass_max")
        ls, leak = taken(r, "stab/future_leak")
        at = dict(zip(ls.tolist(), leak.tolist(), strict=True))
        n += sum(m > open_mass and st in at and at[st] <= tol for st, m in zip(ms.tolist(), mass.tolist(), strict=True))
    return n


def max_logit_words(arms: dict[str, list[Run]]) -> str:
    """The largest attention logit each fill arm and its control reached, and how many runs passed float16's
    largest finite value."""
    peaks = {a: [float(np.nanmax(taken(r, "stab/max_logit")[1])) for r in arms[a]]
             for a in (*FILL_ARMS, "fill_inf", "fill_inf_where") if a in arms}
    every = [v for vs in peaks.values() for v in vs]
    if not every:
        return "no fill arm ran here"
    return (f"the largest logits of the fill arms and their controls reached {min(every):,.0f} to {max(every):,.0f}; "
            f"{sum(v > 65504 for v in every)} of their {len(every)} runs passed float16's largest finite value, "
            "65,504")


def split_arms(f: PartialLeaksFindings) -> list[tuple[str, str, int, int]]:
    """The arms whose seeds split between two outcomes: (arm, outcome, runs with it, runs), where the loss
    collapsed in some runs and not others, or the mask opened in some and not others."""
    opened = {r.arm: r.opened for r in f.alarm.rows}
    out = []
    for a, rs in f.arms.items():
        for what, per_run in (("collapsed", f.collapses.get(a, [])), ("opened", opened.get(a, []))):
            k = sum(x is not None for x in per_run)
            if 0 < k < len(rs):
                out.append((a, what, k, len(rs)))
    return out


def split_text(f: PartialLeaksFindings) -> str:
    split = split_arms(f)
    if not split:
        return ("No arm's seeds split between outcomes: in every arm the loss collapsed in all seeds or in none, "
                "and the mask opened in all or in none (the glossary's \"Split seeds\": where they split, an "
                "interval from a few seeds covers less than 95%).")
    return ("Seeds that split between outcomes (the glossary's \"Split seeds\": an interval over such seeds covers "
            "less than 95%, so each comes with its count): " + "; ".join(
                f"{LABELS[a]}: {what} in {k} of {n} seeds" for a, what, k, n in split) + ".")


def setup_text(arms: dict[str, list[Run]], runs: list[Run]) -> str:
    wall = sweep_wall_seconds(runs)
    seeds = sorted({r.seed for r in runs})
    steps = sorted({r.summary["steps"] for r in runs})
    return (f"{len(runs)} runs: {len(arms)} arms x {'seed' if len(seeds) == 1 else 'seeds'} "
            f"{', '.join(map(str, seeds))}; "
            f"{' and '.join(map(str, steps))} steps; sweep wall time {wall / 60:.1f} min (first job's start to "
            f"last job's end, from the files).")


def write_report(runs: list[Run], out: Path, sweeps: list[Path]) -> Path:
    f = compute(runs)
    arms = f.arms
    fill_cfg = arms["fill_1e4"][0].config if "fill_1e4" in arms else {}
    where_cfg = arms["fill_where_1e4"][0].config if "fill_where_1e4" in arms else {}
    m = fill_cfg.get("model", {})
    header = [prose("partial_leaks", "intro", n_runs=plural(len(runs), "run"),
                    sweeps=", ".join(f"`{s}`" for s in sweeps),
                    fill=f"{(bug_of(fill_cfg) or {}).get('fill', float('nan')):g}",
                    d_k=m.get("n_embd", 0) // max(m.get("n_head", 1), 1) if m else "n/a",
                    lr=f"lr {fill_cfg.get('optim', {}).get('lr', float('nan')):g}",
                    lr_where=f"lr {where_cfg.get('optim', {}).get('lr', float('nan')):g}",
                    status=status_text([r.seed for r in runs], list(f.pred.get("seen_seeds") or []))), "",
              setup_text(arms, runs), "",
              prose("partial_leaks", "terms", level=f"{LEVEL:.0%}", n_boot=N_BOOT, method=METHOD,
                    n_seeds=seeds_words(arms.values(), noun=True)), ""]
    rep = Report(sections=["## Every arm at the end", "", arm_table(f), "", split_text(f), ""])
    seen_section(rep, f.seen)
    if f.onset is not None:
        onset_section(rep, f.onset)
    alarm_section(rep, f.alarm)
    for fill in f.fills:
        fill_section(rep, fill, arms[fill.arm], out)
    fig_curves(arms, out / "curves.png", {a: [r.summary.get("leak_detected_step") for r in rs]
                                          for a, rs in arms.items()})
    fig_honest(arms, out / "honest.png")
    fig_positions(arms, out / "positions.png")
    fig_future_mass(arms, out / "future_mass.png")
    links = explorers({LABELS[a]: arms[a][0] for a in EXPLORED if a in arms}, out)
    if links:
        rep.sections += ["Attention at the end, interactive (first seed): " + ", ".join(links) + ".", ""]
    sections = header + ["## Findings", ""] + [f"- {x}" for x in rep.findings] + [""]
    sections += [prose("partial_leaks", "changes"), ""] + rep.sections
    seen = f.seen_words
    structural = [a for a in STRUCTURAL if a in seen]
    collapsed = [a for a in structural if seen[a] == "collapses"]
    rep.comparison.insert(0, (
        f"Here {len(collapsed)} of {len(structural)} structural arms collapse "
        + ("(every one, the single-layer and off-by-one leaks included): agrees; a partial leak is as visible in the "
           "loss as a full one once training finds it, and the loss onsets above say when that is."
           if collapsed == structural else
           f"(not: {', '.join(LABELS[a] for a in structural if a not in collapsed)}): where a partial leak does "
           "not collapse the loss, the published symptom would miss it.")))
    for x in f.seen.fills:
        falls = x.word in ("collapses", "lower")
        rep.comparison.append(
            f"{LABELS[x.arm]}: " + ("as in the published reports" if falls else "unlike the published reports")
            + f", the loss here {'falls' if falls else 'does not fall'} next to the -inf control (it is "
            f"{x.word}). {training_text(x.training)}")
    sections += ["## How this compares with the published cases", "", prose("partial_leaks", "literature")]
    sections += [f"- {c}" for c in rep.comparison] + [""]
    sections += [prose("partial_leaks", "threats",
                       seen=", ".join(map(str, sorted(set(f.pred.get("seen_seeds") or [])))) or "none",
                       windows=windows_words(runs), closed=closed_words(f.alarm)), ""]
    sections += ["## Limits", "", prose("partial_leaks", "limits", n_seeds=seeds_words(arms.values(), noun=True),
                                        logits=max_logit_words(arms)), ""]
    path = out / "README.md"
    path.write_text("\n".join(sections))
    headline(f, runs).write(out)
    return path


def fill_word(fill: Fill) -> str:
    """A fill's verdict, 'not tested' where it holds only because its mask never opened."""
    return "not tested (never opened)" if fill.n_open == 0 and fill.verdict == "holds" else fill.verdict


def alarm_words(a: Alarm) -> str:
    """The alarm's counts with what holds by construction apart from what was informative: a structural leak is seen
    by the perturbation probe from the first step (its mask, not the model's use of it), a finite fill's mask opens
    only once training has moved the scores, and the -inf controls' future-leak signal is exactly 0 in float32."""
    structural = a.opened - a.fill_opened
    late = len(a.fill_delays)
    text = (f"the leak alarm fired on {a.fired_open - a.fill_fired} of the {structural} structural leaks at their "
            "first validation, which its probe guarantees by construction; on the finite fills, whose masks open "
            f"only once training has moved the scores, it caught {a.fill_fired} of the {a.fill_opened} runs whose "
            "attention weights opened (on the same windows its probe reads)")
    if late:
        text += (f" ({plural(late, 'run')} late, caught {', '.join(map(str, a.fill_delays))} steps after "
                 f"{'its' if late == 1 else 'their'} opening)")
    if a.closed_are_controls:
        return text + (f" and raised {'no alarm' if a.fired_closed == 0 else f'{a.fired_closed} alarms'} on the "
                       f"{a.closed} -inf controls (only its honest-gap rule could have fired there)")
    text += (f", and fired on {a.fired_closed} of the {a.closed} runs whose mask never opened by the attention "
             f"weights: the {a.n_causal} -inf controls (only its honest-gap rule could fire there)")
    missed = [x for x in a.probe_only if not x[3]]
    if missed:
        text += (f" and {plural(len(missed), 'finite-fill run')} whose own leak probe read a leak between "
                 "validations, a leak the alarm missed by its own measure")
    return text


def mismatch_words(fill: Fill) -> str:
    """Why an added-fill seed opened before the predicted probe, where the data say: the leak probe saw the mask open
    on its perturbed inputs while the attention on the original windows, where the margin is read, had not."""
    unseen = [seed for seed, mass, _ in fill.early if mass <= fill.open_mass]
    failed = [x for x in fill.seeds if x.verdict == "fails"]
    weights_right = [x for x in failed if x.mass_first == x.predicted]  # the attention weights opened as predicted
    late = [x for x in weights_right if x.observed is not None and x.predicted is not None
            and x.observed > x.predicted]
    words = []
    if unseen:
        words.append(f"in {plural(len(unseen), 'seed')} the leak probe, on perturbed inputs, read the mask open "
                     "while the attention weights on the same unperturbed windows put nothing past it")
    if late:
        words.append(f"in {plural(len(late), 'seed')} the attention weights opened at the predicted probe and the "
                     "leak probe read the opening later")
    return (": the failures are disagreements between the two readings of 'open'; " + "; ".join(words)
            if words else "")


def headline(f: PartialLeaksFindings, runs: list[Run]) -> Headline:
    """The front page's entry (tinygpt.experiments.index): one sentence from the findings and their verdicts, the
    predictions that did not hold named with what they measured."""
    question = "How do the mask bugs real code has show in the curves, and does the leak alarm catch them?"
    a, seen = f.alarm, f.seen
    parts = []
    if seen.leaks:
        lo, hi = min(x.ratio.value for x in seen.leaks), max(x.ratio.value for x in seen.leaks)
        parts.append(f"every structural leak (a mask off by one, missing in one layer, a window without its causal "
                     f"half) drove the teacher-forced loss to {lo:.1%}-{hi:.1%} of the causal model's while the "
                     f"honest loss got worse (prediction 1 {seen.verdict})")
    if seen.fills:
        quiet = [x for x in seen.fills if x.word == "indistinguishable"]
        if quiet:
            parts.append(("neither finite fill" if len(quiet) == len(seen.fills) == 2 else
                          ", ".join(LABELS[x.arm] for x in quiet))
                         + " showed in the loss (indistinguishable from its control)"
                         + ("; at the rates where they open, neither they nor their controls trained"
                            if seen.fills_untrained
                            else ""))
    parts.append(alarm_words(a) + f" (prediction 4 {a.verdict})")
    for fill in f.fills:
        if fill.arm == "fill_where_1e4":
            parts.append(f"GPT-2's replacing -1e4 fill opened in {fill.n_open} of {len(fill.seeds)} seeds once a "
                         f"row's visible scores fell below it (prediction 5, a check of the fill's arithmetic, "
                         f"{fill_word(fill)})")
    if f.onset is not None and f.onset.verdict != "holds":
        rows = [r for r in f.onset.rows if r.ratio is not None]
        off = [r for r in rows if r.verdict == "fails"]
        rest = [r for r in rows if r.verdict != "fails"]
        parts.append(f"prediction 2 (each leak leaves the causal band when the full one does) {f.onset.verdict}: "
                     + ", ".join(f"{LABELS[r.arm]} at {r.ratio.value:.2f}x" for r in off)
                     + (" missed it" if off else "")
                     + ("; " + ", ".join(f"{LABELS[r.arm]} {r.ratio.value:.2f}x ({r.verdict})" for r in rest)
                        if rest else ""))
    for fill in f.fills:
        if fill.number == 3 and fill_word(fill) != "holds":
            parts.append(f"the added fill opened at the predicted probe or the next in {fill.holds} of "
                         f"{len(fill.seeds)} seeds (prediction 3 {fill_word(fill)}" + mismatch_words(fill) + ")")
    new_seeds = data_status([r.seed for r in runs], f.pred.get("seen_seeds") or []) == "confirmatory"
    answer = "On seeds no run had used when the predictions were written, " if new_seeds else ""
    answer += "; ".join(parts)
    verdicts = [("1. every structural leak collapses the loss, none improves the honest loss", seen.verdict)]
    if f.onset is not None:
        verdicts.append(("2. each structural leak leaves the causal band when the full leak does", f.onset.verdict))
    verdicts += [(f"{fill.number}. the {'added' if fill.rising else 'replacing'} fill opens where its "
                  f"{fill.what} says", fill_word(fill)) for fill in f.fills if fill.number == 3]
    verdicts.append(("4. the alarm fires on every run whose mask opened, on none whose mask did not", a.verdict))
    verdicts += [(f"{fill.number}. the replacing fill opens where its visible floor says (a check of the fill's "
                  "arithmetic)", fill_word(fill)) for fill in f.fills if fill.number == 5]
    status = status_text([r.seed for r in runs], list(f.pred.get("seen_seeds") or []))
    if new_seeds:
        status += (" Predictions 2, 3 and 5 repeat outcomes the earlier sweeps or the pilot had shown (Threats): on "
                   "those the new seeds replicate.")
    short = []
    if seen.leaks:
        short.append(f"every structural leak drove the teacher-forced loss to {lo:.0%}-{hi:.0%} of the causal "
                     "model's while generation got worse")
    short.append(f"the leak alarm caught {a.fill_fired} of the {a.fill_opened} finite-fill runs whose mask opened "
                 f"during training ({len(a.fill_delays)} late; the {a.opened - a.fill_opened} structural leaks it "
                 "catches by construction) and raised "
                 + (f"no alarm on the {a.closed} -inf controls" if a.closed_are_controls and a.fired_closed == 0 else
                    f"{a.fired_closed} alarms on the {a.closed} runs whose mask never opened"
                    + (f" ({sum(not x[3] for x in a.probe_only)} of them a leak its own probe read between "
                       "validations)" if any(not x[3] for x in a.probe_only) else "")))
    if seen.fills and all(x.word == "indistinguishable" for x in seen.fills):
        short.append("the finite fills never showed in the loss" + (", at learning rates where neither they nor "
                                                                    "their controls trained"
                                                                    if seen.fills_untrained else ""))
    failed = [name.split(".")[0] for name, v in verdicts if v not in ("holds",) and not v.startswith("not tested")]
    if failed:
        short.append(f"prediction{'s' if len(failed) > 1 else ''} {' and '.join(failed)} did not hold")
    brief = "; ".join(short)
    return Headline("partial_leaks", "The leaks real code has", question, answer[0].upper() + answer[1:] + ".",
                    "curves.png", verdicts, status, brief[0].upper() + brief[1:] + " (every verdict: the index).")


# what this report reads of each run: kept beside it (tinygpt.analysis.records), so it regenerates without the runs
KEEP = Reads(summary=SUMMARY, history=("train/loss", "val/", "leak/", "stab/"),
             window_measures=("last", "copy", "probe", "honest"), position_means=True,
             arrays=("honest_window_position", "probe_index"), pictured=explored)

"""Experiment 2, design 3's report (docs/experiments/sqrt_dk_stability/DESIGN.md): does 1/sqrt(d_k) help stability,
as the learning rate at which training stops working? Every number comes from the runs' kept records
(tinygpt.analysis.records: ``KEEP`` is what this report reads), every verdict word from
tinygpt.experiments.sqrt_dk_stability.edge, every sentence from report.md's blocks.
"""

from __future__ import annotations

import math
import statistics
from pathlib import Path

import numpy as np

from tinygpt.analysis.figures import finish_axes, markdown_table, save
from tinygpt.analysis.records import Reads
from tinygpt.analysis.stats import LEVEL, Estimate
from tinygpt.analysis.sweep import ReportError, Run, predictions, sweep_wall_seconds
from tinygpt.analysis.templates import DOCS, design_commit, plural, prose
from tinygpt.experiments.index import Headline
from tinygpt.experiments.sqrt_dk_stability import edge, numbers
from tinygpt.experiments.sqrt_dk_stability.numbers import LABELS, Arm, Verdict
from tinygpt.model.gpt import INIT_STD

NAME = "sqrt_dk_stability"
SMALL_DK = 16  # design 2's smallest width (configs/arm/sqrt_dk/*_dk16_*), where the threats weigh the shift
KEEP = Reads(summary=("status", "diverged", "divergence", "val_loss", "vocab_size", "steps", "diagnostics",
                      "train_seconds"),
             history=("train/loss", "val/loss", "stab/max_logit", "stab/jacobian_trace"))
STATEMENTS = {  # each prediction as DESIGN.md states it
    "Q1": "positive control: qk-layernorm raises the scaled arm's edge",
    "S1": "the factor raises the rate at which training stops working (the unscaled edge is lower)",
    "S2": "by the reparametrisation's amount, log10(d_k^(1/4))",
    "S3": "dose response: the edge moves by -1/2 decade per decade of scale",
}
CRITERIA = {
    "Q1": lambda p: "interval above 0",
    "S1": lambda p: "interval below 0",
    "S2": lambda p: f"interval inside {p['shift_none']:+.3f} +- {p['shift_band']:g}",
    "S3": lambda p: f"interval inside {p['slope']:+.2f} +- {p['slope_band']:g}",
}




def rate(x: float) -> str:
    return f"{x:.3g}"


def edge_text(a: Arm, est: Estimate) -> str:
    """An arm's edge as a rate with its interval, 'at least' / 'at most' where a seed's edge is a bound."""
    if not math.isfinite(est.lo):
        return f"{rate(10 ** est.value)} (no interval: one seed)"
    if a.edges.censored:  # a bound: its interval's far side means nothing, so only the seeds' own bound is given
        return one_sided({a.name: a.edges}, {a.name: 1}, lambda v: rate(10 ** v))
    return f"{rate(10 ** est.value)} [{rate(10 ** est.lo)}, {rate(10 ** est.hi)}]"


def one_sided(parts: dict[str, edge.Edges], weights: dict[str, float], fmt) -> str:
    """A combination that a censored edge makes a bound, given one-sided by its seeds: 'at least X in every seed'
    (the smallest per-seed value) or 'at most X in every seed'."""
    word = edge.bound_word(parts, weights)
    per_seed = sum(w * parts[n].values for n, w in weights.items())
    x = per_seed.min() if word == "at least " else per_seed.max()
    return f"{word}{fmt(float(x))} in every seed" if word in ("at least ", "at most ") else f"{word}{fmt(float(x))}"


def bounds_text(a: Arm) -> str:
    hi, lo = int(a.edges.high.sum()), int(a.edges.low.sum())
    parts = ([f"{hi} trained at the top rate"] if hi else []) + ([f"{lo} failed at the lowest"] if lo else [])
    return ", ".join(parts) or "none"


def shift_text(parts: dict[str, edge.Edges], name: str) -> str:
    """An arm's edge minus the scaled arm's, with its interval, 'at least' / 'at most' where a censored edge makes it
    a bound."""
    weights = {name: 1, "sqrt": -1}
    if edge.bound_word(parts, weights):
        return one_sided(parts, weights, lambda v: f"{v:+.3f}")
    return edge.combination(parts, weights).format(3, signed=True)


def edges_table(found: dict[str, Arm]) -> str:
    rows = []
    for name, a in found.items():
        est = numbers.edge_estimate(a)
        per_seed = ", ".join(f"{rate(10 ** v)}" for v in a.edges.values)
        shift = (shift_text({n: found[n].edges for n in found}, name) if name != "sqrt" and "sqrt" in found
                 else "-")
        rows.append([LABELS[name], edge_text(a, est), est.format(3), per_seed, bounds_text(a), shift])
    return markdown_table(["arm", "edge (lr)", "edge (log10 lr)", "per seed (lr)", "seeds whose edge is a bound",
                           "shift from 1/sqrt(d_k) (decades)"], rows)


def predictions_table(found: list[Verdict], pred: dict) -> str:
    rows = [[v.key, STATEMENTS[v.key], f"{v.what}: {v.estimate.format(3, signed=True)}", CRITERIA[v.key](pred),
             f"**{v.verdict}**"] for v in found]
    missing = [k for k in STATEMENTS if k not in {v.key for v in found}]
    rows += [[k, STATEMENTS[k], "its arms did not run", CRITERIA[k](pred), "not tested"] for k in missing]
    return markdown_table(["", "prediction", "measure", "holds when", "verdict"], rows)


def outcomes_table(found: dict[str, Arm]) -> str:
    rates = sorted({x for a in found.values() for x in a.rates})

    def cell(a: Arm, x: float) -> str:
        if x not in a.rates:
            return "-"
        i = a.rates.index(x)
        k, n = int(a.failed[:, i].sum()), a.failed.shape[0]
        finite = a.losses[:, i][np.isfinite(a.losses[:, i])]
        loss = f"{finite.mean():.2f}" if len(finite) else "diverged"
        return f"{k}/{n} ({loss})"

    return markdown_table(["arm"] + [rate(x) for x in rates],
                          [[LABELS[n]] + [cell(a, x) for x in rates] for n, a in found.items()])


def sensitivity_table(found: dict[str, Arm]) -> tuple[str, float]:
    rows, initial = [], math.nan
    for name, a in found.items():
        est, initial = numbers.sensitivity(a)
        rows.append([LABELS[name], est.format(3)])
    return markdown_table(["arm", "LR sensitivity (nats)"], rows), initial


def median_range(values: list[float]) -> str:
    v = [x for x in values if math.isfinite(x)]
    if not v:
        return "-"
    return f"{statistics.median(v):.3g} ({min(v):.3g}-{max(v):.3g}, {len(v)})"


def mechanism_table(found: dict[str, Arm]) -> str:
    rows = []
    for name, a in found.items():
        side = numbers.at_the_edge(a)
        rows.append([LABELS[name]] + [median_range([numbers.last_probe(r, key) for r in side[kind]])
                                      for key in ("stab/max_logit", "stab/jacobian_trace")
                                      for kind in ("trained", "failed")])
    return markdown_table(["arm", "largest logit: trained", "largest logit: failed", "Jacobian trace: trained",
                           "Jacobian trace: failed"], rows)


def bigram_table(found: dict[str, Arm]) -> str:
    """Post hoc: the rate at which each arm's final loss reaches the bigram loss, with its shift from 1/sqrt(d_k)."""
    parts = numbers.bigram_edges(found)
    rows = []
    for name, e in parts.items():
        est = edge.combination({name: e}, {name: 1})
        shift = shift_text(parts, name) if name != "sqrt" and "sqrt" in parts else "-"
        where = (one_sided({name: e}, {name: 1}, lambda v: rate(10 ** v)) if e.censored else
                 f"{rate(10 ** est.value)} [{rate(10 ** est.lo)}, {rate(10 ** est.hi)}]")
        rows.append([LABELS[name], where, shift])
    return markdown_table(["arm", "final loss reaches the bigram loss at (lr)", "shift from 1/sqrt(d_k) (decades)"],
                          rows)


def fig_edges(found: dict[str, Arm], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.8))
    for i, (name, a) in enumerate(found.items()):
        color = f"C{i}"
        ax1.plot(a.rates, a.failed.mean(0), "o-", color=color, label=LABELS[name])
        ax1.axvline(10 ** numbers.edge_estimate(a).value, color=color, ls=":", lw=1)
        finite = np.isfinite(a.losses)
        mean = np.where(finite, a.losses, 0).sum(0) / np.maximum(finite.sum(0), 1)
        mean[~finite.any(0)] = np.nan  # a rate where every seed diverged has no loss to plot
        ax2.plot(a.rates, mean, "o-", color=color, label=LABELS[name])
    for ax in (ax1, ax2):
        ax.set_xscale("log")
    finish_axes(ax1, "learning rate", "fraction of seeds that failed", "where training stops working (dotted: edges)")
    finish_axes(ax2, "learning rate", "final validation loss (mean over seeds)", "loss against rate", legend=False)
    return save(fig, path)


def baseline(runs: list[Run], key: str) -> float:
    """The median over the runs of a count baseline's loss (unigram_loss, bigram_loss: the same windows in every run);
    a run that diverged before its end-of-run diagnostics has none."""
    values = [float(d[key]) for r in runs if key in (d := r.summary.get("diagnostics") or {})]
    return statistics.median(values) if values else math.nan


def size_words(shift: Estimate, predicted: float) -> str:
    """Whether the measured shift's interval excludes the predicted one, and on which side."""
    if predicted < shift.lo:
        return f"the interval excludes the predicted {predicted:+.3f}: the shift is smaller than the argument's"
    if predicted > shift.hi:
        return f"the interval excludes the predicted {predicted:+.3f}: the shift is larger than the argument's"
    return f"the interval includes the predicted {predicted:+.3f}"


def reading(found: dict[str, Arm], runs: list[Run], pred: dict, words: dict[str, Verdict]) -> dict[str, str]:
    """The numbers the "Reading it" block states, each computed here (after the referee's reading)."""
    diverged = sum(bool(r.summary.get("diverged")) for r in runs)
    failed = sum(int(a.failed.sum()) for a in found.values())
    out = {"n_runs": str(len(runs)), "diverged": str(diverged), "failed": str(failed),
           "stall": ("a too-high rate stalls training on the unigram plateau, it does not blow it up, so \"stability\" "
                     "here is the rate at which training stops getting anywhere, not the divergence the cited papers "
                     "study") if diverged == 0 else "some runs diverged: the table below marks them"}
    if {"none", "sqrt"} <= set(found):
        step = found["sqrt"].edges.step
        steps = (found["none"].edges.values - found["sqrt"].edges.values) / step
        out["per_seed"] = ", ".join(f"{v:+.0f}" for v in steps)
        s1 = words["S1"].estimate
        out["ratio"] = f"{10 ** -s1.value:.1f}x [{10 ** -s1.hi:.1f}x, {10 ** -s1.lo:.1f}x]"
        predicted = float(pred["shift_none"])
        out["size"] = size_words(s1, predicted)
        best = {n: float(np.nanmin(np.where(np.isfinite(a.losses), a.losses, np.nan).mean(0)))
                for n, a in found.items()}
        out["best"] = ", ".join(f"{LABELS[n]} {v:.2f}" for n, v in best.items())
        bigram = baseline(runs, "bigram_loss")
        beat = [r for row in found["none"].runs for r in row if not numbers.above_bigram(r)]
        out["none_beats_bigram"] = f"{len(beat)} of {found['none'].failed.size}"
        out["bigram"] = f"{bigram:.2f}"
        lines = []
        for fraction in (0.25, 0.75):
            other = numbers.arms(runs, fraction)
            e = edge.combination({n: other[n].edges for n in ("none", "sqrt")}, {"none": 1, "sqrt": -1})
            lines.append(f"{fraction:g}: {e.format(3, signed=True)}")
        out["lines"] = "; ".join(lines)
    parts = numbers.bigram_edges(found)
    if {"qknorm", "sqrt"} <= set(parts):
        out["qk_bigram"] = shift_text(parts, "qknorm")
    higher = [n for n, a in found.items() if (side := numbers.at_the_edge(a))["trained"] and side["failed"]
              and statistics.median(numbers.last_probe(r, "stab/jacobian_trace") for r in side["failed"])
              > statistics.median(numbers.last_probe(r, "stab/jacobian_trace") for r in side["trained"])]
    out["trace_higher"] = f"{len(higher)} of {len(found)}"
    return out


def q1_bound(found: dict[str, Arm]) -> str:
    """'at least ' where the qk-layernorm arm's edge is a bound (some seed trained at the top rate)."""
    return edge.bound_word({n: found[n].edges for n in ("qknorm", "sqrt")}, {"qknorm": 1, "sqrt": -1})


def answer(words: dict[str, Verdict], found: dict[str, Arm]) -> dict[str, str]:
    """The answer block's sentences, each from a verdict."""
    s1 = words.get("S1")
    if s1 is None:
        stability = "not tested (the scaled or the unscaled arm did not run)"
    elif s1.verdict == "holds":
        stability = (f"on the design's measure, yes (S1 holds): without the factor, training fails to get below "
                     f"the failed-to-train line at a rate {-s1.estimate.value:.2f} decades lower "
                     f"(edge(unscaled) - edge(1/sqrt(d_k)) = {s1.estimate.format(2, signed=True)} decades). That line "
                     "is halfway from the unigram to the bigram loss: \"trained\" here means \"left the unigram "
                     "plateau within the budget\", not \"trained well\" (below)")
    elif s1.verdict == "fails":
        stability = f"no (S1 fails): without the factor training works up to higher rates ({s1.estimate.format(2)})"
    else:
        stability = f"not shown (S1 undecided at the {LEVEL:.0%} level: {s1.estimate.format(2)} decades)"
    size = "; ".join(f"{k} {words[k].verdict} ({words[k].what} {words[k].estimate.format(2, signed=True)})"
                     for k in ("S2", "S3") if k in words) or "not tested"
    q1 = words.get("Q1")
    if q1 is None:
        control = "not tested (the qk-layernorm arm did not run)"
    elif q1.verdict == "holds":
        shift = one_sided({n: found[n].edges for n in ("qknorm", "sqrt")}, {"qknorm": 1, "sqrt": -1},
                          lambda v: f"{v:+.2f} decades")
        control = (f"on the design's line, yes (Q1 holds: {shift}"
                   "); this says the measure responds to a remedy for logit growth, not that logit growth is "
                   "what stops training (below)")
    else:
        control = (f"no (Q1 {q1.verdict}: {q1.estimate.format(2, signed=True)} decades): qk-layernorm did not raise "
                   "the scaled arm's edge")
    return {"stability": stability, "size": size, "control": control}


def write_report(runs: list[Run], out: Path, sweeps: list[Path]) -> Path:
    pred = predictions(runs, NAME)
    missing = [k for k in ("failed_to_train", "shift_none", "shift_band", "slope", "slope_band") if k not in pred]
    if missing:
        raise ReportError(f"these runs carry no {missing[0]} prediction; rerun the sweep at this version.")
    found = numbers.arms(runs, float(pred["failed_to_train"]))
    verdicts = numbers.verdicts(found, pred)
    words = {v.key: v for v in verdicts}
    cfg = runs[0].config
    fig_edges(found, out / "edges.png")
    step = next(iter(found.values())).edges.step
    seeds = sorted({r.seed for r in runs})
    rates = sorted({x for a in found.values() for x in a.rates})
    sens, initial = sensitivity_table(found)
    lines = [
        prose(NAME, "intro", n_runs=plural(len(runs), "run"), sweeps=", ".join(f"`{s}`" for s in sweeps),
              design=design_commit(DOCS / NAME / "DESIGN.md")), "",
        prose(NAME, "setup", dk=numbers.d_k(runs[0]), init_std=INIT_STD, n_layer=cfg["model"]["n_layer"],
              block=cfg["model"]["block_size"], batch=cfg["data"]["batch_size"], steps=cfg["trainer"]["max_steps"],
              warmup=cfg["optim"]["warmup_steps"], min_lr=f"{cfg['optim']['min_lr']:g}",
              clip=cfg["trainer"]["gradient_clip_val"], arms=", ".join(LABELS[n] for n in found),
              lrs=", ".join(rate(x) for x in rates), per_decade=f"{1 / step:.0f}", seeds=", ".join(map(str, seeds)),
              wall=f"{sweep_wall_seconds(runs) / 60:.1f}"), "",
        prose(NAME, "answer", **answer(words, found)), "",
        "## Predictions", "", predictions_table(verdicts, pred), "",
        *([prose(NAME, "reading", **reading(found, runs, pred, words)), ""] if {"none", "sqrt", "qknorm"} <= set(found)
          else []),
        prose(NAME, "terms", val=cfg["data"]["val_windows"], fraction=float(pred["failed_to_train"]),
              unigram=f"{baseline(runs, 'unigram_loss'):.2f}",
              bigram=f"{baseline(runs, 'bigram_loss'):.2f}", level=f"{LEVEL:.0%}"), "",
        "## Where training stops working", "", "![edges](edges.png)", "",
        edges_table(found), "",
        prose(NAME, "outcomes", n_seeds=len(seeds)), "",
        outcomes_table(found), "",
        "## Beside the verdicts", "",
        prose(NAME, "bigram", bigram=f"{baseline(runs, 'bigram_loss'):.2f}"), "",
        bigram_table(found), "",
        prose(NAME, "sensitivity", n_rates=len(rates), initial=f"{initial:.3f}", level=f"{LEVEL:.0%}"), "",
        sens, "",
        prose(NAME, "mechanism", n_layer=cfg["model"]["n_layer"], windows=cfg["callbacks"]["stability"]["windows"]),
        "", mechanism_table(found), "",
        prose(NAME, "threats", steps=cfg["trainer"]["max_steps"], dk=numbers.d_k(runs[0]),
              n_layer=cfg["model"]["n_layer"], step=f"{step:.3f}", n_seeds=len(seeds), dof=len(seeds) - 1,
              small_dk=SMALL_DK, small_shift=f"{math.log10(SMALL_DK ** 0.25):.2f}",
              min_p=2 / 2 ** len(seeds)), "",  # a sign test's smallest two-sided p: every seed on one side
        prose(NAME, "literature"), "",
    ]
    path = out / "README.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    headline(verdicts, pred, q1_bound(found) if {"qknorm", "sqrt"} <= set(found) else "").write(out)
    return path


def headline(found: list[Verdict], pred: dict, q1_bound: str = "") -> Headline:
    """The front page's entry: the answer to "does 1/sqrt(d_k) help stability?" from S1, with S2 and Q1 beside it."""
    words = {v.key: v for v in found}
    s1, s2, q1 = words.get("S1"), words.get("S2"), words.get("Q1")
    if s1 is not None and s1.verdict == "holds":
        answer = (f"At d_k = 256, GPT-2's init and 300 steps, training without the factor fails to leave the unigram "
                  f"plateau at a learning rate {-s1.estimate.value:.2f} decades lower than with it "
                  f"({s1.estimate.format(2, signed=True)}; S1 holds)")
        if pred["shift_none"] < s1.estimate.lo:
            answer += f", less than the Adam argument's {-pred['shift_none']:.2f}"
    elif s1 is not None and s1.verdict == "fails":
        answer = f"No: without the factor training works up to higher rates ({s1.estimate.format(2)} decades; S1 fails)"
    else:
        answer = "Not shown: the edge's shift is undecided" + (f" ({s1.estimate.format(2)} decades)" if s1 else "")
    if s2 is not None:
        answer += f" (S2 {s2.verdict})"
    if q1 is not None:
        answer += f"; qk-layernorm raises that rate (Q1 {q1.verdict})"
    return Headline(NAME, "How high a learning rate still trains, with and without 1/sqrt(d_k)",
                    "Does 1/sqrt(d_k) help stability: up to what learning rate does training still work with it and "
                    "without it?", answer + ".", "edges.png",
                    [(f"{k}: {STATEMENTS[k]}", words[k].verdict) for k in STATEMENTS if k in words],
                    status="Design 3, committed before its runs, on seeds no earlier run used. S1's direction was "
                           "known from design 2's grid (a replication on new seeds); S2's and S3's sizes come from "
                           "the argument, and Q1 was not informed by any run.")

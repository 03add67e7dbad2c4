"""Experiment 4's report (docs/experiments/positions/DESIGN.md): why are positional encodings necessary, and when is
the causal mask enough? Every number comes from the runs' kept records (``KEEP``) or the init draws beside them
(init_draws.json), every verdict word from tinygpt.experiments.positions.numbers (stats.in_range), every sentence
from report.md's blocks.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tinygpt.analysis.figures import finish_axes, markdown_table, save
from tinygpt.analysis.records import Reads
from tinygpt.analysis import stats
from tinygpt.analysis.stats import LEVEL
from tinygpt.analysis.sweep import ReportError, Run, predictions, sweep_wall_seconds
from tinygpt.analysis.templates import DOCS, design_commit, plural, prose
from tinygpt.experiments.index import Headline
from tinygpt.experiments.positions import init_draws, measures, numbers
from tinygpt.experiments.positions.numbers import LABELS, Verdict

NAME = "positions"
KEEP = Reads(summary=("status", "val_loss", "vocab_size", "steps", "train_seconds", "n_params"), history=("val/loss",),
             arrays=("probe_init_sse", "probe_end_sse", "probe_sst", "long_buckets", "long_curve"))
INPUTS = (init_draws.FILE,)  # committed beside the report, read by it, not written by it
INIT_DRAWS = DOCS / NAME / init_draws.FILE
STATEMENTS = {  # each prediction as DESIGN.md states it
    "M1": "random tokens, causal, no positions: the variance falls as the average of t + 1 independent values "
          "predicts",
    "M2": "Shakespeare, causal, no positions: the same, with the corpus's own token coincidences",
    "M3": "no mask, no positions: the variance does not depend on t",
    "P1": "the trained causal model without positions knows where it is",
    "P2": "... but less well than with the learned table",
    "P3": "before training, the mask alone already puts position in the hidden states",
    "P4": "no mask, no positions: nothing to read",
    "C1": "no positions costs nothing beyond the band",
    "C2": "RoPE: the same",
    "C3": "ALiBi: the same",
    "L1": "ALiBi extrapolates: its loss past T stays within the band of its in-range loss",
    "L2": "RoPE does not: its loss past T rises by more than the threshold",
    "L3": "without positions the loss past T rises too",
}
CRITERIA = {
    "M1": lambda p: f"interval inside +-{p['m_band']:g}",
    "M2": lambda p: f"interval inside +-{p['m_band']:g}",
    "M3": lambda p: f"interval inside +-{p['m3_band']:g}",
    "P1": lambda p: "interval above 0",
    "P2": lambda p: "interval below 0",
    "P3": lambda p: "interval above 0",
    "P4": lambda p: f"every layer's interval below {p['p4_max']:g}",
    "C1": lambda p: f"interval inside +-{p['c_band']:g}",
    "C2": lambda p: f"interval inside +-{p['c_band']:g}",
    "C3": lambda p: f"interval inside +-{p['c_band']:g}",
    "L1": lambda p: f"interval below {p['l_band']:+g}",
    "L2": lambda p: f"interval above {p['l_rope']:+g}",
    "L3": lambda p: f"interval above {p['l_band']:+g}",
}
CHECKS = ("M1", "M2", "M3", "P4")  # checks of the init's arithmetic or exact by equivariance (DESIGN.md)




def base(key: str) -> str:
    return key.split()[0]


def shown(est) -> str:
    """An estimate with its interval: 3 decimals, or 2 significant digits in scientific notation where the whole
    interval is within 5e-4 of 0 (three decimals would print it as +0.000 [+0.000, +0.000])."""
    if max(abs(est.value), abs(est.lo), abs(est.hi)) < 5e-4:
        return f"{est.value:+.1e} [{est.lo:+.1e}, {est.hi:+.1e}]"
    return est.format(3, signed=True)


def predictions_table(found: list[Verdict], pred: dict) -> str:
    rows = [[v.key, STATEMENTS[base(v.key)] + (" (a check)" if base(v.key) in CHECKS else ""),
             f"{v.what}: {shown(v.estimate)}", CRITERIA[base(v.key)](pred), f"**{v.verdict}**"]
            for v in found]
    return markdown_table(["", "prediction", "measure", "holds when", "verdict"], rows)


def words_of(found: list[Verdict], key: str) -> list[Verdict]:
    return [v for v in found if base(v.key) == key]


def said(found: list[Verdict], key: str) -> str:
    """'M3 holds' / 'C1 holds at T=64, undecided at T=256'."""
    vs = words_of(found, key)
    if not vs:
        return f"{key} not tested"
    if len({v.verdict for v in vs}) == 1:
        return f"{key} {vs[0].verdict}" + (" at every context" if len(vs) > 1 else "")
    return f"{key} " + ", ".join(f"{v.verdict} at {v.key.split()[1]}" for v in vs)


def all_hold(found: list[Verdict], *keys: str) -> bool:
    vs = [v for k in keys for v in words_of(found, k)]
    return bool(vs) and all(v.verdict == "holds" for v in vs)


def at(found: list[Verdict], key: str, digits: int = 3, unit: str = "") -> str:
    """A prediction's estimates at each context: '+0.175 [+0.164, +0.186] nats at T = 64 and ... at T = 256'."""
    vs = words_of(found, key)
    return " and ".join(f"{v.estimate.format(digits, signed=True)}{unit} at {v.key.split()[1].replace('=', ' = ')}"
                        for v in vs if len(v.key.split()) > 1) or "not measured"


def versus(found: list[Verdict], key: str) -> str:
    """A loss difference from learned's at each context, in words: 'lower than the learned table's by 0.139
    [0.129, 0.148] nats at T = 64', 'higher ... by', or 'within ... of it' where the interval holds 0."""
    out = []
    for v in words_of(found, key):
        e, where = v.estimate, v.key.split()[1].replace("=", " = ")
        if e.hi < 0:
            out.append(f"lower than the learned table's by {-e.value:.3f} [{-e.hi:.3f}, {-e.lo:.3f}] nats at {where}")
        elif e.lo > 0:
            out.append(f"higher than the learned table's by {e.value:.3f} [{e.lo:.3f}, {e.hi:.3f}] nats at {where}")
        else:
            out.append(f"{e.format(3, signed=True)} nats from the learned table's at {where} (no difference shown)")
    return " and ".join(out) or "not measured"


def answer(found: list[Verdict]) -> dict[str, str]:
    """The answer block's sentences, each from verdicts and the estimates they judge."""
    if all_hold(found, "M3", "P4"):
        necessary = ("Without the causal mask, position cannot be recovered at all: a model with neither mask nor "
                     "positions gives every position the same output variance in expectation and a probe reads no "
                     "position at any "
                     f"layer ({said(found, 'M3')}, {said(found, 'P4')}; exact by equivariance, checks of the "
                     "arithmetic at init, no trained bidirectional model). There, positions are necessary.")
    else:
        necessary = (f"The equivariance checks did not come out as the argument says ({said(found, 'M3')}, "
                     f"{said(found, 'P4')}): no answer is drawn from them.")
    costs = words_of(found, "C1")
    if costs and all(v.estimate.lo > 0 for v in costs):
        necessary += (" With the mask position is recoverable, but leaving it out still costs: the validation loss "
                      f"without positions is {versus(found, 'C1')} ({said(found, 'C1')}), so here explicit positions "
                      "are necessary too.")
    if all_hold(found, "P1"):
        enough = (f"With the mask, position becomes linearly decodable from a model without positions: a probe on "
                  f"its last block reaches R^2 {at(found, 'P1', 2)} ({said(found, 'P1')}), less than with the learned "
                  f"table (the difference, {at(found, 'P2', 2)}; {said(found, 'P2')}), and some of it before any "
                  f"training ({at(found, 'P3', 2)}; {said(found, 'P3')}). Decodable is not used: the probe does not "
                  "say the model relies on it.")
    else:
        enough = (f"Whether position is decodable from a trained model without positions was not shown "
                  f"({said(found, 'P1')}; {said(found, 'P3')}).")
    c1 = said(found, "C1")
    if all_hold(found, "C1"):
        enough += (f" Within the trained context it costs nothing beyond the band against the learned table "
                   f"({at(found, 'C1', unit=' nats')}; {c1}).")
    elif costs and all(v.estimate.lo > 0 for v in costs):
        enough += (f" But within the trained context it does not match the table at this scale and budget ({c1} "
                   "against the design's band, above).")
    else:
        enough += f" Its validation loss is {versus(found, 'C1')} ({c1})."
    enough += f" Past the trained context its loss rises by {at(found, 'L3', unit=' nats')} ({said(found, 'L3')})."
    relative = (f"RoPE's validation loss is {versus(found, 'C2')} ({said(found, 'C2')}), and past T it rises by "
                f"{at(found, 'L2', unit=' nats')} ({said(found, 'L2')}); ALiBi's is {versus(found, 'C3')} "
                f"({said(found, 'C3')}), and past T it rises by {at(found, 'L1', unit=' nats')} ({said(found, 'L1')}).")
    return {"necessary": necessary, "enough": enough, "relative": relative}


def probe_words(ctxs: list[numbers.Context], draws: dict) -> dict[str, str]:
    """The probe block's computed sentences: the none model's typical error in positions at the end, RoPE's and
    ALiBi's last-block R^2, and how the init draws' variance slopes and probes line up."""
    rmse, mean, ends, inits = [], [], [], []
    for c in ctxs:
        T = c.T
        var_t = (T * T - 1) / 12  # the positions 0 .. T - 1's variance about their mean
        end, init = c.layers["end"], c.layers["init"]
        if "none" in end:
            rmse.append(f"{math.sqrt(max(0.0, 1 - end['none'][-1]) * var_t):.1f} positions at T = {T}")
            mean.append(f"{math.sqrt(var_t):.1f} at T = {T}")
        rel = [p for p in ("rope", "alibi") if p in end]
        ends.append(", ".join(f"{LABELS[p]} {end[p][-1]:+.3f}" for p in rel) + f" at T = {T}")
        inits.append(", ".join(f"{LABELS[p]} {init[p][-1]:+.3f}" for p in rel) + f" at T = {T}")
    slope = {n: float(numbers.slopes(draws["causal"][n]["power"]).mean()) for n in init_draws.SETS}
    r2 = {n: float(np.asarray(draws["causal"][n]["r2"])[:, -1].mean()) for n in init_draws.SETS}
    steeper = min(slope, key=slope.get)
    other = max(slope, key=slope.get)
    agrees = r2[steeper] > r2[other]
    m_vs_p = (f"on {steeper} windows the variance falls more steeply (slope {slope[steeper]:+.3f} against "
              f"{slope[other]:+.3f} on {other} ones) and the probe at init reads {'more' if agrees else 'less'} "
              f"(R^2 {r2[steeper]:+.3f} against {r2[other]:+.3f})")
    return {"rmse": " and ".join(rmse) or "-", "rmse_mean": " and ".join(mean) or "-",
            "relative_end": "; ".join(e for e in ends if e), "relative_init": "; ".join(inits), "m_vs_p": m_vs_p}


def context_words(ctxs: list[numbers.Context]) -> dict[str, str]:
    """Computed sentences on how each position's loss moves between the contexts (the learned table's handicap at the
    longer one), none's in-range loss within the window, the learned table's probe at the embedding, and the final
    loss against the summary's (every validation window) where the end of run scored fewer."""
    losses, none_rope, within, embed, gaps, fell = {}, [], [], [], [], []
    for c in ctxs:
        T, est = c.T, c.loss
        losses[T] = {p: e.value for p, e in est.items()}
        if {"none", "rope"} <= set(est):
            none_rope.append(f"{(est['none'] - est['rope']).format(3, signed=True)} at T = {T}")
        if "none" in c.buckets:
            b = c.buckets["none"]
            within.append(f"[0, T/2) {b[0]:.3f} and [T/2, T) {b[1]:.3f} at T = {T}")
        for when in ("init", "end"):
            if "learned" in c.arms:
                embed.append(f"{c.layers[when]['learned'][0]:+.3f} at T = {T}, {when}")
        for by_seed in c.arms.values():
            for r in by_seed.values():
                gaps.append(abs(float(r.summary["val_loss"]) - float(r.window_means().mean())))
                history = r.history.get("val/loss")
                if history and len(history[1]) > 1:
                    fell.append(history[1][-1] < history[1][-2])
    contexts = sorted(losses)
    if len(contexts) > 1:
        a, b = contexts[0], contexts[-1]
        moves = ", ".join(f"{LABELS[p]} {losses[a][p]:.3f} to {losses[b][p]:.3f}" for p in losses[a] if p in losses[b])
        baseline = (f"From T = {a} to T = {b} the final losses move {moves}: the learned table, with more rows each "
                    "updated by fewer windows a step, loses far more than the positions that need no table, so C's "
                    f"differences at T = {b} are measured against a weaker baseline, not comparable in size with "
                    f"those at T = {a}. Post hoc, no verdict: none minus RoPE is {' and '.join(none_rope)} nats.")
    else:
        baseline = "One context only: no comparison across contexts."
    return {"baseline": baseline,
            "none_within": (f"For the model without positions the in-range buckets read {'; '.join(within)}: where the "
                            "later bucket is the higher, the loss rises within the trained window itself, and the "
                            "rise past T is measured from that raised level.") if within else "",
            "learned_embedding": "; ".join(embed) or "-",
            "final_vs_summary": (f"the loss fell from the previous validation to the end in {sum(fell)} of "
                                 f"{len(fell)} runs, so the final is the best there; where the end of run scores fewer "
                                 "windows than a validation, its loss and the summary's (every validation window) "
                                 f"differ by up to {max(gaps):.3f} nats") if gaps else "-"}


def lengths_words(ctxs: list[numbers.Context]) -> dict[str, str]:
    """The L block's computed sentences: each rise's spread by level, and the post-hoc rise against [0, T)."""
    spread, alls = [], []
    for c in ctxs:
        for p, est in c.rise.items():
            sds = stats.level_sds(est)
            spread.append(f"{LABELS[p]} at T = {c.T}, {sds.get('windows', 0):.3f} and {sds.get('seeds', 0):.3f}")
        for p, est in c.rise_all.items():
            alls.append(f"{LABELS[p]} {est.format(3, signed=True)} at T = {c.T}")
    return {"level_sds": "; ".join(spread) or "-", "rise_all": "; ".join(alls) or "-"}


def m3_note(draws: dict) -> str:
    parts = []
    for name in init_draws.SETS:
        est = numbers.t_interval(numbers.slopes(draws["no_mask"][name]["power"]))
        parts.append(f"on {name} windows its slope is {shown(est)}, an interval that "
                     f"{'excludes' if est.excludes(0) else 'includes'} 0")
    return "; ".join(parts) + ", far inside the band either way"


def init_table(draws: dict) -> str:
    """The M table (each set's slopes, measured and predicted) with its rows per causal setting."""
    rows = []
    for arm, label in (("causal", "causal"), ("no_mask", "no mask")):
        for name in init_draws.SETS:
            got = draws[arm][name]
            measured = numbers.t_interval(numbers.slopes(got["power"]))
            predicted = numbers.t_interval(numbers.slopes(got["predicted"]))
            r2 = np.asarray(got["r2"], dtype=np.float64)
            rows.append([label, name, shown(measured),
                         predicted.format(3, signed=True) if arm == "causal" else "0 (equivariance)",
                         numbers.t_interval(r2[:, -1]).format(3, signed=True)])
    return markdown_table(["model", "windows", "slope of s2(t)", "predicted slope (from r(t))",
                           "probe R^2, last block, at init"], rows)


def fig_init(draws: dict, path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.8))
    for i, name in enumerate(init_draws.SETS):
        for arm, style in (("causal", "-"), ("no_mask", "--")):
            p = np.asarray(draws[arm][name]["power"]).mean(0)
            t = np.arange(1, len(p) + 1)
            ax.plot(t, p / p[0], style, color=f"C{i}", label=f"{name}, {arm.replace('_', ' ')}")
        r = np.asarray(draws["causal"][name]["predicted"]).mean(0)
        ax.plot(np.arange(1, len(r) + 1), r / r[0], ":", color="k", lw=1)
    ax.set_xscale("log")
    ax.set_yscale("log")
    finish_axes(ax, "t + 1 (keys a causal query sees)", "s2(t) / s2(0)",
                "attention output's mean square at init (dotted: predicted)")
    return save(fig, path)


def probe_table(ctxs: list[numbers.Context]) -> str:
    rows = []
    for c in ctxs:
        for when in ("init", "end"):
            for p, layers in c.layers[when].items():
                rows.append([f"{c.T}", when, LABELS[p]] + [f"{x:+.3f}" for x in layers])
    depth = max(len(r) for r in rows) - 3 if rows else 0
    return markdown_table(["T", "when", "position", "embedding"] + [f"block {i}" for i in range(1, depth)], rows)


def cost_table(ctxs: list[numbers.Context]) -> str:
    rows = []
    for c in ctxs:
        loss = c.loss
        for p, est in loss.items():
            diff = (loss[p] - loss["learned"]).format(3, signed=True) if p != "learned" and "learned" in loss else "-"
            rows.append([f"{c.T}", LABELS[p], est.format(3), diff])
    return markdown_table(["T", "position", "validation loss (nats)", "minus learned (nats)"], rows)


def lengths_table(ctxs: list[numbers.Context]) -> str:
    rows = []
    for c in ctxs:
        for p, est in c.rise.items():
            rows.append([f"{c.T}", LABELS[p]] + [f"{x:.3f}" for x in c.buckets[p]] + [est.format(3, signed=True)])
    return markdown_table(["T", "position", "[0, T/2)", "[T/2, T)", "[T, 2T)", "[2T, 4T)", "rise (nats)"], rows)


def fig_lengths(ctxs: list[numbers.Context], path: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(ctxs), figsize=(5 * len(ctxs), 3.6), squeeze=False)
    for ax, c in zip(axes[0], ctxs, strict=True):
        T = c.T
        for i, p in enumerate(numbers.POSITIONS):
            if p not in c.arms or p == "learned":
                continue
            curve = np.stack([c.arms[p][s].windows("long_curve") for s in c.seeds]).mean(0)
            ax.plot(np.arange(len(curve)), curve, color=f"C{i}", lw=1, label=LABELS[p])
        ax.axvline(T, color="k", ls=":", lw=1)
        finish_axes(ax, "position", "loss (nats)", f"trained at T = {T}")
    return save(fig, path)


def write_report(runs: list[Run], out: Path, sweeps: list[Path]) -> Path:
    pred = predictions(runs, NAME)
    missing = [k for k in ("m_band", "m3_band", "p4_max", "c_band", "l_band", "l_rope") if k not in pred]
    if missing:
        raise ReportError(f"these runs carry no {missing[0]} prediction; rerun the sweep at this version.")
    draws = init_draws.load(INIT_DRAWS)
    if draws is None:
        raise ReportError(f"no {INIT_DRAWS} to read the mechanism at init from; write it first: python -m "
                          "tinygpt.experiments.positions.init_draws")
    ctxs = numbers.contexts(runs)
    found = numbers.init_verdicts(draws, pred) + numbers.run_verdicts(ctxs, pred)
    cfg = runs[0].config
    seeds = sorted({r.seed for r in runs})
    context = context_words(ctxs)
    fig_init(draws, out / "init_variance.png")
    fig_lengths(ctxs, out / "loss_past_context.png")
    probe = cfg["callbacks"]["positions"]
    contexts = [c.T for c in ctxs]
    first = {c.T: next(iter(next(iter(c.arms.values())).values())) for c in ctxs}  # a run of each context
    batches = {T: int(r.config["data"]["batch_size"]) for T, r in first.items()}
    val = {T: len(r.window_means()) for T, r in first.items()}
    lines = [
        prose(NAME, "intro", n_runs=plural(len(runs), "run"), sweeps=", ".join(f"`{s}`" for s in sweeps),
              n_draws=draws["draws"], design=design_commit(DOCS / NAME / "DESIGN.md")), "",
        prose(NAME, "answer", **answer(found)), "",
        "## Predictions", "", predictions_table(found, pred), "",
        prose(NAME, "setup", n_layer=cfg["model"]["n_layer"], n_head=cfg["model"]["n_head"],
              n_embd=cfg["model"]["n_embd"], steps=cfg["trainer"]["max_steps"], lr=float(cfg["optim"]["lr"]),
              warmup=cfg["optim"]["warmup_steps"], min_lr=float(cfg["optim"]["min_lr"]),
              positions=", ".join(LABELS[p] for p in numbers.POSITIONS if any(p in c.arms for c in ctxs)),
              contexts=" and ".join(map(str, contexts)),
              tokens=" and ".join(sorted({f"{T * batches[T]}" for T in contexts})),
              batches=" and ".join(str(batches[T]) for T in contexts), seeds=", ".join(map(str, seeds)),
              wall=f"{sweep_wall_seconds(runs) / 60:.1f}"), "",
        prose(NAME, "measures", final_vs_summary=context["final_vs_summary"],
              val_windows=", ".join(f"{val[T]} at T = {T}" for T in contexts),
              long_windows=probe["long_windows"], factor=probe["factor"], probe_fit=(probe["windows"] + 1) // 2,
              probe_held=probe["windows"] // 2, ridge=measures.RIDGE, level=f"{LEVEL:.0%}"), "",
        prose(NAME, "mechanism", T=draws["block_size"], n_draws=draws["draws"], windows=draws["windows"],
              q=1 / draws["vocab_size"]), "",
        "![init variance](init_variance.png)", "", init_table(draws), "",
        prose(NAME, "probe", learned_embedding=context["learned_embedding"], **probe_words(ctxs, draws)), "",
        probe_table(ctxs), "",
        prose(NAME, "cost", band=f"{pred['c_band']:g}", perplexity=f"{math.exp(pred['c_band']) - 1:.0%}"), "",
        cost_table(ctxs), "",
        prose(NAME, "lengths", factor=probe["factor"], long_windows=probe["long_windows"],
              val_windows_short=", ".join(f"{val[T]:,} at T = {T}" for T in contexts), **lengths_words(ctxs)), "",
        "![loss past the context](loss_past_context.png)", "",
        lengths_table(ctxs), "",
        prose(NAME, "threats", steps=cfg["trainer"]["max_steps"], params=params(runs[0]), n_seeds=len(seeds),
              dof=len(seeds) - 1, lr=float(cfg["optim"]["lr"]), seed_sd=seed_spread(ctxs),
              smoke=f"init seeds {init_draws.SMOKE[0]} and {init_draws.SMOKE[1]}", m3_note=m3_note(draws),
              baseline=context["baseline"], none_within=context["none_within"]), "",
        prose(NAME, "literature"), "",
    ]
    path = out / "README.md"
    path.write_text("\n".join(lines), encoding="utf-8")
    headline(found).write(out)
    return path


def seed_spread(ctxs: list[numbers.Context]) -> str:
    """The learned table's final validation loss: its sd over the seeds at each context ('0.0061 at T = 64, ...')."""
    out = []
    for c in ctxs:
        losses = [r.window_means().mean() for r in c.arms.get("learned", {}).values()]
        if len(losses) > 1:
            out.append(f"{float(np.std(losses, ddof=1)):.4f} at T = {c.T}")
    return ", ".join(out) or "not measured (one seed)"


def params(run: Run) -> str:
    """The model's parameter count (summary.json's n_params), e.g. '0.8M'."""
    return f"{int(run.summary['n_params']) / 1e6:.1f}M"


def headline(found: list[Verdict]) -> Headline:
    """The front page's entry: the answer to "why are positional encodings necessary?" from the verdicts."""
    a = answer(found)
    short = (a["necessary"].split(":")[0] + f" ({said(found, 'M3')}, {said(found, 'P4')}). With it, a model without "
             f"positions holds position a linear probe can read ({said(found, 'P1')}); its validation loss is "
             f"{versus(found, 'C1')} ({said(found, 'C1')}); RoPE's is {versus(found, 'C2')}, ALiBi's "
             f"{versus(found, 'C3')}.")
    return Headline(NAME, "Why positions are necessary, and when the mask is enough",
                    "Why are positional encodings necessary, and when is the causal mask enough?",
                    f"{a['necessary']} {a['enough']}", "loss_past_context.png",
                    [(f"{v.key}: {STATEMENTS[base(v.key)]}", v.verdict) for v in found],
                    status="Designed before its runs, on seeds no earlier run used (61-65); M1-M3 and P4 are checks "
                           "of the arithmetic; P3 was informed by a 2-draw smoke test of the init-draw script.",
                    short=short)

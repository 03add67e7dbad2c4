"""The worked example's report (templates/experiment/README.md): the tanh arm's validation loss minus the exact arm's,
with its interval, against the prediction's band. Every number comes from the runs' kept records (``KEEP``), every
verdict word from tinygpt.analysis.stats, every sentence from report.md's block."""

from __future__ import annotations

from pathlib import Path

from tinygpt.analysis.figures import finish_axes, save
from tinygpt.analysis.records import Reads
from tinygpt.analysis.stats import LEVEL, METHOD, Estimate, Sample, bootstrap, in_range, verb
from tinygpt.analysis.sweep import ReportError, Run, group_by, per_window, predictions, seed_ids
from tinygpt.analysis.templates import plural, prose
from tinygpt.experiments.index import Headline

NAME = "tanh_gelu"
KEEP = Reads(summary=("val_loss",), history=())  # and each validation window's loss (Reads.window_means)
ARMS = {"gelu": "exact GELU", "gelu_tanh": "tanh approximation"}  # model.activation -> the arm's label
QUESTION = "Does GPT-2's tanh approximation of the GELU change the validation loss?"
FIGURE = "difference.png"  # drawn beside README.md, linked from it and from the headline


def write_report(runs: list[Run], out: Path, sweeps: list[Path]) -> Path:
    band = float(predictions(runs, NAME)["band"])
    arms = group_by(runs, lambda r: r.config["model"]["activation"])
    if set(arms) != set(ARMS) or seed_ids(arms["gelu"]) != seed_ids(arms["gelu_tanh"]):
        raise ReportError("the report pairs the two arms by seed: give runs of both arms (arm/tanh_gelu=exact,tanh) "
                          "on the same seeds.")
    # each arm's per-window losses, (seeds, windows); paired: one window draw and one seed draw for both
    est = bootstrap({a: Sample(per_window(arms[a], "mean"), seeds="runs", seed_ids=seed_ids(arms[a])) for a in ARMS})
    gap = est["gelu_tanh"] - est["gelu"]
    verdict = in_range(gap, -band, band)
    figure(gap, band, out / FIGURE)
    text = prose(NAME, "report", n_runs=plural(len(runs), "run"), sweeps=", ".join(f"`{s}`" for s in sweeps),
                 seeds=", ".join(map(str, seed_ids(arms["gelu"]))), steps=runs[0].config["trainer"]["max_steps"],
                 gap=gap.format(signed=True), level=f"{LEVEL:.0%}", band=f"{band:g}", verdict=verb(verdict),
                 exact=est["gelu"].format(), tanh=est["gelu_tanh"].format(), method=METHOD,
                 figure=f"![the difference against the band]({FIGURE})")
    path = out / "README.md"
    path.write_text(text + "\n", encoding="utf-8")
    answer = f"The tanh arm's validation loss minus the exact arm's is {gap.format(signed=True)} nats."
    Headline(NAME, "The tanh GELU", QUESTION, answer, FIGURE,
             [(f"the difference lies within +-{band:g} nats", verdict)]).write(out)
    return path


def figure(gap: Estimate, band: float, path: Path) -> Path:
    """The difference with its interval, against the predicted band."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(4, 3))
    ax.axhspan(-band, band, color="C2", alpha=0.2, label=f"predicted: within +-{band:g}")
    ax.errorbar([0], [gap.value], yerr=[[gap.value - gap.lo], [gap.hi - gap.value]], fmt="o", capsize=4,
                label=f"measured, {LEVEL:.0%} interval")
    ax.set_xticks([])
    finish_axes(ax, "", "tanh minus exact: validation loss (nats)")
    return save(fig, path)

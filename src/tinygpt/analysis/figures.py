"""What every report figure and table shares: matplotlib axes finished alike, PNGs written alike, Markdown tables
and "mean ± spread" cells."""

from __future__ import annotations

import math
from pathlib import Path

from tinygpt.analysis.templates import DOCS
from tinygpt.pictures import explorer


def save(fig, path: Path) -> Path:
    """Lay out (tight, unless the figure was made with a layout of its own) and write a matplotlib Figure as a PNG."""
    if fig.get_layout_engine() is None:
        fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def finish_axes(ax, xlabel: str, ylabel: str, title: str | None = None, legend: bool = True) -> None:
    """Labels, title, grid and legend, the same on every plot."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    if legend:
        ax.legend(fontsize=7)


def fmt_pm(mean: float, spread: float, digits: int = 3) -> str:
    """'mean ± spread' with ``digits`` decimals (pm: plus-minus), 'n/a' for a non-finite mean; a single number is
    tinygpt.runtime.console.fmt."""
    if not math.isfinite(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {spread:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)




def plotly_copy(out: Path) -> Path:
    """Where a report's explorer pages find plotly.js: the committed reports share one copy beside them
    (docs/experiments/plotly.min.js); a report written anywhere else keeps its own, in its explorers/."""
    if out.resolve().parent == DOCS.resolve():
        return DOCS / "plotly.min.js"
    return out / "explorers" / "plotly.min.js"


def explorers(runs: dict[str, object], out: Path) -> list[str]:
    """One interactive attention explorer per named run (its saved weights), in ``out``/explorers/, linking
    ``plotly_copy(out)``; returns Markdown links to them (the runs without saved weights are left out)."""
    links = []
    for name, run in runs.items():
        steps = run.attention_steps()
        if not steps:
            continue
        slug = "_".join("".join(c if c.isalnum() else " " for c in name).split())
        explorer.write(out / "explorers" / f"{slug}.html", steps, f"{name} (seed {run.seed})",
                       library=plotly_copy(out))
        links.append(f"[{name}](explorers/{slug}.html)")
    return links

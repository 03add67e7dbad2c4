"""What every report figure and table shares: matplotlib axes finished alike, PNGs written alike, Markdown tables
and "mean ± spread" cells."""

from __future__ import annotations

import math
from pathlib import Path


def save(fig, path: Path) -> Path:
    """Lay out and write a matplotlib Figure as a PNG."""
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


def fmt(mean: float, spread: float, digits: int = 3) -> str:
    if not math.isfinite(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {spread:.{digits}f}"


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)

"""Attention heatmaps as PNG files (matplotlib's object API: no pyplot state, safe on a worker thread)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def token_label(piece: str) -> str:
    """A visible axis label: spaces as '␣', newlines as '\\n'."""
    return piece.replace(" ", "␣").replace("\n", "\\n").replace("\t", "\\t") or "∅"


def plot_attention(weights, labels: list[str], title: str, path: Path) -> Path:
    """One layer's heads side by side: weights (H, T, T) -> a PNG heatmap grid.

    Uses matplotlib's object API (no pyplot state); token labels on the first head only (the heads share
    their axes), which draws a 4-head, 64-token grid in ~0.3 s here (~0.5 s with labels on every head).
    """
    from matplotlib.figure import Figure

    n_head, T, _ = weights.shape
    show_labels = T <= 64
    side = max(3.2, 0.09 * T) if show_labels else 3.2  # inches per head: room for a label per token
    ncols = min(n_head, 4)  # heads side by side, at most 4 to a row
    nrows = math.ceil(n_head / ncols)
    fig = Figure(figsize=(side * ncols * 1.2 + 1.0, side * nrows * 1.15 + 1.0))
    axes = fig.subplots(nrows, ncols, squeeze=False)
    fig.subplots_adjust(left=0.06, right=0.9, bottom=0.12, top=0.86, wspace=0.12, hspace=0.2)
    w = np.asarray(weights, dtype=np.float32)
    for h, ax in enumerate(axes.flat):
        if h >= n_head:
            ax.axis("off")
            continue
        im = ax.imshow(w[h], cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest")
        ax.set_title(f"head {h}", fontsize=9)
        row, col = divmod(h, ncols)
        last_row = row == nrows - 1 or h + ncols >= n_head
        if show_labels and h == 0:  # tokens on the first head only (the heads share their axes): labels are
            ax.set_xticks(range(T), labels, fontsize=6, rotation=90)  # most of the drawing time
            ax.set_yticks(range(T), labels, fontsize=6)
        else:
            ax.set_xticks([])
            ax.set_yticks([])
        if last_row:
            ax.set_xlabel("key", fontsize=8)
        if col == 0:
            ax.set_ylabel("query", fontsize=8)
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, pad=0.015, fraction=0.03)
    fig.suptitle(title, fontsize=11)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=100)
    return path


def plot_layers(weights: np.ndarray, labels: list[str], step: int, out: Path) -> list[Path]:
    """weights (n_layer, H, T, T) at ``step`` -> one PNG per layer under ``out``; their paths."""
    return [plot_attention(w, labels, f"layer {layer}, step {step} (rows: queries, columns: keys)",
                           out / f"step{step:06d}_layer{layer}.png") for layer, w in enumerate(weights)]

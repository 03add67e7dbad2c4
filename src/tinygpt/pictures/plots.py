"""Attention heatmaps as PNG files (matplotlib's object API: no pyplot state, safe on a worker thread).

A layer's figure (its heads side by side, token labels, colorbar) is laid out and drawn once per probe; each
later layer and step redraws only the heatmaps and the title over that background bitmap (matplotlib's
blitting) and writes the PNG with light compression: most of a full savefig's time goes into the tick labels,
which are drawn once per probe this way (docs/benchmarks.md).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np


def token_label(piece: str) -> str:
    """A visible axis label: spaces as '␣', newlines as '\\n'."""
    return piece.replace(" ", "␣").replace("\n", "\\n").replace("\t", "\\t") or "∅"


def masked_future(weights: np.ndarray) -> np.ndarray:
    """weights (..., T, T) with the future (above the diagonal) as NaN, drawn empty, where every weight there is
    exactly 0 (a causal model), as the explorer page draws it; a leaky model's weights unchanged."""
    weights = np.asarray(weights, dtype=np.float32)
    future = np.triu(np.ones(weights.shape[-2:], dtype=bool), 1)
    return np.where(future, np.nan, weights) if not np.any(weights[..., future]) else weights


class AttentionFigure:
    """One layer's heads side by side for weights (H, T, T) with these token labels; ``render`` draws a
    layer's weights and a title into a PNG. Token labels sit on the first head only (the heads share their
    axes) and only up to T = 64."""

    def __init__(self, n_head: int, T: int, labels: list[str]):
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure

        self.key = (n_head, T, tuple(labels))
        show_labels = T <= 64
        side = max(3.2, 0.09 * T) if show_labels else 3.2  # inches per head: room for a label per token
        ncols = min(n_head, 4)  # heads side by side, at most 4 to a row
        nrows = math.ceil(n_head / ncols)
        self.fig = Figure(figsize=(side * ncols * 1.2 + 1.0, side * nrows * 1.15 + 1.0), dpi=100)
        self.canvas = FigureCanvasAgg(self.fig)
        axes = self.fig.subplots(nrows, ncols, squeeze=False)
        self.fig.subplots_adjust(left=0.06, right=0.9, bottom=0.12, top=0.86, wspace=0.12, hspace=0.2)
        blank = np.zeros((T, T), dtype=np.float32)
        self.images = []
        for h, ax in enumerate(axes.flat):
            if h >= n_head:
                ax.axis("off")
                continue
            im = ax.imshow(blank, cmap="viridis", vmin=0.0, vmax=1.0, interpolation="nearest", animated=True)
            self.images.append(im)
            ax.set_title(f"head {h}", fontsize=9)
            row, col = divmod(h, ncols)
            if show_labels and h == 0:
                ax.set_xticks(range(T), labels, fontsize=6, rotation=90)
                ax.set_yticks(range(T), labels, fontsize=6)
            else:
                ax.set_xticks([])
                ax.set_yticks([])
            if row == nrows - 1 or h + ncols >= n_head:
                ax.set_xlabel("key", fontsize=8)
            if col == 0:
                ax.set_ylabel("query", fontsize=8)
        self.fig.colorbar(self.images[0], ax=axes.ravel().tolist(), shrink=0.8, pad=0.015, fraction=0.03)
        self.title = self.fig.suptitle(" ", fontsize=11, animated=True)
        self.canvas.draw()  # everything but the animated heatmaps and title
        self.background = self.canvas.copy_from_bbox(self.fig.bbox)

    def render(self, weights, title: str, path: Path) -> Path:
        """weights (H, T, T) -> the PNG at ``path``."""
        from PIL import Image

        self.canvas.restore_region(self.background)
        for im, w in zip(self.images, np.asarray(weights, dtype=np.float32), strict=True):
            im.set_data(w)  # (T, T)
            self.fig.draw_artist(im)
        self.title.set_text(title)
        self.fig.draw_artist(self.title)
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(np.asarray(self.canvas.buffer_rgba())[..., :3]).save(path, compress_level=1)
        return path


class LayerPlotter:
    """weights (n_layer, H, T, T) at a step -> one PNG per layer, reusing one AttentionFigure per probe.
    Not thread-safe: give each thread its own (the AttentionMaps callback draws on one worker thread)."""

    def __init__(self):
        self.figure: AttentionFigure | None = None

    def __call__(self, weights: np.ndarray, labels: list[str], step: int, out: Path) -> list[Path]:
        n_head, T = weights.shape[1], weights.shape[2]
        weights = masked_future(weights)
        if self.figure is None or self.figure.key != (n_head, T, tuple(labels)):
            self.figure = AttentionFigure(n_head, T, labels)
        return [self.figure.render(w, f"layer {layer}, step {step} (rows: queries, columns: keys)",
                                   out / f"step{step:06d}_layer{layer}.png") for layer, w in enumerate(weights)]

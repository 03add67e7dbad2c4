"""The lessons' figures (docs/lessons/*.png), drawn from the same library calls the lessons make.

    python scripts/lesson_figures.py [--out docs/lessons]
"""

from __future__ import annotations

import argparse
import math
from pathlib import Path

import torch
from matplotlib.figure import Figure

from tinygpt.analysis.figures import finish_axes, save
from tinygpt.analysis.init_stats import logits_at_init
from tinygpt.model.attention import causal_mask, masked_softmax

OUT = Path(__file__).resolve().parents[3] / "docs" / "lessons"


def one_head(path: Path) -> Path:
    """Lesson 1: the three-token sentence's causal weights, each cell labelled with its value."""
    x = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])  # (T, C): q = k = v = x
    weights = masked_softmax(x @ x.T / math.sqrt(2), causal_mask(3, 3))  # (T, T)
    fig = Figure(figsize=(4.2, 3.6))
    ax = fig.subplots()
    im = ax.imshow(weights, cmap="viridis", vmin=0, vmax=1)
    for i in range(3):
        for j in range(3):
            ax.text(j, i, f"{weights[i, j]:.3f}", ha="center", va="center",
                    color="white" if weights[i, j] < 0.6 else "black")
    ax.set_xticks(range(3), [f"key {j}" for j in range(3)])
    ax.set_yticks(range(3), [f"query {i}" for i in range(3)])
    ax.set_title("softmax(x x^T / sqrt(2) + causal mask)", fontsize=10)
    fig.colorbar(im, ax=ax, shrink=0.8)
    return save(fig, path)


def entropy_vs_dk(path: Path) -> Path:
    """Lesson 4: normalised attention entropy at init against the head dim, per scale (unit-variance init)."""
    rows = [r for r in logits_at_init(n_embd=256, head_dims=(8, 16, 32, 64, 128, 256)) if r["init"] == "unit"]
    fig = Figure(figsize=(5.5, 3.8))
    ax = fig.subplots()
    for scale, label in (("none", "unscaled"), ("sqrt_dk", "1/sqrt(d_k)"), ("inv_dk", "1/d_k")):
        sel = sorted((r["d_k"], r["entropy"]) for r in rows if r["scale"] == scale)
        ax.plot(*zip(*sel, strict=True), "-o", ms=4, label=label)
    ax.set_xscale("log", base=2)
    ax.set_ylim(0, 1.05)
    finish_axes(ax, "head dim d_k (unit-variance q, k)", "normalised attention entropy (1 = uniform)",
                "Saturation at initialisation, first layer of the GPT")
    return save(fig, path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/lesson_figures.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    for path in (one_head(args.out / "one_head.png"), entropy_vs_dk(args.out / "entropy_vs_dk.png")):
        print(f"lesson figure -> {path}")
    return 0

"""Experiment 4's power, simulated before its sweep (DESIGN.md, "Can each test come out either way?"): sweeps of
the design's shape with a known true difference between an arm and learned, judged by the verdict function and
intervals the report uses. Prints the table DESIGN.md quotes.

    python tests/experiments/positions/simulate.py            # 200 sweeps a row (a few minutes)
"""

from __future__ import annotations

import sys

import numpy as np

from tinygpt.analysis import stats

SEEDS, WINDOWS = 5, 1024  # the design's T = 64 arm: 5 seeds, 1,024 validation windows
WINDOW_SD = 0.17  # Experiment 1's per-window sd of a final validation loss (T = 64, 800 steps)
PAIRED = 0.95  # correlation of one window's loss between two arms of the same seed
BAND = 0.02  # C's equivalence band (nats)


def sweep(rng: np.random.Generator, truth: float, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    """(learned, other): (seeds, windows) losses; the windows shared, each arm a seed effect of sd sigma."""
    window = rng.normal(2.2, WINDOW_SD, WINDOWS)  # (N,): each window's difficulty
    noise = WINDOW_SD * np.sqrt(1 - PAIRED)
    learned = window + rng.normal(0, sigma, (SEEDS, 1)) + rng.normal(0, noise, (SEEDS, WINDOWS))  # (S, N)
    other = window + truth + rng.normal(0, sigma, (SEEDS, 1)) + rng.normal(0, noise, (SEEDS, WINDOWS))  # (S, N)
    return learned, other


def verdict(learned: np.ndarray, other: np.ndarray, n_boot: int) -> str:
    """C's verdict on one simulated sweep, as the report computes it."""
    ids = tuple(range(SEEDS))
    est = stats.bootstrap({"learned": stats.Sample(learned, "val", "seeds", ids),
                           "other": stats.Sample(other, "val", "seeds", ids)}, n_boot=n_boot)
    return stats.in_range(est["other"] - est["learned"], -BAND, BAND)


def table(sweeps: int = 200, n_boot: int = 400, seed: int = 0) -> str:
    rng = np.random.default_rng(seed)
    truths = (0.0, 0.01, 0.02, 0.03, 0.04)
    rows = ["| seed sd sigma | " + " | ".join(f"true {t:+.2f}: holds / fails" for t in truths) + " |",
            "|---|" + "---|" * len(truths)]
    for sigma in (0.003, 0.006, 0.012, 0.018):
        cells = []
        for truth in truths:
            got = [verdict(*sweep(rng, truth, sigma), n_boot) for _ in range(sweeps)]
            cells.append(f"{got.count('holds') / sweeps:.2f} / {got.count('fails') / sweeps:.2f}")
        rows.append(f"| {sigma:.3f} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table(int(sys.argv[1]) if len(sys.argv) > 1 else 200))

"""Simulated sweeps of design 3 with known edges (a helper of the tests here, and of the design's power table):
each seed has its own true edge theta_s = mu + sigma z_s in log10(lr); its run at rate x fails when x > theta_s,
except that within one ladder step of theta_s the outcome flips with probability ``flip`` (a ragged cliff)."""

from __future__ import annotations

import numpy as np

from tinygpt.experiments.sqrt_dk_stability.edge import Edges, edges

STEP = 1 / 6  # the design's ladder: six rates a decade
RATES = -3 + STEP * np.arange(13)  # log10 1e-3 ... 1e-1


def outcomes(rng, theta: np.ndarray, flip: float, rates: np.ndarray = RATES) -> np.ndarray:
    """(S, R) failed, for per-seed true edges ``theta`` (S,)."""
    f = rates[None, :] > theta[:, None]
    near = np.abs(rates[None, :] - theta[:, None]) < STEP
    return f ^ (near & (rng.random(f.shape) < flip))


def arms(rng, mus: dict[str, float], sigma: float, flip: float, seeds: int, shared: float = 0.0,
         rates: np.ndarray = RATES) -> dict[str, Edges]:
    """Per arm its edges: each seed's edge is the arm's mu plus a seed effect shared by every arm (sd ``shared``,
    the same init draw and batch order) and one of its own (sd ``sigma``)."""
    common = shared * rng.standard_normal(seeds)
    return {name: edges(rates, outcomes(rng, mu + common + sigma * rng.standard_normal(seeds), flip, rates))
            for name, mu in mus.items()}


def power(sigma: float, flip: float, seeds: int = 5, n: int = 400, seed: int = 0) -> dict[str, float]:
    """How often each of design 3's verdicts comes out each way when the truth is the prediction (the unscaled edge
    0.602 decades below the scaled one, the midpoint 0.301 below, qk-layernorm 0.5 above) and when it is "no shift"
    (every arm's edge the same), with per-seed edges of sd ``sigma`` around each arm's and flips near the edge."""
    from tinygpt.experiments.sqrt_dk_stability.edge import side, slope_weights, within

    rng = np.random.default_rng(seed)
    w = slope_weights({"sqrt": np.log10(1 / 16), "mid": np.log10(4 / 16), "none": 0.0})
    counts: dict[str, float] = {}
    for truth, shift in (("predicted", 1.0), ("no shift", 0.0)):
        for _ in range(n):
            mu = -1.6 + rng.uniform(0, STEP)
            a = arms(rng, {"sqrt": mu, "mid": mu - 0.301 * shift, "none": mu - 0.602 * shift,
                           "qknorm": mu + 0.5 * shift}, sigma, flip, seeds, shared=0.1)
            verdicts = {"Q1": side(a, {"qknorm": 1, "sqrt": -1}, +1)[0],
                        "S1": side(a, {"none": 1, "sqrt": -1}, -1)[0],
                        "S2": within(a, {"none": 1, "sqrt": -1}, -0.902, -0.302)[0],
                        "S3": within(a, w, -0.75, -0.25)[0]}
            for k, v in verdicts.items():
                key = f"{truth}: {k} {v}"
                counts[key] = counts.get(key, 0) + 1 / n
    return counts


if __name__ == "__main__":  # the design's power table: python tests/experiments/sqrt_dk_stability/simulate.py
    for sigma in (0.0, 0.1, 0.2, 0.3):
        for flip in (0.0, 0.3):
            c = power(sigma, flip)
            row = [f"{c.get(f'{t}: {k} {v}', 0):.2f}" for t, k, v in (
                ("predicted", "S1", "holds"), ("predicted", "S2", "holds"), ("predicted", "S3", "holds"),
                ("predicted", "Q1", "holds"), ("no shift", "S1", "holds"), ("no shift", "S1", "undecided"),
                ("no shift", "S2", "fails"), ("no shift", "S3", "fails"))]
            print(f"| {sigma} | {flip} | " + " | ".join(row) + " |")

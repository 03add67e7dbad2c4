"""A synthetic Experiment 4 sweep whose answer is known by construction: every position at T = 64 and 256 and every
seed, written as train.py writes a run (summary.json, diagnostics.npz, measures.npz, history/metrics.csv, .hydra/),
and init draws as init_draws.py writes them. ``World`` sets the truth: each position's validation loss offset from
learned's, its rise past T, its probe's R^2 at init and at the end, and the init draws' slopes."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from tests.experiments.sqrt_dk.design2_synthetic_sweep import write_metrics

N, POS, HELD, LAYERS, LONG = 64, 4, 16, 5, 24  # validation windows, positions kept, probe windows, layers, long windows
SEEDS = (61, 62, 63, 64, 65)
PREDICTION = {"m_band": 0.05, "m3_band": 0.02, "p4_max": 0.01, "c_band": 0.02, "l_band": 0.02, "l_rope": 0.1}
POSITIONS = ("learned", "none", "rope", "alibi")


@dataclass
class World:
    loss: dict = field(default_factory=lambda: {"learned": 0.0, "none": 0.0, "rope": 0.0, "alibi": 0.0})
    rise: dict = field(default_factory=lambda: {"none": 0.2, "rope": 0.5, "alibi": 0.0})
    r2_end: dict = field(default_factory=lambda: {"learned": 0.95, "none": 0.6, "rope": 0.3, "alibi": 0.3})
    r2_init: dict = field(default_factory=lambda: {"learned": 0.9, "none": 0.2, "rope": 0.0, "alibi": 0.0})
    m_offset: float = 0.0  # the measured slope minus the predicted one (M1, M2)
    m3_slope: float = 0.0  # the no-mask slope (M3)
    p4_r2: float = -0.01  # the no-mask probe's R^2 (P4)


def config(position: str, T: int, seed: int) -> dict:
    return {"seed": seed,
            "model": {"n_layer": LAYERS - 1, "n_head": 4, "n_embd": 128, "block_size": T, "position": position,
                      "extrapolate": False, "patch": [], "attn": {"causal": True}},
            "data": {"batch_size": 768 // T, "val_windows": N}, "diagnostics": {"windows": 16},
            "trainer": {"max_steps": 2000, "val_check_interval": 1000},
            "optim": {"lr": 1e-3, "warmup_steps": 100, "min_lr": 1e-4},
            "callbacks": {"positions": {"windows": 2 * HELD, "long_windows": LONG, "factor": 4}},
            "prediction": dict(PREDICTION)}


def sse_for(r2: float, T: int, rng) -> np.ndarray:
    """(HELD,) held-out squared errors whose pooled R^2 is about r2 (SST per window: sum over t of (t - mean)^2)."""
    sst = float(((np.arange(T) - (T - 1) / 2) ** 2).sum())
    return (1 - r2) * sst * (1 + rng.normal(0, 0.02, HELD))


def write_run(d: Path, position: str, T: int, seed: int, world: World, window: np.ndarray, rng) -> None:
    (d / "history").mkdir(parents=True)
    (d / ".hydra").mkdir()
    cfg = config(position, T, seed)
    (d / "config.yaml").write_text(json.dumps(cfg))
    windows = window + world.loss[position] + rng.normal(0, 0.003) + rng.normal(0, 0.01, N)  # (N,)
    np.savez(d / "diagnostics.npz", val_window_position=np.repeat(windows[:, None], POS, 1).astype(np.float32))
    sst = float(((np.arange(T) - (T - 1) / 2) ** 2).sum())
    arrays = {"probe_sst": np.full(HELD, sst),
              "probe_init_sse": np.stack([sse_for(world.r2_init[position] * i / (LAYERS - 1), T, rng)
                                          for i in range(LAYERS)]),
              "probe_end_sse": np.stack([sse_for(world.r2_end[position] * (0.5 + i / (2 * (LAYERS - 1))), T, rng)
                                         for i in range(LAYERS)])}
    if position != "learned":
        in_range = 2.0 + rng.normal(0, 0.05, LONG)  # (LONG,): each long window's in-range loss
        beyond = in_range + world.rise[position] + rng.normal(0, 0.01, LONG)
        arrays["long_buckets"] = np.stack([in_range + 0.3, in_range, beyond, beyond], 1)  # (LONG, 4)
        arrays["long_curve"] = np.concatenate([np.full(T, 2.0), np.full(3 * T, 2.0 + world.rise[position])])
    np.savez(d / "measures.npz", **arrays)
    write_metrics(d / "history" / "metrics.csv", [{"step": 999, "val/loss": float(windows.mean()) + 0.1},
                                                  {"step": 1999, "val/loss": float(windows.mean())}])
    (d / "summary.json").write_text(json.dumps({
        "status": "completed", "config": cfg, "val_loss": float(windows.mean()), "vocab_size": 72,
        "train_seconds": 100.0, "steps": 2000, "n_params": 800_000}))
    (d / ".hydra" / "hydra.yaml").write_text(
        "hydra:\n  runtime:\n    choices:\n      experiment: positions\n      arm/positions: t%d\n" % T)
    overrides = [f"arm/positions=t{T}", f"model.position={position}", f"seed={seed}", "experiment=positions"]
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))


def make_sweep(root: Path, world: World | None = None, seed: int = 0, seeds=SEEDS, contexts=(64, 256)) -> int:
    """Every position at every context and seed; the windows' difficulty is shared within a context. Returns the
    number of runs."""
    world = world or World()
    rng = np.random.default_rng(seed)
    job = 0
    for T in contexts:
        window = 2.2 + rng.normal(0, 0.17, N)  # (N,)
        for position in POSITIONS:
            for s in seeds:
                write_run(root / str(job), position, T, s, world, window, rng)
                job += 1
    return job


def make_draws(world: World | None = None, draws: int = 32, T: int = 64, seed: int = 0) -> dict:
    """init_draws.json's content: per set the predicted power curve r(t) (1 + t q) / (t + 1), the measured one with
    the slope moved by ``m_offset`` (no mask: flat, tilted by ``m3_slope``), and the probe's R^2 per layer."""
    world = world or World()
    rng = np.random.default_rng(seed)
    t = np.arange(T) + 1.0
    out = {"format": 1, "draws": draws, "seeds": "synthetic", "windows": 256, "block_size": T, "vocab_size": 72,
           "n_layer": LAYERS - 1, "causal": {}, "no_mask": {}}
    for name, q in (("shakespeare", 0.08), ("random", 1 / 72)):
        r = (1 + (t - 1) * q) / t
        noise = lambda: np.exp(rng.normal(0, 0.01, (draws, T)))  # noqa: E731
        out["causal"][name] = {"predicted": np.tile(r, (draws, 1)).tolist(),
                               "power": (r * t ** world.m_offset * noise()).tolist(),
                               "r2": (0.2 + rng.normal(0, 0.01, (draws, LAYERS))).tolist()}
        out["no_mask"][name] = {"predicted": np.tile(r, (draws, 1)).tolist(),
                                "power": (t ** world.m3_slope * noise()).tolist(),
                                "r2": (world.p4_r2 + rng.normal(0, 0.003, (draws, LAYERS))).tolist()}
    return out

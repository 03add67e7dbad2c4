"""A synthetic design-3 sweep whose answer is known by construction: every arm of
docs/experiments/sqrt_dk_stability/DESIGN.md at every rate and seed, written as train.py writes a run (summary.json,
diagnostics.npz, history/metrics.csv, .hydra/). Each seed of an arm has a true edge (log10 lr): below it the run
trains (final loss 2.0 + 0.1 (x + 2.5)^2, under the failed-to-train line), above it it fails to train (3.2 nats)
or, more than half a decade above, diverges."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from tests.experiments.sqrt_dk.design2_synthetic_sweep import write_metrics

N, T = 32, 4  # validation windows, positions per window
RATES = [0.001, 0.001468, 0.002154, 0.003162, 0.004642, 0.006813, 0.01, 0.01468, 0.02154, 0.03162, 0.04642, 0.06813,
         0.1]
SEEDS = (51, 52, 53, 54, 55)
PREDICTION = {"failed_to_train": 0.5, "shift_none": -0.602, "shift_band": 0.3, "slope": -0.5, "slope_band": 0.25}
ATTN = {"sqrt": {"scale": "sqrt_dk", "qk_norm": False}, "mid": {"scale": 0.25, "qk_norm": False},
        "none": {"scale": "none", "qk_norm": False}, "qknorm": {"scale": "sqrt_dk", "qk_norm": True}}
PREDICTED = {"sqrt": -1.6, "mid": -1.901, "none": -2.202, "qknorm": -1.1}  # the design's prediction holds


def config(arm: str, lr: float, seed: int) -> dict:
    return {"seed": seed,
            "model": {"n_layer": 2, "n_head": 1, "n_embd": 256, "block_size": 64, "patch": [],
                      "attn": {"backend": "math", "qk_init": "gpt2", **ATTN[arm]}},
            "data": {"batch_size": 12, "val_windows": N}, "diagnostics": {"windows": 16},
            "trainer": {"max_steps": 300, "gradient_clip_val": 1.0, "precision": "32-true", "val_check_interval": 150},
            "optim": {"lr": lr, "warmup_steps": 30, "min_lr": 1e-5},
            "callbacks": {"stability": {"windows": 8, "every_n_steps": 20}},
            "prediction": dict(PREDICTION)}


def write_run(d: Path, arm: str, lr: float, seed: int, edge: float, rng) -> None:
    x = float(np.log10(lr))
    diverged = x > edge + 0.5
    loss = 2.0 + 0.1 * (x + 2.5) ** 2 if x < edge else 3.2
    windows = loss + rng.normal(0, 0.05, N)
    (d / "history").mkdir(parents=True)
    (d / ".hydra").mkdir()
    cfg = config(arm, lr, seed)
    (d / "config.yaml").write_text(json.dumps(cfg))
    np.savez(d / "diagnostics.npz", val_window_position=np.repeat(windows[:, None], T, 1).astype(np.float32))
    rows = [{"step": s, "train/loss": 4.0 - s / 300} for s in range(300)]
    rows += [{"step": s, "stab/max_logit": 10.0 + (200.0 if x > edge else 0.0) + s,
              "stab/jacobian_trace": 0.9 - (0.8 if x > edge else 0.0)} for s in (0, 19, 39, 299)]
    rows += [{"step": 149, "val/loss": loss}, {"step": 299, "val/loss": float(windows.mean())}]
    write_metrics(d / "history" / "metrics.csv", rows)
    (d / "summary.json").write_text(json.dumps({
        "status": "completed", "config": cfg, "val_loss": None if diverged else float(windows.mean()),
        "vocab_size": 65, "train_seconds": 20.0, "steps": 300, "diverged": bool(diverged),
        "divergence": "non-finite loss" if diverged else None,
        "diagnostics": {"unigram_loss": 3.3, "bigram_loss": 2.5}}))
    (d / ".hydra" / "hydra.yaml").write_text(
        "hydra:\n  runtime:\n    choices:\n      experiment: sqrt_dk_stability\n"
        f"      arm/sqrt_dk_stability: {arm}\n")
    overrides = [f"arm/sqrt_dk_stability={arm}", f"optim.lr={lr}", f"seed={seed}", "experiment=sqrt_dk_stability"]
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))


def make_sweep(root: Path, edges: dict[str, float] = PREDICTED, spread: float = 0.0, seed: int = 0,
               rates=RATES, seeds=SEEDS) -> int:
    """Every arm of ``edges`` (arm -> its true edge, log10 lr) at every rate and seed; each seed's edge is the arm's
    plus a Gaussian of sd ``spread``. Returns the number of runs."""
    rng = np.random.default_rng(seed)
    job = 0
    for arm, mu in edges.items():
        for s in seeds:
            e = mu + spread * rng.standard_normal()
            for lr in rates:
                write_run(root / str(job), arm, lr, s, e, rng)
                job += 1
    return job

"""A synthetic design-2 sweep whose answers are known by construction (World: what is true in it).

Every float32 arm of docs/experiments/sqrt_dk/DESIGN.md at 7 rates and 3 seeds (294 runs), written as train.py
writes a run (summary.json, diagnostics.npz, history/metrics.csv, .hydra/), and optionally the float16 sweep and
its float32 reruns. The final loss of an arm at log10 rate x is ``best + 0.4 (x + 2.7)^2`` plus seed and window
noise, so every basin has the same shape (C4 undecided); the training loss only falls (C5 undecided), below the
bigram loss about 60 steps later without the factor at unit init than with it.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

N, T = 64, 8  # validation windows, positions per window
LRS = [10 ** (k / 3) for k in range(-12, -5)]
SEEDS = (11, 12, 13)
PREDICTION = {"basin_delta": 0.1, "spike_nats": 0.5, "saturation_band": 0.05, "mechanism_lr": 1e-3,
              "match_loss_band": 0.05, "match_optimum_band": 0.1667, "failed_to_train": 0.5}


@dataclass(frozen=True)
class World:
    """unit_gap, gpt2_gap: the unscaled arm's best-loss cost at d_k = 256 (sqrt(d_k / 256) of it at smaller d_k);
    trace_slope: the unscaled unit-init Jacobian trace at init goes as d_k^trace_slope (below 0: it saturates as d_k
    grows, the premise; the other arms stay at 0.95); optimum: log10 of every arm's best rate; fp16_overflow: the
    float16 runs with the scale after the product overflow and diverge at the higher rate, their float32 reruns
    train."""

    unit_gap: float = 0.3
    gpt2_gap: float = 0.05
    trace_slope: float = -0.5
    optimum: float = -2.7  # log10 of every arm's best rate
    fp16_overflow: bool = True
    inf_between_probes: bool = False  # the overflow falls between two of the float16 sweep's probes
    batch_probe: bool = False  # amendment 4: the replay logs each step's own batch's q.k (stab/batch_*_qk)
    new_seeds_overflow: bool = True  # False: the replays of new seeds go non-finite with every formed product finite
    signed_probe: bool = False  # amendment 5: the replay also logs the largest signed q.k (stab/batch_*_qk_pos)
    negative_overflow: bool = False  # an overflowing run's largest |q.k| passes 65,504 five batches early, negative


NEW_SEEDS = (14, 15, 16)  # amendment 4: replayed seeds the float16 sweep did not run


def config(init, dk, scale, control, lr, seed, precision="32-true", backend="math", at="scores"):
    patch = [] if not control else [{"_target_": "tinygpt.experiments.sqrt_dk.reparam.QKReparam", "init": True,
                                     "step": control == "full"}]
    return {"seed": seed,
            "model": {"n_layer": 2, "n_head": 1, "n_embd": dk, "block_size": 64, "patch": patch,
                      "attn": {"scale": scale, "qk_init": init, "backend": backend, "scale_at": at}},
            "data": {"batch_size": 12, "val_windows": N}, "diagnostics": {"windows": 16},
            "trainer": {"max_steps": 300, "gradient_clip_val": 1.0, "precision": precision,
                        "val_check_interval": 150},
            "optim": {"lr": lr, "warmup_steps": 30, "min_lr": 1e-5},
            "callbacks": {"stability": {"windows": 8, "every_n_steps": 20}},
            "prediction": dict(PREDICTION)}


def arm_name(init, dk, scale, control):
    return f"unit_dk256_reparam_{control}" if control else f"{init}_dk{dk}_{'sqrt' if scale == 'sqrt_dk' else 'none'}"


def write_metrics(path: Path, rows: list[dict]) -> None:
    keys = sorted({k for r in rows for k in r if k != "step"})
    lines = [",".join(["step", *keys])]
    lines += [",".join([str(r["step"])] + [repr(r[k]) if k in r else "" for k in keys]) for r in rows]
    path.write_text("\n".join(lines) + "\n")


def write_run(d: Path, cfg: dict, experiment: str, arm: str, windows: np.ndarray, half: float, train_loss,
              probe: dict, diverged: str | None = None, batch: dict | None = None) -> None:
    """One run's files: ``probe`` maps a stability probe's name to its value at init and after (or to a function of
    the step), read every ``callbacks.stability.every_n_steps`` steps while the training loss is logged;
    ``diverged`` is the divergence guard's reason (None: completed)."""
    (d / "history").mkdir(parents=True)
    (d / ".hydra").mkdir()
    (d / "config.yaml").write_text(json.dumps(cfg))  # its time stamps the job's start
    np.savez(d / "diagnostics.npz", val_window_position=np.repeat(windows[:, None], T, 1).astype(np.float32))
    rows = [{"step": s, "train/loss": float(v), **{k: float(f(s)) for k, f in (batch or {}).items()}}
            for s, v in enumerate(train_loss)]  # the batch probe: at every batch index, the batch about to be trained
    every = cfg["callbacks"]["stability"]["every_n_steps"]
    for s in sorted({0, *range(every - 1, len(train_loss), every)}):
        rows.append({"step": s, **{f"stab/{name}/{layer}": float(v(s) if callable(v) else v[0] if s == 0 else v[1])
                                   for name, v in probe.items() for layer in range(2)}})
    rows += [{"step": 149, "val/loss": half}, {"step": 299, "val/loss": float(windows.mean())}]
    write_metrics(d / "history" / "metrics.csv", rows)
    (d / "summary.json").write_text(json.dumps({
        "status": "completed", "config": cfg, "val_loss": None if diverged else float(windows.mean()),
        "vocab_size": 65, "train_seconds": 20.0, "steps": len(train_loss) if diverged else 300,
        "diverged": diverged is not None,
        "divergence": diverged, "diagnostics": {"unigram_loss": 3.3, "bigram_loss": 2.5}}))
    (d / ".hydra" / "hydra.yaml").write_text(
        f"hydra:\n  runtime:\n    choices:\n      experiment: {experiment}\n      arm/sqrt_dk: {arm}\n")
    overrides = [f"arm/sqrt_dk={arm}", f"optim.lr={cfg['optim']['lr']}", f"seed={cfg['seed']}",
                 f"experiment={experiment}"]
    (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))


def float32_run(d, rng, world, window_effect, init, dk, scale, control, lr, seed):
    unscaled = scale == "none" and control != "full"
    gap = (world.unit_gap if init == "unit" else world.gpt2_gap) * (dk / 256) ** 0.5 if unscaled else 0.0
    loss = 2.0 + gap + 0.4 * (math.log10(lr) - world.optimum) ** 2 + rng.normal(0, 0.01)
    windows = loss + window_effect + rng.normal(0, 0.02, N)
    premise = init == "unit" and scale == "none" and not control
    trace0 = (0.56 * (dk / 16) ** world.trace_slope if premise else 0.95) + rng.normal(0, 0.01)
    grad0 = (3.0 * (dk / 16) ** 0.7 if scale == "none" and not control else 1.0) * (1 + rng.normal(0, 0.02))
    fall = 225 if unscaled and init == "unit" else 150  # unscaled at unit init learns slower: below the bigram
    train = [4.0 - 1.8 * min(s, fall) / fall + rng.normal(0, 0.05) for s in range(300)]  # loss (2.5) near 0.83 fall
    probe = {"jacobian_trace": (trace0, trace0 * 0.9), "grad_wq": (grad0 / 2,) * 2, "grad_wk": (grad0 / 2,) * 2,
             "softmax_gain": (trace0 / 2, trace0 / 2), "entropy": (trace0, trace0), "raw_qk": (float(dk), 2.0 * dk)}
    write_run(d, config(init, dk, scale, control, lr, seed), "sqrt_dk", arm_name(init, dk, scale, control), windows,
              loss + 0.3 + gap, train, probe)


FP16_ARMS = {  # arm -> (scale, where it sits, backend)
    "fp16_sqrt_scores": ("sqrt_dk", "scores", "math"), "fp16_sqrt_qk": ("sqrt_dk", "qk", "math"),
    "fp16_sqrt_sdpa": ("sqrt_dk", "scores", "sdpa"), "fp16_none_math": ("none", "scores", "math"),
    "fp16_none_sdpa": ("none", "scores", "sdpa")}


NAN_STEP, INF_STEP = 110, 101  # a float16 run that overflows: its scores turn inf at step 101, its loss NaN at 110


BATCH_SLOPE = 400.0  # a replay's formed product on batch s: BATCH_SLOPE * s, below 65,504 until NAN_STEP


def fp16_run(d, rng, world, window_effect, arm, lr, seed, experiment="sqrt_dk_fp16"):
    """A float16 run (or its float32 rerun, or amendment 2's replay probed every step: the same run). With the scale
    after the product at the higher rate, the world's overflow turns the scores inf at INF_STEP, between two of the
    sweep's probes (every 20 steps: F1 undecided, as in the real sweep when ``world.inf_between_probes``; at a probe
    otherwise), and the loss NaN at NAN_STEP; with the scale on q and k, the raw q.k overflows there too and the
    scores stay finite."""
    scale, at, backend = FP16_ARMS[arm]
    precision = "32-true" if experiment == "sqrt_dk_fp32" else "16-mixed"
    top = world.fp16_overflow and precision == "16-mixed" and lr > 1.5e-2
    overflow = top and at == "scores" and backend == "math"
    inf_at = INF_STEP if world.inf_between_probes else 99  # 99: a probe of the sweep (every 20 steps) sees it
    windows = 2.3 + window_effect + rng.normal(0, 0.02, N)
    probe = {"jacobian_trace": (0.9, 0.8), "grad_wq": (1.0, 1.0), "grad_wk": (1.0, 1.0),
             "scores_inf": lambda s: float(overflow and s >= inf_at),
             "raw_qk": lambda s: math.inf if top and at != "sdpa" and s >= inf_at else 900.0 + 100 * s,
             "scaled_qk": lambda s: math.inf if overflow and s >= inf_at else 60.0 + 6 * s}
    train = [4.0 - 1.5 * min(s, 150) / 150 for s in range(NAN_STEP + 1 if overflow else 300)]
    if overflow:
        train[-1] = math.nan
    cfg = config("unit", 256, scale, "", lr, seed, precision, backend, at)
    batch = None
    if experiment == "sqrt_dk_fp16_probe":
        cfg["callbacks"]["stability"]["every_n_steps"] = 1
        if world.batch_probe:  # the raw product passes 65,504 at NAN_STEP where it overflows (unless the world says
            # the new seeds' runs go non-finite with every product finite); the scale on q and k divides it by 16
            cause = overflow and (world.new_seeds_overflow or seed not in NEW_SEEDS)
            raw = (lambda s: 70000.0 if cause and s == NAN_STEP else BATCH_SLOPE * s) if overflow else \
                (lambda s: BATCH_SLOPE * s)
            absolute = (lambda s: 70000.0 if s == NAN_STEP - 5 else raw(s)) if overflow and world.negative_overflow \
                else raw  # a negative product of -70,000 five batches early: its largest |q.k|, not its largest q.k
            batch = {"stab/batch_raw_qk": absolute,
                     "stab/batch_scaled_qk": (lambda s: absolute(s) / 16) if scale == "sqrt_dk" else absolute}
            if world.signed_probe:
                batch.update({"stab/batch_raw_qk_pos": raw,
                              "stab/batch_scaled_qk_pos": (lambda s: raw(s) / 16) if scale == "sqrt_dk" else raw})
    write_run(d, cfg, experiment, arm, windows, 2.6, train, probe,
              diverged=f"training loss nan at step {NAN_STEP + 1}" if overflow else None,  # the guard counts from 1
              batch=batch)


def make_sweep(root: Path, world: World = World()) -> int:
    """The float32 sweep under root; returns the number of runs."""
    root.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    window_effect = rng.normal(0, 0.2, N)
    cells = [(init, dk, scale, "") for init in ("unit", "gpt2") for dk in (16, 64, 256)
             for scale in ("sqrt_dk", "none")]
    cells += [("unit", 256, "none", control) for control in ("init", "full")]
    job = 0
    for cell in cells:
        for lr in LRS:
            for seed in SEEDS:
                float32_run(root / str(job), rng, world, window_effect, *cell, lr, seed)
                job += 1
    return job


def make_fp16_sweep(root: Path, world: World = World(), reruns: bool = True, replay: bool = False,
                    new_seeds: bool = False) -> int:
    """The float16 sweep under root/fp16 and, with ``reruns``, the float32 reruns of its diverged runs under
    root/fp32, and with ``replay`` amendment 2's replay (the arms F1 compares at the higher rate, probed after every
    step) under root/replay; returns the number of runs."""
    rng = np.random.default_rng(1)
    window_effect = rng.normal(0, 0.2, N)
    job = 0
    for arm in FP16_ARMS:
        for lr in (1e-2, 2.154e-2):
            for seed in SEEDS:
                fp16_run(root / "fp16" / str(job), rng, world, window_effect, arm, lr, seed)
                job += 1
                scale, at, backend = FP16_ARMS[arm]
                if reruns and world.fp16_overflow and (at, backend) == ("scores", "math") and lr > 1.5e-2:
                    fp16_run(root / "fp32" / str(job), rng, world, window_effect, arm, lr, seed, "sqrt_dk_fp32")
                    job += 1
                if replay and arm in ("fp16_sqrt_scores", "fp16_sqrt_qk", "fp16_none_math") and lr > 1.5e-2:
                    fp16_run(root / "replay" / str(job), rng, world, window_effect, arm, lr, seed,
                             "sqrt_dk_fp16_probe")
                    job += 1
    if replay and new_seeds:  # amendment 4's new seeds: replayed, with no run of the float16 sweep
        for arm in ("fp16_sqrt_scores", "fp16_sqrt_qk", "fp16_none_math"):
            for seed in NEW_SEEDS:
                fp16_run(root / "replay" / str(job), rng, world, window_effect, arm, 2.154e-2, seed,
                         "sqrt_dk_fp16_probe")
                job += 1
    return job

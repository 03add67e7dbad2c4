"""The mechanism at init over many init draws, with no training: the softmax gain and the Jacobian trace
(tinygpt.train.probes.diagnostics.softmax_gradients, means of the layers) of Experiment 2's model at unit-variance
init, for each d_k and scale, over DRAWS init draws (torch seeds 0 ... DRAWS - 1) on the stability probe's fixed
validation windows. Three seeds cannot resolve the gain (its seed sd is of the order of its change); the draws cost
a forward and a backward each. Saved as docs/experiments/sqrt_dk/init_draws.json beside the report, which reads it:

    python -m tinygpt.experiments.sqrt_dk.init_draws            # writes docs/experiments/sqrt_dk/init_draws.json

``draws`` is the computation on any model config and windows (tested on a tiny one); ``compute`` composes the
experiment's own config (configs/experiment/sqrt_dk.yaml with each arm) and reads its validation windows.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

DRAWS = 30
ARMS = tuple(f"unit_dk{d}_{s}" for d in (16, 64, 256) for s in ("sqrt", "none"))  # unit init, each d_k and scale
MEASURES = ("softmax_gain", "jacobian_trace")
FILE = "init_draws.json"
FORMAT = 1


def draws(model: dict, vocab_size: int, x, y, n: int = DRAWS) -> dict[str, list[float]]:
    """Each measure, the mean of the layers, at init for init draws 0 ... n-1 (torch.manual_seed(draw) before the
    model is built, as a run seeds before it builds its model): {measure: [n values]}."""
    import torch

    from tinygpt.model.gpt import GPT, GPTConfig
    from tinygpt.train.probes.diagnostics import softmax_gradients

    out: dict[str, list[float]] = {m: [] for m in MEASURES}
    for draw in range(n):
        torch.manual_seed(draw)
        m = GPT(GPTConfig(vocab_size=vocab_size, **model))
        found = softmax_gradients(m, x, y)
        for name in MEASURES:
            out[name].append(float(np.nanmean(found[name])))
    return out


def compute(arms: tuple[str, ...] = ARMS, n: int = DRAWS) -> dict:
    """The experiment's model for each arm (its composed config) on the stability probe's validation windows."""
    from hydra import compose, initialize_config_dir
    from omegaconf import OmegaConf

    from tinygpt.experiments import registry
    from tinygpt.runtime.run_dirs import register_resolvers
    from tinygpt.train import schema
    from tinygpt.train.values import build

    root = Path(__file__).resolve().parents[4]  # a source checkout: its configs/ and data cache, as train.py has them
    register_resolvers(project_root=root)
    schema.register_schemas()
    registry.register_schemas()
    configs = root / "configs"
    result = {"format": FORMAT, "draws": n, "seeds": f"torch.manual_seed(0 ... {n - 1})", "arms": {}}
    windows = None
    for arm in arms:
        with initialize_config_dir(config_dir=str(configs), version_base="1.3"):
            cfg = compose("train", overrides=["experiment=sqrt_dk", f"arm/sqrt_dk={arm}"])
        if windows is None:
            dm = build("data", cfg.data, build("corpus", cfg.corpus))
            dm.prepare_data()
            dm.setup("fit")
            k = int(cfg.callbacks.stability.windows)
            windows = (*dm.spread_windows(k), dm.vocab_size, k)
        x, y, vocab, k = windows
        model = OmegaConf.to_container(cfg.model, resolve=True)
        result["windows"] = k
        result["arms"][arm] = {"d_k": int(model["n_embd"]) // int(model["n_head"]), "scale": model["attn"]["scale"],
                               "init": model["attn"]["qk_init"], **draws(model, vocab, x, y, n)}
    return result


def save(result: dict, path: Path) -> Path:
    path.write_text(json.dumps(result, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    return path


def load(path: Path) -> dict | None:
    """The saved draws (None where the file is absent or of another format)."""
    from tinygpt.analysis.records import read_input

    return read_input(path, FORMAT)


def mean_interval(values, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and its t-interval over independent draws (one level: the init draw)."""
    from scipy import stats

    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if len(v) < 2:
        return (float(v.mean()) if len(v) else math.nan), math.nan, math.nan
    m, se = float(v.mean()), float(v.std(ddof=1) / math.sqrt(len(v)))
    t = float(stats.t.ppf(0.5 + level / 2, len(v) - 1))
    return m, m - t * se, m + t * se


def paired_difference(a, b, level: float = 0.95) -> tuple[float, float, float]:
    """mean(a - b) and its t-interval over draws paired by their index (the same torch seed: the same weights, the
    scale aside)."""
    return mean_interval(np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64), level)


def relative_change(a, b, level: float = 0.95, n_boot: int = 2000, seed: int = 0) -> tuple[float, float, float]:
    """mean(b) / mean(a) - 1 over two independent sets of draws, with a percentile bootstrap interval (each set
    resampled on its own)."""
    a, b = np.asarray(a, dtype=np.float64), np.asarray(b, dtype=np.float64)
    rng = np.random.default_rng(seed)
    ra = a[rng.integers(0, len(a), (n_boot, len(a)))].mean(1)
    rb = b[rng.integers(0, len(b), (n_boot, len(b)))].mean(1)
    reps = rb / ra - 1
    lo, hi = np.quantile(reps, [(1 - level) / 2, 1 - (1 - level) / 2])
    return float(b.mean() / a.mean() - 1), float(lo), float(hi)


def main(argv: list[str] | None = None) -> int:
    from tinygpt.analysis.templates import DOCS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--out", type=Path, default=DOCS / "sqrt_dk" / FILE)
    args = parser.parse_args(argv)
    path = save(compute(ARMS, args.draws), args.out)
    print(f"init draws: {args.draws} per arm, {len(ARMS)} arms -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

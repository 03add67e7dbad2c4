"""Experiment 4's mechanism at init, with no training (DESIGN.md, M1-M3 and P4): the T = 64 model without positions,
causal and not, built DRAWS times (torch seeds SEED0 ... SEED0 + DRAWS - 1), each draw on its own WINDOWS windows:
validation windows of the Shakespeare corpus drawn at random, and windows of independent uniform random tokens (the
argument's premise: independent values). Saved as docs/experiments/positions/init_draws.json beside the report:

    python -m tinygpt.experiments.positions.init_draws        # writes docs/experiments/positions/init_draws.json

Per draw and window set: the first layer's attention output's mean square at each position (measures.
attention_output_power, averaged over the windows), the curve the argument predicts from the same windows' token
coincidences (``predicted_power``), and the position probe's held-out R^2 per layer (measures.probe_errors). Each
draw samples its own windows, so the draws are independent replicates of both levels and a t-interval over them
covers both. ``draws`` is the computation on any config and token stream (tested on a tiny one); ``compute``
composes the experiment's own config and reads its validation split.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

DRAWS = 32
SEED0 = 2000  # the draws' torch seeds: 2000 ... 2031, none a training seed of this project (1000-1001: the smoke test)
WINDOWS = 256
SMOKE = (1000, 1001)  # the 2 draws seen while this script was written, before the design (DESIGN.md)
FILE = "init_draws.json"
FORMAT = 1
SETS = ("shakespeare", "random")  # the windows: the corpus's validation split, independent uniform tokens


def predicted_power(x: np.ndarray) -> np.ndarray:
    """(T,): r(t) = E[#{(j, k): j, k <= t, x_j = x_k}] / (t + 1)^2 over the windows x (N, T): the mean square of a
    uniform average over t + 1 values, relative to one value's, when the values of the same token are equal and
    those of different tokens uncorrelated."""
    n, T = x.shape
    same = x[:, :, None] == x[:, None, :]  # (N, T, T): tokens j and k equal
    pairs = same.cumsum(1).cumsum(2)  # (N, T, T): pairs within (0..a, 0..b)
    diagonal = pairs[:, np.arange(T), np.arange(T)]  # (N, T): pairs with j, k <= t
    return diagonal.mean(0) / (np.arange(T) + 1.0) ** 2


def draws(model: dict, vocab_size: int, streams: dict[str, np.ndarray], n: int = DRAWS, windows: int = WINDOWS,
          seed0: int = SEED0) -> dict:
    """For each draw and each causal setting (True, False), on each token stream of ``streams`` ({name: ids},
    None for independent uniform tokens): the attention output's power by position, the predicted curve and the
    probe's R^2 per layer. Returns {"causal"|"no_mask": {set: {"power": [n x T], "predicted": [n x T],
    "r2": [n x (L + 1)]}}}."""
    import torch

    from tinygpt.experiments.positions import measures
    from tinygpt.model.gpt import GPT, GPTConfig

    T = int(model["block_size"])
    out: dict = {}
    for causal in (True, False):
        arm = out.setdefault("causal" if causal else "no_mask", {})
        for name, ids in streams.items():
            got = arm.setdefault(name, {"power": [], "predicted": [], "r2": []})
            for draw in range(n):
                rng = np.random.default_rng(seed0 + draw)  # the windows: drawn per draw, the same for both arms
                if ids is None:
                    x = rng.integers(0, vocab_size, (windows, T))
                else:
                    starts = rng.integers(0, len(ids) - T, windows)
                    x = np.stack([np.asarray(ids[s : s + T]) for s in starts])
                torch.manual_seed(seed0 + draw)  # the weights: the same draw for both arms and both streams
                cfg = {**model, "position": "none", "attn": {**model["attn"], "causal": causal}}
                m = GPT(GPTConfig(vocab_size=vocab_size, **cfg))
                xt = torch.as_tensor(x, dtype=torch.long)
                got["power"].append(measures.attention_output_power(m, xt).mean(0).tolist())
                got["predicted"].append(predicted_power(x).tolist())
                sse, sst = measures.probe_errors(measures.hidden_states(m, xt), *measures.fit_and_held(windows))
                got["r2"].append((1 - sse.sum(1) / sst.sum()).tolist())
    return out


def compute(n: int = DRAWS) -> dict:
    """The experiment's model at T = 64 (its composed config) on its validation split and on random tokens."""
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
    with initialize_config_dir(config_dir=str(root / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=["experiment=positions", "arm/positions=t64"])
    dm = build("data", cfg.data, build("corpus", cfg.corpus))
    dm.prepare_data()
    dm.setup("fit")
    model = OmegaConf.to_container(cfg.model, resolve=True)
    model.pop("patch", None)
    found = draws(model, dm.vocab_size, {"shakespeare": np.asarray(dm.val_ids), "random": None}, n)
    return {"format": FORMAT, "draws": n, "seeds": f"torch.manual_seed({SEED0} ... {SEED0 + n - 1})",
            "windows": WINDOWS, "block_size": int(model["block_size"]), "vocab_size": int(dm.vocab_size),
            "n_layer": int(model["n_layer"]), **found}


def save(result: dict, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, sort_keys=True, separators=(",", ":")) + "\n", encoding="utf-8")
    return path


def load(path: Path) -> dict | None:
    """The saved draws (None where the file is absent or of another format)."""
    from tinygpt.analysis.records import read_input

    return read_input(path, FORMAT)


def main(argv: list[str] | None = None) -> int:
    from tinygpt.analysis.templates import DOCS

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--draws", type=int, default=DRAWS)
    parser.add_argument("--out", type=Path, default=DOCS / "positions" / FILE)
    args = parser.parse_args(argv)
    path = save(compute(args.draws), args.out)
    print(f"init draws: {args.draws} per arm and window set -> {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

"""Shared test helpers: the tiny recipe, the test corpus, running train.py, composing its config.

Imported by the tests (``from helpers import ...``); conftest.py holds only fixtures."""

import os
import subprocess
import sys
from pathlib import Path

from tinygpt.runtime.run_dirs import register_resolvers

ROOT = Path(__file__).resolve().parents[1]
register_resolvers(project_root=ROOT)  # as train.py does: ${run_id:} in run dirs, ${project_root:} for the cache

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

# A small public-domain text (Sonnets 18 and 116 and a bit of Hamlet), repeated to a few KB.
TEXT = """SONNET 18:
Shall I compare thee to a summer's day?
Thou art more lovely and more temperate:
Rough winds do shake the darling buds of May,
And summer's lease hath all too short a date.

HAMLET:
To be, or not to be, that is the question:
Whether 'tis nobler in the mind to suffer
The slings and arrows of outrageous fortune,
Or to take arms against a sea of troubles
And by opposing end them.

SONNET 116:
Let me not to the marriage of true minds
Admit impediments. Love is not love
Which alters when it alteration finds,
Or bends with the remover to remove.
"""


# The tiny model's test recipe: model/ holds the architecture only, so the training knobs are set here.
TINY = [
    "model=tiny",
    "data.batch_size=4",
    "data.val_windows=32",
    "trainer.max_steps=20",
    "trainer.val_check_interval=10",
    "optim.warmup_steps=2",
    "callbacks.attention_maps.every_n_steps=10",
    "callbacks.text_samples.max_new_tokens=24",
    "callbacks.stability.every_n_steps=10",
]


def run_train(args: list[str], env: dict | None = None, check: bool = True) -> subprocess.CompletedProcess:
    """Run `python train.py ARGS` from the repository root; fail with its output if it fails.

    ``env`` entries set to None are removed from the environment."""
    full_env = {**os.environ, **(env or {})}
    full_env = {k: v for k, v in full_env.items() if v is not None}
    proc = subprocess.run(
        [sys.executable, str(ROOT / "train.py"), *args],
        cwd=ROOT, env=full_env, capture_output=True, text=True, timeout=600,
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"train.py {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}")
    audit_leak_alarm(args)
    return proc


ALARM_AUDIT = {"causal runs": 0, "false alarms": 0}  # every train.py run of the suite (printed by conftest.py)


def audit_leak_alarm(args: list[str]) -> None:
    """Every finished run of a causal model without an injected bug, under the run or sweep dir the args name, must
    end with no leak detected; counted in ALARM_AUDIT, and a false alarm fails the test that ran it."""
    import json

    dirs = [Path(a.split("=", 1)[1]) for a in args if a.startswith(("hydra.run.dir=", "hydra.sweep.dir="))]
    for d in dirs:
        for path in (d.rglob("summary.json") if d.is_dir() else []):
            summary = json.loads(path.read_text())
            config = summary.get("config", {})
            if "leak_detected_step" not in summary or not config.get("model", {}).get("attn", {}).get("causal"):
                continue
            if config.get("attention_bug"):
                continue
            ALARM_AUDIT["causal runs"] += 1
            if summary["leak_detected_step"] is not None:
                ALARM_AUDIT["false alarms"] += 1
                raise AssertionError(f"the leak alarm fired on a causal run: {path}: {summary['leak_signal']} "
                                     f"{summary['leak_value']} at step {summary['leak_detected_step']}")


def compose_train(overrides=(), out_dir: Path | None = None):
    """train.yaml composed with ``overrides`` as `python train.py` would. With ``out_dir``: Hydra's runtime
    is set (so ${hydra:runtime.output_dir} resolves to it) and, as a task function gets it, the config
    without its ``hydra`` node is returned."""
    from hydra import compose, initialize_config_dir
    from hydra.core.hydra_config import HydraConfig
    from omegaconf import open_dict

    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        cfg = compose("train", overrides=list(overrides), return_hydra_config=True)
    if out_dir is not None:
        with open_dict(cfg):
            cfg.hydra.runtime.output_dir = str(out_dir)
            cfg.hydra.run.dir = str(out_dir)
        HydraConfig.instance().set_config(cfg)
        with open_dict(cfg):
            del cfg["hydra"]
    return cfg


# ----------------------------------------------------------------------------- the leak tests' two probes
# (used by tests/model/test_gpt.py on the production attention and by tests/experiments/ on each real-world bug)


def past_moves_when_future_changes(model, idx, t: int):
    """The largest |change| in logits[:, :t+1] when every token after t is changed ((id + 7) mod vocab): exactly
    0 for a model that cannot see the future. ``model`` in eval mode; idx (B, T)."""
    import torch

    idx2 = idx.clone()
    idx2[:, t + 1:] = (idx2[:, t + 1:] + 7) % model.config.vocab_size
    with torch.no_grad():
        a, b = model(idx)[0], model(idx2)[0]  # (B, T, V)
    return (a[:, : t + 1] - b[:, : t + 1]).abs().max().item()


def future_jacobian(model, idx):
    """(T, T) tensor: entry [t, j] is the largest |d (r . logits[0, t]) / d embedding[0, j]| for a random r,
    one backward pass per t (J_t^T r). Exactly 0 for every j > t in a model that cannot see the future.
    Run it on a float64 model in eval mode; idx (1, T)."""
    import torch

    emb = model.wte(idx).detach().requires_grad_(True)  # (1, T, C)
    handle = model.wte.register_forward_hook(lambda module, args, out: emb)
    try:
        logits = model(idx)[0]  # (1, T, V)
    finally:
        handle.remove()
    r = torch.randn(logits.shape[-1], dtype=logits.dtype, generator=torch.Generator().manual_seed(0))
    rows = []
    for t in range(idx.shape[1]):
        (g,) = torch.autograd.grad(logits[0, t] @ r, emb, retain_graph=True)  # (1, T, C)
        rows.append(g[0].abs().amax(-1))  # (T,)
    return torch.stack(rows)  # (T, T)


def write_checkpoint(path: Path, vocab_size: int = 64, step: int = 60, tokenizer: str | None = None) -> Path:
    """A small train.py-like checkpoint (2 layers, 2 heads, 16 wide, context 16, random weights) at ``path``, in a
    second: for the command-line tools' tests. Without ``tokenizer`` it is a token-id model (random_tokens)."""
    import torch

    from tinygpt.model.gpt import GPT, GPTConfig

    model = {"block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 16}
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=vocab_size, **model))
    ckpt = {"state_dict": {f"model.{k}": v for k, v in gpt.state_dict().items()},
            "hyper_parameters": {"model": model, "vocab_size": vocab_size}, "global_step": step}
    if tokenizer is not None:
        ckpt["tokenizer"] = tokenizer
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path

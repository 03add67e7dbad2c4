import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

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


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text(TEXT * 12, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One data cache for the whole session, so each corpus is tokenized once."""
    return tmp_path_factory.mktemp("cache")


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
    return proc

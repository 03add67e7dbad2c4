"""Shared test helpers: the tiny recipe, the test corpus, running train.py, composing its config.

Imported by the tests (``from helpers import ...``); conftest.py holds only fixtures."""

import os
import subprocess
import sys
from pathlib import Path

from tinygpt.experiments import registry
from tinygpt.runtime.run_dirs import register_resolvers
from tinygpt.train import schema

ROOT = Path(__file__).resolve().parents[1]
register_resolvers(project_root=ROOT)  # as train.py does: ${run_id:} in run dirs, ${project_root:} for the cache
schema.register_schemas()  # and the config's types
registry.register_schemas()

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


# each corpus's required settings (its ``???`` keys in configs/corpus/<source>.yaml) as the tests give them, ``{file}``
# a text file; a corpus without its line here fails tests/train/test_schema.py, naming the setting unset
CORPUS_GIVEN = {"text_file": ("path={file}",), "hf_hub": ("name=some/set",)}


def corpus_overrides(source: str, file: str | Path = "corpus.txt") -> list[str]:
    """``corpus=<source>`` and its required settings (CORPUS_GIVEN), ``file`` where a text file is asked for."""
    return [f"corpus={source}", *(f"corpus.{given.format(file=file)}" for given in CORPUS_GIVEN.get(source, ()))]


def other_values(f) -> list:
    """The values of a model setting (a field of AttnConfig or GPTConfig) other than its default that a run could give
    it: the other choices of the tuple in tinygpt.model.config that holds its default (BACKENDS, SCALES, ...), the
    other truth value of a bool, or the field's ``metadata={"example": value}``."""
    import tinygpt.model.config as config_module

    if "example" in f.metadata:
        return [f.metadata["example"]]
    if isinstance(f.default, bool):
        return [not f.default]
    holders = [t for t in vars(config_module).values() if isinstance(t, tuple) and f.default in t]
    assert len(holders) == 1, (f"{f.name}: no tuple of choices in tinygpt.model.config holds its default "
                               f"{f.default!r}; give the field metadata={{'example': <a non-default value>}}.")
    return [v for v in holders[0] if v != f.default]


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


ALARM_AUDIT = {"causal runs": 0, "false alarms": 0}  # the runs no_false_alarm checked (printed by conftest.py)


def no_false_alarm(*dirs: Path) -> int:
    """Assert that every finished run of a causal model without an injected bug under these run or sweep dirs ended
    with no leak detected; counted in ALARM_AUDIT (the suite's false-alarm record). Returns how many it checked."""
    import json

    checked = ALARM_AUDIT["causal runs"]
    for d in map(Path, dirs):
        for path in (d.rglob("summary.json") if d.is_dir() else []):
            summary = json.loads(path.read_text())
            config = summary.get("config", {})
            if "leak_detected_step" not in summary or not config.get("model", {}).get("attn", {}).get("causal"):
                continue
            if config["model"].get("patch"):
                continue
            ALARM_AUDIT["causal runs"] += 1
            if summary["leak_detected_step"] is not None:
                ALARM_AUDIT["false alarms"] += 1
                raise AssertionError(f"the leak alarm fired on a causal run: {path}: {summary['leak_signal']} "
                                     f"{summary['leak_value']} at step {summary['leak_detected_step']}")
    return ALARM_AUDIT["causal runs"] - checked


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


def write_checkpoint(path: Path, vocab_size: int = 64, step: int = 60, tokenizer: str | None = None,
                     model: dict | None = None, extra: dict | None = None) -> Path:
    """A small train.py-like checkpoint (2 layers, 2 heads, 16 wide, context 16, random weights; ``model`` changes
    these model.* settings, ``extra`` adds hyper-parameters) at ``path``, in a second: for the command-line tools'
    tests. Without ``tokenizer`` it is a token-id model (random_tokens)."""
    import torch

    from tinygpt.model.gpt import GPT, GPTConfig

    model = {"block_size": 16, "n_layer": 2, "n_head": 2, "n_embd": 16, **(model or {})}
    torch.manual_seed(0)
    gpt = GPT(GPTConfig(vocab_size=vocab_size, **model))
    hp = {"model": model, "vocab_size": vocab_size, **(extra or {})}
    ckpt = {"state_dict": {f"model.{k}": v for k, v in gpt.state_dict().items()}, "hyper_parameters": hp,
            "global_step": step}
    if tokenizer is not None:
        ckpt["tokenizer"] = tokenizer
    path.parent.mkdir(parents=True, exist_ok=True)
    torch.save(ckpt, path)
    return path


# ----------------------------------------------------------------------------- a small GPT-2 in Hugging Face's format


def write_hf_gpt2(path: Path, tokenizer_files: str = "tokenizer.json", seed: int = 0, n_positions: int = 16) -> Path:
    """A small random GPT-2 saved as `transformers` saves one (config.json, model.safetensors: 2 layers, 2 heads,
    32 wide, ``n_positions`` positions, weights of std 0.1) with a byte-level BPE of 300 tokens trained by
    `tokenizers` on TEXT, saved as tokenizer.json or (``tokenizer_files="vocab.json"``) as vocab.json + merges.txt.
    Its biases and LayerNorm parameters are random too (GPT-2's init makes them 0 and 1, which would hide a bias mapped
    to the wrong place)."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import GPT2Config, GPT2LMHeadModel

    tok = ByteLevelBPETokenizer()
    tok.train_from_iterator(TEXT.splitlines(), vocab_size=300, special_tokens=["<|endoftext|>"], show_progress=False)
    eot = tok.token_to_id("<|endoftext|>")
    torch.manual_seed(seed)
    config = GPT2Config(n_layer=2, n_head=2, n_embd=32, n_positions=n_positions, vocab_size=tok.get_vocab_size(),
                        bos_token_id=eot, eos_token_id=eot, initializer_range=0.1)  # logits of a few units
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.normal_(0.0, 0.05)
            elif ".ln_" in name:
                p.normal_(1.0, 0.1)
    path.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(path)
    if tokenizer_files == "tokenizer.json":
        tok.save(str(path / "tokenizer.json"))
    else:
        tok.save_model(str(path))  # vocab.json + merges.txt
    return path


# ----------------------------------------------------------------------------- a run exported to transformers

# A few steps of a run, in-process (the model: model=tiny with model.block_size=32, long enough for a prompt and 20
# greedy tokens, or init_from's).
EXPORT_RECIPE = ["logger=csv", "data.batch_size=4", "data.val_windows=8",
                 "trainer.max_steps=3", "trainer.val_check_interval=3", "trainer.log_every_n_steps=1",
                 "optim.warmup_steps=1", "diagnostics.windows=4", "callbacks.attention_maps.every_n_steps=0",
                 "callbacks.text_samples.max_new_tokens=4", "callbacks.stability.every_n_steps=3"]


def train_in_process(out: Path, overrides: list[str]) -> dict:
    """train.py's run of ``overrides`` in this process, into ``out`` (as tests/train/test_end_of_run.py runs them):
    its summary. A second or so for the tiny model, where a subprocess pays the imports again."""
    from tinygpt.train import run as run_phases

    return run_phases.train(compose_train(overrides, out_dir=out))


def transformers_agreement(ours, theirs, ids) -> dict:
    """How far transformers' model is from ours on ids (B, T), both in eval mode: float32 logits (the largest
    difference over the largest logit), float64 logits (the largest difference, both models cast to double and back)
    and the loss (ours on ids[:, :-1] -> ids[:, 1:], transformers' with labels=ids, which it shifts itself)."""
    import torch

    with torch.no_grad():
        a, b = ours(ids)[0], theirs(ids).logits  # (B, T, V)
        _, loss = ours(ids[:, :-1], ids[:, 1:])
        expected = theirs(input_ids=ids, labels=ids).loss
        try:
            a64, b64 = ours.double()(ids)[0], theirs.double()(ids).logits
        finally:
            ours.float(), theirs.float()
    return {"float32": ((a - b).abs().max() / b.abs().max()).item(), "float64": (a64 - b64).abs().max().item(),
            "loss": abs(loss.item() - expected.item()) / expected.item()}


def greedy_three_ways(ours, theirs, prompt: list[int], new: int) -> tuple[list[int], list[int], list[int]]:
    """``new`` greedy tokens after ``prompt``: ours with the KV cache, ours without, transformers' generate
    (do_sample=False; eos_token_id=None, as our generate never stops at <|endoftext|>)."""
    import torch

    from tinygpt.sampling.generate import generate

    idx = torch.tensor([prompt])
    cached, recomputed = (generate(ours, idx, new, top_k=1, use_cache=c)[0].tolist() for c in (True, False))
    with torch.no_grad():
        hf = theirs.generate(idx, attention_mask=torch.ones_like(idx), do_sample=False, max_new_tokens=new,
                             eos_token_id=None, pad_token_id=0)[0].tolist()
    return cached, recomputed, hf


# ----------------------------------------------------------------------------- synthetic sweeps for the reports

def out_dir(path):
    """``path``, made (a report's --out)."""
    path.mkdir()
    return path


def write_job(path, *, config, summary, windows, honest=None, train_loss=None, vocab=65):
    """One job's files as a real job writes them, for the reports' synthetic sweeps: summary.json (with its config),
    diagnostics.npz, history/metrics.csv."""
    import csv
    import json

    import numpy as np

    path.mkdir(parents=True)
    honest = windows[:32] if honest is None else honest
    np.savez(path / "diagnostics.npz", val_window_position=windows.astype(np.float32),
             honest_window_position=honest.astype(np.float32),
             probe_index=np.linspace(0, len(windows) - 1, 32).astype(np.int64))
    diag = {"honest_at": list(range(honest.shape[1])), "unigram_loss": 3.3, "bigram_loss": 2.5,
            "loss_by_position": windows.mean(0).tolist()}
    full = {"status": "completed", "diverged": False, "vocab_size": vocab, "threads": 1, "config": config,
            "val_loss": float(windows.mean()), "val_loss_honest": float(honest.mean()), "future_leak": 0.0,
            "attn_future_mass": 0.0, "attn_entropy": 0.5, "attn_max_logit": 5.0, "diagnostics": diag, **summary}
    (path / "summary.json").write_text(json.dumps(full))
    (path / "history").mkdir()
    with open(path / "history" / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "train/loss", "val/loss"])
        for step, loss in enumerate(train_loss if train_loss is not None else []):
            w.writerow([step, loss, loss if step % 100 == 99 else ""])

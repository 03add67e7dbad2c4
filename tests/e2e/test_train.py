"""End-to-end: `python train.py` on the tiny model, as a user runs it."""

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from helpers import ROOT, TINY, compose_train, no_false_alarm, run_train, train_in_process
from tinygpt.experiments import report
from tinygpt.bench import report as bench_report
from tinygpt.bench.programs import REFUSALS
from tinygpt.train.callback_settings import MONITORABLE

SUMMARY_KEYS = {"train_loss", "val_loss", "val_loss_honest", "future_leak", "attn_entropy",
                "attn_max_logit", "diverged", "steps", "tokens_per_sec", "config"}  # design.md


def tiny_overrides(corpus_file: Path, cache_dir: Path, *extra: str) -> list[str]:
    """The tiny recipe on the test corpus (for train_in_process: no run dir among them)."""
    return [*TINY, "corpus=text_file", f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}", *extra]


def tiny_args(out: Path, corpus_file: Path, cache_dir: Path, *extra: str) -> list[str]:
    """The same as `python train.py` arguments, into ``out``."""
    return [*tiny_overrides(corpus_file, cache_dir, *extra), f"hydra.run.dir={out}"]


# ----------------------------------------------------------------------------- config (fast)


def test_default_config_is_nanogpts_cpu_recipe():
    cfg = compose_train()
    m = cfg.model
    assert (m.n_layer, m.n_head, m.n_embd, m.block_size, m.dropout) == (4, 4, 128, 64, 0.0)
    assert (m.attn.causal, m.attn.scale, m.attn.backend) == (True, "sqrt_dk", "sdpa")
    assert cfg.corpus._target_ == "tinygpt.data.corpus.Shakespeare" and cfg.data.batch_size == 12
    assert cfg.data.tokenizer == "char"
    assert cfg.data.block_size == 64
    assert cfg.trainer.max_steps == 2000 and cfg.trainer.gradient_clip_val == 1.0
    o = cfg.optim
    assert (o.lr, o.min_lr, o.warmup_steps, o.decay_steps, list(o.betas), o.weight_decay) == (
        1e-3, 1e-4, 100, 2000, [0.9, 0.99], 0.1)
    assert list(cfg.logger) == ["wandb", "csv"]  # W&B, and the local per-step history


def test_overrides_compose():
    cfg = compose_train(["model=tiny", "model.attn.causal=false", "model.attn.scale=0.5", "trainer.max_steps=7"])
    assert cfg.model.attn.causal is False and cfg.model.attn.scale == 0.5
    assert cfg.optim.decay_steps == 7 and cfg.data.block_size == 16


# ----------------------------------------------------------------------------- end to end: one run, its artifacts


@pytest.fixture(scope="module")
def offline_run(tmp_path_factory, corpus_file, cache_dir):
    """`python train.py` on the tiny model as a user without W&B credentials runs it (stability probe every 5
    steps): its run dir and what it printed. One process, read by the tests below, one artifact each."""
    tmp = tmp_path_factory.mktemp("offline")
    out, home = tmp / "run", tmp / "home"  # no ~/.netrc and no API key: the run must go offline by itself
    home.mkdir()
    env = {"HOME": str(home), "WANDB_API_KEY": None, "WANDB_MODE": None, "COLUMNS": "80"}  # piped, 80 columns
    proc = run_train(tiny_args(out, corpus_file, cache_dir, "callbacks.stability.every_n_steps=5"), env=env)
    return out, proc.stdout + proc.stderr


def history_rows(out: Path) -> list[dict]:
    return list(csv.DictReader(io.StringIO((out / "history" / "metrics.csv").read_text())))


def test_a_run_without_credentials_goes_offline_and_says_how_to_sync(offline_run):
    out, console = offline_run
    assert "wandb sync" in console
    (done,) = [line for line in console.splitlines() if "done" in line]  # at 80 columns, piped: never wrapped
    assert done.endswith(str(out / "summary.json"))
    assert len(list((out / "wandb").glob("offline-run-*"))) == 1


def test_the_summary_holds_every_key_with_sane_values(offline_run):
    out, _ = offline_run
    summary = json.loads((out / "summary.json").read_text())
    assert SUMMARY_KEYS <= summary.keys()
    assert summary["status"] == "completed" and summary["steps"] == 20 and summary["diverged"] is False
    assert 0 < summary["val_loss"] < 10 and 0 < summary["train_loss"] < 10
    assert summary["tokens_per_sec"] > 0
    assert summary["config"]["model"]["n_layer"] == 2
    assert summary["future_leak"] == 0.0  # causal: the future cannot change the past
    assert summary["attn_future_mass"] == 0.0 and len(summary["loss_by_position"]) == 16
    assert summary["loss_spikes"] == 0 and summary["grad_norm_max"] > 0
    assert summary["val_loss_honest"] == pytest.approx(summary["val_loss_probe"], rel=1e-4)
    assert 0 < summary["attn_entropy"] <= 1
    assert no_false_alarm(out) == 1  # the leak alarm stays silent on a causal model
    assert (out / "config.yaml").exists()


def test_the_history_logs_each_metric_at_its_steps(offline_run):
    out, _ = offline_run
    rows = history_rows(out)
    for key in ("train/loss", "val/loss", "val/loss_honest", "val/loss_probe", "train/grad_norm",
                "train/loss_spikes", "stab/max_logit", "stab/entropy_min", "stab/q_rms/1", "stab/k_rms/0"):
        assert key in rows[0], key
    assert set(MONITORABLE) <= set(rows[0])  # what a checkpoint may monitor (refused otherwise) is logged
    at = lambda key: [int(r["step"]) for r in rows if r.get(key)]  # noqa: E731
    assert at("train/loss") == [9, 19]  # the steps Lightning logs at (every log_every_n_steps = 10)
    assert at("train/grad_norm") == [0, 5, 10, 15]  # each probe once, at the batch it measured (every 5)
    assert at("stab/max_logit") == at("train/loss_spikes") == [0, 4, 9, 14, 19]  # at init, after steps 5 ... 20
    assert at("diag/future_leak") == [20]  # the end-of-run diagnostics, after fit
    summary = json.loads((out / "summary.json").read_text())
    assert float(next(r for r in rows if r.get("diag/future_leak"))["diag/future_leak"]) == summary["future_leak"]


def test_samples_attention_maps_and_checkpoints_are_written(offline_run):
    out, _ = offline_run
    assert [json.loads(line)["step"] for line in (out / "samples.jsonl").read_text().splitlines()] == [10, 20]
    with np.load(out / "attention" / "step000020.npz") as z:
        assert z["weights"].shape == (2, 2, 16, 16) and len(z["labels"]) == 16
    pngs = sorted((out / "attention").glob("*.png"))
    assert [p.name for p in pngs] == [
        "step000010_layer0.png", "step000010_layer1.png", "step000020_layer0.png", "step000020_layer1.png"]
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    assert (out / "attention" / "explorer.html").stat().st_size > 1_000_000  # plotly inside: works offline
    ckpt = out / "checkpoints" / "last.ckpt"
    assert ckpt.exists() and list((out / "checkpoints").glob("best-*.ckpt"))
    saved = torch.load(ckpt, map_location="cpu", weights_only=False)
    assert "tokenizer" in saved and saved["global_step"] == 20
    logged = [float(r["train/loss"]) for r in history_rows(out) if r.get("train/loss")]  # the loss logged
    assert logged == pytest.approx(saved["train_losses"][[9, 19]].tolist(), rel=1e-6)


def test_the_wandb_run_holds_the_maps_samples_grids_and_explorer(offline_run):
    out, _ = offline_run
    media = next((out / "wandb").glob("offline-run-*")) / "files" / "media"
    assert len(list((media / "images").rglob("*.png"))) >= 4  # the attention maps, inside the W&B run
    assert list((media / "table").rglob("*.json")), "text samples table missing from the W&B run"
    assert len(list((media / "plotly").rglob("*.json"))) >= 2, "the interactive grid of each probe step is missing"
    pages = list((media / "html").rglob("*.html"))
    assert pages and b"tinygptExplorer" in pages[0].read_bytes()  # the explorer, at the end


def test_sampling_from_its_checkpoint(offline_run, capsys):
    """scripts/sample.py's main, in this process: a continuation, and two prompts of different lengths in one
    padded batch, each continuing as it does alone (greedy)."""
    from tinygpt.cli.sample import main as sample_main

    ckpt = str(offline_run[0] / "checkpoints" / "last.ckpt")
    assert sample_main(["--ckpt", ckpt, "--prompt", "To be", "--max-new-tokens", "30"]) == 0
    text = capsys.readouterr().out
    assert text.startswith("To be") and len(text.strip()) >= 30
    outs = []
    for prompts in (["--prompt", "O"], ["--prompt", "To be", "--prompt", "O"]):
        assert sample_main(["--ckpt", ckpt, *prompts, "--top-k", "1", "--max-new-tokens", "20"]) == 0
        outs.append(capsys.readouterr().out)
    texts = outs[1].split("\n" + "-" * 40 + "\n")
    assert len(texts) == 2 and texts[0].startswith("To be") and texts[1] == outs[0]


def test_resuming_continues_to_the_new_max_steps(offline_run, tmp_path, corpus_file, cache_dir):
    ckpt = offline_run[0] / "checkpoints" / "last.ckpt"
    out = tmp_path / "resumed"
    resumed = train_in_process(out, tiny_overrides(corpus_file, cache_dir, f"ckpt_path={ckpt}",
                                                   "trainer.max_steps=30", "logger=none"))
    assert resumed["steps"] == 30
    assert torch.load(out / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 30


@pytest.mark.slow
def test_sweep_gives_separate_runs_in_one_group(tmp_path, corpus_file, cache_dir):
    sweep = tmp_path / "sweep"
    args = [
        "-m", *TINY, "corpus=text_file", f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}",
        f"hydra.sweep.dir={sweep}", "trainer.max_steps=6", "trainer.val_check_interval=3",
        "model.attn.causal=true,false",
    ]
    run_train(args)
    jobs = sorted(p for p in sweep.iterdir() if p.is_dir() and p.name.isdigit())
    assert [j.name for j in jobs] == ["0", "1"]
    causal = []
    for job in jobs:
        summary = json.loads((job / "summary.json").read_text())
        causal.append(summary["config"]["model"]["attn"]["causal"])
        assert (summary["future_leak"] == 0.0) == causal[-1]  # the unmasked job leaks
        runs = list((job / "wandb").glob("offline-run-*"))
        assert len(runs) == 1, f"{job} should hold exactly its own W&B run"
    assert causal == [True, False] and no_false_alarm(sweep) == 1  # the causal job: no alarm
    infos = [json.loads((j / "summary.json").read_text())["wandb"] for j in jobs]
    assert len({i["id"] for i in infos}) == 2  # two runs...
    group = "sweep-" + "-".join(sweep.parts[-2:])
    assert [i["group"] for i in infos] == [group, group]  # ...in one group
    assert "model.attn.causal=True" in infos[0]["name"] and "model.attn.causal=False" in infos[1]["name"]
    assert "cache_dir" not in infos[0]["name"]
    for info in infos:  # the group really is in each run's W&B record
        record = next(Path(info["dir"]).glob("run-*.wandb")).read_bytes()
        assert group.encode() in record
    # experiment 1's report also reads a plain `-m model.attn.causal=true,false` sweep on another corpus
    assert report.main(["causal_mask", str(sweep), "--out", str(tmp_path / "report")]) == 0  # in-process
    text = (tmp_path / "report" / "README.md").read_text()
    assert "| text_file:tiny.txt | 16 | causal (masked) |" in text and (tmp_path / "report" / "curves.png").exists()


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_default_corpus_csv_logger_and_no_logger(tmp_path, cache_dir):
    common = [*TINY, "trainer.max_steps=4", "trainer.val_check_interval=2", f"data.cache_dir={cache_dir}"]
    out = tmp_path / "csv"
    assert train_in_process(out, [*common, "logger=csv"])["config"]["corpus"]["_target_"].endswith(".Shakespeare")
    assert (out / "history" / "metrics.csv").is_file()
    out2 = tmp_path / "none"
    assert train_in_process(out2, [*common, "logger=none"])["steps"] == 4
    assert not (out2 / "wandb").exists()
    assert no_false_alarm(out, out2) == 2


@pytest.mark.parametrize(
    "override, message",
    [
        ("model.n_head=3", "model.n_embd=16 must be divisible by model.n_head=3"),
        ("model.attn.scale=sqrt", "model.attn.scale='sqrt' is not one of"),
        ("corpus.path=/no/such/file.txt", "corpus.path='/no/such/file.txt' is not a file"),
        ("trainer.max_steps=0", "trainer.max_steps=0 must be a positive integer"),
        ("seed=-1", "seed=-1 must be an integer in [0, 2**32)"),
        pytest.param("trainer=gpu", "trainer.accelerator='gpu' but this machine has no CUDA GPU",
                     marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")),
        ("optim.warmup_steps=-5", "optim.warmup_steps=-5 must be >= 0"),
        ("diagnostics.windows=0", "diagnostics.windows=0 must be a positive integer"),
        ("data.val_batch_size=0", "data.val_batch_size=0 must be a positive integer"),
        ("callbacks.text_samples.top_k=0", "callbacks.text_samples.top_k=0 must be a positive integer"),
    ],
)
def test_bad_config_fails_before_any_work(tmp_path, corpus_file, cache_dir, override, message):
    """train(cfg) in this process: one ConfigError naming the value, nothing written (train.py turns it into one
    line and exit status 2: the test below, once)."""
    from tinygpt.runtime.errors import ConfigError

    out = tmp_path / "bad"
    with pytest.raises(ConfigError) as err:
        train_in_process(out, tiny_overrides(corpus_file, cache_dir, override))
    assert message in str(err.value) and len(str(err.value).splitlines()) == 1
    assert not (out / "checkpoints").exists() and not (out / "summary.json").exists()


@pytest.mark.slow
def test_a_bad_value_is_one_line_and_exit_status_2_leaving_no_run_dir(tmp_path, corpus_file, cache_dir):
    out = tmp_path / "bad"
    proc = run_train(tiny_args(out, corpus_file, cache_dir, "model.n_head=3"), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines()[-1] == "error: model.n_embd=16 must be divisible by model.n_head=3."
    assert not out.exists()


def test_debug_fast_runs(tmp_path, corpus_file, cache_dir):
    tiny_model = [a for a in TINY if not a.startswith(("trainer.", "callbacks."))]  # debug=fast sets these
    out = tmp_path / "dbg"
    overrides = [*tiny_model, "corpus=text_file", f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}",
                 "debug=fast"]
    assert train_in_process(out, overrides)["steps"] == 10


def test_debug_configs_compose():
    fast = compose_train(["debug=fast"])
    assert fast.trainer.max_steps == 10 and not fast.get("logger")
    overfit = compose_train(["debug=overfit"])
    assert overfit.data.overfit is True and overfit.trainer.max_steps == 300


def test_small_gpu_recipe_composes():
    cfg = compose_train(["experiment=gpu_small"])
    assert (cfg.model.n_layer, cfg.model.n_embd, cfg.model.block_size, cfg.model.dropout) == (6, 384, 256, 0.2)
    assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed"
    assert cfg.data.batch_size == 64 and cfg.trainer.max_steps == 5000


def test_model_group_is_architecture_only():
    """model=small swaps the architecture and nothing else: the recipe stays train.yaml's."""
    base, small = compose_train(), compose_train(["model=small"])
    assert (small.model.n_layer, small.model.n_embd, small.model.block_size) == (6, 384, 256)
    for key in ("data", "trainer", "optim", "logger", "callbacks"):
        assert OmegaConf.to_container(small[key]) == OmegaConf.to_container(base[key]), key


def test_resume_is_exact(tmp_path, corpus_file, cache_dir):
    """10 steps + resume to 20 gives bit-identical weights to 20 straight steps."""
    common = ["logger=none", "trainer.max_steps=20", "optim.decay_steps=20"]
    train_in_process(tmp_path / "full", tiny_overrides(corpus_file, cache_dir, *common))
    train_in_process(tmp_path / "half", tiny_overrides(corpus_file, cache_dir, *common, "trainer.max_steps=10"))
    half_ckpt = tmp_path / "half" / "checkpoints" / "last.ckpt"
    train_in_process(tmp_path / "resumed", tiny_overrides(corpus_file, cache_dir, *common, f"ckpt_path={half_ckpt}"))
    full = torch.load(tmp_path / "full" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    resumed = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    assert full.keys() == resumed.keys()
    assert all(torch.equal(full[k], resumed[k]) for k in full)
    assert no_false_alarm(tmp_path) == 3


@pytest.mark.slow
def test_benchmark_quick_writes_every_key(tmp_path, corpus_file, cache_dir):
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "benchmark.py"), "--data", str(corpus_file), "--quick",
         "--cache-dir", str(cache_dir), "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    for key in ("reference_tokens_per_sec", "reference", "lightning_tokens_per_sec", "wall_s", "reference_wall_s",
                "startup_s", "peak_rss_mib", "reference_peak_rss_mib", "generate_cached_tokens_per_sec",
                "generate_uncached_tokens_per_sec", "attention"):
        assert key in r, key
    assert r["reference"].startswith("plain loop") and r["lightning_tokens_per_sec"] > 0 and r["peak_rss_mib"] > 100
    assert 0 < r["startup_s"] < r["wall_s"]
    floors = r["import_floors"]  # what any program pays first, beside what our run held at its first step
    assert 0 < floors["import torch"]["peak_rss_mib"] < floors["import lightning"]["peak_rss_mib"]
    assert floors["import lightning"]["peak_rss_mib"] < r["first_step_peak_rss_mib"] <= r["peak_rss_mib"]
    walls = sorted(rnd["tinygpt"]["wall_s"] for rnd in r["rounds"])  # two alternating rounds, the median on top
    assert len(walls) == 2 and r["wall_s"] == pytest.approx(sum(walls) / 2)
    assert set(r["attention"]) == {"64", "256"} and r["attention"]["64"]["sdpa"]["fwd_bwd_ms"] > 0
    assert all(g["identical"] for g in r["generate"].values())
    assert r["matmul_peak_gflops"] > 0 and 0 < r["mfu"] < 1 and r["debug_fast_wall_s"] > 0
    assert list(r["step_ab"]) == ["tinygpt GPT, fused AdamW (the default)", "tinygpt GPT, foreach AdamW",
                                  "tinygpt GPT, torch's clip_grad_norm_", "tinygpt GPT, math attention path"]
    assert min(r["step_ab"].values()) > 0
    assert bench_report.main([str(out), "--out", str(tmp_path / "docs" / "benchmarks.md")]) == 0  # in-process
    md = (tmp_path / "docs" / "benchmarks.md").read_text()
    assert f"{r['lightning_tokens_per_sec']:,.0f}" in md
    assert (tmp_path / "docs" / "records" / "benchmark" / "attention.png").exists()
    assert set(r["refusals"]["train_py"]) == set(REFUSALS) and all(w > 0 for w in r["refusals"]["train_py"].values())
    hydra = r["refusals"]["floors"]["python -c 'import hydra'"]
    assert "## From a typo to its one-line error" in md and "| `python train.py model.n_head=5` | " in md
    assert "Where the memory goes" in md and "within 1.5 s of `import lightning`" in md
    (pair,) = r["startup_pairs"]  # --quick: one floor and one start-up, taken in turn
    assert 0 < pair["import_lightning_s"] and 0 < pair["startup_s"]
    assert "one pair, the floor timed right before" in md
    assert 0 < hydra < r["refusals"]["floors"]["python -c 'import torch'"]


FAKE_NANOGPT = {  # what scripts/benchmark.py uses of a nanoGPT checkout, with tinygpt's GPT as the model
    "model.py": """
from dataclasses import asdict, dataclass
import torch
from tinygpt.model.gpt import GPT as _GPT, GPTConfig as _Config

@dataclass
class GPTConfig:
    vocab_size: int
    n_layer: int
    n_head: int
    n_embd: int
    block_size: int
    dropout: float = 0.0
    bias: bool = False

class GPT(_GPT):
    def __init__(self, config):
        super().__init__(_Config(**asdict(config)))

    def configure_optimizers(self, weight_decay, learning_rate, betas, device_type):
        return torch.optim.AdamW(self.parameters(), lr=learning_rate, betas=betas, weight_decay=weight_decay)
""",
    "train.py": """
import os, sys, time
args = dict(a[2:].split("=", 1) for a in sys.argv[1:] if a.startswith("--"))
steps = int(args["max_iters"])
print("step 0: train loss 4.2000, val loss 4.2100")
for i in range(steps + 1):
    time.sleep(0.01)
    print(f"iter {i}: loss 4.0000, time 10.00ms, mfu -100.00%")
print(f"step {steps}: train loss 3.9000, val loss 3.9500")
with open("../log.txt", "a") as f:
    f.write(f"{os.environ.get('OMP_NUM_THREADS')} {sorted(os.sched_getaffinity(0))}\\n")
""",
    "data/shakespeare_char/prepare.py": "open('train.bin', 'wb').write(b'0')\n",
}


@pytest.mark.slow
def test_benchmark_quick_against_a_nanogpt_checkout(tmp_path, corpus_file, cache_dir):
    """--nanogpt: its train.py back to back with ours, and side by side (both at once, each pinned to its own
    core with one thread, the cores swapped in the second pair); a stand-in checkout prints nanoGPT's lines."""
    checkout = tmp_path / "nanoGPT"
    for name, text in FAKE_NANOGPT.items():
        (checkout / name).parent.mkdir(parents=True, exist_ok=True)
        (checkout / name).write_text(text)
    out = tmp_path / "bench.json"
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "benchmark.py"), "--data", str(corpus_file), "--quick",
         "--nanogpt", str(checkout), "--rounds", "1", "--side-by-side", "2", "--cache-dir", str(cache_dir),
         "--out", str(out)],
        capture_output=True, text=True, timeout=600, cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    r = json.loads(out.read_text())
    assert r["reference"] == "nanoGPT train.py" and r["reference_tokens_per_sec"] == pytest.approx(768 / 0.01)
    assert r["reference_val_loss"] == 3.95
    # its first step began one step (10 ms) before its "iter 0" line, which it prints at once after start-up
    assert 0 < r["reference_startup_s"] < r["startup_s"]
    pairs = r["side_by_side"]
    assert [(p["tinygpt_core"], p["reference_core"]) for p in pairs] == [(0, 1), (1, 0)]
    assert all(p["tinygpt"]["wall_s"] > 0 and p["reference"]["tokens_per_sec"] > 0 for p in pairs)
    ratios = sorted(p["tinygpt"]["wall_s"] / p["reference"]["wall_s"] for p in pairs)
    assert r["side_by_side_wall_ratio"] == pytest.approx(sum(ratios) / 2)
    runs = (checkout.parent / "log.txt").read_text().splitlines()  # the rounds' run, then the pairs' runs
    assert runs[0].split()[0] == "None" and runs[1:] == ["1 [1]", "1 [0]"]
    assert "nanoGPT's GPT and configure_optimizers" in r["step_ab"]
    assert bench_report.main([str(out), "--out", str(tmp_path / "docs" / "benchmarks.md")]) == 0  # in-process
    assert "### Side by side" in (tmp_path / "docs" / "benchmarks.md").read_text()


@pytest.mark.slow
def test_a_diverging_job_ends_cleanly_and_the_sweep_goes_on(tmp_path, corpus_file, cache_dir):
    """A huge learning rate without the 1/sqrt(d_k) scale: the loss becomes NaN; that job stops, writes its
    summary with diverged: true and exits 0, and the next job of the sweep still runs."""
    sweep = tmp_path / "sweep"
    run_train(["-m", *TINY, "corpus=text_file", f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}",
               f"hydra.sweep.dir={sweep}", "model.attn.scale=none", "optim.warmup_steps=0", "logger=csv",
               "optim.lr=1e8,1e-3"])
    first, second = (json.loads((sweep / j / "summary.json").read_text()) for j in ("0", "1"))
    assert first["diverged"] is True and first["steps"] < 20 and first["train_loss"] is None
    assert second["diverged"] is False and second["steps"] == 20


@pytest.mark.slow
def test_last_checkpoint_holds_the_final_step_and_resumes_exactly(tmp_path, corpus_file, cache_dir):
    """max_steps not a multiple of val_check_interval: last.ckpt still holds the end (7, not 5), and resuming
    from it to 14 steps gives the same weights as 14 straight steps."""
    common = ["logger=none", "trainer.val_check_interval=5", "optim.decay_steps=14"]
    run_train(tiny_args(tmp_path / "seven", corpus_file, cache_dir, *common, "trainer.max_steps=7"))
    last = tmp_path / "seven" / "checkpoints" / "last.ckpt"
    assert torch.load(last, weights_only=False)["global_step"] == 7
    run_train(tiny_args(tmp_path / "full", corpus_file, cache_dir, *common, "trainer.max_steps=14"))
    run_train(tiny_args(tmp_path / "resumed", corpus_file, cache_dir, *common, "trainer.max_steps=14",
                        f"ckpt_path={last}"))
    full = torch.load(tmp_path / "full" / "checkpoints" / "last.ckpt", weights_only=False)
    resumed = torch.load(tmp_path / "resumed" / "checkpoints" / "last.ckpt", weights_only=False)
    assert full["global_step"] == resumed["global_step"] == 14
    assert all(torch.equal(full["state_dict"][k], resumed["state_dict"][k]) for k in full["state_dict"])


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["bf16-mixed", "16-mixed"])
def test_mixed_precision_trains_with_gradient_clipping(tmp_path, corpus_file, cache_dir, precision):
    """Lightning refuses to clip a fused optimizer's gradients under AMP; the module then uses foreach AdamW."""
    out = tmp_path / precision
    run_train(tiny_args(out, corpus_file, cache_dir, "logger=none", "trainer.max_steps=6",
                        "trainer.val_check_interval=3", f"trainer.precision={precision}",
                        "trainer.gradient_clip_val=1.0"))
    s = json.loads((out / "summary.json").read_text())
    assert s["status"] == "completed" and s["steps"] == 6 and 0 < s["val_loss"] < 10


@pytest.mark.slow
def test_benchmark_times_a_sweep_one_by_one_and_at_once(tmp_path, cache_dir):
    out = tmp_path / "sweep.json"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "benchmark.py"), "--sweep-only", "--quick",
                           "--cache-dir", str(cache_dir), "--out", str(out)],
                          capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr[-3000:]
    sweep = json.loads(out.read_text())["sweep"]
    one, many = sweep["runs"]["one by one"], sweep["runs"]["at once"]
    assert one["jobs"] == many["jobs"] == 2 and one["threads_per_job"] == torch.get_num_threads()
    assert many["threads_per_job"] == max(1, torch.get_num_threads() // 2)  # 2 jobs at once split the cores
    assert sweep["speedup"] == pytest.approx(one["wall_s"] / many["wall_s"])
    assert one["tokens_per_sec"] == pytest.approx(2 * 10 * 4 * 64 / one["wall_s"])  # 2 jobs x 10 steps x 4 x 64
    assert sweep["max_loss_difference"] < 1e-3  # the same jobs either way, up to summation order
    docs = tmp_path / "docs" / "benchmarks.md"
    full = ROOT / "docs" / "records" / "benchmark" / "2026-11-30d.json"  # a full run; the sweep section from ours
    assert bench_report.main([str(full), str(out), "--out", str(docs)]) == 0  # sweep-only last
    text = docs.read_text()
    assert "## Sweeps: jobs one by one against jobs at once" in text and f"{one['wall_s']:.1f}" in text

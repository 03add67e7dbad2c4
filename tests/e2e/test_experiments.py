"""The experiments: every file in configs/experiment/ runs, and experiment 1's sweep + report work end to end."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir

from helpers import ROOT, TINY, run_train
from tinygpt.experiments import report
from tinygpt.experiments.registry import experiments

EXPERIMENTS = sorted(p.stem for p in (ROOT / "configs" / "experiment").glob("*.yaml"))


def compose_hydra(overrides):
    with initialize_config_dir(config_dir=str(ROOT / "configs"), version_base="1.3"):
        return compose("train", overrides=list(overrides), return_hydra_config=True)


def test_experiments_exist():
    assert {c for e in experiments().values() for c in e.configs} | {"gpu_small"} <= set(EXPERIMENTS)


def test_partial_leaks_arms_build_the_bugs_they_name():
    """Each arm of experiment 3 composes to its bug (experiment code, patched in by model.patch) on a model
    configured causal, except the deliberate no-mask arm; the fill arms carry their own model and schedule."""
    from tinygpt.experiments.partial_leaks.report import ARMS

    cfg = compose_hydra(["experiment=partial_leaks"])
    arms = cfg.hydra.sweeper.params["arm/partial_leaks"].split(",")
    assert tuple(arms) == ARMS and cfg.hydra.sweep.dir.startswith("multirun/partial_leaks/")
    assert compose_hydra([]).model.patch == []  # a plain run has no bug
    kinds = {}
    for arm in arms:
        c = compose_hydra(["experiment=partial_leaks", f"arm/partial_leaks={arm}"])
        kinds[arm] = c.model.patch[0].kind if c.model.patch else None
        assert c.model.attn.causal == (arm != "no_mask")
        assert c.trainer.max_steps == (300 if arm.startswith("fill") else 800)
        if arm.startswith("fill"):
            rate = 2e-2 if arm in ("fill_where_1e4", "fill_inf_where") else 1e-2  # design 3: the replacing fill's
            assert (c.model.n_embd, c.model.n_head, c.model.attn.scale, c.optim.lr) == (256, 1, "none", rate)
    assert kinds == {"causal": None, "no_mask": None, "off_by_one": "off_by_one", "first_layer": "no_mask",
                     "last_layer": "no_mask", "sliding_window": "sliding_window", "fill_1e4": "finite_fill",
                     "fill_where_1e4": "replace_fill", "fill_inf": None, "fill_inf_where": None}
    assert compose_hydra(["experiment=partial_leaks", "arm/partial_leaks=fill_1e4"]).model.patch[0].fill == -1e4


def test_causal_mask_sweep_arms_and_dir():
    cfg = compose_hydra(["experiment=causal_mask"])
    params = cfg.hydra.sweeper.params
    assert params["model.attn.causal"] == "true,false" and params["seed"] == "41,42,43,44,45"  # DESIGN.md: new seeds
    arms = params["arm/causal_mask"].split(",")
    assert arms == ["shakespeare_t64", "shakespeare_t32", "shakespeare_t16", "random_t64"]
    assert cfg.hydra.sweep.dir.startswith("multirun/causal_mask/")  # named after the experiment
    windows = set()
    for arm in arms:
        c = compose_hydra(["experiment=causal_mask", f"arm/causal_mask={arm}"])
        windows.add(c.data.batch_size)
        assert c.corpus._target_.rsplit(".", 1)[1] == ("RandomTokens" if arm.startswith("random") else "Shakespeare")
        assert c.model.block_size == int(arm.rsplit("_t", 1)[1])
    assert windows == {12}  # the same windows a batch in every arm: every position trains on as many examples
    quick = compose_hydra(["experiment=causal_mask_quick"])
    assert quick.hydra.sweep.dir.startswith("multirun/causal_mask_quick/")
    assert quick.trainer.max_steps < cfg.trainer.max_steps and quick.hydra.sweeper.params["seed"] == "1"


@pytest.mark.slow
@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_runs_a_few_steps_on_the_tiny_model(experiment, tmp_path, corpus_file, cache_dir):
    out = tmp_path / experiment
    args = [f"experiment={experiment}", *TINY, "corpus=text_file", f"corpus.path={corpus_file}",
            f"data.cache_dir={cache_dir}", "trainer.max_steps=4", "trainer.val_check_interval=2",
            "logger=csv", f"hydra.run.dir={out}"]
    if experiment == "gpu_small":  # its trainer asks for a GPU; here the recipe (bf16-mixed included) runs on the CPU
        args += ["trainer.accelerator=cpu"]
    run_train(args)
    summary = json.loads((out / "summary.json").read_text())
    assert summary["steps"] == 4 and math.isfinite(summary["val_loss"])
    assert (out / "history" / "metrics.csv").is_file()


@pytest.fixture(scope="module")
def tiny_causal_mask_sweep(tmp_path_factory, cache_dir) -> Path:
    """experiment=causal_mask shrunk to the tiny model on its random-token control: both arms, one seed."""
    sweep = tmp_path_factory.mktemp("causal_mask") / "sweep"
    run_train([
        "-m", "experiment=causal_mask", *TINY, "arm/causal_mask=random_t64", "model.block_size=16",
        "model.n_embd=32", "corpus.vocab_size=16", "corpus.n_tokens=40000", "data.batch_size=32", "data.val_windows=64",
        "seed=1", "model.attn.causal=true,false", "trainer.max_steps=200", "trainer.val_check_interval=50",
        "optim.lr=1e-2", "optim.warmup_steps=20", "diagnostics.windows=16", f"data.cache_dir={cache_dir}",
        f"hydra.sweep.dir={sweep}", "logger=csv",
    ])
    return sweep


@pytest.mark.slow
def test_causal_mask_sweep_shows_the_effect(tiny_causal_mask_sweep):
    summaries = [json.loads(p.read_text()) for p in sorted(tiny_causal_mask_sweep.glob("*/summary.json"))]
    assert len(summaries) == 2
    by = {s["config"]["model"]["attn"]["causal"]: s for s in summaries}
    causal, leaky = by[True], by[False]
    chance = math.log(16)
    assert leaky["train_loss"] < 0.5 * causal["train_loss"]  # the leak: far lower teacher-forced loss...
    assert leaky["train_loss"] < 0.5 * chance  # ...far below chance, on data with nothing to learn
    assert leaky["val_loss_honest"] > causal["val_loss_honest"]  # ...and a worse honest loss
    assert causal["future_leak"] == 0.0 and leaky["future_leak"] > 1e-3
    assert causal["attn_future_mass"] == 0.0 and leaky["attn_future_mass"] > 0.1
    assert causal["val_loss_honest"] > chance - 0.05  # no honest model beats chance
    lbp = leaky["loss_by_position"]  # near zero where the target is in the window, high at the last position
    assert len(lbp) == 16 and lbp[-1] > 5 * max(lbp[:-1])
    history = (tiny_causal_mask_sweep / "1" / "history" / "metrics.csv").read_text().splitlines()
    assert "val/loss_honest" in history[0] and "val/loss_probe" in history[0]


@pytest.mark.slow
def test_report_runs_on_the_sweep(tiny_causal_mask_sweep, tmp_path):
    out = tmp_path / "report"
    assert report.main(["causal_mask", str(tiny_causal_mask_sweep), "--out", str(out)]) == 0  # in-process
    text = (out / "README.md").read_text()
    for png in ("curves.png", "loss_by_position.png", "attention.png", "control_T16.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert f"({png})" in text
    assert "## Finding" in text and "ln(16)" in text and "| random_tokens (vocab 16) | 16 |" in text


def test_report_refuses_a_dir_without_runs_in_one_line(tmp_path, capsys):
    assert report.main(["causal_mask", str(tmp_path)]) == 2
    assert capsys.readouterr().err == f"error: report: no summary.json under {tmp_path}; is it a sweep dir?\n"
    assert report.main(["sqrt_dk", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err == f"error: report: {tmp_path / 'nowhere'} does not exist.\n"


def test_the_report_script_is_a_thin_cli_over_the_package(tmp_path):
    """scripts/report.py runs as a plain script (no sys.path tricks) and hands its exit status on."""
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "report.py"), "causal_mask", str(tmp_path)],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: report: no summary.json under")


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_sqrt_dk_sweep_arms_and_grid():
    """Design 2 (docs/experiments/sqrt_dk/DESIGN.md): init x d_k x scale at one head, the two reparametrisation
    controls, three rates a decade from 1e-4 to 1e-2, seeds 11-13; float16 at five placements."""
    cfg = compose_hydra(["experiment=sqrt_dk"])
    params = cfg.hydra.sweeper.params
    lrs = [float(x) for x in params["optim.lr"].split(",")]
    assert lrs == sorted(lrs) and lrs[0] == 1e-4 and lrs[-1] == 1e-2 and len(lrs) == 7
    assert all(abs(b / a - 10 ** (1 / 3)) < 1e-3 for a, b in zip(lrs, lrs[1:], strict=False))  # three rates a decade
    assert params["seed"].split(",") == ["11", "12", "13"]  # seeds no earlier run of this experiment used
    assert cfg.prediction.basin_delta == 0.1 and cfg.prediction.mechanism_lr == 1e-3
    assert cfg.hydra.sweep.dir.startswith("multirun/sqrt_dk/")
    assert cfg.trainer.log_every_n_steps == 1 and cfg.callbacks.stability.every_n_steps == 20
    seen = set()
    for arm in params["arm/sqrt_dk"].split(","):
        c = compose_hydra(["experiment=sqrt_dk", f"arm/sqrt_dk={arm}"])
        a = c.model.attn
        assert c.model.n_head == 1 and c.trainer.precision == "32-true" and a.backend == "math"
        patch = [(p.init, p.step) for p in c.model.get("patch") or [] if p._target_.endswith("QKReparam")]
        seen.add((a.qk_init, c.model.n_embd, a.scale, tuple(patch)))
    assert seen == {(init, dk, scale, ()) for init in ("unit", "gpt2") for dk in (16, 64, 256)
                    for scale in ("sqrt_dk", "none")} | {("unit", 256, "none", ((True, False),)),
                                                         ("unit", 256, "none", ((True, True),))}
    fp16 = compose_hydra(["experiment=sqrt_dk_fp16"])
    assert fp16.trainer.precision == "16-mixed"
    placements = set()
    for arm in fp16.hydra.sweeper.params["arm/sqrt_dk"].split(","):
        c = compose_hydra(["experiment=sqrt_dk_fp16", f"arm/sqrt_dk={arm}"])
        placements.add((c.model.attn.scale, c.model.attn.scale_at, c.model.attn.backend))
        assert c.trainer.precision == "16-mixed" and c.model.attn.qk_init == "unit" and c.model.n_embd == 256
    assert placements == {("sqrt_dk", "scores", "math"), ("sqrt_dk", "qk", "math"), ("sqrt_dk", "scores", "sdpa"),
                          ("none", "scores", "math"), ("none", "scores", "sdpa")}
    assert [float(x) for x in fp16.hydra.sweeper.params["optim.lr"].split(",")] == [1e-2, 2.154e-2]
    fp32 = compose_hydra(["experiment=sqrt_dk_fp32", "arm/sqrt_dk=fp16_sqrt_scores"])
    assert fp32.trainer.precision == "32-true" and fp32.model.attn.scale_at == "scores"
    probe = compose_hydra(["experiment=sqrt_dk_fp16_probe"])  # amendment 2: the replay, probed after every step
    assert probe.trainer.precision == "16-mixed" and probe.callbacks.stability.every_n_steps == 1
    assert probe.hydra.sweeper.params["arm/sqrt_dk"] == "fp16_sqrt_scores,fp16_sqrt_qk,fp16_none_math"
    params = probe.hydra.sweeper.params
    # amendments 4, 5: 14-22 new
    assert float(params["optim.lr"]) == 2.154e-2 and params["seed"] == ",".join(map(str, range(11, 23)))


@pytest.mark.slow
def test_sqrt_dk_quick_sweep_and_report(tmp_path, cache_dir, corpus_file):
    """experiment=sqrt_dk_quick shrunk: scaled and unscaled at unit init at a sane and an absurd learning rate. The
    absurd one diverges, ends cleanly, and the report still reads every probe and draws its figures."""
    sweep = tmp_path / "sweep"
    run_train(["-m", "experiment=sqrt_dk_quick", *TINY, "model.n_layer=1", "corpus=text_file",
               f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}", "logger=csv", "trainer.max_steps=40",
               "trainer.val_check_interval=20", "optim.warmup_steps=4", "callbacks.stability.every_n_steps=10",
               "optim.lr=1e-2,1e8", f"hydra.sweep.dir={sweep}"])
    summaries = [json.loads(p.read_text()) for p in sorted(sweep.glob("*/summary.json"))]
    assert len(summaries) == 4
    diverged = {(s["config"]["model"]["attn"]["scale"], s["config"]["optim"]["lr"]): s["diverged"] for s in summaries}
    assert diverged == {("sqrt_dk", 1e-2): False, ("none", 1e-2): False, ("sqrt_dk", 1e8): True, ("none", 1e8): True}
    out = tmp_path / "report"
    assert report.main(["sqrt_dk", str(sweep), "--out", str(out)]) == 0  # in-process
    text = (out / "README.md").read_text()
    for png in ("trace_vs_dk.png", "loss_vs_lr.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", png
        assert f"({png})" in text
    assert "| M3 |" in text and "| C1 |" in text  # the d_k = 256 predictions were read from the runs
    rows = [line for line in text.splitlines() if line.startswith("| unit init, d_k = 256")]
    assert len(rows) >= 4 and all("nan" not in row for row in rows[:2])  # the mechanism at init, read from the probe


@pytest.mark.slow
def test_sqrt_dk_stability_quick_sweep_and_report(tmp_path, cache_dir, corpus_file):
    """experiment=sqrt_dk_stability_quick shrunk: scaled and unscaled at three rates, one of them absurd (it diverges:
    a failed run). The report reads every run, keeps their records beside it and regenerates from them."""
    sweep = tmp_path / "sweep"
    run_train(["-m", "experiment=sqrt_dk_stability_quick", *TINY, "model.n_layer=1", "corpus=text_file",
               f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}", "logger=csv", "trainer.max_steps=30",
               "trainer.val_check_interval=15", "optim.warmup_steps=3", "callbacks.stability.every_n_steps=10",
               "optim.lr=1e-3,1e-2,1e-1", f"hydra.sweep.dir={sweep}"])
    assert len(list(sweep.glob("*/summary.json"))) == 6
    out = tmp_path / "report"
    assert report.main(["sqrt_dk_stability", str(sweep), "--out", str(out)]) == 0  # in-process
    text = (out / "README.md").read_text()
    assert "| S1 |" in text and "| Q1 |" in text and "not tested" in text  # Q1 and S3 need arms this sweep lacks
    assert (out / "edges.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and (out / "runs.json.gz").is_file()
    again = tmp_path / "again"
    assert report.main(["sqrt_dk_stability", str(out / "runs.json.gz"), "--out", str(again)]) == 0
    assert (again / "README.md").read_bytes() == (out / "README.md").read_bytes()


def test_a_sweep_experiment_without_m_says_it_runs_one_job():
    from tinygpt.train.cli import one_job_of_a_sweep

    note = one_job_of_a_sweep(compose_hydra(["experiment=causal_mask"]).hydra)
    assert note == ("experiment=causal_mask is a sweep (arm/causal_mask, model.attn.causal, seed); this runs one job "
                    "of it. To run the whole sweep: python train.py -m experiment=causal_mask")
    assert one_job_of_a_sweep(compose_hydra([]).hydra) is None  # not a sweep
    assert one_job_of_a_sweep(compose_hydra(["experiment=gpu_small"]).hydra) is None


@pytest.mark.parametrize("experiment", list(experiments()))
def test_experiments_run_their_jobs_at_once_unless_another_launcher_is_named(experiment):
    from tinygpt.runtime.run_dirs import parallel_jobs, usable_cores

    default = compose_hydra([f"experiment={experiment}"]).hydra.launcher
    assert default._target_.endswith("JoblibLauncher") and default.n_jobs == parallel_jobs(1) == usable_cores()
    assert parallel_jobs(2) == max(1, usable_cores() // 2) and parallel_jobs(10**6) == 1
    for launcher, target in (("basic", "BasicLauncher"), ("slurm", "SlurmLauncher")):
        cfg = compose_hydra([f"experiment={experiment}", f"hydra/launcher={launcher}"])
        assert cfg.hydra.launcher._target_.endswith(target)
    slurm = compose_hydra([f"experiment={experiment}", "hydra/launcher=slurm"])
    # the slurm launcher reads trainer.num_nodes, which the default trainer has (it was ddp/fsdp's only)
    assert slurm.hydra.launcher.nodes == 1 and slurm.hydra.launcher.tasks_per_node == 1


@pytest.mark.slow
def test_partial_leaks_quick_sweep_and_report_on_the_tiny_model(tmp_path, cache_dir):
    """experiment=partial_leaks_quick shrunk to the tiny model: every arm runs, the alarm fires on each leaky arm
    and on no causal one, and the report is written from the runs' files."""
    sweep = tmp_path / "sweep"
    run_train(["-m", "experiment=partial_leaks_quick", *TINY, "trainer.max_steps=60", "trainer.val_check_interval=20",
               "data.val_windows=32", "diagnostics.windows=8", "optim.warmup_steps=5", f"data.cache_dir={cache_dir}",
               f"hydra.sweep.dir={sweep}", "logger=csv"])
    assert len(list(sweep.glob("*/summary.json"))) == 10
    from tinygpt.experiments.partial_leaks.report import ARMS, group
    from tinygpt.analysis.sweep import load_runs

    runs = group(load_runs([sweep]))  # one run (seed) per arm, the -inf control at each fill's rate apart
    assert set(runs) == set(ARMS) and all(len(arm_runs) == 1 for arm_runs in runs.values()), runs
    for arm in ("no_mask", "off_by_one", "first_layer", "last_layer", "sliding_window"):
        assert runs[arm][0].summary["leak_detected_step"] == 20, arm  # the first validation
    for arm in ("causal", "fill_inf", "fill_inf_where"):
        assert runs[arm][0].summary["leak_detected_step"] is None, arm
    out = tmp_path / "report"
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "report.py"), "partial_leaks", str(sweep),
                           "--out", str(out)], capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    text = (out / "README.md").read_text()
    for heading in ("## Findings", "## Which leaks show in the loss", "## The leak alarm",
                    "## finite fill (added): when the mask opens (prediction 3)",
                    "## finite fill (replacing: GPT-2's masked_bias): when the mask opens (prediction 5)"):
        assert heading in text
    assert (out / "fill.png").is_file() and (out / "fill_where.png").is_file() and (out / "curves.png").is_file()
    # the alarm replayed on the finished causal runs (the causal arm and both -inf controls; the bugged ones skipped)
    proc = subprocess.run([sys.executable, str(ROOT / "scripts" / "alarm_audit.py"), str(sweep)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0 and "alarm audit: 3 causal runs, 0 false alarms" in proc.stdout, proc.stdout


def test_positions_sweeps_every_position_at_both_contexts_on_new_seeds():
    """Experiment 4's grid as its design states it: 4 positions x T = 64, 256 x seeds 61-65; the arms set the context
    and the batch (768 tokens a step at both), the probe callback is on, and the quick version sweeps 2 jobs."""
    cfg = compose_hydra(["experiment=positions"])
    params = cfg.hydra.sweeper.params
    assert (params["arm/positions"], params["model.position"], params["seed"]) == (
        "t64,t256", "learned,none,rope,alibi", "61,62,63,64,65")
    for arm, T, batch in (("t64", 64, 12), ("t256", 256, 3)):
        c = compose_hydra(["experiment=positions", f"arm/positions={arm}"])
        assert (c.model.block_size, c.data.block_size, c.data.batch_size) == (T, T, batch)
        assert c.callbacks.positions._target_ == "tinygpt.experiments.positions.probes.PositionProbes"
        assert c.trainer.max_steps == 1500 and c.model.position == "learned"
    quick = compose_hydra(["experiment=positions_quick"])
    assert quick.model.block_size == 16 and quick.hydra.sweeper.params["model.position"] == "none,alibi"
    assert quick.hydra.sweep.dir.startswith("multirun/positions_quick/")


@pytest.mark.slow
def test_positions_quick_sweep_and_report(tmp_path, cache_dir):
    """experiment=positions_quick: both jobs run, each writes the probe at init and at the end and the loss on
    windows of 4T tokens (measures.npz); the report reads them and regenerates from its records."""
    sweep = tmp_path / "sweep"
    run_train(["-m", "experiment=positions_quick", f"data.cache_dir={cache_dir}", f"hydra.sweep.dir={sweep}",
               "logger=csv", "data.val_windows=64"])
    import numpy as np

    for job in sweep.glob("*/summary.json"):
        with np.load(job.parent / "measures.npz") as z:
            assert {"probe_init_sse", "probe_end_sse", "probe_sst", "long_buckets", "long_curve"} <= set(z.files)
            assert z["probe_end_sse"].shape == (3, 16) and z["long_buckets"].shape == (16, 4)
            assert z["long_curve"].shape == (64,) and np.isfinite(z["long_curve"]).all()
    assert len(list(sweep.glob("*/summary.json"))) == 2
    out = tmp_path / "report"
    assert report.main(["positions", str(sweep), "--out", str(out)]) == 0
    text = (out / "README.md").read_text()
    assert "Why are positional encodings necessary?" in text and "| M3 |" in text and "| P4 |" in text
    again = tmp_path / "again"
    assert report.main(["positions", str(out / "runs.json.gz"), "--out", str(again)]) == 0
    assert (again / "README.md").read_bytes() == (out / "README.md").read_bytes()

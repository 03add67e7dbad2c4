"""Sweeps through Hydra's launchers: SLURM via submitit (the sbatch script it writes, requeue on SIGUSR2 with
an exact resume), submitit's local executor, and several jobs at once on this machine (joblib)."""

import json
import os
import signal
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from helpers import ROOT, TINY, compose_train, no_false_alarm, run_train


def fake_command(bin_dir: Path, name: str, body: str) -> None:
    bin_dir.mkdir(parents=True, exist_ok=True)
    path = bin_dir / name
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def test_slurm_launcher_asks_for_a_task_per_device_a_gpu_each_and_a_requeue_signal(tmp_path, monkeypatch):
    """The sbatch script hydra/launcher=slurm makes for a sweep (srun faked: nothing is submitted)."""
    import submitit
    from hydra.utils import instantiate

    fake_command(tmp_path / "bin", "srun", "exit 0")
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}")
    cfg = compose_train(["hydra/launcher=slurm", "trainer=ddp", "trainer.accelerator=gpu", "trainer.devices=4",
                         "trainer.num_nodes=2", "hydra.launcher.partition=gpu", "hydra.launcher.timeout_min=90",
                         f"hydra.sweep.dir={tmp_path / 'sweep'}"])
    launcher = instantiate(cfg.hydra.launcher)
    launcher.config = cfg
    seen = {}

    def map_array(executor, fn, *args):
        seen["script"] = executor._executor._make_submission_file_text("python -u -m submitit.core._submit x", "u")
        seen["jobs"] = len(args[0])
        return []

    monkeypatch.setattr(submitit.AutoExecutor, "map_array", map_array)
    launcher.launch([["seed=1"], ["seed=2"]], initial_job_idx=0)
    lines = set(seen["script"].splitlines())
    for line in ("#SBATCH --nodes=2", "#SBATCH --ntasks-per-node=4", "#SBATCH --gpus-per-task=1",
                 "#SBATCH --cpus-per-task=8", "#SBATCH --partition=gpu", "#SBATCH --time=90",
                 "#SBATCH --signal=USR2@120", "#SBATCH --requeue"):
        assert line in lines, (line, seen["script"])
    assert seen["jobs"] == 2 and (tmp_path / "sweep").is_dir()


def test_a_slurm_job_uses_lightnings_slurm_environment_without_its_requeue(monkeypatch):
    from lightning.fabric.plugins.environments import SLURMEnvironment

    from tinygpt.runtime.distributed import cluster_plugins

    monkeypatch.delenv("SLURM_NTASKS", raising=False)
    assert cluster_plugins() == []
    monkeypatch.setenv("SLURM_NTASKS", "1")
    monkeypatch.setenv("SLURM_JOB_NAME", "tinygpt")
    (env,) = cluster_plugins()
    assert isinstance(env, SLURMEnvironment) and env.auto_requeue is False  # ours requeues at a step boundary


def test_slurm_job_ids_as_scontrol_takes_them(monkeypatch):
    from tinygpt.runtime.interrupts import slurm_job_id

    for key in ("SLURM_JOB_ID", "SLURM_ARRAY_JOB_ID", "SLURM_ARRAY_TASK_ID"):
        monkeypatch.delenv(key, raising=False)
    assert slurm_job_id() is None
    monkeypatch.setenv("SLURM_JOB_ID", "77")
    assert slurm_job_id() == "77"
    monkeypatch.setenv("SLURM_ARRAY_JOB_ID", "70")
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "3")
    assert slurm_job_id() == "70_3"


@pytest.mark.slow
def test_sigusr2_in_a_slurm_job_requeues_it_and_the_requeued_job_resumes_exactly(tmp_path, corpus_args):
    """SLURM faked: SLURM_* variables and an `scontrol` that records its arguments. SIGUSR2 (the notice
    before the time limit) -> last.ckpt at the current step, `scontrol requeue <job>`, exit 140; the job
    started again (SLURM_RESTART_COUNT=1, same command) resumes there and ends with the weights of a run
    that was never stopped."""
    fake_command(tmp_path / "bin", "scontrol", f'echo "$@" >> {tmp_path / "scontrol.txt"}')
    slurm = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}", "SLURM_JOB_ID": "4242",
             "SLURM_NTASKS": "1", "SLURM_JOB_NAME": "tinygpt", "SLURM_PROCID": "0", "SLURM_LOCALID": "0",
             "SLURM_NODEID": "0", "SLURM_NODELIST": "localhost", "WANDB_MODE": "offline"}
    steps = 600
    base = [*TINY, *corpus_args, "logger=none", "trainer.accelerator=cpu", f"trainer.max_steps={steps}",
            "trainer.val_check_interval=100", "callbacks.attention_maps.every_n_steps=0"]
    straight, job = tmp_path / "straight", tmp_path / "job"
    run_train([*base, f"hydra.run.dir={straight}"])
    cmd = [sys.executable, str(ROOT / "train.py"), *base, f"hydra.run.dir={job}"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**os.environ, **slurm}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 180
    while not (job / "checkpoints" / "last.ckpt").exists():  # training is under way
        assert time.time() < deadline and proc.poll() is None, proc.stdout.read()[-3000:] if proc.poll() else ""
        time.sleep(0.1)
    proc.send_signal(signal.SIGUSR2)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 140, out[-3000:]
    assert (tmp_path / "scontrol.txt").read_text().split() == ["requeue", "4242"]
    stopped = summary(job)
    assert stopped["status"] == "interrupted" and stopped["interrupted"] == "SIGUSR2" and stopped["steps"] < steps
    again = subprocess.run(cmd, cwd=ROOT, env={**os.environ, **slurm, "SLURM_RESTART_COUNT": "1"},
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    done = summary(job)
    assert done["status"] == "completed" and done["steps"] == steps
    assert done["resumed_from"] == str(job / "checkpoints" / "last.ckpt")
    a = torch.load(straight / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    b = torch.load(job / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    assert done["train_loss"] == summary(straight)["train_loss"]


@pytest.mark.slow
def test_a_sweep_through_submitits_local_executor(tmp_path, corpus_args):
    sweep = tmp_path / "sweep"
    run_train(["-m", "hydra/launcher=submitit_local", *TINY, *corpus_args, "logger=[wandb,csv]", "seed=1,2",
               f"hydra.sweep.dir={sweep}"])
    runs = [summary(sweep / job) for job in ("0", "1")]
    assert [s["status"] for s in runs] == ["completed", "completed"]
    assert runs[0]["config"]["seed"] == 1 and runs[1]["config"]["seed"] == 2
    assert runs[0]["wandb"]["id"] != runs[1]["wandb"]["id"]
    assert (sweep / ".submitit").is_dir()  # submitit's own job files
    assert no_false_alarm(sweep) == 2


@pytest.mark.slow
def test_parallel_jobs_share_one_fresh_cache_and_split_the_cores(tmp_path, corpus_file):
    sweep, cache = tmp_path / "sweep", tmp_path / "fresh-cache"
    run_train(["-m", "hydra/launcher=parallel", "hydra.launcher.n_jobs=2", *TINY, "corpus=text_file",
               f"corpus.path={corpus_file}", f"data.cache_dir={cache}", "logger=[wandb,csv]", "seed=1,2",
               f"hydra.sweep.dir={sweep}"])
    runs = [summary(sweep / job) for job in ("0", "1")]
    assert [s["status"] for s in runs] == ["completed", "completed"]
    assert runs[0]["val_loss"] != runs[1]["val_loss"]  # separate runs (the seeds differ)
    assert runs[0]["wandb"]["id"] != runs[1]["wandb"]["id"]
    assert [s["threads"] for s in runs] == [max(1, os.cpu_count() // 2)] * 2  # joblib splits the cores
    assert no_false_alarm(sweep) == 2
    caches = [p for p in cache.iterdir() if p.is_dir() and p.name.startswith("text_file-")]
    assert len(caches) == 1 and not [p for p in cache.iterdir() if ".tmp-" in p.name]  # one cache, no leftovers


def start_parallel_sweep(sweep, corpus_file, cache_dir, *extra, new_session=False) -> subprocess.Popen:
    argv = ["-m", "hydra/launcher=parallel", "hydra.launcher.n_jobs=2", *TINY, "trainer.max_steps=3000",
            "trainer.val_check_interval=100", "logger=csv", "callbacks.attention_maps.every_n_steps=0",
            "callbacks.text_samples.final_only=true", "corpus=text_file", f"corpus.path={corpus_file}",
            f"data.cache_dir={cache_dir}", "seed=1,2,3,4", f"hydra.sweep.dir={sweep}", *extra]
    return subprocess.Popen([sys.executable, str(ROOT / "train.py"), *argv], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=new_session)


def wait_for_two_checkpoints(proc, sweep) -> None:
    deadline = time.monotonic() + 300
    while proc.poll() is None and time.monotonic() < deadline and not all(
            (sweep / j / "checkpoints" / "last.ckpt").exists() for j in ("0", "1")):
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep ended before the signal"


@pytest.mark.slow
@pytest.mark.parametrize("sig, group", [(signal.SIGTERM, False), (signal.SIGINT, True)],
                         ids=["SIGTERM to the sweep", "Ctrl-C to the process group"])
def test_a_signal_stops_a_parallel_sweep_with_checkpoints_and_its_table(tmp_path, corpus_file, cache_dir, sig, group):
    """A scheduler's SIGTERM to the sweep's process, or Ctrl-C to the whole process group (the workers get it
    too): the running jobs stop after their step with a checkpoint, a partial summary and a resume command, the
    jobs not started are skipped, the table lists them all and the sweep exits 128 + the signal."""
    sweep = tmp_path / "sweep"
    proc = start_parallel_sweep(sweep, corpus_file, cache_dir, new_session=group)
    wait_for_two_checkpoints(proc, sweep)
    if group:
        os.killpg(proc.pid, sig)
    else:
        proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=300)
    assert proc.returncode == 128 + sig, stderr[-3000:]
    assert "Traceback" not in stderr, stderr[-3000:]
    for job in ("0", "1"):
        s = summary(sweep / job)
        assert s["status"] == "interrupted" and s["interrupted"] == signal.Signals(sig).name
        assert 100 <= s["steps"] < 3000
        assert torch.load(sweep / job / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == s["steps"]
        assert f"hydra.run.dir={sweep / job} ckpt_path=last" in stdout  # its resume command
    assert not (sweep / "2" / "summary.json").exists() and not (sweep / "3" / "summary.json").exists()
    assert "not started" in stderr and f"stopped by {signal.Signals(sig).name}: 2 interrupted" in stderr


def test_the_slurm_launcher_without_sbatch_says_so_in_one_line(tmp_path):
    """No sbatch on the PATH (this machine, a laptop): one line and exit 2 before anything is written."""
    env = {**os.environ, "PATH": os.path.dirname(sys.executable)}  # the venv's python, no sbatch
    proc = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "hydra/launcher=slurm",
                           f"hydra.sweep.dir={tmp_path / 'sweep'}"], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        "error: hydra/launcher=slurm submits each job with sbatch, and this machine has no sbatch on its PATH; run "
        "on a SLURM login node, or drop hydra/launcher=slurm to run the sweep here."]
    assert not (tmp_path / "sweep").exists()

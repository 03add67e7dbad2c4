"""DDP and FSDP: the Hydra-safe start of the other ranks, what rank 0 alone writes, loss parity with one
process on the same global batch, exact resume, sweeps; FSDP's config and wrap policy."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from helpers import ROOT, TINY, compose_train, run_train
from tinygpt.runtime import distributed
from tinygpt.runtime.distributed import LocalRanks, processes_per_node, strategy_name

DDP = ["trainer=ddp", "trainer.accelerator=cpu", "logger=[wandb,csv]"]


def trainer_cfg(**kw):
    return OmegaConf.create({"devices": 1, **kw})


def test_lightnings_launcher_still_runs_the_whole_command_line_again(tmp_path, monkeypatch):
    """Why LocalRanks exists (docs/scaling-out.md, "Why not Lightning's launcher"): under Hydra, Lightning starts each
    extra rank with the script's whole argv, so under -m every rank runs the whole sweep. When this fails, Lightning
    has changed: see whether its launcher can now start our ranks."""
    from lightning.fabric.strategies.launchers import subprocess_script

    compose_train([], out_dir=tmp_path / "run")  # Hydra's config set, as in a job
    monkeypatch.setattr(sys, "argv", [str(ROOT / "train.py"), "-m", "seed=1,2"])
    command, _ = subprocess_script._hydra_subprocess_cmd(local_rank=1)  # the interpreter, the script, then:
    run_dir = f'hydra.run.dir="{tmp_path / "run"}"'
    assert command[-5:] == ["-m", "seed=1,2", run_dir, "hydra.job.name=train_ddp_process_1", "hydra.output_subdir=null"]


def test_lightnings_observer_still_kills_rank_zero_when_a_rank_stops_on_a_signal():
    """A rank stopped by SIGTERM exits 143 once the ranks have agreed to stop; Lightning's child observer takes any
    non-zero status for a failure and kills every process, rank 0 among them (while it may be saving)."""
    from lightning.fabric.strategies.launchers import subprocess_script

    class Stopped:
        pid, returncode = 12345, 143

        def poll(self):
            return self.returncode

    observer = subprocess_script._ChildProcessObserver(main_pid=os.getpid(), child_processes=[Stopped()])
    killed = []
    observer._terminate_all = lambda: killed.append(True)
    assert observer._run() is True and killed == [True]


def test_strategy_names_and_process_counts():
    assert strategy_name(trainer_cfg(strategy="ddp")) == "ddp"
    assert strategy_name(trainer_cfg()) == "auto"
    fsdp = compose_train(["trainer=fsdp"]).trainer
    assert strategy_name(fsdp) == "fsdp" and processes_per_node(fsdp) == 2
    assert processes_per_node(compose_train(["trainer=ddp", "trainer.devices=3"]).trainer) == 3
    assert processes_per_node(trainer_cfg(strategy="ddp_spawn", devices=2)) == 1  # Lightning starts those
    assert processes_per_node(trainer_cfg(strategy="auto", devices=2)) == 2  # Lightning's ddp, started by us
    assert processes_per_node(trainer_cfg(strategy="auto", devices=1)) == 1
    assert processes_per_node(trainer_cfg(strategy="ddp", devices="auto")) == 1  # left to Lightning


def test_other_ranks_run_this_jobs_overrides_into_this_jobs_dir(tmp_path):
    ranks = LocalRanks(3, tmp_path / "run", ROOT / "train.py")
    cmd = ranks.command(["model=tiny", "seed=2", "hydra.run.dir=elsewhere", "hydra.job.name=x"], rank=2)
    assert cmd == [sys.executable, str(ROOT / "train.py"), "model=tiny", "seed=2", f"hydra.run.dir={tmp_path / 'run'}",
                   "hydra.output_subdir=null", "hydra.job.name=train_rank2"]
    assert ranks.log_path(2) == tmp_path / "run" / "train_rank2.log"


@pytest.mark.parametrize("env, started", [({}, False), ({"LOCAL_RANK": "0"}, True), ({"SLURM_NTASKS": "4"}, True),
                                          ({"SLURM_NTASKS": "1"}, False), ({"TORCHELASTIC_RUN_ID": "x"}, True)])
def test_ranks_started_by_others_are_not_started_again(monkeypatch, env, started):
    for key in ("LOCAL_RANK", "SLURM_NTASKS", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert distributed.started_externally() is started


@pytest.mark.parametrize("env, rank", [({}, 0), ({"LOCAL_RANK": "1"}, 1), ({"SLURM_PROCID": "3"}, 3),
                                       ({"RANK": "5", "LOCAL_RANK": "1"}, 5)])
def test_rank_from_the_environment(monkeypatch, env, rank):
    for key in ("RANK", "SLURM_PROCID", "LOCAL_RANK"):
        monkeypatch.delenv(key, raising=False)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    assert distributed.env_rank() == rank and distributed.is_rank_zero() is (rank == 0)


def test_fsdp_wraps_each_block():
    """The FSDP recipe composes and wraps the transformer Block (tested without a process group: the strategy
    object and its policy; a CPU run is in the README's list of what is untested)."""
    from lightning.pytorch.strategies import FSDPStrategy

    from hydra.utils import instantiate
    from tinygpt.model.gpt import GPT, Block, GPTConfig

    cfg = compose_train(["trainer=fsdp"])
    strategy = instantiate(cfg.trainer.strategy)
    assert isinstance(strategy, FSDPStrategy)
    policy = strategy.kwargs["auto_wrap_policy"]
    model = GPT(GPTConfig(vocab_size=11, n_layer=2, n_head=2, n_embd=8, block_size=8))
    wrapped = [name for name, m in model.named_modules() if policy(module=m, recurse=False, nonwrapped_numel=0)]
    assert wrapped == ["blocks.0", "blocks.1"] and all(isinstance(model.get_submodule(n), Block) for n in wrapped)


# ----------------------------------------------------------------------------- end to end, 2 processes (gloo)


def summary(run_dir: Path) -> dict:
    return json.loads((run_dir / "summary.json").read_text())


def weights(run_dir: Path) -> dict:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]


@pytest.mark.slow
def test_two_processes_match_one_on_the_same_global_batch(tmp_path, corpus_args):
    """2 ranks x batch 4 vs 1 process x batch 8: the same windows each step (data.RandomWindows), so the same
    run up to the rounding of the gradient all-reduce. Rank 0 alone writes; maps, samples, diagnostics and the
    final validation all ran."""
    one, two = tmp_path / "runs" / "one", tmp_path / "runs" / "two"
    run_train([*TINY, *corpus_args, "trainer.accelerator=cpu", "data.batch_size=8", f"hydra.run.dir={one}"])
    proc = run_train([*TINY, *corpus_args, *DDP, "data.batch_size=4", f"hydra.run.dir={two}"])
    assert "DDP: started rank 1 of 2 on this machine" in proc.stderr + proc.stdout
    a, b = summary(one), summary(two)
    for key in ("train_loss", "val_loss", "val_loss_honest"):
        assert abs(a[key] - b[key]) < 1e-5, (key, a[key], b[key])
    wa, wb = weights(one), weights(two)
    assert max((wa[k] - wb[k]).abs().max().item() for k in wa) < 1e-5
    # one run: its files once, in one dir; the other rank only left its log
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["one", "two"]
    assert (two / ".hydra" / "config.yaml").exists() and (two / "train_rank1.log").exists()
    assert len(list((two / "wandb").glob("offline-run-*"))) == 1
    assert b["steps"] == 20 and b["status"] == "completed" and b["future_leak"] == 0.0
    assert sorted(p.name for p in (two / "attention").glob("*.png")) == sorted(
        p.name for p in (one / "attention").glob("*.png"))
    assert len((two / "samples.jsonl").read_text().splitlines()) == 2  # after each of the 2 validations
    assert b["config"]["trainer"]["strategy"] == "ddp" and b["config"]["trainer"]["devices"] == 2


@pytest.mark.slow
def test_a_ddp_run_resumes_exactly(tmp_path, corpus_args):
    straight, split = tmp_path / "straight", tmp_path / "split"
    base = [*TINY, *corpus_args, *DDP, "logger=none", "optim.decay_steps=20"]  # one schedule for both
    run_train([*base, f"hydra.run.dir={straight}"])
    run_train([*base, "trainer.max_steps=10", f"hydra.run.dir={split}"])
    run_train([*base, f"hydra.run.dir={split}", "ckpt_path=last"])
    wa, wb = weights(straight), weights(split)
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    assert summary(split)["train_loss"] == summary(straight)["train_loss"]


@pytest.mark.slow
def test_a_ddp_sweep_gives_each_job_its_own_ranks(tmp_path, corpus_args):
    sweep = tmp_path / "sweep"
    run_train(["-m", *TINY, *corpus_args, *DDP, "logger=none", "seed=1,2", f"hydra.sweep.dir={sweep}"])
    for job in ("0", "1"):
        s = summary(sweep / job)
        assert s["status"] == "completed" and s["steps"] == 20 and (sweep / job / "train_rank1.log").exists()
    assert summary(sweep / "0")["val_loss"] != summary(sweep / "1")["val_loss"]  # the seeds differ
    assert sorted(p.name for p in sweep.iterdir()) == [".lock", "0", "1", "multirun.yaml"]


@pytest.mark.slow
def test_a_signal_to_rank_zero_stops_every_rank_after_the_same_step(tmp_path, corpus_args):
    run_dir = tmp_path / "run"
    args = [*TINY, *corpus_args, *DDP, "logger=none", "trainer.max_steps=3000", "trainer.val_check_interval=1000",
            "callbacks.attention_maps.every_n_steps=0", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env={**os.environ, "WANDB_MODE": "offline"})
    deadline, log = time.time() + 120, run_dir / "train_rank1.log"
    while not log.exists() or "GLOBAL_RANK: 1" not in log.read_text():
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.2)
    time.sleep(3)  # training
    proc.send_signal(signal.SIGTERM)  # rank 0 only
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 143, out[-3000:]
    s = summary(run_dir)
    ckpt = torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=True)
    assert s["status"] == "interrupted" and 0 < s["steps"] < 3000 and ckpt["global_step"] == s["steps"]
    assert "ckpt_path=last" in out


def ending(code: int) -> str:
    """A Python one-liner that exits with ``code``; a negative one: killed by that signal (the default action)."""
    if code >= 0:
        return f"raise SystemExit({code})"
    return (f"import os, signal; n = {-code}; n == signal.SIGKILL or signal.signal(n, signal.SIG_DFL); "
            "os.kill(os.getpid(), n)")


@pytest.mark.parametrize("code, fails", [(0, False), (143, False), (130, False), (-2, False), (-15, False),
                                         (3, True), (-9, True)])
def test_a_rank_that_fails_is_named_and_a_rank_stopped_by_a_signal_is_not(tmp_path, code, fails):
    ranks = LocalRanks(2, tmp_path, ROOT / "train.py")
    ranks.procs = [subprocess.Popen([sys.executable, "-c", ending(code)])]
    if fails:
        with pytest.raises(RuntimeError, match=f"rank 1 exited with status {code}; its log: .*train_rank1.log"):
            ranks.__exit__(None, None, None)
    else:
        ranks.__exit__(None, None, None)


def test_several_nodes_without_a_scheduler_is_one_sentence(monkeypatch):
    from tinygpt.runtime.errors import ConfigError
    from tinygpt.train.run import setup

    for key in ("LOCAL_RANK", "SLURM_NTASKS", "TORCHELASTIC_RUN_ID"):
        monkeypatch.delenv(key, raising=False)
    cfg = compose_train(["trainer=ddp", "trainer.num_nodes=2", "logger=none"], out_dir=ROOT / "outputs" / "unused")
    with pytest.raises(ConfigError, match=r"^trainer.num_nodes=2 needs one process per device started on every node"):
        setup(cfg, ROOT / "outputs" / "unused")
    monkeypatch.setenv("SLURM_NTASKS", "4")  # SLURM started them: nothing to say
    distributed.check_launch(cfg.trainer)


class Stop:  # the run's GracefulStop as LocalRanks reads it
    signum, training, stopping = None, False, False


@pytest.mark.parametrize("code, abandoned", [(130, 2), (143, 15), (-2, 2), (3, None)])
def test_a_rank_stopped_while_rank_zero_cannot_follow_ends_rank_zero_as_that_stop(tmp_path, monkeypatch, code,
                                                                                   abandoned):
    """Ctrl-C to a DDP run's process group during start-up: the ranks stop, while rank 0 waits for them in the
    rendezvous, where its handler never runs (it had waited there for ever, or, with Lightning's launcher, been
    SIGKILLed: exit 137, a half-made dir). The watcher ends rank 0 as that stop (abandon); a rank that fails is still
    an error that ends rank 0 at once."""
    seen, killed = [], []
    ranks = LocalRanks(2, tmp_path, ROOT / "train.py", Stop(), abandon=seen.append)
    monkeypatch.setattr(LocalRanks, "GRACE_S", 0.05)
    monkeypatch.setattr(distributed.os, "kill", lambda pid, sig: killed.append(sig))
    ranks.procs = [subprocess.Popen([sys.executable, "-c", ending(code)])]
    ranks.procs[0].wait()
    ranks._watch_ranks()  # returns once it has acted
    assert seen == ([] if abandoned is None else [abandoned])
    assert killed == ([signal.SIGKILL] if abandoned is None else [])


def test_a_rank_stopped_while_rank_zero_saves_its_stop_is_left_alone(tmp_path, monkeypatch):
    stop = Stop()
    stop.stopping = True  # rank 0 agreed to stop after the step and is writing last.ckpt
    seen = []
    ranks = LocalRanks(2, tmp_path, ROOT / "train.py", stop, abandon=seen.append)
    monkeypatch.setattr(LocalRanks, "GRACE_S", 0.05)
    ranks.procs = [subprocess.Popen([sys.executable, "-c", "raise SystemExit(130)"])]
    ranks.procs[0].wait()
    ranks._watch_ranks()
    assert seen == [] and ranks.failed is None


@pytest.mark.slow
def test_ctrl_c_to_a_ddp_runs_process_group_while_it_starts_leaves_nothing(tmp_path, corpus_args):
    """Ctrl-C reaches every rank while the ranks import and meet: exit 130 in one line, no run dir, no process
    left (it had exited 137 with a half-made dir, or left rank 0 waiting in the rendezvous for ever)."""
    run_dir = tmp_path / "run"
    args = [*TINY, *corpus_args, "trainer.devices=2", "trainer.accelerator=cpu", "logger=[wandb,csv]",
            f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, "WANDB_MODE": "offline"})
    deadline = time.time() + 120
    while not (run_dir / "train_rank1.log").exists():
        assert time.time() < deadline and proc.poll() is None
        time.sleep(0.1)
    os.killpg(proc.pid, signal.SIGINT)  # the whole group, as a terminal's Ctrl-C
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out[-3000:]
    assert out.strip().splitlines()[-1] == "interrupted by SIGINT while starting: nothing was trained or saved."
    assert "wandb sync" not in out and not run_dir.exists()
    left = subprocess.run(["pgrep", "-f", str(run_dir)], capture_output=True, text=True).stdout.split()
    assert left == []


def test_several_devices_under_lightnings_auto_strategy_are_started_by_us(tmp_path):
    """trainer.devices=4 with the default strategy (auto: Lightning's ddp) had gone to Lightning's launcher, which
    reruns the whole command line in each rank (a whole sweep under -m) and SIGKILLs rank 0 when a rank stops."""
    assert processes_per_node(compose_train(["trainer.devices=4"]).trainer) == 4


@pytest.mark.slow
def test_ctrl_c_to_a_ddp_run_just_as_training_ends_is_a_clean_stop(tmp_path, corpus_args):
    """Ctrl-C to the process group as fit reports max_steps reached (the newcomer's retry, 2 of 2): the ranks stop
    outside a step's agreement, rank 1 already in the end of the run, and rank 0's save, which waits for every
    rank, failed ('Connection closed by peer'): a traceback, exit 1, no summary. ModelCheckpoint's last.ckpt is at
    that step already: exit 130, the summary, the resume command, and the resume finishes the run."""
    run_dir = tmp_path / "run"
    args = [*TINY, *corpus_args, *DDP, "trainer.devices=2", "logger=none", "trainer.max_steps=60",
            "trainer.val_check_interval=30", f"hydra.run.dir={run_dir}"]
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *args], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True,
                            env={**os.environ, "WANDB_MODE": "offline"})
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if "max_steps=60` reached" in line:
            os.killpg(proc.pid, signal.SIGINT)
            break
    out = "".join(seen) + proc.communicate(timeout=180)[0]
    assert proc.returncode == 130, out[-3000:]
    assert "Traceback" not in out and "ckpt_path=last" in out
    assert summary(run_dir)["status"] == "interrupted"
    assert run_train([*args, "ckpt_path=last"]).returncode == 0
    assert summary(run_dir)["status"] == "completed" and summary(run_dir)["steps"] == 60

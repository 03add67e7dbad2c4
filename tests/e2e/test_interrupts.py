"""SIGTERM / SIGINT during training: a checkpoint at the current step, a partial summary, the resume
command, exit status 128 + signal; resuming gives the same final weights as an uninterrupted run."""

import json
import shlex
import signal
import subprocess
import sys
import time

import pytest
import torch

from helpers import ROOT, TINY, run_train

STEPS = 600
LONG = [*TINY, f"trainer.max_steps={STEPS}", "trainer.val_check_interval=100", "logger=none",
        "callbacks.attention_maps.every_n_steps=0", "callbacks.text_samples.final_only=true"]


def args(out, corpus_file, cache_dir, *extra):
    return [*LONG, "data=text_file", f"data.path={corpus_file}", f"data.cache_dir={cache_dir}",
            f"hydra.run.dir={out}", *extra]


def interrupt_after_first_checkpoint(out, argv, sig) -> subprocess.CompletedProcess:
    proc = subprocess.Popen([sys.executable, str(ROOT / "train.py"), *argv], cwd=ROOT, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    last = out / "checkpoints" / "last.ckpt"
    deadline = time.monotonic() + 300
    while not last.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    proc.send_signal(sig)
    stdout, stderr = proc.communicate(timeout=300)
    return subprocess.CompletedProcess(proc.args, proc.returncode, stdout, stderr)


def weights(path):
    return torch.load(path, weights_only=True)


@pytest.mark.slow
def test_sigterm_saves_the_current_step_and_resumes_to_the_same_weights(tmp_path, corpus_file, cache_dir):
    out = tmp_path / "run"
    argv = args(out, corpus_file, cache_dir)
    proc = interrupt_after_first_checkpoint(out, argv, signal.SIGTERM)
    assert proc.returncode == 143, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    step = summary["steps"]
    assert summary["status"] == "interrupted" and summary["interrupted"] == "SIGTERM"
    assert 100 <= step < STEPS, "the signal must land during training for this test to mean anything"
    assert weights(out / "checkpoints" / "last.ckpt")["global_step"] == step  # the current step, not step 100
    assert "Traceback" not in proc.stderr
    hint = next(line for line in proc.stdout.splitlines() if line.strip().startswith("python train.py"))
    resume = shlex.split(hint)[2:]
    assert f"hydra.run.dir={out}" in resume and "ckpt_path=last" in resume

    run_train(resume)  # the printed command, as a user would paste it
    run_train(args(tmp_path / "straight", corpus_file, cache_dir))
    resumed, straight = weights(out / "checkpoints" / "last.ckpt"), weights(tmp_path / "straight" / "checkpoints"
                                                                            / "last.ckpt")
    assert resumed["global_step"] == straight["global_step"] == STEPS
    assert all(torch.equal(resumed["state_dict"][k], v) for k, v in straight["state_dict"].items())
    # the loss history survives the resume: the summary's train loss covers the whole run
    assert len(resumed["train_losses"]) == STEPS
    s_resumed = json.loads((out / "summary.json").read_text())
    s_straight = json.loads((tmp_path / "straight" / "summary.json").read_text())
    assert s_resumed["status"] == "completed" and s_resumed["train_loss"] == s_straight["train_loss"]


@pytest.mark.slow
def test_ctrl_c_exits_130_with_a_checkpoint_and_a_partial_summary(tmp_path, corpus_file, cache_dir):
    out = tmp_path / "run"
    proc = interrupt_after_first_checkpoint(out, args(out, corpus_file, cache_dir), signal.SIGINT)
    assert proc.returncode == 130, proc.stderr[-3000:]
    summary = json.loads((out / "summary.json").read_text())
    assert summary["interrupted"] == "SIGINT" and summary["steps"] >= 100
    assert weights(out / "checkpoints" / "last.ckpt")["global_step"] == summary["steps"]

"""train.py's task around the recipe: a sweep continued in place (ckpt_path=last), job by job."""

import json
import math

import pytest
from omegaconf import OmegaConf

from tinygpt.runtime.resume_record import ENDED
from tinygpt.runtime.run_dirs import job_row
from tinygpt.train.cli import continued_job
from tinygpt.train.summary import STATUSES


def job(out):
    """The Hydra config of job 0 of a sweep (what continued_job reads), run into ``out``, and its own config."""
    hc = OmegaConf.create({"runtime": {"output_dir": str(out)}, "job": {"num": 0},
                           "overrides": {"task": ["seed=1", "ckpt_path=last"]}})
    return OmegaConf.create({"ckpt_path": "last", "seed": 1}), hc


def test_every_status_a_run_writes_is_ended_or_interrupted():
    """ENDED is the one list of the statuses that end a run: every other status a run writes may resume."""
    assert set(STATUSES) - set(ENDED) == {"interrupted"} and set(ENDED) <= set(STATUSES)


@pytest.mark.parametrize("status", ENDED)
def test_a_continued_sweep_skips_every_ended_job(tmp_path, capsys, status):
    """A job the leak alarm stopped (leaky) had been resumed by ckpt_path=last and trained on past its stop, its
    leak_detected_step rewritten; every ended job is skipped, its val loss returned, its checkpoint untouched."""
    (tmp_path / "checkpoints").mkdir()
    (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"a checkpoint")
    (tmp_path / "summary.json").write_text(json.dumps({"status": status, "val_loss": 1.5, "steps": 10}))
    cfg, hc = job(tmp_path)
    assert continued_job(cfg, hc) == 1.5
    assert capsys.readouterr().err == f"job 0 (seed=1,ckpt_path=last): already {status}, skipped\n"
    assert cfg.ckpt_path == "last"


def test_a_skipped_job_without_a_finite_val_loss_returns_nan(tmp_path, capsys):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "diverged", "val_loss": None}))
    assert math.isnan(continued_job(*job(tmp_path)))


@pytest.mark.parametrize("with_checkpoint", [True, False])
def test_an_interrupted_job_resumes_or_starts(tmp_path, capsys, with_checkpoint):
    if with_checkpoint:
        (tmp_path / "checkpoints").mkdir()
        (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"a checkpoint")
    (tmp_path / "summary.json").write_text(json.dumps({"status": "interrupted", "steps": 4}))
    cfg, hc = job(tmp_path)
    assert continued_job(cfg, hc) is None
    assert cfg.ckpt_path == ("last" if with_checkpoint else None) and capsys.readouterr().err == ""


DAMAGED = {  # what a summary.json cut short or damaged holds, and the reason it is named by
    "not UTF-8": (b'{"status": "completed", "val_loss": 1.5\xff}',
                  "summary.json: UnicodeDecodeError: 'utf-8' codec can't decode byte 0xff in position 39: invalid "
                  "start byte"),
    "cut short": (b'{"status": "compl',
                  "summary.json: JSONDecodeError: Unterminated string starting at: line 1 column 12 (char 11)"),
    "not JSON": (b"hello", "summary.json: JSONDecodeError: Expecting value: line 1 column 1 (char 0)"),
    "not an object": (b'["completed"]', "summary.json: a JSON list, not a run's summary"),
    "empty": (b"", "summary.json: JSONDecodeError: Expecting value: line 1 column 1 (char 0)"),
}


@pytest.mark.parametrize("damage", DAMAGED)
@pytest.mark.parametrize("with_checkpoint", [True, False])
def test_a_damaged_summary_is_named_and_its_job_runs_again(tmp_path, capsys, damage, with_checkpoint):
    """A damaged summary.json had been a traceback (UnicodeDecodeError, json.loads unguarded) that ran no job of the
    sweep; now it is named in one line and the job resumes from its checkpoint or starts afresh."""
    content, why = DAMAGED[damage]
    if with_checkpoint:
        (tmp_path / "checkpoints").mkdir()
        (tmp_path / "checkpoints" / "last.ckpt").write_bytes(b"a checkpoint")
    (tmp_path / "summary.json").write_bytes(content)
    cfg, hc = job(tmp_path)
    assert continued_job(cfg, hc) is None
    then = "it resumes from its last checkpoint." if with_checkpoint else "it has no checkpoint, so it starts afresh."
    assert capsys.readouterr().err == (
        f"note: job 0 (seed=1,ckpt_path=last): its summary.json cannot be read ({why}); {then}\n")
    assert cfg.ckpt_path == ("last" if with_checkpoint else None)


def test_the_sweeps_table_names_a_damaged_summary(tmp_path):
    (tmp_path / ".hydra").mkdir()
    (tmp_path / ".hydra" / "overrides.yaml").write_text("- seed=1\n")
    (tmp_path / "summary.json").write_bytes(b'{"status": "compl')
    row = job_row(tmp_path)
    assert row["status"] == "unreadable" and row["error"] == (
        "its summary.json cannot be read (summary.json: JSONDecodeError: Unterminated string starting at: line 1 "
        "column 12 (char 11))")


@pytest.mark.parametrize("stopped", [True, False])
def test_a_leaky_job_with_a_damaged_summary_is_skipped_by_what_its_checkpoint_says(tmp_path, capsys, stopped):
    """A job the leak alarm stopped, its summary.json damaged, had resumed from its checkpoint and trained on past the
    stop: the alarm's state in the checkpoint (read without torch) says it ended leaky, and it is skipped. A
    checkpoint whose alarm did not stop the run resumes, as any with a damaged summary."""
    import torch

    from tinygpt.train.probes.leak_alarm import LeakAlarm

    alarm = LeakAlarm()
    alarm.detected_step, alarm.signal, alarm.value, alarm.stopped = (10, "future_leak", 3.5, True) if stopped else (
        None, None, None, False)
    (tmp_path / "checkpoints").mkdir()
    torch.save({"global_step": 10, "callbacks": {alarm.state_key: alarm.state_dict()}},
               tmp_path / "checkpoints" / "last.ckpt")
    (tmp_path / "summary.json").write_bytes(b'{"status": "leaky", "ste')
    cfg, hc = job(tmp_path)
    err_why = "summary.json: JSONDecodeError: Unterminated string starting at: line 1 column 21 (char 20)"
    if stopped:
        assert math.isnan(continued_job(cfg, hc))
        assert capsys.readouterr().err == (
            f"note: job 0 (seed=1,ckpt_path=last): its summary.json cannot be read ({err_why}); its last checkpoint "
            "says the leak alarm stopped it (step 10): leaky, skipped (delete its dir to train it again).\n")
    else:
        assert continued_job(cfg, hc) is None
        assert "it resumes from its last checkpoint." in capsys.readouterr().err
    assert cfg.ckpt_path == "last"


def test_a_leaky_job_whose_summary_is_missing_is_skipped_too(tmp_path, capsys):
    """The new user's variant: job 1's summary.json deleted (not damaged) had resumed and trained 10 -> 20 steps."""
    import torch

    from tinygpt.train.probes.leak_alarm import LeakAlarm

    alarm = LeakAlarm()
    alarm.detected_step, alarm.signal, alarm.value, alarm.stopped = 10, "future_leak", 3.5, True
    (tmp_path / "checkpoints").mkdir()
    torch.save({"global_step": 10, "callbacks": {alarm.state_key: alarm.state_dict()}},
               tmp_path / "checkpoints" / "last.ckpt")
    cfg, hc = job(tmp_path)
    assert math.isnan(continued_job(cfg, hc))
    assert capsys.readouterr().err == (
        "note: job 0 (seed=1,ckpt_path=last): its summary.json is missing; its last checkpoint says the leak alarm "
        "stopped it (step 10): leaky, skipped (delete its dir to train it again).\n")

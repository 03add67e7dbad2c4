"""Run dirs and sweeps: unique default dirs, no run written over another, failing sweep jobs reported."""

import json
from pathlib import Path

import pytest
from hydra.core.hydra_config import HydraConfig
from omegaconf import OmegaConf

from helpers import TINY, compose_train, run_train
from tinygpt.runtime.run_dirs import holds_run, job_row, resumes_into


def test_default_run_and_sweep_dirs_are_unique():
    dirs = set()
    for _ in range(5):
        cfg = compose_train()
        dirs.add((str(cfg.hydra.run.dir), str(cfg.hydra.sweep.dir)))
    assert len(dirs) == 5  # composed within the same second, still five different dirs
    run_dir = OmegaConf.select(compose_train(), "hydra.run.dir")
    assert run_dir.startswith("outputs/") and len(run_dir.split("-")[-1]) == 6


def test_resuming_into_a_run_dir_is_recognised(tmp_path):
    run = tmp_path / "run"
    assert not holds_run(run)
    (run / "checkpoints").mkdir(parents=True)
    assert holds_run(run)
    assert resumes_into(run, "last") and resumes_into(run, str(run / "checkpoints" / "last.ckpt"))
    assert not resumes_into(run, None) and not resumes_into(run, str(tmp_path / "other" / "last.ckpt"))


def tiny(out, corpus_file, cache_dir, *extra):
    return [*TINY, "corpus=text_file", f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}", "logger=none",
            "trainer.max_steps=4", "trainer.val_check_interval=2", f"hydra.run.dir={out}", *extra]


@pytest.mark.slow
def test_a_second_run_into_the_same_dir_is_refused_and_resume_into_it_works(tmp_path, corpus_file, cache_dir):
    out = tmp_path / "run"
    run_train(tiny(out, corpus_file, cache_dir))
    before = {p: (out / p).read_bytes() for p in ("summary.json", "config.yaml", ".hydra/overrides.yaml")}
    again = run_train(tiny(out, corpus_file, cache_dir, "seed=7"), check=False)
    assert again.returncode == 2
    assert again.stderr.strip().splitlines() == [
        f"error: hydra.run.dir='{out}' already holds a run; choose another dir (the default is unique) or resume "
        "that run with ckpt_path=last."]
    assert {p: (out / p).read_bytes() for p in before} == before  # nothing of the first run was touched
    run_train(tiny(out, corpus_file, cache_dir, "ckpt_path=last", "trainer.max_steps=6"))
    assert json.loads((out / "summary.json").read_text())["steps"] == 6


@pytest.mark.slow
def test_a_failing_sweep_job_is_reported_at_once_and_in_the_table_and_the_sweep_exits_1(tmp_path, corpus_file,
                                                                                        cache_dir):
    sweep = tmp_path / "sweep"
    argv = [a for a in tiny(tmp_path / "unused", corpus_file, cache_dir) if not a.startswith("hydra.run.dir")]
    # A bad swept value is refused before any job starts (values.check_each_job); what only the job can find,
    # here a validation split shorter than the block, fails that job alone.
    proc = run_train(["-m", *argv, f"hydra.sweep.dir={sweep}", "model.block_size=1024,16"], check=False)
    assert proc.returncode == 1
    lines = proc.stderr.splitlines()
    first = next(line for line in lines if line.startswith("error:"))
    job_1_starts = max(i for i, line in enumerate(lines) if line.startswith("INFO: GPU available"))
    assert lines.index(first) < job_1_starts  # printed when the job failed, before job 1 ran
    assert first.startswith("error: job 0 (") and "model.block_size=1024" in first
    assert f"data.cache_dir={cache_dir}" in first  # every override, the paths override_dirname leaves out too
    assert first.endswith("fewer than data.block_size + 2 = 1026; use a larger corpus or a smaller block_size.")
    assert "Traceback" not in proc.stderr
    assert "1 of 2 jobs failed" in proc.stderr and "completed" in proc.stderr  # the table
    failed, ok = job_row(sweep / "0"), job_row(sweep / "1")
    assert failed["status"] == "failed" and "fewer than data.block_size + 2" in failed["error"]
    assert ok["status"] == "completed" and ok["val_loss"] > 0
    HydraConfig.instance().cfg = None


def test_a_run_dir_that_is_a_file_or_cannot_be_written_is_one_line(tmp_path, capsys):
    from tinygpt.runtime.run_dirs import writable_dir

    (tmp_path / "afile").write_text("x")
    with pytest.raises(SystemExit) as exit_:
        writable_dir("hydra.run.dir", tmp_path / "afile")
    assert exit_.value.code == 2
    assert capsys.readouterr().err.strip() == (f"error: hydra.run.dir='{tmp_path / 'afile'}' is a file, not a "
                                               "directory; give a directory for the run's files.")
    with pytest.raises(SystemExit):
        writable_dir("hydra.sweep.dir", Path("/proc/tinygpt-not-here"))  # not even root can write there
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: hydra.sweep.dir='/proc/tinygpt-not-here' cannot be written (") and "\n" not in err
    writable_dir("hydra.run.dir", tmp_path / "new" / "run")  # created, probed, left empty
    assert list((tmp_path / "new" / "run").iterdir()) == []


def test_a_refused_run_removes_only_the_hydra_files_of_a_dir_it_made(tmp_path):
    """discard_refused_run: the run dir this process made and its new parents go when they hold only Hydra's
    files, whatever set-up logged before the refusal (the memory check comes after Lightning's first lines); a dir
    that existed before, or that holds anything else, stays."""
    from tinygpt.runtime import run_dirs

    def hydra_files(run: Path, log: str = "") -> None:
        (run / ".hydra").mkdir(parents=True)
        for name in run_dirs.HYDRA_FILES:
            (run / ".hydra" / name).write_text("x: 1\n")
        (run / "train.log").write_text(log)

    run = tmp_path / "date" / "time-id"
    run_dirs.note_new_run_dir(run)
    hydra_files(run, "[2025-01-01 10:00:00][__main__][ERROR] - boom\n")
    assert run_dirs.discard_refused_run(run, "train.log") and not (tmp_path / "date").exists() and tmp_path.exists()

    run_dirs.note_new_run_dir(run)
    hydra_files(run, "[2025-01-01 10:00:00][lightning][INFO] - GPU available: False\n[...][ERROR] - needs 9 GiB\n")
    assert run_dirs.discard_refused_run(run, "train.log") and not (tmp_path / "date").exists()

    run_dirs.note_new_run_dir(run)
    hydra_files(run)
    (run / "checkpoints").mkdir()  # the run got going
    assert not run_dirs.discard_refused_run(run, "train.log") and (run / "train.log").exists()

    mine = tmp_path / "mine"
    run_dirs.note_new_run_dir(mine)
    hydra_files(mine)
    (mine / "notes.txt").write_text("mine")
    assert not run_dirs.discard_refused_run(mine, "train.log") and (mine / "notes.txt").exists()

    existing = tmp_path / "existing"
    existing.mkdir()
    run_dirs.note_new_run_dir(existing)  # there before the run, empty: never removed, left empty again
    hydra_files(existing)
    assert run_dirs.discard_refused_run(existing, "train.log") and existing.is_dir() and not any(existing.iterdir())


def test_a_refused_run_in_a_dir_that_held_a_run_puts_its_hydra_files_back(tmp_path):
    """A resume refused after Hydra had written the refused command over the run's .hydra/ files (a new learning
    rate, say) had left them rewritten: the run's own overrides are put back, byte for byte."""
    from tinygpt.runtime import run_dirs

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    for name in run_dirs.HYDRA_FILES:
        (run / ".hydra" / name).write_text(f"{name}: the run's own\n")
    (run / "config.yaml").write_text("seed: 7\n")
    run_dirs.note_new_run_dir(run)  # before Hydra writes
    for name in run_dirs.HYDRA_FILES:
        (run / ".hydra" / name).write_text("- ckpt_path=last\n- optim.lr=1e12\n")  # what Hydra writes
    assert run_dirs.discard_refused_run(run, "train.log")
    assert all((run / ".hydra" / n).read_text() == f"{n}: the run's own\n" for n in run_dirs.HYDRA_FILES)
    assert (run / "config.yaml").read_text() == "seed: 7\n"


def test_a_run_killed_before_it_wrote_its_config_still_holds_the_dir(tmp_path):
    """A run killed a few seconds in leaves only Hydra's files (.hydra/, the lock, an empty log): it is a run there,
    so a plain rerun is refused and a resume says it left no checkpoint (before: the rerun trained in its dir and the
    resume wrote over its .hydra/ files)."""
    from tinygpt.runtime import run_dirs

    killed = tmp_path / "k"
    (killed / ".hydra").mkdir(parents=True)
    (killed / ".hydra" / "overrides.yaml").write_text("- seed=7\n")
    (killed / "train.log").write_text("")
    assert run_dirs.holds_run(killed) and not run_dirs.holds_run(tmp_path)
    with pytest.raises(run_dirs.ConfigError, match="left no checkpoint"):
        run_dirs.resolve_ckpt_path("last", killed)


def test_cannot_write_into_probes_the_nearest_existing_folder_and_creates_nothing(tmp_path):
    from tinygpt.runtime.writable import cannot_write_into

    assert cannot_write_into(tmp_path / "new" / "deeper") is None
    assert list(tmp_path.iterdir()) == []  # neither the dirs nor the probe's file are left
    (tmp_path / "a_file").write_text("x")
    assert cannot_write_into(tmp_path / "a_file" / "sub") == f"{tmp_path / 'a_file'} is a file, not a directory"
    assert cannot_write_into(Path("/proc/tinygpt-x")).startswith("no file can be created in /proc (")


@pytest.mark.parametrize("kind", ["run", "sweep"])
def test_a_dir_another_running_process_holds_is_refused_whatever_the_timing(tmp_path, corpus_file, cache_dir, kind):
    """Run A holds its dir from its first moment (an flock on <dir>/.lock), before it has written anything a check
    for an existing run could see; run B, started into the same dir meanwhile, is refused in one line and leaves the
    dir as it was. The kernel drops the lock when A ends in any way; here A is this test's process."""
    import fcntl
    import os

    out = tmp_path / kind
    out.mkdir()
    lock = open(out / ".lock", "a+")  # noqa: SIM115
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    lock.write(f"pid {os.getpid()} on here\n")
    lock.flush()
    argv = tiny(out, corpus_file, cache_dir) if kind == "run" else ["-m", *[
        a for a in tiny(tmp_path / "x", corpus_file, cache_dir) if not a.startswith("hydra.run.dir")],
        f"hydra.sweep.dir={out}", "seed=1,2"]
    proc = run_train(argv, check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [
        f"error: hydra.{kind}.dir='{out}' is in use by another run (pid {os.getpid()} on here); wait for it to end, "
        "or choose another dir (the default is unique)."]
    assert sorted(p.name for p in out.iterdir()) == [".lock"]
    lock.close()  # A ends: the dir is free


@pytest.mark.slow
def test_two_runs_started_a_moment_apart_into_one_dir_the_second_is_refused(tmp_path, corpus_file, cache_dir):
    """The race the existence check cannot see: B starts while A is still setting up (nothing written yet). B is
    one line and exit 2; A finishes as if alone."""
    import os
    import subprocess
    import sys
    import time

    from helpers import ROOT

    out = tmp_path / "run"
    argv = [sys.executable, str(ROOT / "train.py"), *tiny(out, corpus_file, cache_dir, "trainer.max_steps=20")]
    env = {**os.environ, "WANDB_MODE": "offline"}
    a = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 60
    while not (out / ".lock").exists() or not (out / ".lock").read_text():
        assert time.monotonic() < deadline and a.poll() is None
        time.sleep(0.05)
    assert not holds_run(out)  # A has written nothing a run leaves yet: only the lock says it is there
    b = run_train(tiny(out, corpus_file, cache_dir, "seed=7"), check=False)
    assert b.returncode == 2 and len(b.stderr.strip().splitlines()) == 1
    assert f"is in use by another run (pid {a.pid} on " in b.stderr
    _, err = a.communicate(timeout=300)
    assert a.returncode == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 20 and summary["config"]["seed"] != 7


@pytest.mark.slow
def test_a_dir_a_live_run_holds_is_refused_as_in_use_whatever_it_has_written(tmp_path, corpus_file, cache_dir):
    """A run that has already written its .hydra/ files (the usual case: the second run takes seconds to start) was
    refused as 'already holds a run ... resume it with ckpt_path=last', advice that would resume a run still going.
    A live holder is named first, for a plain run, a resume and a sweep, and the dir is left as it was."""
    import subprocess
    import sys

    run, sweep = tmp_path / "run", tmp_path / "sweep"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- seed=1\n")
    (sweep / "0" / ".hydra").mkdir(parents=True)
    (sweep / "0" / ".hydra" / "overrides.yaml").write_text("- seed=1\n")
    hold = ("import fcntl, os, sys, time\n"
            "locks = [open(d + '/.lock', 'a+') for d in sys.argv[1:]]\n"
            "for f in locks:\n"
            "    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB); f.write(f'pid {os.getpid()} on here\\n'); f.flush()\n"
            "print('held', flush=True); time.sleep(120)\n")
    holder = subprocess.Popen([sys.executable, "-c", hold, str(run), str(sweep)], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        before = {p: p.read_bytes() for d in (run, sweep) for p in d.rglob("*") if p.is_file()}
        for argv in (tiny(run, corpus_file, cache_dir), tiny(run, corpus_file, cache_dir, "ckpt_path=last")):
            r = run_train(argv, check=False)
            assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
            assert f"hydra.run.dir={str(run)!r} is in use by another run (pid {holder.pid} on here)" in r.stderr
        r = run_train(["-m", *tiny(run, corpus_file, cache_dir, "seed=1,2")[:-1], f"hydra.sweep.dir={sweep}"],
                      check=False)
        assert r.returncode == 2 and f"hydra.sweep.dir={str(sweep)!r} is in use by another run (pid {holder.pid}" \
            in r.stderr, r.stderr
        assert {p: p.read_bytes() for d in (run, sweep) for p in d.rglob("*") if p.is_file()} == before
    finally:
        holder.kill()
        holder.wait()


def test_piped_the_sweep_table_and_the_done_line_are_never_wrapped(tmp_path, capsys, monkeypatch):
    """At 80 columns into a pipe, each job is one line holding its whole overrides and its whole run dir, and the
    done line keeps its path on the line that says done: (grep done: must find it)."""
    from tinygpt.runtime.console import say
    from tinygpt.runtime.run_dirs import print_sweep_table
    from tinygpt.train.summary import done_line

    monkeypatch.setenv("COLUMNS", "80")
    sweep = tmp_path / "a_sweep_dir_with_a_long_name" / "2026-12-03_13-45-00"
    long = ["trainer.max_steps=1500", "model.attn.scale=sqrt_dk", "optim.lr=0.000316227766", "seed=12345"]
    for job in range(2):
        d = sweep / str(job)
        (d / ".hydra").mkdir(parents=True)
        (d / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in long))
        (d / "summary.json").write_text(json.dumps({"status": "completed", "val_loss": 1.5}))
    print_sweep_table(sweep, None, workers=False, exit=False)
    lines = capsys.readouterr().err.splitlines()
    for job in range(2):
        (line,) = [x for x in lines if x.startswith(f"{job} ")]
        assert " ".join(long) in line and line.endswith(str(sweep / str(job))) and "completed" in line
    path = sweep / "0" / "summary.json"
    say(done_line({"steps": 1500, "train_loss": 1.2, "val_loss": 1.5, "val_loss_honest": 1.5, "future_leak": 0.0,
                   "tokens_per_sec": 1e4}, path), soft_wrap=True)
    (done,) = [x for x in capsys.readouterr().out.splitlines() if "done" in x]
    assert done.endswith(str(path))


def test_continuing_a_sweep_with_other_settings_is_refused_before_any_job(tmp_path):
    """-m seed=3,4 ... ckpt_path=last into a sweep of seed=1,2 had skipped both jobs as 'already completed' and
    listed the seed-1 and seed-2 results as seeds 3 and 4. Where it runs, how many at once and ckpt_path may change."""
    from tinygpt.runtime.run_dirs import changed_sweep

    sweep = tmp_path / "sweep"
    (sweep / "0").mkdir(parents=True)
    (sweep / "0" / "summary.json").write_text(json.dumps({"status": "completed"}))
    (sweep / "multirun.yaml").write_text("hydra:\n  overrides:\n    task:\n    - seed=1,2\n    - trainer.max_steps=30\n"
                                         "  sweeper:\n    params: null\n")

    def config(*task):
        return OmegaConf.create({"hydra": {"overrides": {"task": list(task)}, "sweeper": {"params": None}}})

    assert changed_sweep(sweep, config("trainer.max_steps=30", "seed=1,2", "ckpt_path=last",
                                       f"hydra.sweep.dir={sweep}", "hydra/launcher=parallel")) is None
    assert changed_sweep(sweep, config("seed=3,4", "trainer.max_steps=30", "ckpt_path=last")) == (
        f"hydra.sweep.dir='{sweep}' holds another sweep (-seed=1,2, +seed=3,4); continuing it (ckpt_path=last) takes "
        "the same command it was started with: seed=1,2 trainer.max_steps=30; for other settings choose another dir.")
    proc = run_train(["-m", "seed=1,2", "trainer.max_steps=40", f"hydra.sweep.dir={sweep}", "ckpt_path=last"],
                     check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: hydra.sweep.dir='{sweep}' holds another sweep (-trainer.max_steps=30, +trainer.max_steps=40); "
        "continuing it (ckpt_path=last) takes the same command it was started with: seed=1,2 trainer.max_steps=30; "
        "for other settings choose another dir."]
    assert sorted(p.name for p in sweep.iterdir()) == ["0", "multirun.yaml"]


def test_ctrl_c_while_starting_is_one_line_exit_130_and_leaves_no_run_dir(tmp_path, capsys, monkeypatch):
    """A KeyboardInterrupt out of Hydra's main (Ctrl-C while torch and Lightning import, before the run's own
    handlers) had been an 80-100 line traceback leaving a dir of Hydra's files; now one line, 130, the dir gone."""
    from tinygpt.runtime import entry, run_dirs

    run = tmp_path / "runs" / "run"
    run_dirs.note_new_run_dir(run)
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text("{}")
    (run / "train.log").write_text("")

    def main():
        raise KeyboardInterrupt

    def exit_(code):
        raise SystemExit(code)

    monkeypatch.setattr(entry, "exit_without_teardown", exit_)
    monkeypatch.setattr("sys.argv", ["train.py"])
    with pytest.raises(SystemExit) as stopped:
        entry.run(main, Path(__file__).resolve().parents[2] / "configs")
    assert stopped.value.code == 130
    assert capsys.readouterr().err == "interrupted by SIGINT while starting: nothing was trained or saved.\n"
    assert not (tmp_path / "runs").exists()


def test_continuing_a_sweep_in_a_dir_that_holds_none_says_every_job_starts_afresh(tmp_path, capsys):
    """-m ... ckpt_path=last without the old sweep's hydra.sweep.dir (the default is a new dir) had started a new
    sweep without a word."""
    from tinygpt.runtime.run_dirs import RunDirGuard

    sweep = tmp_path / "new"
    config = OmegaConf.create({"ckpt_path": "last", "seed": 1, "hydra": {
        "overrides": {"task": ["seed=1,2", "ckpt_path=last"]}, "runtime": {"choices": {}},
        "launcher": {"_target_": "hydra._internal.core_plugins.basic_launcher.BasicLauncher"},
        "sweep": {"dir": str(sweep)}, "sweeper": {"params": None}}})
    RunDirGuard().on_multirun_start(config)
    assert capsys.readouterr().err.strip() == (
        f"note: ckpt_path=last continues a sweep in place, but hydra.sweep.dir='{sweep}' holds no job of one: every "
        "job starts afresh (to continue a sweep, give its hydra.sweep.dir).")


def test_sigterm_while_starting_is_one_line_exit_143_and_leaves_no_run_dir(tmp_path, capsys, monkeypatch):
    """SIGTERM before the run's own handlers had ended the process without a word, leaving a dir (Hydra's files, and
    after 6 s config.yaml and wandb/) that the next run there was refused on; now as Ctrl-C: one line, 143, gone."""
    import os
    import signal

    from tinygpt.runtime import entry, run_dirs

    run = tmp_path / "runs" / "run"
    run_dirs.note_new_run_dir(run)
    (run / ".hydra").mkdir(parents=True)
    (run / "wandb" / "offline-run-x").mkdir(parents=True)
    (run / "config.yaml").write_text("{}")  # set-up had written its config: still nothing trained

    def main():
        os.kill(os.getpid(), signal.SIGTERM)

    def exit_(code):
        raise SystemExit(code)

    monkeypatch.setattr(entry, "exit_without_teardown", exit_)
    monkeypatch.setattr("sys.argv", ["train.py"])
    previous = signal.getsignal(signal.SIGTERM)
    try:
        with pytest.raises(SystemExit) as stopped:
            entry.run(main, Path(__file__).resolve().parents[2] / "configs")
    finally:
        signal.signal(signal.SIGTERM, previous)
    assert stopped.value.code == 143
    assert capsys.readouterr().err == "interrupted by SIGTERM while starting: nothing was trained or saved.\n"
    assert not (tmp_path / "runs").exists()


def test_a_signal_after_the_runs_handlers_but_before_its_first_step_leaves_no_run_dir(tmp_path):
    """The run's own handler (GracefulStop) raises RunInterrupted outside the training loop: stopped during data
    preparation or a DDP start-up, the run had exited 130 without a word, leaving its dir (config.yaml, wandb/, the
    other ranks' start-up logs). That dir is discarded like one stopped while importing; a checkpoint keeps it."""
    from tinygpt.runtime import run_dirs

    run = tmp_path / "runs" / "run"
    run_dirs.note_new_run_dir(run)
    (run / ".hydra").mkdir(parents=True)
    (run / "wandb" / "offline-run-x").mkdir(parents=True)
    (run / "history").mkdir()
    for name in ("config.yaml", "train.log", "train_rank1.log", "train_rank3.log"):
        (run / name).write_text("")
    assert run_dirs.unstarted_run("train.log")
    (run / "checkpoints").mkdir()  # a step was taken and saved: the dir stays
    assert not run_dirs.unstarted_run("train.log") and not run_dirs.discard_unstarted_run("train.log")
    (run / "checkpoints").rmdir()
    (run / "notes.txt").write_text("mine")  # anything else stays too
    assert not run_dirs.discard_unstarted_run("train.log") and run.is_dir()
    (run / "notes.txt").unlink()
    assert run_dirs.discard_unstarted_run("train.log") and not (tmp_path / "runs").exists()


def test_an_archive_that_is_not_a_train_py_checkpoint_is_refused_from_its_layout(tmp_path):
    """A zip of other files as ckpt_path had been refused only after torch and Lightning (16 s): the archive's layout
    and its pickle, read without torch, say it is not a checkpoint; a real one passes."""
    import zipfile

    import torch

    from helpers import write_checkpoint
    from tinygpt.runtime.errors import ConfigError
    from tinygpt.runtime.run_dirs import check_archive

    other = tmp_path / "notes.zip"
    with zipfile.ZipFile(other, "w") as z:
        z.writestr("notes/a.txt", "hello")
    with pytest.raises(ConfigError) as err:
        check_archive(other)
    assert str(err.value) == (f"checkpoint {str(other)!r} is not a readable checkpoint (a zip archive, but not one "
                              "torch wrote: it holds no data.pkl).")
    weights = tmp_path / "weights.pt"
    torch.save({"weights": torch.zeros(2)}, weights)
    with pytest.raises(ConfigError) as err:
        check_archive(weights)
    assert str(err.value) == (f"checkpoint {str(weights)!r} was not written by train.py (no "
                              "state_dict/hyper_parameters).")
    write_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    check_archive(tmp_path / "run" / "checkpoints" / "last.ckpt")


def test_a_run_killed_before_its_first_checkpoint_is_no_dead_end(tmp_path, capsys):
    """kill -9 before the first checkpoint leaves a run dir without one: ckpt_path=last had said "set hydra.run.dir to
    the run to resume" (it is that run) and a plain start "resume that run with ckpt_path=last"; now each says there
    is no checkpoint and how to start over."""
    from tinygpt.runtime.errors import ConfigError
    from tinygpt.runtime.run_dirs import RunDirGuard, resolve_ckpt_path

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 1\n")  # set-up had written it: a run, killed before it saved anything
    with pytest.raises(ConfigError) as err:
        resolve_ckpt_path("last", run)
    assert str(err.value) == (
        f"ckpt_path=last but the run in hydra.run.dir='{run}' left no checkpoint ({run}/checkpoints/last.ckpt does "
        "not exist: it stopped before its first one, or saved none), so there is nothing to resume; start it over "
        f"without ckpt_path=last, in another hydra.run.dir or after deleting {run}.")
    with pytest.raises(ConfigError, match=r"^ckpt_path=last but .* does not exist; set hydra.run.dir to the run to "):
        resolve_ckpt_path("last", tmp_path / "elsewhere")  # no run there: the dir is the mistake
    config = OmegaConf.create({"ckpt_path": None, "hydra": {"run": {"dir": str(run)}}})
    with pytest.raises(SystemExit) as stopped:
        RunDirGuard().on_run_start(config)
    assert stopped.value.code == 2 and capsys.readouterr().err.strip() == (
        f"error: hydra.run.dir='{run}' already holds a run, which left no checkpoint to resume; choose another dir "
        f"(the default is unique), or delete {run} to start it over there.")


def test_resuming_a_run_killed_before_its_first_checkpoint_is_refused_before_hydra_writes_into_it(tmp_path, capsys):
    """ckpt_path=last into a run dir without a checkpoint had been refused only after Hydra had written its .hydra/
    files there (the killed run's record of its own overrides replaced by 'ckpt_path=last') and a train.log: now
    the run dir guard refuses it, before the job's dir is touched."""
    from tinygpt.runtime.run_dirs import RunDirGuard

    run = tmp_path / "run"
    (run / ".hydra").mkdir(parents=True)
    (run / ".hydra" / "overrides.yaml").write_text("- seed=5\n")
    (run / "config.yaml").write_text("seed: 5\n")
    config = OmegaConf.create({"ckpt_path": "last", "hydra": {"run": {"dir": str(run)}}})
    with pytest.raises(SystemExit) as stopped:
        RunDirGuard().on_run_start(config)
    assert stopped.value.code == 2 and capsys.readouterr().err.strip() == (
        f"error: ckpt_path=last but the run in hydra.run.dir='{run}' left no checkpoint ({run}/checkpoints/last.ckpt "
        "does not exist: it stopped before its first one, or saved none), so there is nothing to resume; start it "
        f"over without ckpt_path=last, in another hydra.run.dir or after deleting {run}.")
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == [Path(".hydra"), Path(".hydra/overrides.yaml"),
                                                                  Path("config.yaml")]


@pytest.mark.parametrize("value, hint", [("lst", " (did you mean last?)"), ("latest", " (did you mean last?)"),
                                         ("best", "")])
def test_a_mistyped_last_is_named(tmp_path, value, hint):
    from tinygpt.runtime.errors import ConfigError
    from tinygpt.runtime.run_dirs import resolve_ckpt_path

    with pytest.raises(ConfigError) as err:
        resolve_ckpt_path(value, tmp_path)
    assert str(err.value) == (f"ckpt_path={value!r} is not a checkpoint file or a run dir holding "
                              f"checkpoints/last.ckpt{hint}.")

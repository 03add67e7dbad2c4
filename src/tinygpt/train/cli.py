"""train.py's task around tinygpt.train.run.train: how a run ends, as the shell and a sweep see it.

- a mistake in the config or input: `error: <sentence>`, exit status 2, no traceback
  (HYDRA_FULL_ERROR=1 shows it); a single run refused before any work leaves no run dir behind;
- a checkpoint that cannot be written: one line, exit status 1;
- SIGTERM / SIGINT / SIGUSR1: a partial summary, the resume command, exit status 128 + signal; in a sweep, the
  sweep's table (the jobs it never started marked) and the command that continues the whole sweep in place
  (the same command with ckpt_path=last: finished jobs skipped, interrupted ones resumed, the others started);
- in a sweep (-m), a failing job prints its error at once, writes it to <job dir>/error.txt and the sweep
  goes on; the sweep ends with a table of jobs and exits 1 if any failed (runs.SweepReport).
"""

from __future__ import annotations

import logging
import math
import signal
import sys
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, open_dict

from tinygpt.runtime.errors import (CheckpointWriteError, ConfigError, first_line, full_traceback_requested,
                                   print_error, switch_mistake)
from tinygpt.runtime.pipe_safe import guard_stdout
from tinygpt.runtime.resume_record import ENDED, alarm_stopped, read_summary
from tinygpt.runtime.interrupts import RunInterrupted, keep_idle_workers_alive, sweep_stop_signal
from tinygpt.runtime.run_dirs import (ERROR_FILE, discard_refused_run, discard_unstarted_run, in_parallel_sweep,
                                      print_sweep_table)
from tinygpt.train.summary import mark_failed
from tinygpt.train.values import check_values

log = logging.getLogger(__name__)


def one_job_of_a_sweep(hc) -> str | None:
    """A note when a run without -m picks an experiment that is a sweep (it has sweeper params): one job of it
    runs, and the note says how to run them all."""
    if hc.mode == RunMode.MULTIRUN or not hc.sweeper.get("params"):
        return None
    experiment = hc.runtime.choices.get("experiment")
    name = f"experiment={experiment}" if experiment else "this config"
    return (f"{name} is a sweep ({', '.join(hc.sweeper.params)}); this runs one job of it. "
            f"To run the whole sweep: python train.py -m {name if experiment else '...'}")


def run_task(cfg: DictConfig) -> float:
    hc = HydraConfig.get()
    sweep = hc.mode == RunMode.MULTIRUN
    note = one_job_of_a_sweep(hc)
    if note:
        print(f"note: {note}", file=sys.stderr, flush=True)
    parallel = in_parallel_sweep()
    if parallel:
        guard_stdout()  # a worker's own stdout: a closed pipe must not fail its job (runtime/pipe_safe.py)
        keep_idle_workers_alive()  # a worker's default would let a signal between jobs kill it (joblib then fails)
    if parallel and sweep_stop_signal(hc.sweep.dir) is not None:
        return math.nan  # the sweep was stopped before this job began: not started (the sweep's table says so)
    if sweep and str(cfg.get("ckpt_path")) == "last":  # continuing a sweep in place
        done = continued_job(cfg, hc)
        if done is not None:
            return done
    try:
        switch = switch_mistake(cfg, list(hc.overrides.task))
        if switch:  # compile=yes: OmegaConf has read it as true
            raise ConfigError(switch)
        check_values(cfg, Path(hc.runtime.output_dir))  # a bad value: one line, before torch, Lightning or W&B
        from tinygpt.train.run import train

        return train(cfg)["val_loss"]
    except RunInterrupted as stop:
        if discard_unstarted_run(f"{hc.job.name}.log"):  # stopped before its first step: nothing to resume
            print(f"interrupted by {signal.Signals(stop.signum).name} while starting: nothing was trained or saved.",
                  file=sys.stderr, flush=True)
        if parallel:  # a worker of a parallel sweep: the job has saved and said how to resume; the sweep goes on
            return math.nan
        if sweep:  # a serial sweep ends here: its table, with the jobs it never started, and how to continue it
            print_sweep_table(Path(hc.sweep.dir), stop.signum, workers=False, exit=False)
        sys.exit(stop.exit_code)
    except (ConfigError, CheckpointWriteError) as err:
        if isinstance(err, CheckpointWriteError):  # the run failed: its summary must not say otherwise
            mark_failed(Path(hc.runtime.output_dir), str(err))
        elif not sweep:  # refused before any work: no run dir left behind (Hydra made it)
            discard_refused_run(Path(hc.runtime.output_dir), f"{hc.job.name}.log")
        if full_traceback_requested():
            raise
        if not sweep:
            print_error(str(err))
            sys.exit(2 if isinstance(err, ConfigError) else 1)
        return _job_failed(hc, str(err))
    except Exception as err:
        if not sweep or full_traceback_requested():
            raise  # a bug, not a mistake: the traceback is what helps
        log.exception("job failed")  # the traceback goes to the job's train.log
        log_file = Path(hc.runtime.output_dir) / f"{hc.job.name}.log"
        return _job_failed(hc, f"{type(err).__name__}: {first_line(err)} (traceback in {log_file})")


def continued_job(cfg: DictConfig, hc) -> float | None:
    """One job of a sweep continued in place (ckpt_path=last): a job that ended (a status of ENDED: completed,
    diverged, leaky) is skipped (its val loss returned); one with a checkpoint resumes from it; one without (never
    started, or stopped before its first checkpoint) starts afresh. A summary.json that cannot be read (a job killed
    while writing it, a damaged copy) is named, and the job resumes from its checkpoint or starts afresh, as one
    that never wrote it. None: go on and train."""
    out = Path(hc.runtime.output_dir)
    label = job_label(hc)
    record, damaged = read_summary(out / "summary.json")
    if record is not None and record.get("status") in ENDED:
        print(f"{label}: already {record['status']}, skipped", file=sys.stderr, flush=True)
        loss = record.get("val_loss")
        return float(loss) if isinstance(loss, (int, float)) and not isinstance(loss, bool) else math.nan
    (out / ERROR_FILE).unlink(missing_ok=True)  # a job that failed before runs again
    from tinygpt.runtime.run_dirs import last_path_in

    resumes = last_path_in(out).exists()
    stopped_at = alarm_stopped(last_path_in(out)) if record is None and resumes else None
    if stopped_at is not None:  # its checkpoint says the leak alarm ended it: leaky, whatever the summary lost
        why = f"cannot be read ({damaged})" if damaged else "is missing"
        print(f"note: {label}: its summary.json {why}; its last checkpoint says the leak alarm stopped it (step "
              f"{stopped_at}): leaky, skipped (delete its dir to train it again).", file=sys.stderr, flush=True)
        return math.nan
    if damaged:
        print(f"note: {label}: its summary.json cannot be read ({damaged}); "
              + ("it resumes from its last checkpoint." if resumes else "it has no checkpoint, so it starts afresh."),
              file=sys.stderr, flush=True)
    if not resumes:
        with open_dict(cfg):
            cfg.ckpt_path = None  # nothing to resume: this job starts
    return None


def job_label(hc) -> str:
    """``job N (its overrides)``, every one of them (override_dirname leaves out paths such as data.cache_dir, which
    may be the value that made the job fail)."""
    given = [str(o) for o in hc.overrides.task if not str(o).lstrip("+~").startswith("hydra.")]
    return f"job {hc.job.num} ({','.join(given) or 'no overrides'})"


def _job_failed(hc, message: str) -> float:
    """A sweep job's failure: one line now, error.txt for the table at the end; the sweep goes on."""
    out = Path(hc.runtime.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / ERROR_FILE).write_text(message + "\n")
    print_error(f"{job_label(hc)}: {message}")
    return math.nan

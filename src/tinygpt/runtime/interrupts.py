"""Stop cleanly on SIGTERM (schedulers), SIGINT (Ctrl-C), SIGUSR1 (pre-emption notice) and SIGUSR2 (SLURM's
notice before the time limit: stop, checkpoint and requeue).

During training the first signal lets the current step finish, then last.ckpt is written at that step and
the run ends with RunInterrupted (under DDP/FSDP the ranks agree after every step whether any of them was
signalled, so all stop after the same step); the run writes a partial summary, prints how to resume and exits
128 + the signal number (143, 130, 138, 140), as shells expect. A second signal stops at once. Outside the
training loop (data preparation, the end-of-run validation and diagnostics) a signal stops at once; in the
end-of-run phase last.ckpt (at max_steps) and a partial summary are still written, and the resume command
finishes that phase.

Requeue on SLURM: SIGUSR2 (sent ``signal_delay_s`` before the time limit, configs/hydra/launcher/slurm.yaml)
in a SLURM job also asks SLURM to requeue the job (``scontrol requeue``, from rank 0, after the checkpoint
is written). The job starts again in the same run dir and resumes from that last.ckpt (tinygpt.train.setup).
This replaces Lightning's own auto-requeue, which saves from inside its signal handler wherever the step
is (rank by rank under DDP), so a resume could repeat or skip part of a step; here it is exact.
"""

from __future__ import annotations

import os
from collections.abc import Callable
import signal
import subprocess
import time
from pathlib import Path

from rich.console import Console

console = Console(stderr=True, soft_wrap=True)  # one-line messages: never cut at 80 columns when piped
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)
REQUEUE_SIGNAL = signal.SIGUSR2  # what submitit asks SLURM to send before the time limit (#SBATCH --signal)
# The same signal again within this many seconds of the first is the same stop, not a second one: a signal to a
# process group reaches a process several times at once (`timeout` forwards its own to the command and to the group;
# a scheduler may signal the group and the process), and a second press of Ctrl-C comes later than this.
ECHO_S = 1.0


def echo(signum: int, first: int | None, first_at: float) -> bool:
    """Whether ``signum`` arriving now repeats the first signal (``first``, at ``first_at``, time.monotonic())."""
    return signum == first and time.monotonic() - first_at < ECHO_S


def slurm_job_id() -> str | None:
    """This SLURM job's id as scontrol takes it (array tasks as <array job>_<task>); None outside SLURM."""
    array_job, task = os.environ.get("SLURM_ARRAY_JOB_ID"), os.environ.get("SLURM_ARRAY_TASK_ID")
    if array_job and task:
        return f"{array_job}_{task}"
    return os.environ.get("SLURM_JOB_ID") or None


def requeue_slurm_job(job_id: str) -> bool:
    """``scontrol requeue <job_id>``; True when SLURM took it."""
    try:
        done = subprocess.run(["scontrol", "requeue", job_id], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        console.print(f"[red]could not requeue SLURM job {job_id}: {err}[/]")
        return False
    if done.returncode:
        console.print(f"[red]scontrol requeue {job_id} failed: {done.stderr.strip() or done.returncode}[/]")
    return done.returncode == 0


STOP_FILE = ".stop"  # in a parallel sweep's dir: the signal that stopped the sweep (its number)


def sweep_stop_signal(sweep_dir: Path | str) -> int | None:
    """The signal that stopped this parallel sweep (written by SweepStop), or None while it runs."""
    try:
        return int((Path(sweep_dir) / STOP_FILE).read_text())
    except (OSError, ValueError):
        return None


class SweepStop:
    """Signals for a sweep whose jobs run at once in worker processes (hydra/launcher=parallel): the sweep's own
    process records the first SIGTERM / SIGINT / SIGUSR1 / SIGUSR2 in ``<sweep dir>/.stop`` and lets the jobs
    stop themselves. A running job sees it after its current step (GracefulStop polls the file), writes its
    checkpoint, partial summary and resume command; a job not started yet is skipped; the table then ends the
    sweep with exit status 128 + the signal. Signals reach the workers through the file, not again as
    signals, so a worker that also got the signal from the terminal (Ctrl-C reaches the whole process group)
    counts it once. A second signal to the sweep's process stops it at once.

    With ``hydra.launcher.n_jobs=1`` joblib runs the jobs in the sweep's own process, where each job's GracefulStop
    replaces these handlers while it runs: it records its first signal here too (``current``), so the whole sweep
    stops as above, not just the job."""

    current: SweepStop | None = None  # the one installed in this process: a job run here records its signal in it

    def __init__(self, sweep_dir: Path, continue_with: Callable[[], str] | None = None):
        self.path = Path(sweep_dir) / STOP_FILE
        self.signum: int | None = None
        self.first_at = 0.0  # when the first signal came (time.monotonic())
        self.continue_with = continue_with  # the command that continues the sweep, said when it stops at once

    def install(self) -> None:
        SweepStop.current = self
        for sig in SIGNALS:
            signal.signal(sig, self._handle)

    def record(self, signum: int) -> None:
        """The stop file, once: jobs running stop after their step, jobs not started are skipped."""
        if self.signum is None:
            self.signum, self.first_at = signum, time.monotonic()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self.path.write_text(str(int(signum)))

    def _handle(self, signum, frame) -> None:
        if echo(signum, self.signum, self.first_at):  # the first one again (ECHO_S)
            return
        if self.signum is not None:  # the second: at once, and the workers with it (else they outlive the sweep)
            stop_workers()
            try:  # what the table would have said: how to go on (best effort: nothing may keep the stop waiting)
                if self.continue_with is not None:  # print, not rich: this may interrupt a rich print, whose
                    print(f"{signal.Signals(signum).name} again: stopped at once (the running jobs' last "  # buffer
                          f"checkpoints stand). Continue with:\n  {self.continue_with()}", flush=True)  # is lost
            except Exception:
                pass
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
            return
        self.record(signum)
        console.print(f"[yellow]{signal.Signals(signum).name}: the running jobs stop after their current step "
                      "and save a checkpoint; the others are not started (send it again to stop at once).[/]")


def keep_idle_workers_alive() -> None:
    """In a worker process of a parallel sweep: the stop signals, while the worker waits between jobs, leave it
    alive. A scheduler's SIGTERM (or Ctrl-C) reaches the whole process group; the default action would kill an idle
    worker, and joblib would then end the sweep with TerminatedWorkerError instead of its table. The sweep's own
    process records the signal in the stop file, so the worker's next job sees it and does not start, and each job's
    GracefulStop handles the signals while the job runs (then puts this back). Installed where nothing else is."""
    for sig in SIGNALS:
        if signal.getsignal(sig) in (signal.SIG_DFL, signal.default_int_handler):
            signal.signal(sig, _noted_between_jobs)


def _noted_between_jobs(signum, frame) -> None:
    """An idle worker's handler: nothing to stop (the sweep's process has recorded the signal), unless the sweep's
    process is gone (the worker was left behind: it ends, as the signal asks)."""
    if os.getppid() == 1:
        os._exit(128 + signum)


def stop_workers() -> None:
    """End the sweep's worker processes now (joblib's loky executor, the parallel launcher's): for a sweep stopped
    at once, whose workers would otherwise run on without it."""
    try:
        from joblib.externals.loky import reusable_executor
    except ImportError:  # no joblib: no workers
        return
    executor = getattr(reusable_executor, "_executor", None)  # the one joblib made, if any (never make one here)
    for pid in list(getattr(executor, "_processes", None) or {}):  # killed here and now: the executor's own
        try:  # shutdown(kill_workers=True) works from a thread that this process's exit would end first
            os.kill(pid, signal.SIGKILL)
        except OSError:  # already gone
            pass


class RunInterrupted(Exception):
    def __init__(self, signum: int):
        self.signum = signum
        self.during = "training"  # or the end-of-run phase it stopped (tinygpt.train.end_of_run.finish_run)
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name

"""The callback that owns a run's signal handlers: the first signal ends the current step, writes last.ckpt at it
and ends the run with RunInterrupted; a second stops at once (the rules are in runtime/interrupts.py, which holds
what needs no torch: the signals, a sweep's stop, the exception)."""

from __future__ import annotations

import signal
import time
from pathlib import Path

import lightning as L
import torch

from tinygpt.runtime.interrupts import (REQUEUE_SIGNAL, SIGNALS, RunInterrupted, SweepStop, console, echo,
                                        requeue_slurm_job, slurm_job_id, sweep_stop_signal)


class GracefulStop(L.Callback):
    """Owns the signal handlers for one run. ``install()`` before anything starts, ``uninstall()`` at the
    end; during fit the handlers are installed again over Lightning's (which would end a run on SIGTERM
    with exit status 0 and no checkpoint at the current step)."""

    def __init__(self):
        self.signum: int | None = None
        self.first_at = 0.0  # when the first signal came (time.monotonic())
        self.training = False
        self.saved_path: Path | None = None
        self.sweep_dir: Path | None = None  # a parallel sweep's dir: its stop file is polled after every step
        self.stopping = False  # the checkpoint and summary of a stop are being written: more signals wait for it
        self._noted = False
        self._previous: dict[int, object] = {}

    # ------------------------------------------------------------------ handlers

    def install(self) -> None:
        for sig in SIGNALS:
            previous = signal.signal(sig, self._handle)
            self._previous.setdefault(sig, previous)

    def uninstall(self) -> None:
        """The handlers from before; after a stop, a handler that only notes further signals, so the few lines
        left (W&B, the exit) are not cut into a traceback: the run exits 128 + the first signal either way."""
        for sig, previous in self._previous.items():
            signal.signal(sig, self._handle if self.stopping else previous)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
        if echo(signum, self.signum, self.first_at):  # the first one again (interrupts.ECHO_S)
            return
        if self.stopping:  # already stopping: a second Ctrl-C must not cut the checkpoint or the summary short
            if not self._noted:
                self._noted = True
                console.print(f"[yellow]{signal.Signals(signum).name}: already stopping; the checkpoint and summary "
                              "are being written, then the run exits.[/]")
            return
        if self.signum is None and SweepStop.current is not None:  # a job run in the sweep's process (n_jobs=1):
            SweepStop.current.record(signum)  # the signal stops the whole sweep, as in a parallel one
        if self.signum is None:
            self.first_at = time.monotonic()
        if self.signum is not None or not self.training:
            self.signum = signum
            raise RunInterrupted(signum)
        self.signum = signum
        console.print(
            f"[yellow]{signal.Signals(signum).name}: stopping after this step and saving a checkpoint "
            "(send it again to stop at once).[/]"
        )

    # ------------------------------------------------------------------ Lightning hooks

    def on_train_start(self, trainer, module):
        self.training = True
        for sig in SIGNALS:  # over Lightning's SIGTERM handler, registered just before
            signal.signal(sig, self._handle)

    def on_train_end(self, trainer, module):
        self.training = False

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self.sweep_dir is not None and self.signum is None:
            self.signum = sweep_stop_signal(self.sweep_dir)  # the parallel sweep was signalled
        if trainer.world_size > 1:  # every rank stops after the same step, even if the signal reached one
            seen = int(trainer.strategy.reduce(torch.tensor(float(self.signum or 0)), reduce_op="max").item())
            if not seen:  # a signal that lands during this all-reduce is counted after the next step, by all
                return
            self.signum = self.signum or seen
        if self.signum is not None:
            self.training = False
            self.stopping = True
            self.save(trainer)
            job = slurm_job_id()
            if self.signum == REQUEUE_SIGNAL and job and trainer.is_global_zero and requeue_slurm_job(job):
                console.print(f"[yellow]SLURM job {job} requeued; it resumes from {self.saved_path}.[/]")
            raise RunInterrupted(self.signum)

    def save(self, trainer) -> Path:
        """last.ckpt at the current step, where ModelCheckpoint keeps it, and recorded as its last checkpoint (in
        the checkpoint's own copy of its state too): a stop before ModelCheckpoint's first save had left it
        recording none, so the resumed run found a last.ckpt it did not know and wrote last-v1.ckpt beside it,
        last.ckpt staying at the stop's step."""
        from tinygpt.runtime.checkpoint import last_path

        self.saved_path = last_path(trainer)
        cb = trainer.checkpoint_callback
        if cb is not None and hasattr(cb, "last_model_path"):
            cb.last_model_path = str(self.saved_path)
        trainer.save_checkpoint(self.saved_path, weights_only=False)
        return self.saved_path

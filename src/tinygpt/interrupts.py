"""Stop cleanly on SIGTERM (schedulers), SIGINT (Ctrl-C) and SIGUSR1 (cluster pre-emption notice).

During training the first signal lets the current step finish, then last.ckpt is written at that step and
the run ends with RunInterrupted (under DDP/FSDP the ranks agree after every step whether any of them was
signalled, so all stop after the same step); the pipeline writes a partial summary, prints how to resume and exits
128 + the signal number (143, 130, 138), as shells expect. A second signal stops at once. Outside the
training loop (data preparation, the final diagnostics) a signal stops at once.
"""

from __future__ import annotations

import signal
from pathlib import Path

import lightning as L
from rich.console import Console

console = Console(stderr=True)
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1)


class RunInterrupted(Exception):
    def __init__(self, signum: int):
        self.signum = signum
        super().__init__(f"interrupted by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        return 128 + self.signum

    @property
    def signal_name(self) -> str:
        return signal.Signals(self.signum).name


class GracefulStop(L.Callback):
    """Owns the signal handlers for one run. ``install()`` before anything starts, ``uninstall()`` at the
    end; during fit the handlers are installed again over Lightning's (which would end a run on SIGTERM
    with exit status 0 and no checkpoint at the current step)."""

    def __init__(self):
        self.signum: int | None = None
        self.training = False
        self.saved_path: Path | None = None
        self._previous: dict[int, object] = {}

    # ------------------------------------------------------------------ handlers

    def install(self) -> None:
        for sig in SIGNALS:
            previous = signal.signal(sig, self._handle)
            self._previous.setdefault(sig, previous)

    def uninstall(self) -> None:
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous = {}

    def _handle(self, signum, frame) -> None:
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
        if trainer.world_size > 1:  # every rank stops after the same step, even if the signal reached one
            import torch

            seen = int(trainer.strategy.reduce(torch.tensor(float(self.signum or 0)), reduce_op="max").item())
            if not seen:  # a signal that lands during this all-reduce is counted after the next step, by all
                return
            self.signum = self.signum or seen
        if self.signum is not None:
            self.training = False
            self.save(trainer)
            raise RunInterrupted(self.signum)

    def save(self, trainer) -> Path:
        """last.ckpt at the current step, where ModelCheckpoint keeps it."""
        from tinygpt.checkpoint import last_path

        self.saved_path = last_path(trainer)
        trainer.save_checkpoint(self.saved_path, weights_only=False)
        return self.saved_path

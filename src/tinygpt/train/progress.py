"""How a run goes, shown and measured: the progress bar (the run's steps, <steps done>/<max_steps>, also after a
resume) and the step clock (the one throughput meter: tokens/s to the loggers and summary.json).
"""

from __future__ import annotations

import sys
import time

from lightning.pytorch.callbacks import RichProgressBar, ThroughputMonitor

from tinygpt.train.callback_settings import StepProgressBarSettings
from tinygpt.runtime.internals import label_train_task


def windows_in(batch) -> int:
    """Samples in a batch, for the throughput meter."""
    return batch[0].shape[0]


def tokens_in(batch) -> int:
    """Tokens in a batch, for the throughput meter (items_per_sec = tokens/s)."""
    return batch[0].numel()


@label_train_task("train")  # not "Epoch 0" (tinygpt.runtime.internals)
class StepProgressBar(RichProgressBar):
    """Lightning's rich bar, labelled and counted by steps (training here is step-based, one endless 'epoch'):
    <steps done>/<max_steps>, a resumed run's too. No logger version (`v_num`): the run dir says which run this is."""

    def __init__(self, refresh_rate: int = 1, **kwargs):
        StepProgressBarSettings(refresh_rate)  # checked torch-free; Lightning's own options pass on
        super().__init__(refresh_rate=refresh_rate, **kwargs)

    def get_metrics(self, trainer, pl_module):
        items = super().get_metrics(trainer, pl_module)
        items.pop("v_num", None)
        return items

    @property
    def total_train_batches(self) -> int:
        """The run's steps (Lightning's total is the steps left in the epoch, which a resumed run miscounted)."""
        return self.trainer.max_steps

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        super().on_train_batch_end(trainer, pl_module, outputs, batch, trainer.global_step - 1)  # shows steps done


def peak_rss_mib() -> float | None:
    """This process's peak resident size so far, in MiB (getrusage; None where it is not kept)."""
    try:
        import resource
    except ImportError:  # not Unix
        return None
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (1 << 20 if sys.platform == "darwin" else 1 << 10)  # bytes on macOS, KiB on Linux


class StepClock(ThroughputMonitor):
    """The one throughput meter: Lightning's ThroughputMonitor (``train/*_per_sec`` and, where the device's peak
    is known, MFU, to the loggers; items = tokens) that also times each training step alone for summary.json:
    ``tokens_per_sec``, ``seconds``, the median step and when the first step began.

    Set-up puts it first among the callbacks, so the other callbacks' work (attention maps, samples, checkpoints)
    is not counted as training time in the summary's figures."""

    def __init__(self, batch_size_fn=None, length_fn=None, **kwargs):
        super().__init__(batch_size_fn or windows_in, length_fn or tokens_in, **kwargs)
        self.seconds, self.tokens, self._t0 = 0.0, 0, None
        self.first_step_at: float | None = None  # wall clock (time.time()) when the first step began
        self.first_step_peak_rss_mib: float | None = None  # the process's peak resident size by then (imports, set-up)
        self.step_seconds: list[float] = []

    def state_dict(self) -> dict:
        """The time and tokens of the steps so far, kept in the run's checkpoints: a resumed run's figures are the
        whole run's (a run resumed only to finish its end-of-run phase reports the steps it had trained)."""
        return {**super().state_dict(), "seconds": self.seconds, "tokens": self.tokens,
                "step_seconds": list(self.step_seconds), "first_step_at": self.first_step_at,
                "first_step_peak_rss_mib": self.first_step_peak_rss_mib}

    def load_state_dict(self, state: dict) -> None:
        self.seconds = float(state.get("seconds", 0.0))
        self.tokens = int(state.get("tokens", 0))
        self.step_seconds = [float(t) for t in state.get("step_seconds", [])]
        self.first_step_at = state.get("first_step_at")
        self.first_step_peak_rss_mib = state.get("first_step_peak_rss_mib")

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        if self.first_step_at is None:
            self.first_step_at = time.time()
            self.first_step_peak_rss_mib = peak_rss_mib()
        self._t0 = time.perf_counter()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        dt = time.perf_counter() - self._t0
        self.seconds += dt
        self.step_seconds.append(dt)
        self.tokens += batch[0].numel() * trainer.world_size
        if trainer.loggers:  # Lightning's meter only feeds the loggers
            super().on_train_batch_end(trainer, module, outputs, batch, batch_idx)

    @property
    def median_step_seconds(self) -> float | None:
        """The steady-state step time (the median is not moved by the first steps or a validation's hiccup)."""
        if not self.step_seconds:
            return None
        ordered = sorted(self.step_seconds)
        return ordered[len(ordered) // 2]

    @property
    def tokens_per_sec(self) -> float | None:
        return self.tokens / self.seconds if self.seconds else None

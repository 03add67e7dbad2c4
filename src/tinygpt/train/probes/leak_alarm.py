"""The leak alarm: at every validation, the two signatures of a model that reads the future, and one clear warning
the first time either shows.

1. The future leak: on ``windows`` fixed validation windows, the largest change in the logits at positions <= t
   when the tokens after t are replaced (tinygpt.train.probes.diagnostics.future_leak). Exactly 0 for a causal model;
   the alarm allows ``tolerance``.
2. The honest-loss gap: on the honest-loss probe's windows (callbacks.honest_loss), the autoregressive
   loss minus the teacher-forced loss at the same positions, per window. A causal model's two agree to rounding;
   the alarm needs the mean gap above ``z`` standard errors of the windows' gaps *and* above ``min_gap`` nats.

A model configured ``causal=false`` reads the future on purpose: the alarm measures and records it (summary.json)
but does not warn, alert or stop. For any other model the first detection prints one line, goes to summary.json
(``leak_detected_step``, ``leak_signal``, ``leak_value``) and to the loggers (``leak/detected_step``), raises a
W&B alert when W&B is online, and with ``action=stop`` ends the run cleanly (status ``leaky``; a sweep goes on).
Every validation also logs ``leak/future_leak`` and ``leak/honest_gap``.
"""

from __future__ import annotations

import math
import time

import lightning as L
import torch

from tinygpt.model.gpt import GPT
from tinygpt.runtime.console import say
from tinygpt.train.callback_settings import LeakAlarmSettings, take
from tinygpt.train.probes import diagnostics
from tinygpt.train.probes.callbacks import HonestLoss, ModelInspector, _wandb_loggers, log_at, wandb_media


def honest_gap(gaps: torch.Tensor) -> tuple[float, float]:
    """The mean of per-window gaps (N,) and its standard error (0 for a single window)."""
    n = len(gaps)
    mean = gaps.mean().item()
    se = gaps.std(unbiased=True).item() / math.sqrt(n) if n > 1 else 0.0
    return mean, se


class LeakAlarm(ModelInspector):
    def __init__(self, **settings):
        take(self, LeakAlarmSettings(**settings))  # action, windows, tolerance, min_gap, z
        self.detected_step: int | None = None
        self.signal: str | None = None
        self.value: float | None = None
        self.expected = False  # causal=false: a deliberate leak, recorded without alarm
        self.stopped = False
        self._stop_now = False
        self.seconds = 0.0  # spent looking (summary.json: what the alarm costs)

    def on_validation_end(self, trainer, module):
        if trainer.sanity_checking:
            return
        self.inspect(trainer, module)
        if trainer.world_size > 1:  # rank 0 decided; every rank stops together
            self._stop_now = trainer.strategy.broadcast(self._stop_now, src=0)
        if self._stop_now:
            self._stop_now, self.stopped = False, True
            trainer.should_stop = True

    def look(self, trainer: L.Trainer, module: L.LightningModule, model: GPT) -> None:
        t0 = time.perf_counter()
        try:
            self._look(trainer, module, model)
        finally:
            self.seconds += time.perf_counter() - t0

    def _look(self, trainer: L.Trainer, module: L.LightningModule, model: GPT) -> None:
        step = trainer.global_step
        x, _ = trainer.datamodule.spread_windows(self.windows)
        leak = diagnostics.future_leak(model, x.to(module.device))
        metrics = {"leak/future_leak": leak}
        probe = next((c for c in trainer.callbacks if isinstance(c, HonestLoss)), None)
        gap = se = None
        if probe is not None and probe.gaps is not None:
            gap, se = honest_gap(probe.gaps)
            metrics.update({"leak/honest_gap": gap, "leak/honest_gap_se": se})
        found = self.check(leak, gap, se)
        if found is not None and self.detected_step is None:
            self.detected_step, (self.signal, self.value) = step, found
            self.expected = not model.config.attn.causal
            metrics["leak/detected_step"] = float(step)
            if not self.expected:
                self.alarm(trainer, self.message(step, x.shape[0]))
                self._stop_now = self.action == "stop"
        log_at(trainer, metrics, step)

    def check(self, leak: float, gap: float | None, se: float | None) -> tuple[str, float] | None:
        """(signal, value) when either signature shows, the future leak first; None otherwise."""
        if math.isfinite(leak) and leak > self.tolerance:
            return "future_leak", leak
        if gap is not None and math.isfinite(gap) and gap > max(self.z * se, self.min_gap):
            return "honest_gap", gap
        return None

    def message(self, step: int, n_windows: int) -> str:
        if self.signal == "future_leak":
            what = (f"changing later tokens moves earlier logits by {self.value:.3g} (tolerance {self.tolerance:g}, "
                    f"{n_windows} validation windows)")
        else:
            what = f"the honest loss is {self.value:.3g} nats above the teacher-forced loss on the same windows"
        return f"leak alarm at step {step}: {what}; the model can see the future: check the attention mask."

    def alarm(self, trainer: L.Trainer, text: str) -> None:
        say(f"[bold red]{text}[/]" + (" Stopping (callbacks.leak_alarm.action=stop)." if self.action == "stop" else ""),
            soft_wrap=True)
        for lg in _wandb_loggers(trainer):
            run = lg.experiment
            if not run.offline:
                run.alert(title="tinygpt: the model can see the future", text=text,
                          level=wandb_media().AlertLevel.WARN)

    def state_dict(self) -> dict:
        """What a checkpoint keeps of the alarm: its first detection and whether it stopped the run. A continued sweep
        reads it without torch (``resume_record.alarm_stopped``) when the job's summary.json is damaged, so a job the
        alarm stopped is never trained on. Nothing is restored from it on a resume (the default, no-op
        ``load_state_dict``): a resumed run watches afresh."""
        return {"detected_step": self.detected_step, "signal": self.signal, "value": self.value,
                "expected": self.expected, "stopped": self.stopped}

    def summary(self) -> dict:
        """What summary.json records: the first detection (None if none), its signal and size, and whether the
        leak was configured (causal=false)."""
        return {"leak_detected_step": self.detected_step, "leak_signal": self.signal, "leak_value": self.value,
                "leak_expected": self.expected if self.detected_step is not None else None,
                "leak_alarm_seconds": self.seconds}

"""Experiment 4's run-time measures, as a callback its configs add (``callbacks.positions``): the position probe at
init and at the end of the run, and the loss past the trained context at the end, written to ``measures.npz`` in
the run dir, which the report's records keep (tinygpt.analysis.sweep reads it beside diagnostics.npz):

- ``probe_init_sse``, ``probe_end_sse`` (L + 1, held windows) and ``probe_sst`` (held windows,): the ridge probe's
  held-out squared errors per layer (measures.probe_errors) on ``windows`` fixed validation windows of the run's
  context, fitted on the even-numbered ones and scored on the odd-numbered ones;
- for a model whose positions do not end at its context (model.position none, rope or alibi; attending past it with
  model.extrapolate, set for this evaluation alone): ``long_buckets`` (long windows, 4), each
  of ``long_windows`` non-overlapping validation windows of ``factor`` x T tokens, its mean loss over the positions
  [0, T/2), [T/2, T), [T, 2T) and [2T, factor T); ``long_curve`` (factor T,), the loss at each position averaged over
  the windows (the report's figure).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import lightning as L
import numpy as np
import torch

from tinygpt.analysis.sweep import MEASURES
from tinygpt.data.windows import fixed_windows
from tinygpt.experiments.positions import measures
from tinygpt.train.probes.callbacks import ModelInspector


@dataclass(frozen=True)
class PositionProbesSettings:
    windows: int = 128  # validation windows of the run's context the probe reads (half fit, half scored)
    long_windows: int = 96  # validation windows of factor x T tokens the loss past the context is scored on
    factor: int = 4  # how many times the trained context the long windows are

    def __post_init__(self):
        for key in ("windows", "long_windows", "factor"):
            value = getattr(self, key)
            if not isinstance(value, int) or isinstance(value, bool) or value < 2:
                raise ValueError(f"callbacks.positions.{key}={value!r} must be an integer of at least 2.")


class PositionProbes(ModelInspector):
    """The position probe at init (not on a resume: the init's arrays are kept in the file from the first start)
    and, with the loss past the context, at the end of the run."""

    def __init__(self, **settings):
        self.settings = PositionProbesSettings(**settings)

    def on_fit_start(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.global_step == 0:
            self.when = "init"
            self.inspect(trainer, module)

    def on_fit_end(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        self.when = "end"
        self.inspect(trainer, module)

    def look(self, trainer: L.Trainer, module: L.LightningModule, model) -> None:
        path = Path(trainer.default_root_dir) / MEASURES
        arrays = dict(np.load(path)) if path.exists() else {}
        dm = trainer.datamodule
        x, _ = dm.spread_windows(self.settings.windows)  # (N, T)
        states = measures.hidden_states(model, x.to(module.device))  # (L + 1, N, T, C)
        sse, sst = measures.probe_errors(states, *measures.fit_and_held(len(x)))
        arrays[f"probe_{self.when}_sse"], arrays["probe_sst"] = sse.numpy(), sst.numpy()
        if self.when == "end" and model.config.position != "learned":
            T = model.config.block_size
            long_x, long_y = fixed_windows(np.asarray(dm.val_ids), self.settings.factor * T, self.settings.long_windows)
            was, model.config.extrapolate = model.config.extrapolate, True  # past T, for this evaluation only
            try:
                losses = measures.long_window_losses(model, long_x.to(module.device), long_y.to(module.device))
            finally:
                model.config.extrapolate = was
            edges = (0, T // 2, T, 2 * T, self.settings.factor * T)
            buckets = [losses[:, a:b].mean(1) for a, b in zip(edges, edges[1:], strict=False)]  # 4 x (N,)
            arrays["long_buckets"] = torch.stack(buckets, 1).numpy()  # (N, 4)
            arrays["long_curve"] = losses.mean(0).numpy()
        np.savez(path, **arrays)

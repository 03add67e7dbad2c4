"""The probes: callbacks that look inside the model at the edges of training (attention maps, text samples, the
honest loss at each validation, stability metrics). Each is a ``ModelInspector``: it gets the model with all of its
weights on every rank and looks on rank 0 alone. The guards (progress, step clock, divergence, heap) are in
guards.py; Lightning's own callbacks do the rest."""

from __future__ import annotations

import json
import math
import time
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import lightning as L
import numpy as np
import torch
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities import grad_norm
from rich.panel import Panel

from tinygpt.model.gpt import GPT
from tinygpt.pictures import explorer
from tinygpt.pictures.plots import LayerPlotter, token_label
from tinygpt.runtime import checkpoint
from tinygpt.runtime.console import out as console
from tinygpt.sampling.generate import generate
from tinygpt.train.callback_settings import (
    AttentionMapsSettings,
    HonestLossSettings,
    StabilityMonitorSettings,
    TextSamplesSettings,
    take,
)
from tinygpt.train.module import full_precision
from tinygpt.train.probes import diagnostics
from tinygpt.train.probes.diagnostics import evaluating


def full_model(trainer: L.Trainer, module: L.LightningModule) -> GPT | None:
    """The model with all of its weights, for what runs at the edges of training (attention maps, samples,
    stability and autoregressive probes, the final diagnostics), on rank 0; None on the other ranks.

    Call it on every rank: under FSDP the weights are sharded, so every rank takes part in gathering the full
    state dict (a collective) and rank 0 runs the probe on a plain copy; under DDP or one process every rank
    already holds the whole model (no copy is made). Rank 0 alone writes and logs what the probes give."""
    from lightning.pytorch.strategies import FSDPStrategy

    if not isinstance(trainer.strategy, FSDPStrategy):
        return module.model if trainer.is_global_zero else None
    state = trainer.strategy.lightning_module_state_dict()  # the full state dict on rank 0 (collective)
    if not trainer.is_global_zero:
        return None
    copy = module.new_model()
    copy.load_state_dict(checkpoint.model_weights(state))
    return copy.to(module.device)


class ModelInspector(L.Callback):
    """A callback that looks inside the model: its hooks call ``inspect(trainer, module)`` on every rank, which
    gathers the full model (``full_model``) and calls ``look(trainer, module, model)`` on rank 0 alone."""

    def inspect(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        model = full_model(trainer, module)  # on every rank: under FSDP the ranks gather it together
        if model is not None:  # rank 0, which alone looks, writes and logs
            self.look(trainer, module, model)

    def look(self, trainer: L.Trainer, module: L.LightningModule, model: GPT) -> None:
        raise NotImplementedError


def log_at(trainer: L.Trainer, metrics: dict[str, float], step: int) -> None:
    """Hand ``metrics`` to the loggers (W&B, history/metrics.csv) once, at ``step`` (a batch index, the step
    Lightning writes its own metrics at). ``module.log`` from a callback would keep the value and Lightning would
    send it again at every later logging step, so a probe taken every 50 steps would appear five times."""
    for lg in trainer.loggers:  # the loggers write on rank 0 only
        lg.log_metrics(metrics, step=step)


def wandb_media():
    """The wandb module, imported only when a W&B logger is on (its media types: Plotly, Html)."""
    import wandb

    return wandb


def _wandb_loggers(trainer: L.Trainer) -> list[WandbLogger]:
    return [lg for lg in trainer.loggers if isinstance(lg, WandbLogger)]


def probe_tokens(dm, text: str, block_size: int) -> tuple[torch.Tensor, list[str]]:
    """The probe as (1, T) ids and a label per token (validation ids when there is no tokenizer)."""
    if dm.tokenizer is None:
        ids = [int(i) for i in dm.val_ids[:block_size]]
        return torch.tensor([ids]), [str(i) for i in ids]
    ids = dm.encode(text)[:block_size]
    return torch.tensor([ids]), [token_label(dm.decode([i])) for i in ids]


class AttentionMaps(ModelInspector):
    """Every ``every_n_steps`` (0: never) and at the end, run a fixed probe through the math path and
    save one heatmap grid per layer under ``<run dir>/attention/``, logged to W&B as images. The raw
    weights go beside them as ``stepNNNNNN.npz`` (weights (n_layer, H, T, T), labels), for reports.

    The probe runs on the training thread (milliseconds); the PNGs are drawn on a background thread while
    training goes on (the figure is laid out once and blitted: tinygpt.pictures.plots) and reach W&B, at
    the step they show, once drawn, with a hoverable Plotly grid of the same weights. The maps at the end are
    waited for; then every probe step becomes one interactive page, attention/explorer.html (tinygpt.pictures.explorer),
    also logged to W&B."""

    def __init__(self, **settings):
        take(self, AttentionMapsSettings(**settings))  # every_n_steps, probe: checked there, torch-free
        self._last_step = -1
        self._renderer: ThreadPoolExecutor | None = None
        self._plotter = LayerPlotter()  # used on the renderer's one thread only
        self._pending: list[tuple] = []  # (step, weights, labels, future of that step's PNG paths)

    def _log_maps(self, trainer: L.Trainer, module: L.LightningModule) -> None:
        if trainer.global_step != self._last_step:  # once a step (the end may fall on a periodic step)
            self._last_step = trainer.global_step
            self.inspect(trainer, module)

    def look(self, trainer: L.Trainer, module: L.LightningModule, model: GPT) -> None:
        step = trainer.global_step
        idx, labels = probe_tokens(trainer.datamodule, self.probe, model.config.block_size)
        with evaluating(model):
            maps = [p["weights"] for p in model.dissect_attention(idx.to(module.device))]  # n_layer x (1, H, T, T)
        weights = torch.cat(maps).float().cpu().numpy()  # (n_layer, H, T, T)
        out = Path(trainer.default_root_dir) / "attention"
        out.mkdir(parents=True, exist_ok=True)
        np.savez_compressed(out / f"step{step:06d}.npz", weights=weights, labels=np.array(labels))
        if self._renderer is None:
            self._renderer = ThreadPoolExecutor(max_workers=1, thread_name_prefix="attention-maps")
        self._pending.append((step, weights, labels, self._renderer.submit(self._plotter, weights, labels, step, out)))

    def _log_ready(self, trainer: L.Trainer, wait: bool = False) -> None:
        """Send the drawn maps to W&B (all of them, once drawn, with ``wait``)."""
        waiting = []
        for step, weights, labels, future in self._pending:
            if not (wait or future.done()):
                waiting.append((step, weights, labels, future))
                continue
            paths = future.result()
            for lg in _wandb_loggers(trainer):
                lg.log_image(key="attention", images=[str(p) for p in paths],
                             caption=[f"layer {i}" for i in range(len(paths))], step=step)
                # the hoverable grid, built here on the training thread: Plotly reads pandas from sys.modules,
                # and on the renderer thread it could meet a pandas half-imported by this one
                grid = explorer.grid_figure(weights, labels, step)
                lg.log_metrics({"attention/interactive": wandb_media().Plotly(grid)}, step=step)
        self._pending = waiting

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if self._pending:
            self._log_ready(trainer)
        if self.every_n_steps and trainer.global_step % self.every_n_steps == 0:
            self._log_maps(trainer, module)

    def on_train_end(self, trainer, module):
        self._log_maps(trainer, module)
        self._log_ready(trainer, wait=True)
        if trainer.is_global_zero:  # every probe step in one page: <run>/attention/explorer.html, and in W&B
            root = Path(trainer.default_root_dir)
            page = explorer.write_run_explorer(root, f"attention, run {root.name}")
            for lg in _wandb_loggers(trainer) if page else []:
                lg.log_metrics({"attention/explorer": wandb_media().Html(str(page))}, step=trainer.global_step)

    def teardown(self, trainer, module, stage):
        """Whatever ended the run (the end, a divergence, a signal), the PNGs being drawn are finished."""
        if self._renderer is not None:
            self._renderer.shutdown(wait=True)
            self._renderer = None


class TextSamples(ModelInspector):
    """After every validation (``final_only``: only the one at max_steps), sample text from a prompt:
    printed, added to a W&B table, and appended to ``<run dir>/samples.jsonl`` as {"step", "text"}."""

    def __init__(self, **settings):
        take(self, TextSamplesSettings(**settings))  # prompt, max_new_tokens, temperature, top_k, seed, final_only
        self.rows: list[list] = []

    def on_validation_end(self, trainer, module):
        if trainer.sanity_checking or self.max_new_tokens <= 0:
            return
        if self.final_only and trainer.global_step < trainer.max_steps:
            return
        self.inspect(trainer, module)

    def look(self, trainer: L.Trainer, module: L.LightningModule, full: GPT) -> None:
        dm = trainer.datamodule
        ids = dm.encode(self.prompt) if dm.tokenizer is not None else [int(dm.val_ids[0])]
        idx = torch.tensor([ids or [0]], device=module.device)
        gen = torch.Generator(device=module.device).manual_seed(self.seed)
        try:
            with evaluating(full) as model:
                out = generate(model, idx, self.max_new_tokens, self.temperature, self.top_k, generator=gen)
        except FloatingPointError as err:  # a diverged model: say so, keep the run going to its summary
            console.print(f"[yellow]no text sample at step {trainer.global_step}:[/] {err}")
            return
        text = dm.decode(out[0].tolist())
        step = trainer.global_step
        console.print(Panel(text, title=f"sample at step {step}", expand=False))
        self.rows.append([step, text])
        with open(Path(trainer.default_root_dir) / "samples.jsonl", "a", encoding="utf-8") as f:
            f.write(json.dumps({"step": step, "text": text}) + "\n")
        for lg in _wandb_loggers(trainer):
            lg.log_text(key="samples", columns=["step", "text"], data=self.rows, step=step)


class HonestLoss(ModelInspector):
    """At every validation, the honest loss ``val/loss_honest`` (each scored position predicted from
    its prefix alone) and ``val/loss_probe`` (the teacher-forced loss at the same positions), on ``windows``
    fixed validation windows at ``positions`` positions spread over the window, first and last included.
    The two coincide for a causal model; a model that reads the future separates them (the per-window gaps are
    kept for the leak alarm, tinygpt.train.probes.leak_alarm).

    Costs ``positions`` forward passes of at most T tokens on ``windows`` windows: a few percent of a default
    validation (docs/benchmarks.md).
    """

    def __init__(self, **settings):
        take(self, HonestLossSettings(**settings))  # windows, positions
        self.gaps: torch.Tensor | None = None  # (windows,) autoregressive - teacher-forced, the last validation

    def on_validation_epoch_end(self, trainer, module):
        if not trainer.sanity_checking:
            self.inspect(trainer, module)

    def look(self, trainer: L.Trainer, module: L.LightningModule, model: GPT) -> None:
        x, y = (t.to(module.device) for t in trainer.datamodule.spread_windows(self.windows))
        positions = diagnostics.spread_positions(x.shape[1], self.positions)
        ar_windows, tf_windows = diagnostics.honest_and_teacher_forced(model, x, y, positions)  # 2 x (N, P)
        self.gaps = (ar_windows - tf_windows).mean(1)  # (N,): each window's gap, for the leak alarm
        ar, tf = ar_windows.mean().item(), tf_windows.mean().item()
        module.log_dict({"val/loss_honest": ar, "val/loss_probe": tf}, batch_size=len(x), rank_zero_only=True)


class StabilityMonitor(ModelInspector):
    """What precedes a divergence, every ``every_n_steps`` steps (to W&B and history/metrics.csv):

    - on ``windows`` fixed validation windows, per layer L: ``stab/max_logit/L`` (largest pre-softmax logit),
      ``stab/entropy/L`` and ``stab/entropy_min/L`` (normalised attention entropy, mean and min over rows),
      ``stab/q_rms/L``, ``stab/k_rms/L`` and ``stab/mask_margin/L`` (the largest future score minus the largest
      past score of any row: what an added finite fill must outweigh), ``stab/visible_floor/L`` (the lowest row's
      largest past score: what a replacing finite fill must stay below); ``stab/max_logit``, ``stab/entropy``,
      ``stab/entropy_min``, ``stab/mask_margin``, ``stab/visible_floor`` over all layers, ``stab/future_mass``
      (the attention weight on keys after the query, per layer and averaged), ``stab/future_mass_max`` (the most
      any one query row puts on its future keys) and, with ``future_leak=True``,
      ``stab/future_leak`` (the perturbation probe, a few percent of a default run at every 50 steps: off by
      default);
    - with ``softmax_gradients=True`` (the default), per layer, what the argument for 1/sqrt(d_k) is about
      (diagnostics.softmax_gradients): ``stab/jacobian_trace/L`` (1 uniform, 0 one-hot), ``stab/softmax_gain/L``,
      ``stab/grad_wq/L``, ``stab/grad_wk/L``, ``stab/raw_qk/L``, ``stab/scaled_qk/L``, ``stab/scores_inf/L``, in
      the precision training uses; ``stab/jacobian_trace`` and ``stab/softmax_gain`` averaged over layers;
    - with ``train_batch_qk=True``, at every step, on the step's own training batch before it is taken:
      ``stab/batch_raw_qk`` and ``stab/batch_scaled_qk``, the largest |q.k| of any layer before and after the scale,
      in float32 (what a float16 forward of that batch must hold below 65,504; off by default), and
      ``stab/batch_raw_qk_pos``, ``stab/batch_scaled_qk_pos``, the largest signed value (only +inf makes a NaN);
    - ``train/grad_norm``: the global L2 norm of the gradients before clipping;
    - ``train/loss_spikes``: how many steps so far had a training loss above ``spike_factor`` x the mean of
      the previous ``spike_window`` steps (counted every step).

    Each value reaches the loggers once, at the batch it was measured on (``log_at``).
    """

    def __init__(self, **settings):
        take(self, StabilityMonitorSettings(**settings))  # every_n_steps, windows, spike_factor, spike_window, ...
        self.spikes, self.max_grad_norm = 0, 0.0
        self.future_leak, self.leak_seconds = bool(self.future_leak), 0.0
        self._recent: deque[float] = deque(maxlen=self.spike_window)
        self._at: int | None = None  # the step the probe logs at, when not the batch just taken (at_start: 0)

    def _due(self, trainer) -> bool:
        return trainer.global_step % self.every_n_steps == 0

    def state_dict(self) -> dict:
        """What the run has counted so far, kept in its checkpoints: a resumed run's summary counts every step."""
        return {"spikes": self.spikes, "max_grad_norm": self.max_grad_norm, "leak_seconds": self.leak_seconds,
                "recent": list(self._recent)}

    def load_state_dict(self, state: dict) -> None:
        self.spikes = int(state.get("spikes", 0))
        self.max_grad_norm = float(state.get("max_grad_norm", 0.0))
        self.leak_seconds = float(state.get("leak_seconds", 0.0))
        self._recent.extend(state.get("recent", []))

    def on_before_optimizer_step(self, trainer, module, optimizer):  # Lightning clips after this hook
        if not self._due(trainer):
            return
        total = grad_norm(module, norm_type=2).get("grad_2.0_norm_total")  # None before any gradient
        if total is not None:
            norm = float(total)
            self.max_grad_norm = max(self.max_grad_norm, norm) if math.isfinite(norm) else float("inf")
            log_at(trainer, {"train/grad_norm": norm}, trainer.global_step)  # this batch: no step taken yet

    def on_train_start(self, trainer, module):
        """The probe at init (``at_start``), before the first update: the model the argument for 1/sqrt(d_k)
        describes. Logged at step 0, beside the first batch's loss, which is also the initial model's."""
        if self.at_start and trainer.global_step == 0:
            self._at = 0
            try:
                self.inspect(trainer, module)
            finally:
                self._at = None

    def on_train_batch_start(self, trainer, module, batch, batch_idx):
        """With ``train_batch_qk``, every step: the largest |q.k| on this step's own training batch, before the step
        and in float32 (diagnostics.batch_qk), logged at the batch's index: what a float16 forward of it must hold."""
        if self.train_batch_qk:
            raw, scaled, raw_pos, scaled_pos = diagnostics.batch_qk(module.model, batch[0])
            log_at(trainer, {"stab/batch_raw_qk": raw, "stab/batch_scaled_qk": scaled, "stab/batch_raw_qk_pos": raw_pos,
                             "stab/batch_scaled_qk_pos": scaled_pos}, trainer.global_step)

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        loss = outputs["loss"].detach().item()
        full = len(self._recent) == self.spike_window
        if full and loss > self.spike_factor * (sum(self._recent) / self.spike_window):
            self.spikes += 1
        if math.isfinite(loss):
            self._recent.append(loss)
        if self._due(trainer):
            self.inspect(trainer, module)

    def look(self, trainer: L.Trainer, module: L.LightningModule, model: GPT) -> None:
        x, y = (t.to(module.device) for t in trainer.datamodule.spread_windows(self.windows))
        mech, kept = None, []
        if self.softmax_gradients:  # the mechanism 1/sqrt(d_k) is argued from, in the precision training uses
            mech = diagnostics.softmax_gradients(model, x, y,
                                                 autocast=trainer.precision_plugin.forward_context,
                                                 layers_out=kept if full_precision(trainer) else None)
        if len(kept) == len(model.blocks):  # its forward's attention, in full precision: no forward of their own
            stats = diagnostics.stats_of_layers(kept, model.config.attn.causal)
        else:
            stats = diagnostics.attention_stats(model, x)
        metrics = {"train/loss_spikes": float(self.spikes), "stab/max_logit": stats["attn_max_logit"],
                   "stab/entropy": stats["attn_entropy"], "stab/entropy_min": stats["attn_entropy_min"],
                   "stab/mask_margin": stats["attn_mask_margin"], "stab/future_mass": stats["attn_future_mass"],
                   "stab/future_mass_max": stats["attn_future_mass_max"],
                   "stab/visible_floor": stats["attn_visible_floor"]}
        if self.future_leak:  # the perturbation probe at every stability probe too (the leak alarm runs it at every
            t0 = time.perf_counter()  # validation anyway): a leak that opens between validations is dated
            metrics["stab/future_leak"] = diagnostics.future_leak(model, x)
            self.leak_seconds += time.perf_counter() - t0  # its cost (summary.json)
        for name in ("max_logit", "entropy", "entropy_min", "mask_margin", "visible_floor", "future_mass",
                     "future_mass_max", "q_rms", "k_rms"):
            for layer, v in enumerate(stats[f"attn_{name}_per_layer"]):
                metrics[f"stab/{name}/{layer}"] = v
        if mech is not None:
            for name, values in mech.items():
                for layer, v in enumerate(values):
                    metrics[f"stab/{name}/{layer}"] = v
            for name in ("softmax_gain", "jacobian_trace"):
                if mech[name]:
                    metrics[f"stab/{name}"] = sum(mech[name]) / len(mech[name])
        log_at(trainer, metrics, trainer.global_step - 1 if self._at is None else self._at)  # the batch's index



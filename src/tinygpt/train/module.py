"""The LightningModule: the loss, what gets logged, what a checkpoint carries (and ``load_trained``, the model a
checkpoint holds, back); the optimizer recipe is injected (tinygpt.train.optim)."""

from __future__ import annotations

from pathlib import Path

import lightning as L
import torch
from hydra.utils import instantiate
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from tokenizers import Tokenizer

from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.runtime import checkpoint, run_dirs
from tinygpt.runtime.errors import ConfigError, first_line
from tinygpt.runtime.old_runs import outdated, refusal
from tinygpt.train.optim import AdamWCosine, clip_grad_norm_cpu_
from tinygpt.train.probes.diagnostics import position_losses
from tinygpt.train.step_losses import StepLosses


def full_precision(trainer: L.Trainer) -> bool:
    """Whether the trainer computes in float32 or float64 throughout (no autocast): its forwards are then the same
    arithmetic as a plain model call's."""
    return str(trainer.precision) in ("32-true", "32", "64-true", "64")


class GPTModule(L.LightningModule):
    def __init__(self, model: dict, vocab_size: int, optim: AdamWCosine | None = None):
        """``model``: the model.* settings (``model.patch`` included); ``optim``: the optimizer recipe, built and
        checked from optim.* at set-up (its default settings when None)."""
        super().__init__()
        self.optim = optim if optim is not None else AdamWCosine()
        self.save_hyperparameters({"model": model, "vocab_size": vocab_size, "optim": self.optim.settings()})
        self.config = GPTConfig(vocab_size=vocab_size, **model)
        self.model = self.new_model()
        self._step_forward = None  # compile_model's compiled forward, for training and validation steps
        self.train_losses = StepLosses()  # detached, kept on device: no sync per step
        self.last_val_loss, self.last_val_step = float("nan"), -1
        self.val_position_losses: list[torch.Tensor] = []  # the last validation's, (b, T) float64 per batch

    def new_model(self) -> GPT:
        """A GPT of this module's config, patched as model.patch says."""
        return build_model(self.config)

    def forward(self, idx, targets=None):
        return self.model(idx, targets)

    def compile_model(self) -> None:
        """torch.compile the forward used by training and validation only: their shapes are fixed, while
        the diagnostics, attention maps and samples feed every length from 1 to block_size (each would be a
        recompile, and past torch's limit a warning). The compiled callable shares the model's parameters
        and is kept outside the module tree (a bound method, not a module), so checkpoints keep their plain keys."""
        self._step_forward = torch.compile(self.model).__call__

    def _step(self, x, y):
        return self._step_forward(x, y) if self._step_forward is not None else self.model(x, y)

    def training_step(self, batch, batch_idx):
        x, y = batch
        _, loss = self._step(x, y)
        recorded = loss.detach()
        if self.trainer.world_size > 1:  # each rank has its slice of the global batch: record the global mean
            recorded = self.trainer.strategy.reduce(recorded, reduce_op="mean")
        self.train_losses.append(recorded)
        if self._logging_step():  # the loggers take step metrics only every log_every_n_steps
            self.log("train/loss", recorded, prog_bar=True)
        return loss

    def _logging_step(self) -> bool:
        """Whether Lightning hands this step's metrics to the loggers: its own rule (the logger connector's
        ``should_update_logs``), every ``trainer.log_every_n_steps`` counted from the first step, or when training
        is stopping. Logging the loss on the other steps too only cost time (docs/benchmarks.md), and the
        loggers never saw those values. With ``log_every_n_steps=0`` nothing reaches
        the loggers, and every step is logged as before so that the progress bar still shows the loss."""
        n = self.trainer.log_every_n_steps
        return n == 0 or (self.trainer.global_step + 1) % n == 0 or self.trainer.should_stop

    def on_train_start(self):
        """Each rate at its schedule's value for the step about to train. A fresh run's already is; a resumed one's
        optimizer state holds the rate its checkpoint's schedule gave, which a raised trainer.max_steps (and with it
        optim.decay_steps) changes: without this the first resumed step trained at the old rate, the next ones at
        the new schedule's (the same expression as LambdaLR's, so an unchanged schedule keeps the same bits)."""
        for config in self.trainer.lr_scheduler_configs:
            schedule = config.scheduler
            if isinstance(schedule, torch.optim.lr_scheduler.LambdaLR):
                for group, base, factor in zip(schedule.optimizer.param_groups, schedule.base_lrs,
                                               schedule.lr_lambdas, strict=True):
                    group["lr"] = base * factor(schedule.last_epoch)

    def on_validation_epoch_start(self):
        self.val_position_losses = []

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits, loss = self._step(x, y)
        self.log("val/loss", loss, prog_bar=True, batch_size=x.shape[0], sync_dist=True)
        self.val_position_losses.append(position_losses(logits.detach(), y))  # (b, T): for the end of the run

    def window_losses_of_validation_at(self, step: int) -> torch.Tensor | None:
        """Every validation window's loss at every position, (N, T) float64 on the CPU, from the validation that ran
        at ``step``, where that is what diagnostics.window_losses would compute on the model now: it ran at this
        very step, on one process (which sees every window, in order), through the eager model in full precision
        (the same kernels on the same batches: the same bits, tests/train/test_module.py). Else None."""
        if (self.last_val_step != step or self.trainer.world_size != 1 or self._step_forward is not None
                or not full_precision(self.trainer) or not self.val_position_losses):
            return None
        return torch.cat(self.val_position_losses).cpu()  # (N, T)

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.last_val_loss = self.trainer.callback_metrics["val/loss"].item()
            self.last_val_step = self.trainer.global_step

    def on_save_checkpoint(self, checkpoint):
        """Every checkpoint carries its tokenizer, so sampling needs nothing else, the per-step training
        losses, so a resumed run's summary covers the whole run, and the process count it was trained with."""
        dm = getattr(self.trainer, "datamodule", None)
        if dm is not None and dm.tokenizer is not None:
            checkpoint["tokenizer"] = dm.tokenizer.to_str()
        if len(self.train_losses):
            checkpoint["train_losses"] = self.train_losses.all().float().cpu()  # (steps,)
        checkpoint["world_size"] = self.trainer.world_size  # a resume on another count changes the global batch

    def on_load_checkpoint(self, checkpoint):
        losses = checkpoint.get("train_losses")
        if losses is not None:
            self.train_losses = StepLosses(losses.to(self.device))
        moved_checkpoint_dirs(checkpoint, self.trainer)

    def configure_optimizers(self):
        # Lightning refuses to clip the gradients of a fused optimizer under mixed precision (it unscales
        # internally), so there the foreach implementation is used instead.
        return self.optim(self.model, fused=not self._mixed_precision_with_clipping())

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        """Lightning's clipping by norm, with one saving on the CPU: torch multiplies every gradient by
        min(1, max_norm / norm) on every step so as not to read the norm back from a GPU; on the CPU reading it
        is free, and the multiplies (one per parameter tensor) are skipped when the factor is 1, where they would
        change nothing. Same norm, same factor, bit-identical gradients."""
        if not self._plain_cpu_clipping(gradient_clip_val, gradient_clip_algorithm):
            return super().configure_gradient_clipping(optimizer, gradient_clip_val, gradient_clip_algorithm)
        clip_grad_norm_cpu_([p for group in optimizer.param_groups for p in group["params"]], gradient_clip_val)

    def _plain_cpu_clipping(self, clip_val, algorithm) -> bool:
        """Clipping by norm of full fp32 gradients on the CPU, one process or DDP (each rank holds every full
        gradient after the all-reduce); anything else (FSDP's shards, mixed precision, a GPU) is Lightning's."""
        trainer = self.trainer
        return (bool(clip_val) and algorithm in (None, "norm") and self.device.type == "cpu"
                and str(trainer.precision) == "32-true"
                and type(trainer.strategy) in (SingleDeviceStrategy, DDPStrategy))

    def _mixed_precision_with_clipping(self) -> bool:
        trainer = self._trainer  # None outside a Trainer
        return bool(trainer and "mixed" in str(trainer.precision) and trainer.gradient_clip_val)

    def tail_train_loss(self, fraction: float = 0.1) -> float:
        """Mean teacher-forced training loss over the last ``fraction`` of this run's steps."""
        if not len(self.train_losses):
            return float("nan")
        return self.train_losses.tail_mean(max(1, int(len(self.train_losses) * fraction)))


def build_model(config: GPTConfig) -> GPT:
    """The GPT of ``config``, then each of ``config.patch`` (Hydra nodes of callables GPT -> GPT) applied in order."""
    model = GPT(config)
    for node in config.patch:
        model = instantiate(node, _recursive_=False)(model)
    return model


def model_settings(hp: dict, where: str) -> GPTConfig:
    """A checkpoint's model settings, each refused in one sentence where it cannot be trusted or read: an old name (a
    run written before: scripts/migrate_run.py rewrites it), a setting this version lacks, or a patch whose class is not
    tinygpt's (building it would run whatever the file names, which weights_only loading exists to prevent)."""
    old = outdated(config=hp)
    if old:
        raise ConfigError(refusal(where, old, checkpoint.run_dir_of(Path(where))))
    unknown = sorted(k for k in hp if k not in ("model", "vocab_size", "optim") and hp[k])
    if unknown:
        raise ConfigError(f"{where} was written with {unknown[0]}, a setting this version of tinygpt does not have; "
                          "load it with the version that wrote it.")
    for node in (hp.get("model") or {}).get("patch") or []:
        target = str(node.get("_target_", "")) if isinstance(node, dict) else ""
        if not target.startswith("tinygpt.") or any(str(k).startswith("_") and k != "_target_" for k in node):
            raise ConfigError(f"{where} names a model.patch {target or node!r} that is not a class of tinygpt's; "
                              "a checkpoint's patch is built only from tinygpt's own classes.")
    return GPTConfig(vocab_size=hp["vocab_size"], **hp["model"])


def load_trained(path: str | Path, device: str = "cpu") -> tuple[GPT, Tokenizer | None, int]:
    """The GPT a train.py checkpoint holds (a .ckpt file, or a run dir: its last checkpoint), as it was trained
    (its model.patch applied), in eval mode on ``device``; its tokenizer (None for token-id data);
    and the global step it was saved at. Loaded with ``weights_only=True`` (an untrusted file cannot run code)."""
    file = run_dirs.checkpoint_file(path)
    ckpt = checkpoint.load(file, map_location=device)
    model = build_model(model_settings(ckpt["hyper_parameters"], str(file)))
    try:
        model.load_state_dict(checkpoint.model_weights(ckpt["state_dict"]))
    except RuntimeError as err:  # missing or misshapen tensors: one line, as export_hf says it (not a traceback)
        raise ConfigError(f"{file} holds weights that do not fit its own model settings ({first_line(err)}).") \
            from None
    tok = Tokenizer.from_str(ckpt["tokenizer"]) if "tokenizer" in ckpt else None
    return model.to(device).eval(), tok, int(ckpt.get("global_step", 0))


def moved_checkpoint_dirs(checkpoint: dict, trainer) -> None:
    """A run dir copied or moved elsewhere resumes as if in place. The checkpoint it resumes is in its own
    checkpoints dir, but the ModelCheckpoint states in ``checkpoint`` name the old one, so Lightning would warn that
    the dirpath changed, forget the best and last files and save a stray last-v1.ckpt beside last.ckpt. Their paths
    are rewritten to the new dir first (Lightning calls this hook before it restores the callbacks' states)."""
    from lightning.pytorch.callbacks import ModelCheckpoint

    here = next((str(cb.dirpath) for cb in trainer.callbacks if isinstance(cb, ModelCheckpoint)), None)
    resumed = trainer.ckpt_path
    if here is None or resumed is None or not Path(resumed).resolve().is_relative_to(Path(here).resolve()):
        return  # no checkpoints of ours, or another run's checkpoint resumed into a new dir (its files stay there)
    for key, state in (checkpoint.get("callbacks") or {}).items():
        old = str(state.get("dirpath") or "") if str(key).startswith("ModelCheckpoint") else ""
        if not old or old == here:
            continue

        def moved(path, old=old, here=here):
            return here + path[len(old):] if isinstance(path, str) and path.startswith(old) else path

        state["dirpath"] = here
        for field in ("best_model_path", "kth_best_model_path", "last_model_path"):
            state[field] = moved(state.get(field))
        if isinstance(state.get("best_k_models"), dict):
            state["best_k_models"] = {moved(k): v for k, v in state["best_k_models"].items()}

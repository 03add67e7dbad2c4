"""The LightningModule: loss, AdamW groups, warmup + cosine schedule, what gets logged."""

from __future__ import annotations

import math

import lightning as L
import torch
from lightning.pytorch.strategies import DDPStrategy, SingleDeviceStrategy
from torch import nn

from tinygpt.model.gpt import GPT, GPTConfig


def lr_at(step: int, *, lr: float, min_lr: float, warmup_steps: int, decay_steps: int) -> float:
    """Linear warmup from 0 to lr over warmup_steps, then cosine to min_lr at decay_steps, then flat."""
    if step < warmup_steps:
        return lr * (step + 1) / (warmup_steps + 1)
    if step >= decay_steps:
        return min_lr
    progress = (step - warmup_steps) / max(1, decay_steps - warmup_steps)
    return min_lr + 0.5 * (1.0 + math.cos(math.pi * progress)) * (lr - min_lr)


def param_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Decay 2-D weights (matmuls, embeddings); not biases or LayerNorm gains. Tied weights once."""
    decay, no_decay = [], []
    for p in model.parameters():  # yields a shared (tied) tensor once
        if p.requires_grad:
            (decay if p.dim() >= 2 else no_decay).append(p)
    return [
        {"params": decay, "weight_decay": weight_decay},
        {"params": no_decay, "weight_decay": 0.0},
    ]


def check_optim(lr, min_lr, warmup_steps, decay_steps, betas=(0.9, 0.99), weight_decay=0.1, fused_adam=True) -> None:
    """The optimizer and schedule settings (optim.*): one sentence naming the first bad value."""
    def number(x) -> bool:
        return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)

    def integer(x) -> bool:
        return isinstance(x, int) and not isinstance(x, bool)

    for key, value in (("lr", lr), ("min_lr", min_lr), ("weight_decay", weight_decay)):
        if not number(value):
            raise ValueError(f"optim.{key}={value!r} must be a number.")
    for key, value in (("warmup_steps", warmup_steps), ("decay_steps", decay_steps)):
        if not integer(value):
            raise ValueError(f"optim.{key}={value!r} must be an integer number of steps.")
    if not (lr > 0 and 0 <= min_lr <= lr):
        raise ValueError(f"optim.lr={lr} must be > 0 and optim.min_lr={min_lr} in [0, lr].")
    if warmup_steps < 0 or decay_steps < 1:
        raise ValueError(f"optim.warmup_steps={warmup_steps} must be >= 0 and optim.decay_steps={decay_steps} >= 1.")
    if weight_decay < 0:
        raise ValueError(f"optim.weight_decay={weight_decay} must be >= 0.")
    if not (len(betas) == 2 and all(number(b) and 0 <= b < 1 for b in betas)):
        raise ValueError(f"optim.betas={list(betas)!r} must be two numbers in [0, 1).")
    if not isinstance(fused_adam, bool):
        raise ValueError(f"optim.fused_adam={fused_adam!r} must be true or false.")


def clip_grad_norm_cpu_(parameters, max_norm: float) -> torch.Tensor:
    """torch.nn.utils.clip_grad_norm_ for gradients in CPU memory: the same norm and the same factor
    min(1, max_norm / (norm + 1e-6)), but the gradients are multiplied only when the factor is below 1 (torch
    multiplies every gradient by it on every step, so as not to read the norm back from a GPU; on the CPU
    reading it costs nothing). Bit-identical gradients; returns the total norm."""
    params = [p for p in parameters if p.grad is not None]
    total = torch.nn.utils.get_total_norm([p.grad for p in params])
    if not bool(float(max_norm) / (total + 1e-6) >= 1.0):  # a NaN norm scales too, as torch does
        torch.nn.utils.clip_grads_with_norm_(params, max_norm, total)
    return total


class GPTModule(L.LightningModule):
    def __init__(
        self,
        model: dict,
        vocab_size: int,
        lr: float = 1e-3,
        min_lr: float = 1e-4,
        warmup_steps: int = 100,
        decay_steps: int = 2000,
        betas: tuple[float, float] = (0.9, 0.99),
        weight_decay: float = 0.1,
        fused_adam: bool = True,
    ):
        super().__init__()
        check_optim(lr, min_lr, warmup_steps, decay_steps, betas, weight_decay, fused_adam)
        self.save_hyperparameters()
        self.config = GPTConfig(vocab_size=vocab_size, **model)
        self.model = GPT(self.config)
        self.train_losses: list[torch.Tensor] = []  # detached, kept on device: no sync per step
        self.last_val_loss, self.last_val_step = float("nan"), -1

    def forward(self, idx, targets=None):
        return self.model(idx, targets)

    def compile_model(self) -> None:
        """torch.compile the forward used by training and validation only: their shapes are fixed, while
        the diagnostics, attention maps and samples feed every length from 1 to block_size (each would be a
        recompile, and past torch's limit a warning). The compiled callable shares the model's parameters
        and is kept outside the module tree, so checkpoints keep their plain keys."""
        self.__dict__["_step_forward"] = torch.compile(self.model)

    def _step(self, x, y):
        return self.__dict__.get("_step_forward", self.model)(x, y)

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
        is stopping. Logging the loss on the other steps too only cost time: each ``self.log`` takes ~0.35 ms
        here, ~1% of a step, and the loggers never saw those values. With ``log_every_n_steps=0`` nothing reaches
        the loggers, and every step is logged as before so that the progress bar still shows the loss."""
        n = self.trainer.log_every_n_steps
        return n == 0 or (self.trainer.global_step + 1) % n == 0 or self.trainer.should_stop

    def validation_step(self, batch, batch_idx):
        x, y = batch
        _, loss = self._step(x, y)
        self.log("val/loss", loss, prog_bar=True, batch_size=x.shape[0], sync_dist=True)

    def on_validation_epoch_end(self):
        if not self.trainer.sanity_checking:
            self.last_val_loss = self.trainer.callback_metrics["val/loss"].item()
            self.last_val_step = self.trainer.global_step

    def on_save_checkpoint(self, checkpoint):
        """Every checkpoint carries its tokenizer, so sampling needs nothing else, and the per-step training
        losses, so a resumed run's summary covers the whole run."""
        dm = getattr(self.trainer, "datamodule", None)
        if dm is not None and dm.tokenizer is not None:
            checkpoint["tokenizer"] = dm.tokenizer.to_str()
        if self.train_losses:
            checkpoint["train_losses"] = torch.stack(self.train_losses).float().cpu()  # (steps,)

    def on_load_checkpoint(self, checkpoint):
        losses = checkpoint.get("train_losses")
        if losses is not None:
            self.train_losses = list(losses.to(self.device).unbind(0))

    def configure_optimizers(self):
        hp = self.hparams
        groups = param_groups(self.model, hp.weight_decay)
        # fused AdamW (one kernel for all parameters) runs on CPU and GPU; ~10% faster per step here. Lightning
        # refuses to clip gradients of a fused optimizer under mixed precision (it unscales internally), so
        # there the foreach implementation is used instead.
        fused = hp.fused_adam and not self._mixed_precision_with_clipping()
        opt = torch.optim.AdamW(groups, lr=hp.lr, betas=tuple(hp.betas), fused=fused or None)
        schedule = torch.optim.lr_scheduler.LambdaLR(
            opt,
            lambda step: lr_at(
                step, lr=hp.lr, min_lr=hp.min_lr, warmup_steps=hp.warmup_steps, decay_steps=hp.decay_steps
            )
            / hp.lr,
        )
        return {"optimizer": opt, "lr_scheduler": {"scheduler": schedule, "interval": "step"}}

    def configure_gradient_clipping(self, optimizer, gradient_clip_val=None, gradient_clip_algorithm=None):
        """Lightning's clipping by norm, with one saving on the CPU: torch multiplies every gradient by
        min(1, max_norm / norm) on every step so as not to read the norm back from a GPU; on the CPU reading it
        is free, and the multiplies (one per parameter tensor, ~0.4 ms a step here) are skipped when the factor
        is 1, where they would change nothing. Same norm, same factor, bit-identical gradients."""
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
        if not self.train_losses:
            return float("nan")
        n = max(1, int(len(self.train_losses) * fraction))
        return torch.stack(self.train_losses[-n:]).float().mean().item()

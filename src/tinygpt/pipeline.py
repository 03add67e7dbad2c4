"""One training run: validate the config, build everything from it, fit, write summary.json."""

from __future__ import annotations

import json
import math
import netrc
import os
import time
import warnings
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.callbacks import LearningRateMonitor, ThroughputMonitor
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from tinygpt import diagnostics
from tinygpt.callbacks import DivergenceGuard, StabilityMonitor, StepTimer
from tinygpt.model import GPTConfig
from tinygpt.module import GPTModule

console = Console()
LOGGERS = ("wandb", "csv")


# ----------------------------------------------------------------------------- validation


def validate_config(cfg: DictConfig) -> None:
    """Fail before any work starts, with one sentence naming the bad value."""
    GPTConfig(vocab_size=1, **OmegaConf.to_container(cfg.model, resolve=True))
    steps = cfg.trainer.get("max_steps", -1)
    if not isinstance(steps, int) or steps < 1:
        raise ValueError(f"trainer.max_steps={steps!r} must be a positive integer (training is step-based).")
    if cfg.data.block_size != cfg.model.block_size:
        raise ValueError(
            f"data.block_size={cfg.data.block_size} must equal model.block_size={cfg.model.block_size}."
        )
    for name in (cfg.get("logger") or {}):
        if name not in LOGGERS:
            raise ValueError(f"logger {name!r} is not one of {', '.join(LOGGERS)} (or logger=none).")
    if cfg.trainer.get("accelerator") in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ValueError(
            f"trainer.accelerator={cfg.trainer.accelerator!r} but no CUDA GPU is visible; "
            "use trainer=cpu or trainer.accelerator=auto."
        )
    if cfg.get("ckpt_path") and not Path(cfg.ckpt_path).is_file():
        raise ValueError(f"ckpt_path={cfg.ckpt_path!r} is not a file.")
    o = cfg.optim
    if not (o.lr > 0 and 0 <= o.min_lr <= o.lr):
        raise ValueError(f"optim.lr={o.lr} must be > 0 and optim.min_lr={o.min_lr} in [0, lr].")
    if o.warmup_steps < 0 or o.decay_steps < 1:
        raise ValueError(
            f"optim.warmup_steps={o.warmup_steps} must be >= 0 and optim.decay_steps={o.decay_steps} >= 1."
        )
    windows = cfg.get("diagnostics", {}).get("windows", 32)
    if not isinstance(windows, int) or windows < 1:
        raise ValueError(f"diagnostics.windows={windows!r} must be a positive integer (validation windows to probe).")
    if not isinstance(cfg.seed, int) or not 0 <= cfg.seed < 2**32:
        raise ValueError(f"seed={cfg.seed!r} must be an integer in [0, 2**32).")


# ----------------------------------------------------------------------------- W&B


def wandb_has_credentials() -> bool:
    """True when an API key is in the environment or in ~/.netrc for the W&B host."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai").split("://")[-1].split("/")[0]
    try:
        return netrc.netrc().authenticators(host) is not None
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False


def wandb_mode(requested: str | None) -> str:
    """The logger's mode: as asked (config or WANDB_MODE), else online with credentials, else offline."""
    if requested:
        return requested
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    return "online" if wandb_has_credentials() else "offline"


def run_identity() -> tuple[Path, str | None, str | None]:
    """(output dir, W&B group, W&B run name) from Hydra: one group per sweep, one run per job."""
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    if hc.mode == RunMode.MULTIRUN:
        group = "sweep-" + "-".join(Path(hc.sweep.dir).parts[-2:])
        name = hc.job.override_dirname or f"job{hc.job.num}"
        return out, group, name
    return out, None, None


def build_loggers(cfg: DictConfig, group: str | None, name: str | None) -> list:
    loggers = []
    for key, lcfg in (cfg.get("logger") or {}).items():
        if key == "wandb":
            mode = wandb_mode(lcfg.get("mode"))
            loggers.append(
                instantiate(lcfg, mode=mode, group=lcfg.get("group") or group, name=lcfg.get("name") or name)
            )
        else:
            loggers.append(instantiate(lcfg))
    return loggers


def wandb_info() -> dict | None:
    """Where this job's W&B run lives: id, group, name, mode and the local run dir."""
    import wandb

    run = wandb.run
    if run is None:
        return None
    return {"id": run.id, "group": run.group or None, "name": run.name, "mode": run.settings.mode,
            "dir": str(Path(run.dir).parent)}


def finish_wandb(loggers: list) -> None:
    """Close this job's W&B run (so the next job of a sweep gets its own) and say how to sync."""
    import wandb

    for lg in loggers:
        if isinstance(lg, WandbLogger) and wandb.run is not None:
            run_dir = Path(wandb.run.dir).parent
            offline = wandb.run.settings.mode in ("offline", "dryrun")
            wandb.finish()
            if offline:
                console.print(
                    f"W&B ran offline (no credentials found). To upload: [bold]wandb sync {run_dir}[/]"
                )


# ----------------------------------------------------------------------------- summary


def write_summary(out_dir: Path, values: dict[str, Any]) -> Path:
    """summary.json in the run's output dir; non-finite floats become null."""
    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v

    path = out_dir / "summary.json"
    path.write_text(json.dumps({k: clean(v) for k, v in values.items()}, indent=2, default=str))
    return path


# ----------------------------------------------------------------------------- train


def build_datamodule(cfg: DictConfig):
    """Instantiate, then read/tokenize/cache the corpus (or reuse the cache) and memory-map it."""
    dm = instantiate(cfg.data)
    t0 = time.perf_counter()
    dm.prepare_data()
    dm.setup("fit")
    console.print(
        f"data: {dm.source}, vocab {dm.vocab_size}, {len(dm.train_ids):,} train / {len(dm.val_ids):,} val tokens "
        f"({time.perf_counter() - t0:.1f}s, cache {dm.cache_path})"
    )
    return dm


def build_module(cfg: DictConfig, vocab_size: int) -> GPTModule:
    module = GPTModule(
        model=OmegaConf.to_container(cfg.model, resolve=True),
        vocab_size=vocab_size,
        **OmegaConf.to_container(cfg.optim, resolve=True),
    )
    if cfg.get("compile"):
        module.model.compile()
    console.print(f"model: {module.model.num_params() / 1e6:.2f}M parameters, attention {module.config.attn}")
    return module


def build_callbacks(cfg: DictConfig, with_logger: bool) -> tuple[list, StepTimer]:
    """The configured callbacks, behind a StepTimer (first, so it times the step alone)."""
    timer = StepTimer()
    callbacks = [timer] + [instantiate(c) for c in (cfg.get("callbacks") or {}).values()]
    if not with_logger:  # these only feed a logger, and LearningRateMonitor refuses to run without one
        callbacks = [c for c in callbacks if not isinstance(c, (LearningRateMonitor, ThroughputMonitor))]
    return callbacks, timer


def probe_diagnostics(module: GPTModule, dm, n_windows: int) -> dict:
    """diagnostics.run_all on n validation windows spread evenly over the split."""
    x, y = (t.to(module.device) for t in dm.probe_windows(n_windows))
    return diagnostics.run_all(module.model, x, y)


def log_diagnostics(loggers: list, diag: dict, step: int) -> None:
    """Scalars as diag/<key>; the loss-by-position profiles as a W&B table (position, teacher-forced,
    autoregressive) for a line plot."""
    for lg in loggers:
        lg.log_metrics({f"diag/{k}": v for k, v in diag.items() if isinstance(v, float)}, step=step)
        if isinstance(lg, WandbLogger) and diag.get("loss_by_position"):
            rows = [[t, tf, ar] for t, (tf, ar) in enumerate(
                zip(diag["loss_by_position"], diag["loss_by_position_autoregressive"], strict=True))]
            lg.log_table(key="diag/loss_by_position", columns=["position", "teacher_forced", "autoregressive"],
                         data=rows, step=step)


def save_last_checkpoint(trainer) -> None:
    """ModelCheckpoint writes last.ckpt at validations only; a run that ends between two of them gets its
    final state written there too, so sampling and resuming use the newest model."""
    cb = trainer.checkpoint_callback
    if cb is not None and cb.save_last and cb.dirpath:
        trainer.save_checkpoint(Path(cb.dirpath) / f"{cb.CHECKPOINT_NAME_LAST}{cb.FILE_EXTENSION}")


def train(cfg: DictConfig) -> dict[str, Any]:
    """One run: validate, build, fit, final validation and diagnostics, summary.json."""
    # Training batches are a pure function of the global step (data.RandomWindows), so a run resumed mid-epoch
    # continues exactly (tested); Lightning cannot know that and warns otherwise.
    warnings.filterwarnings("ignore", message="You're resuming from a checkpoint that ended before the epoch ended")
    validate_config(cfg)
    out_dir, group, name = run_identity()
    out_dir.mkdir(parents=True, exist_ok=True)
    resolved = OmegaConf.to_container(cfg, resolve=True)
    (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(resolved))
    L.seed_everything(cfg.seed, workers=True, verbose=False)

    dm = build_datamodule(cfg)
    module = build_module(cfg, dm.vocab_size)
    loggers = build_loggers(cfg, group, name)
    callbacks, timer = build_callbacks(cfg, with_logger=bool(loggers))
    for lg in loggers:
        lg.log_hyperparams(resolved)
    trainer = instantiate(cfg.trainer, callbacks=callbacks, logger=loggers or False)
    try:
        trainer.fit(module, datamodule=dm, ckpt_path=cfg.get("ckpt_path"))
        if module.last_val_step != trainer.global_step:  # the run ended between validations
            trainer.validate(module, datamodule=dm, verbose=False)
            save_last_checkpoint(trainer)
        n_probe = cfg.get("diagnostics", {}).get("windows", 32)
        diag = probe_diagnostics(module, dm, n_probe) if trainer.is_global_zero else {}
        log_diagnostics(loggers, diag, trainer.global_step)
        guard = next((c for c in callbacks if isinstance(c, DivergenceGuard)), None)
        stability = next((c for c in callbacks if isinstance(c, StabilityMonitor)), None)
        summary = {
            "train_loss": module.tail_train_loss(0.1),
            "val_loss": module.last_val_loss,
            "val_loss_autoregressive": diag.get("val_loss_autoregressive"),
            "val_loss_probe": diag.get("val_loss_probe"),  # teacher-forced, on the same probe windows
            "future_leak": diag.get("future_leak"),
            "attn_entropy": diag.get("attn_entropy"),
            "attn_max_logit": diag.get("attn_max_logit"),
            "attn_future_mass": diag.get("attn_future_mass"),
            "loss_by_position": diag.get("loss_by_position"),  # teacher-forced, one value per position
            "diverged": bool(guard and guard.diverged),
            "loss_spikes": stability.spikes if stability else None,
            "grad_norm_max": stability.max_grad_norm if stability else None,  # before clipping, sampled
            "steps": trainer.global_step,
            "tokens_per_sec": timer.tokens_per_sec,
            "train_seconds": timer.seconds,
            "n_params": module.model.num_params(),
            "vocab_size": dm.vocab_size,
            "config": resolved,
            "wandb": wandb_info() if any(isinstance(lg, WandbLogger) for lg in loggers) else None,
            "diagnostics": diag,  # the above on the probe windows, plus per-layer values
        }
        if trainer.is_global_zero:
            path = write_summary(out_dir, summary)
            console.print(
                f"[bold green]done[/]: {summary['steps']} steps, train loss {summary['train_loss']:.4f}, "
                f"val loss {summary['val_loss']:.4f} (autoregressive {summary['val_loss_autoregressive']:.4f}, "
                f"future leak {summary['future_leak']:.3g}), {summary['tokens_per_sec'] or 0:,.0f} tokens/s -> {path}"
            )
        return summary
    finally:
        finish_wandb(loggers)

"""One training run: check everything, build everything from the config, fit, write summary.json.

Phases: ``setup`` checks every value and builds the objects (no data read, nothing written; a mistake is a
ConfigError), ``prepare`` reads or builds the data cache and checks a resume against it, then the run
writes its config, trains, validates at the end, runs the diagnostics and writes summary.json.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import re
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.callbacks import LearningRateMonitor, ThroughputMonitor
from lightning.pytorch.loggers import WandbLogger
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf
from rich.console import Console

from tinygpt.runtime import checkpoint, distributed, run_dirs, tracking
from tinygpt.train import diagnostics
from tinygpt.train.callbacks import Diverged, DivergenceGuard, StabilityMonitor, StepTimer
from tinygpt.runtime.errors import ConfigError, as_config_errors, cause_of, first_line
from tinygpt.runtime.interrupts import GracefulStop, RunInterrupted
from tinygpt.model.gpt import GPTConfig
from tinygpt.train.module import GPTModule, check_optim

console = Console()
LOGGERS = ("wandb", "csv")

# Library messages that say nothing about this run, silenced by exact text; every other warning stays visible.
KNOWN_HARMLESS = (
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # torch's pytree deprecation, inside Lightning
    r"Your `IterableDataset` has `__len__` defined",  # num_workers=0 here: __len__ is exact (data.RandomWindows)
    # batches are a pure function of the global step (data.RandomWindows), so a mid-epoch resume is exact (tested)
    r"You're resuming from a checkpoint that ended before the epoch ended",
)


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "💡 Tip" not in record.getMessage()  # Lightning's promotional tips


def quiet_libraries() -> None:
    for message in KNOWN_HARMLESS:
        warnings.filterwarnings("ignore", message=message)
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch"):
        logging.getLogger(name).addFilter(_DropTips())


# ----------------------------------------------------------------------------- setup: every check, no work


def validate_config(cfg: DictConfig) -> None:
    """What spans groups or belongs to no object: each other fact is checked by the object that owns it."""
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        key = missing[0]
        hint = " (one or more UTF-8 text files)" if key == "data.path" else ""
        raise ConfigError(f"{key} is required but not set; pass {key}=<value>{hint}.")
    steps = cfg.trainer.get("max_steps", -1)
    if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
        raise ConfigError(f"trainer.max_steps={steps!r} must be a positive integer (training is step-based).")
    if cfg.data.block_size != cfg.model.block_size:
        raise ConfigError(
            f"data.block_size={cfg.data.block_size} must equal model.block_size={cfg.model.block_size}."
        )
    for name in (cfg.get("logger") or {}):
        if name not in LOGGERS:
            raise ConfigError(f"logger {name!r} is not one of {', '.join(LOGGERS)} (or logger=none).")
    if cfg.trainer.get("accelerator") in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={cfg.trainer.accelerator!r} but no CUDA GPU is visible; "
            "use trainer=cpu or trainer.accelerator=auto."
        )
    windows = cfg.get("diagnostics", {}).get("windows", 32)
    if not isinstance(windows, int) or isinstance(windows, bool) or windows < 1:
        raise ConfigError(f"diagnostics.windows={windows!r} must be a positive integer (validation windows to probe).")
    if not isinstance(cfg.seed, int) or isinstance(cfg.seed, bool) or not 0 <= cfg.seed < 2**32:
        raise ConfigError(f"seed={cfg.seed!r} must be an integer in [0, 2**32).")


@dataclass
class Run:
    cfg: DictConfig
    out_dir: Path
    resolved: dict
    dm: Any
    callbacks: list
    timer: StepTimer
    stop: GracefulStop
    loggers: list
    trainer: L.Trainer
    ckpt_path: Path | None
    ckpt: dict | None

    def callback(self, kind: type):
        """This run's callback of that kind, or None (the config may leave it out)."""
        return next((c for c in self.callbacks if isinstance(c, kind)), None)


def setup(cfg: DictConfig, out_dir: Path, group: str | None = None, name: str | None = None) -> Run:
    """Check every value and build the objects that own them (data module, callbacks, loggers, trainer);
    reads no data, starts no W&B run and writes nothing. Any mistake is one ConfigError."""
    with as_config_errors(TypeError, MisconfigurationException):
        validate_config(cfg)
        resolved = OmegaConf.to_container(cfg, resolve=True)
        GPTConfig(vocab_size=1, **resolved["model"])  # checks model.*
        check_optim(**resolved["optim"])
        distributed.check_launch(cfg.trainer)
        dm = build("data", cfg.data)  # checks data.*
        ckpt_arg = cfg.get("ckpt_path")
        if ckpt_arg is None and distributed.requeued() and checkpoint.last_path_in(out_dir).exists():
            ckpt_arg = "last"  # a requeued SLURM job goes on from where its signal stopped it
        ckpt_path = checkpoint.resolve_ckpt_path(ckpt_arg, out_dir)
        ckpt = None
        if ckpt_path is not None:
            ckpt = checkpoint.load(ckpt_path)
            checkpoint.check_resume_steps(ckpt, ckpt_path, cfg.trainer.max_steps)
        stop, timer = GracefulStop(), StepTimer()  # the timer first, so it times the step alone
        callbacks = [timer] + [build(f"callbacks.{k}", c) for k, c in (cfg.get("callbacks") or {}).items()] + [stop]
        loggers = build_loggers(cfg, group, name)
        callbacks = only_with_logger(callbacks, bool(loggers))
        trainer = build("trainer", cfg.trainer, callbacks=callbacks, logger=loggers or False,
                        plugins=[checkpoint.AtomicCheckpointIO(), *distributed.cluster_plugins()])
    return Run(cfg, out_dir, resolved, dm, callbacks, timer, stop, loggers, trainer, ckpt_path, ckpt)


def build(key: str, node: DictConfig, **kwargs):
    """instantiate(node); an error names the group it came from (its own sentence names the value)."""
    try:
        return instantiate(node, **kwargs)
    except ConfigError:
        raise
    except Exception as err:
        message = first_line(cause_of(err))
        if message.startswith(key):  # the object's own sentence already names the key
            raise ConfigError(message) from err
        target = str(node.get("_target_", "")).rsplit(".", 1)[-1]
        unknown = re.search(r"unexpected keyword argument '(\w+)'", message)
        if unknown:
            raise ConfigError(f"{key}.{unknown.group(1)} is not a setting of {target}; check the spelling.") from err
        raise ConfigError(f"{key}: {message.removeprefix(target + '.')}") from err


# ----------------------------------------------------------------------------- identity and loggers


def run_identity() -> tuple[Path, str | None, str | None]:
    """(output dir, W&B group, W&B run name) from Hydra: one group per sweep, one run per job."""
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    if hc.mode == RunMode.MULTIRUN:
        group = "sweep-" + "-".join(Path(hc.sweep.dir).parts[-2:])
        name = hc.job.override_dirname or f"job{hc.job.num}"
        return out, group, name
    return out, None, None


def resume_command(out_dir: Path) -> str:
    """The command that continues this run in its own dir."""
    overrides = [o for o in HydraConfig.get().overrides.task
                 if not o.startswith(("hydra.run.dir=", "hydra.sweep.dir=", "ckpt_path="))]
    return " ".join(["python train.py", *overrides, f"hydra.run.dir={out_dir}", "ckpt_path=last"])


def build_loggers(cfg: DictConfig, group: str | None, name: str | None) -> list:
    loggers = []
    for key, lcfg in (cfg.get("logger") or {}).items():
        if key == "wandb":
            mode = tracking.choose_mode(lcfg.get("mode")) if distributed.is_rank_zero() else "offline"  # no run there
            loggers.append(
                instantiate(lcfg, mode=mode, group=lcfg.get("group") or group, name=lcfg.get("name") or name)
            )
        else:
            loggers.append(instantiate(lcfg))
    return loggers


# ----------------------------------------------------------------------------- data and model


def prepare_data(run: Run) -> None:
    """Read/tokenize/cache the corpus (or reuse the cache) and memory-map it; input mistakes are ConfigErrors."""
    dm = run.dm
    t0 = time.perf_counter()
    with as_config_errors():
        dm.prepare_data()
        dm.setup("fit")
    console.print(
        f"data: {dm.source}, vocab {dm.vocab_size}, {len(dm.train_ids):,} train / {len(dm.val_ids):,} val tokens "
        f"({time.perf_counter() - t0:.1f}s, cache {dm.cache_path})"
    )


def build_module(run: Run, vocab_size: int) -> GPTModule:
    cfg = run.cfg
    module = GPTModule(model=run.resolved["model"], vocab_size=vocab_size, **run.resolved["optim"])
    if run.ckpt is not None:
        tok = run.dm.tokenizer.to_str() if run.dm.tokenizer is not None else None
        checkpoint.check_resume_model(run.ckpt, run.ckpt_path, module.model.state_dict(), run.resolved["model"],
                                      vocab_size, tok)
    module.flops_per_batch = module.model.flops_per_token() * cfg.data.batch_size * cfg.model.block_size
    if cfg.get("compile"):
        module.compile_model()
    console.print(f"model: {module.model.num_params() / 1e6:.2f}M parameters, attention {module.config.attn}")
    return module


def only_with_logger(callbacks: list, with_logger: bool) -> list:
    """LearningRateMonitor and ThroughputMonitor only feed a logger (and the first refuses to run without one)."""
    if with_logger:
        return callbacks
    return [c for c in callbacks if not isinstance(c, (LearningRateMonitor, ThroughputMonitor))]


def probe_diagnostics(model, module: GPTModule, dm, n_windows: int) -> dict:
    """diagnostics.run_all on n validation windows spread evenly over the split."""
    x, y = (t.to(module.device) for t in dm.probe_windows(n_windows))
    return diagnostics.run_all(model, x, y)


def log_diagnostics(loggers: list, diag: dict, step: int) -> None:
    """Scalars as diag/<key>; the loss-by-position profiles as a W&B table (position, teacher-forced,
    autoregressive) for a line plot. Saved at once: fit has ended, so Lightning will not flush the CSV again."""
    for lg in loggers:
        lg.log_metrics({f"diag/{k}": v for k, v in diag.items() if isinstance(v, (int, float))}, step=step)
        lg.save()
        if isinstance(lg, WandbLogger) and diag.get("loss_by_position"):
            tf = diag["loss_by_position"]
            rows = [[t, tf[t], ar] for t, ar in zip(diag["autoregressive_at"], diag["loss_by_position_autoregressive"],
                                                    strict=True)]
            lg.log_table(key="diag/loss_by_position", columns=["position", "teacher_forced", "autoregressive"],
                         data=rows, step=step)


def save_last_checkpoint(trainer) -> None:
    """ModelCheckpoint writes last.ckpt at validations only; a run that ends between two of them gets its
    final state written there too, so sampling and resuming use the newest model."""
    cb = trainer.checkpoint_callback
    if cb is not None and cb.save_last and cb.dirpath:
        trainer.save_checkpoint(checkpoint.last_path(trainer), weights_only=False)


# ----------------------------------------------------------------------------- summary


def write_summary(out_dir: Path, values: dict[str, Any]) -> Path:
    """summary.json in the run's output dir; non-finite floats become null. Written atomically."""
    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v

    path = out_dir / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({k: clean(v) for k, v in values.items()}, indent=2, default=str))
    tmp.replace(path)
    return path


def base_summary(run: Run, module: GPTModule, trainer, status: str) -> dict[str, Any]:
    guard, stability = run.callback(DivergenceGuard), run.callback(StabilityMonitor)
    return {
        "status": status,  # completed | diverged | interrupted
        "train_loss": module.tail_train_loss(0.1),
        "val_loss": module.last_val_loss,
        "diverged": bool(guard and guard.diverged),
        "divergence": guard.reason if guard and guard.diverged else None,
        "loss_spikes": stability.spikes if stability else None,
        "grad_norm_max": stability.max_grad_norm if stability else None,  # before clipping, sampled
        "steps": trainer.global_step,
        "tokens_per_sec": run.timer.tokens_per_sec,
        "train_seconds": run.timer.seconds,
        "step_seconds_median": run.timer.median_step_seconds,
        "first_step_unix_time": run.timer.first_step_at,  # for the start-up time (scripts/benchmark.py)
        "threads": torch.get_num_threads(),
        "world_size": trainer.world_size,
        "n_params": module.model.num_params(),
        "vocab_size": run.dm.vocab_size,
        "resumed_from": str(run.ckpt_path) if run.ckpt_path else None,  # also set by a requeued SLURM job
        "config": run.resolved,
    }


# ----------------------------------------------------------------------------- train


def train(cfg: DictConfig) -> dict[str, Any]:
    """One run: check, prepare, fit, final validation and diagnostics, summary.json. Under DDP/FSDP on one
    machine this process is rank 0 and starts the others once the data is ready (distributed.py)."""
    quiet_libraries()
    out_dir, group, name = run_identity()
    run = setup(cfg, out_dir, group, name)
    trainer, loggers = run.trainer, run.loggers
    run.stop.install()
    exit_code = None
    try:
        L.seed_everything(cfg.seed, workers=True, verbose=False)  # before the model's initial weights
        prepare_data(run)
        ranks = distributed.launch_ranks(cfg, out_dir, list(HydraConfig.get().overrides.task),
                                         run_dirs.project_root() / "train.py")  # None unless this is rank 0 of DDP
        with ranks or contextlib.nullcontext():
            module = build_module(run, run.dm.vocab_size)
            if distributed.is_rank_zero():
                out_dir.mkdir(parents=True, exist_ok=True)
                (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(run.resolved))
            for lg in loggers:
                lg.log_hyperparams(run.resolved)
            try:
                trainer.fit(module, datamodule=run.dm, ckpt_path=run.ckpt_path, weights_only=True)
                if run.stop.signum is not None:  # a signal during the last validation
                    raise RunInterrupted(run.stop.signum)
            except Diverged:
                pass  # the guard said why; no validation or checkpoint of a broken model, the last good one stays
            except RunInterrupted as stop:
                exit_code = stop.exit_code
                interrupted(run, module, trainer, stop)
                raise
            return finish_run(run, module, trainer, loggers)
    except BaseException:
        exit_code = exit_code or 1
        raise
    finally:
        run.stop.uninstall()
        tracking.finish(loggers, exit_code=exit_code)


def interrupted(run: Run, module: GPTModule, trainer, stop: RunInterrupted) -> None:
    """A signal stopped training: last.ckpt at the current step, a partial summary, the resume command."""
    if run.stop.saved_path is None:
        run.stop.save(trainer)
    summary = base_summary(run, module, trainer, "interrupted")
    summary["interrupted"] = stop.signal_name
    if trainer.is_global_zero:
        write_summary(run.out_dir, summary)
        console.print(
            f"[bold yellow]interrupted[/] by {stop.signal_name} at step {trainer.global_step}; "
            f"checkpoint {run.stop.saved_path}. Resume with:\n  {resume_command(run.out_dir)}",
            soft_wrap=True,
        )


def finish_run(run: Run, module: GPTModule, trainer, loggers: list) -> dict[str, Any]:
    dm = run.dm
    guard = run.callback(DivergenceGuard)
    diverged = bool(guard and guard.diverged)
    if not diverged and module.last_val_step != trainer.global_step:  # the run ended between validations
        trainer.validate(module, datamodule=dm, verbose=False)
        save_last_checkpoint(trainer)
    n_probe = run.cfg.get("diagnostics", {}).get("windows", 32)
    model = distributed.full_model(trainer, module) if not diverged else None  # every rank (FSDP gathers)
    diag = probe_diagnostics(model, module, dm, n_probe) if model is not None else {}
    log_diagnostics(loggers, diag, trainer.global_step)
    summary = base_summary(run, module, trainer, "diverged" if diverged else "completed")
    summary.update({
        "val_loss_autoregressive": diag.get("val_loss_autoregressive"),
        "autoregressive_positions": diag.get("autoregressive_positions"),  # scored positions per probe window
        "val_loss_probe": diag.get("val_loss_probe"),  # teacher-forced, on the same probe windows
        "future_leak": diag.get("future_leak"),
        "attn_entropy": diag.get("attn_entropy"),
        "attn_max_logit": diag.get("attn_max_logit"),
        "attn_future_mass": diag.get("attn_future_mass"),
        "loss_by_position": diag.get("loss_by_position"),  # teacher-forced, one value per position
        "wandb": tracking.run_info() if any(isinstance(lg, WandbLogger) for lg in loggers) else None,
        "diagnostics": diag,  # the above on the probe windows, plus per-layer values
    })
    if trainer.is_global_zero:
        path = write_summary(run.out_dir, summary)
        fmt = lambda v, f: "n/a" if v is None or not math.isfinite(v) else format(v, f)  # noqa: E731
        console.print(
            f"[bold green]done[/]: {summary['steps']} steps, train loss {fmt(summary['train_loss'], '.4f')}, "
            f"val loss {fmt(summary['val_loss'], '.4f')} (autoregressive "
            f"{fmt(summary['val_loss_autoregressive'], '.4f')}, future leak {fmt(summary['future_leak'], '.3g')}), "
            f"{summary['tokens_per_sec'] or 0:,.0f} tokens/s -> {path}"
        )
    return summary


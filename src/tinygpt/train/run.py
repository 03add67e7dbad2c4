"""One training run, from the config to summary.json.

Phases: ``setup`` (setup.py) checks every value and builds the objects (no data read, nothing written; a
mistake is a ConfigError); ``prepare_data`` reads or builds the data cache; ``build_module`` builds the model
and checks a resume against it; then the run writes its config, trains, validates at the end, runs the
diagnostics and writes summary.json (summary.py). A signal ends it with a checkpoint, a partial summary and
the command that resumes it.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import WandbLogger
from omegaconf import DictConfig, OmegaConf

from tinygpt.runtime import checkpoint, distributed, run_dirs, tracking
from tinygpt.runtime.console import out as console
from tinygpt.runtime.console import is_quiet, say, set_quiet
from tinygpt.runtime.errors import as_config_errors
from tinygpt.runtime.interrupts import RunInterrupted
from tinygpt.train import diagnostics, memory
from tinygpt.train.callbacks import StabilityMonitor, full_model
from tinygpt.train.guards import Diverged, DivergenceGuard
from tinygpt.train.leak_alarm import LeakAlarm
from tinygpt.train.module import GPTModule
from tinygpt.train.setup import Run, quiet_libraries, run_identity, setup
from tinygpt.train.summary import base_summary, done_line, with_diagnostics, write_summary


def train(cfg: DictConfig) -> dict[str, Any]:
    """One run: check, prepare, fit, final validation and diagnostics, summary.json. Under DDP/FSDP on one
    machine this process is rank 0 and starts the others once the data is ready (runtime/distributed.py)."""
    parallel = run_dirs.in_parallel_sweep()
    quiet_libraries(parallel)
    set_quiet(parallel)  # a job beside others says its done line only
    out_dir, group, name = run_identity()
    run = setup(cfg, out_dir, group, name)
    trainer, loggers, stop = run.trainer, run.loggers, run.stop
    if parallel:  # the sweep's own process records a signal in its dir; the job polls it after every step
        stop.sweep_dir = Path(HydraConfig.get().sweep.dir)
    stop.install()
    exit_code = None
    try:
        L.seed_everything(cfg.seed, workers=True, verbose=False)  # before the model's initial weights
        prepare_data(run)
        ranks = distributed.launch_ranks(cfg, out_dir, list(HydraConfig.get().overrides.task),
                                         run_dirs.project_root() / "train.py")  # None unless this is rank 0 of DDP
        with ranks or contextlib.nullcontext():
            module = build_module(run)
            if distributed.is_rank_zero():
                out_dir.mkdir(parents=True, exist_ok=True)
                (out_dir / "config.yaml").write_text(OmegaConf.to_yaml(run.resolved))
            for lg in loggers:
                lg.log_hyperparams(run.resolved)
            try:
                trainer.fit(module, datamodule=run.dm, ckpt_path=run.ckpt_path, weights_only=True)
                if stop.signum is not None:  # a signal during the last validation
                    raise RunInterrupted(stop.signum)
            except Diverged:
                pass  # the guard said why; no validation or checkpoint of a broken model, the last good one stays
            except RunInterrupted as signalled:
                exit_code = signalled.exit_code
                stop.stopping = True  # from here a further signal is noted, not obeyed: nothing is cut short
                interrupted(run, module, signalled)
                raise
            return finish_run(run, module)
    except BaseException:
        exit_code = exit_code or 1
        raise
    finally:
        stop.uninstall()
        tracking.finish(loggers, exit_code=exit_code)


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


def build_module(run: Run) -> GPTModule:
    """The LightningModule for the data's vocabulary, with the optimizer recipe built at set-up; a resumed
    checkpoint must hold the same model shape and tokenizer."""
    cfg, vocab_size = run.cfg, run.dm.vocab_size
    if cfg.get("check_memory", True):  # before anything is allocated (tinygpt.train.memory)
        memory.check(run.resolved["model"], vocab_size, cfg.data.batch_size, cfg.trainer.get("accelerator"))
    module = GPTModule(model=run.resolved["model"], vocab_size=vocab_size, optim=run.optim,
                       attention_bug=run.resolved.get("attention_bug"))
    if run.ckpt is not None:
        tok = run.dm.tokenizer.to_str() if run.dm.tokenizer is not None else None
        checkpoint.check_resume_model(run.ckpt, run.ckpt_path, module.model.state_dict(), run.resolved["model"],
                                      vocab_size, tok)
        note = checkpoint.world_size_note(run.ckpt, run.ckpt_path, run.trainer.world_size, cfg.data.batch_size)
        if note:
            console.print(f"[yellow]{note}[/]", soft_wrap=True)
    module.flops_per_batch = module.model.flops_per_token() * cfg.data.batch_size * cfg.model.block_size
    if cfg.get("compile"):
        module.compile_model()
    console.print(f"model: {module.model.num_params() / 1e6:.2f}M parameters, attention {module.config.attn}")
    return module


def probe_diagnostics(model, module: GPTModule, dm, n_windows: int) -> dict:
    """diagnostics.run_all on n validation windows spread evenly over the split, and on every validation window:
    the teacher-forced loss of each window at each position and the count baselines (unigram, bigram). The
    per-window arrays are under diagnostics.ARRAYS (for diagnostics.npz), with which windows the probe used."""
    x, y = (t.to(module.device) for t in dm.probe_windows(n_windows))
    diag = diagnostics.run_all(model, x, y)
    val_x, val_y = dm.val_x.to(module.device), dm.val_y.to(module.device)
    every = diagnostics.window_losses(model, val_x, val_y, dm.val_batch_size)  # (N_val, T)
    diag["val_loss_all_windows"] = every.mean().item()
    diag["val_windows"] = len(every)
    diag.update(diagnostics.count_baselines(dm.train_ids, val_x, val_y, dm.vocab_size))
    diag[diagnostics.ARRAYS].update(val_window_position=every.float().numpy(),
                                    probe_index=dm.probe_index(n_windows).numpy())
    return diag


def save_arrays(out_dir: Path, diag: dict) -> None:
    """diagnostics.npz: the per-window losses the reports bootstrap over (atomically, beside summary.json)."""
    tmp = out_dir / "diagnostics.tmp.npz"
    np.savez_compressed(tmp, **diag[diagnostics.ARRAYS])
    tmp.replace(out_dir / "diagnostics.npz")


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


def job_label() -> str:
    """'job N: overrides', for the one line a job of a parallel sweep prints."""
    job = HydraConfig.get().job
    return f"job {job.num}: {job.override_dirname or 'no overrides'}"


def resume_command(out_dir: Path) -> str:
    """The command that continues this run in its own dir."""
    overrides = [o for o in HydraConfig.get().overrides.task
                 if not o.startswith(("hydra.run.dir=", "hydra.sweep.dir=", "ckpt_path="))]
    return " ".join(["python train.py", *overrides, f"hydra.run.dir={out_dir}", "ckpt_path=last"])


def summary_of(run: Run, module: GPTModule, status: str) -> dict[str, Any]:
    return base_summary(status, module=module, trainer=run.trainer, timer=run.timer,
                        guard=run.callback(DivergenceGuard), stability=run.callback(StabilityMonitor), dm=run.dm,
                        ckpt_path=run.ckpt_path, resolved=run.resolved, alarm=run.callback(LeakAlarm))


def interrupted(run: Run, module: GPTModule, signalled: RunInterrupted) -> None:
    """A signal stopped training: last.ckpt at the current step, a partial summary, the resume command."""
    trainer, stop = run.trainer, run.stop
    if stop.saved_path is None:
        stop.save(trainer)
    summary = summary_of(run, module, "interrupted")
    summary["interrupted"] = signalled.signal_name
    if trainer.is_global_zero:
        write_summary(run.out_dir, summary)
        say(
            f"[bold yellow]interrupted[/] by {signalled.signal_name} at step {trainer.global_step}; "
            f"checkpoint {stop.saved_path}. Resume with:\n  {resume_command(run.out_dir)}",
            soft_wrap=True,
        )


def finish_run(run: Run, module: GPTModule) -> dict[str, Any]:
    """The end of a run that was not stopped by a signal: the last validation (unless it just ran or the run
    diverged), the diagnostics and summary.json."""
    trainer, dm = run.trainer, run.dm
    guard = run.callback(DivergenceGuard)
    diverged = bool(guard and guard.diverged)
    if not diverged and module.last_val_step != trainer.global_step:  # the run ended between validations
        trainer.validate(module, datamodule=dm, verbose=False)
        save_last_checkpoint(trainer)
    n_probe = run.cfg.get("diagnostics", {}).get("windows", 32)
    model = full_model(trainer, module) if not diverged else None  # every rank (FSDP gathers)
    diag = probe_diagnostics(model, module, dm, n_probe) if model is not None else {}
    if diag and trainer.is_global_zero:
        save_arrays(run.out_dir, diag)
    diag.pop(diagnostics.ARRAYS, None)
    log_diagnostics(run.loggers, diag, trainer.global_step)
    wandb = tracking.run_info() if any(isinstance(lg, WandbLogger) for lg in run.loggers) else None
    alarm = run.callback(LeakAlarm)
    status = "diverged" if diverged else "leaky" if alarm and alarm.stopped else "completed"
    summary = with_diagnostics(summary_of(run, module, status), diag, wandb)
    if trainer.is_global_zero:
        path = write_summary(run.out_dir, summary)
        say(done_line(summary, path, job_label() if is_quiet() else None), soft_wrap=is_quiet())
    return summary

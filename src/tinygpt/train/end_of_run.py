"""The end of a run: the last validation, the diagnostics and summary.json (``finish_run``), sized by
diagnostics.max_val_tokens, each phase with its progress; or, when a signal stops it, the checkpoint, a partial
summary and the command that resumes it (``interrupted``).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import numpy as np
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import WandbLogger

from tinygpt.runtime import checkpoint, tracking
from tinygpt.runtime.console import out as console
from tinygpt.runtime.console import is_quiet, say
from tinygpt.runtime.interrupts import RunInterrupted
from tinygpt.train.probes import diagnostics
from tinygpt.train.probes.callbacks import full_model
from tinygpt.train.module import GPTModule
from tinygpt.train.setup import TrainingRun
from tinygpt.train.summary import base_summary, done_line, with_diagnostics, write_summary


def end_windows(val_windows: int, block_size: int, max_tokens: int | None) -> int:
    """How many validation windows the end-of-run work scores (diagnostics.max_val_tokens): every one, or as many
    as ``max_tokens`` tokens hold (at least one), so a long context does not multiply the end's cost. The default,
    65,536 tokens, holds the default run's 1,024 windows of 64 tokens; null scores every window."""
    if max_tokens is None:
        return val_windows
    return max(1, min(val_windows, max_tokens // block_size))


def scheduled_validation(trainer_cfg, step: int) -> bool:
    """Whether the trainer's own schedule (trainer.val_check_interval: steps, or a fraction of max_steps) validates
    at ``step``: such a validation scores every window wherever it runs, so a resume that redoes it (one stopped
    in it) gives the number the run would have given."""
    every = trainer_cfg.get("val_check_interval")
    if isinstance(every, float):
        every = max(1, int(trainer_cfg.max_steps * every))
    return isinstance(every, int) and every > 0 and step % every == 0


@contextlib.contextmanager
def end_phase(what: str, total: int | None = None):
    """One end-of-run phase on the run's console: a line with its bar (``total`` windows; the function yielded is
    told how many are done) or, without a total, a spinner, and the time it took. Silent in a quiet job."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

    columns = [SpinnerColumn(finished_text="-"), TextColumn("end of run: {task.description}"), BarColumn(),
               *([MofNCompleteColumn()] if total else []), TimeElapsedColumn()]
    with Progress(*columns, console=console, disable=is_quiet()) as bar:
        task = bar.add_task(what, total=total)
        yield lambda done: bar.update(task, completed=done)
        bar.update(task, completed=total or 1, total=total or 1)


def end_plan(n_final: int | None, n_end: int, n_val: int, n_probe: int) -> str:
    """What the end of a run scores, said before it starts (each phase then shows its progress)."""
    capped = "" if n_end == n_val else f" of {n_val:,} (diagnostics.max_val_tokens)"
    final = "" if n_final is None else f"a final validation on {n_final:,} windows, "
    return f"{final}each window's loss on {n_end:,} windows{capped}, the diagnostics on {n_probe}"


def final_validation(trainer, module: GPTModule, dm, n_windows: int) -> None:
    """trainer.validate on the validation windows (Lightning's bar shows it), or on ``n_windows`` of them spread
    evenly over the split when diagnostics.max_val_tokens holds fewer than all."""
    if n_windows >= len(dm.val_x):
        trainer.validate(module, datamodule=dm, verbose=False)
        return
    from torch.utils.data import DataLoader, TensorDataset

    windows = TensorDataset(*dm.spread_windows(n_windows))
    trainer.validate(module, dataloaders=DataLoader(windows, batch_size=dm.val_batch_size), verbose=False)


def end_diagnostics(model, module: GPTModule, dm, n_windows: int, n_val: int | None = None) -> dict:
    """diagnostics.run_all on n validation windows spread evenly over the split, and on every validation window
    (or ``n_val`` of them spread evenly, diagnostics.max_val_tokens): the teacher-forced loss of each window at
    each position and the count baselines (unigram, bigram). The per-window arrays are under diagnostics.ARRAYS
    (for diagnostics.npz), with which windows the probe used (and, when fewer than all, which the losses are of)."""
    x, y = (t.to(module.device) for t in dm.spread_windows(n_windows))
    with end_phase(f"diagnostics on {len(x)} windows (honest loss, future leak, attention)"):
        diag = diagnostics.run_all(model, x, y)
    every_window = n_val is None or n_val >= len(dm.val_x)
    val_x, val_y = (dm.val_x, dm.val_y) if every_window else dm.spread_windows(n_val)
    val_x, val_y = val_x.to(module.device), val_y.to(module.device)
    every = module.window_losses_of_validation_at(module.trainer.global_step) if every_window else None  # (N_val, T)
    if every is None or every.shape != val_x.shape:  # no validation at this step to take them from: score them
        with end_phase(f"the loss of {len(val_x):,} validation windows", total=len(val_x)) as advance:
            every = diagnostics.window_losses(model, val_x, val_y, dm.val_batch_size, progress=advance)  # (N_val, T)
    diag["val_loss_all_windows"] = every.mean().item()
    diag["val_windows"] = len(every)
    diag.update(diagnostics.count_baselines(dm.train_ids, val_x, val_y, dm.vocab_size))
    diag[diagnostics.ARRAYS].update(val_window_position=every.float().numpy(),
                                    probe_index=dm.spread_index(n_windows).numpy())
    if not every_window:  # which of the fixed windows the rows of val_window_position are
        diag["val_windows_in_split"] = len(dm.val_x)
        diag[diagnostics.ARRAYS]["val_index"] = dm.spread_index(n_val).numpy()
    return diag


def save_arrays(out_dir: Path, diag: dict) -> None:
    """diagnostics.npz: the per-window losses the reports bootstrap over (atomically, beside summary.json)."""
    tmp = out_dir / "diagnostics.tmp.npz"
    np.savez_compressed(tmp, **diag[diagnostics.ARRAYS])
    tmp.replace(out_dir / "diagnostics.npz")


def log_diagnostics(loggers: list, diag: dict, step: int) -> None:
    """Scalars as diag/<key>; the loss-by-position profiles as a W&B table (position, teacher-forced,
    honest) for a line plot. Saved at once: fit has ended, so Lightning will not flush the CSV again."""
    for lg in loggers:
        lg.log_metrics({f"diag/{k}": v for k, v in diag.items() if isinstance(v, (int, float))}, step=step)
        lg.save()
        if isinstance(lg, WandbLogger) and diag.get("loss_by_position"):
            tf = diag["loss_by_position"]
            rows = [[t, tf[t], ar] for t, ar in zip(diag["honest_at"], diag["loss_by_position_honest"],
                                                    strict=True)]
            lg.log_table(key="diag/loss_by_position", columns=["position", "teacher_forced", "honest"],
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


def summary_of(run: TrainingRun, module: GPTModule, status: str) -> dict[str, Any]:
    return base_summary(status, module=module, trainer=run.trainer, timer=run.clock, guard=run.guard,
                        stability=run.stability, dm=run.dm, ckpt_path=run.ckpt_path, resolved=run.resolved,
                        alarm=run.alarm)


def saved_at_this_step(trainer) -> Path | None:
    """ModelCheckpoint's last.ckpt when its last save was at the trainer's current step (Lightning's record of it),
    else None."""
    cb = trainer.checkpoint_callback
    path = getattr(cb, "last_model_path", "") if cb is not None else ""
    if path and getattr(cb, "_last_global_step_saved", None) == trainer.global_step and Path(path).is_file():
        return Path(path)
    return None


def interrupted(run: TrainingRun, module: GPTModule, signalled: RunInterrupted) -> None:
    """A signal stopped training: last.ckpt at the current step, a partial summary, the resume command."""
    trainer, stop = run.trainer, run.stop
    if stop.saved_path is None:
        reuse = saved_at_this_step(trainer) if trainer.world_size > 1 else None
        if reuse is not None:  # ranks stopped outside a step's agreement may have parted: a save, which waits for
            stop.saved_path = reuse  # every rank, would fail; ModelCheckpoint's last save is at this very step
        else:
            stop.save(trainer)
    summary = summary_of(run, module, "interrupted")
    summary["interrupted"] = signalled.signal_name
    summary["interrupted_during"] = signalled.during
    where = "" if signalled.during == "training" else f" (in the end-of-run {signalled.during})"
    if trainer.is_global_zero:
        write_summary(run.out_dir, summary)
        say(
            f"[bold yellow]interrupted[/] by {signalled.signal_name} at step {trainer.global_step}{where}; "
            f"checkpoint {stop.saved_path}. Resume with:\n  {resume_command(run.out_dir)}",
            soft_wrap=True,
        )


def finish_run(run: TrainingRun, module: GPTModule) -> dict[str, Any]:
    """The end of a run that was not stopped by a signal: the last validation (unless it just ran or the run
    diverged), the diagnostics and summary.json, sized by diagnostics.max_val_tokens, each phase with its progress.
    A signal in the validation or the diagnostics stops at once: last.ckpt, a partial summary, the resume command."""
    trainer, dm = run.trainer, run.dm
    diverged = bool(run.guard and run.guard.diverged)
    settings = run.cfg.diagnostics
    n_probe, n_val = settings.windows, len(dm.val_x)
    n_end = end_windows(n_val, dm.block_size, settings.max_val_tokens)
    n_final = None  # the windows of a final validation, if one runs here
    if not diverged and module.last_val_step != trainer.global_step:  # ended between validations, or resumed
        n_final = n_val if scheduled_validation(run.cfg.trainer, trainer.global_step) else n_end
    phase = "final validation"
    try:
        if not diverged:
            console.print(f"end of run: {end_plan(n_final, n_end, n_val, min(n_probe, n_val))}", soft_wrap=True)
        if n_final is not None:
            final_validation(trainer, module, dm, n_final)
            save_last_checkpoint(trainer)
        phase = "diagnostics"
        model = full_model(trainer, module) if not diverged else None  # every rank (FSDP gathers)
        diag = end_diagnostics(model, module, dm, n_probe, n_end) if model is not None else {}
    except RunInterrupted as signalled:
        run.stop.stopping = True  # from here a further signal is noted, not obeyed: nothing is cut short
        signalled.during = phase
        interrupted(run, module, signalled)
        raise
    if diag and trainer.is_global_zero:
        save_arrays(run.out_dir, diag)
    diag.pop(diagnostics.ARRAYS, None)
    log_diagnostics(run.loggers, diag, trainer.global_step)
    wandb = tracking.run_info() if any(isinstance(lg, WandbLogger) for lg in run.loggers) else None
    status = "diverged" if diverged else "leaky" if run.alarm and run.alarm.stopped else "completed"
    summary = with_diagnostics(summary_of(run, module, status), diag, wandb)
    if trainer.is_global_zero:
        path = write_summary(run.out_dir, summary)
        say(done_line(summary, path, job_label() if is_quiet() else None), soft_wrap=True)  # grepped: never wrapped
    return summary

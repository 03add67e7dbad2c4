"""One training run, from the config to summary.json: ``train`` is the recipe, read top to bottom.

Phases: ``setup`` (setup.py) checks every value and builds the objects (no data read, nothing written; a
mistake is a ConfigError); ``prepare_data`` reads or builds the data cache; ``build_module`` builds the model
and checks a resume against it; ``write_config``; ``fit``; ``finish_run`` validates at the end, runs the
diagnostics and writes summary.json (summary.py). ``RunScope`` is the plumbing around them. A signal ends it
with a checkpoint, a partial summary and the command that resumes it; one during the end-of-run phase too, and
its resume (at max_steps) finishes that phase.
"""

from __future__ import annotations

import contextlib
import csv
import time
from pathlib import Path
from typing import Any

import lightning as L
import numpy as np
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import CSVLogger, WandbLogger
from omegaconf import DictConfig, OmegaConf

from tinygpt.runtime import checkpoint, distributed, run_dirs, tracking
from tinygpt.runtime.console import out as console
from tinygpt.runtime.console import is_quiet, say
from tinygpt.runtime.errors import ConfigError, as_config_errors
from tinygpt.runtime.interrupts import RunInterrupted
from tinygpt.train import diagnostics, memory
from tinygpt.train.callbacks import full_model
from tinygpt.train.guards import Diverged
from tinygpt.train.module import GPTModule
from tinygpt.train.pretrained import attention_note, load_weights, random_gpt2_note
from tinygpt.train.setup import TrainingRun, run_identity, setup
from tinygpt.train.summary import base_summary, current_names, done_line, with_diagnostics, write_summary


def train(cfg: DictConfig) -> dict[str, Any]:
    """One run, the recipe: set up (every value checked, the objects built), seed, data, model, fit, finish (the
    last validation, the diagnostics, summary.json). ``RunScope`` holds the plumbing around it: signals, the other
    ranks of a DDP run, and W&B's teardown with the run's exit code."""
    run = setup(cfg, *run_identity())
    with RunScope(run) as scope:
        L.seed_everything(cfg.seed, workers=True, verbose=False)  # before the model's initial weights
        prepare_data(run)
        scope.start_ranks()  # DDP on one machine: this process is rank 0 and starts the others once the data is ready
        module = build_module(run)
        write_config(run)
        fit(run, module)
        return finish_run(run, module)


class RunScope:
    """Everything around a run's recipe, set up on entry and undone on exit in reverse order (an ExitStack):
    the signal handler (a signal ends the step, then the run, with a checkpoint), in a parallel sweep the sweep's
    stop file, the other DDP ranks of this node (waited for on exit), and the W&B run, closed with the run's exit
    code (0, 1 for an error, 128 + the signal for a stop)."""

    def __init__(self, run: TrainingRun):
        self.run = run
        self.stack = contextlib.ExitStack()

    def __enter__(self) -> RunScope:
        run = self.run
        if run_dirs.in_parallel_sweep():  # the sweep's own process records a signal in its dir; polled every step
            run.stop.sweep_dir = Path(HydraConfig.get().sweep.dir)
        self.stack.__enter__()
        self.stack.push(self._finish_tracking)  # last out: W&B sees the run's end after everything else
        run.stop.install()
        self.stack.callback(run.stop.uninstall)
        return self

    def start_ranks(self) -> None:
        """Ranks 1..N-1 of a DDP run on this machine (none otherwise), ended or waited for when the run ends."""
        ranks = distributed.launch_ranks(self.run.cfg, self.run.out_dir, list(HydraConfig.get().overrides.task),
                                         run_dirs.project_root() / "train.py")
        if ranks is not None:
            self.stack.enter_context(ranks)

    def _finish_tracking(self, kind, err, tb) -> None:
        code = None if err is None else err.exit_code if isinstance(err, RunInterrupted) else 1
        tracking.finish(self.run.loggers, exit_code=code)

    def __exit__(self, kind, err, tb):
        return self.stack.__exit__(kind, err, tb)


def write_config(run: TrainingRun) -> None:
    """config.yaml (the resolved config) by rank 0; the hyperparameters to every logger; a resumed run's history
    kept (before any logger writes)."""
    if distributed.is_rank_zero():
        run.out_dir.mkdir(parents=True, exist_ok=True)
        (run.out_dir / "config.yaml").write_text(OmegaConf.to_yaml(run.resolved))
    keep_history(run.ckpt, run.loggers)
    for lg in run.loggers:
        lg.log_hyperparams(run.resolved)


def fit(run: TrainingRun, module: GPTModule) -> None:
    """trainer.fit. A divergence ends it quietly (the guard said why; no validation or checkpoint of a broken model,
    the last good one stays); a signal ends it with last.ckpt, a partial summary and the resume command."""
    try:
        run.trainer.fit(module, datamodule=run.dm, ckpt_path=run.ckpt_path, weights_only=True)
        if run.stop.signum is not None:  # a signal during the last validation
            raise RunInterrupted(run.stop.signum)
    except Diverged:
        pass
    except RunInterrupted as signalled:
        run.stop.stopping = True  # from here a further signal is noted, not obeyed: nothing is cut short
        interrupted(run, module, signalled)
        raise


def prepare_data(run: TrainingRun) -> None:
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


def keep_history(ckpt: dict | None, loggers: list) -> None:
    """A resumed run's history/metrics.csv keeps the rows logged before its checkpoint. Lightning's CSV logger
    deletes an existing metrics.csv when it starts writing, so they are read first and logged again through it:
    every row before the checkpoint's step, and at that step the leak alarm's rows (``leak/*``, logged at the steps
    taken; the others at the index of the batch, which the resumed run logs itself)."""
    if ckpt is None:
        return
    step = int(ckpt.get("global_step") or 0)
    for lg in loggers:
        if not isinstance(lg, CSVLogger):
            continue
        path = Path(lg.log_dir) / "metrics.csv"
        if not path.is_file():
            continue
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        for row in rows:
            at = int(row.pop("step"))
            values = current_names({k: float(v) for k, v in row.items() if v not in ("", None)})  # old names: today's
            if at > step or (at == step and not all(k.startswith("leak/") for k in values)):
                continue
            if values:
                lg.log_metrics(values, step=at)
        lg.save()


def build_module(run: TrainingRun) -> GPTModule:
    """The LightningModule for the data's vocabulary (init_from's, starting from its weights), with the optimizer
    recipe built at set-up; a resumed checkpoint must hold the same model shape and tokenizer."""
    cfg, vocab_size = run.cfg, run.dm.vocab_size
    pre = run.pretrained
    if pre is not None:
        if vocab_size > pre.vocab_size:
            raise ConfigError(f"the data have {vocab_size} token ids, more than the vocab_size={pre.vocab_size} of "
                              f"init_from={pre.source!r}; use its tokenizer (data.tokenizer=pretrained).")
        vocab_size = pre.vocab_size
    if cfg.check_memory:  # before anything is allocated (tinygpt.train.memory)
        memory.check(run.resolved["model"], vocab_size, cfg.data.batch_size, cfg.trainer.get("accelerator"))
    module = GPTModule(model=run.resolved["model"], vocab_size=vocab_size, optim=run.optim)
    if pre is not None and run.ckpt is None:  # a resume takes the checkpoint's weights instead
        load_weights(module.model, pre)
        console.print(f"init_from: {pre.source} ({pre.path}): weights loaded", soft_wrap=True)
        note = attention_note(run.resolved["model"])
        if note:
            console.print(f"[yellow]{note}[/]", soft_wrap=True)
    if run.ckpt is not None:
        tok = run.dm.tokenizer.to_str() if run.dm.tokenizer is not None else None
        checkpoint.check_resume_model(run.ckpt, run.ckpt_path, module.model.state_dict(), run.resolved["model"],
                                      vocab_size, tok)
        note = checkpoint.world_size_note(run.ckpt, run.ckpt_path, run.trainer.world_size, cfg.data.batch_size)
        if note:
            console.print(f"[yellow]{note}[/]", soft_wrap=True)
        if run.ckpt.get("global_step") == cfg.trainer.max_steps:  # stopped in its end-of-run phase
            console.print(f"resuming at step {cfg.trainer.max_steps} = trainer.max_steps: no step left to train; the "
                          "end-of-run validation, diagnostics and summary run.", soft_wrap=True)
    note = random_gpt2_note(HydraConfig.get().runtime.choices.get("model"), cfg.get("init_from"))
    if note:
        console.print(f"[yellow]{note}[/]", soft_wrap=True)
    module.flops_per_batch = module.model.flops_per_token() * cfg.data.batch_size * cfg.model.block_size
    if cfg.compile:
        module.compile_model()
    console.print(f"model: {module.model.num_params() / 1e6:.2f}M parameters, attention {module.config.attn}")
    return module


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


def interrupted(run: TrainingRun, module: GPTModule, signalled: RunInterrupted) -> None:
    """A signal stopped training: last.ckpt at the current step, a partial summary, the resume command."""
    trainer, stop = run.trainer, run.stop
    if stop.saved_path is None:
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
        say(done_line(summary, path, job_label() if is_quiet() else None), soft_wrap=is_quiet())
    return summary

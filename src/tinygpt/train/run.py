"""One training run, from the config to summary.json: ``train`` is the recipe, and the functions it calls follow
it in the order it calls them.

``setup`` (setup.py) checks every value and builds the objects (no data read, nothing written; a mistake is a
ConfigError); ``RunScope`` is the plumbing around the rest; ``prepare_data`` reads or builds the data cache;
``build_module`` builds the model and checks a resume against it; ``write_config``; ``fit``; ``finish_run``
(end_of_run.py) validates at the end, runs the diagnostics and writes summary.json. A signal ends a run with a
checkpoint, a partial summary and the command that resumes it; one during the end-of-run phase too, and its resume
(at max_steps) finishes that phase.
"""

from __future__ import annotations

import contextlib
import csv
import time
from pathlib import Path
from typing import Any

import lightning as L
from hydra.core.hydra_config import HydraConfig
from lightning.pytorch.loggers import CSVLogger
from omegaconf import DictConfig, OmegaConf

from tinygpt.runtime import checkpoint, distributed, run_dirs, tracking
from tinygpt.runtime.console import count, out as console
from tinygpt.runtime.errors import ConfigError, as_config_errors
from tinygpt.runtime.interrupts import RunInterrupted
from tinygpt.train import float16_products, memory
from tinygpt.train.guards import Diverged
from tinygpt.train.module import GPTModule
from tinygpt.train.init_from import attention_note, load_weights, random_gpt2_note
from tinygpt.train.end_of_run import finish_run, interrupted
from tinygpt.train.setup import TrainingRun, run_identity, setup


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
    stop file, float16 products computed as a GPU computes them when the run trains in float16 on the CPU
    (float16_products), the other DDP ranks of this node (waited for on exit), and the W&B run, closed with the
    run's exit code (0, 1 for an error, 128 + the signal for a stop)."""

    def __init__(self, run: TrainingRun):
        self.run = run
        self.stack = contextlib.ExitStack()
        self._log_name = f"{HydraConfig.get().job.name}.log"  # the job's log: what an unstarted run dir may hold

    def __enter__(self) -> RunScope:
        run = self.run
        if run_dirs.in_parallel_sweep():  # the sweep's own process records a signal in its dir; polled every step
            run.stop.sweep_dir = Path(HydraConfig.get().sweep.dir)
        self.stack.__enter__()
        self.stack.push(self._finish_tracking)  # last out: W&B sees the run's end after everything else
        run.stop.install()
        self.stack.callback(run.stop.uninstall)
        if float16_products.wanted(run.trainer):  # float16 on the CPU: each product summed in float32, as on a GPU
            self.stack.enter_context(float16_products.Float16Products())
        return self

    def start_ranks(self) -> None:
        """Ranks 1..N-1 of a DDP run on this machine (none otherwise), ended or waited for when the run ends."""
        ranks = distributed.launch_ranks(self.run.cfg, self.run.out_dir, list(HydraConfig.get().overrides.task),
                                         run_dirs.project_root() / "train.py", self.run.stop, self._abandon)
        if ranks is not None:
            self.stack.enter_context(ranks)

    def _abandon(self, signum: int) -> None:
        """Another rank stopped on a signal while this one cannot follow (blocked in a collective: the start-up's
        rendezvous, where no handler of ours runs): end this process as that stop, from the watching thread. Before
        the first step nothing is kept (the run dir goes, as for a single process stopped while starting)."""
        import os
        import signal

        name = signal.Signals(signum).name
        try:
            gone = run_dirs.discard_unstarted_run(self._log_name)
        except OSError:  # W&B's writer may still be closing its files
            gone = False
        console.print(f"interrupted by {name} while starting: nothing was trained or saved." if gone else
                      f"interrupted by {name}: another rank stopped while this one waited for it; last.ckpt, if any, "
                      f"is where a resume (ckpt_path=last) starts.", soft_wrap=True)
        os._exit(128 + signum)

    def _finish_tracking(self, kind, err, tb) -> None:
        code = None if err is None else err.exit_code if isinstance(err, RunInterrupted) else 1
        gone = isinstance(err, RunInterrupted) and run_dirs.unstarted_run(self._log_name)
        tracking.finish(self.run.loggers, exit_code=code, hint=not gone)  # no sync hint for a dir about to go

    def __exit__(self, kind, err, tb):
        return self.stack.__exit__(kind, err, tb)


def prepare_data(run: TrainingRun) -> None:
    """Read/tokenize/cache the corpus (or reuse the cache) and memory-map it; input mistakes are ConfigErrors."""
    dm = run.dm
    t0 = time.perf_counter()
    with as_config_errors():
        dm.prepare_data()
        dm.setup("fit")
    console.print(
        f"data: {dm.source}, vocab {dm.vocab_size}, {len(dm.train_ids):,} train / {len(dm.val_ids):,} val tokens "
        f"({time.perf_counter() - t0:.1f}s, cache {dm.cache_path})", soft_wrap=True
    )


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
    console.print(f"model: {count(module.model.num_params())} parameters, attention {module.config.attn}",
                  soft_wrap=True)
    return module


def write_config(run: TrainingRun) -> None:
    """config.yaml (the resolved config) by rank 0; the hyperparameters to every logger; a resumed run's history
    kept (before any logger writes)."""
    if distributed.is_rank_zero():
        run.out_dir.mkdir(parents=True, exist_ok=True)
        (run.out_dir / "config.yaml").write_text(OmegaConf.to_yaml(run.resolved))
    keep_history(run.ckpt, run.loggers)
    for lg in run.loggers:
        lg.log_hyperparams(run.resolved)


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
            values = {k: float(v) for k, v in row.items() if v not in ("", None)}
            if at > step or (at == step and not all(k.startswith("leak/") for k in values)):
                continue
            if values:
                lg.log_metrics(values, step=at)
        lg.save()


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

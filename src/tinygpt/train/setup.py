"""A run's set-up: every value checked and every object built from the config, before any data is read or
anything written. Each object checks its own settings on construction (Hydra's instantiate builds them);
train.values checks what spans groups or belongs to no object (and, before torch is imported, every value it can).
Any mistake is one ConfigError.
"""

from __future__ import annotations

import logging
import os
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import lightning as L
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from hydra.utils import instantiate
from lightning.pytorch.callbacks import LearningRateMonitor, ModelCheckpoint, ProgressBar, ThroughputMonitor
from lightning.pytorch.utilities.exceptions import MisconfigurationException
from omegaconf import DictConfig, OmegaConf, open_dict

from tinygpt.model.config import default_of
from tinygpt.model.gpt import Block, GPTConfig
from tinygpt.runtime.resume_record import check_last_is_latest, check_resume_config, run_dir_of
from tinygpt.runtime.checks import as_written
from tinygpt.runtime import checkpoint, distributed, run_dirs, tracking
from tinygpt.runtime.console import out as console
from tinygpt.runtime.console import set_quiet
from tinygpt.runtime.errors import ConfigError, as_config_errors
from tinygpt.runtime.graceful_stop import GracefulStop
from tinygpt.train.probes.callbacks import StabilityMonitor
from tinygpt.train.guards import DivergenceGuard
from tinygpt.train.progress import StepClock
from tinygpt.train.probes.leak_alarm import LeakAlarm
from tinygpt.train.optim import AdamWCosine
from tinygpt.train.init_from import Pretrained, configure
from tinygpt.train.values import build, check_run_keys, no_gpu_driver

# Library messages that say nothing about this run, silenced by exact text; every other warning stays visible.
KNOWN_HARMLESS = (
    r"`isinstance\(treespec, LeafSpec\)` is deprecated",  # torch's pytree deprecation, inside Lightning
    r"Your `IterableDataset` has `__len__` defined",  # num_workers=0 here: __len__ is exact (data.windows)
    # batches are a pure function of the global step (data.windows.RandomWindows), so a mid-epoch resume is exact
    r"You're resuming from a checkpoint that ended before the epoch ended",
)
# ...and, for a run that resumes, these two about dirs inside its own run dir: they are not empty because it resumes
# there, and its history/metrics.csv keeps its rows (run.keep_history). Elsewhere, or in a run that does not resume,
# they stay: they may then be true (e.g. two sweep jobs sharing a dir).
RESUMED_IN_PLACE = (r"Checkpoint directory {run_dir}/\S* exists and is not empty",
                    r"Experiment logs directory {run_dir}/\S* exists and is not empty\. Previous log files")
# ...and, for any resume, Lightning's note that the checkpoint's ModelCheckpoint is missing when it is the only one:
# the run's own note says so, and what it means (callbacks.model_checkpoint is off: nothing this session trains can
# be resumed from); any other missing callback stays visible
ONLY_CHECKPOINTING_MISSING = (r"Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to "
                              r"be provided during `Trainer` instantiation\. Please add the following callbacks: "
                              r"\[\"ModelCheckpoint\{[^\]]*\}\"\]\.")


class _DropTips(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "💡 Tip" not in record.getMessage()  # Lightning's promotional tips


def quiet_libraries(parallel: bool = False) -> None:
    """Known-harmless library messages off; in a job of a parallel sweep also Lightning's info lines (they stay
    in the job's train.log)."""
    for message in KNOWN_HARMLESS:
        warnings.filterwarnings("ignore", message=message)
    for name in ("lightning.pytorch.utilities.rank_zero", "lightning.pytorch"):
        logging.getLogger(name).addFilter(_DropTips())
    if parallel:  # Lightning's own console handlers (on "lightning" and its subpackages) show warnings only
        for name in ("lightning", "lightning.pytorch", "lightning.fabric"):
            for handler in logging.getLogger(name).handlers:
                if type(handler) is logging.StreamHandler:
                    handler.setLevel(logging.WARNING)


def quiet_resume(run_dir: Path) -> None:
    """For a run resuming in ``run_dir``: Lightning's not-empty warnings about dirs inside it off (RESUMED_IN_PLACE)."""
    forms = {str(Path(run_dir).absolute()), os.path.realpath(run_dir)}  # ModelCheckpoint's dirpath is a realpath
    where = "(?:" + "|".join(map(re.escape, sorted(forms))) + ")"
    for message in RESUMED_IN_PLACE:
        warnings.filterwarnings("ignore", message=message.format(run_dir=where))
    warnings.filterwarnings("ignore", message=ONLY_CHECKPOINTING_MISSING)


@dataclass
class TrainingRun:
    """What ``setup`` built for one run: the config (as given and resolved), its output dir, the objects built
    from it, the callbacks the run reads back by name (None where the config leaves one out), and the checkpoint
    it resumes from (path and contents) if any."""

    cfg: DictConfig
    out_dir: Path
    resolved: dict
    dm: Any
    optim: AdamWCosine
    trainer: L.Trainer
    clock: StepClock  # times the steps: the summary's tokens/s (always there)
    stop: GracefulStop  # the signal handler (always there)
    guard: DivergenceGuard | None = None
    stability: StabilityMonitor | None = None
    alarm: LeakAlarm | None = None
    ckpt_path: Path | None = None
    ckpt: dict | None = None
    pretrained: Pretrained | None = None  # init_from's model, when the run starts from one

    @property
    def loggers(self) -> list:
        return self.trainer.loggers


def log_every_run(cfg: DictConfig) -> None:
    """A run shorter than trainer.log_every_n_steps would log no training row (and Lightning warns so): it logs at
    its last step instead, said in one line and recorded as what ran."""
    every, steps = cfg.trainer.get("log_every_n_steps"), cfg.trainer.max_steps
    if isinstance(every, int) and every > steps:
        console.print(f"note: trainer.log_every_n_steps={every} > trainer.max_steps={steps}: logging every {steps} "
                      "steps", soft_wrap=True)
        with open_dict(cfg):
            cfg.trainer.log_every_n_steps = steps


def check_accelerator(trainer: DictConfig) -> None:
    """A GPU asked for where torch sees none (the one value check that needs torch)."""
    if trainer.get("accelerator") in ("gpu", "cuda") and not torch.cuda.is_available():
        raise ConfigError(
            f"trainer.accelerator={trainer.accelerator!r} but no CUDA GPU is visible; "
            "use trainer=cpu or trainer.accelerator=auto."
        )


def first_of_kind(callbacks: list, kind: type):
    """The callback of that kind in the list, or None (the config may leave it out)."""
    return next((c for c in callbacks if isinstance(c, kind)), None)


def setup(cfg: DictConfig, out_dir: Path, group: str | None = None, name: str | None = None) -> TrainingRun:
    """Check every value and build the objects that own them (data module, optimizer recipe, callbacks, loggers,
    trainer); reads no data, starts no W&B run and writes nothing (init_from reads its config.json, its weights' headers
    and its tokenizer, and fetches a Hub model into the Hugging Face cache). Any mistake is one ConfigError. A job of
    a parallel sweep is quiet from here (one line when it ends; the rest goes to its train.log)."""
    parallel = run_dirs.in_parallel_sweep()
    quiet_libraries(parallel)
    set_quiet(parallel)
    with as_config_errors(TypeError, MisconfigurationException):
        check_run_keys(cfg)
        check_accelerator(cfg.trainer)
        pretrained = configure(cfg, command_line_overrides())  # init_from: its architecture and tokenizer into cfg
        if pretrained is not None:
            check_run_keys(cfg)  # again, with the checkpoint's block_size
        log_every_run(cfg)
        resolved = OmegaConf.to_container(cfg, resolve=True)
        GPTConfig(vocab_size=1, **resolved["model"])  # checks model.* (the vocab size comes with the data)
        optim = build("optim", cfg.optim)  # checks optim.*
        warmup = warmup_note(optim, cfg.trainer.max_steps)
        if warmup:
            console.print(warmup, soft_wrap=True)
        for i, node in enumerate(cfg.model.patch):  # each patch's settings, checked as it is built
            build(f"model.patch[{i}]", node)
        distributed.check_launch(cfg.trainer)
        more = more_processes_than_cores(cfg.trainer, int(cfg.data.batch_size))
        if more and distributed.is_rank_zero():
            console.print(more, soft_wrap=True)
        dm = build("data", cfg.data, build("corpus", cfg.corpus))  # checks corpus.* and data.*
        ckpt_path, ckpt = resume_point(cfg, out_dir)
        if ckpt is not None:
            checkpoint.check_resume_optim(ckpt, ckpt_path, optim.settings())
            # before torch too (train.values); here for a sweep's jobs
            check_resume_config(ckpt_path, resolved, default_of=default_of)
            note = schedule_note(ckpt, optim)
            if note:
                console.print(note, soft_wrap=True)
        if ckpt_path is not None:
            quiet_resume(out_dir)
        callbacks = [build(f"callbacks.{k}", c) for k, c in (cfg.get("callbacks") or {}).items()
                     if c is not None]  # callbacks.<name>=null switches one off, as ~callbacks.<name> does
        elsewhere = ckpt_path is not None and run_dir_of(ckpt_path).resolve() != Path(out_dir).resolve()
        if elsewhere and any(isinstance(c, ModelCheckpoint) for c in callbacks):  # Lightning's warning, said plainly
            warnings.filterwarnings("ignore", message=r"The dirpath has changed from .* won't be reloaded\. Only "
                                                      r"`best_model_path` will be reloaded\.")
            console.print(f"note: resuming from another run's checkpoint ({run_dir_of(ckpt_path)}): this run's best "
                          "checkpoint is chosen among its own validations from here on.", soft_wrap=True)
        if ckpt_path is not None and not any(isinstance(c, ModelCheckpoint) for c in callbacks):
            console.print("note: callbacks.model_checkpoint is off: this session saves no checkpoint, so the steps it "
                          f"trains after step {int(ckpt.get('global_step') or 0)} cannot be resumed from.",
                          soft_wrap=True)
        resumes = tracking.resumed_run_id(ckpt_path, out_dir) if ckpt_path is not None else None
        loggers = build_loggers(cfg, group, name, resumes)
        callbacks = in_run_order(only_with_logger(callbacks, bool(loggers)))
        quiet = {}
        if parallel:  # jobs at once share the terminal: no progress bars, one line each
            callbacks = [c for c in callbacks if not isinstance(c, ProgressBar)]
            quiet = {"enable_progress_bar": False}
        precision = cpu_float16(cfg.trainer)
        trainer = build("trainer", cfg.trainer, callbacks=callbacks, logger=loggers or False, **quiet,
                        plugins=[checkpoint.AtomicCheckpointIO(), *distributed.cluster_plugins(), *precision],
                        **({"precision": None} if precision else {}))
    return TrainingRun(cfg, out_dir, resolved, dm, optim, trainer, clock=first_of_kind(callbacks, StepClock),
                       stop=first_of_kind(callbacks, GracefulStop),
                       guard=first_of_kind(callbacks, DivergenceGuard),
                       stability=first_of_kind(callbacks, StabilityMonitor), alarm=first_of_kind(callbacks, LeakAlarm),
                       ckpt_path=ckpt_path, ckpt=ckpt, pretrained=pretrained)


def cpu_float16(trainer_cfg: DictConfig) -> list:
    """trainer.precision=16-mixed (or its old name 16) on the CPU: Lightning would train in bfloat16 instead, with a
    warning (its AMP on the CPU is bfloat16 only); torch's CPU autocast does float16, so the run gets it as asked, with
    a gradient scaler (MixedPrecision with device "cpu"), its products summed in float32 as a GPU sums them
    (float16_products). Returns the precision plugin to pass, or [] for any other case."""
    accelerator = str(trainer_cfg.get("accelerator", "auto"))
    on_cpu = accelerator == "cpu" or (accelerator == "auto" and not torch.cuda.is_available()
                                      and not torch.backends.mps.is_available())
    if str(trainer_cfg.get("precision")) not in ("16-mixed", "16") or not on_cpu:  # 16: Lightning's old name
        return []
    from lightning.pytorch.plugins import MixedPrecision

    return [MixedPrecision("16-mixed", "cpu")]


def command_line_overrides() -> list[str]:
    """The run's overrides as given on the command line (Hydra's task overrides); [] outside a Hydra run."""
    try:
        return list(HydraConfig.get().overrides.task)
    except ValueError:  # HydraConfig was not set: a config composed by hand
        return []


def resume_point(cfg: DictConfig, out_dir: Path) -> tuple[Path | None, dict | None]:
    """The checkpoint this run resumes from (ckpt_path, or last.ckpt for a requeued SLURM job), loaded and
    checked against trainer.max_steps; (None, None) for a fresh run."""
    ckpt_arg = cfg.get("ckpt_path")
    if ckpt_arg is None and distributed.requeued() and run_dirs.last_path_in(out_dir).exists():
        ckpt_arg = "last"  # a requeued SLURM job goes on from where its signal stopped it
    ckpt_path = run_dirs.resolve_ckpt_path(ckpt_arg, out_dir)
    if ckpt_path is None:
        return None, None
    ckpt = checkpoint.load(ckpt_path)
    check_last_is_latest(ckpt_path, int(ckpt.get("global_step") or 0), out_dir)
    checkpoint.check_resume_steps(ckpt, ckpt_path, cfg.trainer.max_steps)
    checkpoint.check_resume_names(ckpt, ckpt_path)
    return ckpt_path, ckpt


def run_identity() -> tuple[Path, str | None, str | None]:
    """(output dir, W&B group, W&B run name) from Hydra: one group per sweep, one run per job."""
    hc = HydraConfig.get()
    out = Path(hc.runtime.output_dir)
    if hc.mode == RunMode.MULTIRUN:
        group = "sweep-" + "-".join(Path(hc.sweep.dir).parts[-2:])
        name = hc.job.override_dirname or f"job{hc.job.num}"
        return out, group, name
    return out, None, None


def build_loggers(cfg: DictConfig, group: str | None, name: str | None, resume_id: str | None = None) -> list:
    """The config's loggers; ``resume_id``: the W&B run of the session this one resumes, which it continues (one
    training run, one W&B run) unless the config names its own id."""
    loggers = []
    for key, lcfg in (cfg.get("logger") or {}).items():
        if key == "wandb":
            mode = tracking.choose_mode(lcfg.get("mode")) if distributed.is_rank_zero() else "offline"  # no run there
            silent = {"silent": True} if run_dirs.in_parallel_sweep() else {}  # one line per job
            same = {"id": resume_id, "resume": "allow"} if resume_id and not lcfg.get("id") else {}
            loggers.append(instantiate(lcfg, mode=mode, group=lcfg.get("group") or group,
                                       name=lcfg.get("name") or name, **silent, **same))
        else:
            loggers.append(instantiate(lcfg))
    return loggers


def only_with_logger(callbacks: list, with_logger: bool) -> list:
    """LearningRateMonitor and Lightning's plain ThroughputMonitor only feed a logger (and the first refuses to run
    without one); the step clock stays, summary.json needs it."""
    if with_logger:
        return callbacks
    return [c for c in callbacks if not isinstance(c, LearningRateMonitor) and type(c) is not ThroughputMonitor]


def in_run_order(callbacks: list) -> list:
    """The step clock first, so it times the step alone (a default one when the config leaves it out: the
    summary's tokens/s come from it), and the signal handler last, so a signal stops after every other hook."""
    clocks = [c for c in callbacks if isinstance(c, StepClock)] or [StepClock()]
    return [clocks[0], *(c for c in callbacks if c is not clocks[0]), GracefulStop()]


def fsdp_strategy(**kwargs):
    """Lightning's FSDPStrategy with the transformer Block as the unit that is wrapped (sharded, gathered
    for its forward and freed after), which the config cannot name as a class set by itself."""
    from lightning.pytorch.strategies import FSDPStrategy

    kwargs = OmegaConf.to_container(kwargs, resolve=True) if isinstance(kwargs, DictConfig) else kwargs
    return FSDPStrategy(auto_wrap_policy={Block}, **kwargs)


def more_processes_than_cores(trainer: DictConfig, batch_size: int) -> str | None:
    """A note for trainer.devices=N on the CPU above its usable cores: N training processes (DDP) share them, and
    the global batch is N times data.batch_size, another run than one process; None otherwise."""
    devices = trainer.get("devices")
    if not (isinstance(devices, int) and devices > 1 and trainer.get("accelerator") in ("cpu", "auto", None)):
        return None
    cores = run_dirs.usable_cores()
    if trainer.get("accelerator") != "cpu" and not no_gpu_driver():
        return None  # devices may name GPUs
    if devices <= cores:
        return None
    return (f"note: trainer.devices={devices} starts {devices} training processes (DDP) on {cores} usable CPU "
            f"core{'s' if cores > 1 else ''}: they take turns, and each step's global batch is {devices} x "
            f"data.batch_size = {devices * batch_size}, another run than one process; trainer.devices=1 for one.")


def warmup_note(optim: AdamWCosine, max_steps: int) -> str | None:
    """A run that ends before its warmup does never trains at optim.lr: say so, with the rate it peaks at. None
    when the warmup ends within the run."""
    from tinygpt.train.optim import lr_at

    if optim.warmup_steps < max_steps:
        return None
    peak = lr_at(max_steps - 1, lr=optim.lr, min_lr=optim.min_lr, warmup_steps=optim.warmup_steps,
                 decay_steps=optim.decay_steps)
    return (f"note: optim.warmup_steps={optim.warmup_steps} is not below trainer.max_steps={max_steps}: the rate "
            f"never reaches optim.lr={as_written(optim.lr)} (it peaks at {peak:.3g} at the last step); lower "
            "optim.warmup_steps to train at the rate you set.")


def schedule_note(ckpt: dict, optim: AdamWCosine) -> str | None:
    """What a resume with a new trainer.max_steps does to the schedule: optim.decay_steps follows it, so the cosine
    is stretched and the rate at the checkpoint's step changes (it may rise again from min_lr). None when the
    decay is unchanged."""
    from tinygpt.train.optim import lr_at

    theirs = ((ckpt.get("hyper_parameters") or {}).get("optim") or {}).get("decay_steps")
    ours = optim.decay_steps
    if not isinstance(theirs, int) or theirs == ours:
        return None
    step = int(ckpt.get("global_step") or 0)
    rates = [lr_at(step, lr=optim.lr, min_lr=optim.min_lr, warmup_steps=optim.warmup_steps, decay_steps=d)
             for d in (theirs, ours)]
    if f"{rates[0]:.3g}" == f"{rates[1]:.3g}":  # still in warmup, say: the rate goes on as it would have
        return None
    how = "stretched" if ours > theirs else "shortened"
    return (f"note: optim.decay_steps follows trainer.max_steps, {theirs} -> {ours}: the cosine decay is {how}, "
            f"so the rate at step {step} goes from {rates[0]:.3g} to {rates[1]:.3g} (summary.json records the new "
            "schedule).")

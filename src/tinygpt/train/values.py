"""Every value a run's config can be checked on before torch, Lightning or W&B is imported.

``check_values`` runs as soon as Hydra has composed the config (train/cli.py), so a bad value is one line within
about a second of Hydra's own start, and again at set-up (train/setup.py), which checks what needs torch as it
builds the objects. Each fact is checked by the code that owns it (GPTConfig, DataConfig, the corpus, the optimizer
recipe); what spans groups or belongs to no object of ours (the trainer's keys) is checked here. This module
imports no torch (a test checks it).
"""

from __future__ import annotations

import difflib
import importlib.util
import itertools
import math
import re
import sys
from dataclasses import fields
from pathlib import Path

from hydra.experimental.callback import Callback
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from tinygpt.data.config import TOKENIZERS, DataConfig
from tinygpt.data.corpus import HfHub, RandomTokens, TextCorpus, hub_reachable_or_cached
from tinygpt.model.config import GPTConfig, default_of
from tinygpt.model.hf_config import check_init_from, read_settings
from tinygpt.runtime.checks import is_int, is_number, positive_int
from tinygpt.runtime.errors import (ConfigError, as_config_errors, cause_of, first_line, print_error,
                                   swept_mistake, switch_mistake)
from tinygpt.runtime.hub import cached_when_hub_unusable, local_model_dir, requested
from tinygpt.runtime.resume_record import (check_last_is_latest, check_resume_config, check_resume_steps,
                                           checkpoint_step)
from tinygpt.runtime.run_dirs import check_archive, resolve_ckpt_path
from tinygpt.runtime.wandb_mode import check_online, requested_mode
from tinygpt.runtime.writable import cannot_write_into
from tinygpt.train import memory
from tinygpt.train.callback_settings import check_callbacks
from tinygpt.train.schema import TrainSchema

LOGGERS = ("wandb", "csv")

# trainer keys Lightning takes as numbers: (what they must be, the test). Lightning takes True for 1 and accepts
# values that fail later (val_check_interval=0 divides by zero): each is refused here in one line instead.
TRAINER_NUMBERS = {
    "val_check_interval": ("a whole number of steps >= 1 (validation is by steps: check_val_every_n_epoch=null)",
                           lambda v: is_int(v) and v >= 1),
    "log_every_n_steps": ("a whole number of steps >= 1", lambda v: is_int(v) and v >= 1),
    "gradient_clip_val": ("a number >= 0, or null for no clipping", lambda v: v is None or (is_number(v) and v >= 0)),
    "num_nodes": ("a whole number >= 1", lambda v: is_int(v) and v >= 1),
    "devices": ("a whole number >= 1, -1 for all, 'auto', or a list of device indices",
                lambda v: (is_int(v) and (v >= 1 or v == -1)) or v == "auto"
                or (isinstance(v, str) and re.fullmatch(r"\d+(,\d+)*,?", v) is not None and v.strip(",") != "0")
                or (isinstance(v, list) and v and all(is_int(i) and i >= 0 for i in v))),
    "check_val_every_n_epoch": ("null (validation by steps) or a whole number of epochs >= 1",
                                lambda v: v is None or (is_int(v) and v >= 1)),
    "num_sanity_val_steps": ("a whole number of batches >= 0, or -1 for all", lambda v: is_int(v) and v >= -1),
    "accumulate_grad_batches": ("a whole number >= 1", lambda v: is_int(v) and v >= 1),
}


ROOT_KEYS = tuple(f.name for f in fields(TrainSchema)) + ("hydra",)  # what the config's root may hold

# Lightning's Trainer arguments (2.6), named without importing it, so a misspelt +trainer.<key> is refused before torch
# (tests/train/test_values.py compares them with the installed Trainer's signature)
TRAINER_KEYS = (
    "accelerator", "strategy", "devices", "num_nodes", "precision", "logger", "callbacks", "fast_dev_run",
    "max_epochs", "min_epochs", "max_steps", "min_steps", "max_time", "limit_train_batches", "limit_val_batches",
    "limit_test_batches", "limit_predict_batches", "overfit_batches", "val_check_interval", "check_val_every_n_epoch",
    "num_sanity_val_steps", "log_every_n_steps", "enable_checkpointing", "enable_progress_bar", "enable_model_summary",
    "accumulate_grad_batches", "gradient_clip_val", "gradient_clip_algorithm", "deterministic", "benchmark",
    "inference_mode", "use_distributed_sampler", "profiler", "detect_anomaly", "barebones", "plugins",
    "sync_batchnorm", "reload_dataloaders_every_n_epochs", "default_root_dir", "enable_autolog_hparams",
    "model_registry")
# the accelerators Lightning names, and the package each needs beyond torch
ACCELERATORS = {"auto": None, "cpu": None, "gpu": None, "cuda": None, "mps": None, "tpu": "torch_xla"}


# what Lightning's Trainer takes as precision (its own list), named without importing it; the config's comment names
# the three a run uses: 32-true, bf16-mixed, 16-mixed
PRECISIONS = ("32-true", "bf16-mixed", "16-mixed", "bf16-true", "16-true", "64-true", "transformer-engine",
              "transformer-engine-float16", "64", "32", "16", "bf16", 64, 32, 16)


def build(key: str, node: DictConfig, *args, **kwargs):
    """instantiate(node, *args, **kwargs); an error names the group it came from (its own sentence names the value).
    ``args`` reach the object as they are (Hydra merges ``kwargs`` into the node)."""
    try:
        return instantiate(node, *args, **kwargs)
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


def check_trainer(trainer: DictConfig) -> None:
    """Its keys, its accelerator, trainer.max_steps and each of TRAINER_NUMBERS that is set, in one sentence each."""
    for key in trainer:
        if not str(key).startswith("_") and key not in TRAINER_KEYS:
            near = difflib.get_close_matches(str(key), TRAINER_KEYS, n=1)
            hint = f"did you mean trainer.{near[0]}?" if near else "python train.py --cfg job shows the trainer's keys."
            raise ConfigError(f"trainer.{key} is not an argument of Lightning's Trainer; {hint}")
    check_accelerator(trainer.get("accelerator"))
    positive_int("trainer.max_steps", trainer.get("max_steps"), " (training is step-based)")
    for key, (what, ok) in TRAINER_NUMBERS.items():
        if key not in trainer:
            continue
        value = trainer.get(key)
        value = OmegaConf.to_container(value) if OmegaConf.is_config(value) else value
        if isinstance(value, bool) or not ok(value):
            shown = "null" if value is None else repr(value)  # as the command line spells it
            hint = (f" (Hydra reads {value!r} as a float: write {int(value)})"
                    if isinstance(value, float) and value.is_integer() and "whole number" in what else "")
            raise ConfigError(f"trainer.{key}={shown} must be {what}{hint}.")
    devices = trainer.get("devices")
    if on_the_cpu(trainer) and devices not in (None, "auto") and not (is_int(devices) and devices >= 1):
        devices = OmegaConf.to_container(devices) if OmegaConf.is_config(devices) else devices
        raise ConfigError(f"trainer.devices={devices!r} must be a whole number of processes >= 1 or 'auto' on the "
                          "CPU (-1 and device lists name GPUs).")
    precision = trainer.get("precision")
    if precision is not None and (isinstance(precision, bool) or precision not in PRECISIONS):
        raise ConfigError(f"trainer.precision={precision!r} is not one of 32-true, bf16-mixed, 16-mixed (or the "
                          "other values Lightning takes: bf16-true, 16-true, 64-true).")


def check_accelerator(accelerator) -> None:
    """One of Lightning's accelerator names, with the package it needs installed (find_spec: nothing imported)."""
    if accelerator is None or not isinstance(accelerator, str):
        return  # an Accelerator object from Python, or Lightning's default
    if accelerator not in ACCELERATORS:
        raise ConfigError(f"trainer.accelerator={accelerator!r} is not one of {', '.join(ACCELERATORS)}.")
    package = ACCELERATORS[accelerator]
    if package and importlib.util.find_spec(package) is None:
        raise ConfigError(f"trainer.accelerator={accelerator!r} needs {package}, which is not installed; use cpu, gpu "
                          "or auto.")
    if accelerator == "mps" and sys.platform != "darwin":
        raise ConfigError(f"trainer.accelerator='mps' is Apple silicon's GPU and this machine is {sys.platform}; use "
                          "cpu, gpu or auto.")


# what a CUDA (or ROCm) driver puts on a Linux machine: without any of them torch sees no GPU either
GPU_DRIVER_FILES = ("/proc/driver/nvidia", "/dev/nvidiactl", "/dev/kfd")


def no_gpu_driver() -> bool:
    """No GPU driver at all: macOS, or Linux without NVIDIA's or ROCm's device files (torch would see no GPU)."""
    return sys.platform == "darwin" or (sys.platform.startswith("linux")
                                        and not any(Path(f).exists() for f in GPU_DRIVER_FILES))


def on_the_cpu(trainer: DictConfig) -> bool:
    """The run will be on the CPU: asked for, or auto on a machine with no GPU driver."""
    accelerator = trainer.get("accelerator")
    return accelerator == "cpu" or (accelerator in (None, "auto") and no_gpu_driver())


def check_gpu_visible(trainer: DictConfig) -> None:
    """A GPU asked for on a machine with no GPU driver at all (macOS, or Linux without NVIDIA's or ROCm's device
    files), refused before torch; where a driver exists, set-up asks torch whether it sees a GPU."""
    if trainer.get("accelerator") not in ("gpu", "cuda"):
        return
    if no_gpu_driver():
        raise ConfigError(f"trainer.accelerator={trainer.accelerator!r} but this machine has no CUDA GPU; use "
                          "trainer=cpu or trainer.accelerator=auto.")


def check_run_keys(cfg: DictConfig) -> None:
    """What spans groups or belongs to no object: required keys, the trainer, block sizes, loggers, diagnostics,
    the seed."""
    extra = sorted(str(k) for k in cfg if k not in ROOT_KEYS)
    if extra:  # +foo=bar: Hydra adds a root key nothing reads, without a word
        near = difflib.get_close_matches(extra[0], ROOT_KEYS, n=1)
        hint = f"did you mean {near[0]}?" if near else "python train.py --cfg job shows the config's keys."
        raise ConfigError(f"{extra[0]} is not a key of the config (nothing would read it); {hint}")
    missing = sorted(OmegaConf.missing_keys(cfg))
    if missing:
        key = missing[0]
        hint = " (one or more UTF-8 text files)" if key == "corpus.path" else ""
        raise ConfigError(f"{key} is required but not set; pass {key}=<value>{hint}.")
    check_trainer(cfg.trainer)
    check_gpu_visible(cfg.trainer)
    if cfg.data.block_size != cfg.model.block_size:
        raise ConfigError(
            f"data.block_size={cfg.data.block_size} must equal model.block_size={cfg.model.block_size}."
        )
    for name in (cfg.get("logger") or {}):
        if name not in LOGGERS:
            raise ConfigError(f"logger {name!r} is not one of {', '.join(LOGGERS)} (or logger=none).")
    if (cfg.get("logger") or {}).get("wandb") is not None:
        forced, where = requested_mode(cfg.logger.wandb.get("mode"))  # a mode by its name
        if forced == "online":  # credentials and the server, before torch (set-up asks again for a sweep's jobs)
            check_online(where)
    positive_int("diagnostics.windows", cfg.diagnostics.windows, " (validation windows to probe)")
    if cfg.diagnostics.max_val_tokens is not None:
        positive_int("diagnostics.max_val_tokens", cfg.diagnostics.max_val_tokens,
                     " (validation tokens the end of a run scores) or null")
    if not isinstance(cfg.seed, int) or isinstance(cfg.seed, bool) or not 0 <= cfg.seed < 2**32:
        raise ConfigError(f"seed={cfg.seed!r} must be an integer in [0, 2**32).")


def check_paths(cfg: DictConfig, run_dir: Path | None) -> None:
    """The files a run starts from: ckpt_path names a checkpoint (or a run dir holding one; ``last``: in
    ``run_dir``), init_from a local model dir or a Hub name GPT-2 has (the Hub itself is asked at set-up)."""
    ckpt = cfg.get("ckpt_path")
    if ckpt not in (None, "") and run_dir is not None:
        try:
            path = resolve_ckpt_path(str(ckpt), run_dir)
            check_archive(path)  # what torch.save writes, checked without torch
        except ConfigError as err:  # resolve_ckpt_path's sentences name ckpt_path; check_archive's the file
            named = str(err) if str(err).startswith("ckpt_path") else f"ckpt_path={str(ckpt)!r}: {err}"
            raise ConfigError(named) from None
        from_pretrained = requested(cfg) is not None  # init_from sets the model and the tokenizer at set-up
        skip = ("model", "data.tokenizer", "data.bpe_vocab_size", "data.block_size") if from_pretrained else ()
        # what the resume may not change, against the run's own config.yaml
        check_resume_config(path, cfg, skip, default_of)
        step = checkpoint_step(path)  # read without torch; set-up checks again with the loaded checkpoint
        if step is not None:  # first: a checkpoint behind its record is the truth to tell, not the record's step
            check_last_is_latest(path, step, run_dir)
        check_resume_steps(path, cfg.trainer.get("max_steps"))
    source = requested(cfg)  # None for scratch; an empty one refused
    if source is not None:
        check_init_from(cfg.model, str(source))  # a model.position GPT-2's weights cannot start, before the Hub
        local = local_model_dir(str(source))
        if local is None:  # a Hub name: where the Hub cannot be used now, the cache must have it
            cached_when_hub_unusable(str(source))
        else:  # its config.json must be GPT-2's (the weights' headers are read at set-up)
            read_settings(local, where=f"init_from={str(source)!r}")


def check_values(cfg: DictConfig, run_dir: Path | None = None) -> None:
    """Every value checked without torch: the run's own keys, the files it starts from (``run_dir``: where
    ``ckpt_path=last`` looks), the callbacks' settings, then the objects that own the rest (the model's settings,
    the optimizer recipe, the corpus and the data settings), built as the run will build them. A model started
    from GPT-2 (init_from) takes its settings from the checkpoint, so they are checked at set-up."""
    with as_config_errors(TypeError):
        check_run_keys(cfg)
        check_paths(cfg, run_dir)
        check_callbacks(cfg.get("callbacks"))
        if requested(cfg) is None:  # scratch (init_from's own model is checked at set-up)
            model = OmegaConf.to_container(cfg.model, resolve=True)
            unknown = sorted(set(model) - {f.name for f in fields(GPTConfig)})
            if unknown:  # added with +model.<key>: the schema took it, the model has no such setting
                raise ConfigError(f"model.{unknown[0]} is not a setting of the model; python train.py --cfg job "
                                  "shows model's keys.")
            GPTConfig(vocab_size=1, **model)  # the vocab comes with the data
            if cfg.check_memory and on_the_cpu(cfg.trainer):  # the floor of the estimate set-up makes (GPU: set-up)
                memory.check_floor(model, int(cfg.data.batch_size))
        build("optim", cfg.optim)
        corpus = build("corpus", cfg.corpus)
        if cfg.check_memory and isinstance(corpus, RandomTokens):
            memory.check_draw(corpus.n_tokens, corpus.draw_bytes())
        data = OmegaConf.to_container(cfg.data, resolve=True)
        if not isinstance(corpus, TextCorpus) and data.get("tokenizer", "char") != "char":  # it would be ignored
            raise ConfigError(f"data.tokenizer={data['tokenizer']!r} tokenizes a text corpus, and "
                              f"corpus={corpus.source} is token ids already; leave data.tokenizer out.")
        data.pop("_target_", None)
        if requested(cfg) is not None:  # init_from sets both (its set-up names a conflict)
            data.update(tokenizer=TOKENIZERS[0], tokenizer_dir=None)
        settings = DataConfig(**data)
        # too short for its splits, said before tokenizing: any corpus that can bound its tokens before reading
        # (most_tokens and named, as TextFile's) is checked, a new one by having them
        if hasattr(corpus, "most_tokens") and requested(cfg) is None:
            most, need = corpus.most_tokens(), settings.block_size + 2
            if most < 2 * need:
                raise ConfigError(f"{corpus.named()} holds {most} bytes, too few for a training and a validation "
                                  f"split of data.block_size + 2 = {need} tokens each (a token is at least one byte); "
                                  "use a larger corpus or a smaller block_size.")
        cache_dir = Path(str(data.get("cache_dir", "data/cache"))).expanduser()
        reason = cannot_write_into(cache_dir)
        if reason:  # the token cache is written before the first step
            raise ConfigError(f"data.cache_dir={data.get('cache_dir')!r} cannot be written: {reason}; give a "
                              "writable directory.")
        if isinstance(corpus, HfHub) and not Path(corpus.name).expanduser().exists():  # a Hub id: is it reachable?
            try:
                hub_reachable_or_cached(corpus.name, cache_dir / "hf")
            except ValueError as err:
                raise ConfigError(str(err)) from None


MAX_JOBS_CHECKED = 1000  # a sweep with more jobs than this checks each swept value alone, not every combination


def swept_values(config: DictConfig) -> dict[str, list] | None:
    """Each swept key of the sweep (its sweeper params, then the command line's, which win) with its values, as
    Hydra will give them to the jobs; None when the sweep also sweeps a group option (``model=tiny,small``: its jobs
    compose different configs, each checks its own values when it starts) or a value Hydra cannot list."""
    from hydra.errors import HydraException

    groups = set(config.hydra.runtime.choices)
    swept = {}
    try:
        for override in sweep_overrides(config):
            if not override.is_sweep_override():
                continue
            key = override.key_or_group
            if key in groups or "/" in key:
                return None
            parent, _, last = key.rpartition(".")
            holder = OmegaConf.select(config, parent, default=None) if parent else config
            known = isinstance(holder, DictConfig) and last in holder.keys()  # a typo: RunDirGuard names it
            known = known or override.is_add()  # +trainer.foo=1,2: added to every job, checked with it
            if known and not key.startswith("hydra") and key != "ckpt_path":
                swept[key] = list(override.sweep_iterator())
    except HydraException:
        return None
    return swept


def sweep_overrides(config: DictConfig) -> list:
    """The sweep's overrides as Hydra parses them: its sweeper params, then the command line's (which win for the
    same key). Raises Hydra's own error for one it cannot read."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    texts = {str(k): f"{k}={v}" for k, v in (config.hydra.sweeper.get("params") or {}).items()}
    texts.update({str(t).split("=", 1)[0]: str(t) for t in config.hydra.overrides.task if "=" in str(t)})
    return OverridesParser.create().parse_overrides(list(texts.values()))


def sweep_keys(config: DictConfig) -> set[str]:
    """Every key (or group) the sweep gives several values."""
    from hydra.errors import HydraException

    try:
        return {o.key_or_group for o in sweep_overrides(config) if o.is_sweep_override()}
    except HydraException:
        return set()


def check_shared(shared: DictConfig, swept: set[str]) -> None:
    """check_values on what a sweep over group options shares; a required key it leaves unset is no mistake when
    the sweep gives it (each job checks its own values when it starts)."""
    try:
        check_values(shared)
    except ConfigError as err:
        unset = re.match(r"(\S+) is required but not set", str(err))
        if not (unset and unset.group(1) in swept):
            raise


def check_each_job(shared: DictConfig, swept: dict[str, list]) -> None:
    """check_values on every job's config (the shared config with that job's swept values), or on each swept value
    alone when there are more than MAX_JOBS_CHECKED jobs."""
    if math.prod(len(v) for v in swept.values()) > MAX_JOBS_CHECKED:
        jobs = [{key: value} for key, values in swept.items() for value in values]
    else:
        jobs = [dict(zip(swept, combo, strict=True)) for combo in itertools.product(*swept.values())]
    for job in jobs:
        cfg = shared.copy()
        for key, value in job.items():
            OmegaConf.update(cfg, key, value, merge=True)
        check_values(cfg)


class SweepValues(Callback):
    """A sweep's values checked before the launcher starts a job or makes a dir: those every job shares (the
    overrides it does not sweep, and the defaults), then each job's swept values; a bad one is one line and exit 2,
    not a failure of some jobs while the others run. (A sweep over group options leaves each job to check its own
    values when it starts.)"""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        from hydra.core.hydra_config import HydraConfig

        HydraConfig.instance().set_config(config)  # ${hydra:...} resolves as in a job (each job sets its own after)
        shared = OmegaConf.masked_copy(config, [k for k in config if k != "hydra"])
        overrides = list(config.hydra.overrides.task)
        typo = swept_mistake(config, overrides, set(config.hydra.runtime.choices)) or switch_mistake(config, overrides)
        if typo:  # a swept key the config lacks or a swept value of the wrong type, named as a single run names it
            print_error(typo)
            sys.exit(2)
        try:
            swept = swept_values(config)
            if swept:  # every job's config: the shared values with its own (a required key may be the swept one)
                with as_config_errors(TypeError):
                    check_each_job(shared, swept)
            else:
                check_shared(shared, sweep_keys(config))
        except ConfigError as err:
            print_error(str(err))
            sys.exit(2)

"""The settings of tinygpt's callbacks (``callbacks.*``), each declared once here, torch-free, and checked on
construction in one sentence naming its key. Each callback takes its settings from its class here
(``AttentionMaps(**settings)`` keeps ``AttentionMapsSettings(**settings)``'s fields as its attributes: ``take``), so
train.py checks every callback's values before torch, Lightning or W&B is imported (``check_callbacks``, from
train/values.py) with the same code the callback runs. The defaults, with their comments, are
configs/callbacks/default.yaml's.
"""

from __future__ import annotations

import importlib.util
from dataclasses import dataclass, fields
from pathlib import Path

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

from tinygpt.runtime.checks import non_negative_int, one_of, positive_int, positive_number, true_or_false
from tinygpt.runtime.errors import ConfigError
from tinygpt.runtime.writable import cannot_write_into
from tinygpt.sampling.checks import check_sampling

LEAK_ACTIONS = ("warn", "stop")
# what a run logs that a checkpoint may monitor: train/loss and val/loss by the LightningModule, val/loss_honest and
# val/loss_probe by HonestLoss (a real run's history holds each: tests/e2e/test_train.py)
MONITORABLE = ("val/loss", "val/loss_honest", "val/loss_probe", "train/loss")


def take(callback, settings) -> None:
    """The checked ``settings`` (one of the classes below) as the callback's attributes. (A callback does not
    subclass its settings: a dataclass instance passed to Hydra's instantiate, as the Trainer's callbacks are, would
    be turned into a config node.)"""
    vars(callback).update(vars(settings))


@dataclass
class AttentionMapsSettings:
    every_n_steps: int = 500
    probe: str = "ROMEO:\nBut soft, what light through yonder window breaks?"

    def __post_init__(self):
        if not self.probe:
            raise ValueError("callbacks.attention_maps.probe is empty; give a line of text to draw attention on.")
        non_negative_int("callbacks.attention_maps.every_n_steps", self.every_n_steps, " (0: only at the end)")


@dataclass
class TextSamplesSettings:
    prompt: str = "\n"
    max_new_tokens: int = 200
    temperature: float = 0.8
    top_k: int | None = 40
    seed: int = 0
    final_only: bool = False

    def __post_init__(self):
        if not isinstance(self.prompt, str) or not self.prompt:
            raise ValueError(f"callbacks.text_samples.prompt={self.prompt!r} must be a non-empty text each sample "
                             "continues (the default is a newline).")
        try:
            check_sampling(self.temperature, self.top_k)
        except ValueError as err:
            raise ValueError(f"callbacks.text_samples.{err}") from None
        non_negative_int("callbacks.text_samples.max_new_tokens", self.max_new_tokens, " (0: no samples)")
        true_or_false("callbacks.text_samples.final_only", self.final_only)


@dataclass
class HonestLossSettings:
    windows: int = 16
    positions: int = 8

    def __post_init__(self):
        positive_int("callbacks.honest_loss.windows", self.windows)
        positive_int("callbacks.honest_loss.positions", self.positions)


@dataclass
class StabilityMonitorSettings:
    every_n_steps: int = 50
    windows: int = 8
    spike_factor: float = 1.5
    spike_window: int = 50
    future_leak: bool = False
    softmax_gradients: bool = True
    at_start: bool = True
    train_batch_qk: bool = False

    def __post_init__(self):
        for key in ("every_n_steps", "windows", "spike_window"):
            positive_int(f"callbacks.stability.{key}", getattr(self, key))
        positive_number("callbacks.stability.spike_factor", self.spike_factor)
        if not self.spike_factor > 1:
            raise ValueError(f"callbacks.stability.spike_factor={self.spike_factor!r} must be above 1.")
        true_or_false("callbacks.stability.future_leak", self.future_leak)
        true_or_false("callbacks.stability.softmax_gradients", self.softmax_gradients)
        true_or_false("callbacks.stability.at_start", self.at_start)
        true_or_false("callbacks.stability.train_batch_qk", self.train_batch_qk)


@dataclass
class LeakAlarmSettings:
    action: str = "warn"
    windows: int = 8
    tolerance: float = 1.0e-4
    min_gap: float = 0.05
    z: float = 3.0

    def __post_init__(self):
        one_of("callbacks.leak_alarm.action", self.action, LEAK_ACTIONS)
        positive_int("callbacks.leak_alarm.windows", self.windows)
        for key in ("tolerance", "min_gap", "z"):
            positive_number(f"callbacks.leak_alarm.{key}", getattr(self, key))


@dataclass
class DivergenceGuardSettings:
    factor: float = 3.0
    every_n_steps: int = 1

    def __post_init__(self):
        positive_number("callbacks.divergence_guard.factor", self.factor)
        positive_int("callbacks.divergence_guard.every_n_steps", self.every_n_steps)


@dataclass
class HeapTrimSettings:
    every_n_steps: int = 50

    def __post_init__(self):
        positive_int("callbacks.heap_trim.every_n_steps", self.every_n_steps)


@dataclass
class StepProgressBarSettings:
    refresh_rate: int = 1

    def __post_init__(self):
        non_negative_int("callbacks.progress_bar.refresh_rate", self.refresh_rate, " (0: no bar)")


def settings_of(target: str) -> type | None:
    """The settings class of a callback ``_target_`` (``tinygpt.train.guards.HeapTrim`` -> HeapTrimSettings), None
    for one that is not ours or has no settings."""
    if not target.startswith("tinygpt."):
        return None
    return globals().get(target.rsplit(".", 1)[-1] + "Settings")


def check_lightning_callback(name: str, target: str, node: DictConfig) -> None:
    """The values of Lightning's own callbacks in the config that Lightning would refuse only once built (after
    torch): a checkpoint's monitored metric, mode and count, the learning-rate monitor's interval."""
    key = f"callbacks.{name}"
    if target.endswith("ModelCheckpoint"):
        if node.get("monitor") not in (None, *MONITORABLE):
            raise ConfigError(f"{key}.monitor={node.get('monitor')!r} is not a metric a run logs (one of "
                              f"{', '.join(MONITORABLE)}, or null for the last checkpoint only).")
        if node.get("mode", "min") not in ("min", "max"):
            raise ConfigError(f"{key}.mode={node.get('mode')!r} is not one of min, max.")
        top_k = node.get("save_top_k", 1)
        if isinstance(top_k, bool) or not isinstance(top_k, int) or top_k < -1:
            raise ConfigError(f"{key}.save_top_k={top_k!r} must be a whole number >= -1 (-1: keep all, 0: none).")
        check_dirpath(key, node)
    if target.endswith("LearningRateMonitor") and node.get("logging_interval") not in (None, "step", "epoch"):
        raise ConfigError(f"{key}.logging_interval={node.get('logging_interval')!r} is not one of step, epoch "
                          "(or null).")


def check_dirpath(key: str, node: DictConfig) -> None:
    """A checkpoint dir the run could not write is refused now, not at the first save: found out without creating
    anything (``cannot_write_into``). A dirpath that resolves only inside a job (``${hydra:...}`` in a sweep's
    shared config) is left to that job's own check."""
    try:
        dirpath = node.get("dirpath")
    except InterpolationResolutionError:
        return
    if dirpath is None:
        return
    if not isinstance(dirpath, str) or not dirpath.strip():
        raise ConfigError(f"{key}.dirpath={dirpath!r} must be a directory path (or null for Lightning's default).")
    reason = cannot_write_into(Path(dirpath).expanduser())
    if reason:
        raise ConfigError(f"{key}.dirpath={dirpath!r} cannot be written: {reason}; give a writable directory.")


def check_callbacks(callbacks: DictConfig | None) -> None:
    """Each of our callbacks' settings, as the callback will take them (callbacks.<name>=null leaves one out)."""
    for name, node in (callbacks or {}).items():
        if node is None:
            continue
        target = str(node.get("_target_", ""))
        package = target.split(".")[0]
        if not target or importlib.util.find_spec(package) is None:  # the top package only: finding a submodule
            raise ConfigError(f"callbacks.{name}._target_={target!r} cannot be imported (no package {package!r}); "
                              "give a callback class as package.module.Class.")  # would import its parents
        check_lightning_callback(name, target, node)
        settings = settings_of(target)
        if settings is None:
            continue
        given = {k: v for k, v in OmegaConf.to_container(node, resolve=True).items() if not k.startswith("_")}
        known = {f.name for f in fields(settings)}
        unknown = sorted(set(given) - known)
        if unknown and settings is not StepProgressBarSettings:  # the bar passes Lightning's own options on
            owner = settings.__name__.removesuffix("Settings")
            raise ConfigError(f"callbacks.{name}.{unknown[0]} is not a setting of {owner} (its settings: "
                              f"{', '.join(sorted(known))}).")
        settings(**{k: v for k, v in given.items() if k in known})

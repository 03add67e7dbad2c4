"""What a resume may not change, compared with the run's own record (its config.yaml) without torch: a resume with
another seed, model, data setting or optimizer setting is refused in one line before anything heavy is imported.
(A checkpoint outside a run dir has no record: set-up compares its optimizer settings with the checkpoint's.)"""

from __future__ import annotations

import json
import pickle
import zipfile
from collections import OrderedDict
from pathlib import Path
from typing import Any

from tinygpt.runtime.checks import as_written
from tinygpt.runtime.errors import ConfigError

# the optimizer's settings a resume cannot change: the optimizer's state and its schedule's base rate come back from
# the checkpoint, so a new value would be recorded but never trained with (decay_steps follows trainer.max_steps,
# which a resume may raise: the schedule is code, and takes the new value)
FIXED_ON_RESUME = ("lr", "min_lr", "warmup_steps", "betas", "weight_decay")

# what defines a run besides its optimizer: a resume that changes one would train another run than the one its
# record describes (the seed drives the batches after the checkpoint; a model option may leave every weight's shape
# as it was; the validation windows define val/loss, which the run's curve and its best checkpoint compare across
# the resume)
FIXED_RUN_KEYS = ("seed", "model", "corpus", "data.tokenizer", "data.bpe_vocab_size", "data.train_fraction",
                  "data.block_size", "data.batch_size", "data.overfit", "data.val_windows",
                  "data.val_end_aligned")


# how the steps after the checkpoint are taken: a resume that changed one would train its later steps otherwise than
# its record (one config.yaml for the whole run) says
FIXED_TRAINER_KEYS = ("trainer.gradient_clip_val", "trainer.precision", "trainer.accumulate_grad_batches")


def run_dir_of(ckpt: Path) -> Path:
    """The run dir a checkpoint file belongs to (<run>/checkpoints/x.ckpt -> <run>; else the file's folder)."""
    return ckpt.parent.parent if ckpt.parent.name == "checkpoints" else ckpt.parent


_NO_DEFAULT = object()  # what no setting equals


def differences(key: str, old: Any, new: Any, default_of=None) -> list[tuple[str, Any, Any]]:
    """The leaves where two config values differ, as (dotted key, old, new). A key the old record lacks (a run from
    before the setting existed) counts only when the new value is not the setting's default (``default_of``: dotted
    key -> its default, from the dataclass that owns it; the caller's, since runtime knows no model): such a run
    computed what the default computes."""
    if isinstance(old, dict) and isinstance(new, dict):
        return [d for k in sorted(set(old) | set(new))
                if not (k not in old and default_of is not None
                        and new.get(k) == default_of(f"{key}.{k}", _NO_DEFAULT))
                for d in differences(f"{key}.{k}", old.get(k), new.get(k), default_of)]
    if isinstance(old, (list, tuple)) and isinstance(new, (list, tuple)):
        old, new = list(old), list(new)
    return [] if old == new else [(key, old, new)]


def _at(tree: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        tree = tree.get(part) if isinstance(tree, dict) else None
    return tree


def check_resume_config(path: Path, cfg, skip: tuple[str, ...] = (), default_of=None) -> None:
    """Refuse to resume with a setting of FIXED_RUN_KEYS or optim.FIXED_ON_RESUME other than the run's recorded one
    (its config.yaml; a run without one is not checked here), in one line naming the key and both values. ``cfg``:
    this run's config (a DictConfig, resolved here key by key, or a resolved dict); ``skip``: keys (and the keys
    under them) not compared, because set-up has yet to set them (init_from's architecture and tokenizer);
    ``default_of``: a setting's default, for the keys a run recorded before they existed (``differences``)."""
    from omegaconf import OmegaConf

    recorded = run_dir_of(path) / "config.yaml"
    if not recorded.is_file():
        return
    theirs = OmegaConf.to_container(OmegaConf.load(recorded))
    ours = cfg if isinstance(cfg, dict) else None
    for dotted in (*FIXED_RUN_KEYS, *(f"optim.{k}" for k in FIXED_ON_RESUME)):
        if any(dotted == s or dotted.startswith(f"{s}.") for s in skip):
            continue
        new, old = _select(cfg, ours, dotted), _at(theirs, dotted)
        if dotted.startswith("optim.") and (old is None or new is None):
            continue  # an optimizer without this setting
        for key, was, now in differences(dotted, old, new, default_of):
            if dotted.startswith("optim."):
                raise ConfigError(optimizer_changed(path, key, was, now))
            raise ConfigError(
                f"ckpt_path={str(path)!r} belongs to a run with {key}={was!r}, but this run sets {now!r}: a resume "
                f"continues that run; resume with {key}={was!r}, or start a new run.")
    for dotted in FIXED_TRAINER_KEYS:
        new, old = _select(cfg, ours, dotted), _at(theirs, dotted)
        if old is not None and new is not None and new != old:
            raise ConfigError(
                f"ckpt_path={str(path)!r} was trained with {dotted}={old!r}, but this run sets {new!r}: the steps "
                f"after the checkpoint would be taken otherwise than the run's record says; resume with "
                f"{dotted}={old!r}, or start a new run.")
    decay, max_steps = _select(cfg, ours, "optim.decay_steps"), _select(cfg, ours, "trainer.max_steps")
    was_decay, was_max = _at(theirs, "optim.decay_steps"), _at(theirs, "trainer.max_steps")
    follows = decay == max_steps and was_decay == was_max  # the config's default: the schedule follows max_steps
    if decay is not None and was_decay is not None and decay != was_decay and not follows:
        raise ConfigError(
            f"ckpt_path={str(path)!r} was trained with optim.decay_steps={was_decay!r}, but this run sets "
            f"{decay!r}: the schedule would change after the checkpoint while the run's record names one; resume "
            f"with optim.decay_steps={was_decay!r} (or leave it to follow trainer.max_steps, as by default), or start "
            "a new run.")


def _select(cfg, resolved: dict | None, dotted: str):
    """``dotted`` in this run's config: a resolved dict's value, or a DictConfig's resolved node."""
    from omegaconf import OmegaConf

    if resolved is not None:
        return _at(resolved, dotted)
    node = OmegaConf.select(cfg, dotted)
    return OmegaConf.to_container(node, resolve=True) if OmegaConf.is_config(node) else node


# the statuses that end a run, the one list of them: a run that ran its course (completed; diverged: the guard stopped
# it; leaky: the leak alarm's action=stop did) is never resumed by ckpt_path=last, and a continued sweep skips it; an
# interrupted or failed run may resume
ENDED = ("completed", "diverged", "leaky")


def read_summary(path: Path) -> tuple[dict | None, str | None]:
    """A run's summary.json as (its record, None); (None, why) for a file that is not one a run wrote whole (not
    UTF-8, cut short, not JSON, not an object: a job killed while writing it, a damaged copy); (None, None) without
    the file. Never raises: whoever reads a run's record decides what a damaged one means."""
    try:
        record = json.loads(path.read_bytes().decode("utf-8"))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        return None, f"{path.name}: {type(err).__name__}: {err}"
    if not isinstance(record, dict):
        return None, f"{path.name}: a JSON {type(record).__name__}, not a run's summary"
    return record, None


def check_resume_steps(path: Path, max_steps) -> None:
    """A run that ended at trainer.max_steps or later, resumed from its last.ckpt without raising it, refused from
    its summary.json before torch (set-up checks the checkpoint's own step too, for any checkpoint)."""
    summary = run_dir_of(path) / "summary.json"
    if path.name != "last.ckpt" or not summary.is_file() or not isinstance(max_steps, int):
        return
    record, _ = read_summary(summary)
    if record is None:
        return
    steps = record.get("steps")
    if record.get("status") in ENDED and isinstance(steps, int) and steps >= max_steps:
        raise ConfigError(already_at(path, steps, max_steps))


class _Stub:
    """Whatever a checkpoint's pickle names (tensors, configs): built from nothing, so no class is ever imported."""

    def __init__(self, *args, **kwargs) -> None:
        pass

    def __setstate__(self, state) -> None:
        pass


class _StepReader(pickle.Unpickler):
    """Reads the checkpoint's dict with every class and tensor replaced by a _Stub (no torch, no code run)."""

    def find_class(self, module, name):
        return OrderedDict if (module, name) == ("collections", "OrderedDict") else _Stub

    def persistent_load(self, pid) -> None:  # a tensor's storage: never read
        return None


def archive_pickle(archive: zipfile.ZipFile) -> str | None:
    """The name of a torch archive's pickle (``<name>/data.pkl``, what torch.save writes); None when it has none."""
    return next((n for n in archive.namelist() if n.count("/") == 1 and n.endswith("/data.pkl")), None)


def checkpoint_record(path: Path) -> Any:
    """What a torch archive's pickle holds, every class and tensor a stub, read without torch (a few ms, where
    torch.load needs torch, seconds; nothing is imported or run); None when it cannot be read so."""
    try:
        with zipfile.ZipFile(path) as archive:
            return _StepReader(archive.open(archive_pickle(archive))).load()
    except Exception:  # anything unexpected: torch reads it at set-up and says what is wrong
        return None


def checkpoint_step(path: Path) -> int | None:
    """The global_step a Lightning checkpoint records (checkpoint_record); None when it cannot be read so."""
    record = checkpoint_record(path)
    step = record.get("global_step") if isinstance(record, dict) else None
    return step if isinstance(step, int) and not isinstance(step, bool) else None


def alarm_stopped(path: Path) -> int | None:
    """The step at which the leak alarm stopped the run this checkpoint is from (the alarm's state in it, read without
    torch: ``LeakAlarm.state_dict``); None when it did not, or the checkpoint cannot be read so."""
    record = checkpoint_record(path)
    states = record.get("callbacks") if isinstance(record, dict) else None
    for key, state in (states.items() if isinstance(states, dict) else ()):
        if str(key).startswith("LeakAlarm") and isinstance(state, dict) and state.get("stopped"):
            step = state.get("detected_step")
            return step if isinstance(step, int) and not isinstance(step, bool) else -1
    return None


def check_last_is_latest(path: Path, step: int, out_dir: Path) -> None:
    """A last.ckpt behind its run's record (summary.json counts more steps: a session trained after it without
    saving a checkpoint, ~callbacks.model_checkpoint), resumed into that run's own dir (``out_dir``), is refused:
    resuming would train those steps again over the record of them."""
    summary = run_dir_of(path) / "summary.json"
    if path.name != "last.ckpt" or not summary.is_file() or run_dir_of(path).resolve() != out_dir.resolve():
        return
    try:
        record = json.loads(summary.read_text())
    except (OSError, ValueError):
        return
    steps = record.get("steps") if isinstance(record, dict) else None
    if isinstance(steps, int) and steps > step:
        raise ConfigError(
            f"ckpt_path={str(path)!r} is at step {step}, but its run's summary.json records {steps} steps: a later "
            f"session trained without saving a checkpoint, and resuming would train steps {step + 1}-{steps} again "
            f"over that record; to go on from step {step} anyway, resume into a new dir (hydra.run.dir=<new dir> "
            f"ckpt_path={str(path)!r}).")


def optimizer_changed(path: Path, key: str, was, now) -> str:
    """The sentence for a resume that sets an optimizer setting other than the one the run trained with."""
    was, now = as_written(was), as_written(now)  # 1e12, not 1000000000000.0
    return (f"ckpt_path={str(path)!r} was trained with {key}={was}, but this run sets {now}: a resume restores "
            f"the optimizer and its schedule, so the new value would not train; resume with {key}={was}, or start "
            "a new run.")


def already_at(path: Path, step: int, max_steps: int) -> str:
    """The sentence for a resume from a checkpoint that is not before trainer.max_steps."""
    return (f"ckpt_path={str(path)!r} is already at step {step}, not before trainer.max_steps={max_steps}; raise "
            "trainer.max_steps to train further.")

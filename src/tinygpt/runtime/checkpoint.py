"""Checkpoints: atomic writes, safe loading (``weights_only=True``), and the checks a resume needs before
any work starts (readable, not past max_steps, same model shape, same tokenizer)."""

from __future__ import annotations

import contextlib
import os
import pickle
from pathlib import Path
from typing import Any

import torch
from lightning.pytorch.plugins.io import TorchCheckpointIO

from tinygpt.runtime.errors import CheckpointWriteError, ConfigError, first_line
from tinygpt.runtime.old_runs import outdated, refusal
from tinygpt.runtime.resume_record import (ENDED, FIXED_ON_RESUME, already_at, differences, optimizer_changed,
                                          read_summary, run_dir_of)
from tinygpt.runtime.run_dirs import LAST, check_archive, last_path_in



class AtomicCheckpointIO(TorchCheckpointIO):
    """Lightning's torch.save, into a temporary file beside the target and renamed over it: a failed or
    interrupted write (disk full, a kill) never leaves a truncated file where a good one was."""

    def save_checkpoint(self, checkpoint: dict[str, Any], path, storage_options=None) -> None:
        path = Path(path)
        tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # a dir that cannot be made is a failed write too
            torch.save(checkpoint, tmp)
            os.replace(tmp, path)
        except (OSError, RuntimeError) as err:  # torch's C++ writer reports a full disk as a RuntimeError
            why = write_failure(path, err)  # while the partial file still fills the disk (removed, it frees it)
            _remove(tmp)
            raise CheckpointWriteError(why) from err
        finally:
            _remove(tmp)


def _remove(tmp: Path) -> None:
    """The temporary file gone, if there was one (under a dir that could not be made, there is nothing to remove)."""
    with contextlib.suppress(OSError):
        tmp.unlink(missing_ok=True)


def write_failure(path: Path, err: BaseException) -> str:
    """One sentence for a checkpoint that could not be written: why (a full disk named as such, with the space
    left), and which checkpoint is the last good one."""
    import errno
    import shutil

    try:
        free = shutil.disk_usage(path.parent).free
    except OSError:
        free = None
    full = getattr(err, "errno", None) == errno.ENOSPC or (free is not None and free < 64 * 2**20)
    why = (f"no space left on the disk holding {path.parent}: {free / 2**20:.0f} MiB free" if full and free is not None
           else (getattr(err, "strerror", None) or str(err).strip().splitlines()[0] if str(err).strip() else
                 type(err).__name__))
    good = sorted((p for p in path.parent.glob("*.ckpt") if p.is_file()), key=lambda p: p.stat().st_mtime)
    last = f"the last good checkpoint is {good[-1]}" if good else "no earlier checkpoint exists"
    return f"could not write checkpoint {path} ({why}); {last}, unchanged."


def last_path(trainer) -> Path:
    """Where last.ckpt lives: ModelCheckpoint's dir, or <run dir>/checkpoints without one."""
    cb = trainer.checkpoint_callback
    return Path(cb.dirpath) / LAST if cb is not None and cb.dirpath else last_path_in(trainer.default_root_dir)


def load(path: str | Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """A checkpoint written by train.py, loaded with ``weights_only=True`` (an untrusted file cannot run
    code); a file that is not one gives one sentence."""
    check_archive(path)
    try:
        ckpt = torch.load(path, map_location=map_location, weights_only=True)
    except pickle.UnpicklingError:
        raise ConfigError(f"checkpoint {str(path)!r} is not a readable checkpoint (it holds Python objects other than "
                          "tensors and plain data; not loaded, since such a file can run code).") from None
    except Exception as err:  # truncated archives and the like
        raise ConfigError(f"checkpoint {str(path)!r} is not a readable checkpoint ({first_line(err)[:160]}).") from None
    if not isinstance(ckpt, dict) or "state_dict" not in ckpt or "hyper_parameters" not in ckpt:
        raise ConfigError(f"checkpoint {str(path)!r} was not written by train.py (no state_dict/hyper_parameters).")
    return ckpt


def model_weights(state_dict: dict[str, Any]) -> dict[str, Any]:
    """The GPT's own entries of a LightningModule state dict (``model.`` prefix removed): what GPT.load_state_dict
    takes. The one place that knows the module holds the GPT as ``model``."""
    return {k.removeprefix("model."): v for k, v in state_dict.items() if k.startswith("model.")}


def describe(model: dict, vocab_size: int) -> str:
    keys = ("n_layer", "n_head", "n_embd", "block_size")
    return ", ".join(f"{k}={model.get(k)}" for k in keys) + f", vocab {vocab_size}"


def check_resume_steps(ckpt: dict, path: Path, max_steps: int) -> None:
    """Refuse a checkpoint past max_steps, or at max_steps from a run that ended. One at max_steps from a run stopped
    in its end-of-run phase (or killed before its summary) is taken: the resume runs that phase only."""
    step = int(ckpt.get("global_step", 0))
    if step > max_steps or (step == max_steps and run_ended(path)):
        raise ConfigError(already_at(path, step, max_steps))


def check_resume_optim(ckpt: dict, path: Path, optim: dict) -> None:
    """Refuse to resume with an optimizer setting other than the checkpoint's (FIXED_ON_RESUME), in one line
    naming the key and both values."""
    theirs = (ckpt.get("hyper_parameters") or {}).get("optim") or {}
    for key in FIXED_ON_RESUME:
        if key in theirs and key in optim and differences(key, theirs[key], optim[key]):
            raise ConfigError(optimizer_changed(path, f"optim.{key}", theirs[key], optim[key]))


def check_resume_names(ckpt: dict, path: Path) -> None:
    """Refuse to resume a run written by an earlier version under names it has since changed (its checkpoint's
    settings, or the columns of the history it would carry on): one line naming the migration script."""
    run = run_dir_of(path)
    history = run / "history" / "metrics.csv"
    columns = history.read_text(encoding="utf-8").partition("\n")[0].split(",") if history.is_file() else []
    old = outdated(columns, ckpt.get("hyper_parameters") or {})
    if old:
        raise ConfigError(refusal(f"ckpt_path={str(path)!r}", old, run))


def run_ended(path: Path) -> bool:
    """Whether the run whose checkpoint this is (``<run dir>/checkpoints/<file>``) ended: its summary.json says
    completed, diverged or leaky, not interrupted or failed."""
    record, _ = read_summary(run_dir_of(path) / "summary.json")
    return record is not None and record.get("status") in ENDED


def check_resume_model(ckpt: dict, path: Path, state_dict: dict[str, torch.Tensor], model: dict,
                       vocab_size: int, tokenizer_json: str | None) -> None:
    """Refuse a checkpoint whose weights do not fit this run's model, or whose tokenizer differs from this
    run's data (the same vocab size with other symbols would train on silently scrambled ids)."""
    hp = ckpt["hyper_parameters"]
    theirs = {k: tuple(v.shape) for k, v in model_weights(ckpt["state_dict"]).items()}
    ours = {k: tuple(v.shape) for k, v in state_dict.items()}
    if theirs != ours:
        raise ConfigError(
            f"ckpt_path={str(path)!r} holds a model with {describe(hp.get('model', {}), hp.get('vocab_size'))}, "
            f"but this run builds {describe(model, vocab_size)}; resume with the checkpoint's model and data settings."
        )
    theirs_tok = ckpt.get("tokenizer")
    if (theirs_tok is None) != (tokenizer_json is None):
        trained, here = (("text through a tokenizer", "token ids without one (corpus=random_tokens)")
                         if theirs_tok else ("token ids without a tokenizer", "text through a tokenizer"))
        raise ConfigError(
            f"ckpt_path={str(path)!r} was trained on {trained}, but this run's data are {here}, with the same vocab "
            f"size {vocab_size}; resume on the data it was trained on."
        )
    if tokenizer_json is not None and theirs_tok != tokenizer_json:
        raise ConfigError(
            f"ckpt_path={str(path)!r} was trained with another tokenizer than this run's data makes (same vocab "
            f"size {vocab_size}, different symbols: the corpus was edited or replaced, or tokenized otherwise); resume "
            "on the data it was trained on."
        )


def world_size_note(ckpt: dict, path: Path, world_size: int, batch_size: int) -> str | None:
    """A note when a checkpoint trained on another number of processes is resumed: the global batch (processes x
    data.batch_size) changes, so the run does not continue as it would have. None when it matches (or is unknown)."""
    theirs = ckpt.get("world_size")
    if theirs is None or theirs == world_size:
        return None
    return (f"note: ckpt_path={str(path)!r} was trained on {theirs} process(es) (global batch {theirs * batch_size}), "
            f"this run has {world_size} (global batch {world_size * batch_size}): each step from here sees a "
            f"{'smaller' if world_size < theirs else 'larger'} batch than before; resume with the same trainer "
            "settings to continue exactly.")

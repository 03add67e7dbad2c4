"""summary.json: what a run leaves for reports, sweeps and benchmarks to read (its schema in one place).

Every run writes it into its output dir, atomically: at the end (status ``completed``, ``diverged`` or ``leaky``, the
leak alarm's stop, with the end-of-run diagnostics) or when a signal stops it (``interrupted``, with the signal).
Non-finite numbers are written as null. The keys are listed in docs/running.md, "What a run writes".
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
from functools import partial
from pathlib import Path
from typing import Any

from tinygpt.runtime.console import fmt

STATUSES = ("completed", "diverged", "leaky", "interrupted")  # a run's own; "failed" is set by mark_failed

# fields that are measured, not computed, so a resumed run's differ from an uninterrupted run's (timings: summed over
# its sessions, as the steps were timed), or say how it ran; every other field of a resumed run equals the
# uninterrupted run's (tests/train/test_end_of_run.py)
NOT_COMPARABLE = ("tokens_per_sec", "train_seconds", "step_seconds_median", "first_step_unix_time",
                  "first_step_peak_rss_mib", "peak_rss_mib",
                  "stab_leak_seconds", "leak_alarm_seconds", "resumed_from", "wandb")

# the end-of-run diagnostics copied to the top level (all of them are also under "diagnostics")
DIAGNOSTIC_KEYS = (
    "val_loss_honest",
    "honest_positions",  # scored positions per probe window
    "val_loss_probe",  # teacher-forced, on the same probe windows
    "future_leak",
    "attn_entropy",
    "attn_max_logit",
    "attn_future_mass",
    "attn_mask_margin",  # largest future score - largest past score of any row (what an added fill must outweigh)
    "attn_visible_floor",  # the lowest row's largest past score (what a replacing fill must stay below)
    "loss_by_position",  # teacher-forced, one value per position
)


@functools.cache
def code_version() -> dict[str, Any] | None:
    """The commit of the checkout this code runs from and whether tracked files differ from it (a report can then
    say which code made its runs); None away from a git checkout (an installed package)."""
    root = Path(__file__).resolve().parents[3]
    if not (root / ".git").exists():
        return None
    try:
        commit = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return {"commit": commit, "dirty": bool(dirty)} if commit else None


def write_summary(out_dir: Path, values: dict[str, Any]) -> Path:
    """summary.json in the run's output dir, with the code's commit (code_version); non-finite floats become null.
    Written atomically."""
    def clean(v):
        return None if isinstance(v, float) and not math.isfinite(v) else v

    values = {**values, "code": values.get("code") or code_version()}

    path = out_dir / "summary.json"
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps({k: clean(v) for k, v in values.items()}, indent=2, default=str))
    tmp.replace(path)
    return path


def mark_failed(out_dir: Path, message: str) -> None:
    """summary.json says ``failed`` (with the error), so a ``completed`` left by an earlier run in the same dir never
    stands for one that then failed. Best effort: on a full disk even this may not be written."""
    path = out_dir / "summary.json"
    try:
        values = json.loads(path.read_text()) if path.exists() else {}
        values.update(status="failed", error=message)
        write_summary(out_dir, values)
    except (OSError, ValueError):
        pass


def base_summary(status: str, *, module, trainer, timer, guard, stability, dm, ckpt_path: Path | None,
                 resolved: dict, alarm=None) -> dict[str, Any]:
    """What every summary holds, from the module (losses), the trainer (steps, world size), the step clock
    (tokens/s), the divergence guard, stability monitor and leak alarm (any may be left out of the config), the
    data (vocab size) and the resolved config."""
    import torch  # here: train/cli.py reads this module before torch is imported (train.values)

    from tinygpt.train.progress import peak_rss_mib

    if status not in STATUSES:
        raise ValueError(f"summary status {status!r} is not one of {', '.join(STATUSES)}.")
    return {
        "status": status,
        "train_loss": module.tail_train_loss(0.1),
        "val_loss": module.last_val_loss,
        "diverged": bool(guard and guard.diverged),
        "divergence": guard.reason if guard and guard.diverged else None,
        "loss_spikes": stability.spikes if stability else None,
        "grad_norm_max": stability.max_grad_norm if stability else None,  # before clipping, sampled
        "stab_leak_seconds": stability.leak_seconds if stability else None,  # the stability probes' leak checks
        "steps": trainer.global_step,
        "tokens_per_sec": timer.tokens_per_sec,
        "train_seconds": timer.seconds,
        "step_seconds_median": timer.median_step_seconds,
        "first_step_unix_time": timer.first_step_at,  # for the start-up time (scripts/benchmark.py)
        "first_step_peak_rss_mib": timer.first_step_peak_rss_mib,  # what imports and set-up held (benchmark.py)
        "peak_rss_mib": peak_rss_mib(),  # this session's process, so far
        "threads": torch.get_num_threads(),
        "world_size": trainer.world_size,
        "n_params": module.model.num_params(),
        "vocab_size": dm.vocab_size,
        "resumed_from": str(ckpt_path) if ckpt_path else None,  # also set by a requeued SLURM job
        **(alarm.summary() if alarm else {"leak_detected_step": None}),
        "config": resolved,
    }


def with_diagnostics(summary: dict[str, Any], diag: dict, wandb: dict | None) -> dict[str, Any]:
    """A finished run's summary: the diagnostics' headline values at the top level (None for a diverged run,
    which has none), where its W&B run lives, and the whole diagnostics block."""
    summary.update({key: diag.get(key) for key in DIAGNOSTIC_KEYS})
    summary["wandb"] = wandb
    summary["diagnostics"] = diag  # the above on the probe windows, plus per-layer values
    return summary


def done_line(summary: dict[str, Any], path: Path, job: str | None = None) -> str:
    """The line a finished run prints (rich markup); ``job`` names a sweep job that runs beside others."""
    show = partial(fmt, missing="n/a", finite_only=True)  # None, NaN and the infinities show as n/a
    return (
        f"[bold green]done[/]{f' ({job})' if job else ''}: {summary['steps']} steps, "
        f"train loss {show(summary['train_loss'], '.4f')}, "
        f"val loss {show(summary['val_loss'], '.4f')} (honest "
        f"{show(summary['val_loss_honest'], '.4f')}, future leak {show(summary['future_leak'], '.3g')}), "
        f"{summary['tokens_per_sec'] or 0:,.0f} tokens/s -> {path}"
    )

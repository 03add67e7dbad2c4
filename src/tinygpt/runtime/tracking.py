"""Weights & Biases set-up: online when wandb finds credentials and its server answers, otherwise offline
with one notice line; quiet; each job its own run, closed at the end with the `wandb sync` hint."""

from __future__ import annotations

from pathlib import Path

from lightning.pytorch.loggers import WandbLogger
from rich.console import Console

from tinygpt.runtime import network, wandb_mode
from tinygpt.runtime.console import is_quiet
from tinygpt.runtime.errors import ConfigError  # noqa: F401 (re-exported: what choose_mode raises)
from tinygpt.runtime.internals import drop_wandb_anonymous, wandb_without_pandas
from tinygpt.runtime.network import REACH_TIMEOUT_S, unreachable  # noqa: F401 (re-exported)
from tinygpt.runtime.wandb_mode import MODES, has_credentials, requested_mode  # noqa: F401 (re-exported)

console = Console(stderr=True)


def choose_mode(requested: str | None) -> str:
    """The logger's mode: as asked (config, then WANDB_MODE); else online when wandb has credentials and
    its server answers within seconds; else offline, saying why when credentials exist. A mode forced online
    gets the same checks, and a ConfigError (one line) when either fails: no waiting for wandb's retries."""
    forced, where = requested_mode(requested)
    if forced:
        if forced == "online":
            wandb_mode.check_online(where)
        return forced
    if not wandb_mode.has_credentials():
        return "offline"
    url = wandb_mode._wandb_settings().base_url
    reason = network.unreachable(url)
    if reason:
        console.print(f"W&B: credentials found but {url} is unreachable ({reason}); logging offline.", soft_wrap=True)
        return "offline"
    return "online"


class QuietWandbLogger(WandbLogger):
    """Lightning's WandbLogger without the deprecated `anonymous` setting (wandb warns about it on every run)
    and with wandb's console output limited to warnings and errors; our own lines say where the run is.
    ``silent``: nothing at all (a job of a parallel sweep, beside others on the same terminal)."""

    def __init__(self, *args, silent: bool = False, **kwargs):
        quiet = {"quiet": True, "show_info": False}
        kwargs.setdefault("settings", {**quiet, "silent": True} if silent else quiet)  # passed on to wandb.init
        super().__init__(*args, **kwargs)
        drop_wandb_anonymous(self)
        wandb_without_pandas()  # no pandas import to check each image for a DataFrame (runtime/internals.py)


def resumed_run_id(ckpt_path: Path, out_dir: Path) -> str | None:
    """The W&B run id of the session a resume in place continues: its summary.json's, else (an interrupted session
    records none) the id of the newest W&B run dir under <run>/wandb; None for a checkpoint of another dir or a run
    that logged no W&B run."""
    import json

    from tinygpt.runtime.resume_record import run_dir_of

    run_dir = run_dir_of(ckpt_path)
    if run_dir.resolve() != out_dir.resolve():
        return None
    try:
        record = json.loads((run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        record = None
    wandb = record.get("wandb") if isinstance(record, dict) else None
    if isinstance(wandb, dict) and wandb.get("id"):
        return str(wandb["id"])
    sessions = sorted((run_dir / "wandb").glob("*run-*-*"), key=lambda d: d.name.split("-")[-2])
    return sessions[-1].name.rsplit("-", 1)[1] if sessions else None


def sessions_of(run_dir: Path) -> list[Path]:
    """Every local dir of the W&B run ``run_dir`` belongs to (one per session of a resumed run), oldest first:
    ``wandb sync`` uploads them in that order."""
    wandb_id = run_dir.name.rsplit("-", 1)[1]
    return sorted(run_dir.parent.glob(f"*run-*-{wandb_id}"), key=lambda d: d.name.split("-")[-2]) or [run_dir]


def run_info() -> dict | None:
    """Where this job's W&B run lives: id, group, name, mode and the local run dir."""
    import wandb

    run = wandb.run
    if run is None:
        return None
    return {"id": run.id, "group": run.group or None, "name": run.name, "mode": run.settings.mode,
            "dir": str(Path(run.dir).parent)}


def finish(loggers: list, exit_code: int | None = None, hint: bool = True) -> None:
    """Close this job's W&B run (so the next job of a sweep gets its own) and say how to sync an offline one
    (``hint``: not for a run whose dir is about to go). A W&B never imported has no run; nor has one whose import a
    signal cut short (its module half-made)."""
    import sys

    if not any(isinstance(lg, WandbLogger) for lg in loggers) or "wandb.sdk.wandb_run" not in sys.modules:
        return
    try:
        import wandb

        if wandb.run is None:
            return
    except (ImportError, AttributeError):  # the first import was interrupted: no run was started
        return
    run_dir, mode = Path(wandb.run.dir).parent, wandb.run.settings.mode
    offline = mode in ("offline", "dryrun")
    url = None if offline else wandb.run.url
    wandb.finish(exit_code=exit_code)
    if offline and hint and not is_quiet():  # a parallel sweep's table gives the hint once for all its jobs
        dirs = " ".join(str(d) for d in sessions_of(run_dir))
        console.print(f"W&B ran offline. To upload: [bold]wandb sync {dirs}[/]", soft_wrap=True)
    elif url:
        console.print(f"W&B run: {url}")

"""The modes W&B runs in, and the check of a requested one that needs neither wandb nor torch (so a mistyped
``logger.wandb.mode`` or ``WANDB_MODE`` is refused with the other values, before anything heavy is imported)."""

from __future__ import annotations

import os

from tinygpt.runtime.errors import ConfigError

MODES = ("online", "offline", "disabled", "dryrun", "shared")  # what wandb.init(mode=...) takes


def requested_mode(configured: str | None) -> tuple[str | None, str]:
    """The mode asked for (the config's, else WANDB_MODE's, else None) and where it was asked; a mode that is none
    of MODES is one ConfigError naming the key or the variable."""
    where = "logger.wandb.mode" if configured else "WANDB_MODE"
    forced = configured or os.environ.get("WANDB_MODE") or None
    if forced is not None and forced not in MODES:
        raise ConfigError(f"{where}={forced!r} is not one of {', '.join(MODES)}.")
    return forced, where

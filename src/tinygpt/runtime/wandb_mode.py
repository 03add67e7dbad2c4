"""The modes W&B runs in, and the check of a requested one that needs neither wandb nor torch (so a mistyped
``logger.wandb.mode`` or ``WANDB_MODE`` is refused with the other values, before anything heavy is imported)."""

from __future__ import annotations

import os

from tinygpt.runtime.errors import ConfigError

MODES = ("online", "offline", "disabled", "dryrun", "shared")  # what wandb.init(mode=...) takes


def requested_mode(configured: str | None) -> tuple[str | None, str]:
    """The mode asked for (the config's, else WANDB_MODE's, else None) and where it was asked; a mode that is none
    of MODES, an empty one included (wandb would fail on it with a traceback), is one ConfigError naming the key or
    the variable."""
    if configured is not None:
        where, forced = "logger.wandb.mode", configured
    else:
        where, forced = "WANDB_MODE", os.environ.get("WANDB_MODE")
    if forced is not None and forced not in MODES:
        unset = " (or unset it)" if where == "WANDB_MODE" else " (or null to go by WANDB_MODE and the server)"
        raise ConfigError(f"{where}={forced!r} is not one of {', '.join(MODES)}{unset}.")
    return forced, where

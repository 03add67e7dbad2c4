"""The modes W&B runs in, and the checks of a requested one that need no torch (so a mistyped ``logger.wandb.mode``
or ``WANDB_MODE``, or a forced online mode without credentials or server, is refused with the other values, before
anything heavy is imported)."""

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


def _wandb_settings():
    import wandb

    return wandb.setup().settings


def has_credentials() -> bool:
    """Ask wandb itself (the lookup `wandb.login(prompt=False)` does, without its network call): a session
    login, WANDB_API_KEY, the .netrc entry for wandb's configured host, or an api_key setting."""
    from tinygpt.runtime.internals import wandb_stored_credentials

    if os.environ.get("WANDB_API_KEY") or os.environ.get("WANDB_IDENTITY_TOKEN_FILE"):
        return True
    try:
        settings = _wandb_settings()
        return bool(settings.api_key or wandb_stored_credentials(settings.base_url))
    except Exception:  # a wandb whose lookup fails: assume none, run offline
        return False


def check_online(where: str) -> None:
    """A mode forced online (``where``: the key or the variable that forced it) needs credentials and a server that
    answers: one ConfigError when either is missing, no waiting for wandb's retries."""
    from tinygpt.runtime import network

    if not has_credentials():
        raise ConfigError(f"{where}=online but wandb has no credentials; run `wandb login` (or set "
                          "WANDB_API_KEY), or log offline: WANDB_MODE=offline.")
    url = _wandb_settings().base_url
    reason = network.unreachable(url)
    if reason:
        raise ConfigError(f"{where}=online but {url} is unreachable ({reason}); log offline with "
                          "WANDB_MODE=offline and upload later with `wandb sync`.")

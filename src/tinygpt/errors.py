"""Mistakes in the configuration or the input: reported as one line, `error: <sentence>`, exit status 2."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager


class ConfigError(ValueError):
    """A bad config value or input file, found before training starts. The message is one sentence that
    names the key (or file), the bad value and what is expected."""


def first_line(err: BaseException) -> str:
    """An exception's message as one line (Hydra and OmegaConf add context lines below the first)."""
    text = str(err).strip() or type(err).__name__
    return text.splitlines()[0].strip()


@contextmanager
def as_config_errors(*kinds: type[BaseException]):
    """Re-raise ``kinds`` (default: ValueError and the instantiate/OmegaConf errors) as ConfigError: used
    around the set-up phase, where any such error is a mistake in the config, not a bug in a run."""
    from hydra.errors import InstantiationException
    from omegaconf.errors import OmegaConfBaseException

    kinds = kinds or (ValueError, InstantiationException, OmegaConfBaseException)
    try:
        yield
    except ConfigError:
        raise
    except kinds as err:
        cause = err.__cause__ if isinstance(err, InstantiationException) and err.__cause__ else err
        raise ConfigError(first_line(cause)) from err


def full_traceback_requested() -> bool:
    """Hydra's convention: HYDRA_FULL_ERROR=1 shows the whole traceback instead of the one line."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def print_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)

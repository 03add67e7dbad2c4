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


def cause_of(err: BaseException) -> BaseException:
    """The error an object raised, unwrapped from Hydra's InstantiationException around it."""
    from hydra.errors import InstantiationException

    return err.__cause__ if isinstance(err, InstantiationException) and err.__cause__ else err


@contextmanager
def as_config_errors(*extra: type[BaseException]):
    """Re-raise ValueError, Hydra's instantiate and OmegaConf errors (and ``extra`` kinds) as ConfigError: used
    around the set-up phase, where any such error is a mistake in the config, not a bug in a run."""
    from hydra.errors import InstantiationException
    from omegaconf.errors import OmegaConfBaseException

    try:
        yield
    except ConfigError:
        raise
    except (ValueError, InstantiationException, OmegaConfBaseException, *extra) as err:
        raise ConfigError(first_line(cause_of(err))) from err


def full_traceback_requested() -> bool:
    """Hydra's convention: HYDRA_FULL_ERROR=1 shows the whole traceback instead of the one line."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def print_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)

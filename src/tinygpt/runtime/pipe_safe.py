"""A run outlives the reader of its output: ``python train.py | tee log`` stopped by Ctrl-C (tee dies with it) or
``| head`` (which stops reading) must not end the run at its next print.

Python ignores SIGPIPE, so a write to a pipe nobody reads raises BrokenPipeError wherever the run happens to print:
the run died with exit status 1 and nothing saved. ``guard_stdout`` wraps sys.stdout so that, once its reader is
gone, what would have gone there goes to stderr (still the terminal, in ``| tee``), and sys.stderr so that, once its
own reader is gone too (``2>&1 | head``), the rest goes nowhere (train.log keeps the run's log); the run saves,
records and ends as it would have.
"""

from __future__ import annotations

import io
import os
import sys
from collections.abc import Callable
from functools import cache


@cache
def _nowhere():
    """os.devnull, opened once: where output goes when no stream is left to read it."""
    return open(os.devnull, "w")  # noqa: SIM115 (kept open for the process's life)


class PipeSafe(io.TextIOBase):
    """A stream (sys.stdout), until a write finds its pipe closed; ``fallback()`` (stderr) from then on."""

    def __init__(self, stream, fallback: Callable[[], object] = lambda: sys.stderr) -> None:
        self._stream = stream
        self._fallback = fallback
        self.broken = False

    def _target(self):
        return self._fallback() if self.broken else self._stream

    def write(self, text: str) -> int:
        try:
            return self._target().write(text)
        except BrokenPipeError:
            self.broken = True
            return self._fallback().write(text)

    def flush(self) -> None:
        try:
            self._target().flush()
        except BrokenPipeError:
            self.broken = True

    def isatty(self) -> bool:
        return self._target().isatty()

    def fileno(self) -> int:
        return self._target().fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        return getattr(self._target(), "encoding", "utf-8")

    def __getattr__(self, name):  # buffer, errors, ...: the current stream's
        return getattr(self._target(), name)


def guard_stdout() -> None:
    """Wrap sys.stderr and sys.stdout (once each): a closed pipe sends the rest of stdout to stderr, and the rest of
    stderr, when its pipe closes too, nowhere."""
    if not isinstance(sys.stderr, PipeSafe) and sys.stderr is not None:
        sys.stderr = PipeSafe(sys.stderr, fallback=_nowhere)
    if not isinstance(sys.stdout, PipeSafe) and sys.stdout is not None:
        sys.stdout = PipeSafe(sys.stdout)

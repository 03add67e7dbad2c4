"""A run outlives the reader of its output: ``python train.py | tee log`` stopped by Ctrl-C (tee dies with it) or
``| head`` (which stops reading) must not end the run at its next print.

Python ignores SIGPIPE, so a write to a pipe nobody reads raises BrokenPipeError wherever the run happens to print:
the run died with exit status 1 and nothing saved. ``guard_stdout`` wraps sys.stdout so that, once its reader is
gone, what would have gone there goes to stderr (still the terminal, in ``| tee``), and the run saves, records and
ends as it would have.
"""

from __future__ import annotations

import io
import sys


class PipeSafe(io.TextIOBase):
    """sys.stdout, until a write finds its pipe closed; stderr from then on."""

    def __init__(self, stream) -> None:
        self._stream = stream
        self.broken = False

    def _target(self):
        return sys.stderr if self.broken else self._stream

    def write(self, text: str) -> int:
        try:
            return self._target().write(text)
        except BrokenPipeError:
            self.broken = True
            return sys.stderr.write(text)

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
    """Wrap sys.stdout (once) so that a closed pipe sends the rest of the output to stderr."""
    if not isinstance(sys.stdout, PipeSafe) and sys.stdout is not None:
        sys.stdout = PipeSafe(sys.stdout)

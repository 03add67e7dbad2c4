"""How `python train.py` ends as a process: one wrapper around Hydra's main for its exit statuses.

A mistyped option, key or value is one line and exit status 2 (tinygpt.runtime.errors); a run stopped by a signal,
with everything saved, ends at once with 128 + the signal (no teardown in which a second Ctrl-C would kill the
process); a finished run skips the interpreter's teardown of every module (tinygpt.runtime.fast_exit, about a second).
"""

from __future__ import annotations

import signal
import sys
from collections.abc import Callable
from pathlib import Path

from tinygpt.runtime.errors import print_error, unknown_keys_as_config_errors
from tinygpt.runtime.fast_exit import exit_without_teardown
from tinygpt.runtime.options import mistyped_option
from tinygpt.runtime.pipe_safe import guard_stdout
from tinygpt.runtime.run_dirs import discard_unstarted_run


class TerminatedWhileStarting(KeyboardInterrupt):
    """SIGTERM before the run's own handlers: stops start-up as Ctrl-C does (Python's default for SIGTERM ends the
    process without a word, leaving a half-made run dir that blocks the next run there)."""


def _terminated_while_starting(signum, frame) -> None:
    raise TerminatedWhileStarting


def run(main: Callable[[], object], config_dir: Path) -> None:
    """Call Hydra's decorated ``main`` (which reads sys.argv) with ``config_dir``'s group options checked first, and
    end the process as described above."""
    guard_stdout()  # a closed pipe (| head, | tee stopped by Ctrl-C) must not end the run at its next print
    typo = mistyped_option(sys.argv[1:], config_dir)  # optional groups too, which Hydra would skip without a word
    if typo:
        print_error(typo)
        sys.exit(2)
    previous = signal.signal(signal.SIGTERM, _terminated_while_starting)  # until the run installs its own
    try:
        with unknown_keys_as_config_errors(config_dir):
            main()  # an error leaves through Hydra's sys.exit, with the interpreter's full teardown
    except KeyboardInterrupt as stopped:  # a signal while starting (importing, setting up), before the run's handlers
        name = "SIGTERM" if isinstance(stopped, TerminatedWhileStarting) else "SIGINT"
        discard_unstarted_run()
        print(f"interrupted by {name} while starting: nothing was trained or saved.", file=sys.stderr, flush=True)
        exit_without_teardown(143 if name == "SIGTERM" else 130)
    except SystemExit as stopped:
        if isinstance(stopped.code, int) and stopped.code >= 128:  # stopped by a signal, all saved: end at once
            exit_without_teardown(stopped.code)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
    exit_without_teardown(0)

"""How `python train.py` ends as a process: one wrapper around Hydra's main for its exit statuses.

A mistyped option, key or value is one line and exit status 2 (tinygpt.runtime.errors); a run stopped by a signal,
with everything saved, ends at once with 128 + the signal (no teardown in which a second Ctrl-C would kill the
process); a finished run skips the interpreter's teardown of every module (tinygpt.runtime.fast_exit, about a second).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path

from tinygpt.runtime.errors import print_error, unknown_keys_as_config_errors
from tinygpt.runtime.fast_exit import exit_without_teardown
from tinygpt.runtime.options import mistyped_option
from tinygpt.runtime.run_dirs import discard_unstarted_run


def run(main: Callable[[], object], config_dir: Path) -> None:
    """Call Hydra's decorated ``main`` (which reads sys.argv) with ``config_dir``'s group options checked first, and
    end the process as described above."""
    typo = mistyped_option(sys.argv[1:], config_dir)  # optional groups too, which Hydra would skip without a word
    if typo:
        print_error(typo)
        sys.exit(2)
    try:
        with unknown_keys_as_config_errors(config_dir):
            main()  # an error leaves through Hydra's sys.exit, with the interpreter's full teardown
    except KeyboardInterrupt:  # Ctrl-C while starting (importing, setting up), before the run's own handlers
        discard_unstarted_run()
        print("interrupted by SIGINT while starting: nothing was trained or saved.", file=sys.stderr, flush=True)
        exit_without_teardown(130)
    except SystemExit as stopped:
        if isinstance(stopped.code, int) and stopped.code >= 128:  # stopped by a signal, all saved: end at once
            exit_without_teardown(stopped.code)
        raise
    exit_without_teardown(0)

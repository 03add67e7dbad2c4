"""End `python train.py` without the interpreter's teardown of every imported module.

After a run, Python's finalization frees torch's, Lightning's and dynamo's module state object by object, which
takes most of a second on every run, sweep job and test (docs/benchmarks.md). The process is ending anyway, so the
work is skipped: what exiting must still do is done first, in the interpreter's own order (threading._shutdown
joins non-daemon threads, e.g. an executor still writing files; atexit handlers, e.g. W&B's service shutdown and
logging's final flush), then the standard streams are flushed and the process ends with os._exit.
"""

from __future__ import annotations

import os
import sys

from tinygpt.runtime.internals import exit_steps


def exit_without_teardown(code: int = 0) -> None:
    """Run what a normal exit runs (thread joins, atexit handlers, stream flushes), then end the process at
    once with ``code``. Falls back to a normal exit on a Python without the hooks used here."""
    steps = exit_steps()  # threading's and atexit's own (tinygpt.runtime.internals)
    if steps is None:
        sys.exit(code)
    for step in steps:
        step()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):  # closed or broken pipe: nothing left to write to
            pass
    os._exit(code)

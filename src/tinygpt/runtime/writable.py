"""Can files be written there? Tried, not guessed from permission bits (root passes every access check, yet
cannot create a file under /proc): the one home of that rule, for run dirs, the token cache, reports and exports."""

from __future__ import annotations

import os
from pathlib import Path


def cannot_write(path: Path) -> str | None:
    """None when ``path`` is (or can be made) a dir a file can be written into; else why not. Tried, not guessed
    from permission bits: root passes every access check, yet cannot create a dir under /proc."""
    import tempfile

    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".write-test-", dir=path)  # unique: jobs and threads probe at once
        os.close(fd)
        os.unlink(probe)
    except OSError as err:
        return err.strerror or str(err)
    return None


def cannot_write_into(folder: Path) -> str | None:
    """None when files can be written into ``folder`` (which may not exist yet), found out without creating anything:
    the nearest of it and its parents that exists must be a dir that takes a file (``cannot_write``, whose probe file
    is removed); else why not, for a sentence "<what> cannot be written: <why>; <what to do>."."""
    base = folder
    while not base.exists():
        base = base.parent
    if not base.is_dir():
        return f"{base} is a file, not a directory"
    reason = cannot_write(base)  # an existing folder: nothing created there but the probe's own temporary file
    return f"no file can be created in {base} ({reason})" if reason else None

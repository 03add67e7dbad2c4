"""Where a run talks: ``out``, the rich console for what it says as it goes (the data and model lines, text
samples, W&B's sync hint), and ``say`` for the lines that must always show (a run's done line, a divergence).

A job of a parallel sweep runs beside others that share the terminal, so it keeps ``out`` quiet and says only its
done line (``set_quiet``); the sweep's table at the end lists every job. Errors and warnings go to stderr
elsewhere and are never quieted.
"""

from __future__ import annotations

import math

from rich.console import Console

out = Console()


def set_quiet(quiet: bool) -> None:
    """Silence (or restore) ``out`` for this process."""
    out.quiet = quiet


def is_quiet() -> bool:
    return bool(out.quiet)


def say(*objects, **kwargs) -> None:
    """Print on ``out`` even when it is quiet."""
    quiet, out.quiet = out.quiet, False
    try:
        out.print(*objects, **kwargs)
    finally:
        out.quiet = quiet


def fmt(value: float | None, spec: str, missing: str = "-", finite_only: bool = False) -> str:
    """A number as ``format(value, spec)`` for a line or a table cell, or ``missing`` where there is none: None, and
    with ``finite_only`` a NaN or an infinity too."""
    if value is None or (finite_only and not math.isfinite(value)):
        return missing
    return format(value, spec)


def count(n: int) -> str:
    """A parameter count as a person reads it: every digit below a million (``85,632``: a tiny model is not "0M"),
    millions with one decimal up to 100M (``10.7M``), whole millions above (``124M``, ``1,558M``)."""
    if n < 1_000_000:
        return f"{n:,}"
    return f"{n / 1e6:,.1f}M" if n < 100_000_000 else f"{n / 1e6:,.0f}M"

"""Regenerate an experiment's report (Markdown + PNGs) from the runs' own files.

    python scripts/report.py causal_mask multirun/causal_mask/<date_time> [more sweep dirs] [--out DIR]
    python scripts/report.py sqrt_dk multirun/sqrt_dk/<date_time> [--out DIR]

Reads only what each run left in its directory (tinygpt.analysis.sweep); each experiment's module writes its
report (tinygpt.analysis.causal_mask, tinygpt.analysis.sqrt_dk).
"""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

from tinygpt.analysis.sweep import ReportError, load_runs
from tinygpt.runtime.errors import print_error

EXPERIMENTS = ("causal_mask", "sqrt_dk")
DOCS = Path(__file__).resolve().parents[3] / "docs" / "experiments"  # the committed reports (a source checkout)


def write(experiment: str, sweeps: list[Path], out: Path | None = None) -> tuple[Path, int]:
    """Write ``experiment``'s report from the runs under ``sweeps`` into ``out`` (default: its committed place,
    docs/experiments/<experiment>/). Returns (the report's path, how many runs it read)."""
    if experiment not in EXPERIMENTS:
        raise ReportError(f"experiment {experiment!r} is not one of {', '.join(EXPERIMENTS)}.")
    runs = load_runs(sweeps)
    out = out or DOCS / experiment
    out.mkdir(parents=True, exist_ok=True)
    module = importlib.import_module(f"tinygpt.analysis.{experiment}")
    return module.write_report(runs, out, sweeps), len(runs)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/report.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=EXPERIMENTS)
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep dirs (each job dir holds summary.json)")
    parser.add_argument("--out", type=Path, default=None, help="default: docs/experiments/<experiment>/")
    args = parser.parse_args(argv)
    try:
        path, n = write(args.experiment, args.sweeps, args.out)
    except ReportError as err:
        print_error(f"report: {err}")
        return 2
    print(f"report: {n} runs -> {path}")
    return 0

"""Regenerate an experiment's report (Markdown + PNGs) from the runs' own files.

    python scripts/report.py causal_mask multirun/causal_mask/<date_time> [more sweep dirs] [--out DIR]
    python scripts/report.py sqrt_dk multirun/sqrt_dk/<date_time> [--out DIR]

Reads only what each run left in its directory: summary.json (final numbers, the resolved config),
history/metrics.csv (per-step metrics), attention/stepNNNNNN.npz (the final attention weights) and
samples.jsonl (text samples). Never W&B, so a report works offline and from a copied sweep dir.
"""

from __future__ import annotations

import argparse
import csv
import json
import math
import statistics
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

EXPERIMENTS = ("causal_mask", "sqrt_dk")


@dataclass
class Run:
    """One job's files."""

    dir: Path
    summary: dict
    history: dict[str, tuple[list[int], list[float]]] = field(default_factory=dict)  # key -> (steps, values)

    @property
    def config(self) -> dict:
        return self.summary["config"]

    @property
    def seed(self) -> int:
        return self.config["seed"]

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        steps, values = self.history.get(key, ([], []))
        return np.asarray(steps), np.asarray(values, dtype=float)

    def attention(self) -> dict | None:
        """The last saved attention weights: {"weights": (n_layer, H, T, T), "labels": [...], "step"}."""
        files = sorted((self.dir / "attention").glob("step*.npz"))
        if not files:
            return None
        with np.load(files[-1]) as z:
            return {"weights": z["weights"], "labels": list(z["labels"]), "step": int(files[-1].stem[4:])}

    def last_sample(self) -> str | None:
        path = self.dir / "samples.jsonl"
        if not path.exists():
            return None
        lines = path.read_text(encoding="utf-8").splitlines()
        return json.loads(lines[-1])["text"] if lines else None


def read_history(path: Path) -> dict[str, tuple[list[int], list[float]]]:
    """Lightning's CSVLogger file -> {metric: (steps, values)}, skipping empty cells."""
    out: dict[str, tuple[list[int], list[float]]] = {}
    if not path.exists():
        return out
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            step = int(row["step"])
            for key, value in row.items():
                if key in ("step", "epoch") or value in ("", None):
                    continue
                steps, values = out.setdefault(key, ([], []))
                steps.append(step)
                values.append(float(value))
    return out


def load_runs(sweep_dirs: list[Path]) -> list[Run]:
    """Every job dir (one holding summary.json) under the given dirs, in a stable order."""
    runs = []
    for root in sweep_dirs:
        if not root.exists():
            raise SystemExit(f"report: {root} does not exist.")
        for summary in sorted(root.rglob("summary.json")):
            run = Run(summary.parent, json.loads(summary.read_text()))
            run.history = read_history(summary.parent / "history" / "metrics.csv")
            runs.append(run)
    if not runs:
        raise SystemExit(f"report: no summary.json under {', '.join(map(str, sweep_dirs))}; is it a sweep dir?")
    return runs


# ----------------------------------------------------------------------------- numbers


def mean_spread(values: list[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (0 for a single value); NaN/None dropped."""
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return float("nan"), float("nan")
    return statistics.fmean(vals), statistics.stdev(vals) if len(vals) > 1 else 0.0


def fmt(mean: float, spread: float, digits: int = 3) -> str:
    if not math.isfinite(mean):
        return "n/a"
    return f"{mean:.{digits}f} ± {spread:.{digits}f}"


def band(runs: list[Run], key: str) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray] | None:
    """Steps common to all runs, and the mean, min and max of ``key`` across runs at each."""
    series = [r.series(key) for r in runs]
    series = [s for s in series if len(s[0])]
    if not series:
        return None
    common = sorted(set.intersection(*(set(s[0].tolist()) for s in series)))
    if not common:
        return None
    stack = np.stack([np.interp(common, s[0], s[1]) for s in series])  # (runs, steps)
    return np.asarray(common), stack.mean(0), stack.min(0), stack.max(0)


def smooth(values: np.ndarray, n: int = 5) -> np.ndarray:
    """Trailing moving average over n points (the first points average what exists)."""
    c = np.cumsum(np.insert(values, 0, 0.0))
    out = np.empty_like(values)
    for i in range(len(values)):
        lo = max(0, i + 1 - n)
        out[i] = (c[i + 1] - c[lo]) / (i + 1 - lo)
    return out


def save(fig, path: Path) -> Path:
    """Lay out and write a matplotlib Figure as a PNG."""
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return path


def finish_axes(ax, xlabel: str, ylabel: str, title: str | None = None, legend: bool = True) -> None:
    """Labels, title, grid and legend, the same on every plot."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title, fontsize=10)
    ax.grid(alpha=0.3, which="both")
    if legend:
        ax.legend(fontsize=7)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in rows]
    return "\n".join(lines)


def sweep_wall_seconds(runs: list[Run]) -> float:
    """From the first job's config.yaml to the last job's summary.json (file times)."""
    starts = [(r.dir / "config.yaml").stat().st_mtime for r in runs if (r.dir / "config.yaml").exists()]
    ends = [(r.dir / "summary.json").stat().st_mtime for r in runs]
    return max(ends) - min(starts) if starts else float("nan")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=EXPERIMENTS)
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep dirs (each job dir holds summary.json)")
    parser.add_argument("--out", type=Path, default=None, help="default: docs/experiments/<experiment>/")
    args = parser.parse_args(argv)
    runs = load_runs(args.sweeps)
    out = args.out or Path(__file__).resolve().parents[1] / "docs" / "experiments" / args.experiment
    out.mkdir(parents=True, exist_ok=True)
    if args.experiment == "causal_mask":
        import report_causal_mask as experiment
    else:
        import report_sqrt_dk as experiment
    path = experiment.write_report(runs, out, args.sweeps)
    print(f"report: {len(runs)} runs -> {path}")


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    main()

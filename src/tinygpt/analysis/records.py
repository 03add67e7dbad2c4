"""The run records a committed report is written from, kept beside it: what the report reads of each run and no
more, in one small file anyone can regenerate the report from (``scripts/report.py <experiment> <records file>``).

A sweep's run dirs hold hundreds of MB (checkpoints, W&B, every window at every position) and are not kept; a
report that declares what it reads (``KEEP``, a ``Reads``) has its runs reduced to that when it is written from a
sweep, the reduction saved as ``runs.json.gz`` beside the report, and the report then written from the saved file:
from a sweep and from its records, the same input, so the same bytes. The file is gzip'd JSON with sorted keys and
no timestamp in its header, so it is the same bytes for the same runs too.

Each record: the job dir's name as the sweep wrote it, the ``experiment=`` it ran, its command-line overrides and
the keys its sweep varied (what the report's checks of the grid read), when it started and ended (its config.yaml's
and summary.json's file times: the sweep's wall time), the summary's keys the report names (the
config whole), the history series it names, and per validation window the final teacher-forced loss averaged over
positions (``window_means``, the one per-window measure kept: a (windows,) array instead of (windows, positions)).
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from tinygpt.analysis.sweep import ReportError, Run

FILE = "runs.json.gz"
FORMAT = 1  # the records' layout; a file of another layout is refused


@dataclass(frozen=True)
class Reads:
    """What a report reads of each run: ``summary`` keys (the config is always kept), ``history`` series (exact
    names, or a prefix ending in "/" for every series under it), whether it reads each validation window's mean
    loss, which other per-window measures (sweep.WINDOW_MEASURES: 'last', 'copy', 'probe', 'honest'), whether
    the loss at each position averaged over the windows, which diagnostics.npz arrays whole (small ones:
    'honest_window_position', 'probe_index'), and of which runs the saved attention maps and last text sample
    (``pictured``: the runs -> those the figures and explorers draw)."""

    summary: tuple[str, ...]
    history: tuple[str, ...]
    window_means: bool = True
    window_measures: tuple[str, ...] = ()
    position_means: bool = False
    arrays: tuple[str, ...] = ()
    pictured: Callable[[list[Run]], list[Run]] | None = None


class KeptRun(Run):
    """A run rebuilt from its record: the Run a report reads, with the record's experiment, overrides and swept keys
    in place of the .hydra files, and the kept window means."""

    def __init__(self, record: dict):
        super().__init__(Path(record["dir"]), record["summary"],
                         {k: (list(s), [_float(v) for v in vals]) for k, (s, vals) in record["history"].items()})
        self._record = record

    @property
    def experiment(self) -> str | None:
        return self._record["experiment"]

    @property
    def swept_keys(self) -> set[str]:
        return set(self._record["swept"])

    @property
    def overrides(self) -> list[str]:
        return list(self._record["overrides"])

    def started(self) -> float | None:
        return self._record["started"]

    def ended(self) -> float:
        return self._record["ended"]

    def window_means(self) -> np.ndarray:
        means = self._record.get("window_means")
        if means is None:
            raise ReportError(f"the record of {self.dir} keeps no window losses.")
        return np.array([_float(v) for v in means], dtype=np.float64)

    def window_measure(self, what: str = "mean") -> np.ndarray:
        if what == "mean":
            return self.window_means()
        kept = self._record.get("window_measures", {})
        if what not in kept:
            raise ReportError(f"the record of {self.dir} keeps no per-window {what!r} loss (its report's KEEP does "
                              "not name it).")
        return np.array([_float(v) for v in kept[what]], dtype=np.float64)

    def position_means(self) -> np.ndarray:
        if self._record.get("position_means") is None:
            raise ReportError(f"the record of {self.dir} keeps no loss by position.")
        return np.array([_float(v) for v in self._record["position_means"]], dtype=np.float64)

    def windows(self, key: str = "val_window_position") -> np.ndarray | None:
        arrays = self._record.get("arrays", {})
        if key not in arrays:
            raise ReportError(f"the record of {self.dir} keeps no {key!r} array (its report's KEEP does not name it).")
        return None if arrays[key] is None else np.array(arrays[key], dtype=np.float64)

    def attention_steps(self) -> list[tuple[int, np.ndarray, list[str]]]:
        return [(step, np.array(w, dtype=np.float32), list(labels))
                for step, w, labels in self._record.get("attention", [])]

    def last_sample(self) -> str | None:
        return self._record.get("sample")


def _float(v) -> float:
    """JSON has no NaN or inf: they are kept as strings ('nan', 'inf', '-inf')."""
    return float(v)


def _jsonable(v):
    """Floats that JSON cannot hold (nan, inf) as strings; numpy scalars as Python numbers."""
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_jsonable(x) for x in v]
    if isinstance(v, np.generic):
        v = v.item()
    if isinstance(v, float) and not math.isfinite(v):
        return str(v)
    return v


def _short32(a) -> list:
    """float32 values as the shortest decimals that give them back (the arrays diagnostics.npz and the attention
    maps hold are float32): a third of float64's digits, and the same float32 once read back."""
    return np.vectorize(lambda x: float(str(np.float32(x))), otypes=[object])(np.asarray(a, np.float32)).tolist()


def record(run: Run, reads: Reads, pictured: bool = False) -> dict:
    """One run reduced to what ``reads`` names (``pictured``: its attention maps and last sample too)."""
    summary = {k: run.summary[k] for k in (*reads.summary, "config") if k in run.summary}
    history = {k: v for k, v in run.history.items()
               if any(k == h or (h.endswith("/") and k.startswith(h)) for h in reads.history)}  # "val/": each val/*
    out = {"dir": f"{run.dir.parent.name}/{run.dir.name}", "experiment": run.experiment,
           "overrides": run.overrides, "swept": sorted(run.swept_keys), "summary": summary, "history": history,
           "started": run.started(), "ended": run.ended()}
    v = run.windows()
    if reads.window_means:
        out["window_means"] = None if v is None else [float(x) for x in v.mean(1)]
    if reads.window_measures and v is not None:
        out["window_measures"] = {w: [float(x) for x in run.window_measure(w)] for w in reads.window_measures}
    if reads.position_means:
        out["position_means"] = None if v is None else [float(x) for x in v.mean(0)]
    if reads.arrays:
        out["arrays"] = {k: None if run.windows(k) is None else _short32(run.windows(k)) for k in reads.arrays}
    if pictured:
        out["attention"] = [[step, _short32(w), labels] for step, w, labels in run.attention_steps()]
        out["sample"] = run.last_sample()
    return _jsonable(out)


def save(path: Path, runs: list[Run], reads: Reads, sweeps: list[str], excluded: list[tuple[str, str]]) -> Path:
    """Write the records of ``runs`` (and the sweeps' names and the excluded jobs, as the report lists them)."""
    pictured = reads.pictured(runs) if reads.pictured is not None else []
    data = {"format": FORMAT, "sweeps": [str(s) for s in sweeps], "excluded": [list(e) for e in excluded],
            "runs": [record(r, reads, r in pictured) for r in runs]}
    text = json.dumps(data, sort_keys=True, separators=(",", ":"), allow_nan=False)
    path.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
    return path


def read_input(path: Path, layout: int) -> dict | None:
    """A JSON input a report reads beside its records (an experiment's init_draws.json): its content, or None where
    the file is absent or of another layout."""
    if not path.is_file():
        return None
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if data.get("format") == layout else None


def is_records(path: Path) -> bool:
    return path.is_file() and path.name.endswith(".json.gz")


def load(path: Path) -> tuple[list[KeptRun], list[str], list[tuple[str, str]]]:
    """The runs of a records file, the sweeps they came from and the excluded jobs; a file that is not one is
    refused in one sentence."""
    try:
        data = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8"))
    except (OSError, EOFError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ReportError(f"{path} is not a records file ({err}); give a sweep dir or the runs.json.gz a report "
                          "kept.") from None
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise ReportError(f"{path} is not a records file of format {FORMAT}; give a sweep dir or the runs.json.gz "
                          "a report of this version kept.")
    return [KeptRun(r) for r in data["runs"]], list(data["sweeps"]), [tuple(e) for e in data["excluded"]]

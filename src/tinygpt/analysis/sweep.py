"""A sweep's runs, read from the files each job left in its directory: summary.json (final numbers, the resolved
config), diagnostics.npz (every validation window's loss at every position, and the honest loss of the probe
windows: what the reports bootstrap over), history/metrics.csv (per-step metrics), attention/stepNNNNNN.npz (the
attention weights) and samples.jsonl (text samples). Never W&B, so a report works offline and from a copied sweep dir.
"""

from __future__ import annotations

import csv
import json
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path

import numpy as np
from omegaconf import OmegaConf

from tinygpt.analysis.stats import Sample, first_below, mean_spread
from tinygpt.data.corpus import CORPORA
from tinygpt.runtime.old_runs import outdated, refusal
from tinygpt.runtime.run_dirs import ERROR_FILE, job_dirs, only_hydra_files, sweep_jobs


class ReportError(ValueError):
    """Input a report cannot be made from (a missing dir, no runs): one sentence, exit status 2."""


EXPERIMENT_CONFIGS = Path(__file__).resolve().parents[3] / "configs" / "experiment"  # a source checkout
MEASURES = "measures.npz"  # a run's arrays from an experiment's own callback (Run.windows reads them by name)


def predictions(runs: Sequence[Run], experiment: str) -> dict:
    """The predictions a report applies: the runs' own (their config's ``prediction``), over those of
    configs/experiment/<experiment>.yaml, the one home of each prediction, which fills in any the runs lack (a
    sweep run without the experiment, or from before a prediction was written). Without a clone (an installed
    package) the runs' own are all there is: a run made with experiment=<name> carries every one."""
    path = EXPERIMENT_CONFIGS / f"{experiment}.yaml"  # absent where the package is installed without a clone
    committed = OmegaConf.to_container(OmegaConf.load(path))["prediction"] if path.exists() else {}
    return {**committed, **(runs[0].config.get("prediction") or {})}


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

    @property
    def status(self) -> str:
        return self.summary.get("status", "completed")

    @cached_property
    def experiment(self) -> str | None:
        """The ``experiment=`` the job ran (Hydra's record in .hydra/hydra.yaml), None for a plain run."""
        return OmegaConf.select(self.hydra_record, "hydra.runtime.choices.experiment")

    @cached_property
    def swept_keys(self) -> set[str]:
        """The keys its sweep config varies (hydra.sweeper.params, as Hydra recorded them in .hydra/hydra.yaml);
        empty for a single run or a sweep given only on the command line."""
        return set(OmegaConf.select(self.hydra_record, "hydra.sweeper.params") or {})

    @cached_property
    def hydra_record(self):
        """Hydra's record of the job's own config (.hydra/hydra.yaml), empty when there is none."""
        path = self.dir / ".hydra" / "hydra.yaml"
        return OmegaConf.load(path) if path.exists() else OmegaConf.create()

    @property
    def overrides(self) -> list[str]:
        """The job's command-line overrides (.hydra/overrides.yaml), e.g. ['seed=1', 'experiment=sqrt_dk']."""
        path = self.dir / ".hydra" / "overrides.yaml"
        return [str(o) for o in OmegaConf.load(path)] if path.exists() else []

    def not_a_result(self) -> str | None:
        """Why this run is not a result (None for a completed or diverged run): 'interrupted by SIGTERM at step
        36 of 300', 'unreadable (summary.json: Expecting value: line 1 column 1 (char 0))'."""
        if self.status in ("completed", "diverged"):
            return None
        if self.status.startswith("unreadable"):
            return self.status
        why = self.status + (f" by {self.summary['interrupted']}" if self.summary.get("interrupted") else "")
        steps, total = self.summary.get("steps"), self.config.get("trainer", {}).get("max_steps")
        return why + (f" at step {steps}" if steps is not None else "") + (f" of {total}" if total else "")

    def windows(self, key: str = "val_window_position") -> np.ndarray | None:
        """A per-window array of diagnostics.npz: ``val_window_position`` (N_val, T), the teacher-forced loss
        of every validation window at every position; ``honest_window_position`` (n_probe, P), the
        honest loss of the probe windows; ``probe_index`` (n_probe,); or of measures.npz, the arrays an
        experiment's own callback wrote (MEASURES). None for a run without the file."""
        return None if self._arrays is None else self._arrays.get(key)

    @cached_property
    def _arrays(self) -> dict[str, np.ndarray] | None:
        """diagnostics.npz and measures.npz, read once (the reports ask for their arrays many times)."""
        path = self.dir / "diagnostics.npz"
        if not path.exists():
            return None
        with np.load(path) as z:
            arrays = {k: z[k].astype(np.float64) for k in z.files}
        old = outdated(arrays)
        if old:
            raise ReportError(refusal(path, old, self.dir))
        if (self.dir / MEASURES).exists():
            with np.load(self.dir / MEASURES) as z:
                arrays.update({k: z[k].astype(np.float64) for k in z.files if k not in arrays})
        return arrays

    def started(self) -> float | None:
        """When the job began: its config.yaml's file time (None without one)."""
        path = self.dir / "config.yaml"
        return path.stat().st_mtime if path.exists() else None

    def ended(self) -> float:
        """When the job ended: its summary.json's file time."""
        return (self.dir / "summary.json").stat().st_mtime

    def window_means(self) -> np.ndarray:
        """(windows,): each validation window's final teacher-forced loss, averaged over its positions (what a kept
        record holds of the windows: tinygpt.analysis.records)."""
        return self.window_measure("mean")

    def window_measure(self, what: str = "mean") -> np.ndarray:
        """(windows,): one of the run's per-window measures (WINDOW_MEASURES) from its diagnostics.npz."""
        v = self.windows()  # (N, T)
        if v is None:
            raise ReportError(f"{self.dir} has no diagnostics.npz (run before the per-window diagnostics); rerun "
                              "the sweep at this version.")
        if what == "honest":
            return self.windows("honest_window_position").mean(1)
        if what == "probe":
            return v[self.windows("probe_index").astype(int)].mean(1)
        return {"mean": v.mean(1), "last": v[:, -1], "copy": v[:, :-1].mean(1)}[what]

    def position_means(self) -> np.ndarray:
        """(T,): the final teacher-forced loss at each position, averaged over the validation windows."""
        return self.windows().mean(0)

    def window_count(self) -> int:
        """How many validation windows the run's end-of-run losses cover."""
        return len(self.window_means())

    def attention_steps(self) -> list[tuple[int, np.ndarray, list[str]]]:
        """Every saved attention map: (step, weights (L, H, T, T) float32, labels), by step (none: [])."""
        from tinygpt.pictures import explorer

        return explorer.load_steps(self.dir / "attention")

    def series(self, key: str) -> tuple[np.ndarray, np.ndarray]:
        steps, values = self.history.get(key, ([], []))
        return np.asarray(steps), np.asarray(values, dtype=float)

    def attention(self) -> dict | None:
        """The last saved attention weights: {"weights": (n_layer, H, T, T), "labels": [...], "step"}."""
        steps = self.attention_steps()
        if not steps:
            return None
        step, weights, labels = steps[-1]
        return {"weights": weights, "labels": labels, "step": step}

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


def corpus_source(config: dict) -> str:
    """The name of a run's corpus (its ``corpus=`` option, a key of tinygpt.data.corpus.CORPORA), from its ``corpus``
    node; a class this version lacks is named as its class."""
    name = str(config["corpus"]["_target_"]).rsplit(".", 1)[-1]
    return next((source for source, kind in CORPORA.items() if kind.__name__ == name), name)


def distinct_dirs(dirs: Sequence[Path]) -> list[Path]:
    """The given run or sweep dirs, each run once: a dir given twice (however it is written), or one inside another
    given dir (a sweep and one of its job dirs), is dropped; the others keep their order and spelling."""
    resolved = [Path(d).resolve() for d in dirs]
    out, seen = [], set()
    for d, r in zip(dirs, resolved, strict=True):
        if r in seen or any(r != o and r.is_relative_to(o) for o in resolved):
            continue
        seen.add(r)
        out.append(Path(d))
    return out


def jobs_without_runs(sweep_dirs: list[Path]) -> list[tuple[str, str]]:
    """Every job of the given sweeps that left no summary.json, as (where, why): a job dir with error.txt (failed,
    with its error), a job dir with nothing a run leaves (started, then killed before it wrote anything), and a job
    the sweep's multirun.yaml defines that has no dir at all (never started), named by its overrides."""
    out = []
    for root in distinct_dirs(sweep_dirs):
        dirs = job_dirs(root)
        done = set()
        for d in dirs:
            overrides = OmegaConf.to_container(OmegaConf.load(d / ".hydra" / "overrides.yaml"))
            done.add(tuple(sorted(map(str, overrides))))
            if (d / "summary.json").exists():
                continue
            error, log = d / ERROR_FILE, d / "train.log"
            if error.exists():
                out.append((str(d), f"failed ({error.read_text().strip()})"))
            elif only_hydra_files(d, log.name) and (not log.is_file() or log.stat().st_size == 0):
                out.append((str(d), "never started"))  # the sweep was stopped before it: Hydra's files only
            else:
                out.append((str(d), "started, but left no summary.json (killed before it wrote one?)"))
        for job in sweep_jobs(root) or []:
            if tuple(sorted(job)) not in done:
                out.append((f"{root} job {' '.join(job)}", "never started"))
    return out


def load_runs(sweep_dirs: list[Path], unstarted: list[tuple[str, str]] = ()) -> list[Run]:
    """Every job dir (one holding summary.json) under the given dirs, in a stable order. ``unstarted``: the sweeps'
    jobs that left no summary (jobs_without_runs): with any, finding no run is the report's to name, not an error."""
    runs, seen = [], set()
    for root in sweep_dirs:
        if not root.exists():
            raise ReportError(f"{root} does not exist.")
    for root in distinct_dirs(sweep_dirs):  # each run once, however the given dirs overlap
        for summary in sorted(root.rglob("summary.json")):
            if summary.resolve() in seen:
                continue
            seen.add(summary.resolve())
            try:
                data = json.loads(summary.read_bytes().decode("utf-8"))
            except (json.JSONDecodeError, UnicodeDecodeError) as err:  # a job killed while writing it, a copy cut short
                data = {"status": f"unreadable ({summary.name}: {err})", "config": {}}
            if not isinstance(data, dict) or not isinstance(data.get("config", {}), dict):
                data = {"status": f"unreadable ({summary.name}: not a run's summary)", "config": {}}
            missing = [k for k in ("status", "config") if k not in data]
            if missing:  # a summary.json some other program wrote: a stranger's dir, not a run to exclude
                raise ReportError(f"{summary} is not a train.py run's summary (it has no {' or '.join(missing)}); "
                                  "give the dirs of train.py's runs or sweeps.")
            run = Run(summary.parent, data)
            run.history = read_history(summary.parent / "history" / "metrics.csv")
            old = outdated(data, data["config"] if "config" in data else None) or outdated(run.history)
            if old:
                raise ReportError(refusal(summary.parent, old, root))
            runs.append(run)
    if not runs and not unstarted:
        raise ReportError(f"no summary.json under {', '.join(map(str, sweep_dirs))}; is it a sweep dir?")
    return runs


# ----------------------------------------------------------------------------- arms and per-window samples


def group_by(runs: list[Run], key: Callable[[Run], Hashable], *inner: Callable[[Run], Hashable]) -> dict:
    """The runs grouped by ``key(run)``, keys in the order first met, each group's runs sorted by seed. With more
    key functions the groups nest: ``group_by(runs, arm, lr)`` is {arm: {lr: [runs sorted by seed]}}."""
    out: dict = {}
    for r in runs:
        out.setdefault(key(r), []).append(r)
    if inner:
        return {k: group_by(rs, *inner) for k, rs in out.items()}
    return {k: sorted(rs, key=lambda r: r.seed) for k, rs in out.items()}


# What each per-window measure of a run is, over the windows diagnostics.npz holds (``window_measure``).
WINDOW_MEASURES = {
    "mean": "the teacher-forced loss of each validation window, averaged over its positions",
    "last": "the teacher-forced loss of each validation window at its last position (target outside the window)",
    "copy": "the teacher-forced loss of each validation window over the positions before the last",
    "probe": "the teacher-forced loss of each probe window, averaged over its positions",
    "honest": "the autoregressive (honest) loss of each probe window over its scored positions",
}
PROBE_MEASURES = ("probe", "honest")  # the measures on the probe windows; the others are on every validation window


def window_measure(run: Run, what: str = "mean") -> np.ndarray:
    """(windows,): one of the run's per-window measures (WINDOW_MEASURES): ``run.window_measure``."""
    return run.window_measure(what)


def per_window(runs: list[Run], what: str) -> np.ndarray:
    """(seeds, windows): ``window_measure`` of each run, one row per run."""
    return np.stack([window_measure(r, what) for r in runs])


def window_samples(runs: list[Run], windows: str, seeds: str,
                   whats: Sequence[str] = tuple(WINDOW_MEASURES)) -> dict[str, Sample]:
    """Each per-window measure of one group of runs (the seeds of one arm) as a bootstrap Sample: one seed draw for
    them all (key ``seeds``, paired by seed id), the validation windows under the key ``windows`` and the probe
    windows under ``windows + "/probe"`` (every run measured on the same windows shares their draw)."""
    return {what: Sample(per_window(runs, what), windows + "/probe" if what in PROBE_MEASURES else windows,
                         seeds=seeds, seed_ids=seed_ids(runs))
            for what in whats}


def summary_spread(runs: list[Run], key: str) -> tuple[float, float]:
    """Mean ± seed sd of a summary.json value over the runs (stats.mean_spread: missing and NaN values dropped)."""
    return mean_spread([r.summary.get(key) for r in runs])


# ----------------------------------------------------------------------------- numbers


def loss_onsets(runs: list[Run], threshold: float) -> list[int | None]:
    """Per run: the first logged step whose raw training loss is below ``threshold`` (None if none is), counted as
    steps taken, as the validations and the leak alarm count them (the history logs the training loss at the
    0-based index of the batch just taken: one less)."""
    return [first_below(r.series("train/loss")[0] + 1, r.series("train/loss")[1], threshold) for r in runs]


def alarm_of(run: Run):
    """The run's own leak alarm (its callbacks.leak_alarm settings), to read its logged signals by the same rule."""
    from tinygpt.train.probes.leak_alarm import LeakAlarm  # here: the reports that never need it start without it

    settings = dict((run.config.get("callbacks") or {}).get("leak_alarm") or {})
    settings.pop("_target_", None)
    return LeakAlarm(**settings)


def honest_gap_step(run: Run) -> int | None:
    """The first validation at which the leak alarm's honest-loss rule alone fires on the run's logged values (the
    honest minus teacher-forced loss on the same windows above ``z`` standard errors and ``min_gap`` nats), by the
    run's own alarm settings; None if it never does. ``leak/*`` is logged at the steps taken."""
    alarm = alarm_of(run)
    steps, gaps = run.series("leak/honest_gap")
    se_steps, ses = run.series("leak/honest_gap_se")
    se_at = dict(zip(se_steps.tolist(), ses.tolist(), strict=True))
    for step, gap in zip(steps.tolist(), gaps.tolist(), strict=True):
        if alarm.check(0.0, gap, se_at.get(step, 0.0)) is not None:
            return int(step)
    return None


def seeds_words(groups, noun: bool = False) -> str:
    """How many seeds each group of runs (an arm, a cell) rests on: '5', or '3 to 5' when they differ; with
    ``noun``, '1 seed', '5 seeds', '3 to 5 seeds'."""
    counts = sorted({len(runs) for runs in groups})
    words = str(counts[0]) if len(counts) == 1 else f"{counts[0]} to {counts[-1]}"
    return words + (" seed" if counts[-1] == 1 else " seeds") * noun


def seed_ids(runs: list[Run]) -> tuple[int, ...]:
    """The runs' seeds, in their order: what a bootstrap Sample pairs by."""
    return tuple(r.seed for r in runs)


def sweep_wall_seconds(runs: list[Run]) -> float:
    """From the first job's config.yaml to the last job's summary.json (file times)."""
    starts = [t for r in runs if (t := r.started()) is not None]
    ends = [r.ended() for r in runs]
    return max(ends) - min(starts) if starts else float("nan")

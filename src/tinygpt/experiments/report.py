"""Regenerate an experiment's report (Markdown + PNGs) from the runs' own files.

    python scripts/report.py <experiment> multirun/<experiment>/<date_time> [more sweep dirs] [--out DIR]
    python scripts/report.py <experiment> docs/experiments/<experiment>/runs.json.gz     # from its kept records

Reads only what each run left in its directory (tinygpt.analysis.sweep); each experiment's ``report`` module writes
its report (tinygpt.experiments.<experiment>.report; the experiments are found in their folders:
tinygpt.experiments.registry, and ``--help`` names them). Only completed (and diverged) runs are results: every other
job of the sweeps (interrupted, failed, started but left nothing, never started) is named in a warning and listed in
the report as excluded. Runs of another experiment are refused. Without --out the committed report
(docs/experiments/<experiment>/) is replaced only by a full sweep of that experiment as its config defines it; any
other sweep's report goes to <first sweep dir>/report-<experiment>/. An --out that holds files this script did not
write (no report's README.md there) is refused, --force writes into it anyway. Each run is read once however the given
dirs overlap (a dir given twice, a sweep and one of its job dirs); a dir whose summary.json is not a train.py run's is
refused.
"""

from __future__ import annotations

import argparse
import functools
import importlib
import os
import shutil
from collections import Counter
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from omegaconf import OmegaConf

from tinygpt.analysis.templates import DOCS, plural
from tinygpt.experiments.registry import experiments
from tinygpt.runtime.errors import OneLineParser, print_error

if TYPE_CHECKING:  # the analysis imports scipy and torch: --help and a refused argument stay fast without them
    from tinygpt.analysis.sweep import Run

ROOT = DOCS.parents[1]  # a source checkout
CONFIGS = ROOT / "configs" / "experiment"


def refuse_foreign(runs: list[Run], experiment: str) -> None:
    """Runs made with another experiment= are not this report's (a plain sweep, with none, is accepted)."""
    from tinygpt.analysis.sweep import ReportError

    mine = experiments()[experiment].configs
    for r in runs:
        if r.experiment and r.experiment not in mine:
            raise ReportError(f"{r.dir} is a run of experiment={r.experiment}, not of {experiment}; give "
                              f"{experiment}'s sweep dir (python train.py -m experiment={experiment}).")


# overrides that say where a run keeps its files, where it logs, how its sweep is launched (hydra/launcher, the job
# count hydra.launcher.n_jobs) or how to resume it, never what it computes: ``bookkeeping`` is the one rule both checks
# use, refuse_mixed (runs may differ in them) and full_sweep_gap (a full sweep may add them): README's checklist
BOOKKEEPING = ("hydra", "ckpt_path", "experiment", "data.cache_dir", "logger")


def bookkeeping(override: str) -> bool:
    """Whether an override ('logger=csv', 'hydra.launcher.n_jobs=2', '+hydra/launcher=parallel', or its key alone)
    is bookkeeping: a key of BOOKKEEPING, its group's option or one of its subkeys, with Hydra's +, ++ or ~ in front."""
    key = override.split("=", 1)[0].lstrip("+~")
    return any(key == b or key.startswith((f"{b}.", f"{b}/")) for b in BOOKKEEPING)


def refuse_mixed(runs: list[Run], experiment: str) -> None:
    """Runs that differ in a setting the experiment's sweeps do not vary (trainer.max_steps=20,600) are not arms
    or seeds of its grid: a report would pool them as seeds of one setting. Refused in one sentence naming it. The
    grid's keys are what the runs' own records say their sweep config varied, and, in a checkout, what the
    experiment's configs vary (an installed tinygpt has no configs/)."""
    from tinygpt.analysis.sweep import ReportError

    grid = {"seed"}.union(*(r.swept_keys for r in runs))
    for part in experiments()[experiment].configs:  # its full sweep's configs and its variants (the quick ones)
        path = CONFIGS / f"{part}.yaml"
        if path.exists() and OmegaConf.select(OmegaConf.load(path), "hydra.sweeper.params"):
            grid |= grid_cells(path)[0]
    settings = [dict(o.partition("=")[::2] for o in r.overrides) for r in runs]  # each run's {key: value}, read once
    values: dict[str, set] = {}
    for s in settings:
        for key, value in s.items():
            if not bookkeeping(key):
                values.setdefault(key, set()).add(value)
    mixed = sorted(k for k, v in values.items() if k not in grid and (len(v) > 1 or not all(k in s for s in settings)))
    if mixed:
        key = mixed[0]
        given = sorted(values[key]) + ([f"not set (the default) in {sum(key not in s for s in settings)}"]
                                       if not all(key in s for s in settings) else [])
        raise ReportError(f"the runs differ in {key} ({', '.join(given)}), which "
                          f"experiment={experiment}'s sweeps do not vary (they vary {', '.join(sorted(grid))}); a "
                          "report pools runs of its grid only: give the runs of one setting.")


def results(runs: list[Run], unstarted: list[tuple[str, str]] = ()) -> tuple[list[Run], list[tuple[Run, str]]]:
    """The runs that are results (completed or diverged), and the others with why they are not; ``unstarted``:
    the sweeps' jobs that left no run (counted when none is a result)."""
    from tinygpt.analysis.sweep import ReportError

    excluded = [(r, why) for r in runs if (why := r.not_a_result())]
    kept = [r for r in runs if not r.not_a_result()]
    if not kept:
        whys = [why for _, why in excluded] + [why for _, why in unstarted]
        kinds = Counter(job_kind(why) for why in whys)
        raise ReportError(f"none of the {plural(len(whys), 'job')} completed ("
                          f"{', '.join(f'{n} {kind}' for kind, n in kinds.items())}; the first: {whys[0]}); "
                          "nothing to report.")
    return kept, excluded


def job_kind(why: str) -> str:
    """What a job that is not a result is, in a few words: 'interrupted by SIGTERM at step 36 of 800' ->
    'interrupted', 'failed (...)' -> 'failed', 'started, but left no summary.json ...' -> 'left no summary',
    'never started'."""
    if why.startswith("started"):
        return "left no summary"
    return why if why == "never started" else why.split(" ")[0].rstrip(",")


@functools.cache
def override_parser():
    """Hydra's override parser, built once (a report reads every run's overrides)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def setting(override: str) -> tuple[str, object]:
    """'optim.lr=1e-4' -> ('optim.lr', 0.0001): a job's override as the value Hydra's parser makes of it, however
    it was written (Hydra records 0.0001 where the sweep config says 1e-4, True where it says true)."""
    parsed = override_parser().parse_override(override.strip())
    value = parsed.value()
    return parsed.get_key_element(), float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def grid_cells(cfg_path: Path) -> tuple[set, set]:
    """The keys a config sweeps and every cell of its grid (a frozenset of (key, value) settings)."""
    params = OmegaConf.load(cfg_path).hydra.sweeper.params
    keys = set(params)
    cells = {frozenset()}
    for k, values in params.items():
        cells = {c | {setting(f"{k}={v.strip()}")} for c in cells for v in str(values).split(",")}
    return keys, cells


def full_sweep_gap(runs: list[Run], excluded: list, experiment: str) -> str | None:
    """None when the runs are exactly the full sweep its configs define (every job of the grid, completed, no other
    overrides but ``bookkeeping``; a staged experiment may add runs that override only the grid's keys); otherwise
    what is different."""
    if not any(r.experiment for r in runs):
        return "plain runs, made without experiment="
    if excluded:
        return f"{len(excluded)} of its runs did not complete"
    record = experiments()[experiment]
    parts = record.sweeps
    paths = [CONFIGS / f"{p}.yaml" for p in parts]
    missing = [p.name for p in paths if not p.exists()]
    if missing:
        return f"no {missing[0]} to compare with"
    names = sorted({str(r.experiment) for r in runs if r.experiment})
    if not names:
        return "plain runs, made without experiment="
    if not set(names) <= set(parts) | set(record.staged):  # a staged config outside its sweeps adds runs it asks for
        return f"its runs are of experiment={', '.join(names)}"
    if not set(parts) <= set(names):
        return f"it lacks the runs of experiment={', '.join(sorted(set(parts) - set(names)))}"
    for part, path in zip(parts, paths, strict=True):
        keys, cells = grid_cells(path)
        mine = [r for r in runs if r.experiment == part]
        have = {frozenset(setting(o) for o in r.overrides if o.split("=")[0] in keys) for r in mine}
        extra = sorted({o.split("=")[0] for r in mine for o in r.overrides if not bookkeeping(o)} - keys)
        if extra:
            return f"it overrides {', '.join(extra)}"
        if (not cells <= have and len(mine) != len(cells)) or (len(mine) != len(cells) and part not in record.staged):
            return f"it has {plural(len(mine), 'run')} of experiment={part}, the full sweep {len(cells)}"
        if not cells <= have:
            return f"it lacks {plural(len(cells - have), 'job')} of experiment={part}'s grid"
    return None


GENERATED = "Generated by `scripts/report.py"  # the line every report's README.md opens with (report.md templates)


def check_out(out: Path | None, force: bool = False) -> None:
    """--out must be a directory (existing or to be made), new, empty or a report's own (its README.md written by this
    script: a rerun replaces its files), or any directory with ``force``: refused before any work otherwise (a
    user's README.md and PNGs had been replaced without a word)."""
    from tinygpt.analysis.sweep import ReportError

    if out is None:
        return
    if out.exists() and not out.is_dir():
        raise ReportError(f"--out {out} is a file; give a directory for the report (its README.md and PNGs).")
    if out.is_dir() and not force and not report_dir(out):
        names = sorted(p.name for p in out.iterdir())
        if names:
            held = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            raise ReportError(f"--out {out} holds files this script did not write ({held}); give a new or empty "
                              "directory, or --force to write the report over the files of the same names in it.")
    from tinygpt.runtime.writable import cannot_write_into

    reason = cannot_write_into(out)  # creates nothing: a report refused later leaves no empty dir
    if reason:
        raise ReportError(f"--out {out} cannot be written ({reason}); give a writable directory.")


def report_dir(out: Path) -> bool:
    """Whether ``out`` holds a report this script wrote (its README.md opens with GENERATED)."""
    try:
        with open(out / "README.md", encoding="utf-8") as f:
            return GENERATED in f.read(4096)
    except (OSError, ValueError):
        return False


def partial(path: Path, gap: str, experiment: str) -> None:
    """A report of less than the full sweep: it says so at the top, and, outside docs/experiments, drops what only
    the committed report can claim (\"Do not edit by hand\", the changes since its last version). Written into
    docs/experiments/<experiment> (--out), it is the committed report until the full sweep replaces it, and says
    so."""
    text = path.read_text(encoding="utf-8")
    if path.parent.resolve() == (DOCS / experiment).resolve():
        path.write_text(text.replace("Do not edit by hand: rerun", f"A partial report ({gap}), committed until the "
                                     "full sweep replaces it. Do not edit by hand: rerun", 1), encoding="utf-8")
        return
    text = text.replace("Do not edit by hand: rerun",
                        f"A partial report ({gap}), not the committed one; the full sweep and its report are", 1)
    start = text.find("## Changes since the last version")
    if start != -1:
        end = text.find("\n## ", start + 1)
        text = text[:start] + (text[end + 1:] if end != -1 else "")
    path.write_text(text, encoding="utf-8")


def write(experiment: str, sweeps: list[Path], out: Path | None = None, force: bool = False) -> tuple[Path, int]:
    """Write ``experiment``'s report from the runs under ``sweeps`` into ``out`` (default: its committed place,
    docs/experiments/<experiment>/, for the full sweep; else <first sweep>/report-<experiment>/). Returns (the
    report's path, how many runs it read, how many jobs the sweeps hold)."""
    from tinygpt.analysis.sweep import ReportError, distinct_dirs, jobs_without_runs, load_runs

    if experiment not in experiments():
        raise ReportError(f"experiment {experiment!r} is not one of {', '.join(experiments())}.")
    check_out(out, force)
    from tinygpt.analysis import records

    kept = [s for s in sweeps if records.is_records(s)]
    if kept and len(kept) != len(sweeps) or len(kept) > 1:
        raise ReportError("give one records file (runs.json.gz) alone, or sweep dirs; not both or several.")
    if kept:
        runs, sweeps, unstarted = records.load(kept[0])
        sweeps = [Path(s) for s in sweeps]
    else:
        sweeps = distinct_dirs(sweeps)  # each run once: the same dir twice, or a sweep and one of its job dirs
        unstarted = jobs_without_runs(sweeps)
        runs = load_runs(sweeps, unstarted)
    refuse_foreign(runs, experiment)
    refuse_mixed(runs, experiment)
    runs, excluded = results(runs, unstarted)
    # the report's module (it imports torch and scipy) after the runs are read: a dir that is not a run's, runs of
    # another experiment or setting, or sweeps with no completed job, are refused by what their files say, at once
    module = importlib.import_module(f"tinygpt.experiments.{experiment}.report")
    excluded = [(str(r.dir), why) for r, why in excluded] + unstarted
    for where, why in excluded:
        print(f"warning: report: {where} excluded: {why}", file=sys.stderr)
    gap = full_sweep_gap(runs, excluded, experiment)
    if out is None:
        out = DOCS / experiment if gap is None else sweeps[0] / f"report-{experiment}"  # one per experiment
        if gap:
            print(f"report: not the full experiment={experiment} sweep ({gap}): the committed report is left alone "
                  f"(--out docs/experiments/{experiment} to replace it anyway)", file=sys.stderr)
    made = [p for p in (out, *out.parents) if not p.exists()]  # what a failed report must not leave behind
    out.mkdir(parents=True, exist_ok=True)
    reads = getattr(module, "KEEP", None)  # a report that declares what it reads is written from its kept records
    try:
        if reads is not None and not kept:
            saved = records.save(out / records.FILE, runs, reads, [str(s) for s in sweeps], excluded)
            runs = records.load(saved)[0]
        path = module.write_report(runs, out, sweeps)
    except BaseException:
        if made:
            shutil.rmtree(made[-1], ignore_errors=True)
        raise
    glossary = os.path.relpath(DOCS / "GLOSSARY.md", path.parent)  # the link the prose writes from docs/experiments/<x>
    if glossary != "../GLOSSARY.md":
        path.write_text(path.read_text(encoding="utf-8").replace("](../GLOSSARY.md)", f"]({glossary})"),
                        encoding="utf-8")
    if path.parent.resolve() == (DOCS / experiment).resolve() and gap is None:  # the committed report: the index
        from tinygpt.experiments import index  # and README.md's section follow its headline

        index.update(DOCS, ROOT / "README.md")
    if gap is not None:
        partial(path, gap, experiment)
    if excluded:
        with open(path, "a", encoding="utf-8") as f:
            f.write("\n## Excluded runs\n\nNot results, so left out of every number above:\n\n"
                    + "".join(f"- `{where}`: {why}\n" for where, why in excluded))
    return path, len(runs), len(runs) + len(excluded)


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser("scripts/report.py", description=__doc__,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("experiment", choices=list(experiments()))
    parser.add_argument("sweeps", nargs="+", type=Path, help="sweep dirs (each job dir holds summary.json)")
    parser.add_argument("--out", type=Path, default=None,
                        help="default: docs/experiments/<experiment>/ for the experiment's full sweep, else "
                             "<first sweep dir>/report-<experiment>/; an existing one must be empty or hold a "
                             "report")
    parser.add_argument("--force", action="store_true", help="write into an --out that holds other files (those "
                        "of the report's names are replaced, the others stay)")
    args = parser.parse_args(argv)
    from tinygpt.analysis.sweep import ReportError

    try:
        path, n, jobs = write(args.experiment, args.sweeps, args.out, args.force)
    except ReportError as err:
        print_error(f"report: {err}")
        return 2
    print(f"report: {plural(n, 'run')} of {plural(jobs, 'job')} -> {path}")
    return 0

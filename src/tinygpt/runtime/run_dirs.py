"""Run directories and sweeps: unique default dirs, never writing over another run, and the table that
ends a sweep. The two classes are Hydra callbacks (configs/hydra/default.yaml)."""

from __future__ import annotations

import difflib
import itertools
import math
import os
import shutil
import socket
import re
import secrets
import sys
import zipfile
from pathlib import Path

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from tinygpt.runtime.errors import ConfigError, config_composed, print_error, swept_mistake
from tinygpt.runtime.resume_record import ENDED, archive_pickle, checkpoint_record, read_summary
from tinygpt.runtime.writable import cannot_write

LAST = "last.ckpt"  # the checkpoint a run resumes from, in <run>/checkpoints/


# what a run writes into its dir; .hydra/overrides.yaml: a run started there (Hydra writes it before set-up does
# anything), even one killed before it wrote config.yaml
RUN_MARKERS = ("summary.json", "config.yaml", "checkpoints", ".hydra/overrides.yaml")
HYDRA_FILES = ("config.yaml", "hydra.yaml", "overrides.yaml")  # what Hydra writes into <run dir>/.hydra
ERROR_FILE = "error.txt"  # a failed sweep job's one-line error
LOCK_FILE = ".lock"  # in a run or sweep dir: held (flock) by the process that runs there, while it runs
_CLAIMED: dict[Path, object] = {}  # the dirs this process holds, each with its open lock file


def register_resolvers(project_root: str | Path | None = None) -> None:
    """``${run_id:}``: 6 random hex digits, resolved once per run (or sweep), so two runs started in the same
    second get different default dirs (outputs/<date>/<time>-<run_id>). ``${project_root:}``: the dir of
    train.py (the data cache lives there, whichever directory train.py is started from)."""
    if not OmegaConf.has_resolver("run_id"):
        OmegaConf.register_new_resolver("run_id", lambda: secrets.token_hex(3), use_cache=True)
    if not OmegaConf.has_resolver("parallel_jobs"):
        OmegaConf.register_new_resolver("parallel_jobs", parallel_jobs)
    global _PROJECT_ROOT
    _PROJECT_ROOT = Path(project_root).resolve() if project_root else Path.cwd()
    root = str(_PROJECT_ROOT)
    OmegaConf.register_new_resolver("project_root", lambda: root, replace=True)


_PROJECT_ROOT: Path | None = None


def usable_cores() -> int:
    """The cores this process may run on (its affinity mask and cgroup quota), as joblib counts them when it
    splits the threads between the parallel launcher's workers."""
    from joblib import cpu_count

    return max(1, cpu_count())


def parallel_jobs(threads_per_job: int | str = 1) -> int:
    """``${parallel_jobs:T}``: how many sweep jobs to run at once so each gets T threads of this machine's cores
    (at least 1)."""
    return max(1, usable_cores() // max(1, int(threads_per_job)))


def project_root() -> Path:
    """The dir of train.py (as registered by train.py), else the current dir."""
    return _PROJECT_ROOT or Path.cwd()


def in_parallel_sweep() -> bool:
    """Whether this process runs a job of a sweep whose jobs run in worker processes on this machine
    (hydra/launcher=parallel, joblib): such a job shares the terminal with the others, and signals reach it
    through the sweep (runtime.interrupts.SweepStop)."""
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    if not HydraConfig.initialized():
        return False
    hc = HydraConfig.get()
    return hc.mode == RunMode.MULTIRUN and runs_jobs_in_workers(hc.get("launcher"))


def runs_jobs_in_workers(launcher) -> bool:
    """Whether this launcher config (hydra.launcher) runs jobs in worker processes here: joblib's."""
    return bool(launcher) and "joblib" in str(launcher.get("_target_", "")).lower()


def holds_run(path: Path) -> bool:
    return any((path / m).exists() for m in RUN_MARKERS)


def resumes_into(run_dir: Path, ckpt_path) -> bool:
    if ckpt_path in (None, ""):
        return False
    if str(ckpt_path) == "last":
        return True
    try:
        return Path(ckpt_path).expanduser().resolve().is_relative_to(run_dir.resolve())
    except OSError:
        return False


def writable_dir(key: str, path: Path) -> None:
    """One line and exit 2 when ``path`` is a file or cannot be created and written (read-only, /proc, ...)."""
    if path.exists() and not path.is_dir():
        _fail(f"{key}={str(path)!r} is a file, not a directory; give a directory for the run's files.")
    reason = cannot_write(path)
    if reason:
        _fail(f"{key}={str(path)!r} cannot be written ({reason}); give a writable directory.")


def refuse_if_held(key: str, path: Path) -> None:
    """One line and exit 2 where another process holds ``path`` now (naming it: "pid N on host"): a probe of
    <path>/.lock that takes nothing and creates nothing, so a refused run leaves the dir as it found it. Asked
    before what a dir holds is judged, so a run still going is never taken for one to resume."""
    import fcntl

    if path.absolute() in _CLAIMED or not (path / LOCK_FILE).is_file():
        return
    try:
        lock = open(path / LOCK_FILE)  # noqa: SIM115 (closed below; flock needs no write access)
    except OSError:
        return
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            in_use(key, path, lock.read().strip())
        fcntl.flock(lock, fcntl.LOCK_UN)


def in_use(key: str, path: Path, holder: str) -> None:
    _fail(f"{key}={str(path)!r} is in use by another run ({holder or 'a running process'}); wait for it to end, or "
          "choose another dir (the default is unique).")


def claim(key: str, path: Path) -> None:
    """Hold ``path`` for this process: an exclusive flock on <path>/.lock, which the kernel drops when the process
    ends in any way (a crash or kill -9 too), so no stale lock outlives a run. A second process that asks for the
    same dir while the first runs is refused in one line, whatever the timing (the check that a dir holds no run
    cannot see a run that has not written yet). The same process may ask again (a test's runs, one after another)."""
    import fcntl

    path = path.absolute()
    if path in _CLAIMED:
        return
    path.mkdir(parents=True, exist_ok=True)
    lock = open(path / LOCK_FILE, "a+")  # noqa: SIM115 (held open until the process exits)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        lock.seek(0)
        holder = lock.read().strip()
        lock.close()
        in_use(key, path, holder)
    lock.seek(0)
    lock.truncate()
    lock.write(f"pid {os.getpid()} on {socket.gethostname()}\n")
    lock.flush()
    _CLAIMED[path] = lock


def _fail(message: str) -> None:
    """A Hydra callback cannot raise a ConfigError through train.py's task: the one line and exit 2 here."""
    print_error(message)
    sys.exit(2)


_NEW_RUN_DIR: tuple[Path, Path] | None = None  # (this run's dir, the topmost of its dirs that did not exist)
_FOUND_RUN_DIR: tuple[Path, bool, dict[str, bytes]] | None = None  # (a dir that existed, was it empty, its .hydra/)


def note_new_run_dir(run_dir: Path) -> None:
    """Before the run dir is made and before Hydra writes its .hydra/ files there: which of its dirs this process
    creates, or, for a dir that exists, whether it was empty and what its .hydra/ files held, so that a run refused
    before any work leaves the dir as it found it (discard_refused_run)."""
    global _NEW_RUN_DIR, _FOUND_RUN_DIR
    path, top = run_dir.absolute(), None
    while not path.exists():
        path, top = path.parent, path
    _NEW_RUN_DIR = (run_dir.absolute(), top) if top is not None else None
    _FOUND_RUN_DIR = None
    if top is None and run_dir.is_dir():
        hydra = {f: (run_dir / ".hydra" / f).read_bytes() for f in HYDRA_FILES if (run_dir / ".hydra" / f).is_file()}
        _FOUND_RUN_DIR = (run_dir.absolute(), not any(run_dir.iterdir()), hydra)


SET_UP_FILES = ("config.yaml", "wandb", "history")  # what set-up writes before the first step: no training in them


def discard_refused_run(run_dir: Path, log_name: str, set_up: bool = False, also: tuple[str, ...] = ()) -> bool:
    """Remove the run dir of a run refused before any work, with the parents made for it that are left empty; only
    when this process created it and it holds nothing but Hydra's own files (.hydra/ and the log of the set-up that
    refused it: the memory check, the last, follows Lightning's first lines). Anything a run writes besides (config.yaml
    before fit, checkpoints, a summary, a rank's log) keeps the dir. True when removed."""
    if _NEW_RUN_DIR is None or _NEW_RUN_DIR[0] != run_dir.absolute():
        return _restore_found_dir(run_dir, log_name)
    if not only_hydra_files(run_dir, log_name, (*SET_UP_FILES, *also) if set_up else also):
        return False
    shutil.rmtree(run_dir)
    top = _NEW_RUN_DIR[1]
    for parent in run_dir.absolute().parents:
        if not parent.is_relative_to(top) or any(parent.iterdir()):
            break
        parent.rmdir()
    return True


def _restore_found_dir(run_dir: Path, log_name: str) -> bool:
    """A refused run in a dir that existed before it: an empty one is emptied again (Hydra's files, the lock and the
    log of the refusal removed); one that held a run gets its .hydra/ files back as they were (Hydra had written the
    refused command over them). True when something was put back."""
    if _FOUND_RUN_DIR is None or _FOUND_RUN_DIR[0] != run_dir.absolute():
        return False
    _, was_empty, hydra = _FOUND_RUN_DIR
    if was_empty:
        if not only_hydra_files(run_dir, log_name):
            return False
        for p in list(run_dir.iterdir()):
            shutil.rmtree(p) if p.is_dir() else p.unlink()
        return True
    for name, data in hydra.items():
        (run_dir / ".hydra" / name).write_bytes(data)
    return bool(hydra)


def discard_unstarted_run(log_name: str = "train.log") -> bool:
    """The run dir this process made, removed when a signal stopped it while starting: before its first step, so
    nothing there but Hydra's files and what set-up writes (SET_UP_FILES: the config, an empty W&B run, the
    history's header) and, in a DDP run, its other ranks' logs of their start; a checkpoint or a summary keeps it."""
    return _NEW_RUN_DIR is not None and discard_refused_run(_NEW_RUN_DIR[0], log_name, set_up=True,
                                                            also=rank_logs(log_name))


def rank_logs(log_name: str) -> tuple[str, ...]:
    """A DDP run's other ranks' logs, <job>_rank<n>.log (distributed.LocalRanks), in the run dir this process made."""
    stem = Path(log_name).stem
    return tuple(p.name for p in _NEW_RUN_DIR[0].glob(f"{stem}_rank*.log")) if _NEW_RUN_DIR else ()


def unstarted_run(log_name: str = "train.log") -> bool:
    """Whether this process made its run dir and it holds only what set-up writes (discard_unstarted_run would
    remove it)."""
    return _NEW_RUN_DIR is not None and only_hydra_files(_NEW_RUN_DIR[0], log_name, (*SET_UP_FILES,
                                                                                     *rank_logs(log_name)))


def only_hydra_files(run_dir: Path, log_name: str, also: tuple[str, ...] = ()) -> bool:
    """Whether ``run_dir`` holds nothing but .hydra/ (Hydra's files only) and the log file (and ``also``)."""
    if not run_dir.is_dir() or not {p.name for p in run_dir.iterdir()} <= {".hydra", LOCK_FILE, log_name, *also}:
        return False
    hydra_dir, log = run_dir / ".hydra", run_dir / log_name
    if hydra_dir.exists() and (not hydra_dir.is_dir() or not {p.name for p in hydra_dir.iterdir()} <= set(HYDRA_FILES)):
        return False
    return not log.exists() or log.is_file()


def sweep_settings(overrides, params) -> tuple[list[str], dict]:
    """What defines a sweep's jobs: its command line's overrides (less where it runs, how many at once and
    ckpt_path) and its sweeper params."""
    kept = sorted(str(o) for o in overrides if not str(o).startswith(("hydra", "ckpt_path=")))
    return kept, {str(k): str(v) for k, v in (params or {}).items()}


def changed_sweep(sweep_dir: Path, config: DictConfig) -> str | None:
    """The one sentence when a sweep continued in place (ckpt_path=last) is not the sweep in that dir: its jobs would
    be skipped as completed, reporting the old runs under the new settings."""
    path = sweep_dir / "multirun.yaml"
    if not path.is_file():
        return None
    old = OmegaConf.load(path)
    before = sweep_settings(old.hydra.overrides.task, old.hydra.sweeper.get("params"))
    now = sweep_settings(config.hydra.overrides.task, config.hydra.sweeper.get("params"))
    if before == now:
        return None
    gone, new = sorted(set(before[0]) - set(now[0])), sorted(set(now[0]) - set(before[0]))
    what = ", ".join([*(f"-{o}" for o in gone), *(f"+{o}" for o in new)]) or "its sweeper params"
    return (f"hydra.sweep.dir={str(sweep_dir)!r} holds another sweep ({what}); continuing it (ckpt_path=last) takes "
            f"the same command it was started with: {' '.join(before[0])}; for other settings choose another dir.")


class RunDirGuard(Callback):
    """Refuse to start in a run dir that already holds a run, unless resuming into it (before Hydra writes
    its .hydra/ files there); refuse a sweep dir that holds finished jobs."""

    def on_run_start(self, config: DictConfig, **kwargs) -> None:
        from tinygpt.runtime.distributed import is_rank_zero, requeued

        config_composed()
        if not is_rank_zero() or requeued():  # another rank of this run, or a requeued SLURM job: its own dir
            return
        run_dir = Path(str(config.hydra.run.dir))
        note_new_run_dir(run_dir)
        writable_dir("hydra.run.dir", run_dir)
        refuse_if_held("hydra.run.dir", run_dir)
        ckpt = config.get("ckpt_path")
        if holds_run(run_dir) and resumes_into(run_dir, ckpt):  # a resume of a run that left no checkpoint (killed
            try:  # before its first one) refused here, before Hydra writes its .hydra/ files over that run's
                resolve_ckpt_path(str(ckpt), run_dir)
            except (ConfigError, FileNotFoundError) as err:
                _fail(str(err))
        if holds_run(run_dir) and not resumes_into(run_dir, ckpt):
            if ckpt not in (None, ""):  # a mistyped ckpt_path (lst): named before the dir's own refusal
                try:
                    resolve_ckpt_path(str(ckpt), run_dir)
                except (ConfigError, FileNotFoundError) as err:
                    _fail(str(err))
            if last_checkpoint_in(run_dir) is None:  # killed before its first checkpoint: nothing to resume
                _fail(f"hydra.run.dir={str(run_dir)!r} already holds a run, which left no checkpoint to resume; choose "
                      f"another dir (the default is unique), or delete {run_dir} to start it over there.")
            _fail(
                f"hydra.run.dir={str(run_dir)!r} already holds a run; choose another dir (the default is unique) "
                "or resume that run with ckpt_path=last."
            )
        claim("hydra.run.dir", run_dir)  # after the check: a refused run takes nothing

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        config_composed()
        typo = swept_mistake(config, list(config.hydra.overrides.task), set(config.hydra.runtime.choices))
        if typo:
            _fail(typo)
        target = str(config.hydra.launcher.get("_target_", ""))
        if target.endswith("SlurmLauncher") and shutil.which("sbatch") is None:  # before anything is written
            _fail("hydra/launcher=slurm submits each job with sbatch, and this machine has no sbatch on its PATH; "
                  "run on a SLURM login node, or drop hydra/launcher=slurm to run the sweep here.")
        sweep_dir = Path(str(config.hydra.sweep.dir))
        writable_dir("hydra.sweep.dir", sweep_dir)
        refuse_if_held("hydra.sweep.dir", sweep_dir)
        if sweep_dir.is_dir() and any(holds_run(p) for p in sweep_dir.iterdir() if p.is_dir()):
            if str(config.get("ckpt_path")) == "last":  # continuing this sweep in place
                changed = changed_sweep(sweep_dir, config)
                if changed:
                    _fail(changed)
                print(f"continuing the sweep in {sweep_dir}: ended jobs ({', '.join(ENDED)}) are skipped, interrupted "
                      "ones resume from their checkpoint, the others start.", file=sys.stderr, flush=True)
                return
            _fail(f"hydra.sweep.dir={str(sweep_dir)!r} already holds a sweep's runs; choose another dir (the "
                  "default is unique), or continue that sweep: the same command with ckpt_path=last.")
        if str(config.get("ckpt_path")) == "last":  # nothing to continue: said, so a forgotten sweep dir shows
            print(f"note: ckpt_path=last continues a sweep in place, but hydra.sweep.dir={str(sweep_dir)!r} holds no "
                  "job of one: every job starts afresh (to continue a sweep, give its hydra.sweep.dir).",
                  file=sys.stderr, flush=True)
        claim("hydra.sweep.dir", sweep_dir)


def job_dirs(sweep_dir: Path) -> list[Path]:
    """Each job's dir (the ones Hydra wrote .hydra/overrides.yaml into), in job order."""
    dirs = {p.parent.parent for p in sweep_dir.glob("**/.hydra/overrides.yaml")}

    def key(p: Path):
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", str(p.relative_to(sweep_dir)))]

    return sorted(dirs, key=key)


def job_row(job_dir: Path, stopped: bool = False) -> dict:
    """overrides, status (completed | diverged | interrupted | failed | not started | unknown), val loss, error.
    ``stopped``: the sweep was stopped by a signal, so a job that left nothing was not started."""
    overrides = OmegaConf.to_container(OmegaConf.load(job_dir / ".hydra" / "overrides.yaml"))
    row = {"dir": job_dir, "overrides": " ".join(overrides), "status": "not started" if stopped else "unknown",
           "val_loss": None, "error": None}
    if (job_dir / ERROR_FILE).exists():
        row.update(status="failed", error=(job_dir / ERROR_FILE).read_text().strip())
    elif (job_dir / "summary.json").exists():
        s, damaged = read_summary(job_dir / "summary.json")
        if s is None:
            row.update(status="unreadable", error=f"its summary.json cannot be read ({damaged})")
        else:
            row.update(status=s.get("status") or ("diverged" if s.get("diverged") else "completed"),
                       val_loss=s.get("val_loss"))
    return row


class SweepReport(Callback):
    """At the end of a sweep: a table of its jobs (overrides, status, val loss, run dir); the sweep exits 1
    when any job failed, after every job has run, and 128 + the signal when a parallel sweep was stopped by one
    (runtime.interrupts.SweepStop, installed here for hydra/launcher=parallel, n_jobs=1 included)."""

    def on_multirun_start(self, config: DictConfig, **kwargs) -> None:
        from tinygpt.runtime.interrupts import STOP_FILE, SweepStop

        sweep_dir = Path(str(config.hydra.sweep.dir))
        # a stop file here is older than this sweep (no job has started yet): the signal that stopped the run of
        # this sweep being continued now, not this one's; left in place it would skip every job again
        (sweep_dir / STOP_FILE).unlink(missing_ok=True)
        if runs_jobs_in_workers(config.hydra.launcher):
            SweepStop(sweep_dir, continue_with=lambda: continue_command(sweep_dir)).install()

    def on_multirun_end(self, config: DictConfig, **kwargs) -> None:
        from tinygpt.runtime.interrupts import sweep_stop_signal

        sweep_dir = Path(str(config.hydra.sweep.dir))
        signum = sweep_stop_signal(sweep_dir)
        print_sweep_table(sweep_dir, signum, workers=runs_jobs_in_workers(config.hydra.launcher))


def sweep_jobs(sweep_dir: Path) -> list[list[str]] | None:
    """Every job's overrides in Hydra's order, expanded from the sweep's multirun.yaml as the basic sweeper
    expands them: its params, then the command line's (a later value of a key replaces an earlier one), each
    key's values in turn, the last key varying fastest. None when that cannot be done."""
    path = sweep_dir / "multirun.yaml"
    if not path.exists():
        return None
    try:
        from hydra.core.override_parser.overrides_parser import OverridesParser

        cfg = OmegaConf.load(path)
        params = cfg.hydra.sweeper.get("params") or {}
        args = [f"{k}={v}" for k, v in params.items()] + [str(o) for o in cfg.hydra.overrides.task]
        choices: dict[str, list[str]] = {}
        for o in OverridesParser.create().parse_overrides(args):
            key = o.get_key_element()
            if o.is_sweep_override() and not o.is_discrete_sweep():
                return None  # a range or interval sweep is another sweeper's: the table shows what ran
            values = o.sweep_string_iterator() if o.is_sweep_override() else [o.get_value_element_as_str()]
            choices[key] = [f"{key}={v}" for v in values]
        return [list(job) for job in itertools.product(*choices.values())]
    except Exception:  # syntax this expansion does not know: the table shows what ran
        return None


def continue_command(sweep_dir: Path) -> str:
    """The command that continues a sweep in place: the same overrides, the same dir, ckpt_path=last."""
    import shlex

    cfg = OmegaConf.load(sweep_dir / "multirun.yaml")
    hydra_args = [str(o) for o in cfg.hydra.overrides.hydra if not str(o).startswith(("hydra.sweep.dir=",
                                                                                     "hydra.mode="))]
    task = [str(o) for o in cfg.hydra.overrides.task if not str(o).startswith("ckpt_path=")]
    return " ".join(["python train.py -m", *map(shlex.quote, task + hydra_args),
                     shlex.quote(f"hydra.sweep.dir={sweep_dir}"), "ckpt_path=last"])


def print_sweep_table(sweep_dir: Path, signum: int | None, workers: bool, exit: bool = True) -> list[dict]:
    """The sweep's table: one row per job (the jobs a stopped sweep never started included, when its grid can be
    expanded); on a stop, the counts and the command that continues the sweep; the sweep's exit status."""
    from rich.console import Console
    from rich.table import Table

    rows = [job_row(d, stopped=signum is not None) for d in job_dirs(sweep_dir)]
    jobs = sweep_jobs(sweep_dir) if signum is not None else None
    for i in range(len(rows), len(jobs or [])):  # never started, so Hydra made no dir for them
        rows.append({"dir": sweep_dir / str(i), "overrides": " ".join(jobs[i]), "status": "not started",
                     "val_loss": None, "error": None})
    if not rows:
        return rows
    header = ["job", "overrides", "status", "val loss", "run dir"]
    cells = [[r["dir"].name, r["overrides"], r["status"], "-" if r["val_loss"] is None
              or not math.isfinite(r["val_loss"]) else f"{r['val_loss']:.4f}", str(r["dir"])] for r in rows]
    console = Console(stderr=True)
    if console.is_terminal:
        table = Table(title=f"sweep {sweep_dir}", title_justify="left")
        for col in header:
            table.add_column(col, overflow="fold")
        colours = {"completed": "green", "diverged": "yellow", "interrupted": "yellow", "failed": "red"}
        for job, overrides, status, loss, where in cells:
            table.add_row(job, overrides, f"[{colours.get(status, 'white')}]{status}[/]", loss, where)
        console.print(table)
    else:  # piped or logged: one line per job, never wrapped, so that each can be grepped and each path copied
        console.print(f"sweep {sweep_dir}", soft_wrap=True, highlight=False)
        cells = [header, *cells]
        widths = [max(len(row[i]) for row in cells) for i in range(len(cells[0]) - 1)]
        for row in cells:
            line = "  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)) + "  " + row[-1]
            console.print(line, soft_wrap=True, highlight=False, markup=False)
    # quiet workers leave the hint to the table; a job run in this process printed its own
    if workers and any(sweep_dir.glob("*/wandb/offline-run-*")):
        console.print(f"W&B ran offline. To upload every job: [bold]wandb sync "
                      f"{sweep_dir}/*/wandb/offline-run-*[/]", soft_wrap=True)
    failed = [r for r in rows if r["status"] == "failed"]
    if failed:
        console.print(f"[bold red]{len(failed)} of {len(rows)} jobs failed[/]:")
        for r in failed:
            console.print(f"  job {r['dir'].name} ({r['overrides']}): {r['error']}", soft_wrap=True)
    if signum is not None:
        import signal

        counts = {s: sum(r["status"] == s for r in rows) for s in ("interrupted", "not started")}
        console.print(f"[bold yellow]stopped by {signal.Signals(signum).name}[/]: {counts['interrupted']} "
                      f"interrupted, {counts['not started']} not started. Continue the whole sweep (ended jobs "
                      f"skipped, interrupted ones resumed, the others started):\n  {continue_command(sweep_dir)}",
                      soft_wrap=True)
        if exit:
            sys.exit(128 + signum)
    if failed and exit:
        sys.exit(1)
    return rows


# ----------------------------------------------------------------------------- checkpoints of a run dir


def last_path_in(run_dir: Path) -> Path:
    """A run dir's last.ckpt, as ``ckpt_path=last`` finds it."""
    return Path(run_dir) / "checkpoints" / LAST


def last_checkpoint_in(d: Path) -> Path | None:
    """A run dir's last checkpoint: its checkpoints/last.ckpt, else a last.ckpt beside its files; None without one."""
    return next((p for p in (last_path_in(d), Path(d) / LAST) if p.is_file()), None)


def resolve_ckpt_path(value: str | None, run_dir: Path) -> Path | None:
    """ckpt_path as given: null (no resume), ``last`` (this run dir's last checkpoint), a run dir, or a file."""
    if value is None or value == "":
        return None
    if str(value) == "last":
        path = last_path_in(run_dir)
        if not path.is_file():
            if holds_run(run_dir):  # it is the run (killed before its first checkpoint, or it saved none)
                raise ConfigError(
                    f"ckpt_path=last but the run in hydra.run.dir={str(run_dir)!r} left no checkpoint ({path} does "
                    "not exist: it stopped before its first one, or saved none), so there is nothing to resume; start "
                    f"it over without ckpt_path=last, in another hydra.run.dir or after deleting {run_dir}.")
            raise ConfigError(
                f"ckpt_path=last but {path} does not exist; set hydra.run.dir to the run to resume "
                "(the one that printed the resume command)."
            )
        return path
    path = Path(value).expanduser()
    found = last_checkpoint_in(path) if path.is_dir() else path
    if found is None or not found.is_file():
        near = "" if path.exists() or not difflib.get_close_matches(str(value), ["last"], n=1, cutoff=0.6) else \
            " (did you mean last?)"
        raise ConfigError(
            f"ckpt_path={str(value)!r} is not a checkpoint file or a run dir holding checkpoints/last.ckpt{near}."
        )
    return found


def checkpoint_in(d: Path) -> Path:
    """A run dir's last checkpoint (``last_checkpoint_in``); a sweep dir, or a run that wrote none, is named as what it
    is (FileNotFoundError)."""
    found = last_checkpoint_in(d)
    if found is not None:
        return found
    summary = d / "summary.json"
    s, _ = read_summary(summary)
    if s is not None:
        raise FileNotFoundError(f"{d} is a run dir without a checkpoint (status {s.get('status')!r} at step "
                                f"{s.get('steps')}: it stopped before its first checkpoint); pass another run.")
    jobs = sorted(p.parent.parent.name for p in d.glob(f"*/checkpoints/{LAST}"))
    if (d / "multirun.yaml").exists() or jobs:
        example = f" e.g. --ckpt {d / jobs[0]}" if jobs else ""
        raise FileNotFoundError(f"{d} is a sweep dir ({len(jobs)} jobs with a checkpoint); pass one job's dir,"
                                f"{example}.")
    raise FileNotFoundError(f"{d} holds no checkpoint (no checkpoints/last.ckpt); pass a run dir or a .ckpt file.")


def checkpoint_file(path: str | Path) -> Path:
    """The .ckpt file a --ckpt names: the file itself, or a run dir's last checkpoint (``checkpoint_in``), when it is
    a torch archive (checked without torch: the CLIs refuse a wrong path before importing it)."""
    path = Path(path)
    if path.is_dir():  # a run dir: use its last checkpoint
        path = checkpoint_in(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist.")
    check_archive(path)
    return path


def check_archive(path: str | Path) -> None:
    """Nothing when ``path`` is a torch archive (a zip holding ``<name>/data.pkl``, what torch.save writes) whose
    pickle, read without torch, is a train.py checkpoint's dict (or cannot be read so: torch says why at set-up);
    else one sentence (ConfigError). A zip of other files had been refused only after torch, in 16 s."""
    if not zipfile.is_zipfile(path):
        raise ConfigError(f"checkpoint {str(path)!r} is not a readable checkpoint (not a torch archive: truncated, "
                          "or another kind of file).")
    try:
        with zipfile.ZipFile(path) as archive:
            torch_archive = archive_pickle(archive) is not None
    except (OSError, zipfile.BadZipFile):
        torch_archive = False
    if not torch_archive:
        raise ConfigError(f"checkpoint {str(path)!r} is not a readable checkpoint (a zip archive, but not one torch "
                          "wrote: it holds no data.pkl).")
    record = checkpoint_record(Path(path))
    if record is not None and (not isinstance(record, dict) or "state_dict" not in record
                               or "hyper_parameters" not in record):
        raise ConfigError(f"checkpoint {str(path)!r} was not written by train.py (no state_dict/hyper_parameters).")

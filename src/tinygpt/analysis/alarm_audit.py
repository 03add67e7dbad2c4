"""The leak alarm replayed on finished runs: does it stay silent on every causal model a sweep trained?

    python scripts/alarm_audit.py multirun/causal_mask/<date_time> multirun/sqrt_dk/<date_time>

For each run configured causal (and without an injected attention bug) that left a checkpoint: the final model,
the run's own validation windows (its data config), and the alarm's two checks exactly as at a validation (the future
leak on the alarm's windows, the honest-loss gap on the honest-loss probe's windows), with the default alarm
settings. Sweeps made before the alarm existed can be audited this way; a causal mask's leak is structural, so a
model that shows none at the end showed none before. Prints one line per false alarm and a count. A path that does
not exist, is not a directory or holds no runs, and a summary.json that cannot be read, are one line and exit status 2.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import torch
from hydra.utils import instantiate
from rich.progress import track

from tinygpt.runtime import run_dirs
from tinygpt.runtime.errors import ConfigError, print_error
from tinygpt.train.probes import diagnostics
from tinygpt.train.probes.leak_alarm import LeakAlarm, honest_gap
from tinygpt.train.module import load_trained
from tinygpt.runtime.old_runs import outdated, refusal


def read_summary(path: Path) -> dict:
    """A run's summary.json; a truncated or broken one is a ConfigError naming the file."""
    try:
        summary = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path} is not a readable summary.json ({err}): truncated or broken; rerun that run "
                          "or delete its dir.") from None
    if not isinstance(summary, dict):
        raise ConfigError(f"{path} is not a readable summary.json (not a JSON object); rerun that run or delete "
                          "its dir.")
    old = outdated(summary, summary.get("config"))
    if old:
        raise ConfigError(refusal(path.parent, old))
    return summary


def summaries_in(sweep: Path) -> list[Path]:
    """The summary.json files under a sweep (or run) dir; a path that does not exist, is not a directory or holds
    no runs is a ConfigError (a mistyped path must not pass the audit)."""
    if not sweep.exists():
        raise ConfigError(f"{sweep} does not exist; give a sweep or run directory (multirun/<experiment>/<date_time>).")
    if not sweep.is_dir():
        raise ConfigError(f"{sweep} is not a directory; give a sweep or run directory (multirun/<experiment>/"
                          "<date_time>).")
    found = sorted(sweep.rglob("summary.json"))
    if not found:
        raise ConfigError(f"{sweep} holds no runs (no summary.json under it); give a sweep or run directory.")
    return found


def causal_runs(sweeps: list[Path]) -> list[Path]:
    """The run dirs under ``sweeps`` whose model is configured causal with no injected bug and that left last.ckpt."""
    out = []
    for sweep in sweeps:
        for path in summaries_in(sweep):
            cfg = read_summary(path).get("config", {})
            model = cfg.get("model", {})
            if (model.get("attn", {}).get("causal") and not model.get("patch")
                    and run_dirs.last_path_in(path.parent).exists()):
                out.append(path.parent)
    return out


def check_run(run_dir: Path, alarm: LeakAlarm, data_cache: dict) -> dict:
    """The alarm's checks on a run's final model: {"run", "future_leak", "gap", "se", "signal"}."""
    cfg = read_summary(run_dir / "summary.json")["config"]
    model, _, _ = load_trained(run_dirs.last_path_in(run_dir))
    key = json.dumps([cfg["data"], cfg["corpus"]], sort_keys=True)
    if key not in data_cache:  # runs of one sweep share their data: set it up once
        dm = instantiate(cfg["data"], instantiate(cfg["corpus"]))  # positional: Hydra would make a kwarg a config
        dm.prepare_data()
        dm.setup("fit")
        data_cache[key] = dm
    dm = data_cache[key]
    probe = (cfg.get("callbacks") or {}).get("honest_loss") or {}
    x, _ = dm.spread_windows(alarm.windows)
    leak = diagnostics.future_leak(model, x)
    px, py = dm.spread_windows(probe.get("windows", 16))
    positions = diagnostics.spread_positions(px.shape[1], probe.get("positions", 8))
    ar, tf = diagnostics.honest_and_teacher_forced(model, px, py, positions)  # 2 x (N, P)
    gap, se = honest_gap((ar - tf).mean(1))
    found = alarm.check(leak, gap, se)
    return {"run": str(run_dir), "future_leak": leak, "gap": gap, "se": se, "signal": found and found[0]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="scripts/alarm_audit.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweeps", nargs="+", type=Path)
    args = parser.parse_args(argv)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # many small models: one thread each is faster; restored for an in-process caller
    try:
        return audit(args)
    finally:
        torch.set_num_threads(threads)


def audit(args) -> int:
    alarm, cache = LeakAlarm(), {}
    try:
        runs = causal_runs(args.sweeps)
    except ConfigError as err:
        print_error(str(err))
        return 2
    results = [check_run(r, alarm, cache) for r in track(runs, description="alarm audit", transient=True)]
    false = [r for r in results if r["signal"]]
    for r in false:
        print(f"false alarm: {r['run']}: {r['signal']} (future leak {r['future_leak']:.3g}, gap {r['gap']:.3g} "
              f"± {r['se']:.2g})")
    worst_gap = max((r["gap"] for r in results), default=float("nan"))
    worst_leak = max((r["future_leak"] for r in results), default=float("nan"))
    print(f"alarm audit: {len(results)} causal runs, {len(false)} false alarms (largest future leak {worst_leak:.3g}, "
          f"largest honest-loss gap {worst_gap:.3g} nats)")
    return 1 if false else 0

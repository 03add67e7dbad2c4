"""Rewrite runs written by an earlier version in today's names, once, in place:

    python scripts/migrate_run.py <run or sweep dir> [more dirs]

Each run dir under the given dirs (one holding summary.json, config.yaml or checkpoints/) gets its summary.json and
config.yaml in today's form (tinygpt.analysis.sweep.current_config: an attention_bug as model.patch, the corpus as
its own node, renamed keys under today's names), its history/metrics.csv columns under today's names, and its
checkpoints' hyper-parameters likewise (an attention_bug as the model's patch), each file replaced atomically. A file
already in today's form is left untouched, so running it twice changes nothing.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
from pathlib import Path

from tinygpt.analysis.sweep import current_config, current_summary
from tinygpt.runtime.errors import ConfigError, print_error
from tinygpt.train.summary import current_name, current_names


def replace(path: Path, text: str | bytes) -> bool:
    """``path`` holds ``text`` afterwards (written to a temporary file, then renamed); False if it already did."""
    old = path.read_bytes()
    new = text.encode("utf-8") if isinstance(text, str) else text
    if old == new:
        return False
    tmp = path.with_name(path.name + ".migrating")
    tmp.write_bytes(new)
    os.replace(tmp, path)
    return True


def migrate_summary(path: Path) -> bool:
    data = json.loads(path.read_text())
    return replace(path, json.dumps(current_summary(data), indent=2, default=str))


def migrate_config(path: Path) -> bool:
    from omegaconf import OmegaConf

    config = OmegaConf.to_container(OmegaConf.load(path))
    return replace(path, OmegaConf.to_yaml(current_names(current_config(config))))


def migrate_history(path: Path) -> bool:
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    if not rows or [current_name(k) for k in rows[0]] == rows[0]:
        return False
    rows[0] = [current_name(k) for k in rows[0]]
    out = io.StringIO()
    csv.writer(out).writerows(rows)
    return replace(path, out.getvalue())


def migrate_checkpoint(path: Path) -> bool:
    import torch

    from tinygpt.runtime import checkpoint

    ckpt = checkpoint.load(path)
    hp = ckpt.get("hyper_parameters") or {}
    if "attention_bug" not in hp:
        return False
    bug = hp.pop("attention_bug")
    hp["model"] = current_config({"model": hp.get("model") or {}, "attention_bug": bug})["model"]
    buffer = io.BytesIO()
    torch.save(ckpt, buffer)
    return replace(path, buffer.getvalue())


def run_dirs(roots: list[Path]) -> list[Path]:
    """The run dirs under ``roots``: each dir holding summary.json, config.yaml or a checkpoints/ dir."""
    found = set()
    for root in roots:
        if not root.is_dir():
            raise ConfigError(f"{root} is not a directory; give run or sweep dirs.")
        for marker in ("summary.json", "config.yaml", "checkpoints"):
            found |= {p.parent for p in root.rglob(marker) if ".hydra" not in p.parts}
    return sorted(found)


def migrate(run: Path) -> int:
    """How many of ``run``'s files were rewritten."""
    n = 0
    for name, step in (("summary.json", migrate_summary), ("config.yaml", migrate_config),
                       ("history/metrics.csv", migrate_history)):
        if (run / name).is_file():
            n += step(run / name)
    for ckpt in sorted((run / "checkpoints").glob("*.ckpt")) if (run / "checkpoints").is_dir() else []:
        n += migrate_checkpoint(ckpt)
    return n


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/migrate_run.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", type=Path, help="run dirs or sweep dirs")
    args = ap.parse_args(argv)
    try:
        runs = run_dirs(args.dirs)
        changed = sum(migrate(r) for r in runs)
    except ConfigError as err:
        print_error(f"migrate_run: {err}")
        return 2
    print(f"migrate_run: {changed} files rewritten in {len(runs)} run dirs")
    return 0

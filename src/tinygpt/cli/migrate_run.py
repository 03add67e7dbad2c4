"""Rewrite runs written by an earlier version in today's names, once, in place:

    python scripts/migrate_run.py <run or sweep dir> [more dirs]

Each run dir under the given dirs (one holding summary.json, config.yaml or checkpoints/) gets its summary.json and
config.yaml in today's form (an attention_bug as model.patch, the corpus as its own node, renamed keys under today's
names: the table is tinygpt.runtime.old_runs), its history/metrics.csv columns and diagnostics.npz arrays under
today's names, and its checkpoints' hyper-parameters likewise (an attention_bug as the model's patch), each file
replaced atomically. A file already in today's form is left untouched, so running it twice changes nothing. Every
other reader of runs refuses one that still has an old name, naming this script.
"""

from __future__ import annotations

import argparse
import csv
import dataclasses
import io
import json
import os
from pathlib import Path
from typing import Any

from tinygpt.data.config import DataConfig
from tinygpt.data.corpus import CORPORA
from tinygpt.runtime.errors import ConfigError, OneLineParser, print_error
from tinygpt.runtime.old_runs import MOVED_CLASSES, current_name


def current_names(value: Any) -> Any:
    """``value`` with every dict key (at any depth) that has been renamed under its current name
    (runtime.old_runs.RENAMED); where a value is found under both names (a run resumed across the rename), today's
    name keeps its own."""
    if isinstance(value, dict):
        names = {k: current_name(k) for k in value}
        return {new: current_names(value[k]) for k, new in names.items() if new == k or new not in value}
    if isinstance(value, list):
        return [current_names(v) for v in value]
    return value


def current_summary(data: dict) -> dict:
    """A run's summary.json in today's names and form: renamed keys under their current names and its config in
    today's form (``current_config``)."""
    data = current_names(data)
    return {**data, "config": current_config(data["config"])} if isinstance(data.get("config"), dict) else data


def current_config(config: dict) -> dict:
    """A run's config in today's form: an ``attention_bug`` (before model.patch) as the first of ``model.patch``; and
    the corpus as its own node (``corpus``: ``_target_`` and its fields) where a run made before the corpus group
    named it in ``data`` (data.source, its fields at data level and data.corpus, the node it built; a text corpus's
    data.vocab_size was data.bpe_vocab_size). A source this version lacks is left as it was."""
    config = dict(config)
    bug = config.pop("attention_bug", None)
    if bug:
        model = dict(config.get("model") or {})
        target = MOVED_CLASSES.get(bug.get("_target_"), bug.get("_target_"))
        model["patch"] = [{**bug, "_target_": target}, *(model.get("patch") or [])]
        config["model"] = model
    old = dict(config.get("data") or {})
    if "corpus" in config or old.get("source") not in CORPORA:
        return config
    kind = CORPORA[old.pop("source")]
    built = old.pop("corpus", None)  # the node the run built, when it did: the fields below, resolved
    corpus = {"_target_": f"{kind.__module__}.{kind.__name__}"}
    for f in dataclasses.fields(kind):
        if f.name in old:
            corpus[f.name] = old[f.name] if f.name in DataConfig.__dataclass_fields__ else old.pop(f.name)
    if isinstance(built, dict):
        corpus.update({k: v for k, v in built.items() if k != "_target_"})
    if kind.needs_tokenizer and "vocab_size" in old:
        old["bpe_vocab_size"] = old.pop("vocab_size")
    return {**config, "data": old, "corpus": corpus}


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


def migrate_arrays(path: Path) -> bool:
    import numpy as np

    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    if all(current_name(k) == k for k in arrays):
        return False
    buffer = io.BytesIO()
    np.savez(buffer, **current_names(arrays))
    return replace(path, buffer.getvalue())


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
                       ("history/metrics.csv", migrate_history), ("diagnostics.npz", migrate_arrays)):
        if (run / name).is_file():
            n += step(run / name)
    for ckpt in sorted((run / "checkpoints").glob("*.ckpt")) if (run / "checkpoints").is_dir() else []:
        n += migrate_checkpoint(ckpt)
    return n


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser("scripts/migrate_run.py", description=__doc__,
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

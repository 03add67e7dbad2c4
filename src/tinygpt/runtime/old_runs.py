"""What runs of earlier versions named differently, in one table.

The migration script (``scripts/migrate_run.py``, tinygpt.cli.migrate_run) rewrites a run's files to today's names
with it, once. Everything else reads one spelling: a reader given a run that still holds an old name refuses it in
one line naming the script (``outdated`` says which name).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

# keys of summary.json, diagnostics.npz, history/metrics.csv (also as ``diag/<key>``) and callbacks: old -> today's
RENAMED = {
    "val_loss_autoregressive": "val_loss_honest",
    "val/loss_autoregressive": "val/loss_honest",
    "autoregressive_positions": "honest_positions",
    "autoregressive_at": "honest_at",
    "loss_by_position_autoregressive": "loss_by_position_honest",
    "autoregressive_window_position": "honest_window_position",
    "autoregressive_loss": "honest_loss",
}

# config keys (dotted) runs had before a group of their own took them over: old -> where the setting is today
MOVED_SETTINGS = {
    "attention_bug": "model.patch",
    "data.source": "corpus (its own config group)",
    "data.corpus": "corpus",
}

# classes a run's config or checkpoint names by their import path: old -> today's
MOVED_CLASSES = {
    "tinygpt.experiments.leaky_masks.AttentionBug": "tinygpt.experiments.partial_leaks.bugs.AttentionBug",
}

MIGRATE = "python scripts/migrate_run.py"


def current_name(key: str) -> str:
    """``key``'s name today (also as ``diag/<key>``, the end-of-run scalars in the loggers)."""
    prefix = "diag/" if key.startswith("diag/") else ""
    return prefix + RENAMED.get(key[len(prefix):], key[len(prefix):])


def old_keys(value: Any) -> list[str]:
    """The renamed keys found in ``value``: a key list, or the keys of dicts at any depth (in lists too)."""
    if isinstance(value, Mapping):
        return [k for k in value if current_name(k) != k] + [o for v in value.values() for o in old_keys(v)]
    if isinstance(value, (list, tuple)):
        return [o for v in value for o in old_keys(v)]
    return []


def old_settings(config: Mapping) -> list[str]:
    """The settings of ``config`` (a run's composed config, or a checkpoint's hyper-parameters) that moved."""
    found = []
    for dotted in MOVED_SETTINGS:
        node: Any = config
        for part in dotted.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node is not None and not (dotted == "data.corpus" and "corpus" in config):
            found.append(dotted)
    return found


def outdated(keys: Iterable[str] | Mapping | None = None, config: Mapping | None = None) -> str | None:
    """Which old name a run's keys (or nested dicts) and config hold, as 'val_loss_autoregressive (today
    val_loss_honest)'; None when everything is in today's names."""
    for key in old_keys(keys if isinstance(keys, Mapping) else list(keys or ())):
        return f"{key} (today {current_name(key)})"
    for dotted in old_settings(config or {}):
        return f"{dotted} (today {MOVED_SETTINGS[dotted]})"
    return None


def refusal(where: Any, old: str, dirs: Any = None) -> str:
    """The one line a reader of an outdated run says."""
    return (f"{where} was written by an earlier tinygpt: it names {old}. Rewrite it in today's names once with "
            f"`{MIGRATE} {dirs if dirs is not None else where}`, then run this again.")

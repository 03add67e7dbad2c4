"""The experiments, found in their folders: each ``tinygpt/experiments/<name>/__init__.py`` holds one ``EXPERIMENT``
record, and nothing else names the experiments. Importing a record is light (no torch): the config's schemas are
registered from it before the config is composed.
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from dataclasses import dataclass


@dataclass(frozen=True)
class Experiment:
    """One experiment: ``name`` (its folder, its report's name: scripts/report.py <name>), ``prediction`` (the
    dataclass of its predictions, the schema of ``prediction:`` in its configs), ``sweeps`` (the configs under
    configs/experiment/ whose sweeps together make its full sweep; default: its name), ``variants`` (its other configs,
    e.g. a quick version: their runs belong to its report too), ``staged`` (those of its configs whose design may
    add runs: a sweep's beyond its grid, overriding only the grid's keys; a variant's, the reruns its report asks
    for) and ``order`` (its place in the experiments' index and README's list, 1 first; 0: after those, by name)."""

    name: str
    prediction: type
    sweeps: tuple[str, ...] = ()
    variants: tuple[str, ...] = ()
    staged: tuple[str, ...] = ()
    order: int = 0

    def __post_init__(self):
        if not self.sweeps:
            object.__setattr__(self, "sweeps", (self.name,))

    @property
    def configs(self) -> tuple[str, ...]:
        """Every config under configs/experiment/ whose runs are this experiment's."""
        return self.sweeps + self.variants


@functools.cache
def experiments() -> dict[str, Experiment]:
    """name -> record, for every folder of tinygpt.experiments that holds one, in the index's order (``order``, then
    name)."""
    import tinygpt.experiments as package

    found = {}
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        if info.ispkg:
            record = getattr(importlib.import_module(f"{package.__name__}.{info.name}"), "EXPERIMENT", None)
            if isinstance(record, Experiment):
                if record.name != info.name:
                    raise ValueError(f"tinygpt/experiments/{info.name}/ holds the record of {record.name!r}; a "
                                     "record's name is its folder's.")
                found[record.name] = record
    return dict(sorted(found.items(), key=lambda item: (item[1].order or float("inf"), item[0])))


def experiment_of(config: str | None) -> Experiment | None:
    """The experiment a config of configs/experiment/ belongs to (causal_mask_quick -> causal_mask), or None."""
    return next((e for e in experiments().values() if config in e.configs), None)


def register_schemas() -> None:
    """Each experiment's prediction type in Hydra's ConfigStore, as ``/schema/prediction/<name>`` (its configs name
    it in their defaults list: ``- /schema/prediction@prediction: <name>``)."""
    from hydra.core.config_store import ConfigStore

    from tinygpt.runtime.schema import schema_of

    store = ConfigStore.instance()
    for e in experiments().values():
        store.store(group="schema/prediction", name=e.name, node=schema_of(e.prediction))

"""The config's root keys and where each group's schema comes from: dataclasses registered with Hydra's ConfigStore
and named at the head of the YAML defaults lists, so that a mistyped key or a value of the wrong type is refused
while the config is composed, before any work (one line: tinygpt/runtime/errors.py).

Each group's schema is derived from the code that owns its settings (tinygpt.runtime.schema.schema_of): ``model``
from GPTConfig, ``optim`` from AdamWCosine, ``data`` from DataConfig, each ``corpus`` from its class; an
experiment's ``prediction`` is registered from its own folder (tinygpt.experiments.registry). Every field is
MISSING: its default, with its comment, lives in the YAML. Left to the objects they build: ``trainer`` (Lightning's
Trainer checks its own arguments), ``callbacks`` and ``logger`` (each checks its own); a mistyped key there is
refused all the same, since the composed config is closed.
Torch-free: the schemas are registered before anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, OmegaConf

from tinygpt.data.config import DataConfig
from tinygpt.data.corpus import CORPORA
from tinygpt.model.config import GPTConfig
from tinygpt.runtime.schema import marked, schema_of
from tinygpt.train.optim import AdamWCosine

ModelSchema = schema_of(GPTConfig, skip=("vocab_size",))  # the vocabulary comes with the data
DataSchema = schema_of(DataConfig, target=True)
# decay_steps is ${trainer.max_steps} by default: typed loosely, so that a bad max_steps is named as the key set
OptimSchema = schema_of(AdamWCosine, target=True, loose=("decay_steps",))


@dataclass
class DiagnosticsSchema:
    windows: int = MISSING
    max_val_tokens: Optional[int] = MISSING


@dataclass
class TrainSchema:
    seed: int = MISSING
    ckpt_path: Optional[str] = field(default=MISSING, metadata={"path": True})
    init_from: Optional[str] = MISSING  # null reads as scratch
    compile: bool = MISSING
    check_memory: bool = MISSING
    prediction: Any = MISSING  # null, or an experiment's typed predictions (its folder's prediction.py)
    diagnostics: DiagnosticsSchema = MISSING
    model: ModelSchema = MISSING
    optim: OptimSchema = MISSING
    data: DataSchema = MISSING
    corpus: Any = MISSING  # typed by its own class's schema (SCHEMAS), named by configs/corpus/<source>.yaml
    trainer: Any = MISSING
    logger: Any = MISSING
    callbacks: Any = MISSING


SCHEMAS = {  # (group, name) -> its dataclass; YAML names them in defaults lists: `- /schema/corpus/text_file@_here_`
    (None, "train_schema"): TrainSchema,
    **{("schema/corpus", source): schema_of(kind, target=True) for source, kind in CORPORA.items()},
}


def path_keys() -> list[str]:
    """Every key whose field its owner marks as a path (``field(..., metadata={"path": True})``: the root's, each
    group's and each corpus's, e.g. corpus.path, data.cache_dir): where a run's files are, not what it computes, and
    long, so a sweep job's name (Hydra's override_dirname, the W&B run's name) leaves them out: configs/hydra/
    default.yaml's ``exclude_keys: ${path_keys:}``."""
    keys = set(marked(TrainSchema, "path"))
    for (group, _), node in SCHEMAS.items():
        if group == "schema/corpus":
            keys.update(f"corpus.{key}" for key in marked(node, "path"))
    return sorted(keys)


def register_schemas() -> None:
    """Put the schemas in Hydra's ConfigStore, and ``${path_keys:}`` among OmegaConf's resolvers (before the config is
    composed: train.py, the tests' compose)."""
    store = ConfigStore.instance()
    for (group, name), node in SCHEMAS.items():
        store.store(group=group, name=name, node=node)
    if not OmegaConf.has_resolver("path_keys"):
        OmegaConf.register_new_resolver("path_keys", path_keys)

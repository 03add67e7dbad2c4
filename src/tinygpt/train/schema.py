"""The config's root keys and where each group's schema comes from: dataclasses registered with Hydra's ConfigStore
and named at the head of the YAML defaults lists, so that a mistyped key or a value of the wrong type is refused
while the config is composed, before any work (one line: tinygpt/runtime/errors.py).

Each group's schema is derived from the code that owns its settings (tinygpt.runtime.schema.schema_of): ``model``
from GPTConfig, ``optim`` from AdamWCosine; an experiment's ``prediction`` is registered from its own folder
(tinygpt.experiments.registry). Every field is MISSING: its default, with its comment, lives in the YAML. Left to
the objects they build: ``trainer`` (Lightning's Trainer checks its own arguments), ``callbacks`` and ``logger``
(each checks its own); a mistyped key there is refused all the same, since the composed config is closed.
Torch-free: the schemas are registered before anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from tinygpt.model.config import GPTConfig
from tinygpt.runtime.schema import schema_of
from tinygpt.train.optim import AdamWCosine

ModelSchema = schema_of(GPTConfig, skip=("vocab_size",))  # the vocabulary comes with the data
# decay_steps is ${trainer.max_steps} by default: typed loosely, so that a bad max_steps is named as the key set
OptimSchema = schema_of(AdamWCosine, target=True, loose=("decay_steps",))


@dataclass
class DiagnosticsSchema:
    windows: int = MISSING
    max_val_tokens: Optional[int] = MISSING


@dataclass
class TrainSchema:
    seed: int = MISSING
    ckpt_path: Optional[str] = MISSING
    init_from: Optional[str] = MISSING  # null reads as scratch
    compile: bool = MISSING
    check_memory: bool = MISSING
    prediction: Any = MISSING  # null, or an experiment's typed predictions (its folder's prediction.py)
    diagnostics: DiagnosticsSchema = MISSING
    model: ModelSchema = MISSING
    optim: OptimSchema = MISSING
    data: Any = MISSING  # typed by its corpus's schema (below)
    trainer: Any = MISSING
    logger: Any = MISSING
    callbacks: Any = MISSING


# ------------------------------------------------------------------------------------------- data, per corpus


@dataclass
class ShakespeareSchema:
    _target_: str = MISSING
    source: str = MISSING
    corpus: Any = MISSING  # the corpus class's node, built by Hydra (tinygpt.data.corpus)
    tokenizer: str = MISSING
    bpe_vocab_size: int = MISSING
    tokenizer_dir: Optional[str] = MISSING
    train_fraction: float = MISSING
    block_size: int = MISSING
    batch_size: int = MISSING
    val_batch_size: int = MISSING
    val_windows: int = MISSING
    cache_dir: str = MISSING
    seed: int = MISSING
    overfit: bool = MISSING


@dataclass
class TextFileSchema(ShakespeareSchema):
    path: Any = MISSING  # one file or a list of files


@dataclass
class HfHubSchema(ShakespeareSchema):
    name: str = MISSING
    config: Optional[str] = MISSING
    split: str = MISSING
    text_column: str = MISSING


@dataclass
class RandomTokensSchema(ShakespeareSchema):
    vocab_size: int = MISSING
    n_tokens: int = MISSING


SCHEMAS = {  # (group, name) -> its dataclass; YAML names them in defaults lists: `- /schema/data: shakespeare`
    (None, "train_schema"): TrainSchema,
    ("schema/data", "shakespeare"): ShakespeareSchema,
    ("schema/data", "text_file"): TextFileSchema,
    ("schema/data", "hf_hub"): HfHubSchema,
    ("schema/data", "random_tokens"): RandomTokensSchema,
}


def register_schemas() -> None:
    """Put the schemas in Hydra's ConfigStore (before the config is composed: train.py, the tests' compose)."""
    store = ConfigStore.instance()
    for (group, name), node in SCHEMAS.items():
        store.store(group=group, name=name, node=node)

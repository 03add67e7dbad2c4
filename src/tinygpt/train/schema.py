"""The config's types: dataclasses registered with Hydra's ConfigStore and named at the head of the YAML defaults
lists, so that a mistyped key or a value of the wrong type is refused while the config is composed, before any
work (one line: tinygpt/runtime/errors.py). Types only: every field is MISSING here and its default, with its
comment, lives in the YAML (configs/, the one home of each default and its documentation).

Typed: the root keys, ``model`` (every architecture option), ``optim``, ``diagnostics``, ``data`` (one schema per
corpus: configs/data/*.yaml) and each experiment's ``prediction`` (configs/experiment/*.yaml). Left to the objects
they build: ``trainer`` (Lightning's Trainer checks its own arguments), ``callbacks`` and ``logger`` (each callback
or logger checks its own); a mistyped key there is refused all the same, since the composed config is closed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

# ---------------------------------------------------------------------------------------------- the root config


@dataclass
class AttnSchema:
    causal: bool = MISSING
    scale: Any = MISSING  # sqrt_dk | none | inv_dk | a number (checked by model.attention.scale_of)
    backend: str = MISSING
    qk_norm: bool = MISSING
    qk_init: str = MISSING


@dataclass
class ModelSchema:
    n_layer: int = MISSING
    n_head: int = MISSING
    n_embd: int = MISSING
    block_size: int = MISSING
    dropout: float = MISSING
    bias: bool = MISSING
    activation: str = MISSING
    ln_eps: float = MISSING
    attn: AttnSchema = MISSING


@dataclass
class OptimSchema:
    _target_: str = MISSING
    lr: float = MISSING
    min_lr: float = MISSING
    warmup_steps: int = MISSING
    decay_steps: Any = MISSING  # ${trainer.max_steps} by default: checked by AdamWCosine, named as the key set
    betas: List[float] = MISSING
    weight_decay: float = MISSING
    fused_adam: bool = MISSING


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
    attention_bug: Any = MISSING  # null, or an AttentionBug node (experiments/partial_leaks/bugs.py)
    prediction: Any = MISSING  # null, or an experiment's typed predictions (below)
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


# ------------------------------------------------------------------------------------ each experiment's predictions


@dataclass
class CausalMaskPrediction:
    level_ratio: List[float] = MISSING
    slope: List[float] = MISSING
    premise_flat: bool = MISSING
    onset_fraction: float = MISSING
    drop_from: float = MISSING
    drop_to: float = MISSING


@dataclass
class PartialLeaksPrediction:
    collapse_fraction: float = MISSING
    onset_run: int = MISSING
    onset_fraction: float = MISSING
    onset_ratio: List[float] = MISSING
    fill_slack: float = MISSING
    alarm_first_validation: bool = MISSING
    replace_fill_rule: str = MISSING


@dataclass
class SqrtDkPrediction:
    basin_delta: float = MISSING
    sensitivity_range: List[float] = MISSING
    optimum_shift: str = MISSING
    best_loss_gap: str = MISSING
    basin_gap: str = MISSING
    basin_growth: str = MISSING
    sensitivity_gap: str = MISSING
    qknorm_effect: str = MISSING
    fp16_min_unscaled: int = MISSING
    fp16_max_scaled: int = MISSING
    failed_to_train: float = MISSING


SCHEMAS = {  # (group, name) -> its dataclass; YAML names them in defaults lists: `- /schema/data: shakespeare`
    (None, "train_schema"): TrainSchema,
    ("schema/data", "shakespeare"): ShakespeareSchema,
    ("schema/data", "text_file"): TextFileSchema,
    ("schema/data", "hf_hub"): HfHubSchema,
    ("schema/data", "random_tokens"): RandomTokensSchema,
    ("schema/prediction", "causal_mask"): CausalMaskPrediction,
    ("schema/prediction", "partial_leaks"): PartialLeaksPrediction,
    ("schema/prediction", "sqrt_dk"): SqrtDkPrediction,
}


def register_schemas() -> None:
    """Put the schemas in Hydra's ConfigStore (before the config is composed: train.py, the tests' compose)."""
    store = ConfigStore.instance()
    for (group, name), node in SCHEMAS.items():
        store.store(group=group, name=name, node=node)

"""GPT-2's config.json <-> our model.* settings, read and checked without torch (so train.py refuses a local
``init_from`` dir that is not GPT-2 before anything heavy is imported; model/hf_gpt2.py holds the tensors' side)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from tinygpt.model.config import AttnConfig, GPTConfig
from tinygpt.runtime.errors import ConfigError, first_line
from tinygpt.runtime.hub import no_config_json

ARCHITECTURE = ("n_layer", "n_head", "n_embd", "block_size", "bias", "activation", "ln_eps")  # what config.json sets
# settings a GPT-2 computes the same without: rope_base is read by rope alone, extrapolate is refused with the learned
# table (train/values.py)
READ_BY_ANOTHER = ("rope_base", "extrapolate")
# the attention options that change how it is computed or started, not what it computes: any value of them is GPT-2's
HOW_NOT_WHAT = ("backend", "qk_init", "scale_at")
# GPT-2's value of every other setting (under model.): config.json holds ARCHITECTURE, the vocabulary and the dropout
# (its *_pdrop), a model.patch is refused apart (cli/export_hf.py), and each remaining field of GPTConfig and of its
# AttnConfig is GPT-2's at its default only; so a new option is refused on export and noted by init_from wherever it is
# not at its default, and nothing names the options one by one
GPT2_SETTINGS = {
    **{f.name: f.default for f in fields(GPTConfig) if f.name not in (*ARCHITECTURE, "vocab_size", "dropout", "attn",
                                                                       "patch", *READ_BY_ANOTHER)},
    **{f"attn.{f.name}": f.default for f in fields(AttnConfig) if f.name not in HOW_NOT_WHAT},
}
# the model-level ones (model.position...): GPT-2's weights cannot start a model without its learned table, so
# init_from refuses them, where it only notes an attention option
GPT2_MODEL = {k: v for k, v in GPT2_SETTINGS.items() if "." not in k}
ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu"}  # theirs -> ours


def read_config(model_dir: Path) -> dict:
    """config.json of a Hugging Face model dir, or one sentence."""
    path = Path(model_dir) / "config.json"
    if not path.is_file():
        raise ConfigError(no_config_json(model_dir))
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as err:
        raise ConfigError(f"{path} is not readable JSON ({first_line(err)}).") from None
    if not isinstance(config, dict):
        raise ConfigError(f"{path} holds {type(config).__name__}, not a JSON object.")
    return config


def read_settings(model_dir: Path, where: str) -> tuple[dict, int]:
    """model_dir's config.json read and turned into (our model.* settings, the vocabulary size); each mistake one
    sentence prefixed with ``where`` (``init_from='<dir>'``)."""
    try:
        config = read_config(model_dir)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    return model_settings(config, where=f"{where}: config.json")


def model_settings(config: dict, where: str = "config.json") -> tuple[dict, int]:
    """GPT-2's config.json fields -> (our model.* architecture settings, the vocabulary size); one sentence naming
    the first field that our GPT cannot be."""

    def field(name, default=None):
        return config.get(name, default)

    def refuse(name, expected: str):
        raise ConfigError(f"{where}: {name}={field(name)!r}, {expected}.")

    if field("model_type") != "gpt2":
        refuse("model_type", "not gpt2; init_from loads GPT-2 models only")
    for name in ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size"):
        value = field(name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 1:
            refuse(name, "expected a positive integer")
    if field("n_inner") not in (None, 4 * config["n_embd"]):
        refuse("n_inner", f"expected null or 4 * n_embd = {4 * config['n_embd']} (the MLP is 4 times as wide)")
    if field("activation_function", "gelu_new") not in ACTIVATIONS:
        refuse("activation_function", f"expected one of {', '.join(ACTIVATIONS)}")
    eps = field("layer_norm_epsilon", 1e-5)
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps > 0:
        refuse("layer_norm_epsilon", "expected a positive number")
    for name, expected in (("scale_attn_weights", True), ("scale_attn_by_inverse_layer_idx", False),
                           ("add_cross_attention", False), ("tie_word_embeddings", True)):
        if field(name, expected) is not expected:
            refuse(name, f"expected {str(expected).lower()} (tinygpt's GPT has no other)")
    model = {"n_layer": config["n_layer"], "n_head": config["n_head"], "n_embd": config["n_embd"],
             "block_size": config["n_positions"], "bias": True,
             "activation": ACTIVATIONS[field("activation_function", "gelu_new")], "ln_eps": float(eps)}
    return model, config["vocab_size"]


def not_gpt2(model: dict) -> list[tuple[str, object, object]]:
    """(key under model., its value, GPT-2's) for each setting of GPT2_SETTINGS where ``model`` (GPTConfig's fields
    as a dict, ``attn`` nested; a setting it lacks is at its default) is not GPT-2's."""
    out = []
    for key, gpt2 in GPT2_SETTINGS.items():
        *parents, name = key.split(".")
        node = model
        for parent in parents:
            node = node.get(parent) or {}
        if node.get(name, gpt2) != gpt2:
            out.append((key, node[name], gpt2))
    return out


def not_gpt2_model(model) -> tuple[str, object] | None:
    """(key, value) of the first of GPT2_MODEL's settings (model.position...) that ``model`` (a GPTConfig, or the
    model.* node of a config) has other than GPT-2's; None when it has GPT-2's."""
    for key, gpt2 in GPT2_MODEL.items():
        value = model.get(key, gpt2) if hasattr(model, "get") else getattr(model, key, gpt2)
        if value != gpt2:
            return key, value
    return None


def check_init_from(model, source: str) -> None:
    """One sentence when ``model`` (the run's model.* settings) has a setting GPT-2's weights cannot start from
    (GPT2_MODEL's: its positions are a learned table); checked before the Hub or the dir is looked at."""
    odd = not_gpt2_model(model)
    if odd:
        key, value = odd
        raise ConfigError(f"model.{key}={value!r} cannot start from init_from={source!r}: GPT-2's weights are a "
                          f"model with {key}={GPT2_MODEL[key]!r}; drop the override, or train from scratch.")


def hf_config(cfg: GPTConfig) -> dict:
    """Our model settings -> GPT-2's config.json fields (GPT2LMHeadModel); one sentence for a setting GPT-2 cannot
    express (GPT2_SETTINGS: any not at GPT-2's value)."""
    differ = not_gpt2(cfg.to_dict())
    if differ:
        key, value, gpt2 = differ[0]
        owner, _, name = key.rpartition(".")
        raise ConfigError(f"model.{key}={value!r} has no GPT-2 equivalent (GPT-2's {'attention' if owner else 'model'} "
                          f"has {name}={gpt2!r}); such a model cannot be written as GPT-2.")
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": cfg.vocab_size,
            "n_positions": cfg.block_size, "n_embd": cfg.n_embd, "n_layer": cfg.n_layer, "n_head": cfg.n_head,
            "n_inner": None, "activation_function": "gelu_new" if cfg.activation == "gelu_tanh" else "gelu",
            "layer_norm_epsilon": cfg.ln_eps, "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout,
            "attn_pdrop": cfg.dropout, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False, "add_cross_attention": False, "tie_word_embeddings": True}

"""GPT-2's config.json <-> our model.* settings, read and checked without torch (so train.py refuses a local
``init_from`` dir that is not GPT-2 before anything heavy is imported; model/hf_gpt2.py holds the tensors' side)."""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path

from tinygpt.model.config import AttnConfig, GPTConfig
from tinygpt.runtime.errors import ConfigError, first_line
from tinygpt.runtime.hub import no_config_json

# GPT-2's model.attn.*: every option's default, less those that change how the attention is computed or started,
# not what it computes; so a new option is refused on export wherever it is not at its default (GPT-2's behaviour)
HOW_NOT_WHAT = ("backend", "qk_init", "scale_at")
GPT2_ATTENTION = {f.name: f.default for f in fields(AttnConfig) if f.name not in HOW_NOT_WHAT}
ARCHITECTURE = ("n_layer", "n_head", "n_embd", "block_size", "bias", "activation", "ln_eps")  # what config.json sets
# GPT-2's model.*: every other GPTConfig field's default, less the vocabulary and the training settings, those checked
# apart (attn above; patch: export_hf) and those a GPT-2 computes the same without (rope_base is read by rope alone;
# extrapolate is refused with learned positions); so a new model option is refused wherever it is not GPT-2's
NOT_GPT2_MODEL = ("vocab_size", "dropout", "attn", "patch", "rope_base", "extrapolate")
GPT2_MODEL = {f.name: f.default for f in fields(GPTConfig) if f.name not in ARCHITECTURE + NOT_GPT2_MODEL}
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
    express (its positions are a learned table; its attention is causal, scaled by 1/sqrt(d_k), without qk_norm)."""
    odd = not_gpt2_model(cfg)
    if odd:
        key, value = odd
        raise ConfigError(f"model.{key}={value!r} has no GPT-2 equivalent (GPT-2's model has {key}="
                          f"{GPT2_MODEL[key]!r}); such a model cannot be written as GPT-2.")
    for key, gpt2 in GPT2_ATTENTION.items():
        value = getattr(cfg.attn, key)
        if value != gpt2:
            raise ConfigError(f"model.attn.{key}={value!r} has no GPT-2 equivalent (GPT-2's attention has "
                              f"{key}={gpt2!r}); such a model cannot be written as GPT-2.")
    return {"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"], "vocab_size": cfg.vocab_size,
            "n_positions": cfg.block_size, "n_embd": cfg.n_embd, "n_layer": cfg.n_layer, "n_head": cfg.n_head,
            "n_inner": None, "activation_function": "gelu_new" if cfg.activation == "gelu_tanh" else "gelu",
            "layer_norm_epsilon": cfg.ln_eps, "resid_pdrop": cfg.dropout, "embd_pdrop": cfg.dropout,
            "attn_pdrop": cfg.dropout, "scale_attn_weights": True, "scale_attn_by_inverse_layer_idx": False,
            "reorder_and_upcast_attn": False, "add_cross_attention": False, "tie_word_embeddings": True}

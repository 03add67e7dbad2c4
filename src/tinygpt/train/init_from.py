"""``init_from``: a run, a sample or an attention page starting from a pretrained GPT-2 in Hugging Face's format.

``init_from`` is ``scratch`` (the default: random weights, a tokenizer trained on the corpus), a local Hugging Face
model dir (config.json, model.safetensors or pytorch_model.bin, tokenizer.json or vocab.json + merges.txt), or a
Hub name (``gpt2``, ``gpt2-medium``, ``gpt2-large``, ``gpt2-xl``, ``owner/name``; runtime/hub.py). From it come:

- the architecture: model.n_layer, n_head, n_embd, block_size, bias, activation and ln_eps are its config.json's
  (model/hf_gpt2.py). A value the user set for one of them (``model.n_layer=6``, or a ``model=<option>`` that
  sets it) that disagrees is one sentence; ``model.block_size`` may be smaller than the checkpoint's n_positions
  (the position table is cropped, as nanoGPT's ``crop_block_size``). Training settings stay the user's
  (``model.dropout``: GPT-2 was trained with 0.1; the default here is 0.0);
- the weights, loaded into the GPT the run builds (not on a resume: the checkpoint's replace them);
- the tokenizer: data.tokenizer=pretrained with data.tokenizer_dir=<the dir>, so the data module tokenizes any
  corpus with GPT-2's byte-level BPE (50257 tokens), in a token cache of its own.

The settings GPT-2 does not have (any model.* option away from GPT-2's value, ``hf_config.GPT2_SETTINGS``, and a
``model.patch``) are allowed, for fine-tuning experiments: the weights load as they are (parameters GPT-2 lacks, such
as qk_norm's LayerNorms, start as the model builds them) and a note says the model is no longer GPT-2's computation. A
``model.position`` other than learned is refused in one line, before the Hub is asked: GPT-2's weights were trained
with its learned position table, which the other positions do not have.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from omegaconf import DictConfig, open_dict
from tokenizers import Tokenizer

from tinygpt.data.tokenizer import PRETRAINED, load_pretrained_tokenizer
from tinygpt.model import hf_gpt2
from tinygpt.model.hf_config import check_init_from, read_settings
from tinygpt.model.config import patch_names
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.runtime.errors import ConfigError
from tinygpt.runtime.hub import model_dir, requested


@dataclass
class Pretrained:
    """A located pretrained model: ``source`` as given, its local dir, the model.* architecture settings and the
    vocabulary size its config.json gives, and its tokenizer."""

    source: str
    path: Path
    model: dict
    vocab_size: int
    tokenizer: Tokenizer


def locate(source: str) -> Pretrained:
    """The model dir ``source`` names (fetched from the Hub when it is a name), its config.json read and checked, its
    weights' names and shapes checked against that config (from the files' headers: no weight is read) and its
    tokenizer read; each mistake is one sentence."""
    path = model_dir(source)
    where = f"init_from={source!r}"
    model, vocab_size = read_settings(path, where)
    try:
        shapes = hf_gpt2.read_shapes(path)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    with torch.device("meta"):  # the model's shapes, nothing allocated
        skeleton = GPT(GPTConfig(vocab_size=vocab_size, **model))
    hf_gpt2.check_hf_shapes(skeleton, shapes, where=where)
    try:
        tokenizer = load_pretrained_tokenizer(path)
    except ValueError as err:
        raise ConfigError(f"{where}: {err}") from None
    if tokenizer.get_vocab_size() > vocab_size:
        raise ConfigError(f"{where}: its tokenizer has {tokenizer.get_vocab_size()} tokens, more than the "
                          f"vocab_size={vocab_size} of its config.json.")
    return Pretrained(source, path, model, vocab_size, tokenizer)


def configure(cfg: DictConfig, overrides: list[str]) -> Pretrained | None:
    """Write init_from's architecture into cfg.model and its tokenizer into cfg.data (in place), after checking the
    user's ``overrides`` (the command line's) against them; None (cfg untouched) for ``init_from=scratch``."""
    source = requested(cfg)
    if source is None:
        return None
    check_init_from(cfg.model, source)  # before the Hub is asked: GPT-2's weights have its learned position table
    pre = locate(source)
    user = set_by_user(overrides)
    check_user_settings(cfg, pre, user)
    with open_dict(cfg):
        for key, value in pre.model.items():
            if not (key == "block_size" and "model.block_size" in user):  # a shorter context crops the positions
                cfg.model[key] = value
        cfg.data.tokenizer, cfg.data.tokenizer_dir = PRETRAINED, str(pre.path)
    return pre


def set_by_user(overrides: list[str]) -> dict[str, str]:
    """The keys init_from sets that the command line sets too: ``model.<key>`` -> how (the override itself, or the
    ``model=<option>`` group choice that sets every architecture key), and data.tokenizer / data.tokenizer_dir."""
    from hydra.core.override_parser.overrides_parser import OverridesParser

    user = {}
    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if override.is_delete():
            continue
        if key == "model":  # a group choice sets every architecture key, unless a key override says otherwise
            for name in hf_gpt2.ARCHITECTURE:
                user.setdefault(f"model.{name}", f"model={override.value()}")
        elif key in {f"model.{name}" for name in hf_gpt2.ARCHITECTURE} | {"data.tokenizer", "data.tokenizer_dir"}:
            user[key] = key
    return user


def check_user_settings(cfg: DictConfig, pre: Pretrained, user: dict[str, str]) -> None:
    """One sentence for the first key the user set that disagrees with the checkpoint (a model.block_size up to its
    n_positions is a crop, allowed)."""
    where = f"init_from={pre.source!r}"
    for name in hf_gpt2.ARCHITECTURE:
        key = f"model.{name}"
        if key not in user:
            continue
        ours, theirs = cfg.model.get(name), pre.model[name]
        if name == "block_size" and key == user[key]:
            if isinstance(ours, int) and not isinstance(ours, bool) and ours > theirs:
                raise ConfigError(f"model.block_size={ours} is longer than the n_positions={theirs} of {where} (its "
                                  f"learned positions end there); give at most {theirs} (a shorter one crops them).")
            continue
        if ours != theirs:
            how = user[key]
            said = f"{key}={ours!r}" if how == key else f"{how} sets {key}={ours!r}, which"
            raise ConfigError(f"{said} conflicts with {where}, whose config.json makes it {theirs!r}: init_from sets "
                              f"the model's architecture; drop {'the override' if how == key else how}.")
    for key, value in (("data.tokenizer", PRETRAINED), ("data.tokenizer_dir", str(pre.path))):
        name = key.split(".")[1]
        if key in user and cfg.data.get(name) != value:
            raise ConfigError(f"{key}={cfg.data.get(name)!r} conflicts with {where}, whose model reads its own "
                              f"tokens: init_from sets {key}={value}; drop the override.")


def attention_note(model: dict) -> str | None:
    """A note when a setting of the model is not GPT-2's (hf_config.GPT2_SETTINGS), or a patch changes it (a
    fine-tuning experiment), None when it is GPT-2's."""
    attn = model.get("attn") or {}
    differ = [f"model.{key}={value!r}" for key, value, _ in hf_gpt2.not_gpt2(model)]
    if model.get("patch"):
        differ.append(f"model.patch={patch_names(model['patch'])}")
    if not differ:
        return None
    extra = " (qk_norm's LayerNorms, which GPT-2 lacks, start at identity)" if attn.get("qk_norm") else ""
    return (f"note: {', '.join(differ)}: GPT-2's weights under another attention than GPT-2's{extra}; a fine-tuning "
            "experiment, not GPT-2.")


def load_weights(model: GPT, pre: Pretrained) -> list[str]:
    """The checkpoint's weights into ``model`` (its position table cropped to the model's block_size); our
    parameters it has no tensor for are returned, left as they were."""
    where = f"init_from={pre.source!r}"
    try:
        state = hf_gpt2.read_weights(pre.path)
    except ConfigError as err:
        raise ConfigError(f"{where}: {err}") from None
    return hf_gpt2.load_hf_state_dict(model, hf_gpt2.crop_positions(state, model.config.block_size), where=where)


def load_model(source: str, device: str = "cpu") -> tuple[GPT, Tokenizer, Pretrained]:
    """The pretrained GPT (eval mode, on ``device``), its tokenizer and where it came from: for sampling and the
    attention page, without a run."""
    pre = locate(source)
    model = GPT(GPTConfig(vocab_size=pre.vocab_size, **pre.model))
    load_weights(model, pre)
    return model.to(device).eval(), pre.tokenizer, pre


def random_gpt2_note(model_choice: str | None, init_from: str | None) -> str | None:
    """A note when model=gpt2* trains from scratch: GPT-2's architecture with random weights, which a user who
    meant GPT-2 itself gets from init_from."""
    if not model_choice or not str(model_choice).startswith("gpt2") or (init_from or "scratch") != "scratch":
        return None
    name = str(model_choice).replace("_", "-")
    return (f"note: model={model_choice} is GPT-2's architecture with random weights; init_from={name} loads "
            "the pretrained ones.")

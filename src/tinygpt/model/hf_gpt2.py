"""GPT-2 in Hugging Face's format, both ways: its config.json <-> our model.* settings, its tensor names <-> ours.

Our GPT is GPT-2's architecture (pre-LN blocks, one fused q|k|v projection, learned positions, head tied to the
token embedding); GPT-2 itself is ``bias=true, activation=gelu_tanh`` (transformers' ``gelu_new``). The names:

    ours                                  GPT-2 (transformers' GPT2LMHeadModel)
    wte.weight, wpe.weight                transformer.wte.weight, transformer.wpe.weight
    blocks.{i}.ln_1.{weight,bias}         transformer.h.{i}.ln_1.{weight,bias}        (and ln_2)
    blocks.{i}.attn.c_attn.{weight,bias}  transformer.h.{i}.attn.c_attn.{weight,bias} (q | k | v, same order)
    blocks.{i}.attn.c_proj.{weight,bias}  transformer.h.{i}.attn.c_proj.{weight,bias}
    blocks.{i}.mlp.c_fc.{weight,bias}     transformer.h.{i}.mlp.c_fc.{weight,bias}    (and mlp.c_proj)
    ln_f.{weight,bias}                    transformer.ln_f.{weight,bias}
    lm_head.weight                        lm_head.weight: tied to wte in both, not stored

GPT-2's linear layers are ``Conv1D``s, whose weight is (in, out): the transpose of nn.Linear's (out, in). Files
saved from GPT2Model (the Hub's original gpt2 weights) lack the ``transformer.`` prefix; their ``attn.bias`` and
``attn.masked_bias`` are buffers (the causal mask), not weights, and are skipped. A model without biases
(``bias=false``) is GPT-2 with zero biases: ``to_hf_state_dict`` writes zeros for them.

Weights are read with ``safetensors`` or ``torch.load(weights_only=True)``: never a pickle that could run code.
"""

from __future__ import annotations

import json
import pickle
import re
from pathlib import Path

import torch
from torch import Tensor, nn

from tinygpt.model.hf_config import (  # noqa: F401 (the config side, re-exported)
    ACTIVATIONS, ARCHITECTURE, GPT2_ATTENTION, GPT2_MODEL, HOW_NOT_WHAT, hf_config, model_settings, read_config)
from tinygpt.runtime.errors import ConfigError, first_line

TOP = {"wte.weight": "transformer.wte.weight", "wpe.weight": "transformer.wpe.weight",
       "ln_f.weight": "transformer.ln_f.weight", "ln_f.bias": "transformer.ln_f.bias"}
BLOCK = re.compile(r"^blocks\.(\d+)\.(ln_1|ln_2|attn\.c_attn|attn\.c_proj|mlp\.c_fc|mlp\.c_proj)\.(weight|bias)$")
CONV1D = ("attn.c_attn", "attn.c_proj", "mlp.c_fc", "mlp.c_proj")  # weights stored (in, out)
BUFFER = re.compile(r"^transformer\.h\.\d+\.attn\.(bias|masked_bias)$")
PREFIX = "transformer."
TIED = "lm_head.weight"


# ----------------------------------------------------------------------------- names


def hf_name(ours: str) -> tuple[str, bool] | None:
    """Our parameter name -> (GPT-2's name, whether the weight is transposed); None for a parameter GPT-2 lacks
    (qk_norm's LayerNorms) and for the tied head."""
    if ours in TOP:
        return TOP[ours], False
    m = BLOCK.match(ours)
    if m is None:
        return None
    i, module, kind = m.groups()
    return f"transformer.h.{i}.{module}.{kind}", kind == "weight" and module in CONV1D


def our_name(theirs: str) -> str | None:
    """GPT-2's name (with or without the ``transformer.`` prefix) -> ours; None for a name GPT-2's weights lack."""
    theirs = theirs if theirs.startswith(PREFIX) else PREFIX + theirs
    for ours, hf in TOP.items():
        if hf == theirs:
            return ours
    m = re.match(r"^transformer\.h\.(\d+)\.(.+)$", theirs)
    ours = f"blocks.{m.group(1)}.{m.group(2)}" if m else None
    return ours if ours is not None and BLOCK.match(ours) else None


def to_hf_state_dict(model: nn.Module) -> dict[str, Tensor]:
    """Our GPT's weights under GPT-2's names, as GPT-2's files store them (Conv1D weights transposed, no tied head,
    no buffers; zero biases for a model without them); one sentence for a parameter GPT-2 has no place for."""
    ours = model.state_dict()
    out = {}
    for name, tensor in ours.items():
        if name == TIED:
            continue
        mapped = hf_name(name)
        if mapped is None:
            raise ConfigError(f"the model's parameter {name} has no GPT-2 equivalent (GPT-2 has no qk_norm); such a "
                              "model cannot be written as GPT-2.")
        out[mapped[0]] = (tensor.t() if mapped[1] else tensor).contiguous()
    for name, module in model.named_modules():  # bias=false: GPT-2 with zero biases
        if isinstance(module, (nn.Linear, nn.LayerNorm)) and module.bias is None and f"{name}.weight" != TIED:
            mapped = hf_name(f"{name}.bias")
            if mapped is not None:
                width = module.weight.shape[0]  # (out, in) or (C,)
                out[mapped[0]] = torch.zeros(width, dtype=module.weight.dtype, device=module.weight.device)
    return out


def load_hf_state_dict(model: nn.Module, state: dict[str, Tensor], where: str = "the checkpoint") -> list[str]:
    """Copy GPT-2's tensors (names with or without ``transformer.``, buffers and a tied head allowed) into our GPT,
    cast to its dtype; one sentence naming the first tensor that does not map (``check_hf_shapes``) or a head that is
    not tied. Returns our parameters GPT-2 has no tensor for, left as they were (qk_norm's)."""
    theirs = _gpt2_tensors(state)
    head = theirs.pop(TIED, None)
    if head is not None and ("transformer.wte.weight" not in theirs
                             or not torch.equal(head, theirs["transformer.wte.weight"])):
        raise ConfigError(f"{where}: tensor {TIED} is not tied to transformer.wte.weight; tinygpt's GPT ties its "
                          "head to the token embedding, as GPT-2 does.")
    plan = _match(model, {k: tuple(v.shape) for k, v in theirs.items()}, where)
    new = model.state_dict()
    for name, (hf, transposed) in plan.items():
        new[name] = theirs[hf].t() if transposed else theirs[hf]
    new[TIED] = new["wte.weight"]
    model.load_state_dict(new)  # copies, cast to the model's dtype
    return [name for name in new if name != TIED and name not in plan]


def check_hf_shapes(model: nn.Module, shapes: dict[str, tuple[int, ...]], where: str = "the checkpoint") -> None:
    """One sentence naming the first of GPT-2's tensors (name -> shape, as ``read_shapes`` gives them) that does not
    map onto ``model`` (which may live on the meta device): a name that is not GPT-2's (another architecture, more
    layers), a tensor of another shape (with the shape expected), or a missing tensor. Nothing is read or copied."""
    _match(model, {k: v for k, v in _gpt2_tensors(shapes).items() if k != TIED}, where)


def _gpt2_tensors(state: dict) -> dict:
    """A GPT-2 state (or its shapes) under full names (``transformer.`` added where a file saved from GPT2Model
    lacks it), without the causal-mask buffers."""
    full = {k if k.startswith(PREFIX) or k == TIED else PREFIX + k: v for k, v in state.items()}
    return {k: v for k, v in full.items() if not BUFFER.match(k)}


def _match(model: nn.Module, shapes: dict[str, tuple[int, ...]], where: str) -> dict[str, tuple[str, bool]]:
    """Our parameter name -> (GPT-2's name, transposed) for every one of ``shapes`` (full GPT-2 names, no head), or
    one sentence for the first that does not map."""
    ours, cfg = model.state_dict(), model.config
    plan = {}
    for hf, shape in shapes.items():
        name = our_name(hf)
        if name is None or name not in ours:
            what = f"a {cfg.n_layer}-layer GPT-2" + ("" if cfg.bias else " without biases")
            raise ConfigError(f"{where}: tensor {hf} has no place in this model (not a tensor of {what}); init_from "
                              "loads GPT-2 models only.")
        transposed = hf_name(name)[1]
        expected = tuple(reversed(ours[name].shape)) if transposed else tuple(ours[name].shape)
        if tuple(shape) != expected:
            raise ConfigError(f"{where}: tensor {hf} has shape {tuple(shape)}, expected {expected} from its "
                              "config.json.")
        plan[name] = (hf, transposed)
    missing = [name for name in ours if name != TIED and hf_name(name) is not None and name not in plan]
    if missing:
        raise ConfigError(f"{where}: tensor {hf_name(missing[0])[0]} is missing; a GPT-2 checkpoint of this config "
                          "has it.")
    return plan


def crop_positions(state: dict[str, Tensor], block_size: int) -> dict[str, Tensor]:
    """The state with its position table cut to the first ``block_size`` positions (a shorter context than the
    checkpoint's, as nanoGPT's ``crop_block_size``); unchanged when it has no more."""
    out = dict(state)
    for key in ("transformer.wpe.weight", "wpe.weight"):
        if key in out and out[key].shape[0] > block_size:
            out[key] = out[key][:block_size]
    return out


# ----------------------------------------------------------------------------- files


def read_weights(model_dir: Path) -> dict[str, Tensor]:
    """The tensors of a Hugging Face model dir: model.safetensors (or its shards), else pytorch_model.bin (or its
    shards) loaded with ``weights_only=True``; one sentence when there are none or a file is not readable."""
    return _read(Path(model_dir), shapes_only=False)


def read_shapes(model_dir: Path) -> dict[str, tuple[int, ...]]:
    """``read_weights``' names and shapes, from the files' headers (safetensors) or a memory map (torch): cheap."""
    return _read(Path(model_dir), shapes_only=True)


def _read(model_dir: Path, shapes_only: bool) -> dict:
    for name, reader in (("model.safetensors", _read_safetensors), ("pytorch_model.bin", _read_bin)):
        files = _weight_files(model_dir, name)
        if files:
            state = {}
            for f in files:
                state.update(reader(f, shapes_only))
            return state
    raise ConfigError(f"{model_dir} has no weights: neither model.safetensors nor pytorch_model.bin (nor their "
                      "sharded .index.json).")


def _weight_files(model_dir: Path, name: str) -> list[Path]:
    """The file ``name``, or the shards its ``<name>.index.json`` lists; [] when neither exists."""
    if (model_dir / name).is_file():
        return [model_dir / name]
    index = model_dir / f"{name}.index.json"
    if not index.is_file():
        return []
    try:
        shards = sorted(set(json.loads(index.read_text(encoding="utf-8"))["weight_map"].values()))
    except (ValueError, KeyError, TypeError, AttributeError, OSError) as err:
        raise ConfigError(f"{index} is not a readable shard index ({first_line(err)}).") from None
    missing = [s for s in shards if not (model_dir / s).is_file()]
    if missing:
        raise ConfigError(f"{index} lists {missing[0]}, which {model_dir} does not hold.")
    return [model_dir / s for s in shards]


def _read_safetensors(path: Path, shapes_only: bool) -> dict:
    from safetensors import safe_open
    from safetensors.torch import load_file

    try:
        if not shapes_only:
            return load_file(str(path), device="cpu")
        with safe_open(str(path), framework="pt") as f:
            return {k: tuple(f.get_slice(k).get_shape()) for k in f.keys()}
    except Exception as err:  # a truncated or foreign file: safetensors' own errors
        raise ConfigError(f"{path} is not a readable safetensors file ({first_line(err)[:160]}).") from None


def _read_bin(path: Path, shapes_only: bool) -> dict:
    try:
        try:  # a memory map reads no tensor data (the zip format of torch >= 1.6)
            state = torch.load(path, map_location="cpu", weights_only=True, mmap=shapes_only)
        except RuntimeError:
            if not shapes_only:
                raise
            state = torch.load(path, map_location="cpu", weights_only=True)  # the legacy format
    except pickle.UnpicklingError:
        raise ConfigError(f"{path} holds Python objects other than tensors; not loaded, since such a file can run "
                          "code (convert it to model.safetensors).") from None
    except Exception as err:
        raise ConfigError(f"{path} is not a readable torch file ({first_line(err)[:160]}).") from None
    if not isinstance(state, dict) or not all(isinstance(v, Tensor) for v in state.values()):
        raise ConfigError(f"{path} is not a state dict of tensors.")
    return {k: tuple(v.shape) for k, v in state.items()} if shapes_only else state

"""Hand a run's model to Hugging Face `transformers`: `python scripts/export_hf.py --ckpt <run dir> --out <dir>`.

Writes a GPT2LMHeadModel dir: ``config.json`` (GPT-2's fields from the run's model.* settings), ``model.safetensors``
(the weights under GPT-2's names, its Conv1D weights transposed; tinygpt.model.hf_gpt2 maps both) and, when the run
had a tokenizer, ``tokenizer.json`` + ``tokenizer_config.json`` (tinygpt.data.hf_tokenizer): the checkpoint's own
tokenizer, so GPT-2's byte-level BPE (data.tokenizer=pretrained), ours (bpe) and the char tokenizer all load with
``AutoTokenizer.from_pretrained(dir)``. ``AutoModelForCausalLM.from_pretrained(dir)`` then computes the run's logits.

A model without biases (``model.bias=false``, the default) is written as GPT-2 with zero biases: exactly the same
function. A model GPT-2 cannot express is refused in one line naming the option: a ``model.position`` other than
learned (GPT-2 has its table alone), ``model.attn.qk_norm=true``, a ``model.attn.scale`` other than sqrt_dk,
``model.attn.causal=false``, a ``model.patch``. Every check (the
checkpoint, --out, the model) comes before anything is written. An --out that holds files is refused unless
``--force``, which replaces the files transformers reads a model dir from (``REPLACED``) and leaves the others.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tinygpt.data import hf_tokenizer
from tinygpt.data.tokenizer import UNK
from tinygpt.model.config import GPTConfig, patch_names
from tinygpt.model.hf_config import hf_config
from tinygpt.runtime import run_dirs
from tinygpt.runtime.errors import ConfigError, OneLineParser, first_line, print_error
from tinygpt.runtime.resume_record import checkpoint_record
from tinygpt.runtime.writable import cannot_write_into

# torch, safetensors, the GPT and the checkpoint reader are imported where they are used, so that --help and a
# refused argument answer before torch is imported

WEIGHTS = "model.safetensors"
REPLACED = ("config.json", "generation_config.json", WEIGHTS, "model.safetensors.index.json", "pytorch_model.bin",
            "pytorch_model.bin.index.json", hf_tokenizer.TOKENIZER_FILE, hf_tokenizer.CONFIG_FILE,
            "special_tokens_map.json", "added_tokens.json", "vocab.json", "merges.txt")  # --force: these go


def check_out(out: Path, force: bool) -> None:
    """One sentence unless ``out`` is a new or empty directory (any directory with ``force``) that files can be
    written into; nothing is created (the probe's temporary file is removed)."""
    if out.exists() and not out.is_dir():
        raise ConfigError(f"--out={out} is a file; give a directory for the model's files.")
    names = sorted(p.name for p in out.iterdir()) if out.is_dir() and not force else []
    if names:
        held = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        raise ConfigError(f"--out={out} already holds {held}; give a new or empty directory, or --force to write the "
                          "model's files over those in it.")
    reason = cannot_write_into(out)
    if reason:
        raise ConfigError(f"--out={out} cannot be written: {reason}; give a path in a writable directory.")


def expressible(cfg: GPTConfig) -> dict:
    """GPT-2's config.json fields for the model settings; one sentence for an option GPT-2 cannot express (positions
    other than the learned table, qk_norm, another scale, no causal mask: hf_config; a model.patch)."""
    config = hf_config(cfg)
    if cfg.patch:
        raise ConfigError(f"model.patch={patch_names(cfg.patch)} has no GPT-2 equivalent (a patch changes the built "
                          "model; GPT-2's is the plain one); such a model cannot be written as GPT-2.")
    return config


def check_expressible(path: Path) -> None:
    """``expressible`` on the checkpoint's own model settings, read from its pickle without torch (every class a
    stub, nothing run): a causal=false or patched run is refused in a second, not after loading it (7-8 s). Settings
    that cannot be read so are left to the load, which names what is wrong with them."""
    record = checkpoint_record(path)
    hp = record.get("hyper_parameters") if isinstance(record, dict) else None
    if not isinstance(hp, dict) or not isinstance(hp.get("model"), dict):
        return
    try:
        cfg = GPTConfig(vocab_size=hp.get("vocab_size") or 1, **hp["model"])
    except (TypeError, ValueError):
        return
    expressible(cfg)


def gpt2_files(ckpt: dict, where: str) -> dict[str, bytes]:
    """A train.py checkpoint as the files of a GPT2LMHeadModel dir (name -> contents); one sentence naming the first
    option GPT-2 cannot express, or what makes the checkpoint unreadable as a model."""
    import torch
    from safetensors.torch import save as safetensors_bytes
    from tokenizers import Tokenizer

    from tinygpt.model import hf_gpt2
    from tinygpt.model.gpt import GPT
    from tinygpt.runtime import checkpoint
    from tinygpt.train.module import model_settings

    try:
        cfg = model_settings(ckpt["hyper_parameters"], where)
    except ConfigError:
        raise
    except (KeyError, TypeError, ValueError) as err:
        raise ConfigError(f"{where} holds no model settings tinygpt can build ({first_line(err)}).") from None
    config = expressible(cfg)
    with torch.device("meta"):  # shapes only: the checkpoint's tensors are assigned, nothing is initialised
        model = GPT(cfg)
    try:
        model.load_state_dict(checkpoint.model_weights(ckpt["state_dict"]), assign=True)
    except RuntimeError as err:
        raise ConfigError(f"{where} holds weights that do not fit its own model settings ({first_line(err)}).") \
            from None
    weights = hf_gpt2.to_hf_state_dict(model)  # Conv1D weights transposed, zero biases for bias=false
    dtype = next(iter(weights.values())).dtype
    tok = Tokenizer.from_str(ckpt["tokenizer"]) if ckpt.get("tokenizer") else None
    config.update(hf_tokenizer.special_token_ids(tok), torch_dtype=str(dtype).removeprefix("torch."))
    files = {"config.json": as_json(config), WEIGHTS: safetensors_bytes(weights, metadata={"format": "pt"})}
    if tok is not None:
        files[hf_tokenizer.TOKENIZER_FILE] = hf_tokenizer.for_transformers(tok).to_str(pretty=True).encode("utf-8")
        files[hf_tokenizer.CONFIG_FILE] = as_json(hf_tokenizer.tokenizer_config(tok, cfg.block_size))
    return files


def as_json(data: dict) -> bytes:
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def write(out: Path, files: dict[str, bytes]) -> None:
    """The files into ``out`` (made if new), each written beside its name and renamed over it; the files of
    ``REPLACED`` not among them are removed, so that transformers reads no other model's files there."""
    out.mkdir(parents=True, exist_ok=True)
    for name in REPLACED:
        if name not in files and (out / name).is_file():
            (out / name).unlink()
    for name, data in files.items():
        tmp = out / f".{name}.tmp-{os.getpid()}"
        try:
            tmp.write_bytes(data)
            os.replace(tmp, out / name)
        finally:
            tmp.unlink(missing_ok=True)


def tokenizer_kind(tok_json: str | None) -> str:
    """What the run's tokenizer was, in words."""
    if not tok_json:
        return "none (the run's data were token ids)"
    from tokenizers import Tokenizer

    tok = Tokenizer.from_str(tok_json)
    if tok.token_to_id(UNK) is not None:
        return f"char ({tok.get_vocab_size()} tokens)"
    return f"byte-level BPE ({tok.get_vocab_size()} tokens)"


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser("scripts/export_hf.py", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--ckpt", required=True, help="a run dir (its checkpoints/last.ckpt) or a .ckpt file")
    ap.add_argument("--out", required=True, type=Path, help="the directory to write the GPT2LMHeadModel into")
    ap.add_argument("--force", action="store_true", help="write into a directory that already holds files (the model "
                    "files transformers reads there are replaced, other files stay)")
    args = ap.parse_args(argv)
    try:
        path = run_dirs.checkpoint_file(args.ckpt)  # a wrong path or file refused before torch is imported
        check_out(args.out, args.force)
        check_expressible(path)  # so is a model GPT-2 cannot express
        from tinygpt.runtime import checkpoint

        ckpt = checkpoint.load(path)
        files = gpt2_files(ckpt, f"checkpoint {str(path)!r}")
    except (FileNotFoundError, ConfigError) as err:
        print_error(f"export_hf: {err}")
        return 2
    try:
        write(args.out, files)
    except OSError as err:  # a full disk, a dir made read-only since the check
        print_error(f"export_hf: could not write into {args.out} ({err.strerror or first_line(err)}); the export "
                    "there is incomplete.")
        return 1
    hp = ckpt["hyper_parameters"]
    model = hp["model"]
    print(f"# {path} (step {int(ckpt.get('global_step', 0))})", file=sys.stderr)
    if not model.get("bias", False):
        print("# note: model.bias=false: written as GPT-2 with zero biases (the same function)", file=sys.stderr)
    print(f"# note: n_positions={model['block_size']} is the run's model.block_size: the exported model reads at most "
          f"{model['block_size']} tokens (a GPT-2 fine-tuned at a shorter block_size keeps only those positions)",
          file=sys.stderr)
    print(f"export_hf: GPT2LMHeadModel, {model['n_layer']} layers x {model['n_head']} heads, {model['n_embd']} wide, "
          f"{model['block_size']} positions, vocab {hp['vocab_size']}; "
          f"tokenizer: {tokenizer_kind(ckpt.get('tokenizer'))} -> {args.out}")
    return 0

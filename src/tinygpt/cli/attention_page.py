"""Look at a trained model's attention on any text: `python scripts/attention.py --ckpt <run dir> --text "..."`, or a
pretrained GPT-2's: `--init_from gpt2` (a Hub name or a local Hugging Face model dir) instead of --ckpt.

Writes the interactive explorer (tinygpt.pictures.explorer) for the text through the checkpoint's model: every layer and
head, hover for query, key and weight, a query picked on the text. A leaky checkpoint (trained without the mask)
shows its weights on the future. ``--png DIR`` also draws the static heatmaps, one PNG per layer. Without ``--out`` the
page goes into the run dir it reads: ``<run dir>/attention/<checkpoint>_step<N>_<text hash>.html``, or for
``--init_from``, which has no run dir: ``outputs/attention/<model name>_<text hash>.html``.
"""

from __future__ import annotations

import argparse
import hashlib
import re
import sys
from pathlib import Path

from typing import TYPE_CHECKING

from tinygpt.cli.sample import (add_model_source, check_pretrained, checkpoint_vocabulary,
                                find_latest_checkpoint, token_ids)
from tinygpt.data.tokenizer import UNK, decode, encode
from tinygpt.pictures.plots import LayerPlotter, token_label
from tinygpt.runtime.errors import ConfigError, OneLineParser, print_error
from tinygpt.runtime.writable import cannot_write_into

if TYPE_CHECKING:
    import torch

    from tinygpt.model.gpt import GPT

# torch, the model, its loaders and the explorer page are imported where they are used: --help and a refused argument
# answer before torch is imported


UNKNOWN_MARK = "¿"  # a character outside the vocabulary: '¿c' (the model sees <unk>)


def tokens(tok, text: str, block_size: int, vocab_size: int) -> tuple[list[int], list[str], list[str]]:
    """The text's ids clipped to block_size, a label per token (a character outside the vocabulary shows as
    '¿c': two characters, so it fits its cell in the text strip and on the key axis like any other token), and notes
    for the user (clipping, unknown characters, and what '¿' means)."""
    notes = []
    if tok is None:  # a checkpoint without a tokenizer: the text is space-separated ids
        ids = token_ids(text, vocab_size, flag="--text")
        labels = [str(i) for i in ids]
    else:
        ids = encode(tok, text)
        unk = tok.token_to_id(UNK)
        chars = iter(text)
        labels = []
        for i in ids:
            piece = decode(tok, [i])
            if unk is not None and i == unk:
                piece = f"{UNKNOWN_MARK}{next(chars, '?')}"
            else:
                for _ in piece:
                    next(chars, None)
            labels.append(token_label(piece))
        missing = sorted({c for c in text if tok.token_to_id(c) is None}) if unk is not None else []
        if missing:
            shown = ", ".join(f"{c!r} as {UNKNOWN_MARK}{c}" for c in missing)
            notes.append(f"note: {''.join(missing)!r} not in the vocabulary; the model sees <unk> there (the page "
                         f"shows {shown})")
    if not ids:
        raise ValueError(f"the text {text!r} has no tokens; give some text.")
    if len(ids) > block_size:
        notes.append(f"note: the text has {len(ids)} tokens, clipped to the model's block_size {block_size}")
        ids, labels = ids[:block_size], labels[:block_size]
    return ids, labels, notes


def context(model: GPT) -> int:
    """The longest text the model reads: its block_size, or any length with model.extrapolate (RoPE, ALiBi, none)."""
    return 2**63 if model.config.extrapolate else model.config.block_size


def weights_of(model: GPT, ids: list[int]) -> torch.Tensor:
    """(n_layer, H, T, T) attention weights of the text, through the math path."""
    import torch

    from tinygpt.train.probes.diagnostics import evaluating

    with evaluating(model):
        maps = [p["weights"] for p in model.dissect_attention(torch.tensor([ids]))]  # n_layer x (1, H, T, T)
    return torch.cat(maps).float()


def check_writable(path: Path, what: str, directory: bool = False, force: bool = False) -> None:
    """One sentence, naming the path as ``what``, unless ``path`` can be written as a file (``directory``: as a
    folder of files); checked before any work by creating and removing a temporary file in the nearest folder that
    exists, so nothing is left behind. An existing file is replaced only when it is a page this script (or a run)
    wrote, or with ``force`` (a user's notes.txt had been replaced without a word)."""
    if directory and path.exists() and not path.is_dir():
        raise ConfigError(f"{what} is an existing file; give a directory for the PNGs.")
    if not directory and path.is_dir():
        raise ConfigError(f"{what} is a directory; give the page's file name, e.g. {path / 'attention.html'}.")
    if not directory and not force and path.is_file() and not explorer_page(path):
        raise ConfigError(f"{what} is an existing file that is not an attention page; give a new file name, or "
                          "--force to replace it.")
    reason = cannot_write_into(path if directory else path.parent)
    if reason:
        raise ConfigError(f"{what} cannot be written: {reason}; give a path in a writable directory.")


PAGE_MARK = b'id="tinygpt-explorer"'  # the div tinygpt.pictures.explorer.write draws into (that module imports torch)


def explorer_page(path: Path) -> bool:
    """Whether ``path`` is an attention page (this script's, or a run's attention/explorer.html)."""
    try:
        return PAGE_MARK in path.read_bytes()
    except OSError:
        return False


def default_page(ckpt: Path, step: int, text: str) -> Path:
    """Where the page goes without --out: <run dir>/attention/<checkpoint>_step<N>_<text hash>.html."""
    from tinygpt.runtime.checkpoint import run_dir_of

    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    return run_dir_of(ckpt) / "attention" / f"{ckpt.stem}_step{step}_{digest}.html"


def pretrained_page(source: str, text: str) -> Path:
    """Where an --init_from page goes without --out: outputs/attention/<model name>_<text hash>.html."""
    digest = hashlib.sha1(text.encode("utf-8")).hexdigest()[:8]
    name = re.sub(r"[^\w.-]+", "_", Path(source.rstrip("/\\")).name or source) or "model"
    return Path("outputs") / "attention" / f"{name}_{digest}.html"


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser("scripts/attention.py", description=__doc__,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    add_model_source(ap)
    ap.add_argument("--text", required=True, help="the text to look at (clipped to the model's block_size, unless it "
                                                   "was trained with model.extrapolate=true)")
    ap.add_argument("--out", type=Path, default=None, help="the page to write (default: <run dir>/attention/"
                    "<checkpoint>_step<N>_<text hash>.html; with --init_from: outputs/attention/<name>_<text "
                    "hash>.html; a missing folder is made)")
    ap.add_argument("--force", action="store_true", help="replace an --out file that is not an attention page")
    ap.add_argument("--png", type=Path, default=None, help="also write one heatmap PNG per layer into this dir")
    args = ap.parse_args(argv)
    if not args.text:  # refused here, not after the checkpoint's seconds of loading
        print_error("attention: --text is empty; give the text to look at.")
        return 2
    if args.init_from:
        return pretrained_main(args)
    ckpt = args.ckpt or find_latest_checkpoint()
    if ckpt is None:
        print_error("attention: no --ckpt given and none found under outputs/ or multirun/; run `python train.py` "
                    "first.")
        return 2
    from tinygpt.runtime.run_dirs import checkpoint_file

    try:  # every path checked before torch is imported
        if args.out is not None:
            check_writable(args.out, f"--out={args.out}", force=args.force)
        if args.png is not None:
            check_writable(args.png, f"--png={args.png}", directory=True)
        path = checkpoint_file(ckpt)
        if (found := checkpoint_vocabulary(path)) is not None:  # the text as its pickle's tokenizer takes it
            tokens(found[0], args.text, block_size=2**63, vocab_size=found[1])
    except (FileNotFoundError, ConfigError, ValueError) as err:
        print_error(f"attention: {err}")
        return 2
    from tinygpt.experiments.partial_leaks.bugs import BuggyAttention
    from tinygpt.train.module import load_trained

    try:
        model, tok, step = load_trained(path)
        ids, labels, notes = tokens(tok, args.text, context(model), model.config.vocab_size)
        out = args.out or default_page(path, step, args.text)
        if args.out is None:
            check_writable(out, f"the default page {out} (pass --out to write it elsewhere)")
    except (FileNotFoundError, ConfigError, ValueError) as err:
        print_error(f"attention: {err}")
        return 2
    except Exception as err:  # a file that is not a checkpoint (torch raises many kinds)
        print_error(f"attention: {ckpt} is not a train.py checkpoint ({type(err).__name__}).")
        return 2
    print(f"# {path} (step {step})", file=sys.stderr)
    bugs = sorted({b.attn.kind for b in model.blocks if isinstance(b.attn, BuggyAttention)})
    kind = ("causal" if model.config.attn.causal else "no mask: the future is visible") + (
        f", {model.config.position} positions" if model.config.position != "learned" else "") + (
        f", with experiment 3's mask bug {', '.join(bugs)}" if bugs else "")
    write_pages(args, model, ids, labels, notes, step, f"{Path(str(ckpt)).name} ({kind})", out)
    return 0


def pretrained_main(args: argparse.Namespace) -> int:
    """main's work for --init_from: a pretrained GPT-2's attention on the text (step 0: it was not trained here)."""
    out = args.out or pretrained_page(args.init_from, args.text)
    try:
        check_writable(out, f"--out={args.out}" if args.out is not None else
                       f"the default page {out} (pass --out to write it elsewhere)", force=args.force)
        if args.png is not None:
            check_writable(args.png, f"--png={args.png}", directory=True)
        check_pretrained(args.init_from)  # a name the Hub cannot serve now: said before torch
        from tinygpt.train.init_from import load_model

        model, tok, pre = load_model(args.init_from)
        ids, labels, notes = tokens(tok, args.text, model.config.block_size, model.config.vocab_size)
    except (FileNotFoundError, ConfigError, ValueError) as err:
        print_error(f"attention: {err}")
        return 2
    print(f"# init_from {pre.source} ({pre.path})", file=sys.stderr)
    write_pages(args, model, ids, labels, notes, 0, f"{pre.source} (pretrained GPT-2, causal)", out)
    return 0


def write_pages(args: argparse.Namespace, model: GPT, ids: list[int], labels: list[str], notes: list[str], step: int,
                title: str, out: Path) -> None:
    """The notes, then the explorer page of the text's attention (and the PNGs with --png), each path printed."""
    from tinygpt.pictures import explorer

    for note in notes:
        print(f"# {note}", file=sys.stderr)
    w = weights_of(model, ids).numpy()  # (n_layer, H, T, T)
    page = explorer.write(out, [(step, w, labels)], title)
    print(f"attention: {len(ids)} tokens, {w.shape[0]} layers x {w.shape[1]} heads -> {page}")
    if args.png:
        args.png.mkdir(parents=True, exist_ok=True)
        paths = LayerPlotter()(w, labels, step, args.png)
        print(f"attention: {len(paths)} PNGs -> {args.png}")

"""Generate text from a checkpoint: `python scripts/sample.py --ckpt outputs/.../last.ckpt --prompt ROMEO:`, or from
a pretrained GPT-2 without a run: `--init_from gpt2` (a Hub name or a local Hugging Face model dir).

Several ``--prompt``s decode together as one left-padded batch (each continues as it would alone)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from tinygpt.runtime.errors import ConfigError, OneLineParser

if TYPE_CHECKING:
    from tokenizers import Tokenizer

    from tinygpt.model.gpt import GPT

# torch, the model and the loaders are imported where they are used: --help and a refused argument answer before
# torch is imported


def find_latest_checkpoint(roots=("outputs", "multirun")) -> Path | None:
    """The newest last.ckpt under the default output dirs."""
    found = [p for r in roots if Path(r).is_dir() for p in Path(r).rglob("last.ckpt")]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def load_pretrained(source: str, device: str = "cpu") -> tuple[GPT, Tokenizer]:
    """The GPT (eval mode) and tokenizer of a pretrained GPT-2 (``--init_from``: a Hugging Face model dir or a Hub
    name; tinygpt.train.init_from)."""
    from tinygpt.train.init_from import load_model

    model, tok, _ = load_model(source, device)
    return model, tok


def token_ids(text: str, vocab_size: int, flag: str = "--prompt") -> list[int]:
    """Space-separated token ids (a checkpoint without a tokenizer), each checked against the vocabulary."""
    try:
        ids = [int(t) for t in text.split()]
    except ValueError:
        raise ValueError(f"this checkpoint has no tokenizer (its data were token ids, e.g. random_tokens): give "
                         f"the {flag[2:]} as space-separated ids, e.g. {flag} '3 14 15', not {text!r}.") from None
    bad = next((i for i in ids if not 0 <= i < vocab_size), None)
    if bad is not None:
        raise ValueError(f"token id {bad} in {flag} {text!r} is outside this checkpoint's vocabulary of {vocab_size} "
                         f"tokens; give ids from 0 to {vocab_size - 1}.")
    return ids


def prompt_ids(tok: Tokenizer | None, prompt: str, vocab_size: int | None = None) -> list[int]:
    """A prompt as token ids (space-separated ids, below ``vocab_size``, for a checkpoint without a tokenizer)."""
    from tinygpt.data.tokenizer import encode

    if tok is None:
        return token_ids(prompt, vocab_size if vocab_size is not None else 2**63) or [0]
    ids = encode(tok, prompt)
    if not ids:
        raise ValueError(f"the prompt {prompt!r} encodes to no tokens; give a non-empty prompt.")
    return ids


def generate_texts(model: GPT, tok: Tokenizer | None, prompts: list[str], max_new_tokens: int,
                   temperature: float = 0.8, top_k: int | None = 40, seed: int = 0,
                   use_cache: bool = True) -> list[str]:
    """Each prompt and its continuation, decoded together as one left-padded batch."""
    import torch

    from tinygpt.data.tokenizer import decode
    from tinygpt.sampling.generate import generate, pad_prompts

    device = next(model.parameters()).device
    ids = [prompt_ids(tok, p, model.config.vocab_size) for p in prompts]
    idx, mask = pad_prompts(ids, device=device)  # (B, T_max) each
    gen = torch.Generator(device=device).manual_seed(seed)
    out = generate(model, idx, max_new_tokens, temperature, top_k, generator=gen, use_cache=use_cache,
                   padding_mask=None if bool(mask.all()) else mask)
    texts = []
    for row, p in zip(out.tolist(), ids, strict=True):
        row = row[idx.shape[1] - len(p):]  # drop the row's pads
        texts.append(" ".join(map(str, row)) if tok is None else decode(tok, row))
    return texts


def top_k_value(text: str) -> int | None:
    """--top-k's value: an integer, or None (no cut)."""
    if text.strip().lower() == "none":
        return None
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a positive integer or None (no cut).") from None


def device_problem(device: str) -> str | None:
    """One sentence when --device names a device this machine does not have (None when it has it)."""
    import torch

    try:
        kind = torch.device(device).type
    except RuntimeError:
        return f"--device={device} is not a device name torch knows; use cpu, cuda or mps."
    if kind == "cuda" and not torch.cuda.is_available():
        return f"--device={device} but no CUDA GPU is visible; use --device cpu."
    if kind == "mps" and not torch.backends.mps.is_available():
        return f"--device={device} but MPS (Apple's GPU) is not available on this machine; use --device cpu."
    return None


def crop_note(n_tokens: int, block_size: int) -> str | None:
    """A note for a prompt longer than the model's context window (the model sees its last block_size tokens; one
    trained with model.extrapolate=true sees all of it, and gets no note)."""
    if n_tokens <= block_size:
        return None
    return (f"note: the prompt has {n_tokens} tokens, more than the model's block_size {block_size}; the model "
            f"sees only its last {block_size}")


def check_pretrained(source: str) -> None:
    """--init_from checked before torch, as train.py checks init_from: a local dir's config.json must be GPT-2's, and a
    Hub name the Hub cannot serve now must be in the cache (it had been said after torch, in 9-12 s)."""
    from tinygpt.model.hf_config import read_settings
    from tinygpt.runtime.hub import cached_when_hub_unusable, local_model_dir

    local = local_model_dir(source)  # named init_from=..., as the load names it
    if local is None:
        cached_when_hub_unusable(source)
    else:
        read_settings(local, where=f"init_from={source!r}")


def checkpoint_vocabulary(ckpt: Path) -> tuple[Tokenizer | None, int] | None:
    """The tokenizer (None: a token-id model) and the vocabulary size a checkpoint's pickle records, read without
    torch (a few ms where loading the model takes seconds); None when it cannot be read so (the load says why)."""
    from tinygpt.runtime.resume_record import checkpoint_record

    record = checkpoint_record(ckpt)
    hp = record.get("hyper_parameters") if isinstance(record, dict) else None
    vocab = hp.get("vocab_size") if isinstance(hp, dict) else None
    if not isinstance(vocab, int) or not isinstance(record.get("tokenizer"), (str, type(None))):
        return None
    if not record.get("tokenizer"):
        return None, vocab
    from tokenizers import Tokenizer

    return Tokenizer.from_str(record["tokenizer"]), vocab


def check_prompts(ckpt: Path, prompts: list[str]) -> None:
    """Each prompt as the checkpoint's tokenizer (or its vocabulary of ids) takes it, read from the checkpoint's
    pickle without torch: an empty prompt, or text for a token-id model, is one sentence before the model loads (it
    had been after, in 7-8 s). A checkpoint that cannot be read so is left to the load."""
    if (found := checkpoint_vocabulary(ckpt)) is None:
        return
    tok, vocab = found
    for prompt in prompts:
        prompt_ids(tok, prompt, vocab)


def add_model_source(ap: argparse.ArgumentParser) -> None:
    """--ckpt or --init_from, one of them: where the CLIs' model comes from."""
    source = ap.add_mutually_exclusive_group()
    source.add_argument("--ckpt", help="checkpoint or run dir (default: the newest last.ckpt under outputs/ and "
                        "multirun/)")
    source.add_argument("--init_from", "--init-from", dest="init_from", metavar="DIR_OR_NAME",
                        help="a pretrained GPT-2 instead: a local Hugging Face model dir or a Hub name (gpt2, "
                        "gpt2-medium, gpt2-large, gpt2-xl, owner/name)")


MAX_SEED = 2**64 - 1  # torch.Generator.manual_seed takes an unsigned 64-bit seed
LONG_OUTPUT = 20_000  # tokens in all from which the command says what it is doing before it starts


def main(argv: list[str] | None = None) -> int:
    ap = OneLineParser("scripts/sample.py", description=__doc__)
    add_model_source(ap)
    ap.add_argument("--prompt", action="append", help="text to continue (default: a newline); repeat it for "
                    "several prompts, decoded together as one padded batch")
    ap.add_argument("--max-new-tokens", "--max_new_tokens", type=int, default=500,
                    help="tokens to generate per sample (default: 500)")
    ap.add_argument("--temperature", type=float, default=0.8, help="softmax temperature, a finite number > 0: lower "
                    "is more predictable (default: 0.8; --top-k 1 for greedy decoding)")
    ap.add_argument("--top-k", "--top_k", type=top_k_value, default=40, help="sample from the k likeliest tokens "
                    "(default: 40; None: no cut)")
    ap.add_argument("--num-samples", "--num_samples", type=int, default=1,
                    help="samples per prompt, each with its own seed (--seed, --seed + 1, ...; default: 1)")
    ap.add_argument("--seed", type=int, default=0, help="the first sample's random seed (default: 0)")
    ap.add_argument("--device", default="auto", help="cpu, cuda, cuda:N or mps (default: auto, a CUDA GPU when "
                    "there is one, else the CPU)")
    ap.add_argument("--no-cache", "--no_cache", action="store_true",
                    help="recompute the whole context for every token (slower; for comparison with the KV cache)")
    args = ap.parse_args(argv)
    prompts = args.prompt or ["\n"]
    ckpt = args.init_from or args.ckpt or find_latest_checkpoint()
    if ckpt is None:
        ap.error("no checkpoint given and none found under outputs/ or multirun/; run `python train.py` first.")
    if args.max_new_tokens < 1:
        ap.error(f"--max-new-tokens={args.max_new_tokens} must be >= 1.")
    if args.num_samples < 1:
        ap.error(f"--num-samples={args.num_samples} must be >= 1.")
    if not 0 <= args.seed <= MAX_SEED - args.num_samples:
        ap.error(f"--seed={args.seed} must be a whole number from 0 to {MAX_SEED - args.num_samples} (torch's seeds "
                 "are unsigned 64-bit; sample i uses --seed + i).")
    try:  # a wrong path, file, model name or prompt refused before torch is imported
        if args.init_from:
            check_pretrained(args.init_from)
            if "" in prompts:  # any tokenizer makes no tokens of it
                raise ValueError("the prompt '' encodes to no tokens; give a non-empty prompt.")
        else:
            from tinygpt.runtime.run_dirs import checkpoint_file

            ckpt = checkpoint_file(ckpt)
            check_prompts(ckpt, prompts)
    except (FileNotFoundError, ConfigError, ValueError) as e:
        ap.error(str(e))
    from tinygpt.sampling.checks import check_sampling

    try:  # before torch: a bad value is refused at once
        check_sampling(args.temperature, args.top_k)
    except ValueError as err:
        ap.error(f"--{err}".replace("top_k=", "top-k="))
    if args.device == "auto":
        import torch

        args.device = "cuda" if torch.cuda.is_available() else "cpu"
    if problem := device_problem(args.device):
        ap.error(problem)
    from tinygpt.sampling.fast_linear import use_fast_decode
    from tinygpt.train.module import load_trained

    try:
        if args.init_from:
            model, tok = load_pretrained(args.init_from, args.device)
        else:
            model, tok, _ = load_trained(ckpt, args.device)
        use_fast_decode(model)  # KV-cache decoding's few-row products on both cores (tinygpt.sampling.fast_linear)
    except (FileNotFoundError, ConfigError) as e:
        ap.error(str(e))
    try:
        notes = {crop_note(len(prompt_ids(tok, p, model.config.vocab_size)), model.config.block_size)
                 for p in prompts if not model.config.extrapolate}  # model.extrapolate: it sees the whole prompt
    except ValueError as e:
        ap.error(str(e))
    print(f"# {ckpt}", file=sys.stderr)
    total = args.max_new_tokens * args.num_samples * len(prompts)
    if total >= LONG_OUTPUT:  # nothing is printed until every sample is done: say what is coming
        print(f"# generating {total:,} tokens ({args.max_new_tokens:,} per sample, {args.num_samples} sample(s) of "
              f"{len(prompts)} prompt(s)); the text is printed at the end, Ctrl-C stops", file=sys.stderr)
    for note in sorted(n for n in notes if n):
        print(f"# {note}", file=sys.stderr)
    if tok is not None and tok.token_to_id("<unk>") is not None:
        unknown = sorted({c for c in "".join(prompts) if tok.token_to_id(c) is None})
        if unknown:
            print(f"# note: the prompt's {''.join(unknown)!r} are not in the vocabulary; the model sees <unk>",
                  file=sys.stderr)
    try:
        texts = [text for i in range(args.num_samples) for text in generate_texts(
            model, tok, prompts, args.max_new_tokens, args.temperature, args.top_k, args.seed + i,
            use_cache=not args.no_cache)]
    except ValueError as e:
        ap.error(str(e))
    except KeyboardInterrupt:  # the text is printed when every sample is done: there is none to show yet
        print("interrupted by SIGINT: no text printed (sample.py prints it when every sample is done; a smaller "
              "--max-new-tokens is quicker).", file=sys.stderr, flush=True)
        return 130
    print(("\n" + "-" * 40 + "\n").join(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

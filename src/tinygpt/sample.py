"""Generate text from a checkpoint: `python scripts/sample.py --ckpt outputs/.../last.ckpt --prompt ROMEO:`.

Several ``--prompt``s decode together as one left-padded batch (each continues as it would alone)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer

from tinygpt.runtime import checkpoint
from tinygpt.runtime.errors import ConfigError
from tinygpt.model.fast_linear import use_fast_decode
from tinygpt.model.generate import check_sampling, generate, pad_prompts
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.data.tokenizer import decode, encode


def find_latest_checkpoint(roots=("outputs", "multirun")) -> Path | None:
    """The newest last.ckpt under the default output dirs."""
    found = [p for r in roots if Path(r).is_dir() for p in Path(r).rglob("last.ckpt")]
    return max(found, key=lambda p: p.stat().st_mtime) if found else None


def checkpoint_in(d: Path) -> Path:
    """A run dir's last checkpoint; a sweep dir, or a run that wrote none, is named as what it is."""
    for candidate in (d / "checkpoints" / "last.ckpt", d / "last.ckpt"):
        if candidate.is_file():
            return candidate
    summary = d / "summary.json"
    if summary.is_file():
        s = json.loads(summary.read_text())
        raise FileNotFoundError(f"{d} is a run dir without a checkpoint (status {s.get('status')!r} at step "
                                f"{s.get('steps')}: it stopped before its first checkpoint); pass another run.")
    jobs = sorted(p.parent.parent.name for p in d.glob("*/checkpoints/last.ckpt"))
    if (d / "multirun.yaml").exists() or jobs:
        example = f" e.g. --ckpt {d / jobs[0]}" if jobs else ""
        raise FileNotFoundError(f"{d} is a sweep dir ({len(jobs)} jobs with a checkpoint); pass one job's dir,"
                                f"{example}.")
    raise FileNotFoundError(f"{d} holds no checkpoint (no checkpoints/last.ckpt); pass a run dir or a .ckpt file.")


def load_checkpoint(path: str | Path, device: str = "cpu") -> tuple[GPT, Tokenizer | None]:
    """The GPT (eval mode) and its tokenizer from a Lightning checkpoint written by train.py, loaded with
    ``weights_only=True`` (an untrusted file cannot run code)."""
    path = Path(path)
    if path.is_dir():  # a run dir: use its last checkpoint
        path = checkpoint_in(path)
    if not path.is_file():
        raise FileNotFoundError(f"checkpoint {str(path)!r} does not exist.")
    ckpt = checkpoint.load(path, map_location=device)
    hp = ckpt["hyper_parameters"]
    model = GPT(GPTConfig(vocab_size=hp["vocab_size"], **hp["model"]))
    if hp.get("attention_bug"):  # experiment 3's deliberate mask bug: the model as it was trained
        from hydra.utils import instantiate

        instantiate(hp["attention_bug"])(model)
    state = checkpoint.model_weights(ckpt["state_dict"])
    model.load_state_dict(state)
    tok = Tokenizer.from_str(ckpt["tokenizer"]) if "tokenizer" in ckpt else None
    return model.to(device).eval(), tok


def prompt_ids(tok: Tokenizer | None, prompt: str) -> list[int]:
    """A prompt as token ids (space-separated ids for a checkpoint without a tokenizer)."""
    if tok is None:
        try:
            return [int(t) for t in prompt.split()] or [0]
        except ValueError:
            raise ValueError(f"this checkpoint has no tokenizer (its data were token ids, e.g. random_tokens): give "
                             f"the prompt as space-separated ids, e.g. --prompt '3 14 15', not {prompt!r}.") from None
    ids = encode(tok, prompt)
    if not ids:
        raise ValueError(f"the prompt {prompt!r} encodes to no tokens; give a non-empty prompt.")
    return ids


def generate_texts(model: GPT, tok: Tokenizer | None, prompts: list[str], max_new_tokens: int,
                   temperature: float = 0.8, top_k: int | None = 40, seed: int = 0,
                   use_cache: bool = True) -> list[str]:
    """Each prompt and its continuation, decoded together as one left-padded batch."""
    device = next(model.parameters()).device
    ids = [prompt_ids(tok, p) for p in prompts]
    idx, mask = pad_prompts(ids, device=device)  # (B, T_max) each
    gen = torch.Generator(device=device).manual_seed(seed)
    out = generate(model, idx, max_new_tokens, temperature, top_k, generator=gen, use_cache=use_cache,
                   padding_mask=None if bool(mask.all()) else mask)
    texts = []
    for row, p in zip(out.tolist(), ids, strict=True):
        row = row[idx.shape[1] - len(p):]  # drop the row's pads
        texts.append(" ".join(map(str, row)) if tok is None else decode(tok, row))
    return texts


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--ckpt", help="checkpoint or run dir (default: the newest last.ckpt under outputs/ and multirun/)")
    ap.add_argument("--prompt", action="append", help="text to continue (default: a newline); repeat it for "
                    "several prompts, decoded together as one padded batch")
    ap.add_argument("--max-new-tokens", type=int, default=500)
    ap.add_argument("--temperature", type=float, default=0.8)
    ap.add_argument("--top-k", type=int, default=40)
    ap.add_argument("--num-samples", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--no-cache", action="store_true", help="recompute the whole context for every token (slower; "
                    "for comparison with the KV cache)")
    args = ap.parse_args(argv)
    prompts = args.prompt or ["\n"]
    ckpt = args.ckpt or find_latest_checkpoint()
    if ckpt is None:
        ap.error("no checkpoint given and none found under outputs/ or multirun/; run `python train.py` first.")
    if args.max_new_tokens < 1:
        ap.error(f"--max-new-tokens={args.max_new_tokens} must be >= 1.")
    if args.num_samples < 1:
        ap.error(f"--num-samples={args.num_samples} must be >= 1.")
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        ap.error(f"--device={args.device} but no CUDA GPU is visible; use --device cpu.")
    try:
        check_sampling(args.temperature, args.top_k)
    except ValueError as err:
        ap.error(f"--{err}".replace("top_k=", "top-k="))
    try:
        model, tok = load_checkpoint(ckpt, args.device)
        use_fast_decode(model)  # KV-cache decoding's few-row products on both cores (tinygpt.model.fast_linear)
    except (FileNotFoundError, ConfigError) as e:
        ap.error(str(e))
    print(f"# {ckpt}", file=sys.stderr)
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
    print(("\n" + "-" * 40 + "\n").join(texts))
    return 0


if __name__ == "__main__":
    sys.exit(main())

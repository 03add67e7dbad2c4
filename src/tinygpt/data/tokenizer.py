"""Tokenizers from HF `tokenizers`, trained on the train split and saved as JSON.

- ``char``: one token per character (nanoGPT's Shakespeare recipe), vocab = the train split's
  characters plus ``<unk>`` for characters only the validation text has.
- ``bpe``: byte-level BPE (GPT-2 style), any text round-trips; vocab size configurable.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

TOKENIZERS = ("char", "bpe")
UNK = "<unk>"
EOT = "<|endoftext|>"


def train_tokenizer(kind: str, texts: Iterable[str], vocab_size: int = 512) -> Tokenizer:
    """Train a ``char`` or ``bpe`` tokenizer on ``texts``."""
    if kind == "char":
        tok = Tokenizer(models.WordLevel(unk_token=UNK))
        # every character, newline included, is its own "word"
        tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
        tok.decoder = decoders.Fuse()
        trainer = trainers.WordLevelTrainer(vocab_size=1 << 20, min_frequency=0, special_tokens=[UNK])
    elif kind == "bpe":
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=[EOT],
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        )
    else:
        raise ValueError(f"data.tokenizer={kind!r} is not one of {', '.join(TOKENIZERS)}.")
    tok.train_from_iterator(texts, trainer=trainer)
    return tok


def load_tokenizer(path: str | Path) -> Tokenizer:
    return Tokenizer.from_file(str(path))


def encode(tok: Tokenizer, text: str) -> list[int]:
    return tok.encode(text, add_special_tokens=False).ids


REPLACEMENT = "\ufffd"  # how text decoders show a character they cannot name


def decode(tok: Tokenizer, ids: Iterable[int]) -> str:
    """Text of ``ids``; the char tokenizer's ``<unk>`` (a character only the validation text has) shows as
    U+FFFD, as any text decoder shows an unknown character, not as the literal string '<unk>'."""
    ids, unk = list(ids), tok.token_to_id(UNK)
    if unk is None or unk not in ids:
        return tok.decode(ids, skip_special_tokens=False)
    pieces, start = [], 0
    for i, t in enumerate(ids + [unk]):
        if t == unk:
            pieces.append(tok.decode(ids[start:i], skip_special_tokens=False) if i > start else "")
            start = i + 1
    return REPLACEMENT.join(pieces)

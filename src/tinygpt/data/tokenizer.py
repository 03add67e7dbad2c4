"""Tokenizers from HF `tokenizers`, trained on the train split and saved as JSON.

- ``char``: one token per character (nanoGPT's Shakespeare recipe), vocab = the train split's
  characters plus ``<unk>`` for characters only the validation text has.
- ``bpe``: byte-level BPE (GPT-2 style), any text round-trips; vocab size configurable.
- ``pretrained``: not trained here but read from a Hugging Face model dir (GPT-2's byte-level BPE, 50257 tokens,
  from its tokenizer.json or vocab.json + merges.txt): what ``init_from`` uses.

``TokenizerSpec`` holds a run's choice (data.tokenizer, data.bpe_vocab_size, data.tokenizer_dir), checked.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

from tinygpt.data.config import (PRETRAINED, TOKENIZERS, check_bpe_vocab,  # declared with the data settings
                                 check_tokenizer_choice)
from tinygpt.runtime.checks import one_of, positive_int

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


def load_pretrained_tokenizer(model_dir: str | Path) -> Tokenizer:
    """GPT-2's byte-level BPE from a Hugging Face model dir: its tokenizer.json, or vocab.json + merges.txt (the
    BPE with a ByteLevel pre-tokenizer and decoder, no prefix space, ``<|endoftext|>`` special, as transformers'
    GPT2TokenizerFast builds it); one sentence when the dir has neither or a file is not readable."""
    d = Path(model_dir)
    vocab, merges = d / "vocab.json", d / "merges.txt"
    try:
        if (d / "tokenizer.json").is_file():
            return Tokenizer.from_file(str(d / "tokenizer.json"))
        if vocab.is_file() and merges.is_file():
            tok = Tokenizer(models.BPE.from_file(str(vocab), str(merges)))
            tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
            tok.decoder = decoders.ByteLevel()
            if tok.token_to_id(EOT) is not None:
                tok.add_special_tokens([EOT])
            return tok
    except Exception as err:  # tokenizers' own errors on a malformed file
        first = (str(err).strip().splitlines() or [type(err).__name__])[0]
        raise ValueError(f"the tokenizer files in {d} are not readable ({first[:160]}).") from None
    raise ValueError(f"{d} has no tokenizer: neither tokenizer.json nor vocab.json + merges.txt.")


def fingerprint(tok: Tokenizer) -> str:
    """12 hex digits that change with anything about the tokenizer (its whole JSON): a cache key."""
    return hashlib.sha256(tok.to_str().encode("utf-8")).hexdigest()[:12]


@dataclass(frozen=True)
class TokenizerSpec:
    """How a text corpus becomes token ids: data.tokenizer (``char``, ``bpe`` or ``pretrained``),
    data.bpe_vocab_size (bpe's target) and, for ``pretrained``, the tokenizer read from data.tokenizer_dir. Build
    it with ``checked``."""

    kind: str
    bpe_vocab_size: int
    pretrained: Tokenizer | None = None

    @classmethod
    def checked(cls, kind: str, bpe_vocab_size: int, tokenizer_dir: str | None = None) -> TokenizerSpec:
        """The settings checked, each mistake one sentence naming its key; a pretrained tokenizer is read now, so a
        bad data.tokenizer_dir stops before any work."""
        positive_int("data.bpe_vocab_size", bpe_vocab_size)
        one_of("data.tokenizer", kind, (*TOKENIZERS, PRETRAINED))
        pretrained = read_pretrained(kind, tokenizer_dir)
        check_bpe_vocab(kind, bpe_vocab_size)
        return cls(kind, bpe_vocab_size, pretrained)

    @property
    def key(self) -> str:
        """The token cache's name for it: ``char``, ``bpe<bpe_vocab_size>`` or ``pretrained<hash of its JSON>``."""
        if self.pretrained is not None:
            return f"{self.kind}{fingerprint(self.pretrained)}"
        return self.kind + (f"{self.bpe_vocab_size}" if self.kind == "bpe" else "")


def read_pretrained(kind: str, tokenizer_dir: str | None) -> Tokenizer | None:
    """data.tokenizer=pretrained's tokenizer, read from data.tokenizer_dir; None for a tokenizer trained on the
    corpus (which takes no data.tokenizer_dir)."""
    check_tokenizer_choice(kind, tokenizer_dir)
    if kind != PRETRAINED:
        return None
    if not Path(tokenizer_dir).expanduser().is_dir():
        raise ValueError(f"data.tokenizer_dir={tokenizer_dir!r} is not a directory.")
    try:
        return load_pretrained_tokenizer(Path(tokenizer_dir).expanduser())
    except ValueError as err:
        raise ValueError(f"data.tokenizer_dir={tokenizer_dir!r}: {err}") from None


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

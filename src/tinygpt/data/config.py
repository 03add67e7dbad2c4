"""The data module's settings (``data.*``): how a corpus's tokens become training and validation windows. Declared
here once: the config's schema is derived from this class (tinygpt.train.schema); a run's defaults, with their
comments, are configs/data/default.yaml's, and the defaults here (for use from Python) are the same
(tests/data/test_data_contract.py). The corpus itself is the ``corpus`` group (tinygpt.data.corpus).
Torch-free, so that the config is checked before anything heavy is imported.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from tinygpt.runtime.checks import one_of, positive_int

TOKENIZERS = ("char", "bpe")  # trained on the corpus
PRETRAINED = "pretrained"  # read from data.tokenizer_dir


@dataclass
class DataConfig:
    tokenizer: str = "char"  # char | bpe | pretrained (a text corpus only)
    bpe_vocab_size: int = 512  # bpe only: the vocabulary BPE training aims at
    # pretrained only: a Hugging Face model dir with its tokenizer files (a path: tinygpt.train.schema.path_keys)
    tokenizer_dir: str | None = field(default=None, metadata={"path": True})
    train_fraction: float = 0.9  # contiguous split, as nanoGPT
    block_size: int = 64  # window length: the model's context
    batch_size: int = 12  # training windows per step and process
    val_batch_size: int = 64  # validation windows per forward pass (memory only)
    val_windows: int = 1024  # fixed, evenly spaced validation windows
    val_end_aligned: int | None = None  # null: windows start evenly spaced; L: same last tokens at block_size <= L
    cache_dir: str = field(default="data/cache", metadata={"path": True})  # where the token caches are kept
    seed: int = 1337  # the training windows' random stream
    overfit: bool = False  # debug: repeat one batch

    def __post_init__(self):
        if not isinstance(self.train_fraction, (int, float)) or not 0.0 < self.train_fraction < 1.0:
            raise ValueError(f"data.train_fraction={self.train_fraction!r} must be between 0 and 1.")
        for key in ("batch_size", "block_size", "val_windows", "val_batch_size", "bpe_vocab_size"):
            positive_int(f"data.{key}", getattr(self, key))
        if self.val_end_aligned is not None:
            positive_int("data.val_end_aligned", self.val_end_aligned)
            if self.val_end_aligned < self.block_size:
                raise ValueError(f"data.val_end_aligned={self.val_end_aligned} is shorter than data.block_size="
                                 f"{self.block_size}; it must be at least the context the windows are laid out for "
                                 "(or null: windows aligned at their start).")
        one_of("data.tokenizer", self.tokenizer, (*TOKENIZERS, PRETRAINED))
        check_bpe_vocab(self.tokenizer, self.bpe_vocab_size)
        check_tokenizer_choice(self.tokenizer, self.tokenizer_dir)
        if not isinstance(self.cache_dir, str) or not self.cache_dir.strip():
            raise ValueError(f"data.cache_dir={self.cache_dir!r} must name a directory for the token caches (the "
                             "default is data/cache).")


BPE_MIN_VOCAB = 257  # byte-level BPE starts from the 256 bytes and adds <|endoftext|>


def check_bpe_vocab(kind: str, bpe_vocab_size: int) -> None:
    """data.bpe_vocab_size leaves byte-level BPE room for its 256 bytes and <|endoftext|> (checked here, before
    torch, and again when the tokenizer is built)."""
    if kind == "bpe" and bpe_vocab_size < BPE_MIN_VOCAB:
        raise ValueError(f"data.bpe_vocab_size={bpe_vocab_size} is too small for byte-level BPE: it needs at least "
                         f"{BPE_MIN_VOCAB} (256 bytes + <|endoftext|>).")


def check_tokenizer_choice(kind: str, tokenizer_dir: str | None) -> None:
    """data.tokenizer_dir goes with data.tokenizer=pretrained, and only with it; its files are read at set-up."""
    if kind != PRETRAINED and tokenizer_dir is not None:
        raise ValueError(f"data.tokenizer_dir={tokenizer_dir!r} is used only with data.tokenizer=pretrained (this "
                         f"run has data.tokenizer={kind!r}); add data.tokenizer=pretrained to tokenize with it, or "
                         f"init_from={tokenizer_dir} to start from its weights too.")
    if kind == PRETRAINED and not tokenizer_dir:
        raise ValueError("data.tokenizer=pretrained needs data.tokenizer_dir=<a Hugging Face model dir with "
                         "tokenizer.json or vocab.json + merges.txt> (init_from sets it).")
    if kind == PRETRAINED and not Path(tokenizer_dir).expanduser().is_dir():
        raise ValueError(f"data.tokenizer_dir={tokenizer_dir!r} is not a directory.")

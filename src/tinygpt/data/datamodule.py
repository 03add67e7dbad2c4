"""Corpus -> tokenizer -> cached token ids -> random training windows and fixed validation windows, as one
Lightning DataModule: the corpus sources in corpus.py, the tokenizers in tokenizer.py, the token-id cache in
cache.py, the windows in windows.py.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from tinygpt.data import cache, corpus
from tinygpt.data.tokenizer import PRETRAINED, TOKENIZERS, decode, encode, load_pretrained_tokenizer, load_tokenizer
from tinygpt.data.windows import RandomWindows, fixed_windows
from tinygpt.runtime.checks import one_of, positive_int

SOURCES = ("shakespeare", "text_file", "hf_hub", "random_tokens")


class TextDataModule(L.LightningDataModule):
    """Builds (or reuses) the cache in ``prepare_data``, memory-maps it in ``setup``."""

    def __init__(
        self,
        source: str = "shakespeare",
        path: str | list[str] | None = None,
        name: str | None = None,
        config: str | None = None,
        split: str = "train",
        text_column: str = "text",
        tokenizer: str = "char",
        vocab_size: int = 512,
        tokenizer_dir: str | None = None,
        n_tokens: int = 1_000_000,
        train_fraction: float = 0.9,
        block_size: int = 64,
        batch_size: int = 12,
        val_batch_size: int = 64,
        val_windows: int = 1024,
        cache_dir: str = "data/cache",
        seed: int = 1337,
        overfit: bool = False,
    ):
        super().__init__()
        one_of("data.source", source, SOURCES)
        positive_int("data.vocab_size", vocab_size)
        if source != "random_tokens":
            one_of("data.tokenizer", tokenizer, (*TOKENIZERS, PRETRAINED))
        self.pretrained = self._pretrained_tokenizer(source, tokenizer, tokenizer_dir)
        if source != "random_tokens" and tokenizer == "bpe" and vocab_size < 257:
            raise ValueError(
                f"data.vocab_size={vocab_size} is too small for byte-level BPE: it needs at least 257 "
                "(256 bytes + <|endoftext|>)."
            )
        if source == "random_tokens" and not 2 <= vocab_size <= 2**31:
            raise ValueError(f"data.vocab_size={vocab_size} must be at least 2 for random_tokens.")
        if source == "text_file":
            paths = [path] if isinstance(path, str) else list(path or [])
            if not paths:
                raise ValueError("data=text_file needs data.path=<file> (one or more UTF-8 text files).")
            missing = [p for p in paths if not Path(p).expanduser().is_file()]
            if missing:
                raise ValueError(f"data.path={missing[0]!r} is not a file.")
            path = paths
        if source == "hf_hub" and not name:
            raise ValueError("data=hf_hub needs data.name=<hub id or local dataset directory>.")
        if not 0.0 < train_fraction < 1.0:
            raise ValueError(f"data.train_fraction={train_fraction!r} must be between 0 and 1.")
        for key, value in (("batch_size", batch_size), ("block_size", block_size), ("val_windows", val_windows),
                           ("val_batch_size", val_batch_size)):
            positive_int(f"data.{key}", value)
        self.source, self.path, self.name, self.config = source, path, name, config
        self.split, self.text_column = split, text_column
        self.tokenizer_kind, self.tokenizer_vocab, self.n_tokens = tokenizer, vocab_size, n_tokens
        self.tokenizer_dir = tokenizer_dir
        self.train_fraction, self.block_size = train_fraction, block_size
        self.batch_size, self.val_batch_size, self.val_windows = batch_size, val_batch_size, val_windows
        self.cache_root, self.seed, self.overfit = Path(cache_dir).expanduser(), seed, overfit
        self.tokenizer = None
        self.train_ids = self.val_ids = None
        self.cache_path: Path | None = None

    @staticmethod
    def _pretrained_tokenizer(source: str, tokenizer: str, tokenizer_dir: str | None):
        """data.tokenizer=pretrained's tokenizer, read now from data.tokenizer_dir (a mistake stops before any work);
        None for a tokenizer trained on the corpus."""
        if tokenizer != PRETRAINED or source == "random_tokens":
            if tokenizer_dir is not None and source != "random_tokens":
                raise ValueError(f"data.tokenizer_dir={tokenizer_dir!r} is used only with data.tokenizer=pretrained "
                                 f"(this run has data.tokenizer={tokenizer!r}); add data.tokenizer=pretrained to "
                                 f"tokenize with it, or init_from={tokenizer_dir} to start from its weights too.")
            return None
        if not tokenizer_dir:
            raise ValueError("data.tokenizer=pretrained needs data.tokenizer_dir=<a Hugging Face model dir with "
                             "tokenizer.json or vocab.json + merges.txt> (init_from sets it).")
        if not Path(tokenizer_dir).expanduser().is_dir():
            raise ValueError(f"data.tokenizer_dir={tokenizer_dir!r} is not a directory.")
        try:
            return load_pretrained_tokenizer(Path(tokenizer_dir).expanduser())
        except ValueError as err:
            raise ValueError(f"data.tokenizer_dir={tokenizer_dir!r}: {err}") from None

    # ------------------------------------------------------------------ cache

    def _read_text(self, scratch: Path) -> str:
        """The corpus text. Local files are read as they are; a hub dataset goes through `datasets`, whose own
        Arrow cache goes under ``scratch`` (the cache root when writable)."""
        if self.source in ("shakespeare", "text_file"):
            paths = self.path
            if self.source == "shakespeare":
                converted = self.cache_root / corpus.SHAKESPEARE_FILE
                paths = [converted if converted.exists() else corpus.shakespeare_text_file(scratch)]
            return corpus.read_text_files(paths)
        return corpus.read_hf_dataset(
            self.name, config=self.config, split=self.split, text_column=self.text_column, cache_dir=scratch,
        )

    def _cache_settings(self) -> dict:
        settings = {"tokenizer": self.tokenizer_kind, "vocab_size": self.tokenizer_vocab,
                    "train_fraction": self.train_fraction, "n_tokens": self.n_tokens, "seed": self.seed}
        return settings if self.pretrained is None else {**settings, "pretrained": self.pretrained}

    def _cache_dir_for(self, text: str | None) -> Path:
        return cache.cache_dir_for(self.cache_root, self.source, text, **self._cache_settings())

    def prepare_data(self) -> None:
        """Read the corpus, train the tokenizer on the train split, tokenize, cache (tinygpt.data.cache).
        Idempotent; processes that build the same cache at once never see a half-written one."""
        if self.cache_path is not None and (self.cache_path / "meta.json").exists():
            return
        reason = cache.unwritable(self.cache_root)
        with tempfile.TemporaryDirectory(prefix="tinygpt-read-") as scratch:  # a read-only cache stays untouched
            where = Path(scratch) if reason else self.cache_root
            text = None if self.source == "random_tokens" else self._read_text(where)
        out = self._cache_dir_for(text)
        if not (out / "meta.json").exists():
            if reason:
                raise ValueError(
                    f"data.cache_dir={str(self.cache_root)!r} cannot hold the token cache ({reason}) and has no "
                    "cache for this corpus yet; set data.cache_dir (or TINYGPT_CACHE_DIR) to a writable directory."
                )
            cache.publish(out, lambda tmp: self._build_cache(text, tmp))
        self.cache_path = out

    def _build_cache(self, text: str | None, out: Path) -> None:
        cache.build(out, self.source, text, **self._cache_settings())

    def setup(self, stage: str | None = None) -> None:
        if self.train_ids is not None:
            return
        self.prepare_data()  # every process finds (or builds) the same cache path
        meta = json.loads((self.cache_path / "meta.json").read_text())
        self.vocab_size = meta["vocab_size"]
        self.train_ids = np.load(self.cache_path / "train.npy", mmap_mode="r")
        self.val_ids = np.load(self.cache_path / "val.npy", mmap_mode="r")
        tok_file = self.cache_path / "tokenizer.json"
        self.tokenizer = load_tokenizer(tok_file) if tok_file.exists() else None
        for split, ids in (("train", self.train_ids), ("validation", self.val_ids)):
            if len(ids) < self.block_size + 2:
                raise ValueError(
                    f"the {split} split has {len(ids)} tokens, fewer than data.block_size + 2 = "
                    f"{self.block_size + 2}; use a larger corpus or a smaller block_size."
                )
        self.val_x, self.val_y = fixed_windows(self.val_ids, self.block_size, self.val_windows)

    def probe_index(self, n: int) -> torch.Tensor:
        """Which n of the fixed validation windows the probes use: spread evenly over the split, (n,)."""
        return torch.linspace(0, len(self.val_x) - 1, min(n, len(self.val_x))).long()

    def probe_windows(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """n of the fixed validation windows, spread evenly over the split: x, y (n, T)."""
        pick = self.probe_index(n)  # (n,)
        return self.val_x[pick], self.val_y[pick]

    # ------------------------------------------------------------------ loaders

    def train_dataloader(self) -> DataLoader:
        ds = RandomWindows(self.train_ids, self.block_size, self.batch_size, self.seed, self.overfit)
        if self.trainer is not None:  # resume: continue the batch sequence at the restored step
            ds.start_step, ds.rank = self.trainer.global_step, self.trainer.global_rank
            ds.world_size = self.trainer.world_size
            if self.trainer.max_steps and self.trainer.max_steps > 0:
                ds.length = self.trainer.max_steps  # the whole run: one epoch of max_steps batches
        return DataLoader(ds, batch_size=None, num_workers=0)

    def val_dataloader(self) -> DataLoader:
        return DataLoader(TensorDataset(self.val_x, self.val_y), batch_size=self.val_batch_size, shuffle=False)

    def encode(self, text: str) -> list[int]:
        if self.tokenizer is None:
            raise ValueError("this data source has no tokenizer (random_tokens); pass token ids instead.")
        return encode(self.tokenizer, text)

    def decode(self, ids) -> str:
        if self.tokenizer is None:
            return " ".join(str(int(i)) for i in ids)
        return decode(self.tokenizer, (int(i) for i in ids))


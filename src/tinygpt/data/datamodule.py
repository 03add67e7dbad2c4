"""Corpus -> tokenizer -> cached token ids -> random training windows and fixed validation windows, as one
Lightning DataModule: the corpora in corpus.py, the tokenizers in tokenizer.py, the token-id cache in cache.py,
the windows in windows.py.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, TensorDataset

from tinygpt.data import cache
from tinygpt.data.config import DataConfig
from tinygpt.data.corpus import Corpus, Shakespeare
from tinygpt.data.tokenizer import TokenizerSpec, decode, encode, load_tokenizer
from tinygpt.data.windows import RandomWindows, fixed_windows
from tinygpt.runtime.writable import cannot_write_into
from tinygpt.runtime.console import out
from tinygpt.runtime.distributed import is_rank_zero


class TextDataModule(L.LightningDataModule):
    """A corpus's token ids as training and validation windows: builds (or reuses) the cache in ``prepare_data``,
    memory-maps it in ``setup``."""

    def __init__(self, corpus: Corpus | None = None, **settings):
        """``corpus``: where the tokens come from (tinygpt.data.corpus; the ``corpus`` group, built by set-up;
        Shakespeare's plays when None). ``settings``: DataConfig's fields (data.*), each checked there; the tokenizer
        settings apply to a text corpus only."""
        super().__init__()
        self.corpus = corpus if corpus is not None else Shakespeare()
        self.config = c = DataConfig(**settings)
        self.tokenizer_spec = (TokenizerSpec.checked(c.tokenizer, c.bpe_vocab_size, c.tokenizer_dir)
                               if self.corpus.needs_tokenizer else None)
        self.train_fraction, self.block_size = c.train_fraction, c.block_size
        self.batch_size, self.val_batch_size, self.val_windows = c.batch_size, c.val_batch_size, c.val_windows
        self.val_end_aligned = c.val_end_aligned
        self.cache_root, self.seed, self.overfit = Path(c.cache_dir).expanduser(), c.seed, c.overfit
        self.tokenizer = None
        self.train_ids = self.val_ids = None
        self.cache_path: Path | None = None

    @property
    def source(self) -> str:
        """The corpus's name, its ``corpus=`` option (a key of tinygpt.data.corpus.CORPORA)."""
        return self.corpus.source

    # ------------------------------------------------------------------ cache

    def prepare_data(self) -> None:
        """Read the corpus, train the tokenizer on the train split, tokenize, cache (tinygpt.data.cache).
        Idempotent; processes that build the same cache at once never see a half-written one."""
        if self.cache_path is not None and (self.cache_path / "meta.json").exists():
            return
        reason = cannot_write_into(self.cache_root)  # a read-only cache is read, never written
        with tempfile.TemporaryDirectory(prefix="tinygpt-read-") as scratch:  # a read-only cache stays untouched
            text = self.corpus.text(self.cache_root, Path(scratch) if reason else self.cache_root)
        out = cache.dir_for(self.cache_root, self.corpus.cache_key(text, self.tokenizer_spec, self.train_fraction))
        if not (out / "meta.json").exists():
            if reason:
                raise ValueError(
                    f"data.cache_dir={str(self.cache_root)!r} cannot hold the token cache ({reason}) and has no "
                    "cache for this corpus yet; set data.cache_dir (or TINYGPT_CACHE_DIR) to a writable directory."
                )
            cache.publish(out, lambda tmp: self.corpus.build_cache(tmp, text, self.tokenizer_spec,
                                                                   self.train_fraction))
        self.cache_path = out

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
        self.val_x, self.val_y = fixed_windows(self.val_ids, self.block_size, self.val_windows,
                                                 self.val_end_aligned)
        if len(self.val_x) < self.val_windows and is_rank_zero() and not getattr(self, "_capped_said", False):
            self._capped_said = True  # once, however often set-up runs
            n = len(self.val_x)
            out.print(f"note: data.val_windows={self.val_windows}, but the validation split holds {n:,} windows of "
                      f"{self.block_size} tokens; all {n:,} are used at each validation (the end of the run caps its "
                      "own at diagnostics.max_val_tokens).", soft_wrap=True)

    def spread_index(self, n: int) -> torch.Tensor:
        """Which n of the fixed validation windows the probes use: spread evenly over the split, (n,)."""
        return torch.linspace(0, len(self.val_x) - 1, min(n, len(self.val_x))).long()

    def spread_windows(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """n of the fixed validation windows, spread evenly over the split: x, y (n, T)."""
        pick = self.spread_index(n)  # (n,)
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


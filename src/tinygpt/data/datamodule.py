"""Corpus -> tokenizer -> cached token ids -> random training windows and fixed validation windows.

Token ids are cached once per (corpus content, tokenizer) under ``cache_dir`` as .npy files
(uint16 when the vocab fits) and memory-mapped, so a second run starts at once.
Training batches are a pure function of (seed, step, rank, world size): step s draws the global batch,
world_size x batch_size window starts, from ``np.random.default_rng([seed, s, 0])``, and rank r takes
its r-th slice of batch_size. So a run on N processes with data.batch_size=b sees, step for step, the
same windows as one process with data.batch_size=N*b (its gradient is their mean: the same update up to
rounding), one process sees what it always saw, and a resumed run continues with exactly the batches it
would have seen, because the sampler's position is the global step stored in every checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import lightning as L
import numpy as np
import torch
from torch.utils.data import DataLoader, IterableDataset, TensorDataset

from tinygpt.data import corpus
from tinygpt.data.tokenizer import TOKENIZERS, decode, encode, load_tokenizer, train_tokenizer

SOURCES = ("shakespeare", "text_file", "hf_hub", "random_tokens")
CACHE_VERSION = 1


def split_text(text: str, train_fraction: float) -> tuple[str, str]:
    """Contiguous split, as nanoGPT: the first ``train_fraction`` of the characters train."""
    n = int(len(text) * train_fraction)
    return text[:n], text[n:]


def chunk_lines(text: str, size: int = 1 << 16) -> list[str]:
    """Cut text into ~size-character pieces at line ends (so BPE never merges across a cut)."""
    chunks, start = [], 0
    while start < len(text):
        end = text.find("\n", min(start + size, len(text))) + 1 or len(text)
        chunks.append(text[start:end])
        start = end
    return chunks


def tokenize_to_array(tok, text: str, dtype) -> np.ndarray:
    """Token ids of ``text`` via a batched `datasets` map over line chunks."""
    from datasets import Dataset

    chunks = chunk_lines(text)
    if not chunks:  # `datasets` drops the column of an empty map
        return np.zeros(0, dtype)
    ds = Dataset.from_dict({"text": chunks})
    ds = ds.map(
        lambda b: {"ids": [np.asarray(e.ids, dtype) for e in tok.encode_batch(b["text"], add_special_tokens=False)]},
        batched=True,
        remove_columns=["text"],
        desc="tokenizing",
    )
    return np.concatenate(list(ds.with_format("numpy")["ids"])).astype(dtype)


def windows_at(ids: np.ndarray, starts: np.ndarray, block_size: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Windows of block_size + 1 tokens starting at ``starts`` -> inputs and next-token targets."""
    w = torch.from_numpy(ids[starts[:, None] + np.arange(block_size + 1)].astype(np.int64))  # (N, T+1)
    return w[:, :-1], w[:, 1:]  # x (N, T), y (N, T)


class RandomWindows(IterableDataset):
    """Endless (x, y) batches of random windows: step s draws world_size * batch_size starts from
    rng([seed, s, 0]) (the trailing 0 keeps the single-process stream of earlier versions) and this rank
    takes its slice of batch_size."""

    def __init__(self, ids: np.ndarray, block_size: int, batch_size: int, seed: int, overfit: bool = False):
        self.ids, self.block_size, self.batch_size, self.seed = ids, block_size, batch_size, seed
        self.overfit = overfit  # debug: every step gets step 0's batch
        self.start_step, self.rank, self.world_size, self.length = 0, 0, 1, None

    def batch(self, step: int) -> tuple[torch.Tensor, torch.Tensor]:
        rng = np.random.default_rng([self.seed, 0 if self.overfit else step, 0])
        starts = rng.integers(0, len(self.ids) - self.block_size - 1, size=self.world_size * self.batch_size,
                              endpoint=True)  # (world_size * B,): the global batch
        mine = starts[self.rank * self.batch_size:(self.rank + 1) * self.batch_size]  # (B,): this rank's slice
        return windows_at(self.ids, mine, self.block_size)  # x (B, T), y (B, T)

    def __len__(self) -> int:
        """All steps of the run, counted from step 0, so a resumed epoch's batch index (restored by Lightning)
        and its length agree, and progress bars know the total."""
        if self.length is None:
            raise TypeError("RandomWindows is endless unless a length is set")
        return self.length

    def __iter__(self):  # steps start_step .. length - 1
        step = self.start_step
        while self.length is None or step < self.length:
            yield self.batch(step)
            step += 1


def fixed_windows(ids: np.ndarray, block_size: int, max_windows: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Evenly spaced, non-overlapping windows over the whole split (all of them if they fit)."""
    n_all = (len(ids) - 1) // block_size
    n = min(n_all, max_windows)
    starts = np.linspace(0, len(ids) - block_size - 1, n).astype(np.int64)
    return windows_at(ids, starts, block_size)


def unwritable(path: Path) -> str | None:
    """None when ``path`` is a writable dir or can be created; else why not (for one sentence)."""
    probe = path
    while not probe.exists():
        if probe.parent == probe:
            break
        probe = probe.parent
    if not probe.is_dir():
        return f"{probe} is not a directory"
    if not os.access(probe, os.W_OK | os.X_OK):
        return f"{probe} is not writable"
    return None


def default_mode(path: Path) -> None:
    """tempfile.mkdtemp makes 0700 dirs; a shared cache gets the mode the user's umask gives."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o777 & ~umask)


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
        if source not in SOURCES:
            raise ValueError(f"data.source={source!r} is not one of {', '.join(SOURCES)}.")
        if source != "random_tokens" and tokenizer not in TOKENIZERS:
            raise ValueError(f"data.tokenizer={tokenizer!r} is not one of {', '.join(TOKENIZERS)}.")
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
            if value < 1:
                raise ValueError(f"data.{key}={value!r} must be a positive integer.")
        self.source, self.path, self.name, self.config = source, path, name, config
        self.split, self.text_column = split, text_column
        self.tokenizer_kind, self.tokenizer_vocab, self.n_tokens = tokenizer, vocab_size, n_tokens
        self.train_fraction, self.block_size = train_fraction, block_size
        self.batch_size, self.val_batch_size, self.val_windows = batch_size, val_batch_size, val_windows
        self.cache_root, self.seed, self.overfit = Path(cache_dir).expanduser(), seed, overfit
        self.tokenizer = None
        self.train_ids = self.val_ids = None
        self.cache_path: Path | None = None

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

    def _cache_dir_for(self, text: str | None) -> Path:
        if self.source == "random_tokens":
            key = f"random_tokens-v{self.tokenizer_vocab}-n{self.n_tokens}-s{self.seed}"
        else:
            h = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
            tok = self.tokenizer_kind + (f"{self.tokenizer_vocab}" if self.tokenizer_kind == "bpe" else "")
            key = f"{self.source}-{h}-{tok}-f{self.train_fraction}"
        return self.cache_root / f"{key}-c{CACHE_VERSION}"

    def prepare_data(self) -> None:
        """Read the corpus, train the tokenizer on the train split, tokenize, cache. Idempotent.

        The cache is built in a private temporary dir and renamed into place, so processes that
        build the same cache at once (sweep jobs, DDP ranks) never see a half-written one.
        """
        if self.cache_path is not None and (self.cache_path / "meta.json").exists():
            return
        reason = unwritable(self.cache_root)
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
            out.parent.mkdir(parents=True, exist_ok=True)
            tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
            try:
                self._build_cache(text, tmp)
                default_mode(tmp)
                try:
                    tmp.rename(out)
                except OSError:  # another process finished first; its cache is the same
                    if not (out / "meta.json").exists():
                        raise
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        self.cache_path = out

    def _build_cache(self, text: str | None, out: Path) -> None:
        if self.source == "random_tokens":
            vocab = self.tokenizer_vocab
            rng = np.random.default_rng(self.seed)
            ids = rng.integers(0, vocab, size=self.n_tokens).astype(np.uint16 if vocab <= 65536 else np.int32)
            n = int(len(ids) * self.train_fraction)
            train, val = ids[:n], ids[n:]
        else:
            if not text.strip():
                raise ValueError(f"the corpus for data.source={self.source!r} is empty.")
            train_text, val_text = split_text(text, self.train_fraction)
            tok = train_tokenizer(self.tokenizer_kind, chunk_lines(train_text), self.tokenizer_vocab)
            vocab = tok.get_vocab_size()
            dtype = np.uint16 if vocab <= 65536 else np.int32
            train, val = tokenize_to_array(tok, train_text, dtype), tokenize_to_array(tok, val_text, dtype)
            tok.save(str(out / "tokenizer.json"))
        np.save(out / "train.npy", train)
        np.save(out / "val.npy", val)
        meta = {"source": self.source, "tokenizer": None if text is None else self.tokenizer_kind,
                "vocab_size": int(vocab), "train_tokens": int(len(train)), "val_tokens": int(len(val))}
        (out / "meta.json").write_text(json.dumps(meta, indent=2))

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

    def probe_windows(self, n: int) -> tuple[torch.Tensor, torch.Tensor]:
        """n of the fixed validation windows, spread evenly over the split: x, y (n, T)."""
        pick = torch.linspace(0, len(self.val_x) - 1, min(n, len(self.val_x))).long()  # (n,)
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


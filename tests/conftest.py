"""Fixtures only; helpers (the tiny recipe, run_train, compose_train) live in helpers.py."""

from pathlib import Path

import pytest

from helpers import TEXT


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text(TEXT * 12, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One data cache for the whole session, so each corpus is tokenized once."""
    return tmp_path_factory.mktemp("cache")

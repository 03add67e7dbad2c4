"""Fixtures, and the leak-alarm audit line at the end of a session; helpers (the tiny recipe, run_train,
compose_train) live in helpers.py."""

import os
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from helpers import TEXT

# `make mutate` sets HYPOTHESIS_PROFILE=mutation: a failing example is enough there, shrinking it only costs time.
settings.register_profile("mutation", phases=[Phase.explicit, Phase.reuse, Phase.generate], deadline=None)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


@pytest.fixture(scope="session")
def corpus_file(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("corpus") / "tiny.txt"
    path.write_text(TEXT * 12, encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def cache_dir(tmp_path_factory) -> Path:
    """One data cache for the whole session, so each corpus is tokenized once."""
    return tmp_path_factory.mktemp("cache")


@pytest.fixture
def corpus_args(corpus_file, cache_dir) -> list[str]:
    """train.py overrides that read the test corpus through the session's cache."""
    return ["corpus=text_file", f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}"]


def pytest_terminal_summary(terminalreporter):
    """How many causal train.py runs the suite made and how many the leak alarm flagged (tests/helpers.py)."""
    from helpers import ALARM_AUDIT

    if ALARM_AUDIT["causal runs"]:
        terminalreporter.write_line(f"leak alarm: {ALARM_AUDIT['causal runs']} causal runs of train.py, "
                                    f"{ALARM_AUDIT['false alarms']} false alarms")

"""Every committed report that keeps its runs' records (its report module declares ``KEEP``) regenerates from them,
byte for byte, on a fresh clone: docs/experiments/<name>/runs.json.gz -> README.md, headline.json and the figures."""

import importlib

import pytest

from tinygpt.analysis import records
from tinygpt.analysis.templates import DOCS
from tinygpt.experiments import report
from tinygpt.experiments.registry import experiments


def keeping() -> list[str]:
    return [name for name in experiments()
            if getattr(importlib.import_module(f"tinygpt.experiments.{name}.report"), "KEEP", None) is not None]


def test_a_report_that_declares_what_it_reads_has_its_records_committed():
    assert keeping(), "no report keeps its runs' records"
    missing = [name for name in keeping() if not (DOCS / name / records.FILE).is_file()]
    assert not missing, f"no docs/experiments/<name>/{records.FILE} for {missing}"


@pytest.mark.parametrize("name", keeping())
def test_the_committed_report_regenerates_byte_identically_from_its_records(name, tmp_path):
    committed = DOCS / name
    report.write(name, [committed / records.FILE], tmp_path)
    made = sorted(p.name for p in tmp_path.iterdir())
    for file in made:
        assert (tmp_path / file).read_bytes() == (committed / file).read_bytes(), file
    assert {"README.md", "headline.json"} <= set(made)

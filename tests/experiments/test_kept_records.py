"""Every committed report that keeps its runs' records (its report module declares ``KEEP``) regenerates from them,
byte for byte, on a fresh clone: docs/experiments/<name>/runs.json.gz -> README.md, headline.json and the figures."""

import importlib
import os
from pathlib import Path

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


def located(data: bytes, out) -> bytes:
    """A file written into ``out`` as if it were written into docs/experiments/<name>/: the two things that depend
    on where a report is written, the glossary link (written relative to ``out``) and the explorer pages' plotly.js
    (a copy beside them outside docs/, the shared one at docs/experiments/ inside), put back as the committed report
    has them. Nothing else is touched."""
    glossary = os.path.relpath(DOCS / "GLOSSARY.md", out).encode()
    return data.replace(b"](" + glossary + b")", b"](../GLOSSARY.md)").replace(
        b'src="plotly.min.js"', b'src="../../plotly.min.js"')


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
@pytest.mark.parametrize("name", keeping())
def test_the_committed_report_regenerates_byte_identically_from_its_records(name, tmp_path):
    committed = DOCS / name
    report.write(name, [committed / records.FILE], tmp_path)
    made = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file())
    made = [p for p in made if p != Path("explorers/plotly.min.js")]  # a report outside docs/ keeps its own copy
    for file in made:
        assert located((tmp_path / file).read_bytes(), tmp_path) == (committed / file).read_bytes(), file
    assert {"README.md", "headline.json"} <= {str(p) for p in made}
    kept = {p.relative_to(committed) for p in committed.rglob("*") if p.is_file()}
    designs = {p for p in kept if p.name.startswith("DESIGN")}  # written by hand, before the runs
    inputs = {Path(p) for p in getattr(importlib.import_module(f"tinygpt.experiments.{name}.report"), "INPUTS", ())}
    assert kept - {Path(records.FILE)} - designs - inputs - set(made) == set()  # every other committed file is
    # regenerated (a report's INPUTS, such as Experiment 2's init_draws.json, are read by it, not written)

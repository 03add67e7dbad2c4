"""The experiments' front page: README.md's section and docs/experiments/README.md are written from the reports'
headlines, never by hand."""

from pathlib import Path

from tinygpt.analysis.templates import DOCS
from tinygpt.experiments import index
from tinygpt.experiments.registry import experiments

ROOT = DOCS.parents[1]


def headline(name="demo", answer="It falls to 0.047."):
    return index.Headline(name, "A demo", "Does it fall?", answer, "curves.png", [("1. it falls", "holds")],
                          "**Confirmatory.**")


def test_a_headline_round_trips_and_the_pages_say_what_it_says(tmp_path):
    (tmp_path / "docs" / "demo").mkdir(parents=True)
    headline().write(tmp_path / "docs" / "demo")
    assert index.read(tmp_path / "docs" / "demo") == headline()
    readme = tmp_path / "README.md"
    readme.write_text(f"# x\n\n## Experiments\n\n{index.START}\nold text\n{index.END}\n\n## Layout\n")
    index.update(tmp_path / "docs", readme)
    text = readme.read_text()
    assert "old text" not in text and text.startswith("# x\n\n## Experiments\n\n") and text.endswith("## Layout\n")
    assert ("1. **A demo** Does it fall? It falls to 0.047. `python train.py -m experiment=demo` "
            "([report](docs/experiments/demo/README.md))<br><img src=\"docs/experiments/demo/curves.png\"") in text
    page = (tmp_path / "docs" / "README.md").read_text()
    assert "## A demo\n\nDoes it fall? It falls to 0.047.\n\n**Confirmatory.**\n\n| prediction | verdict |" in page
    assert "| 1. it falls | holds |" in page


def test_a_readme_without_the_markers_is_left_alone(tmp_path):
    (tmp_path / "docs").mkdir()
    readme = tmp_path / "README.md"
    readme.write_text("# mine\n")
    index.update(tmp_path / "docs", readme)
    assert readme.read_text() == "# mine\n"


def test_the_committed_pages_are_what_the_committed_headlines_write():
    """Nobody edits a number into README.md's experiments or the index: both equal what the headlines write."""
    found = index.headlines(DOCS)
    assert [h.name for h in found] == list(experiments())  # every experiment's committed report, in its record's order
    readme = (ROOT / "README.md").read_text()
    assert index.readme_block(found) in readme
    assert (DOCS / "README.md").read_text() == index.index_page(found)
    for h in found:
        assert (DOCS / h.name / h.figure).is_file() and Path(DOCS / h.name / "README.md").is_file()

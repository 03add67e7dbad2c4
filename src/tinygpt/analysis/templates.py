"""Report prose kept as Markdown beside the code that fills it: ``experiments/<experiment>/report.md`` holds named
blocks, each opened by a line ``<!-- block: NAME -->``, with ``{placeholders}`` that the report fills from the runs'
numbers (``str.format``; a literal brace is doubled). A number measured by the runs is always a placeholder; the
blocks' own figures are the literature's, cited."""

from __future__ import annotations

import re
import subprocess
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path

DOCS = Path(__file__).resolve().parents[3] / "docs" / "experiments"  # the committed reports (and the GLOSSARY.md
# their prose links to), in a source checkout

BLOCK = re.compile(r"^<!-- block: (\w+) -->\n", re.M)


def design_commit(design: Path, *how: str) -> str:
    """'commit abc1234': the commit that added ``design`` (a DESIGN.md, committed before its runs), or the first that
    git log finds with the options ``how`` (e.g. ``-S<its title>`` for a design rewritten in place); 'its first
    commit' where the checkout has no git."""
    root = DOCS.parents[1]
    try:
        out = subprocess.run(["git", "log", "--format=%h", *(how or ("--diff-filter=A",)), "--",
                              str(design.relative_to(root))], cwd=root, capture_output=True, text=True, timeout=10,
                             check=False).stdout.split()
    except (OSError, subprocess.SubprocessError):
        out = []
    return f"commit {out[-1]}" if out else "its first commit"


@cache
def blocks(experiment: str) -> dict[str, str]:
    """The named blocks of ``experiments/<experiment>/report.md``, beside the experiment's package wherever it is
    found (each without its trailing blank lines)."""
    import importlib.util

    spec = importlib.util.find_spec(f"tinygpt.experiments.{experiment}")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"no experiment package tinygpt.experiments.{experiment} holds a report.md.")
    text = (Path(spec.submodule_search_locations[0]) / "report.md").read_text(encoding="utf-8")
    parts = BLOCK.split(text)[1:]  # name, body, name, body, ...
    return {name: body.rstrip("\n") for name, body in zip(parts[::2], parts[1::2], strict=True)}


def prose(experiment: str, name: str, **values) -> str:
    """Block ``name`` of ``experiments/<experiment>/report.md`` with its placeholders filled; a missing value is a
    KeyError."""
    return blocks(experiment)[name].format_map(values)


def plural(n: int, word: str) -> str:
    """'1 head', '2 heads'."""
    return f"{n} {word}" + ("" if n == 1 else "s")


@dataclass
class Report:
    """The report's parts as the sections fill them: the body, the findings list at the top, what changed since the
    last version (computed lines, after the template's), the comparison with the published cases and the limits."""

    sections: list[str] = field(default_factory=list)
    changes: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    comparison: list[str] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)

"""The front door and the docs' index link only to what exists, and the composition shown in
docs/how-a-run-works.md is what `train.py --info defaults` prints."""

import re
import subprocess
import sys

import pytest

from helpers import ROOT

PAGES = ["README.md", "docs/README.md", "docs/how-a-run-works.md", "docs/install.md", "docs/layout.md"]


@pytest.mark.parametrize("page", PAGES)
def test_every_relative_link_resolves(page):
    path = ROOT / page
    links = re.findall(r"\]\(([^)\s#]+)(?:#[^)]*)?\)", path.read_text())
    local = [link for link in links if not link.startswith(("http://", "https://", "mailto:"))]
    assert local, page
    missing = [link for link in local if not (path.parent / link).exists()]
    assert not missing, missing


def test_the_readme_is_a_short_front_door():
    """At most 100 lines that a person writes: the experiments' block, which scripts/report.py writes from the
    headlines (one entry an experiment), is not counted."""
    from tinygpt.experiments.index import END, START

    text = (ROOT / "README.md").read_text()
    written = text[:text.index(START)] + text[text.index(END) + len(END):]
    assert len(written.splitlines()) <= 100, len(written.splitlines())
    lines = text.splitlines()
    assert [line for line in lines if line.startswith("make ")][:2] == [
        "make train   # creates .venv, installs (torch==2.13.0 first), runs `python train.py` (about 2 minutes on 2 "
        "cores)",
        "make test    # creates .venv, installs, runs the tests (unit, in-process runs, a real train.py run): minutes"]


def test_the_composition_on_the_run_page_is_train_pys():
    """Each row of the page's defaults table is a row `python train.py --info defaults` prints."""
    page = (ROOT / "docs" / "how-a-run-works.md").read_text()
    shown = [re.sub(r"\s+", " ", row.split("<-")[0]).strip() for row in re.findall(r"^\| .*\|.*$", page, re.M)
             if "Config path" not in row]
    out = subprocess.run([sys.executable, "train.py", "--info", "defaults"], cwd=ROOT, capture_output=True,
                         text=True, timeout=120)
    printed = {re.sub(r"\s+", " ", line).strip() for line in out.stdout.splitlines()}
    assert out.returncode == 0 and shown and all(row in printed for row in shown), (shown, out.stdout[-3000:])

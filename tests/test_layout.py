"""The house's layout: the layers import one way (import-linter's contract in pyproject.toml), scripts/ holds only
thin CLIs over the package, and docs/layout.md names every module, each a path that exists."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import ROOT

LINT = shutil.which("lint-imports") or str(Path(sys.executable).parent / "lint-imports")


def lint(config: Path) -> subprocess.CompletedProcess:
    return subprocess.run([LINT, "--config", str(config), "--no-cache"], cwd=ROOT / "src", capture_output=True,
                          text=True, timeout=120)


def test_the_layers_import_one_way_down():
    proc = lint(ROOT / "pyproject.toml")
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "1 kept, 0 broken" in proc.stdout


def test_the_contract_can_fail(tmp_path):
    """The same tool with the layers upside down reports the real imports as broken (so the check above is live)."""
    config = tmp_path / "upside_down.toml"
    config.write_text('[tool.importlinter]\nroot_package = "tinygpt"\n\n[[tool.importlinter.contracts]]\n'
                      'name = "upside down"\ntype = "layers"\nlayers = ["tinygpt.runtime", "tinygpt.model"]\n')
    proc = lint(config)
    assert proc.returncode != 0 and "BROKEN" in proc.stdout and "tinygpt.model" in proc.stdout


def test_the_code_passes_the_projects_lint_rules():
    """ruff with pyproject.toml's rules (120 columns, pyflakes, bugbear) on everything the project ships and tests,
    the experiment template too: the same command as make lint. Long lines had piled up in 16 files while nothing
    ran it."""
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "src", "tests", "scripts", "templates",
                           "train.py"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]


def test_the_lint_rules_can_fail(tmp_path):
    """The same command on a file with a line of 121 columns and a loop variable a closure does not bind fails on
    both (so the check above is live)."""
    bad = tmp_path / "bad.py"
    bad.write_text("x = '" + "a" * 115 + "'\nfns = []\nfor i in range(3):\n    fns.append(lambda: i)\n")
    proc = subprocess.run([sys.executable, "-m", "ruff", "check", "--no-cache", "--config",
                           str(ROOT / "pyproject.toml"), str(bad)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "E501" in proc.stdout and "B023" in proc.stdout, proc.stdout + proc.stderr


@pytest.mark.parametrize("script", sorted(p.name for p in (ROOT / "scripts").glob("*.py")))
def test_scripts_are_thin_clis(script):
    """Each script imports its main from the package and runs it: no logic, no sys.path tricks."""
    text = (ROOT / "scripts" / script).read_text()
    code = [line for line in text.splitlines() if line.strip() and not line.startswith(('"""', "#"))]
    assert len(code) <= 5, code
    assert re.search(r"^from tinygpt\.[\w.]+ import main$", text, re.M) and "sys.path" not in text


def layout_paths() -> list[str]:
    """The paths docs/layout.md's table names: each row's path, and the files its description names (``x.py``,
    ``dir/``), taken relative to that row's dir."""
    section = (ROOT / "docs" / "layout.md").read_text()
    paths = []
    for row in re.findall(r"^\| `([\w./-]+)` \| (.*) \|$", section, re.M):
        where, what = row
        paths.append(where)
        base = where if where.endswith("/") else ""
        paths += [base + name for name in re.findall(r"`([\w-]+(?:\.\w+|/))`", what)]
    return paths


def test_the_layout_page_names_paths_that_exist():
    paths = layout_paths()
    assert len(paths) >= 40, paths  # the table really lists the layout
    missing = [p for p in paths if not (ROOT / p).exists()]
    assert not missing, missing


def test_every_package_module_is_named_on_the_layout_page():
    named = set(layout_paths())
    modules = [p.relative_to(ROOT).as_posix() for p in (ROOT / "src" / "tinygpt").rglob("*.py")
               if p.name != "__init__.py"]
    unnamed = [m for m in modules if m not in named]
    assert not unnamed, unnamed

"""The built wheel holds everything the installed commands need: installed from it into a clean venv (the
dependencies borrowed from this one, so nothing is downloaded), each console command answers --help and
tinygpt-report writes a report of a synthetic sweep, away from any clone (no configs/, no docs/)."""

import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

from helpers import ROOT
from tests.experiments.test_report_cli import causal_sweep
from tinygpt.experiments.registry import experiments

pytestmark = pytest.mark.slow
COMMANDS = ("tinygpt-sample", "tinygpt-attention", "tinygpt-export-hf", "tinygpt-report", "tinygpt-bench",
            "tinygpt-verify")


def run(*cmd, cwd=None, timeout=300):
    return subprocess.run([str(c) for c in cmd], cwd=cwd, capture_output=True, text=True, timeout=timeout)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """(the wheel, the venv's bin dir): the package built as a wheel and installed alone into a fresh venv whose
    dependencies are this venv's site-packages (a .pth line: a plain path entry, so this venv's editable install
    of tinygpt is not seen there)."""
    tmp = tmp_path_factory.mktemp("wheel")
    source = tmp / "source"  # a copy: building in place would leave build/ in the checkout
    shutil.copytree(ROOT / "src", source / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    built = run(sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", tmp / "dist",
                source, timeout=600)
    assert built.returncode == 0, built.stderr[-3000:]
    wheel = next((tmp / "dist").glob("tinygpt-*.whl"))
    venv = tmp / "venv"
    assert run(sys.executable, "-m", "venv", "--without-pip", venv).returncode == 0
    py = venv / "bin" / "python"
    site = Path(run(py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip())
    (site / "deps.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    done = run(sys.executable, "-m", "pip", "--python", py, "install", "--no-deps", "-q", wheel, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return wheel, venv / "bin"


def test_the_wheel_holds_every_module_and_every_report_template(installed):
    wheel, _ = installed
    names = set(zipfile.ZipFile(wheel).namelist())
    src = ROOT / "src"
    modules = {p.relative_to(src).as_posix() for p in src.rglob("*.py")}
    templates = {p.relative_to(src).as_posix() for p in (src / "tinygpt").rglob("*.md")}
    assert templates >= {f"tinygpt/experiments/{n}/report.md" for n in experiments()}
    assert modules - names == set() and templates - names == set()


def test_the_installed_package_is_the_wheels(installed, tmp_path):
    _, bin_dir = installed
    where = run(bin_dir / "python", "-c", "import tinygpt; print(tinygpt.__file__)", cwd=tmp_path)
    assert where.returncode == 0 and str(bin_dir.parent) in where.stdout, where.stdout + where.stderr[-2000:]


@pytest.mark.parametrize("command", COMMANDS)
def test_each_installed_command_answers_help(installed, tmp_path, command):
    _, bin_dir = installed
    out = run(bin_dir / command, "--help", cwd=tmp_path)
    assert out.returncode == 0 and out.stdout.startswith("usage:"), out.stdout[-1000:] + out.stderr[-2000:]


def test_the_installed_report_command_writes_a_report_away_from_a_clone(installed, tmp_path):
    _, bin_dir = installed
    sweep = causal_sweep(tmp_path / "sweep")
    for summary in sweep.rglob("summary.json"):  # a real run of experiment=causal_mask carries every prediction
        summary.write_text(summary.read_text().replace('"drop_to": 0.25',
                                                      '"drop_to": 0.25, "premise_band": [-0.05, 0.05]'))
    out = run(bin_dir / "tinygpt-report", "causal_mask", sweep, "--out", tmp_path / "report", cwd=tmp_path)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-3000:]
    text = (tmp_path / "report" / "README.md").read_text()
    assert "6 runs" in text and "{" not in text.split("\n", 1)[0]

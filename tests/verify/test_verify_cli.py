"""tinygpt-verify from the command line: a table or JSON, exit 0 / 1 / 2, every bad argument one line."""

import json
import re
import subprocess
import sys
import textwrap

import pytest

from tinygpt.verify import cli

USER_CODE = textwrap.dedent('''
    import math
    import torch
    from torch import nn

    def attention(q, k, v, mask):
        s = (q * (1 / math.sqrt(q.shape[-1]))) @ k.transpose(-2, -1)
        s = s.masked_fill(~mask, float("-inf")).masked_fill(~mask.any(-1, keepdim=True), 0.0)  # a row with no key: 0
        return torch.softmax(s, dim=-1).masked_fill(~mask, 0.0) @ v

    def not_attention(q, k):
        return q

    class MyAttention(nn.Module):
        def __init__(self, n_embd, n_head, off_by_one=False):
            super().__init__()
            assert n_embd % n_head == 0
            self.h, self.off = n_head, off_by_one
            self.qkv, self.out = nn.Linear(n_embd, 3 * n_embd), nn.Linear(n_embd, n_embd)

        def forward(self, x):
            B, T, C = x.shape
            q, k, v = (t.view(B, T, self.h, -1).transpose(1, 2) for t in self.qkv(x).split(C, 2))
            hidden = torch.ones(T, T, dtype=torch.bool).triu(2 if self.off else 1)
            return self.out(attention(q, k, v, ~hidden).transpose(1, 2).reshape(B, T, C))

    def make():
        return MyAttention(32, 4)
''')


@pytest.fixture
def user(tmp_path, monkeypatch):
    (tmp_path / "user_attn.py").write_text(USER_CODE)
    (tmp_path / "args.yaml").write_text("n_embd: 32\nn_head: 4\n")
    (tmp_path / "raises.py").write_text("raise RuntimeError('no GPU here')\n")
    (tmp_path / "needs_dep.py").write_text("import not_installed_anywhere\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delitem(sys.modules, "user_attn", raising=False)
    return tmp_path


def test_a_correct_module_passes_with_a_table(user, capsys):
    assert cli.main(["user_attn:MyAttention", "--arg", "n_embd=32", "--arg", "n_head=4"]) == 0
    out = capsys.readouterr().out
    assert "causality" in out and "7 of 7 checks passed" in out


@pytest.mark.parametrize("target", ["user_attn:make", "user_attn.py:attention",
                                    "user_attn:MyAttention --args args.yaml"])
def test_a_factory_a_file_and_a_yaml_of_arguments(user, capsys, target):
    """Each way to name a target loads and passes (the whole battery is the test above's; a short one here)."""
    assert cli.main([*target.split(), "--max-len", "16"]) == 0, capsys.readouterr()


def test_a_failure_exits_1_and_json_says_where(user, capsys):
    code = cli.main(["user_attn:MyAttention", "--arg", "n_embd=32", "--arg", "n_head=4", "--arg", "off_by_one=true",
                     "--json"])
    report = json.loads(capsys.readouterr().out)
    assert code == 1 and report["passed"] is False
    causality = next(r for r in report["results"] if r["check"] == "causality")
    assert causality["verdict"] == "fail" and "position 0 sees position 1" in causality["why"]


@pytest.mark.parametrize("argv, message", [
    (["user_attn"], "target 'user_attn' must be module:name, e.g. my_pkg.attn:MyAttention"),
    (["no_such_pkg.attn:X"], "target 'no_such_pkg.attn:X': cannot import no_such_pkg.attn (No module named "
                             "'no_such_pkg'); run from the folder that holds it, or install it."),
    (["user_attn:MyAtention"], "target 'user_attn:MyAtention': user_attn has no MyAtention; did you mean MyAttention?"),
    (["raises:X"], "target 'raises:X': importing raises raised RuntimeError: no GPU here"),
    (["missing.py:X"], "target 'missing.py:X': there is no file missing.py."),
    (["user_attn:MyAttention", "--arg", "n_embd=32"], "MyAttention(n_embd=32) raised TypeError: "),
    (["user_attn:MyAttention", "--arg", "4=n"], "--arg '4=n' must be key=value with key a Python name"),
    (["user_attn:MyAttention", "--args", "nope.yaml"], "--args nope.yaml: "),
    (["user_attn:make", "--width", "7"],
     "MyAttention's forward with x of shape (2, 1, 7) in float64 raised RuntimeError: mat1 and mat2 shapes cannot be "
     "multiplied (2x7 and 32x96) (is its input width 7? give --width)."),
    (["user_attn:make", "--padding", "mask"], "MyAttention.forward has no keyword mask (it takes x)"),
    (["user_attn:make", "--kv-cache", "step"], "MyAttention has no method step"),
    (["user_attn:make", "--only", "formula"], "no check 'formula' at the module level; its checks are: deterministic, "
                                              "causality, "),
    (["user_attn:not_attention"], "the function called as f(q, k, v, mask) with q, k, v (1, 1, 2, 4) and mask (2, 2) "
                                  "raised TypeError: "),
    (["user_attn:math"], "math is a Python module, not an attention"),
    (["user_attn:make", "--max-len", "1"], "max_len=1 must be at least 2"),
    (["user_attn:make", "--scale", "-1"], "scale=-1.0 must be a positive number"),
    (["user_attn:make", "--window", "0"], "window=0 must be a positive integer"),
    (["user_attn:make", "--positions", "learned"], "argument --positions: invalid choice: 'learned'"),
    (["user_attn:attention", "--positions", "rope"], "positions=rope is declared for a module; a function is given q "
                                                     "and k after their rotation"),
    (["user_attn:make", "--level", "modul"], "argument --level: invalid choice: 'modul'"),
    (["user_attn::make"], "target 'user_attn::make' must be module:name"),
    (["needs_dep.py:X"], "target 'needs_dep.py:X': importing needs_dep.py raised ModuleNotFoundError: No module named "
                         "'not_installed_anywhere' (a module it imports is not installed)."),
    (["user_attn:attention", "--padding", "mask"], "padding names a module's interface; a function's padding is in "
                                                   "the mask it is given"),
    (["user_attn:MyAttention", "--arg", "n_embd=32", "--arg", "n_head=5"],
     "MyAttention(n_embd=32, n_head=5) raised AssertionError."),
    (["torch.nn:MultiheadAttention", "--arg", "embed_dim=16", "--arg", "num_heads=4", "--arg", "batch_first=true"],
     "missing 2 required positional arguments: 'key' and 'value'; the checks call forward(x) with one tensor: wrap "
     "a module that takes query, key and value (nn.MultiheadAttention) in one whose forward(x) calls it as "
     "self-attention, e.g. module(x, x, x, attn_mask=mask)[0]."),
])
def test_a_bad_argument_is_one_line_and_exit_2(user, capsys, argv, message):
    try:
        code = cli.main(argv)
    except SystemExit as done:  # argparse's own refusals (an unknown choice) exit from the parser
        code = done.code
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(lines) == 1 and message in lines[0], err
    assert "Traceback" not in err


@pytest.mark.slow
def test_python_m_tinygpt_verify_runs_as_a_command(user):
    out = subprocess.run([sys.executable, "-m", "tinygpt.verify", "user_attn.py:attention"], capture_output=True,
                         text=True, cwd=user, timeout=300)
    assert out.returncode == 0 and "7 of 7 checks passed" in out.stdout, out.stdout + out.stderr


def test_a_file_that_imports_its_sibling_runs_from_another_folder(user, capsys):
    """As Python makes a script's folder importable, the target file's folder is (the first version said "not
    installed" for a sibling import unless run from that folder)."""
    (user / "pkg").mkdir()
    (user / "pkg" / "sibling_parts.py").write_text(USER_CODE)  # a name no other test module has
    (user / "pkg" / "model.py").write_text("from sibling_parts import MyAttention\n\ndef make():\n    return "
                                          "MyAttention(32, 4)\n")
    assert cli.main(["pkg/model.py:make", "--only", "batch"]) == 0, capsys.readouterr()


def test_a_bad_option_is_refused_before_torch_is_imported():
    """The time from a typo to its one line: the options are checked before torch (about 1.5 s) is imported."""
    code = ("import sys; from tinygpt.verify.cli import main; rc = main(['x:y', '--window', '0']); "
            "print(rc, 'torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.split() == ["2", "False"], out.stdout + out.stderr
    assert "window=0 must be a positive integer" in out.stderr, out.stderr


def test_the_command_runs_with_torch_alone(user, capsys, monkeypatch):
    """Without rich and PyYAML (a venv holding torch alone): a plain table, and --arg values read as literals."""
    for name in ("rich", "rich.console", "rich.table", "yaml"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ImportError
    assert cli.main(["user_attn:MyAttention", "--arg", "n_embd=32", "--arg", "n_head=4", "--only", "batch"]) == 0
    out = capsys.readouterr().out
    assert "batch" in out and "1 of 1 checks passed" in out, out
    assert cli.constructor_args(["n=4", "flag=false", "fill=-1e4", "name=x"], None) == {
        "n": 4, "flag": False, "fill": -1e4, "name": "x"}


def test_an_argument_yaml_reads_as_text_is_read_as_a_number():
    assert cli.constructor_args(["fill=-1e4", "low=-inf", "n=4", "name=x", "flag=false"], None) == {
        "fill": -1e4, "low": float("-inf"), "n": 4, "name": "x", "flag": False}


def test_a_long_max_len_says_its_cost_before_it_starts(user, capsys, monkeypatch):
    """From --max-len 256 on (here from 8, to keep it quick), causality times one pass at the longest length and
    says on stderr what the whole check will cost, before it runs."""
    from tinygpt.verify import module_checks

    monkeypatch.setattr(module_checks, "ANNOUNCE_FROM", 8)
    assert cli.main(["user_attn:make", "--only", "causality", "--max-len", "12"]) == 0
    err = capsys.readouterr().err
    assert re.search(r"^tinygpt-verify: causality up to T=12: about \d+ s \(\d+ lengths and modes, every cut; "
                     r"--max-len sets the longest\)", err, re.M), err


def test_a_long_check_says_how_far_it_is_on_stderr(monkeypatch):
    """A line once a check has run 3 s, then at most one each 5 s; a notice at once; the clock restarts per check."""
    import io

    clock = iter([1000.0, 1001.0, 1004.0, 1006.0, 1009.5, 1010.0, 1010.5])  # the start, each note's and ended's
    monkeypatch.setattr(cli.time, "perf_counter", lambda: next(clock))
    out = io.StringIO()
    progress = cli.Progress(out)
    for message in ("at 1 s", "at 4 s", "at 6 s", "at 9.5 s"):
        progress.note(message)
    progress.ended(None, 10.0)
    progress.note("a notice", always=True)
    assert out.getvalue().splitlines() == ["tinygpt-verify: at 4 s (4 s)", "tinygpt-verify: at 9.5 s (10 s)",
                                           "tinygpt-verify: a notice (0 s)"]


BLOCKER = '''
import importlib.abc, sys
class Blocked(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {name!r} (blocked: a venv holding torch alone)")
sys.meta_path.insert(0, Blocked())
from tinygpt.verify.cli import main
sys.exit(main(sys.argv[1:]))
'''


@pytest.mark.slow  # a process of its own
def test_the_command_needs_nothing_of_the_training_stack(user):
    """Every distribution pyproject.toml depends on but torch, and PyYAML, made unimportable (what `pip install
    --no-deps tinygpt` beside torch gives): the command still runs the whole battery on a module."""
    import tomllib
    from importlib.metadata import packages_distributions
    from pathlib import Path

    pyproject = tomllib.loads((Path(cli.__file__).parents[3] / "pyproject.toml").read_text())
    wanted = {re.split(r"[<>=!~ \[;]", d, maxsplit=1)[0].lower().replace("_", "-")
              for d in pyproject["project"]["dependencies"]} - {"torch"} | {"pyyaml"}
    blocked = sorted(name for name, dists in packages_distributions().items()
                     if any(d.lower().replace("_", "-") in wanted for d in dists))
    assert {"lightning", "hydra", "wandb", "numpy", "rich", "yaml"} <= set(blocked), blocked
    out = subprocess.run([sys.executable, "-c", f"BLOCKED = {set(blocked)!r}\n" + BLOCKER, "user_attn.py:make"],
                         capture_output=True, text=True, cwd=user, timeout=600)
    assert out.returncode == 0 and "7 of 7 checks passed" in out.stdout, out.stdout + out.stderr

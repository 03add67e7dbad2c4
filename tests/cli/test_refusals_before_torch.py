"""The CLIs refuse a wrong --ckpt (missing, a dir without a checkpoint, a file that is no torch archive) before
importing torch: the retry had measured 7-9 s for each (train.py took 1 s for the same mistake)."""

import os
import subprocess
import sys

import pytest

from helpers import ROOT


@pytest.mark.parametrize("script, extra", [("sample.py", []), ("attention.py", ["--text", "hi"]),
                                           ("export_hf.py", ["--out", "{tmp}/exported"])])
@pytest.mark.parametrize("what", ["missing", "empty dir", "not an archive"])
def test_a_wrong_ckpt_is_one_line_before_torch(tmp_path, script, extra, what):
    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    ckpt = {"missing": tmp_path / "nothing", "empty dir": tmp_path / "empty", "not an archive": tmp_path / "notes.ckpt"}
    args = [a.format(tmp=tmp_path) for a in extra]
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / script), "--ckpt",
                          str(ckpt[what]), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "WANDB_MODE": "offline"})
    errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    assert out.returncode == 2 and len(errors) == 1 and errors[0].startswith("error: "), out.stderr[-2000:]
    said = {"missing": "does not exist", "empty dir": "holds no checkpoint", "not an archive": "not a torch archive"}
    assert said[what] in errors[0], errors[0]
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "lightning" not in imported
    assert not (tmp_path / "exported").exists()


@pytest.mark.parametrize("source", [["--ckpt", "{tmp}/nothing"], ["--init_from", "gpt2"]])
def test_an_empty_text_for_the_attention_page_is_one_line_before_torch(tmp_path, source):
    """--text "" was refused only after the model had loaded (5 s): now before torch, whichever model."""
    args = [a.format(tmp=tmp_path) for a in source]
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / "attention.py"), *args,
                          "--text", ""], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    assert out.returncode == 2 and errors == ["error: attention: --text is empty; give the text to look at."]
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported

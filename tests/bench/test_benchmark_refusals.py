"""Each refusal the benchmark times (docs/benchmarks.md, "From a typo to its one-line error") is what its row claims:
exit status 2, one line, torch never imported, nothing written, on the files the benchmark makes for it."""

import os
import subprocess
import sys

import pytest

from tinygpt.bench.programs import REFUSALS, ROOT, SCRIPT_REFUSALS, refusal_files, script_command

ISSUE_59 = [o for o in REFUSALS if any(k in o for k in ("bpe_vocab_size", "n_tokens", "five.txt", "notes.zip",
                                                         "killed", "early", "lst", "dropout"))]


@pytest.mark.slow
@pytest.mark.parametrize("refusal", [*ISSUE_59, *SCRIPT_REFUSALS])
def test_each_refusal_the_benchmark_times_is_one_line_before_torch(tmp_path, refusal):
    refusal_files(tmp_path)
    before = sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*"))
    if refusal in SCRIPT_REFUSALS:
        argv, env = script_command(refusal)
    else:
        argv, env = [sys.executable, str(ROOT / "train.py"), *refusal.split()], {}
    out = subprocess.run([argv[0], "-X", "importtime", *argv[1:]], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "WANDB_MODE": "offline", "HF_HUB_CACHE": str(tmp_path / "hf"),
                                           **env})
    errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    assert out.returncode == 2 and len(errors) == 1 and errors[0].startswith("error: "), out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "lightning" not in imported, errors[0]
    assert sorted(p.relative_to(tmp_path) for p in tmp_path.rglob("*")) == before


def test_a_checkpoint_whose_weights_do_not_fit_its_settings_is_one_line_in_sample(tmp_path, capsys):
    """text.ckpt (train.py's layout, no weights) with a prompt its tokenizer encodes: sample.py had printed a 13-line
    RuntimeError, exit 1, where attention.py and export_hf.py say one line; now the same line, exit 2."""
    from tinygpt.cli.sample import main

    refusal_files(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(["--ckpt", str(tmp_path / "text.ckpt"), "--prompt", "hello"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1
    assert "text.ckpt holds weights that do not fit its own model settings (" in err[0]

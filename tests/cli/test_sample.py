"""What scripts/sample.py says about a --ckpt that is not a run with a checkpoint, a text prompt or an id outside
the vocabulary for a checkpoint without a tokenizer, a device this machine lacks, --top-k, and a prompt longer than
the context window."""

import json

import pytest
import torch

from helpers import write_checkpoint
from tinygpt.cli.sample import main, prompt_ids
from tinygpt.runtime.run_dirs import checkpoint_in


@pytest.fixture(scope="module")
def token_id_ckpt(tmp_path_factory):
    """A random token-id checkpoint (vocabulary 64, context 16) at step 60."""
    return write_checkpoint(tmp_path_factory.mktemp("sample") / "run" / "checkpoints" / "last.ckpt")


def sample(capsys, *args) -> tuple[int, str, str]:
    """scripts/sample.py ARGS in-process: (exit status, stdout, stderr)."""
    try:
        code = main(["--device", "cpu", "--max-new-tokens", "2", *map(str, args)])
    except SystemExit as exit_:
        code = exit_.code
    out, err = capsys.readouterr()
    return code, out, err


def error_line(err: str) -> str:
    """The one line a refused argument prints (argparse's usage lines are not printed)."""
    assert "Traceback" not in err and err.count("\n") == 1, err
    return err.strip()


def test_a_sweep_dir_is_named_and_one_job_suggested(tmp_path):
    (tmp_path / "multirun.yaml").write_text("{}")
    for job in ("0", "1"):
        (tmp_path / job / "checkpoints").mkdir(parents=True)
        (tmp_path / job / "checkpoints" / "last.ckpt").write_bytes(b"x")
    with pytest.raises(FileNotFoundError, match=r"is a sweep dir \(2 jobs with a checkpoint\); pass one job's dir, "
                                                r"e.g. --ckpt .*/0\."):
        checkpoint_in(tmp_path)
    assert checkpoint_in(tmp_path / "1") == tmp_path / "1" / "checkpoints" / "last.ckpt"


def test_a_run_that_stopped_before_its_first_checkpoint_says_so(tmp_path):
    (tmp_path / "summary.json").write_text(json.dumps({"status": "diverged", "steps": 3}))
    with pytest.raises(FileNotFoundError, match="run dir without a checkpoint \\(status 'diverged' at step 3"):
        checkpoint_in(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no checkpoint"):
        checkpoint_in(tmp_path / "empty")


def test_a_text_prompt_for_a_checkpoint_without_a_tokenizer_asks_for_ids():
    assert prompt_ids(None, "3 14 15") == [3, 14, 15]
    with pytest.raises(ValueError, match="no tokenizer .* space-separated ids, e.g. --prompt '3 14 15', not 'ROMEO:'"):
        prompt_ids(None, "ROMEO:")


def test_a_token_id_outside_the_vocabulary_is_named_with_the_vocabulary_size(token_id_ckpt, capsys):
    code, out, err = sample(capsys, "--ckpt", token_id_ckpt, "--prompt", "3 14 999")
    assert code == 2 and out == ""
    assert error_line(err).endswith("error: scripts/sample.py: token id 999 in --prompt '3 14 999' is outside this "
                                    "checkpoint's vocabulary of 64 tokens; give ids from 0 to 63.")
    assert sample(capsys, "--ckpt", token_id_ckpt, "--prompt", "-1 2")[0] == 2


def test_an_unavailable_mps_device_is_named_not_the_checkpoint(token_id_ckpt, capsys, monkeypatch):
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    code, _, err = sample(capsys, "--ckpt", token_id_ckpt, "--device", "mps")
    assert code == 2 and "not a readable checkpoint" not in err
    assert error_line(err) == ("error: scripts/sample.py: --device=mps but MPS (Apple's GPU) is not available on "
                               "this machine; use --device cpu.")


def test_top_k_none_means_no_cut_as_the_message_for_zero_says(token_id_ckpt, capsys):
    code, out, _ = sample(capsys, "--ckpt", token_id_ckpt, "--prompt", "1 2", "--top-k", "None")
    assert code == 0 and len(out.split()) == 4  # the prompt's 2 ids and 2 new ones
    code, _, err = sample(capsys, "--ckpt", token_id_ckpt, "--top-k", "0")
    assert code == 2
    assert error_line(err) == "error: scripts/sample.py: --top-k=0 must be a positive integer or None (no cut)."
    code, _, err = sample(capsys, "--ckpt", token_id_ckpt, "--top-k", "many")
    assert code == 2 and "'many' is not a positive integer or None (no cut)" in error_line(err)


def test_a_prompt_longer_than_the_context_window_gets_a_note(token_id_ckpt, capsys):
    code, _, err = sample(capsys, "--ckpt", token_id_ckpt, "--prompt", " ".join(["5"] * 20))
    assert code == 0
    assert ("# note: the prompt has 20 tokens, more than the model's block_size 16; the model sees only its last 16"
            in err.splitlines())
    assert "note" not in sample(capsys, "--ckpt", token_id_ckpt, "--prompt", "5 6")[2]


@pytest.mark.parametrize("script, argv, installed", [("sample.py", [], "tinygpt-sample"),
                                                     ("attention.py", [], "tinygpt-attention"),
                                                     ("export_hf.py", [], "tinygpt-export-hf")])
def test_help_and_a_refused_argument_answer_without_torch_named_as_run(script, argv, installed, tmp_path):
    """--help of each checkpoint CLI and a refusal of its arguments import no torch, Lightning or W&B (they took
    9-18 s), name the command as it was run (an installed command by its own name), and the refusal is one line."""
    import os
    import subprocess
    import sys

    from helpers import ROOT

    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    for args in (["--help"], ["--no-such-flag"]):
        out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / script), *args],
                             capture_output=True, text=True, timeout=60, cwd=tmp_path, env=env)
        lines = out.stderr.splitlines()
        imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
        assert "argparse" in imported and not imported & {"torch", "lightning", "wandb", "transformers"}, args
        errors = [line for line in lines if not line.startswith("import time:")]
        if args == ["--help"]:
            assert out.returncode == 0 and out.stdout.startswith(f"usage: scripts/{script}")
        else:
            assert out.returncode == 2 and errors == [
                f"error: scripts/{script}: unrecognized arguments: --no-such-flag"] or "required" in errors[0]
    module = {"sample.py": "sample", "attention.py": "attention_page", "export_hf.py": "export_hf"}[script]
    code = f"import sys; sys.argv[0] = {installed!r}; from tinygpt.cli.{module} import main; main(['--help'])"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.stdout.startswith(f"usage: {installed} ")


def test_a_negative_seed_is_refused_and_a_long_output_is_announced(token_id_ckpt, capsys, monkeypatch):
    code, _, err = sample(capsys, "--ckpt", token_id_ckpt, "--seed", -1)
    assert code == 2 and error_line(err) == ("error: scripts/sample.py: --seed=-1 must be a whole number from 0 to "
                                             "18446744073709551614 (torch's seeds are unsigned 64-bit; sample i uses "
                                             "--seed + i).")
    monkeypatch.setattr("tinygpt.cli.sample.LONG_OUTPUT", 20)  # 20,000 tokens in all, made small
    code, out, err = sample(capsys, "--ckpt", token_id_ckpt, "--prompt", "3", "--max-new-tokens", 10,
                            "--num-samples", 2, "--top-k", 1)
    assert code == 0 and len(out.split()) == 2 * 11 + 1  # each sample's ids, and the separator line
    assert ("# generating 20 tokens (10 per sample, 2 sample(s) of 1 prompt(s)); the text is printed at the end, "
            "Ctrl-C stops") in err
    code, _, err = sample(capsys, "--ckpt", token_id_ckpt, "--prompt", "3", "--max-new-tokens", 9, "--num-samples", 2)
    assert code == 0 and "# generating" not in err and "last.ckpt" in err  # below the threshold: as before


def test_ctrl_c_while_generating_is_one_line_and_exit_130(token_id_ckpt, capsys, monkeypatch):
    """It had been a 55-line KeyboardInterrupt traceback and exit 1 (the text is printed only at the end)."""
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr("tinygpt.cli.sample.generate_texts", interrupted)
    code, out, err = sample(capsys, "--ckpt", token_id_ckpt, "--prompt", "3")
    assert code == 130 and out == "" and "Traceback" not in err
    assert err.strip().splitlines()[-1] == ("interrupted by SIGINT: no text printed (sample.py prints it when every "
                                            "sample is done; a smaller --max-new-tokens is quicker).")


@pytest.mark.parametrize("bad, message", [
    (["--top-k", "0"], "--top-k=0 must be a positive integer"),
    (["--temperature", "nan"], "--temperature=nan must be a finite number > 0"),
])
def test_a_bad_sampling_argument_is_refused_before_torch(bad, message, tmp_path):
    """--top-k 0 and --temperature nan were refused after torch was imported (2 s); now with the other arguments."""
    import os
    import subprocess
    import sys

    import torch

    from helpers import ROOT

    torch.save({"state_dict": {}, "hyper_parameters": {}}, tmp_path / "model.ckpt")
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / "sample.py"), "--ckpt",
                          str(tmp_path / "model.ckpt"), *bad], capture_output=True, text=True, timeout=60,
                         cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(ROOT / "src")})
    lines = out.stderr.splitlines()
    errors = [line for line in lines if not line.startswith("import time:")]
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert out.returncode == 2 and len(errors) == 1 and message in errors[0]
    assert not imported & {"torch", "lightning"}

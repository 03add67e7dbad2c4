"""What scripts/sample.py says about a --ckpt that is not a run with a checkpoint, and a text prompt for a
checkpoint without a tokenizer."""

import json

import pytest

from tinygpt.sample import checkpoint_in, prompt_ids


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

"""The line a finished run prints."""

from pathlib import Path

from tinygpt.train.summary import done_line


def test_the_done_line_shows_missing_and_non_finite_numbers_as_n_a():
    summary = {"steps": 10, "train_loss": float("nan"), "val_loss": None, "val_loss_honest": 1.23456,
               "future_leak": 0.0, "tokens_per_sec": 1234.4}
    assert done_line(summary, Path("out"), job="3") == (
        "[bold green]done[/] (3): 10 steps, train loss n/a, val loss n/a (honest 1.2346, future leak 0), "
        "1,234 tokens/s -> out")


def test_a_summary_records_the_commit_its_code_came_from(tmp_path):
    """In a git checkout (the tests run from one) summary.json says which commit made the run, and whether tracked
    files differed from it; a value the caller already has is kept (a resumed run's own)."""
    import json
    import re

    from tinygpt.train.summary import write_summary

    code = json.loads(write_summary(tmp_path, {"status": "completed"}).read_text())["code"]
    assert re.fullmatch(r"[0-9a-f]{40}", code["commit"]) and isinstance(code["dirty"], bool)
    mine = {"commit": "0" * 40, "dirty": False}
    assert json.loads(write_summary(tmp_path, {"code": mine}).read_text())["code"] == mine

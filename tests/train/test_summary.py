"""The line a finished run prints."""

from pathlib import Path

from tinygpt.train.summary import done_line


def test_the_done_line_shows_missing_and_non_finite_numbers_as_n_a():
    summary = {"steps": 10, "train_loss": float("nan"), "val_loss": None, "val_loss_honest": 1.23456,
               "future_leak": 0.0, "tokens_per_sec": 1234.4}
    assert done_line(summary, Path("out"), job="3") == (
        "[bold green]done[/] (3): 10 steps, train loss n/a, val loss n/a (honest 1.2346, future leak 0), "
        "1,234 tokens/s -> out")

"""The line a finished run prints."""

from pathlib import Path

from tinygpt.train.summary import done_line


def test_the_done_line_shows_missing_and_non_finite_numbers_as_n_a():
    summary = {"steps": 10, "train_loss": float("nan"), "val_loss": None, "val_loss_honest": 1.23456,
               "future_leak": 0.0, "tokens_per_sec": 1234.4}
    assert done_line(summary, Path("out"), job="3") == (
        "[bold green]done[/] (3): 10 steps, train loss n/a, val loss n/a (honest 1.2346, future leak 0), "
        "1,234 tokens/s -> out")


def test_old_names_read_as_todays_at_any_depth_and_under_diag():
    from tinygpt.train.summary import current_names

    old = {"val_loss_autoregressive": 2.0, "diag/autoregressive_at": 3, "x": [{"autoregressive_loss": {"windows": 4}}]}
    assert current_names(old) == {"val_loss_honest": 2.0, "diag/honest_at": 3, "x": [{"honest_loss": {"windows": 4}}]}
    both = {"val/loss_autoregressive": ([1], [9.0]), "val/loss_honest": ([2], [1.0])}  # today's name keeps its own
    assert current_names(both) == {"val/loss_honest": ([2], [1.0])}

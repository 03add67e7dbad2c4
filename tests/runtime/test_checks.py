"""The shared value checks: what passes, and the one sentence for what does not."""

import math

import pytest

from tinygpt.runtime.checks import is_number, non_negative_int, number, one_of, positive_int


@pytest.mark.parametrize("value", [1, 7, 2**40])
def test_positive_int_returns_a_positive_integer(value):
    assert positive_int("data.batch_size", value) == value


@pytest.mark.parametrize("value", [0, -3, 1.0, "2", True, None])
def test_positive_int_names_the_key_and_the_value(value):
    with pytest.raises(ValueError) as err:
        positive_int("data.batch_size", value, " (windows per step)")
    assert str(err.value) == f"data.batch_size={value!r} must be a positive integer (windows per step)."


def test_non_negative_int_takes_zero_and_refuses_negatives_and_bools():
    assert non_negative_int("every_n_steps", 0) == 0
    for bad in (-1, False, 0.5):
        with pytest.raises(ValueError, match=rf"^every_n_steps={bad!r} must be a whole number >= 0.$"):
            non_negative_int("every_n_steps", bad)


def test_number_is_finite_and_not_a_bool():
    assert number("optim.lr", 3e-4) == 3e-4 and is_number(2)
    for bad in (math.inf, math.nan, "fast", True):
        with pytest.raises(ValueError, match=r"^optim.lr=.* must be a number.$"):
            number("optim.lr", bad)


def test_one_of_lists_the_choices():
    one_of("model.attn.backend", "math", ("sdpa", "math"))
    with pytest.raises(ValueError) as err:
        one_of("model.attn.backend", "flash", ("sdpa", "math"))
    assert str(err.value) == "model.attn.backend='flash' is not one of sdpa, math."


def test_a_parameter_count_keeps_its_digits_below_a_million():
    from tinygpt.runtime.console import count

    assert [count(n) for n in (0, 85_632, 999_999, 1_000_000, 10_745_088, 124_439_808, 1_557_611_200)] == [
        "0", "85,632", "999,999", "1.0M", "10.7M", "124M", "1,558M"]


def test_a_number_is_echoed_as_the_user_writes_it():
    """optim.lr=-1 had been echoed as -1.0 and 1e12 as 1000000000000.0 (the config's float type made them so)."""
    from tinygpt.runtime.checks import as_written

    written = {-1.0: "-1", 1e12: "1e12", -2.5e12: "-2.5e12", 0.001: "0.001", 3e-5: "3e-5", 0.0: "0", 1.5: "1.5",
               100000.0: "100000", 2.5e15: "2.5e15"}
    assert {v: as_written(v) for v in written} == written
    assert as_written(float("nan")) == "nan" and as_written("x") == "'x'" and as_written(3) == "3"
    for value in written:
        assert float(as_written(value)) == value


def test_a_resume_that_changes_the_rate_echoes_both_rates_as_written():
    """A resume with optim.lr=1e12 had been told 'this run sets 1000000000000.0', and one trained at -1 ... '-1.0'."""
    from pathlib import Path

    from tinygpt.runtime.resume_record import optimizer_changed

    assert optimizer_changed(Path("run/last.ckpt"), "optim.lr", 0.001, 1e12) == (
        "ckpt_path='run/last.ckpt' was trained with optim.lr=0.001, but this run sets 1e12: a resume restores the "
        "optimizer and its schedule, so the new value would not train; resume with optim.lr=0.001, or start a new "
        "run.")
    assert "optim.betas=[0.9, 0.95], but this run sets [0.9, 0.99]" in optimizer_changed(
        Path("run/last.ckpt"), "optim.betas", [0.9, 0.95], [0.9, 0.99])

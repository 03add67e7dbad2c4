"""The shared number formatter: a value by its format spec, or a placeholder where there is none."""

from tinygpt.runtime.console import fmt


def test_fmt_shows_a_placeholder_for_none_and_on_request_for_non_finite_numbers():
    assert fmt(1234.5, ",.0f") == "1,234" and fmt(0.1234, ".1%") == "12.3%"
    assert fmt(None, ".2f") == "-" and fmt(None, ".2f", missing="n/a") == "n/a"
    assert fmt(float("nan"), ".2f") == "nan"  # bench tables: a NaN is shown as one
    assert fmt(float("nan"), ".4f", missing="n/a", finite_only=True) == "n/a"  # a run's done line
    assert fmt(float("inf"), ".4f", missing="n/a", finite_only=True) == "n/a"

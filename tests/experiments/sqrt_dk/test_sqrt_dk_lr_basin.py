"""Experiment 2's measures on learning-rate curves whose optimum and basin are known by construction."""

import numpy as np
import pytest

from tinygpt.experiments.sqrt_dk.lr_basin import (
    all_verdict,
    basin,
    both_verdict,
    censored_direction,
    fp16_verdict,
    optimum,
    sensitivity,
    sensitivity_words,
    sign_verdict,
    width,
)
from tinygpt.analysis.stats import Estimate

XS = np.log10([1e-4, 2.154e-4, 4.642e-4, 1e-3, 2.154e-3, 4.642e-3, 1e-2])  # the design's ladder
EXACT = np.arange(-12, -5) / 3  # the same ladder without rounding, where a test needs exact grid steps


def v_curve(x0, slope=0.3, best=2.0, xs=EXACT):
    return best + slope * np.abs(xs - x0)


def test_a_parabola_through_any_three_rates_gives_its_vertex_exactly():
    for x0 in (-3.3, -3.0, -2.45):
        y = 2.1 + 0.7 * (EXACT - x0) ** 2
        bx, by, edge = optimum(EXACT, y)
        assert bx == pytest.approx(x0, abs=1e-12) and by == pytest.approx(2.1, abs=1e-12) and edge == 0


def test_a_symmetric_v_has_its_optimum_at_the_kink_and_the_basin_delta_over_slope_each_side():
    y = v_curve(EXACT[3], slope=0.3)
    b = basin(EXACT, y, 0.1)
    assert optimum(EXACT, y)[0] == pytest.approx(EXACT[3])
    assert (b.lo, b.hi) == (pytest.approx(EXACT[3] - 1 / 3), pytest.approx(EXACT[3] + 1 / 3))
    assert not b.open_lo and not b.open_hi
    assert width(EXACT, y, 0.1) == pytest.approx(2 / 3)
    assert width(EXACT, y, 0.2) == pytest.approx(4 / 3)  # twice the delta, twice the width on a V


def test_an_optimum_at_the_grid_edge_is_flagged_and_its_basin_open_on_that_side():
    falling = 3.0 - 0.2 * (EXACT - EXACT[0])  # best at the highest rate
    bx, by, edge = optimum(EXACT, falling)
    assert (bx, edge) == (pytest.approx(EXACT[-1]), 1) and by == pytest.approx(falling[-1])
    b = basin(EXACT, falling, 0.1)
    assert b.open_hi and not b.open_lo and b.hi == pytest.approx(EXACT[-1])
    assert b.lo == pytest.approx(EXACT[-1] - 0.5)  # 0.1 nats at 0.2 a decade
    assert optimum(EXACT, falling[::-1])[2] == -1


def test_the_width_moves_continuously_as_a_cliff_rises_beside_the_optimum():
    """The vertex is a point of the curve, so a loss rising past the vertex + delta never makes the width jump
    (the reviewer's case: a cliff just above the best rate)."""
    widths = []
    for y2 in np.linspace(3.0, 5.0, 81):
        y = np.array([3.0, 2.8, 2.5, 2.2, y2, 4.3, 4.3])
        widths.append(width(EXACT, y, 0.1))
    assert max(abs(np.diff(widths))) < 0.01
    y = 2.0 + 50.0 * (EXACT - (EXACT[3] + 0.1)) ** 2  # steep: the lowest rate is 0.5 above the vertex
    b = basin(EXACT, y, 0.1)
    assert b.lo == pytest.approx(EXACT[3] + 0.1 - 0.1 / 0.5 * 0.1)  # between the vertex and the rate, linearly
    assert 0 < b.hi - b.lo < 2 * np.sqrt(0.1 / 50)  # inside the parabola's own basin


def test_rows_are_replicates():
    ys = np.stack([v_curve(EXACT[2]), v_curve(EXACT[4], slope=0.1)])  # (2, L)
    assert optimum(EXACT, ys)[0] == pytest.approx([EXACT[2], EXACT[4]])
    assert width(EXACT, ys, 0.1) == pytest.approx([2 / 3, 1 + 2 / 3])  # the second one open at the top
    assert basin(EXACT, ys, 0.1).open_hi.tolist() == [False, True]
    assert width(EXACT, ys[None], 0.1).shape == (1, 2)


def test_a_non_finite_rate_closes_the_basin_there():
    y = v_curve(EXACT[3], slope=0.05)
    y[5] = np.nan
    b = basin(EXACT, y, 0.1)
    assert not b.open_hi and b.hi == pytest.approx(EXACT[5])


def test_sensitivity_is_wortsmans_over_the_fixed_range_only():
    y = np.array([2.5, 2.3, 2.1, 2.0, 2.2, 3.5, 9.0])
    init = 4.17
    full = sensitivity(EXACT, y, init, EXACT[0], EXACT[-1])
    assert full == pytest.approx(np.mean([2.5, 2.3, 2.1, 2.0, 2.2, 3.5, 4.17]) - 2.0)  # capped at the initial loss
    assert sensitivity(EXACT, y, init, EXACT[1], EXACT[4]) == pytest.approx(np.mean([2.3, 2.1, 2.0, 2.2]) - 2.0)
    rows = np.stack([y, y + 1])  # replicates: one sensitivity each
    assert sensitivity(EXACT, rows, init, EXACT[0], EXACT[-1]) == pytest.approx(
        [full, np.mean(np.minimum(y + 1, init)) - 3.0])


def test_a_shifted_optimum_with_an_equal_basin_has_a_higher_fixed_range_sensitivity_and_the_same_width():
    """The referee's case: the same curve moved one rate down. Wortsman's measure on the fixed range rises, the
    basin does not change, and the words never say "more sensitive"."""
    grid = np.arange(-15, -2) / 3  # a wide grid, so that both basins are closed
    a = v_curve(-3.0, slope=0.3, xs=grid)
    b = v_curve(-3.0 - 1 / 3, slope=0.3, xs=grid)
    rng = (-4.0, -2.0)
    assert sensitivity(grid, b, 4.17, *rng) > sensitivity(grid, a, 4.17, *rng) + 0.01
    assert width(grid, a, 0.1) == pytest.approx(width(grid, b, 0.1))
    words = sensitivity_words(fixed_range=+1, basin_gap=0, optimum_moved=True)
    assert "more sensitive" not in words.replace("not shown more sensitive", "")
    assert words.startswith("not shown more sensitive") and "the optimum's shift is established" in words


def test_sensitivity_words_need_the_basin_for_more_or_less_sensitive():
    assert sensitivity_words(+1, +1) == "more sensitive (a narrower basin)"
    assert sensitivity_words(0, +1) == "more sensitive (a narrower basin)"  # the basin is the measure of it
    assert sensitivity_words(+1, -1, True).endswith("comes with a moved optimum")
    assert sensitivity_words(-1, 0).startswith("not shown less sensitive")
    assert sensitivity_words(+1, 0).endswith("that no detected basin or optimum difference explains")
    assert sensitivity_words(0, 0) == "not distinguished in sensitivity by either measure"


def est(lo, hi):
    return Estimate((lo + hi) / 2, lo, hi)


def test_censoring_keeps_only_directions_a_larger_true_value_cannot_undo():
    above, below, across = est(0.1, 0.3), est(-0.3, -0.1), est(-0.1, 0.1)
    assert censored_direction(above, []) == 1 and censored_direction(below, []) == -1
    assert censored_direction(across, [1]) == 0
    assert censored_direction(above, [1]) == 1  # an open width added: the true difference is larger still
    assert censored_direction(above, [-1]) == 0  # an open width subtracted could be larger: undecided
    assert censored_direction(below, [-1]) == -1 and censored_direction(below, [1]) == 0
    assert censored_direction(Estimate(-0.01, 0.02, 0.3), []) == 0  # the value outside its own interval


def test_sign_both_and_all_verdicts():
    assert all_verdict([1, 1], 1) == "holds" and all_verdict([1, 0], 1) == "undecided"
    assert all_verdict([1, -1], 1) == "fails" and all_verdict([], 1) == "undecided"
    assert [sign_verdict(d, -1) for d in (-1, 0, 1)] == ["holds", "undecided", "fails"]
    assert both_verdict(1, 1, -1, -1) == "holds"
    assert both_verdict(1, 1, 0, -1) == "undecided"
    assert both_verdict(-1, 1, -1, -1) == "fails" and both_verdict(1, 1, 1, -1) == "fails"


@pytest.mark.parametrize("counts, verdict", [
    ({1e-2: (5, 0), 2e-2: (3, 1), 5e-3: (4, 0)}, "holds"),
    ({1e-2: (5, 0), 2e-2: (2, 1), 5e-3: (4, 0)}, "undecided"),  # one rate short, and not a reversal
    ({1e-2: (5, 0), 2e-2: (5, 2), 5e-3: (4, 0)}, "undecided"),  # the scaled arm overflows too, less often
    ({1e-2: (0, 0), 2e-2: (5, 0), 5e-3: (4, 0)}, "fails"),  # neither overflows at a rate
    ({1e-2: (2, 4), 2e-2: (5, 0), 5e-3: (4, 0)}, "fails"),  # the scaled arm overflows more
    ({}, "undecided"),
])
def test_fp16_verdict(counts, verdict):
    assert fp16_verdict(counts, min_unscaled=3, max_scaled=1) == verdict

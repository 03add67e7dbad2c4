"""Design 3's edge (tinygpt.experiments.sqrt_dk_stability.edge): hand-computed edges, intervals, verdicts with a
known answer, and the coverage of the interval on simulated ragged cliffs (simulate.py)."""

import math

import numpy as np
import pytest

from tests.experiments.sqrt_dk_stability.simulate import RATES, STEP, arms
from tinygpt.experiments.sqrt_dk_stability.edge import (combination, edges, ladder_step, sensitivity, side,
                                                        slope_weights, within)

X = np.log10([1e-3, 1e-2, 1e-1, 1.0])  # a ladder of whole decades: step 1


def fails(*firsts, n=4):
    """Rows that train below index ``first`` and fail from it on (n rates)."""
    return np.array([[i >= f for i in range(n)] for f in firsts])


def test_a_seed_that_trains_then_fails_has_its_edge_midway_between_the_two_rates():
    e = edges(X, fails(2))
    assert e.step == pytest.approx(1.0)
    assert e.values == pytest.approx([-1.5])  # between 1e-2 (trained) and 1e-1 (failed)
    assert not e.low.any() and not e.high.any() and e.censored == 0


def test_a_seed_that_flips_is_counted_by_its_failures():
    e = edges(X, np.array([[False, True, False, True]]))  # failed at 2 of 4 rates
    assert e.values == pytest.approx([X[-1] + 0.5 - 2.0])


def test_edges_outside_the_grid_are_bounds():
    e = edges(X, np.array([[False] * 4, [True] * 4]))
    assert e.values == pytest.approx([0.5, -3.5])  # at or above the top rate + step/2; at or below the lowest - step/2
    assert list(e.high) == [True, False] and list(e.low) == [False, True] and e.censored == 2


def test_an_uneven_ladder_is_refused():
    with pytest.raises(ValueError, match="ladder"):
        ladder_step(np.log10([1e-3, 1e-2, 3e-2]))
    with pytest.raises(ValueError, match="rates"):
        edges(X, np.zeros((2, 3), bool))


def test_agreeing_seeds_get_the_rounding_interval_not_a_zero_width_one():
    e = edges(X, fails(2, 2, 2))
    est = combination({"a": e}, {"a": 1})
    half = 1.959964 * math.sqrt(1 / 12)  # the ladder's rounding alone, infinite degrees of freedom
    assert est.value == pytest.approx(-1.5)
    assert (est.lo, est.hi) == pytest.approx((-1.5 - half, -1.5 + half), abs=1e-5)


def test_a_shift_is_paired_by_seed_with_a_t_interval():
    a, b = edges(X, fails(1, 2, 3)), edges(X, fails(2, 3, 3))
    est = combination({"a": a, "b": b}, {"a": 1, "b": -1})
    d = np.array([-1.0, -1.0, 0.0])  # per seed: a's edge minus b's
    seed_var, rounding = d.var(ddof=1) / 3, 2 / 12
    df = (seed_var + rounding) ** 2 / (seed_var ** 2 / 2)
    from scipy import stats
    half = stats.t.ppf(0.975, df) * math.sqrt(seed_var + rounding)
    assert est.value == pytest.approx(d.mean())
    assert (est.lo, est.hi) == pytest.approx((d.mean() - half, d.mean() + half))


def test_arms_not_paired_by_seed_are_refused():
    a = edges(X, fails(1, 2), seed_ids=(1, 2))
    b = edges(X, fails(1, 2), seed_ids=(1, 3))
    with pytest.raises(ValueError, match="paired"):
        combination({"a": a, "b": b}, {"a": 1, "b": -1})


def test_slope_weights_give_the_least_squares_slope():
    w = slope_weights({"a": 0.0, "b": 1.0, "c": 2.0})
    ys = {"a": 3.0, "b": 2.5, "c": 2.0}
    assert sum(w[k] * ys[k] for k in w) == pytest.approx(-0.5)


def test_a_clear_shift_holds_and_its_reverse_fails():
    low, high = edges(RATES, fails(3, 3, 4, 3, 3, n=13)), edges(RATES, fails(8, 8, 9, 8, 8, n=13))
    parts = {"none": low, "sqrt": high}
    assert side(parts, {"none": 1, "sqrt": -1}, -1)[0] == "holds"
    assert side(parts, {"none": 1, "sqrt": -1}, +1)[0] == "fails"
    verdict, est = within(parts, {"none": 1, "sqrt": -1}, -5 * STEP - 0.3, -5 * STEP + 0.3)
    assert est.value == pytest.approx(-5 * STEP) and verdict == "holds"
    assert within(parts, {"none": 1, "sqrt": -1}, -0.3, 0.3)[0] == "fails"


def test_no_shift_is_undecided():
    a, b = edges(RATES, fails(5, 6, 5, 6, 5, n=13)), edges(RATES, fails(6, 5, 5, 6, 6, n=13))
    assert side({"none": a, "sqrt": b}, {"none": 1, "sqrt": -1}, -1)[0] == "undecided"


def test_a_censored_edge_keeps_a_verdict_only_where_its_bound_cannot_reverse_it():
    never = edges(RATES, np.zeros((5, 13), bool))  # trained at every rate: its edge at or above the grid
    mid = edges(RATES, fails(6, 6, 6, 6, 6, n=13))
    parts = {"qknorm": never, "sqrt": mid}
    assert side(parts, {"qknorm": 1, "sqrt": -1}, +1)[0] == "holds"  # a lower bound above 0 stays above
    assert within(parts, {"qknorm": 1, "sqrt": -1}, 0.0, 5.0)[0] == "undecided"  # an equivalence on a bound: none
    always = edges(RATES, np.ones((5, 13), bool))  # failed everywhere: its edge at or below the grid
    assert side({"none": always, "sqrt": mid}, {"none": 1, "sqrt": -1}, -1)[0] == "holds"
    assert side({"none": mid, "sqrt": always}, {"none": 1, "sqrt": -1}, +1)[0] == "holds"


def test_sensitivity_caps_at_the_initial_loss():
    losses = np.array([[2.0, 1.5, 9.0]])
    assert sensitivity(losses, initial=4.0) == pytest.approx([(2.0 + 1.5 + 4.0) / 3 - 1.5])


@pytest.mark.parametrize("sigma, flip", [(0.0, 0.0), (0.0, 0.3), (0.15, 0.0), (0.3, 0.3)])
def test_the_interval_covers_the_true_edge_and_shift(sigma, flip):
    """Over 300 simulated sweeps (5 seeds, edges anywhere between two rates), the 95% interval of an arm's edge and
    of a shift covers the truth in at least 93% of them, and is not absurdly wide (at most 2 ladder steps a side
    when the seeds agree)."""
    rng = np.random.default_rng(7)
    n, hit_mu, hit_shift, widths = 300, 0, 0, []
    for _ in range(n):
        mu = -1.6 + rng.uniform(0, STEP)
        a = arms(rng, {"sqrt": mu, "none": mu - 0.602}, sigma, flip, 5, shared=0.1)
        e = combination(a, {"sqrt": 1})
        s = combination(a, {"none": 1, "sqrt": -1})
        hit_mu += e.lo <= mu <= e.hi
        hit_shift += s.lo <= -0.602 <= s.hi
        widths.append(e.hi - e.lo)
    assert hit_mu / n >= 0.93 and hit_shift / n >= 0.93
    if sigma == 0 and flip == 0:
        assert max(widths) <= 4 * STEP

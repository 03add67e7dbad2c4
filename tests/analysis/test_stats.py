"""The report statistics on synthetic data whose answers are known by construction."""

import math

import numpy as np
import pytest

from tinygpt.analysis.stats import (
    Estimate,
    Sample,
    all_hold,
    combine,
    bootstrap,
    difference_words,
    direction,
    failed_to_train,
    first_below,
    first_below_band,
    in_range,
    loglog_slope,
    resolution,
    slope_estimate,
    smooth,
    trend,
)


def noisy(mean, sd, seeds=3, windows=256, seed=0, window_effect=None):
    rng = np.random.default_rng(seed)
    v = mean + sd * rng.standard_normal((seeds, windows))
    return v if window_effect is None else v + window_effect


def test_the_interval_carries_the_window_error_not_the_seed_spread():
    """Windows with sd 1.5 shared by 3 seeds that agree to 0.01: the seed spread is tiny, the window SE is
    1.5 / sqrt(256) ~ 0.094, so the 95% interval is ~ +-0.18 wide (an sd instead of an SE would give +-2.9;
    the seed spread alone +-0.01)."""
    windows = np.random.default_rng(1).normal(0, 1.5, 256)
    v = 2.0 + windows + np.random.default_rng(2).normal(0, 0.01, (3, 256))
    est = bootstrap({"a": Sample(v)})["a"]
    half = (est.hi - est.lo) / 2
    se = windows.std(ddof=1) / math.sqrt(256)
    assert half == pytest.approx(1.96 * se, rel=0.15)
    assert est.lo < est.value < est.hi
    assert est.value == pytest.approx(v.mean())


def test_the_interval_carries_the_seed_spread_too():
    """Seeds that disagree by a constant per seed (0, 0.5, 1.0) on noiseless windows: the interval spans the seed
    means' bootstrap range, not zero width."""
    v = np.tile(np.array([[0.0], [0.5], [1.0]]), (1, 64)) + 2.0
    est = bootstrap({"a": Sample(v)})["a"]
    assert est.lo < 2.3 and est.hi > 2.7


def test_a_paired_difference_on_shared_windows_cancels_the_window_error():
    """Two arms on the same windows (window sd 1.5, seeds agreeing to 0.001), one 0.05 worse on every window:
    the window error cancels, the difference is 0.05 with a narrow interval that excludes 0; resampled as if on
    different windows it would be lost in the window noise."""
    windows = np.random.default_rng(3).normal(0, 1.5, 256)
    base = noisy(2.0, 0.001, seed=3, window_effect=windows)
    est = bootstrap({"a": Sample(base + 0.05), "b": Sample(base)})
    d = est["a"] - est["b"]
    assert d.value == pytest.approx(0.05)
    assert direction(d) == 1 and d.hi - d.lo < 0.01
    unpaired = bootstrap({"a": Sample(base + 0.05, "one"), "b": Sample(noisy(2.0, 1.5, seed=4), "other")})
    assert direction(unpaired["a"] - unpaired["b"]) == 0  # inside the window noise


def test_two_quantities_of_the_same_runs_share_the_seed_draw():
    """The honest and the teacher-forced loss of a causal model are equal window by window and seed by seed: their
    difference is exactly 0 with a zero-width interval when the two samples share seeds; drawn apart, seed noise
    would widen it."""
    v = noisy(2.0, 1.0, seed=7) + np.array([[0.0], [0.3], [0.6]])
    est = bootstrap({"ar": Sample(v, "probe", seeds="arm"), "tf": Sample(v.copy(), "probe", seeds="arm")})
    d = est["ar"] - est["tf"]
    assert d.value == 0 and d.lo == 0 and d.hi == 0
    apart = bootstrap({"ar": Sample(v, "probe"), "tf": Sample(v.copy(), "probe")})
    assert (apart["ar"] - apart["tf"]).hi > 0.1


def test_a_difference_inside_noise_is_no_difference():
    est = bootstrap({"a": Sample(noisy(2.0, 1.0, seed=5)), "b": Sample(noisy(2.0, 1.0, seed=6))})
    d = est["a"] - est["b"]
    assert difference_words(d, "higher", "lower") == "no difference at the 95% level"
    assert difference_words(Estimate(1, 0.5, 1.5), "higher", "lower") == "higher"
    assert difference_words(Estimate(-1, -1.5, -0.5), "higher", "lower") == "lower"


def test_the_bootstrap_is_reproducible():
    s = {"a": Sample(noisy(1.0, 1.0))}
    assert bootstrap(s)["a"] == bootstrap(s)["a"]


def test_slope_of_an_exact_one_over_t_law_is_minus_one():
    """A synthetic 1/T sweep: leaky loss = 2.4 / T on every window of every seed, plus window noise that scales
    with the level; the slope is -1 and its interval contains -1 and lies in [-1.3, -0.7]."""
    Ts = [16, 32, 64]
    samples = {T: Sample(2.4 / T * (1 + 0.2 * noisy(0, 1, seed=T)), f"T{T}") for T in Ts}
    est = bootstrap(samples)
    slope = slope_estimate(Ts, [est[T] for T in Ts])
    assert slope.value == pytest.approx(-1, abs=0.03)
    assert slope.lo < -1 < slope.hi
    assert in_range(slope, -1.3, -0.7) == "holds"
    assert loglog_slope([1, 2, 4], [1, 0.5, 0.25]) == pytest.approx(-1)


def test_in_range_has_three_answers():
    assert in_range(Estimate(1.0, 0.9, 1.1), 0.67, 1.5) == "holds"
    assert in_range(Estimate(2.0, 1.8, 2.2), 0.67, 1.5) == "fails"
    assert in_range(Estimate(1.4, 1.2, 1.6), 0.67, 1.5) == "undecided"
    assert all_hold(["holds", "holds"]) == "holds"
    assert all_hold(["holds", "undecided"]) == "undecided"
    assert all_hold(["holds", "fails", "undecided"]) == "fails"


def make_trend(values, noise=0.002, seeds=3):
    est = bootstrap({i: Sample(noisy(v, noise, seeds=seeds, windows=128, seed=i)) for i, v in enumerate(values)})
    return trend([32, 128, 256], [est[i] for i in range(len(values))])


def test_trend_sees_a_fall_as_a_fall():
    """The sensitivity-falls-with-d_k sweep (the shape the old one-sided test called 'not monotonic')."""
    t = make_trend([0.066, 0.038, 0.018])
    assert t.word == "falls" and t.monotonic
    assert t.slope.hi < 0


def test_trend_sees_a_rise_as_a_rise_and_negative_values_are_fine():
    t = make_trend([-0.129, -0.100, -0.082])
    assert t.word == "rises" and t.monotonic
    assert "rises monotonically" in t.words()


def test_trend_inside_noise_is_flat():
    t = make_trend([0.10, 0.11, 0.10], noise=2.0)
    assert t.word == "flat within noise" and not t.monotonic


def test_a_rise_with_a_step_inside_noise_is_not_called_monotonic():
    """Rises overall (0 -> 1) but the first step (0 -> 0.001) is far inside the noise."""
    t = make_trend([0.0, 0.001, 1.0], noise=0.5)
    assert t.word == "rises" and not t.monotonic


def test_failed_to_train_against_the_count_baselines():
    """unigram 3.3, bigram 2.5: with fraction 0.5 the line is 2.9."""
    assert failed_to_train(3.2, 3.3, 2.5, 0.5)
    assert failed_to_train(2.95, 3.3, 2.5, 0.5)
    assert not failed_to_train(2.85, 3.3, 2.5, 0.5)
    assert not failed_to_train(float("nan"), 3.3, 2.5, 0.5)  # diverged is counted as diverged


def test_onset_is_read_from_the_raw_series_at_its_own_step():
    """A loss that drops from 2.5 to 0.05 at step 300 exactly (logged every step): the raw series finds 300; a
    5-point trailing smoother would report a later step."""
    steps = np.arange(0, 800)
    loss = np.where(steps < 300, 2.5, 0.05)
    assert first_below(steps, loss, 1.0) == 300
    assert first_below(steps, smooth(loss), 1.0) > 300  # what the old report measured
    assert first_below(steps, loss, 0.01) is None
    assert resolution(np.arange(0, 800, 10)) == 10


def test_three_seeds_get_a_t_interval():
    """Seeds that disagree by a constant (0, 0.5, 1.0) on noiseless windows: the interval is the t-test's on the
    three seed means, 0.5 +- t(2) x 0.5 / sqrt(3) = 0.5 +- 1.24 (a normal quantile would give +- 0.57, and
    resampling the three seeds about +- 0.4)."""
    v = np.tile(np.array([[0.0], [0.5], [1.0]]), (1, 64))
    est = bootstrap({"a": Sample(v)})["a"]
    half = 4.303 * 0.5 / math.sqrt(3)
    assert est.lo == pytest.approx(0.5 - half, rel=0.1) and est.hi == pytest.approx(0.5 + half, rel=0.1)
    assert est.df == pytest.approx(2)


def test_pairing_by_seed_needs_the_same_seeds():
    """Two arms paired by seed with one run lost: seed 3 missing from one of them must not pair seed 4 with 3."""
    a = Sample(noisy(1.0, 0.1), seeds="paired", seed_ids=(1, 2, 3))
    b = Sample(noisy(1.0, 0.1, seed=1), seeds="paired", seed_ids=(1, 2, 4))
    with pytest.raises(ValueError, match=r"different seeds: \[1, 2, 3\] and \[1, 2, 4\]"):
        bootstrap({"a": a, "b": b})
    with pytest.raises(ValueError, match="3 seed rows got 2 seed ids"):
        Sample(noisy(1.0, 0.1), seed_ids=(1, 2))


def test_non_finite_replicates_are_counted_and_shown():
    """The log of a mean whose interval crosses 0: the replicates below 0 give NaN; they are counted and the
    formatted estimate says how many, instead of an interval silently made from the rest."""
    est = bootstrap({"a": Sample(noisy(0.02, 1.0, seed=9))})["a"]
    with np.errstate(invalid="ignore"):
        logged = combine(lambda y: np.log(y[..., 0]), [est])
    assert 0 < logged.nonfinite < len(logged.replicates)
    assert f"({logged.nonfinite} of {len(logged.replicates)} replicates not finite)" in logged.format()


def test_the_onset_below_the_control_band_needs_a_run_of_steps():
    """A run that dips below the control band for 3 steps at step 100 (noise) and stays below from step 300: with
    a run of 10 steps the onset is 300, the first step of the run; with a run of 3 it is the dip."""
    steps = np.arange(600)
    band_low = np.full(600, 2.0)
    v = np.full(600, 2.1)
    v[100:103] = 1.9
    v[300:] = 0.5
    assert first_below_band(steps, v, steps, band_low, 10) == 300
    assert first_below_band(steps, v, steps, band_low, 3) == 100
    assert first_below_band(steps, np.full(600, 2.1), steps, band_low, 10) is None
    assert first_below_band(steps[::2], v[::2], steps, band_low, 10) == 300  # read at the shared steps


def test_level_sds_sum_each_levels_parts():
    """The windows' and the seeds' shares of an estimate's spread: the root of each level's summed part variances."""
    import numpy as np

    from tinygpt.analysis.stats import Estimate, level_sds

    a, b, c = np.array([-1.0, 1.0]), np.array([-2.0, 2.0]), np.array([-0.5, 0.5])
    est = Estimate(0.0, -1.0, 1.0, parts={"windows:x": (a, 9), "windows:y": (b, 9), "seeds:x": (c, 2)})
    sds = level_sds(est)
    assert sds["windows"] == pytest.approx(np.sqrt(1 + 4)) and sds["seeds"] == pytest.approx(0.5)


def test_a_quantity_that_falls_then_rises_outside_noise_is_said_not_to_be_monotone():
    """The copy loss's shape (0.0046, 0.0038, 0.0051, each step outside noise): its fit slope may be within noise,
    but 'flat within noise' would hide two real changes."""
    t = make_trend([0.0046, 0.0038, 0.0051], noise=0.0001)
    assert t.steps == (-1, 1) and t.turns
    assert t.words("T").startswith("is not monotone: between neighbouring values it falls, then rises")
    assert not make_trend([0.066, 0.038, 0.018]).turns

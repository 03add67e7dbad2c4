"""The loss onset's rule (design 3) on simulated control seeds whose truth is known: the per-run false-onset rate
on seeds that are controls by construction, and the step a known drop is found at."""

import numpy as np
import pytest

from tinygpt.analysis.stats import first_below_band
from tinygpt.experiments.partial_leaks.onset import exceedances, false_onsets, loss_onset, prediction_bound

STEPS = np.arange(1, 801)


def controls(rng, k: int, offset_sd: float = 0.03, drift_sd: float = 0.03, noise_sd: float = 0.05,
             phi: float = 0.5) -> np.ndarray:
    """K seeds of a causal-like raw training loss (K, 800): a shared decaying curve, a persistent per-seed offset
    that drifts linearly over training (seed effects move consecutive steps together), and AR(1) batch noise."""
    mean = 2.0 + 2.5 * np.exp(-STEPS / 100)
    offset = rng.normal(0, offset_sd, (k, 1)) + rng.normal(0, drift_sd, (k, 1)) * STEPS / STEPS[-1]
    shocks = rng.normal(0, noise_sd * np.sqrt(1 - phi**2), (k, len(STEPS)))
    noise = np.empty_like(shocks)
    noise[:, 0] = rng.normal(0, noise_sd, k)
    for t in range(1, len(STEPS)):
        noise[:, t] = phi * noise[:, t - 1] + shocks[:, t]
    return mean + offset + noise


def test_the_bound_puts_one_more_gaussian_seed_below_it_at_rate_alpha():
    rng = np.random.default_rng(0)
    draws = rng.normal(3.0, 0.2, (20000, 6))  # 20000 steps, 5 controls and one more seed at each
    below = draws[:, 5] < prediction_bound(draws[:, :5].T, 0.05)
    assert below.mean() == pytest.approx(0.05, abs=0.006)


def test_a_control_seed_leaves_the_band_at_most_5_percent_of_runs():
    """Design 3's rule (alpha 0.01, a run of 10) on 400 simulated sweeps of 6 control seeds: one seed against the
    other 5, as a causal-like leaky arm would be. Design 2's rule (below the lowest control, a run of 10) on the same
    sweeps fires far more often: the failure the referee found (1 of 5 causal seeds)."""
    rng = np.random.default_rng(1)
    new = old = 0
    n = 400
    for _ in range(n):
        c = controls(rng, 6)
        new += loss_onset(STEPS, c[5], STEPS, c[:5], 0.01, 10) is not None
        old += first_below_band(STEPS, c[5], STEPS, c[:5].min(0), 10) is not None
    assert new / n <= 0.05
    assert old / n >= 0.10


def test_false_onsets_is_the_rule_on_each_control_against_the_others():
    rng = np.random.default_rng(2)
    c = controls(rng, 5)
    c[2, 300:] -= 1.0  # one "control" that leaks from step 301: found there, and only it
    found = false_onsets(STEPS, c, 0.01, 10)
    assert found[2] == 301 and [f for i, f in enumerate(found) if i != 2] == [None] * 4


def test_a_known_drop_is_found_where_it_leaves_the_band():
    """A leaky run that follows a control seed's curve and then falls by 0.6 nats over 60 steps from step 301 leaves
    the band while it falls (steps 301-360), never before it: the bound sits about 4 seed sds below the controls'
    mean, so the onset comes when the drop has passed that much."""
    rng = np.random.default_rng(3)
    hits = []
    for _ in range(50):
        c = controls(rng, 6)
        run = c[5].copy()
        run[300:360] -= np.linspace(0, 0.6, 60)
        run[360:] -= 0.6
        hits.append(loss_onset(STEPS, run, STEPS, c[:5], 0.01, 10))
    assert all(h is not None for h in hits)
    assert min(hits) >= 301 and max(hits) <= 360


def test_two_controls_are_the_least_a_bound_can_use():
    with pytest.raises(ValueError, match="at least 2 control seeds, got 1"):
        prediction_bound(np.ones((1, 5)), 0.01)


def test_exceedances_count_steps_below_the_others_bound_and_the_longest_run():
    c = np.array([[2.0, 2.1, 1.9, 2.0, 2.05, 1.95]] * 4) + np.array([[0.0], [0.01], [-0.01], [0.02]])
    c[3, 2:5] = 0.5  # three steps in a row far below the others
    rate, longest = exceedances(c, 0.01)[3]
    assert (rate, longest) == (0.5, 3)

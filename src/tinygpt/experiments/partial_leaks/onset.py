"""When a leak shows in the training loss: the loss onset of Experiment 3's prediction 2 (design 3).

A run *leaves its control's band* at the first logged step from which its raw training loss stays below the
controls' lower prediction bound for ``run`` consecutive logged steps. The bound at each step is the one-sided
(1 - alpha) prediction bound for one more seed of the control arm, from the K control seeds' raw losses at that
step:

    bound(t) = mean_k L_k(t) - t_{1-alpha, K-1} * sd_k L_k(t) * sqrt(1 + 1/K)

For Gaussian seeds this puts a new control seed below the bound at one step with probability exactly alpha, so
the rule answers the question it is used for ("is this run outside what a causal seed does?") at a known rate per
step. Design 2's rule (below the *lowest* control seed, mean - ~1.16 sd for 5 seeds) fired on 1 of 5 causal seeds:
per-seed offsets make consecutive steps move together, so ten steps in a row were far likelier than the (1/6)^10
the config had assumed. ``false_onsets`` measures the per-run rate on the control seeds themselves (each against
the others), and tests/experiments/partial_leaks/test_onset.py bounds it on simulated controls with persistent
seed offsets.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats as scipy_stats

from tinygpt.analysis.stats import first_below_band


def prediction_bound(losses: np.ndarray, alpha: float) -> np.ndarray:
    """The lower (1 - alpha) prediction bound for one more seed at each step, from ``losses`` (K seeds, S steps),
    K >= 2."""
    losses = np.asarray(losses, dtype=np.float64)  # (K, S)
    k = losses.shape[0]
    if k < 2:
        raise ValueError(f"a prediction bound needs at least 2 control seeds, got {k}")
    q = float(scipy_stats.t.ppf(1 - alpha, k - 1))
    return losses.mean(0) - q * losses.std(0, ddof=1) * math.sqrt(1 + 1 / k)  # (S,)


def loss_onset(steps, values, control_steps, controls: np.ndarray, alpha: float, run: int) -> int | None:
    """The first logged step from which ``values`` (one run's raw loss at ``steps``) stays below the controls'
    prediction bound (``controls``: K seeds x the ``control_steps``) for ``run`` consecutive logged steps they
    share; None if it never does."""
    return first_below_band(steps, values, control_steps, prediction_bound(controls, alpha), run)


def false_onsets(control_steps, controls: np.ndarray, alpha: float, run: int) -> list[int | None]:
    """The rule applied to each control seed against the others (leave one out: K - 1 controls): the step at which
    it would call a causal seed leaky, None where it does not. Its count of steps over K is the per-run false-onset
    rate on these seeds (with K - 1 controls, a slightly wider bound than the analysis's K)."""
    controls = np.asarray(controls, dtype=np.float64)  # (K, S)
    out = []
    for i in range(controls.shape[0]):
        others = np.delete(controls, i, axis=0)  # (K - 1, S)
        out.append(loss_onset(control_steps, controls[i], control_steps, others, alpha, run))
    return out


def exceedances(controls: np.ndarray, alpha: float) -> list[tuple[float, int]]:
    """Per control seed, against the others' bound (leave one out): the fraction of logged steps at which it lies
    below the bound (alpha, if the bound is calibrated) and its longest run of consecutive such steps (what the
    onset's run must exceed)."""
    controls = np.asarray(controls, dtype=np.float64)  # (K, S)
    out = []
    for i in range(controls.shape[0]):
        below = controls[i] < prediction_bound(np.delete(controls, i, axis=0), alpha)  # (S,)
        longest = run = 0
        for b in below.tolist():
            run = run + 1 if b else 0
            longest = max(longest, run)
        out.append((float(below.mean()), longest))
    return out

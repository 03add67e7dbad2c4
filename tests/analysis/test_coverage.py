"""Do the reports' 95% intervals cover the truth 95% of the time? Simulated sweeps with known truth.

Each dataset is a crossed design as a sweep makes it: S seeds (runs) x N validation windows shared by every run,
value = truth + seed effect + window effect + window-by-seed noise, all Gaussian. The cases a report meets: a mean
where the windows dominate (one arm's validation loss), a mean where the seeds dominate (a quantity that differs
run to run more than window to window), one where the two levels are of one size (where the degrees of freedom
matter most), and the difference of two arms on the same windows (the window effect cancels, each arm's own seeds
remain: where most verdicts live). At S = 3 and 5 the nominal 95%
interval must cover the truth in at least 93% of the datasets and at most 99% (not absurdly wide). The percentile
bootstrap that resampled 3 seeds covered 73% (seed-dominated) and 76% (paired differences) in the same simulation.
"""

import numpy as np
import pytest

from tinygpt.analysis.stats import Sample, bootstrap

N_WINDOWS = 256
N_DATASETS = 400
N_BOOT = 2000
TRUTH = 2.0
DELTA = 0.1

CASES = {  # sd of the seed effect, the window effect and the window-by-seed noise
    "window-dominated": (0.01, 1.5, 0.3),
    "seed-dominated": (0.3, 0.05, 0.5),
    "seeds and windows alike": (0.1, 1.5, 0.5),  # 0.01 / S against 2.25 / 256: the two levels of one size
    "paired difference": (0.2, 1.5, 0.5),
}


def arm(rng, S, sd_seed, window_effect, sd_noise, mean):
    return (mean + sd_seed * rng.standard_normal((S, 1)) + window_effect[None, :]
            + sd_noise * rng.standard_normal((S, N_WINDOWS)))  # (S, N)


def covered(case: str, S: int, rng) -> bool:
    sd_seed, sd_window, sd_noise = CASES[case]
    windows = sd_window * rng.standard_normal(N_WINDOWS)  # (N,): shared by every run
    seed = int(rng.integers(2**31))
    if case != "paired difference":
        est = bootstrap({"a": Sample(arm(rng, S, sd_seed, windows, sd_noise, TRUTH))}, n_boot=N_BOOT, seed=seed)["a"]
        truth = TRUTH
    else:
        a = Sample(arm(rng, S, sd_seed, windows, sd_noise, TRUTH + DELTA), seeds="a")
        b = Sample(arm(rng, S, sd_seed, windows, sd_noise, TRUTH), seeds="b")
        e = bootstrap({"a": a, "b": b}, n_boot=N_BOOT, seed=seed)
        est, truth = e["a"] - e["b"], DELTA
    return est.lo <= truth <= est.hi


@pytest.mark.parametrize("S", [3, 5])
@pytest.mark.parametrize("case", list(CASES))
def test_the_95_percent_interval_covers_the_truth_95_percent_of_the_time(case, S):
    rng = np.random.default_rng(1000 * S + list(CASES).index(case))
    coverage = np.mean([covered(case, S, rng) for _ in range(N_DATASETS)])
    assert 0.93 <= coverage <= 0.99, f"{case}, S = {S}: coverage {coverage:.3f}"

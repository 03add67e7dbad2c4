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


# ----------------------------------------------------------------------------- Experiment 2's curve measures

XS = np.arange(-12, -5) / 3  # log10(lr): the design's ladder
CURVES = {"a": (-3.0, 0.6), "b": (-3.3, 0.9)}  # (best log10 lr, curvature): a wider basin and a higher optimum


def lr_curve(x0, k):
    return 2.2 + k * (XS - x0) ** 2 + 0.3 * np.maximum(XS - x0, 0) ** 3  # asymmetric, like a real basin


def curve_measures_covered(rng, S=5, sd_seed=0.05, n_windows=128):
    """Two arms' learning-rate curves, each cell a crossed sample: a seed effect that has its own offset, slope
    and rate-by-rate part, a window effect shared by every run, and noise. Is the truth of the width difference
    and of the optimum difference inside their intervals?"""
    from tinygpt.experiments.sqrt_dk import lr_basin
    from tinygpt.analysis.stats import combine

    windows = 0.2 * rng.standard_normal(n_windows)
    samples, truth = {}, {}
    for name, (x0, k) in CURVES.items():
        curve = lr_curve(x0, k)
        truth[name] = (lr_basin.width(XS, curve, 0.1), lr_basin.optimum(XS, curve)[0])
        seed_part = (sd_seed * rng.standard_normal((S, 1)) * (1 + XS - XS.mean())
                     + sd_seed * rng.standard_normal((S, len(XS))))  # (S, L)
        for i in range(len(XS)):
            v = curve[i] + seed_part[:, i:i + 1] + windows[None, :] + 0.05 * rng.standard_normal((S, n_windows))
            samples[(name, i)] = Sample(v, seeds="runs", seed_ids=tuple(range(S)))
    est = bootstrap(samples, n_boot=1000, seed=int(rng.integers(2**31)))
    cells = [est[(n, i)] for n in CURVES for i in range(len(XS))]
    L = len(XS)
    dw = combine(lambda y: lr_basin.width(XS, y[..., :L], 0.1) - lr_basin.width(XS, y[..., L:], 0.1), cells)
    do = combine(lambda y: lr_basin.optimum(XS, y[..., :L])[0] - lr_basin.optimum(XS, y[..., L:])[0], cells)
    return (dw.lo <= truth["a"][0] - truth["b"][0] <= dw.hi), (do.lo <= truth["a"][1] - truth["b"][1] <= do.hi)


@pytest.mark.slow
def test_the_basin_width_and_optimum_differences_cover_their_truth():
    """The same calibration carried through the curve measures (a minimum, a vertex, interpolated edges: not
    smooth in the data). 400 datasets (Monte Carlo SE about 1.1%); separate runs of 150 gave 96.7% and 99.3%
    (width) and 95.3% and 96.0% (optimum) at seed sds 0.03 and 0.08; this seed, 97.3% and 96.8% (the basin edges
    move continuously with the losses since the vertex is a point of the curve)."""
    rng = np.random.default_rng(7)
    hits = np.array([curve_measures_covered(rng) for _ in range(400)])  # (400, 2)
    width, opt = hits.mean(0)
    print(f"coverage: width difference {width:.3f}, optimum difference {opt:.3f}")
    assert 0.93 <= width <= 1.0 and 0.93 <= opt <= 1.0, (width, opt)

"""Do the reports' 95% intervals cover the truth 95% of the time? Simulated sweeps with known truth.

Each dataset is a crossed design as a sweep makes it: S seeds (runs) x N validation windows shared by every run,
value = truth + seed effect + window effect + window-by-seed noise, all Gaussian. The cases a report meets: a mean
where the windows dominate (one arm's validation loss), a mean where the seeds dominate (a quantity that differs
run to run more than window to window), one where the two levels are of one size (where the degrees of freedom
matter most), and the difference of two arms on the same windows (the window effect cancels, each arm's own seeds
remain: where most verdicts live). At S = 3 and 5 the nominal 95%
interval must cover the truth in at least 93% of the datasets and at most 99% (not absurdly wide). The percentile
bootstrap that resampled 3 seeds covered 73% (seed-dominated) and 76% (paired differences) in the same simulation.

Where the intervals do not hold: a paired difference in which one arm's seeds split between two outcomes (a seed
collapses or diverges with probability 0.2, as next to a learning-rate cliff or a leak's onset). With 5 seeds no
seed shows the other outcome in 0.8^5 = 33% of sweeps, and then nothing in the data points to it: no interval
computed from those seeds can reach the truth. The test below measures this (about 76% overall, near 30% when no
seed collapsed, 99% when one did), which is why the reports give the per-seed outcome counts beside such numbers.
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


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
@pytest.mark.parametrize("S", [3, 5])
@pytest.mark.parametrize("case", list(CASES))
def test_the_95_percent_interval_covers_the_truth_95_percent_of_the_time(case, S):
    rng = np.random.default_rng(1000 * S + list(CASES).index(case))
    coverage = np.mean([covered(case, S, rng) for _ in range(N_DATASETS)])
    assert 0.93 <= coverage <= 0.99, f"{case}, S = {S}: coverage {coverage:.3f}"


def split_covered(rng, S: int = 5, p: float = 0.2, jump: float = 1.0, sd_seed: float = 0.1) -> tuple[bool, int]:
    """A paired difference whose arm a's seeds each collapse with probability p (its loss up by ``jump``): is the
    truth (DELTA + p jump) inside the interval, and how many seeds collapsed?"""
    windows = 1.5 * rng.standard_normal(N_WINDOWS)
    collapsed = rng.random((S, 1)) < p  # (S, 1)
    a = arm(rng, S, sd_seed, windows, 0.5, TRUTH + DELTA) + jump * collapsed
    b = arm(rng, S, sd_seed, windows, 0.5, TRUTH)
    e = bootstrap({"a": Sample(a, seeds="a"), "b": Sample(b, seeds="b")}, n_boot=1000, seed=int(rng.integers(2**31)))
    est = e["a"] - e["b"]
    return est.lo <= DELTA + p * jump <= est.hi, int(collapsed.sum())


def test_a_difference_next_to_a_cliff_covers_only_when_a_seed_shows_the_other_outcome():
    """The case the intervals do not cover (module docstring): measured, so that the reports' caveat says what is
    true. Overall well below 95%; when no seed collapsed (about a third of sweeps at p = 0.2, S = 5) mostly missed;
    when one did, covered."""
    rng = np.random.default_rng(3)
    hits, counts = map(np.array, zip(*(split_covered(rng) for _ in range(N_DATASETS)), strict=True))
    none = counts == 0
    assert 0.25 <= none.mean() <= 0.42  # 0.8^5 = 0.33
    assert 0.65 <= hits.mean() <= 0.85, hits.mean()
    assert hits[none].mean() <= 0.5 and hits[~none].mean() >= 0.93, (hits[none].mean(), hits[~none].mean())


# ----------------------------------------------------------------------------- Experiment 2's curve measures

XS = np.arange(-12, -5) / 3  # log10(lr): the design's ladder
FINE = np.linspace(XS[0], XS[-1], 20001)  # the true curve, between the ladder's rates
CURVES = {"a": (-3.0, 0.6), "b": (-3.3, 0.9)}  # (best log10 lr, curvature): a wider basin and a higher optimum
DIVERGED = 4.5  # the loss a diverged seed reports at a rate past the cliff


def lr_curve(x0, k, xs=XS):
    return 2.2 + k * (xs - x0) ** 2 + 0.3 * np.maximum(xs - x0, 0) ** 3  # asymmetric, like a real basin


def true_measures(curve_fine: np.ndarray, delta: float = 0.1) -> tuple[float, float]:
    """The basin's width and the optimum of the true (mean) curve, on the fine grid: not the ladder's vertex, so a
    shape error of the estimator counts against its coverage."""
    i = int(curve_fine.argmin())
    inside = FINE[curve_fine <= curve_fine[i] + delta]
    return float(inside[-1] - inside[0]), float(FINE[i])


def curve_measures_covered(rng, case: str = "smooth", S=5, sd_seed=0.05, n_windows=128, p=0.2):
    """Two arms' learning-rate curves, each cell a crossed sample: a seed effect that has its own offset, slope
    and rate-by-rate part, a window effect shared by every run, and noise. Arm a's seeds may split: ``cliff``, each
    seed diverges (DIVERGED) at every rate more than half a decade past its optimum with probability p; ``bimodal``,
    each seed's optimum sits a third of a decade higher with probability p. The truth is the mean curve's. Is the
    truth of the width difference and of the optimum difference inside their intervals?"""
    from tinygpt.experiments.sqrt_dk import lr_basin
    from tinygpt.analysis.stats import combine

    windows = 0.2 * rng.standard_normal(n_windows)
    samples, truth = {}, {}
    for name, (x0, k) in CURVES.items():
        per_seed = np.repeat(lr_curve(x0, k)[None], S, 0)  # (S, L)
        fine = lr_curve(x0, k, FINE)
        if case == "cliff" and name == "a":
            diverged = rng.random((S, 1)) < p
            per_seed = np.where((XS > x0 + 0.5)[None] & diverged, DIVERGED, per_seed)
            fine = np.where(FINE > x0 + 0.5, (1 - p) * fine + p * DIVERGED, fine)
        if case == "bimodal" and name == "a":
            moved = rng.random((S, 1)) < p
            per_seed = np.where(moved, lr_curve(x0 + 1 / 3, k)[None], per_seed)
            fine = (1 - p) * fine + p * lr_curve(x0 + 1 / 3, k, FINE)
        truth[name] = true_measures(fine)
        seed_part = (sd_seed * rng.standard_normal((S, 1)) * (1 + XS - XS.mean())
                     + sd_seed * rng.standard_normal((S, len(XS))))  # (S, L)
        for i in range(len(XS)):
            v = (per_seed[:, i:i + 1] + seed_part[:, i:i + 1] + windows[None, :]
                 + 0.05 * rng.standard_normal((S, n_windows)))  # (S, N)
            samples[(name, i)] = Sample(v, seeds="runs", seed_ids=tuple(range(S)))
    est = bootstrap(samples, n_boot=1000, seed=int(rng.integers(2**31)))
    cells = [est[(n, i)] for n in CURVES for i in range(len(XS))]
    L = len(XS)
    dw = combine(lambda y: lr_basin.width(XS, y[..., :L], 0.1) - lr_basin.width(XS, y[..., L:], 0.1), cells)
    do = combine(lambda y: lr_basin.optimum(XS, y[..., :L])[0] - lr_basin.optimum(XS, y[..., L:])[0], cells)
    return (dw.lo <= truth["a"][0] - truth["b"][0] <= dw.hi), (do.lo <= truth["a"][1] - truth["b"][1] <= do.hi)


@pytest.mark.slow
@pytest.mark.parametrize("case", ["smooth", "cliff"])
def test_the_basin_width_and_optimum_differences_cover_their_truth(case):
    """The same calibration carried through the curve measures (a minimum, a vertex, interpolated edges: not
    smooth in the data), against the true curve's optimum and width (not the ladder's vertex: the estimator's
    shape error counts), held to the glossary's 93-99%; also with a cliff past the optimum where seeds diverge
    (the cells beside it split between outcomes, but the basin's measures do not reach them), where the width's
    interval runs wide (99.5% at this seed: the glossary says so). 400 datasets (Monte Carlo SE about 1.1%)."""
    rng = np.random.default_rng(7)
    hits = np.array([curve_measures_covered(rng, case) for _ in range(400)])  # (400, 2)
    width, opt = hits.mean(0)
    print(f"{case}: coverage: width difference {width:.3f}, optimum difference {opt:.3f}")
    assert 0.93 <= width <= (0.99 if case == "smooth" else 0.995) and 0.93 <= opt <= 0.99, (width, opt)


@pytest.mark.slow
def test_an_optimum_of_split_seeds_covers_less():
    """Where a fifth of an arm's seeds have their optimum a third of a decade higher, the optimum difference's
    interval covers the mean curve's less often than 95% (the reports' caveat for split seeds); the width's
    still holds."""
    rng = np.random.default_rng(7)
    hits = np.array([curve_measures_covered(rng, "bimodal") for _ in range(400)])  # (400, 2)
    width, opt = hits.mean(0)
    print(f"bimodal: coverage: width difference {width:.3f}, optimum difference {opt:.3f}")
    assert 0.93 <= width <= 0.995 and 0.85 <= opt < 0.95, (width, opt)

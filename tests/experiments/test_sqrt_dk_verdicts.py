"""Design 2's verdict words on synthetic sweeps whose answer is known by construction: a softmax measure that falls
with d_k without the factor and stays with it, a gradient ratio that grows, a control equal to (or away from) the
scaled arm, float16 runs that overflow where the scale sits, and loss spikes."""

import numpy as np
import pytest

from tinygpt.analysis.stats import Sample, bootstrap, combine, trend
from tinygpt.experiments.sqrt_dk.verdicts import (FP16_MAX, Fp16Run, batch_overflow, equivalent, float32_reruns,
                                                  gradient_at_init, loss_spikes, matches, placement, saturation, side)

D_K = (16, 64, 256)
SEEDS = 5


def runs(values_by_arm: dict, noise: float, seed: int = 0) -> dict:
    """{arm: per-run values (seeds,)} with multiplicative noise, as one-window Samples: the seed level alone."""
    rng = np.random.default_rng(seed)
    samples = {arm: Sample((np.asarray(v, float) * (1 + noise * rng.standard_normal(SEEDS)))[:, None])
               for arm, v in values_by_arm.items()}
    return bootstrap(samples)


def measure(unscaled, scaled, noise=0.02, seed=0):
    """Per-d_k arms of a measure (the Jacobian trace or the softmax gain): {(scale, d_k): Estimate}."""
    arms = {("none", d): [unscaled(d)] * SEEDS for d in D_K} | {("sqrt", d): [scaled(d)] * SEEDS for d in D_K}
    return runs(arms, noise, seed)


def m1(est, band=0.05):
    return saturation(est[("none", 256)] - est[("none", 16)], est[("sqrt", 256)] - est[("sqrt", 16)], band)


def test_a_softmax_measure_that_falls_with_d_k_only_without_the_factor_holds():
    """The premise by construction: unscaled trace ~ d_k^-1/2 (0.56 at 16, 0.14 at 256), scaled flat at 0.95."""
    est = measure(lambda d: 0.56 * (d / 16) ** -0.5, lambda d: 0.95)
    assert m1(est) == "holds"
    assert trend(D_K, [est[("none", d)] for d in D_K]).word == "falls"
    assert trend(D_K, [est[("sqrt", d)] for d in D_K]).word == "flat within noise"


def test_a_gradient_gain_that_falls_with_d_k_by_construction_is_read_as_saturation():
    """The same verdict on the softmax gain ||dL/dS|| / ||dL/dP||, built to fall as d_k^-1/2 without the factor."""
    est = measure(lambda d: 0.5 * (d / 16) ** -0.5, lambda d: 0.5, noise=0.03, seed=4)
    assert m1(est) == "holds"


@pytest.mark.parametrize("unscaled, scaled, expected", [
    (lambda d: 0.56, lambda d: 0.95, "undecided"),  # no saturation without the factor: the fall is not there
    (lambda d: 0.56 * (d / 16) ** 0.3, lambda d: 0.95, "fails"),  # it rises: the premise's direction is wrong
    (lambda d: 0.56 * (d / 16) ** -0.5, lambda d: 0.95 * (d / 16) ** -0.2, "fails"),  # the factor does not hold it
])
def test_the_saturation_verdict_is_undecided_or_fails_where_the_construction_says(unscaled, scaled, expected):
    assert m1(measure(unscaled, scaled)) == expected


def test_with_noise_too_large_for_three_seeds_the_equivalence_is_undecided_not_held():
    est = measure(lambda d: 0.56 * (d / 16) ** -0.5, lambda d: 0.95, noise=0.3, seed=2)
    assert equivalent(est[("sqrt", 256)] - est[("sqrt", 16)], 0.05) == "undecided"


def test_the_gradient_at_init_verdict_reads_a_ratio_above_one_that_grows():
    log = runs({"none16": [3.0] * SEEDS, "sqrt16": [1.0] * SEEDS, "none256": [20.0] * SEEDS,
                "sqrt256": [1.0] * SEEDS}, noise=0.05)  # the ratios measured at init: about 3 and 20
    top = combine(lambda y: np.log(y[..., 0] / y[..., 1]), [log["none256"], log["sqrt256"]])
    growth = combine(lambda y: np.log(y[..., 0] / y[..., 1]) - np.log(y[..., 2] / y[..., 3]),
                     [log["none256"], log["sqrt256"], log["none16"], log["sqrt16"]])
    assert gradient_at_init(top, growth) == "holds"
    shrunk = combine(lambda y: np.log(y[..., 1] / y[..., 0]), [log["none256"], log["sqrt256"]])  # ratio below 1
    assert gradient_at_init(shrunk, growth) == "fails"


def test_a_control_equal_to_the_scaled_arm_matches_and_one_shifted_does_not():
    same = runs({"control": [2.0] * SEEDS, "scaled": [2.0] * SEEDS, "lr_c": [-2.5] * SEEDS,
                 "lr_s": [-2.5] * SEEDS}, noise=0.002, seed=3)
    assert matches(same["control"] - same["scaled"], same["lr_c"] - same["lr_s"], 0.05, 1 / 6) == "holds"
    shifted = runs({"control": [2.3] * SEEDS, "scaled": [2.0] * SEEDS, "lr_c": [-2.5] * SEEDS,
                    "lr_s": [-2.5] * SEEDS}, noise=0.002, seed=3)
    assert matches(shifted["control"] - shifted["scaled"], shifted["lr_c"] - shifted["lr_s"], 0.05, 1 / 6) == "fails"
    assert side(shifted["control"] - shifted["scaled"], +1) == "holds"
    assert side(shifted["control"] - shifted["scaled"], -1) == "fails"


def fp16(placement_, lr, seed, inf=False, diverged=False):
    return Fp16Run(placement_, lr, seed, inf, diverged)


def test_the_placement_verdict_needs_an_overflow_to_remove():
    pairs = [fp16("scores", 1e-2, 11, inf=True), fp16("qk", 1e-2, 11), fp16("scores", 1e-2, 12), fp16("qk", 1e-2, 12)]
    assert placement(pairs) == "holds"
    assert placement([*pairs[1:], fp16("scores", 1e-2, 11)]) == "undecided"  # no run overflowed
    assert placement([*pairs, fp16("qk", 2.154e-2, 13, inf=True)]) == "fails"
    assert placement([fp16("scores", 1e-2, 11, inf=True), fp16("qk", 1e-2, 12)]) == "undecided"  # not the same run


def test_float32_reruns_decide_whether_float16_caused_a_divergence():
    assert float32_reruns([(True, False), (False, None), (True, False)]) == "holds"
    assert float32_reruns([(True, False), (True, True)]) == "fails"
    assert float32_reruns([(False, None), (False, None)]) == "undecided"  # nothing diverged in float16
    assert float32_reruns([(True, None)]) == "undecided"  # the rerun is missing


def test_loss_spikes_count_rises_above_the_running_minimum_after_warmup():
    steps = list(range(10))
    falling = [4.0, 3.5, 3.0, 2.8, 2.7, 2.6, 2.5, 2.45, 2.4, 2.35]
    assert loss_spikes(steps, falling, after=2, nats=0.5) == 0
    spiky = [4.0, 3.5, 3.0, 2.8, 3.5, 2.6, 2.5, float("nan"), 2.4, 3.0]  # +0.7 at 4, NaN at 7, +0.6 at 9
    assert loss_spikes(steps, spiky, after=2, nats=0.5) == 3
    assert loss_spikes(steps, spiky, after=5, nats=0.5) == 2  # the warmup's spike is not counted
    assert loss_spikes(steps[::-1], spiky[::-1], after=2, nats=0.5) == 3  # order of the log rows does not matter
    drifting = [4.0, 9.0, 3.0, 2.0, 2.2, 2.4, 2.6, 2.8, 2.9, 3.0]  # 9.0 > 4.0 + 0.5; then 2.6 ... 3.0 > 2.0 + 0.5
    assert loss_spikes(steps, drifting, after=0, nats=0.5) == 5  # a slow rise counts at every step past the margin


def test_steps_to_a_threshold_is_the_first_step_whose_trailing_mean_is_below_it():
    from tinygpt.experiments.sqrt_dk.verdicts import steps_to

    losses = [4.0 - 0.01 * s for s in range(300)]  # the mean of steps s-9 .. s is 4 - 0.01 (s - 4.5)
    assert steps_to(range(300), losses, threshold=3.0, window=10, budget=300) == 105  # 4 - 0.01 * 100.5 < 3
    assert steps_to(range(300), losses, threshold=3.0, window=1, budget=300) == 101
    assert steps_to(range(300), losses, threshold=0.5, window=10, budget=300) == 300  # never: the budget
    nan = [*losses[:50], float("nan"), *losses[51:]]  # a non-finite loss ends the count
    assert steps_to(range(300), nan, threshold=3.0, window=10, budget=300) == 300
    assert steps_to([5, 3, 4, 1, 2], [1.0, 1.0, 1.0, 9.0, 9.0], threshold=2.0, window=2, budget=9) == 4  # by step

def test_a_cell_whose_seeds_split_between_diverging_and_not_is_marked():
    """One of three runs at 1e-2 diverged, none at 1e-3 and all at 1e-1: only the 1e-2 cell is split."""
    from types import SimpleNamespace

    from tinygpt.experiments.sqrt_dk.report import split_cells

    def run(diverged):
        return SimpleNamespace(summary={"diverged": diverged, "val_loss": float("nan") if diverged else 2.0})

    curve = SimpleNamespace(runs={-3.0: [run(False)] * 3, -2.0: [run(True), run(False), run(False)],
                                  -1.0: [run(True)] * 3})
    assert split_cells(curve) == {-2.0: (1, 3)}


def test_f1_per_run_predicts_the_batch_whose_product_overflows_and_can_fail_every_way():
    """Amendment 4's F1 on constructed runs: the formed product grows batch by batch; the loss is predicted
    non-finite at the first batch past 65,504 (within 1% either way), never before, never without one."""
    grows = [10_000.0 * 1.5 ** b for b in range(10)]  # 50,625 at batch 4, 75,938 at 5: no batch within 1%
    assert next(b for b, v in enumerate(grows) if v > FP16_MAX) == 5  # 75,938
    right = batch_overflow(grows, 5)
    assert (right.verdict, right.first_possible, right.first_certain, right.formed_at) == ("holds", 5, 5, grows[5])
    early = batch_overflow(grows, 3)  # non-finite while every product was finite: not the overflow
    assert early.verdict == "fails" and early.why.startswith("non-finite with every formed product")
    late = batch_overflow(grows, 7)  # an overflowed product at 5 did not end it
    assert late.verdict == "fails" and late.why.startswith("went on past")
    assert batch_overflow(grows, None).verdict == "fails"  # completed although batch 5 overflowed
    small = [100.0] * 300
    assert batch_overflow(small, None).verdict == "holds" and batch_overflow(small, None).first_possible is None
    assert batch_overflow(small, 64).why == "non-finite with every formed product up to then below 65,504"
    edge = [60_000.0, 65_000.0, 65_600.0, 70_000.0]  # 65,000 and 65,600 lie within 1% of 65,504: either way
    assert (batch_overflow(edge, 1).verdict, batch_overflow(edge, 2).verdict, batch_overflow(edge, 3).verdict) == (
        "holds", "holds", "holds")
    assert batch_overflow(edge, 0).verdict == "fails" and batch_overflow(edge, None).verdict == "fails"
    near = [60_000.0, 65_000.0, 65_100.0]  # never surely past: completing holds, so does going non-finite at 1
    assert batch_overflow(near, None).verdict == "holds" and batch_overflow(near, 2).verdict == "holds"


"""Experiment 3's report: its verdict functions on hand-made series, and the whole report on a synthetic sweep
whose answers are known by construction (run dirs written as a real job writes them, read back by the report)."""

import csv
import json

import numpy as np
import pytest

from tinygpt.experiments.partial_leaks import report as pl
from tinygpt.analysis.stats import Estimate
from tinygpt.analysis.sweep import load_runs

STEPS = np.arange(9, 300, 10)  # the stability probes of a fill run


def test_the_fill_opens_where_predicted_when_the_leak_starts_at_the_margins_crossing():
    margins = np.where(STEPS < 80, 5000.0, 12000.0)  # crosses 1e4 - 16 at step 89
    leaks = np.where(STEPS < 80, 0.0, 1.5)
    o = pl.opening(STEPS, margins, leaks, 1e4 - 16, tolerance=1e-4)
    assert (o["predicted"], o["observed"], o["closed_before"], o["verdict"]) == (89, 89, True, "holds")
    assert o["signal_at_open"] == 12000.0
    one_late = pl.opening(STEPS, margins, np.where(STEPS < 90, 0.0, 1.5), 1e4 - 16, tolerance=1e-4)
    assert (one_late["observed"], one_late["verdict"]) == (99, "holds")  # the probe after the predicted one


def test_a_leak_before_the_predicted_probe_or_two_probes_after_it_fails():
    margins = np.where(STEPS < 80, 5000.0, 12000.0)
    early = np.where(STEPS < 60, 0.0, 1.0)  # the leak opens at 69, before the margin passes the fill
    o = pl.opening(STEPS, margins, early, 1e4 - 16, tolerance=1e-4)
    assert (o["predicted"], o["observed"], o["closed_before"], o["verdict"]) == (89, 69, False, "fails")
    late = np.where(STEPS < 100, 0.0, 1.0)  # the margin passed the fill and nothing leaked until 109
    assert pl.opening(STEPS, margins, late, 1e4 - 16, tolerance=1e-4)["verdict"] == "fails"
    # a margin just short of |fill| - slack with no leak, then a leak: the margin never predicted it
    never = pl.opening(STEPS, np.full(len(STEPS), 9980.0), late, 1e4 - 16, tolerance=1e-4)
    assert (never["predicted"], never["verdict"]) == (None, "fails")


def test_the_replacing_fill_opens_when_the_visible_floor_falls_below_the_fill():
    """The visible floor falls from -50 to -12000 at step 129: predicted open there (below -1e4 + 16), whatever
    the mask margin; a leak at 129 holds, a floor that never falls with no leak holds too (never opens)."""
    floor = np.where(STEPS < 120, -50.0, -12000.0)
    o = pl.opening(STEPS, floor, np.where(STEPS < 120, 0.0, 0.8), -1e4 + 16, tolerance=1e-4, above=False)
    assert (o["predicted"], o["observed"], o["closed_before"], o["verdict"]) == (129, 129, True, "holds")
    flat = pl.opening(STEPS, np.full(len(STEPS), -50.0), np.zeros(len(STEPS)), -1e4 + 16, tolerance=1e-4,
                      above=False)
    assert (flat["predicted"], flat["observed"], flat["verdict"]) == (None, None, "holds")


def test_one_threshold_a_leak_at_the_tolerance_is_closed_and_the_backwards_run_counts_counter_examples():
    flat = pl.opening(STEPS, np.full(len(STEPS), 100.0), np.full(len(STEPS), 1e-4), 1e4 - 16, tolerance=1e-4)
    assert (flat["predicted"], flat["observed"], flat["verdict"]) == (None, None, "holds")
    assert pl.first_above([1, 2, 3], [np.nan, 0.5, 2.0], 1.0) == 3  # NaN never counts
    margins = np.array([5000, 12000, 9000, 9000, 12000, 9000.0])
    leaks = np.array([0, 1.0, 0, 1.35, 1.0, 5e-5])
    steps = np.arange(10, 70, 10)
    assert pl.closing(steps, margins, leaks, 20, 1e4 - 16, 1e-4) == (3, 2)  # 1.35 at a closed margin: one


def test_the_honest_rule_is_two_sided():
    assert pl.honest_no_better(Estimate(2.0, 1.9, 2.1)) == "holds"
    assert pl.honest_no_better(Estimate(0.01, -0.02, 0.04)) == "undecided"
    assert pl.honest_no_better(Estimate(-0.3, -0.4, -0.2)) == "fails"


def test_the_false_alarm_bound_is_the_rule_of_three():
    assert pl.false_alarm_bound(292) == pytest.approx(0.0102, abs=2e-4)
    assert pl.false_alarm_bound(15) == pytest.approx(0.181, abs=1e-3)


def estimate(value, lo, hi):
    return Estimate(value, lo, hi)


def test_loss_visibility_words():
    assert pl.loss_visibility(estimate(0.02, 0.01, 0.03), estimate(-2.0, -2.1, -1.9), 0.5) == "collapses"
    assert pl.loss_visibility(estimate(0.6, 0.55, 0.65), estimate(-0.8, -0.9, -0.7), 0.5) == "lower"
    assert pl.loss_visibility(estimate(1.0, 0.99, 1.01), estimate(0.0, -0.01, 0.02), 0.5) == "indistinguishable"
    assert pl.loss_visibility(estimate(1.1, 1.05, 1.15), estimate(0.2, 0.1, 0.3), 0.5) == "higher"
    assert pl.loss_visibility(estimate(0.45, 0.4, 0.52), estimate(-1.0, -1.1, -0.9), 0.5) == "lower"  # not wholly


def test_alarm_verdicts_count_runs_whose_mask_opened():
    """Prediction 4 (design 3): the alarm on every run whose mask opened, on none whose mask never did."""
    assert pl.alarm_verdict([50, 50, 50], [25, 25, 25], first_validation=50) == "holds"
    assert pl.alarm_verdict([50, 100, 50], [25, 25, 25], first_validation=50) == "fails"  # one seed late
    assert pl.alarm_verdict([50, 100, 50], [25, 25, 25]) == "holds"  # no step required
    assert pl.alarm_verdict([50, None], [25, 25]) == "fails"  # one open mask missed
    assert pl.alarm_verdict([None, None], [None, None]) == "holds"  # never opened, never fired
    assert pl.alarm_verdict([None, 300], [None, None]) == "fails"  # an alarm on a mask that never opened
    assert pl.alarm_verdict([150, None], [130, None]) == "holds"  # one seed opened and was caught, one never
    assert pl.alarm_verdict([], []) == "fails"  # nothing to judge


def test_data_status_says_whether_a_seed_had_been_seen():
    assert pl.data_status([31, 32, 33], [1, 2, 3, 4, 5]) == "confirmatory"
    assert pl.data_status([1, 2, 3], [1, 2, 3, 4, 5]) == "exploratory"
    assert pl.data_status([5, 31], [1, 2, 3, 4, 5]) == "mixed"
    assert pl.status_text([5, 31], [1, 2, 3, 4, 5]).startswith("**Partly exploratory.** Seeds 5 of these runs")


def test_opened_is_read_from_the_row_mass_up_to_the_last_validation(tmp_path):
    """A row's future mass first above 1e-4 at probe 130 (steps taken); a mask that opens only after the last
    validation has not opened for the alarm to find."""
    rng = np.random.default_rng(0)
    write_run(tmp_path / "a", "fill_1e4", 1, rng)
    write_run(tmp_path / "b", "fill_where_1e4", 1, rng, opens_after_last_validation=True)
    a, b = load_runs([tmp_path])
    assert pl.opened_step(a, 1e-4) == 90 and pl.opened_step(b, 1e-4) is None


# ----------------------------------------------------------------------------- a synthetic sweep

N, T = 64, 16
BUGS = {"causal": None, "no_mask": None, "off_by_one": {"kind": "off_by_one"},
        "first_layer": {"kind": "no_mask", "layers": [0]}, "fill_1e4": {"kind": "finite_fill", "fill": -1.0e4},
        "fill_where_1e4": {"kind": "replace_fill", "fill": -1.0e4}, "fill_inf": None}
ONSET = {"no_mask": 300, "off_by_one": 150, "first_layer": 300}  # where each leaky arm's training loss drops
FILL_BUGS = ("fill_1e4", "fill_where_1e4")
LR = {"fill_1e4": 1e-2, "fill_where_1e4": 1e-2, "fill_inf": 1e-2}  # a test may move the replacing fill's rate


def config(arm, seed):
    fill = arm.startswith("fill")
    bug = BUGS[arm]
    patch = [{"_target_": "tinygpt.experiments.partial_leaks.bugs.AttentionBug", **bug}] if bug else []
    return {"seed": seed,
            "model": {"block_size": T, "attn": {"causal": arm != "no_mask", "scale": "none" if fill else "sqrt_dk"},
                      "patch": patch},
            "trainer": {"max_steps": 300 if fill else 800, "val_check_interval": 50},
            "optim": {"lr": LR.get(arm, 1e-3)},
            "callbacks": {"leak_alarm": {"_target_": "tinygpt.train.probes.leak_alarm.LeakAlarm", "action": "warn",
                                         "windows": 8, "tolerance": 1e-4, "min_gap": 0.05, "z": 3.0}},
            "prediction": {"collapse_fraction": 0.5, "onset_run": 10, "onset_alpha": 0.01, "onset_fraction": 0.5,
                           "onset_ratio": [0.8, 1.25], "fill_slack": 16, "alarm_first_validation": True,
                           "open_mass": 1e-4, "replace_fill_rule": "visible_floor", "seen_seeds": [7]}}


def write_run(path, arm, seed, rng, early=False, never=False, opens_after_last_validation=False, lr=None):
    path.mkdir(parents=True)
    leaky = arm in ONSET
    tf = np.full((N, T), 0.05 if leaky else (3.1 if arm.startswith("fill") else 2.0)) + rng.normal(0, 0.01, (N, T))
    honest = tf[:16] + (2.3 if leaky else 0.0)
    np.savez(path / "diagnostics.npz", val_window_position=tf.astype(np.float32),
             honest_window_position=honest.astype(np.float32),
             probe_index=np.linspace(0, N - 1, 16).astype(np.int64))
    steps = np.arange(300 if arm.startswith("fill") else 800)
    train = np.where(steps < ONSET[arm], 2.5, 0.05) if leaky else np.full(len(steps), tf.mean())
    # the fills: the first validation after their opening
    detected = 50 if leaky else {"fill_1e4": 100, "fill_where_1e4": 150}.get(arm)
    cfg = config(arm, seed)
    if lr is not None:
        cfg["optim"]["lr"] = lr
    summary = {"status": "completed", "config": cfg, "train_loss": float(train[-30:].mean()),
               "val_loss": float(tf.mean()), "future_leak": 3.0 if leaky or arm in FILL_BUGS else 0.0,
               "attn_future_mass": 0.2 if leaky else 0.0, "steps": int(len(steps)),
               "leak_detected_step": detected, "leak_signal": "future_leak" if detected else None}
    (path / "summary.json").write_text(json.dumps(summary))
    (path / "history").mkdir()
    probes = np.arange(9, len(steps), 10)
    margin = np.where(probes < 80, 5000.0, 12000.0) if arm == "fill_1e4" else np.full(len(probes), 3.0)
    floor = np.where(probes < 120, -50.0, -12000.0) if arm == "fill_where_1e4" else np.full(len(probes), -50.0)
    opens = 60 if early else {"fill_1e4": 80, "fill_where_1e4": 120}.get(arm, 0)
    if never:  # the replacing fill's floor stops short of the fill: nothing opens, nothing leaks, no alarm
        floor, opens = np.where(probes < 120, -50.0, -8400.0), 10**6
        summary["leak_detected_step"], summary["leak_signal"], summary["future_leak"] = None, None, 0.0
        (path / "summary.json").write_text(json.dumps(summary))
    if opens_after_last_validation:  # the mask opens at the very last probe, after the last validation (step 300)
        opens = probes[-1] + 1
    stab_leak = np.where(probes < opens, 0.0, 1.5) if arm in FILL_BUGS else np.full(len(probes), 3.0 * leaky)
    mass = np.where(probes < opens, 0.0, 0.01) if arm in FILL_BUGS else np.full(len(probes), 0.2 * leaky)
    row_max = np.where(mass > 0, 0.5, 0.0)  # the most one row puts on its future keys
    if early:
        mass[probes == 69] = 1e-13  # the unperturbed windows barely leak where the perturbed ones do
        row_max[probes == 69] = 1e-11
    with open(path / "history" / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        keys = ["train/loss", "val/loss", "val/loss_probe", "val/loss_honest", "leak/honest_gap",
                "leak/honest_gap_se", "stab/mask_margin", "stab/future_leak", "stab/max_logit", "stab/future_mass",
                "stab/future_mass_max", "stab/visible_floor"]
        w.writerow(["step", *keys])
        for s in steps:
            row = {"train/loss": train[s]}
            if s % 50 == 0 and s:
                row.update({"val/loss": tf.mean(), "val/loss_probe": tf.mean(), "val/loss_honest":
                            honest.mean(), "leak/honest_gap": 2.3 if leaky else 0.0, "leak/honest_gap_se": 0.01})
            i = np.nonzero(probes == s)[0]
            if len(i):
                row.update({"stab/mask_margin": margin[i[0]], "stab/future_leak": stab_leak[i[0]],
                            "stab/max_logit": margin[i[0]] + 1000, "stab/future_mass": mass[i[0]],
                            "stab/future_mass_max": row_max[i[0]],
                            "stab/visible_floor": floor[i[0]]})
            w.writerow([s, *(row.get(k, "") for k in keys)])


def write_sweep(root, arms, options=lambda arm, seed: {}, seeds=(1, 2, 3)):
    """A sweep dir of ``arms`` x ``seeds``, each job written by write_run with ``options(arm, seed)``."""
    rng = np.random.default_rng(0)
    for job, (arm, seed) in enumerate((a, s) for a in arms for s in seeds):
        write_run(root / str(job), arm, seed, rng, **options(arm, seed))


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """Every arm of BUGS, three seeds each: the sweep dir."""
    root = tmp_path_factory.mktemp("partial_leaks")
    rng = np.random.default_rng(0)
    job = 0
    for arm in BUGS:
        for seed in (1, 2, 3):
            write_run(root / "sweep" / str(job), arm, seed, rng)
            job += 1
    return root / "sweep"


@pytest.fixture(scope="module")
def report(sweep):
    out = sweep.parent / "report"
    out.mkdir()
    return pl.write_report(load_runs([sweep]), out, [sweep]).read_text()


def test_the_synthetic_sweeps_findings(sweep):
    """The findings object, without rendering (steps are steps taken: the history's 0-based index + 1)."""
    f = pl.compute(load_runs([sweep]))
    assert list(f.arms) == ["causal", "no_mask", "off_by_one", "first_layer", "fill_1e4", "fill_where_1e4", "fill_inf"]
    assert f.seen_words["no_mask"] == "collapses" and f.seen_words["fill_1e4"] == "indistinguishable"
    assert f.seen.verdict == "holds" and f.seen.collapsed == ["no_mask", "off_by_one", "first_layer"]
    assert [(x.arm, x.collapse, x.honest_verdict) for x in f.seen.leaks] == [
        (a, "holds", "holds") for a in ("no_mask", "off_by_one", "first_layer")]
    rows = {r.arm: r for r in f.onset.rows}
    assert rows["off_by_one"].steps == [151] * 3 and rows["off_by_one"].verdict == "fails"
    assert rows["off_by_one"].ratio.value == pytest.approx(151 / 301) and f.onset.off_by_one == "earlier"
    assert rows["first_layer"].verdict == "holds" and rows["no_mask"].verdict == "—" and f.onset.verdict == "fails"
    assert f.onset.shapes is None  # no last-layer or sliding-window arm here
    a = f.alarm
    assert (a.verdict, a.first_val, a.n_causal, a.false, a.opened, a.fired_open, a.closed, a.fired_closed) == (
        "holds", 50, 6, 0, 15, 15, 6, 0)
    assert (a.warned, a.warned_fired) == (12, 12) and a.bound == pytest.approx(pl.false_alarm_bound(6))
    assert (a.fill_opened, a.fill_fired, a.fill_delays) == (6, 6, [])  # the 9 structural runs hold by construction
    words = pl.alarm_words(a)
    assert "fired on 9 of the 9 structural leaks at their first validation" in words
    assert "it caught 6 of the 6 runs whose attention weights opened (on the same windows its probe reads) and " \
           "raised no alarm" in words
    late = pl.Alarm(**{**a.__dict__, "fill_fired": 5, "fill_delays": [120]})
    assert "caught 5 of the 6 runs whose attention weights opened (on the same windows its probe reads) (1 run " \
           "late, caught 120 steps after its opening)" in pl.alarm_words(late)
    fill, replace = f.fills
    assert (fill.arm, fill.verdict, fill.n_open, fill.at_predicted, fill.holds, fill.mass_at) == (
        "fill_1e4", "holds", 3, 3, 3, 3)
    assert (fill.threshold, fill.tol, fill.probe, fill.ctrl_leak, fill.early) == (1e4 - 16, 1e-4, 10, 0.0, [])
    assert pl.mismatch_words(fill) == ""  # no seed opened early
    late_seed = pl.FillSeed(**{**fill.seeds[0].__dict__, "observed": 130, "verdict": "fails", "mass_first": 90})
    early = pl.Fill(**{**fill.__dict__, "early": [(33, 0.0, 1.01), (34, 0.5, 1.2)],
                       "seeds": [fill.seeds[0], late_seed]})
    assert pl.mismatch_words(early) == (
        ": the failures are disagreements between the two readings of 'open'; in 1 seed the leak probe, on perturbed "
        "inputs, read the mask open while the attention weights on the same unperturbed windows put nothing past it; "
        "in 1 seed the attention weights opened at the predicted probe and the leak probe read the opening later")
    s = fill.seeds[0]
    assert (s.predicted, s.observed, s.signal_at_open, s.other, s.max_logit, s.closed_before) == (
        90, 90, 12000.0, -50.0, 13000.0, True)
    assert (replace.arm, replace.verdict, replace.threshold, replace.nearest) == (
        "fill_where_1e4", "holds", -1e4 + 16, -12000.0)
    assert replace.seeds[0].signal_at_open == -12000.0 and replace.seeds[0].observed == 130


def test_the_report_reads_every_arm_from_its_config(tmp_path):
    rng = np.random.default_rng(0)
    for i, arm in enumerate(BUGS):
        write_run(tmp_path / str(i), arm, 1, rng)
    assert [pl.arm_of(r) for r in load_runs([tmp_path])] == list(BUGS)


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_the_synthetic_sweeps_known_answers(report):
    """Steps in the report are steps taken: the history's 0-based index + 1 (a drop at index 300 is step 301)."""
    # every structural leak collapses with a worse honest loss: prediction 1 holds
    assert "Prediction 1 (every structural leak collapses, none has a better honest loss): **holds**" in report
    assert "| no mask | 3 |" in report and "collapses" in report
    # off by one leaves the causal band at half the no-mask onset (fails, earlier); the first-layer arm with it
    row = next(line for line in report.splitlines() if line.startswith("| off by one | 151, 151, 151"))
    assert "| 0.50 [0.50, 0.50] | earlier | fails | 151, 151, 151 |" in row
    row = next(line for line in report.splitlines() if line.startswith("| first layer leaky | 301, 301, 301"))
    assert "| 1.00 [1.00, 1.00] | no difference at the 95% level | holds |" in row
    assert "prediction 2 (each structural leak leaves the causal band when the full one does" in report
    # the alarm: every run whose mask opened, at the first validation; no run whose mask never opened
    assert ("The leak alarm fired on 15 of the 15 runs whose mask opened (a row's future attention mass above 0.0001 "
            "at a stability probe; it warned on 12 of the 12 configured causal=true; the no-mask arm is configured "
            "causal=false, so its leak is recorded without a warning) and on 0 of the 6 runs whose mask never "
            "opened, which here are exactly the -inf controls, where in float32 the future-leak signal is zero and "
            "only the honest-gap rule could fire (0 alarms on the controls: a per-run false-alarm rate below 39%, "
            "one-sided 95%, for the honest-gap rule alone (the controls' future-leak signal is 0 by construction)). "
            "Prediction 4: **holds**.") in report
    assert "**Confirmatory.** These runs' seeds (1, 2, 3) include none of the seeds" in report
    # the added fill opens at the predicted probe in every seed; its control never leaks
    assert "prediction 3 (the leak opens at the predicted probe or the next, in every seed): **holds**; the leak " \
        "opened in 3 of 3 seeds, at the predicted probe in 3, at it or the next in 3" in report
    assert "| 1 | 90 | 90 | 12000 | -50 | 13000 | 12000 | yes | holds | 0, 0 |" in report
    # the replacing fill opens where its visible floor falls below the fill, whatever the margin
    assert "prediction 5 (the leak opens at the predicted probe or the next, in every seed): **holds**; the leak " \
        "opened in 3 of 3 seeds, at the predicted probe in 3, at it or the next in 3" in report
    assert "| 1 | 130 | 130 | -12000 | 3 | 1003 | -12000 | yes | holds | 0, 0 |" in report
    for png in ("curves", "honest", "positions", "future_mass", "fill", "fill_where"):
        assert f"({png}.png)" in report
    assert "## Threats to validity" in report and "## Changes since the last version" in report


def test_a_fill_leak_before_the_predicted_probe_is_explained_with_its_numbers(tmp_path):
    """Seed 2's leak shows at probe 70, before the margin passes the threshold at 90: the prediction fails for it,
    and the report gives the unperturbed windows' future mass and the leak at that probe."""
    write_sweep(tmp_path / "sweep", ("fill_1e4", "fill_inf"),
                lambda arm, seed: {"early": (arm, seed) == ("fill_1e4", 2)})
    (tmp_path / "out").mkdir()
    text = pl.write_report(load_runs([tmp_path / "sweep"]), tmp_path / "out", [tmp_path / "sweep"]).read_text()
    assert ("prediction 3 (the leak opens at the predicted probe or the next, in every seed): **fails**; the leak "
            "opened in 3 of 3 seeds, at the predicted probe in 2, at it or the next in 2 (seed 2 opened at 70 against "
            "the predicted 90 (before it))") in text
    assert "| 2 | 90 | 70 | 5000 | -50 | 6000 | 12000 | **no** | fails |" in text
    assert ("Where the leak opened before the predicted probe (seed 2), the future attention mass on those "
            "unperturbed windows at that probe was 1.0e-13, while the leak measured there was 1.50") in text
    assert "at steps 90, 80, 90 per seed, against the predicted 90, 90, 90: at the predicted probe in 2 of 3" in text


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_a_replacing_fill_that_never_opens_is_said_so_and_the_alarm_that_stays_quiet_holds(tmp_path):
    rng = np.random.default_rng(0)
    job = 0
    for arm in ("causal", "no_mask", "fill_where_1e4", "fill_inf"):
        for seed in (1, 2, 3):
            write_run(tmp_path / "sweep" / str(job), arm, seed, rng, never=arm == "fill_where_1e4")
            job += 1
    (tmp_path / "out").mkdir()
    text = pl.write_report(load_runs([tmp_path / "sweep"]), tmp_path / "out", [tmp_path / "sweep"]).read_text()
    assert ("prediction 5 (the leak opens at the predicted probe or the next, in every seed): **not tested** (it "
            "holds only vacuously, in its 'never, if the visible floor never passes "
            "the threshold' clause: the visible floor came no closer than -8400 to the threshold -9984)") in text
    assert ("and on 0 of the 9 runs whose mask never opened (the 6 runs of the control arms among them)") in text
    assert "Prediction 4: **holds**." in text


def test_a_replacing_fill_at_its_own_rate_is_compared_with_the_inf_runs_at_that_rate(tmp_path):
    """Design 3: fill_where_1e4 at lr 2e-2 with -inf runs at 2e-2 (fill_inf_where) beside fill_1e4 and fill_inf at
    1e-2: each fill is compared with the -inf runs at its own rate."""
    rng = np.random.default_rng(0)
    job = 0
    for arm, lr in (("fill_1e4", 1e-2), ("fill_inf", 1e-2), ("fill_where_1e4", 2e-2), ("fill_inf", 2e-2)):
        for seed in (1, 2, 3):
            write_run(tmp_path / str(job), arm, seed, rng, lr=lr)
            job += 1
    arms = pl.group(load_runs([tmp_path]))
    assert list(arms) == ["fill_1e4", "fill_where_1e4", "fill_inf", "fill_inf_where"]
    assert {pl.lr_of(r) for r in arms["fill_inf_where"]} == {2e-2} and {pl.lr_of(r) for r in arms["fill_inf"]} == {1e-2}
    assert pl.control_of("fill_where_1e4", arms) == "fill_inf_where" and pl.control_of("fill_1e4", arms) == "fill_inf"


def test_an_arm_whose_seeds_split_is_named_with_its_count(tmp_path):
    """The replacing fill opens in seeds 1 and 3 but not 2: its seeds split between outcomes, and the report says so
    beside the arm table (the glossary's "Split seeds")."""
    write_sweep(tmp_path / "sweep", ("fill_where_1e4", "fill_inf"),
                lambda arm, seed: {"never": (arm, seed) == ("fill_where_1e4", 2)})
    runs = load_runs([tmp_path / "sweep"])
    assert pl.split_arms(pl.compute(runs)) == [("fill_where_1e4", "opened", 2, 3)]
    (tmp_path / "out").mkdir()
    text = pl.write_report(runs, tmp_path / "out", [tmp_path / "sweep"]).read_text()
    assert "finite fill (replacing: GPT-2's masked_bias): opened in 2 of 3 seeds." in text

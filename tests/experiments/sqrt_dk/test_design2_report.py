"""Design 2's report on synthetic sweeps whose answers are known by construction (design2_synthetic_sweep.py): each
verdict word the report prints is the one the construction implies."""

import re

from tests.experiments.sqrt_dk.design2_synthetic_sweep import World, make_fp16_sweep, make_sweep
from tinygpt.experiments import report


def verdicts_of(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\| (\w\d) \|.*\| \*\*(\w+)\*\* \|$", text, re.M))


def test_the_report_reads_the_premise_and_its_consequences_back(tmp_path):
    """Unit init saturates without the factor and costs 0.3 nats at d_k = 256, GPT-2's init 0.05; the init-and-step
    control equals the scaled arm; the basins have one shape (C4 undecided), no run spikes (C5 undecided); in
    float16 the scale after the product overflows at the higher rate and its float32 reruns train."""
    assert make_sweep(tmp_path / "sweep") == 294
    assert make_fp16_sweep(tmp_path / "sweep") == 36  # 30 float16 runs and 6 float32 reruns
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "README.md").read_text()
    assert verdicts_of(text) == {"M1": "holds", "M2": "holds", "M3": "holds", "C1": "holds", "C2": "holds",
                                 "C3": "holds", "C4": "undecided", "C5": "undecided", "G1": "holds", "R1": "holds",
                                 "F1": "holds", "F2": "holds"}
    assert "its arms did not run" not in text and "still to run" not in text
    assert ("better: without the factor the best loss is worse, and so is the loss at half the budget (C1 holds, C3 "
            "holds); steadier: "
            "not shown, so this report does not say the factor helps stability (C4 undecided, C5 undecided: no run of "
            "the main sweep had a loss spike); more so "
            "as d_k grows: yes (M1 holds, C2 holds)") in text  # the headline from the verdicts only
    assert "the softmax gain at init is" in text and ": lower unscaled)" in text  # described, no verdict
    assert re.search(r"below a bigram model's validation loss at step \d+ \[\d+, \d+\] unscaled and \d+ \[\d+, \d+\] "
                     r"scaled \(\+\d+ \[\+\d+, \+\d+\]: higher unscaled\)", text)  # slower by construction
    assert re.search(r"\(experiment=sqrt_dk\) took \d+\.\d min of wall time", text)
    row = next(line for line in text.splitlines() if line.startswith("| unit init, d_k = 256, unscaled |"))
    assert row.count("[") == 6 and "| 256.000 [" in row  # the largest raw q.k at init: d_k by construction
    assert (tmp_path / "out" / "trace_vs_dk.png").stat().st_size > 10_000
    assert (tmp_path / "out" / "loss_vs_lr.png").stat().st_size > 10_000


def test_where_the_premise_and_the_cost_are_absent_the_verdicts_say_so(tmp_path):
    """No saturation (M1 fails: the unscaled trace rises with d_k), the scaled arm worse by 0.3 (C1 fails, C2 fails),
    no float16 overflow (F1 and F2 undecided: nothing for the placement to remove, no run to rerun)."""
    world = World(unit_gap=-0.3, gpt2_gap=-0.3, trace_slope=0.2, fp16_overflow=False)
    make_sweep(tmp_path / "sweep", world)
    make_fp16_sweep(tmp_path / "sweep", world)
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 0
    found = verdicts_of((tmp_path / "out" / "README.md").read_text())
    assert (found["M1"], found["C1"], found["C2"], found["F1"], found["F2"]) == (
        "fails", "fails", "fails", "undecided", "undecided")
    assert found["G1"] == "undecided"  # the same cost under both inits: their difference covers 0


def test_a_float32_sweep_alone_says_which_predictions_it_cannot_test(tmp_path):
    make_sweep(tmp_path / "sweep")
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "README.md").read_text()
    assert re.search(r"^\| F1 \|.*its arms did not run \| not tested \|$", text, re.M)
    assert "No float16 run is in this report, so F1 and F2 are not tested." in text
    assert re.search(r"^\| F2 \|.*its arms did not run \| not tested \|$", text, re.M)


def test_float16_runs_that_diverged_without_reruns_print_the_commands_to_run(tmp_path):
    make_sweep(tmp_path / "sweep")
    make_fp16_sweep(tmp_path / "sweep", reruns=False)
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "README.md").read_text()
    assert verdicts_of(text)["F2"] == "undecided"
    asks = re.findall(r"^    (python train.py -m experiment=sqrt_dk_fp32 arm/sqrt_dk=\w+ .*)$", text, re.M)
    assert sorted(asks) == [f"python train.py -m experiment=sqrt_dk_fp32 arm/sqrt_dk={arm} optim.lr=0.02154 seed={s}"
                            for arm in ("fp16_none_math", "fp16_sqrt_scores") for s in (11, 12, 13)]


def test_an_arm_whose_best_rate_is_the_lowest_gets_the_stage_two_rates_below_it(tmp_path):
    """Every arm best below 1e-4 (the lowest rate): stage 2 asks each of the 14 arms for 4.642e-5 and 2.154e-5 with
    its seeds."""
    make_sweep(tmp_path / "sweep", World(optimum=-4.5))
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "README.md").read_text()
    asks = re.findall(r"^    (python train.py -m experiment=sqrt_dk arm/sqrt_dk=.*)$", text, re.M)
    assert len(asks) == 14
    assert "python train.py -m experiment=sqrt_dk arm/sqrt_dk=unit_dk256_none optim.lr=2.154e-05,4.642e-05 " \
           "seed=11,12,13" in asks
    import numpy as np

    from tests.experiments.sqrt_dk.design2_synthetic_sweep import N, float32_run

    rng = np.random.default_rng(5)
    world = World(optimum=-4.5)
    for i, (lr, seed) in enumerate((lr, seed) for lr in (2.154e-5, 4.642e-5) for seed in (11, 12, 13)):
        float32_run(tmp_path / "stage2" / str(i), rng, world, np.zeros(N), "unit", 256, "none", "", lr, seed)
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), str(tmp_path / "stage2"), "--out",
                        str(tmp_path / "out2")]) == 0
    text = (tmp_path / "out2" / "README.md").read_text()
    again = re.findall(r"^    (python train.py -m experiment=sqrt_dk arm/sqrt_dk=.*)$", text, re.M)
    assert len(again) == 13 and not any("unit_dk256_none " in a for a in again)  # stage 2 runs once per side
    assert "(stage 2 added 2.15e-05, 4.64e-05 for unit init, d_k = 256, unscaled, whose best rate" in text


def test_an_overflow_between_probes_leaves_f1_undecided_and_the_every_step_replay_sees_it(tmp_path):
    """As in the real float16 sweep: the scores of the scale-after-product runs turn inf at step 101, between two of
    the sweep's probes (every 20 steps), and the loss NaN at 110. F1 stays undecided (no probe saw an inf score) and
    the answer says why; amendment 2's replay, probed after every step, repeats each run and sees the inf score at
    101, before the NaN; with the scale on q and k the raw q.k overflows and every score stays finite."""
    world = World(inf_between_probes=True)
    make_sweep(tmp_path / "sweep", world)
    assert make_fp16_sweep(tmp_path / "sweep", world, replay=True) == 45  # 30 float16, 6 reruns, 9 replays
    metrics = next((tmp_path / "sweep" / "replay").iterdir()) / "history" / "metrics.csv"
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "README.md").read_text()
    found = verdicts_of(text)
    assert (found["F1"], found["F2"]) == ("undecided", "holds")
    assert ("Float16 (F1, F2): F1 undecided: runs with the scale after the product diverged, but no probe of theirs "
            "saw an inf score on its windows (amendment 2's replay, probed after every step, saw one in 6 of 6 "
            "diverged runs, 3 of the 3 with the scale after the product, without a verdict); F2 holds: each of the 6 "
            "float16 runs that diverged ran to its end in "
            "float32 at the same rate and seed without diverging (how little they learned there: the float32 reruns' "
            "table).") in text
    assert re.search(r"^\| F1 \|.*\| scale after the product: 0 of 6 runs with an inf score at a probe, 3 "
                     r"diverged; on q and k: 0 of 6 runs with an inf score at a probe, 0 diverged \| "
                     r"\*\*undecided\*\* \|$", text, re.M)
    assert re.search(r"^\| F2 \|.*\| float16 runs diverged: 6; their float32 reruns: 6 completed, 0 diverged, 0 "
                     r"not run \| \*\*holds\*\* \|$", text, re.M)
    row = next(line for line in text.splitlines() if line.startswith("| 1/sqrt(d_k) after the product | 0.0215 |"))
    assert row == ("| 1/sqrt(d_k) after the product | 0.0215 | 3 | 0 | 3 (steps 110, 110, 110) | 0 | 0 | 0 | 10,800 "
                   "| 654 | - |")  # none completed: no final loss
    row = next(line for line in text.splitlines() if line.startswith("| 1/sqrt(d_k) on q and k before the product | "
                                                                       "0.0215 |"))
    assert row.split(" | ")[2:8] == ["3", "3", "0", "0", "0", "3"]  # completed, scores finite, the raw q.k inf
    replays = [line for line in text.splitlines() if re.match(r"\| [^|]+ \| 0\.0215 \| 1[123] \| \d+ \| \d+ \|", line)]
    assert len(replays) == 9
    assert "| 1/sqrt(d_k) after the product | 0.0215 | 11 | 111 | 111 | 110 | 0 | 101 | 101 | step 109: inf / inf |" \
        in replays
    assert "| 1/sqrt(d_k) on q and k before the product | 0.0215 | 11 | 300 | 300 | - | 0 | none | 101 | - |" in replays
    assert ("The replay repeats its sweep run in 9 of 9 (the same training loss at every step and the same last "
            "step). Of the 6 replayed runs that went non-finite, 6 had an inf score at any of their probes (the last "
            "probe of each is the last step before the non-finite one); in the others no probe saw where the "
            "non-finite value arose (a training batch the probe does not see, another float16 product, the backward "
            "pass or the gradient scaler). Of the 3 with the scale on q and k, 3 completed; "
            "in 3 a probe saw the raw q.k (a "
            "product this placement never forms) overflow to inf, and in 0 an inf score.") in text
    assert "| fp16 |" not in text and "| 1/sqrt(d_k) after the product | 0.0215 | 11 | non-finite loss at step 110 | " \
        "completed, final validation loss" in text  # F2's pairs
    lines = metrics.read_text().splitlines()  # a replay that is not its sweep run is counted as such
    head, first = lines[0].split(","), lines[1].split(",")
    first[head.index("train/loss")] = "3.5"
    metrics.write_text("\n".join([lines[0], ",".join(first), *lines[2:]]) + "\n")
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 0
    assert "The replay repeats its sweep run in 8 of 9" in (tmp_path / "out" / "README.md").read_text()

"""Design 2's report on synthetic sweeps whose answers are known by construction (design2_synthetic_sweep.py): each
verdict word the report prints is the one the construction implies."""

import re

import pytest

from tests.experiments.sqrt_dk.design2_synthetic_sweep import World, make_fp16_sweep, make_sweep
from tinygpt.experiments import report


def verdicts_of(text: str) -> dict[str, str]:
    return dict(re.findall(r"^\| (\w\d) \|.*\| \*\*(\w+)\*\* \|$", text, re.M))


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
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
    assert ("better within 300 steps, at unit-variance init and d_k = 256: without the factor the best loss is worse, "
            "and so is the loss at half the budget (C1 holds, C3 holds); at the smaller d_k, without a verdict, d_k = "
            "16: +") in text  # the answer from the verdicts only, the smaller d_k's gaps beside it with none
    assert ("; the cost is larger at the largest d_k than at the smallest (C2 holds), but those are different "
            "models") in text
    assert ("C5 counted no loss spike in any of the 42 runs of the two arms it compares, so it had nothing to compare "
            "(C5 undecided). So this report does not say whether the factor helps stability.") in text
    assert "the softmax gain at init is" in text and ": lower unscaled)" in text  # described, no verdict
    assert re.search(r"validation loss: unscaled per seed (none within 300|\d+), .*\(seeds 11, 12, 13; \d of 3 "
                     r"reached it\); scaled per seed \d+, \d+, \d+ \(seeds 11, 12, 13; 3 of 3 reached it\)", text)
    assert re.search(r"\(experiment=sqrt_dk\) took \d+\.\d min of wall time", text)
    row = next(line for line in text.splitlines() if line.startswith("| unit init, d_k = 256, unscaled |"))
    assert row.count("[") == 6 and "| 256.000 [" in row  # the largest raw q.k at init: d_k by construction
    assert (tmp_path / "out" / "trace_vs_dk.png").stat().st_size > 10_000
    assert (tmp_path / "out" / "loss_vs_lr.png").stat().st_size > 10_000


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
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


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_a_float32_sweep_alone_says_which_predictions_it_cannot_test(tmp_path):
    make_sweep(tmp_path / "sweep")
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "README.md").read_text()
    assert re.search(r"^\| F1 \|.*its arms did not run \| not tested \|$", text, re.M)
    assert "No float16 run is in this report, so F1 and F2 are not tested." in text
    assert re.search(r"^\| F2 \|.*its arms did not run \| not tested \|$", text, re.M)


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_float16_runs_that_diverged_without_reruns_print_the_commands_to_run(tmp_path):
    make_sweep(tmp_path / "sweep")
    make_fp16_sweep(tmp_path / "sweep", reruns=False)
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 0
    text = (tmp_path / "out" / "README.md").read_text()
    assert verdicts_of(text)["F2"] == "undecided"
    asks = re.findall(r"^    (python train.py -m experiment=sqrt_dk_fp32 arm/sqrt_dk=\w+ .*)$", text, re.M)
    assert sorted(asks) == [f"python train.py -m experiment=sqrt_dk_fp32 arm/sqrt_dk={arm} optim.lr=0.02154 seed={s}"
                            for arm in ("fp16_none_math", "fp16_sqrt_scores") for s in (11, 12, 13)]


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
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


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
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
                     r"not run; those completed end at validation losses [^|]* a bigram model's [^|]* \| "
                     r"\*\*holds\*\* \|$", text, re.M)
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
    assert ("The replay repeats its sweep run in 9 of the 9 that have one (the same training loss at every step and "
            "the same last step). Of the 6 replayed runs that went non-finite, 6 had an inf score at any of their "
            "probes (the last probe of each is the last step before the non-finite one); in the others no probe saw "
            "where the non-finite value arose (a training batch the probe does not see, another float16 product, the "
            "backward pass or the gradient scaler). Of the 3 with the scale on q and k, 3 completed; "
            "in 3 a probe saw the raw q.k (a "
            "product this placement never forms) overflow to inf, and in 0 an inf score.") in text
    assert "| fp16 |" not in text and "| 1/sqrt(d_k) after the product | 0.0215 | 11 | non-finite loss at step 110 | " \
        "completed, final validation loss" in text  # F2's pairs
    lines = metrics.read_text().splitlines()  # a replay that is not its sweep run is counted as such
    head, first = lines[0].split(","), lines[1].split(",")
    first[head.index("train/loss")] = "3.5"
    metrics.write_text("\n".join([lines[0], ",".join(first), *lines[2:]]) + "\n")
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(tmp_path / "out")]) == 0
    assert ("The replay repeats its sweep run in 8 of the 9 that have one"
            in (tmp_path / "out" / "README.md").read_text())


def draws_file(path, n=30):
    """A synthetic init_draws.json: at d_k = 256 unscaled the gain falls 14% from d_k = 16, the trace 84%."""
    import json

    import numpy as np

    rng = np.random.default_rng(3)
    arms = {}
    for dk in (16, 64, 256):
        for scale, name in (("sqrt_dk", "sqrt"), ("none", "none")):
            f = (dk / 16) ** 0.5
            gain = 0.05 * (1 - 0.14 * (f - 1) / 3) if scale == "none" else 0.045
            trace = 0.53 * (1 - 0.84 * (f - 1) / 3) if scale == "none" else 0.94
            arms[f"unit_dk{dk}_{name}"] = {"d_k": dk, "scale": scale, "init": "unit",
                                           "softmax_gain": list(gain + rng.normal(0, 0.002, n)),
                                           "jacobian_trace": list(trace + rng.normal(0, 0.002, n))}
    path.write_text(json.dumps({"format": 1, "draws": n, "windows": 8, "seeds": "0 ... 29", "arms": arms}))
    return path


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_f1_per_run_stability_from_design_3_and_the_draws_from_kept_records(tmp_path, monkeypatch):
    """Amendment 4's replay: seeds 11-13 (seen: the float16 sweep ran them) go non-finite at batch 110, the first
    whose formed product passes 65,504 (F1 holds for each); seeds 14-16 (new, no sweep run) go non-finite there with
    every formed product below it (F1 fails for the two placements that form the raw product), so F1 fails over the
    runs and over the new seeds, and holds over the seen ones. The report is written from the kept records
    (runs.json.gz), quotes design 3's verdict words from its headline (words no code types), prints C5's zero counts
    as counts, and reads the init draws' JSON."""
    import json

    from tinygpt.experiments.index import Headline
    from tinygpt.experiments.sqrt_dk import report as sq

    world = World(batch_probe=True, new_seeds_overflow=False)
    make_sweep(tmp_path / "sweep", world)
    assert make_fp16_sweep(tmp_path / "sweep", world, replay=True, new_seeds=True) == 54  # 9 replays of new seeds
    d3 = tmp_path / "design3"
    d3.mkdir()
    Headline("sqrt_dk_stability", "t", "q", "a", "edges.png",
             [("S1: the edge rises with the factor", "qqholds"), ("S2: by the amount", "qqundecided")]).write(d3)
    monkeypatch.setattr(sq, "STABILITY", d3)
    monkeypatch.setattr(sq, "INIT_DRAWS", draws_file(tmp_path / "init_draws.json"))
    out = tmp_path / "out"
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(out)]) == 0
    text = (out / "README.md").read_text()
    assert (out / "runs.json.gz").is_file()  # item 1: written from its kept records
    found = verdicts_of(text)
    assert found["F1"] == "fails"
    assert ("F1, per run: **fails** (12 of 18 runs as predicted); over the 9 runs of seen seeds **holds**, over the 9 "
            "of new seeds **fails**. ") in text and "so amendment 4 judged it unable to decide" in text
    assert "only a positive overflow can end a run" in text  # F1's measure is the largest absolute product
    rows = [line for line in text.splitlines() if re.match(r"\| [^|]+ \| 1[1-6] \| (seen|new) \|", line)]
    assert len(rows) == 18
    assert ("| 1/sqrt(d_k) after the product | 11 | seen | largest absolute q.k before the scale | batch 110 | 110 | "
            "70,000 | **holds** | - |") in rows
    assert ("| 1/sqrt(d_k) after the product | 14 | new | largest absolute q.k before the scale | none: no batch's "
            "product passes it | 110 | 44,000 | **fails** | non-finite with every formed product up to then below "
            "65,504 |") in rows
    assert ("| 1/sqrt(d_k) on q and k before the product | 14 | new | largest absolute q.k after the scale | none: "
            "no batch's product passes it | - (completed) | - | **holds** | - |") in rows
    assert "in each of the 12 runs that went non-finite" in text  # the probe's last batch is the guard's step
    assert "| 1/sqrt(d_k) after the product | 0.0215 | 14 | no sweep run | 111 | 110 | no sweep run |" in text
    assert re.search(r"^\| F1 \|.*\| per run \(amendment 4\): 12 of 18 runs hold; seen seeds holds, new seeds fails; "
                     r"the old measure, an inf score at a probe \(counts, no verdict\): scale after the product: .*\| "
                     r"\*\*fails\*\* \|$", text, re.M)
    # item 3: design 2 could not decide; design 3's words quoted from its headline, not typed
    assert ("its answer, quoted from its headline: a Its verdicts: S1 qqholds: the edge rises with the factor; S2 "
            "qqundecided: by the amount" in text)
    head = json.loads((out / "headline.json").read_text())
    assert "S1 qqholds, S2 qqundecided" in head["answer"] and "C5 undecided: 0 loss spikes in 42 runs" in head["answer"]
    assert ["F1: " + sq.statement("F1"), "fails"] in head["verdicts"]
    assert "+0.000 [+0.000, +0.000]" not in text and "0 spikes in 21 runs (0 runs with one; per seed 0, 0, 0)" in text
    # item 4
    assert "mechanism_lr" not in text and "mechanism_lr" not in json.dumps(head)
    assert "replication across CPU models" not in text
    assert "F2 | float16: every float16 run that diverged runs to its end without diverging" in text
    assert re.search(r"^\| C1 \|.*best loss \(vertex\), unscaled - scaled \+0\.\d+ \[.*best cell, unscaled - scaled "
                     r"\(cell by cell\) \+0\.\d+ \[", text, re.M)
    assert re.search(r"^\| R1 \|.*best cell, control - scaled \(cell by cell\) [+-]0\.\d+ \[.*per seed [+-]0\.\d+ "
                     r"\(seed 11\)", text, re.M)
    assert "the gap itself at GPT-2's init is" in text
    assert "largest raw q.k at init (the largest over the layers)" in text
    assert (r"gradient at W_Q, W_K at init (sqrt of the sum over layers of \|\|dL/dW_Q\|\|^2 + "
            r"\|\|dL/dW_K\|\|^2)") in text
    assert "No cell has seeds whose final losses have an sd above 0.05 nats." in text
    row = next(line for line in text.splitlines() if line.startswith("| unit init, d_k = 256, 1/sqrt(d_k) | 2."))
    assert "(open)" not in row.split(" | ")[4] and " [" not in row.split(" | ")[3]  # per-seed optimum, no interval
    # item 5: the gain and the trace over the init draws
    assert "| unit init, d_k = 256, unscaled | 0.043 [" in text
    assert re.search(r"unscaled, the softmax gain changes by -1[34]\.\d% \[-1\d\.\d%, -1\d\.\d%\] and the Jacobian "
                     r"trace by -8[45]\.\d%",
                     text)


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_f3_reads_the_products_sign_where_a_negative_product_past_the_limit_failed_f1(tmp_path, monkeypatch):
    """Amendment 5: each overflowing replay's largest |q.k| passes 65,504 five batches before its loss goes non-finite,
    from a negative product (-70,000: -inf in float16, weight 0, nothing ends); its largest signed q.k passes it at
    the non-finite batch. F1 (absolute) fails, 'went on past'; F3 (signed) holds on every run; F3's verdict is the new
    seeds' (here 14-16: F3_SEEN set to the float16 sweep's seeds)."""
    from tinygpt.experiments.sqrt_dk import numbers as sqn

    world = World(batch_probe=True, signed_probe=True, negative_overflow=True)
    make_sweep(tmp_path / "sweep", world)
    make_fp16_sweep(tmp_path / "sweep", world, replay=True, new_seeds=True)
    monkeypatch.setattr(sqn, "F3_SEEN", frozenset({11, 12, 13}))
    out = tmp_path / "out"
    assert report.main(["sqrt_dk", str(tmp_path / "sweep"), "--out", str(out)]) == 0
    text = (out / "README.md").read_text()
    found = verdicts_of(text)
    assert found["F1"] == "fails" and found["F3"] == "holds"
    assert ("| 1/sqrt(d_k) after the product | 11 | seen | largest absolute q.k before the scale | batch 105 | 110 | "
            "70,000 | **fails** | went on past a batch whose formed product passed 65,504 |") in text
    assert ("| 1/sqrt(d_k) after the product | 14 | new | largest signed q.k before the scale | batch 110 | 110 | "
            "70,000 | **holds** | - |") in text
    assert "F3, per run: over the 9 runs of new seeds **holds** (the verdict); over the 9 runs of seen seeds holds" \
        in text
    assert "F1 and F3 give different verdicts on 12 run(s)" in text and "), 6 of them new; " in text
    assert "could not differ from F1" not in text
    assert "6 new run(s) had a batch whose product surely passed the limit negatively" in text

"""Both reports on synthetic sweeps whose answers are known by construction: run dirs written as a real job
writes them (summary.json, diagnostics.npz, history/metrics.csv), read back by the report code."""

import csv
import json
import math

import numpy as np
import pytest

from tinygpt.analysis import causal_mask, sqrt_dk
from tinygpt.analysis.stats import Estimate
from tinygpt.analysis.sweep import load_runs

N = 128  # validation windows per run
VOCAB = 65


def out_dir(path):
    path.mkdir()
    return path


def write_run(path, *, config, summary, windows, honest=None, train_loss=None):
    """One job's files: summary.json (with its config), diagnostics.npz, history/metrics.csv."""
    path.mkdir(parents=True)
    honest = windows[:32] if honest is None else honest
    np.savez(path / "diagnostics.npz", val_window_position=windows.astype(np.float32),
             honest_window_position=honest.astype(np.float32),
             probe_index=np.linspace(0, len(windows) - 1, 32).astype(np.int64))
    diag = {"honest_at": list(range(honest.shape[1])), "unigram_loss": 3.3, "bigram_loss": 2.5,
            "loss_by_position": windows.mean(0).tolist()}
    full = {"status": "completed", "diverged": False, "vocab_size": VOCAB, "threads": 1, "config": config,
            "val_loss": float(windows.mean()), "val_loss_honest": float(honest.mean()), "future_leak": 0.0,
            "attn_future_mass": 0.0, "attn_entropy": 0.5, "attn_max_logit": 5.0, "diagnostics": diag, **summary}
    (path / "summary.json").write_text(json.dumps(full))
    (path / "history").mkdir()
    with open(path / "history" / "metrics.csv", "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["step", "train/loss", "val/loss"])
        for step, loss in enumerate(train_loss if train_loss is not None else []):
            w.writerow([step, loss, loss if step % 100 == 99 else ""])


def cm_config(T, causal, seed):
    return {"seed": seed, "model": {"n_layer": 1, "n_head": 1, "n_embd": 8, "block_size": T,
                                    "attn": {"causal": causal}},
            "data": {"source": "shakespeare", "val_windows": N, "batch_size": 768 // T},
            "trainer": {"max_steps": 800, "val_check_interval": 100, "log_every_n_steps": 1},
            "optim": {"lr": 1e-3, "warmup_steps": 100, "min_lr": 1e-4}, "diagnostics": {"windows": 32},
            "callbacks": {"honest_loss": {"windows": 16, "positions": 8}},
            "prediction": {"level_ratio": [0.667, 1.5], "slope": [-1.3, -0.7], "onset_fraction": 0.5,
                           "drop_from": 0.75, "drop_to": 0.25}}


def causal_mask_sweep(root, last_loss):
    """Causal runs: 2.0 at every position, ``last_loss(T)`` at the last. Leaky runs: 0 where the target is in the
    window, the same last-position loss as the causal model's, so leaky loss = last_loss(T) / T exactly; their
    training loss drops from 2.5 to 0.05 at step 300."""
    rng = np.random.default_rng(0)
    steps = np.arange(800)
    job = 0
    for T in (16, 32, 64):
        window_effect = rng.normal(0, 0.3, N)  # the same windows for both arms at this T
        for causal in (True, False):
            for seed in (1, 2, 3):
                w = np.full((N, T), 2.0) if causal else np.zeros((N, T))
                w[:, -1] = last_loss(T) + window_effect + rng.normal(0, 0.01, N)
                train = np.full(800, 2.0) if causal else np.where(steps < 300, 2.5, 0.05)
                write_run(root / str(job), config=cm_config(T, causal, seed), windows=w, train_loss=train,
                          summary={"train_loss": float(train[-80:].mean())})
                job += 1
    return load_runs([root])


def one_over_t(runs):
    arms = causal_mask.group_runs(runs)
    est = causal_mask.bootstrap(causal_mask.arm_samples(arms))
    corpus = {T: by_c for (label, T), by_c in arms.items()}
    return causal_mask.one_over_t_rows(corpus, "shakespeare", est)


def test_an_exact_one_over_t_sweep_has_ratio_one_and_slope_minus_one(tmp_path):
    rows = one_over_t(causal_mask_sweep(tmp_path, lambda T: 2.4))
    for r in rows:
        assert r.ratio.value == pytest.approx(1, abs=1e-3) and r.ratio.lo <= 1 <= r.ratio.hi
        assert r.measured.value == pytest.approx(r.causal_last.value / r.T, rel=1e-3)
        assert r.copy.value == 0
    slope = causal_mask.slope_estimate([16, 32, 64], [r.measured for r in rows])
    assert slope.value == pytest.approx(-1, abs=0.02)


def test_the_findings_of_an_exact_and_a_flat_law(tmp_path):
    """The findings object, without rendering: each section's numbers and verdicts on sweeps whose answers are known
    by construction."""
    f = causal_mask.compute(causal_mask_sweep(tmp_path / "exact", lambda T: 2.4))
    assert (f.main.label, f.main.T, f.main.n_windows, f.main.positions) == ("shakespeare", 64, N, 64)
    assert f.main.fell and f.main.leaky_train[0] == pytest.approx(0.05) and f.main.causal_train[0] == 2.0
    assert f.main.tf_gap.hi < 0  # the leaky teacher-forced loss is far lower on the same windows
    assert f.main.onset.steps == [300, 300, 300] and f.main.onset.drops == [0, 0, 0] and f.main.onset.every == 1
    assert f.main.onset.seeds == [1, 2, 3] and f.main.onset.threshold == pytest.approx(1.0)
    assert f.main.worse_than_uniform is False and f.controls == []
    t = f.one_over_t
    assert t.Ts == [16, 32, 64] and [r.batch for r in t.rows] == [48, 24, 12]
    assert t.level == ["holds"] * 3 and t.level_all == "holds" and t.slope_verdict == "holds"
    assert t.slope.value == pytest.approx(-1, abs=0.02) and t.premise == "holds"
    assert t.causal_trend.word == "flat within noise" and t.copy_shares == [0.0, 0.0, 0.0]
    assert t.last_directions == [0, 0, 0] and not t.above_one
    flat = causal_mask.compute(causal_mask_sweep(tmp_path / "flat", lambda T: 2.4 * T / 16)).one_over_t
    assert flat.slope_verdict == "fails" and flat.level_all == "holds"
    assert flat.causal_trend.word == "rises" and flat.causal_trend.monotonic and flat.premise == "fails"
    assert flat.slope.value == pytest.approx(0, abs=0.02)


def test_the_report_says_holds_for_an_exact_law_and_fails_for_a_flat_one(tmp_path):
    runs = causal_mask_sweep(tmp_path / "exact", lambda T: 2.4)
    text = causal_mask.write_report(runs, out_dir(tmp_path / "r1"), [tmp_path / "exact"]).read_text()
    assert "the level prediction holds and the 1/T scaling holds" in text
    assert "An exact 1/T law and the exact level are not rejected at the 95% level" in text
    assert "The premise (the causal last-position loss flat in T) holds as written: no trend detected" in text
    # a leaky loss that does not fall with T: the last-position loss grows like T
    runs = causal_mask_sweep(tmp_path / "flat", lambda T: 2.4 * T / 16)
    text = causal_mask.write_report(runs, out_dir(tmp_path / "r2"), [tmp_path / "flat"]).read_text()
    assert "the level prediction holds and the 1/T scaling fails" in text
    assert "an exact 1/T law is rejected: the loss falls as T^-0.01; the exact level is not rejected at the 95% " \
           "level" in text
    assert "rises monotonically" in text  # the causal last-position loss, against T
    assert "The premise (the causal last-position loss flat in T) fails" in text
    assert "## Threats to validity" in text and "(../GLOSSARY.md)" in text


def test_exactness_is_read_from_the_intervals_beyond_the_tolerance():
    """The case the referee recomputed: slope -0.79 [-0.86, -0.72] excludes -1, ratios 1.19, 1.20, 1.34 all
    exclude 1: both exact claims rejected, with the exponent and the range above the level."""
    E = Estimate
    ratios = [E(1.19, 1.14, 1.24), E(1.20, 1.13, 1.26), E(1.34, 1.28, 1.41)]
    words = causal_mask.exactness_words(E(-0.79, -0.86, -0.72), ratios)
    assert words == ("an exact 1/T law and the exact level are rejected: the loss falls as T^-0.79 and sits "
                     "19-34% above the predicted level at every T")
    inside = causal_mask.exactness_words(E(-0.95, -1.1, -0.8), [E(1.02, 0.95, 1.1)] * 3)
    assert inside == "an exact 1/T law and the exact level are not rejected at the 95% level"
    mixed = causal_mask.exactness_words(E(-0.95, -1.1, -0.8), [E(1.2, 1.1, 1.3), E(1.02, 0.95, 1.1)])
    assert mixed == "an exact 1/T law and the exact level are not rejected at the 95% level"
    below = causal_mask.exactness_words(E(-1.2, -1.3, -1.1), [E(0.8, 0.7, 0.9), E(0.9, 0.85, 0.95)])
    assert below == ("an exact 1/T law and the exact level are rejected: the loss falls as T^-1.20 and sits "
                     "10-20% below the predicted level at every T")


def test_the_onset_is_the_step_of_the_drop_on_the_raw_series(tmp_path):
    runs = causal_mask_sweep(tmp_path, lambda T: 2.4)
    by_causal = causal_mask.group_runs(runs)[("shakespeare", 64)]
    onset = causal_mask.onset_findings(by_causal, runs[0].config["prediction"])
    assert onset.steps == [300, 300, 300]
    text = causal_mask.onset_text(onset)
    assert "logged at every step)" in text and "0, 0, 0 steps" in text  # a step function drops in one step


ARMS = [(256, 1, 256), (64, 4, 256), (64, 1, 64)]  # (d_k, heads, width): the design's
LADDER = [1e-4, 2.154e-4, 4.642e-4, 1e-3, 2.154e-3, 4.642e-3, 1e-2]


def sq_config(dk, heads, width, scale, lr, seed, precision="32-true", qk_norm=False):
    return {"seed": seed, "model": {"n_layer": 2, "n_head": heads, "n_embd": width, "block_size": 64,
                                    "attn": {"scale": scale, "qk_norm": qk_norm, "qk_init": "gpt2"}},
            "data": {"batch_size": 12, "val_windows": N}, "diagnostics": {"windows": 16},
            "trainer": {"max_steps": 300, "gradient_clip_val": 1.0, "precision": precision},
            "optim": {"lr": lr, "warmup_steps": 30, "min_lr": 1e-5},
            "callbacks": {"stability": {"windows": 8, "every_n_steps": 20}},
            "prediction": {"basin_delta": 0.1, "sensitivity_range": [1e-4, 1e-2], "optimum_shift": "lower",
                           "fp16_min_unscaled": 3, "fp16_max_scaled": 1, "failed_to_train": 0.5}}


def sqrt_dk_sweep(root, loss, noise=0.01, seeds=(1, 2, 3, 4, 5), fp16=None):
    """loss(arm, scale, log10 lr) -> every window's final loss (plus a window effect shared by all runs and seed
    noise). fp16: {(scale, lr): diverged seeds} adds float16 runs at d_k = 256."""
    rng = np.random.default_rng(1)
    window_effect = rng.normal(0, 0.2, N)
    job = 0
    for arm in ARMS:
        for scale in ("sqrt_dk", "none"):
            for lr in LADDER:
                for seed in seeds:
                    w = loss(arm, scale, math.log10(lr)) + window_effect + rng.normal(0, noise, N)
                    write_run(root / str(job), config=sq_config(*arm, scale, lr, seed), windows=w[:, None].repeat(4, 1),
                              summary={"train_loss": float(w.mean()), "train_seconds": 10.0, "steps": 300,
                                       "step_seconds_median": 0.033})
                    job += 1
    for (scale, lr), n_div in (fp16 or {}).items():
        for seed in seeds:
            w = 2.3 + window_effect
            div = seed <= n_div
            write_run(root / str(job), config=sq_config(256, 1, 256, scale, lr, seed, precision="16-mixed"),
                      windows=w[:, None].repeat(4, 1),
                      summary={"diverged": div, "val_loss": None if div else float(w.mean()), "train_seconds": 5.0,
                               "steps": 120 if div else 300, "step_seconds_median": 0.029,
                               "status": "diverged" if div else "completed"})
            job += 1
    return load_runs([root])


def v_shape(best_x, slope=0.4, best=2.2):
    return lambda x: best + slope * abs(x - best_x)


def shifted(arm, scale, x):
    """The unscaled curve is the scaled one moved a third of a decade down: the same basin, another optimum."""
    return v_shape(-3.0 - (1 / 3 if scale == "none" else 0.0))(x)


def narrower(arm, scale, x):
    """Same optimum; the unscaled arm's loss rises twice as fast either side (half the basin) at d_k = 256 only."""
    steep = scale == "none" and arm[0] == 256
    return v_shape(-3.0, slope=0.8 if steep else 0.4)(x)


def findings(text):
    return text.split("## Changes since")[0]


def test_a_shifted_optimum_with_an_equal_basin_is_never_called_more_sensitive(tmp_path):
    """The referee's case, end to end: P1 (optimum lower) holds, P5 (Wortsman's sensitivity higher) holds, P3 (the
    scaled basin wider) is undecided: the basins are equal, so no sentence may call the unscaled arm more
    sensitive."""
    runs = sqrt_dk_sweep(tmp_path, shifted)
    text = sqrt_dk.write_report(runs, out_dir(tmp_path / "r"), [tmp_path]).read_text()
    top = findings(text)
    assert "**P1**" in top and top.split("**P1**")[1].split("\n")[0].endswith("The prediction **holds**.")
    assert "**P3**" in top and "**is undecided at the 95% level**" in top.split("**P3**")[1].split("\n")[0]
    p5 = top.split("**P5**")[1].split("\n")[0]
    assert "The prediction **holds**" in p5 and "not shown more sensitive" in p5
    assert "more sensitive (a narrower basin)" not in text


def test_the_findings_of_a_shifted_optimum(tmp_path):
    """The findings object, without rendering: P1 (optimum lower) and P5 hold, P3 (basin) is undecided; the sweep
    has no qk-layernorm and no float16 arms, so P6 and P7 are not tested; nothing diverged or failed."""
    f = sqrt_dk.compute(sqrt_dk_sweep(tmp_path, shifted))
    p = f.predictions
    assert (p.p1, p.p2, p.p3, p.p5) == ("holds", "undecided", "undecided", "holds")
    assert p.p6 is None and p.p7 is None and p.qknorm is None and f.fp16 is None
    assert p.comparison.d_opt.value == pytest.approx(-1 / 3, abs=0.03)  # unscaled minus scaled log10(lr*)
    assert [g.where for g in p.growth] == ["fixed width", "fixed head count"] and p.p4 == "undecided"
    assert p.seedwise_opt.n == 5 and p.seedwise_opt.above == 0
    o = f.outcomes
    assert (o.runs, o.diverged, o.failed, o.failed_slow) == (210, 0, 0, 0)
    assert f.baseline == (3.3, 2.5) and f.huge.runs == 0 and f.huge.float32_runs == 210


def test_a_narrower_basin_at_the_same_optimum_is_more_sensitive_and_grows_with_dk(tmp_path):
    runs = sqrt_dk_sweep(tmp_path, narrower)
    nums = sqrt_dk.numbers(sqrt_dk.arms_of(runs), sqrt_dk.Measures(0.1, (1e-4, 1e-2)), (3.3, 2.5))
    s, n = (nums.get(d_k=256, heads=1, width=256, scale=sc, qk_norm=False) for sc in ("sqrt_dk", "none"))
    assert s.width.value == pytest.approx(0.5, abs=0.02) and n.width.value == pytest.approx(0.25, abs=0.02)
    assert s.opt_x.value == pytest.approx(-3.0, abs=0.02) and n.opt_x.value == pytest.approx(-3.0, abs=0.02)
    text = findings(sqrt_dk.write_report(runs, out_dir(tmp_path / "r"), [tmp_path]).read_text())
    assert "**P3**" in text and text.split("**P3**")[1].split("\n")[0].endswith("The prediction **holds**.")
    assert "more sensitive (a narrower basin)" in text.split("**P5**")[1].split("\n")[0]
    assert text.split("**P4**")[1].split("\n")[0].endswith("The prediction **holds**.")  # only d_k = 256 narrows
    assert "**P1**" in text and "**is undecided at the 95% level**" in text.split("**P1**")[1].split("\n")[0]


def test_fp16_counts_decide_p7_only_on_the_whole_design(tmp_path):
    fp16 = {("none", 5e-3): 3, ("sqrt_dk", 5e-3): 0, ("none", 1e-2): 5, ("sqrt_dk", 1e-2): 0,
            ("none", 2e-2): 4, ("sqrt_dk", 2e-2): 1}
    runs = sqrt_dk_sweep(tmp_path / "all", shifted, fp16=fp16)
    text = sqrt_dk.write_report(runs, out_dir(tmp_path / "r"), [tmp_path / "all"]).read_text()
    p7 = findings(text).split("**P7**")[1].split("\n")[0]
    assert "lr 0.01: unscaled 5 of 5, scaled 0 of 5; lr 0.02: unscaled 4 of 5, scaled 1 of 5" in p7
    assert p7.endswith("The prediction **holds**.")
    f = sqrt_dk.compute(runs)
    assert f.predictions.p7 == "holds"
    row = next(r for r in f.fp16.rows if r.lr == 1e-2 and r.arm.scale == "none")
    assert (row.diverged, row.runs, row.stopped, row.others) == (5, 5, [120] * 5, None)
    assert f.fp16.runs == 30 and f.fp16.step16 == pytest.approx(0.029) and f.fp16.step32 == pytest.approx(0.033)
    del fp16[("none", 5e-3)], fp16[("sqrt_dk", 5e-3)]  # two of the design's three rates: not decided
    runs = sqrt_dk_sweep(tmp_path / "two", shifted, fp16=fp16)
    text = sqrt_dk.write_report(runs, out_dir(tmp_path / "r2"), [tmp_path / "two"]).read_text()
    assert findings(text).split("**P7**")[1].split("\n")[0].endswith("**is undecided at the 95% level**.")
    assert "| 0.01 | unscaled | 5 of 5 | 120, 120, 120, 120, 120 |" in text
    # the float16 runs are counted apart: not in the float32 measures or counts
    assert "0 of 210 float32 runs diverged" in text
    assert "a median training step took 29 ms in float16 and 33 ms for the same arms in float32" in text


def test_an_open_basin_is_a_lower_bound_and_stage_two_is_asked_for(tmp_path):
    runs = sqrt_dk_sweep(tmp_path, lambda arm, scale, x: v_shape(-2.2, slope=0.1)(x))  # open above only
    nums = sqrt_dk.numbers(sqrt_dk.arms_of(runs), sqrt_dk.Measures(0.1, (1e-4, 1e-2)), (3.3, 2.5))
    a = nums.get(d_k=256, heads=1, width=256, scale="sqrt_dk", qk_norm=False)
    assert a.open_hi and not a.open_lo
    text = sqrt_dk.write_report(runs, out_dir(tmp_path / "r"), [tmp_path]).read_text()
    assert "open above: a lower bound" in text
    assert "**Stage 2 is needed**" in text and "0.0215, 0.0464" in text


def test_failed_and_diverged_are_counted_apart(tmp_path):
    runs = sqrt_dk_sweep(tmp_path, lambda arm, scale, x: 3.25 if x > -2.1 else 2.2 + 0.3 * abs(x + 3))
    nums = sqrt_dk.numbers(sqrt_dk.arms_of(runs), sqrt_dk.Measures(0.1, (1e-4, 1e-2)), (3.3, 2.5))
    a = nums.get(d_k=256, heads=1, width=256, scale="none", qk_norm=False)
    assert a.failed[1e-2] == 5 and sum(a.failed.values()) == 5 and sum(a.diverged.values()) == 0


def test_the_honest_gap_step_is_the_first_validation_the_alarm_rule_passes():
    """Gaps 0.01, 0.2, 0.5 with standard errors 0.1: the rule (above 3 SE and above 0.05 nats) first passes at the
    third validation; 0.2 is above 0.05 but not above 3 SE."""
    from tinygpt.analysis.sweep import Run, honest_gap_step
    cfg = {"callbacks": {"leak_alarm": {"z": 3.0, "min_gap": 0.05}}}
    run = Run(dir=None, summary={"config": cfg},
              history={"leak/honest_gap": ([100, 200, 300], [0.01, 0.2, 0.5]),
                       "leak/honest_gap_se": ([100, 200, 300], [0.1, 0.1, 0.1])})
    assert honest_gap_step(run) == 300
    run.history["leak/honest_gap"] = ([100, 200, 300], [0.01, 0.2, 0.25])
    assert honest_gap_step(run) is None

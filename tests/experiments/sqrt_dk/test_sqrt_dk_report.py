"""Experiment 2's report on synthetic sweeps whose answers are known by construction: run dirs written as a real job
writes them (summary.json, diagnostics.npz, history/metrics.csv), read back by the report code."""

import math

import numpy as np
import pytest

from helpers import out_dir
from helpers import write_job as write_run
from tinygpt.analysis.sweep import load_runs
from tinygpt.experiments.sqrt_dk import report as sqrt_dk

N = 128  # validation windows per run


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

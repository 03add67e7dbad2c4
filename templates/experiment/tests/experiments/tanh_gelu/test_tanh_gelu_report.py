"""The worked example's report on synthetic sweeps whose answer is known by construction: each job's files as
train.py writes them (tests/helpers.py's write_job), the two arms' losses apart by a chosen gap."""

import json

import numpy as np

from helpers import write_job
from tinygpt.experiments import report

SEEDS, N, T = (1, 2, 3), 64, 8  # seeds, validation windows, positions per window


def make_sweep(root, gap: float) -> None:
    """Both arms on every seed; the tanh arm's windows are the exact arm's plus ``gap`` (and a little noise)."""
    rng = np.random.default_rng(0)
    base = 2.0 + rng.normal(0, 0.3, (N, 1)) + rng.normal(0, 0.01, (N, T))  # (N, T): windows differ, as real ones do
    job = 0
    for arm, activation, shift in (("exact", "gelu", 0.0), ("tanh", "gelu_tanh", gap)):
        for seed in SEEDS:
            config = {"seed": seed, "model": {"activation": activation}, "trainer": {"max_steps": 500},
                      "prediction": {"band": 0.02}}
            windows = base + shift + rng.normal(0, 0.002, (N, T)) + 0.001 * seed
            d = root / str(job)
            write_job(d, config=config, summary={}, windows=windows)
            (d / ".hydra").mkdir()
            (d / ".hydra" / "hydra.yaml").write_text("hydra:\n  runtime:\n    choices:\n      experiment: tanh_gelu\n")
            (d / ".hydra" / "overrides.yaml").write_text(f"- arm/tanh_gelu={arm}\n- seed={seed}\n"
                                                         "- experiment=tanh_gelu\n")
            job += 1


def verdict(out) -> str:
    return json.loads((out / "headline.json").read_text())["verdicts"][0][1]


def test_where_the_arms_agree_the_prediction_holds(tmp_path):
    make_sweep(tmp_path / "sweep", gap=0.0)
    path, n, _ = report.write("tanh_gelu", [tmp_path / "sweep"], tmp_path / "out")
    assert n == 6 and verdict(tmp_path / "out") == "holds" and (tmp_path / "out" / "difference.png").is_file()
    text = path.read_text()
    assert "the prediction, within +-0.02 nats, holds" in text and "A partial report" not in text  # the full sweep


def test_where_the_tanh_arm_is_worse_by_more_than_the_band_it_fails(tmp_path):
    make_sweep(tmp_path / "sweep", gap=0.1)
    report.write("tanh_gelu", [tmp_path / "sweep"], tmp_path / "out")
    headline = json.loads((tmp_path / "out" / "headline.json").read_text())
    assert verdict(tmp_path / "out") == "fails" and headline["answer"].startswith(
        "The tanh arm's validation loss minus the exact arm's is +0.100 [")


def test_the_report_regenerates_byte_identically_from_its_kept_records(tmp_path):
    make_sweep(tmp_path / "sweep", gap=0.01)
    report.write("tanh_gelu", [tmp_path / "sweep"], tmp_path / "out")
    report.write("tanh_gelu", [tmp_path / "out" / "runs.json.gz"], tmp_path / "again")
    for name in ("README.md", "headline.json"):
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "out" / name).read_bytes(), name

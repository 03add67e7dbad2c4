"""What scripts/report.py accepts as results: completed runs of its own experiment; where it writes."""

import json

import numpy as np
import pytest

from tests.analysis.test_report_verdicts import cm_config, sq_config, write_run
from tinygpt.analysis import report


def hydra_files(run_dir, experiment, overrides):
    (run_dir / ".hydra").mkdir()
    choices = f"      experiment: {experiment}\n" if experiment else "      experiment: null\n"
    (run_dir / ".hydra" / "hydra.yaml").write_text(f"hydra:\n  runtime:\n    choices:\n{choices}")
    (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))


def causal_sweep(root, experiment="causal_mask", extra=(), status=None):
    """A synthetic causal_mask sweep: T = 64, causal and leaky, 3 seeds."""
    rng = np.random.default_rng(0)
    job = 0
    for causal in (True, False):
        for seed in (1, 2, 3):
            w = rng.uniform(1.5, 2.5, (32, 64)) if causal else rng.uniform(0, 0.01, (32, 64))
            d = root / str(job)
            write_run(d, config=cm_config(64, causal, seed), windows=w, train_loss=np.full(800, 2.0),
                      summary={"train_loss": 2.0})
            hydra_files(d, experiment, [f"model.attn.causal={causal}", f"seed={seed}", *extra]
                        + ([f"experiment={experiment}"] if experiment else []))
            job += 1
    if status:
        s = json.loads((root / "0" / "summary.json").read_text())
        s.update(status="interrupted", interrupted="SIGTERM", steps=36)
        (root / "0" / "summary.json").write_text(json.dumps(s))
    return root


def test_an_interrupted_run_is_excluded_named_and_listed(tmp_path, capsys):
    sweep = causal_sweep(tmp_path / "sweep", status="interrupted")
    path, n = report.write("causal_mask", [sweep], tmp_path / "out")
    assert n == 5
    err = capsys.readouterr().err
    assert f"warning: report: {sweep / '0'} excluded: interrupted by SIGTERM at step 36 of 800" in err
    text = path.read_text()
    assert "## Excluded runs" in text and "interrupted by SIGTERM at step 36 of 800" in text
    assert "| 2, 3 |" in text  # the causal arm's seeds: seed 1 was the interrupted one


def test_runs_of_another_experiment_are_refused_in_one_line(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    d = sweep / "0"
    write_run(d, config=sq_config(256, "none", 1e-3, 1), windows=np.full((32, 4), 2.0), summary={})
    hydra_files(d, "sqrt_dk", ["experiment=sqrt_dk"])
    assert report.main(["causal_mask", str(sweep), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is a run of experiment=sqrt_dk, not of causal_mask" in err


def test_a_plain_sweep_without_an_experiment_still_makes_the_report(tmp_path):
    sweep = causal_sweep(tmp_path / "sweep", experiment=None)
    path, n = report.write("causal_mask", [sweep], tmp_path / "out")
    assert n == 6 and path.exists()


def test_the_committed_report_is_left_alone_by_a_partial_sweep(tmp_path, capsys, monkeypatch):
    docs = tmp_path / "docs"
    monkeypatch.setattr(report, "DOCS", docs)
    sweep = causal_sweep(tmp_path / "sweep", extra=["trainer.max_steps=20"])
    path, _ = report.write("causal_mask", [sweep])
    assert path == sweep / "report" / "README.md" and not docs.exists()
    err = capsys.readouterr().err
    assert "not the full experiment=causal_mask sweep" in err and "the committed report is left alone" in err


def test_the_full_sweep_check_counts_the_configs_grid(tmp_path):
    sweep = causal_sweep(tmp_path / "sweep")
    runs = report.load_runs([sweep])
    assert report.full_sweep_gap(runs, [], "causal_mask") == "it has 6 runs, the full sweep 40"
    assert report.full_sweep_gap(runs, [(runs[0], "interrupted")], "causal_mask") == "1 of its runs did not complete"


@pytest.mark.parametrize("name, fam", [("causal_mask_quick", "causal_mask"), ("sqrt_dk", "sqrt_dk"), (None, None)])
def test_family(name, fam):
    assert report.family(name) == fam

"""Design 3's report on synthetic sweeps whose answer is known by construction (synthetic_sweep.py), and its
regeneration from the kept records: the same bytes from the sweep dirs and from runs.json.gz."""

import gzip
import json

import pytest

from tests.experiments.regenerated import assert_regenerates
from tests.experiments.sqrt_dk_stability.synthetic_sweep import RATES, SEEDS, make_sweep
from tinygpt.analysis.sweep import ReportError
from tinygpt.experiments import report


def verdicts(out):
    return {k.split(":")[0]: v for k, v in json.loads((out / "headline.json").read_text())["verdicts"]}


@pytest.fixture(scope="module")
def predicted(tmp_path_factory):
    root = tmp_path_factory.mktemp("sweep")
    make_sweep(root)
    out = root.parent / "out"
    report.write("sqrt_dk_stability", [root], out)
    return root, out


def test_where_the_prediction_is_true_every_verdict_holds(predicted):
    _, out = predicted
    assert verdicts(out) == {"Q1": "holds", "S1": "holds", "S2": "holds", "S3": "holds"}
    text = (out / "README.md").read_text()
    assert "Does 1/sqrt(d_k) help stability" in text and "yes (S1 holds)" in text
    assert "| 1/sqrt(d_k) | " in text and "5/5 (3.20)" in text  # a rate where every seed failed to train


def test_the_report_regenerates_byte_identically_from_its_records(predicted, tmp_path):
    _, out = predicted
    again = tmp_path / "again"
    assert_regenerates("sqrt_dk_stability", out, again, ("README.md", "headline.json", "edges.png"), 200_000)
    assert not (again / "runs.json.gz").exists()  # written from a records file, it keeps no second copy


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_the_records_hold_what_the_report_reads_and_are_the_same_bytes_each_time(predicted, tmp_path):
    root, out = predicted
    data = json.loads(gzip.decompress((out / "runs.json.gz").read_bytes()))
    assert len(data["runs"]) == 4 * len(RATES) * len(SEEDS)
    run = data["runs"][0]
    assert set(run["history"]) == {"train/loss", "val/loss", "stab/max_logit", "stab/jacobian_trace"}
    assert len(run["window_means"]) == 32 and run["experiment"] == "sqrt_dk_stability"
    assert "checkpoints" not in json.dumps(run)
    report.write("sqrt_dk_stability", [root], tmp_path / "second")
    assert (tmp_path / "second" / "runs.json.gz").read_bytes() == (out / "runs.json.gz").read_bytes()


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_where_nothing_moves_the_edge_stability_is_not_shown(tmp_path):
    make_sweep(tmp_path / "s", {"sqrt": -1.6, "mid": -1.6, "none": -1.6, "qknorm": -1.6}, spread=0.2,
               rates=RATES[3:10])
    report.write("sqrt_dk_stability", [tmp_path / "s"], tmp_path / "out")
    v = verdicts(tmp_path / "out")
    assert v["S1"] == "undecided" and v["Q1"] == "undecided"
    assert v["S2"] in ("fails", "undecided") and v["S3"] in ("fails", "undecided")
    assert "not shown" in (tmp_path / "out" / "README.md").read_text()


def test_a_hole_in_the_grid_and_a_file_that_is_not_records_are_refused(tmp_path):
    make_sweep(tmp_path / "s", {"sqrt": -1.6, "none": -2.2}, rates=RATES[:4])
    import shutil
    shutil.rmtree(tmp_path / "s" / "3")
    with pytest.raises(ReportError, match="has no run at lr 0.003162 with seed 51"):
        report.write("sqrt_dk_stability", [tmp_path / "s"], tmp_path / "out")
    bad = tmp_path / "runs.json.gz"
    bad.write_bytes(b"not gzip")
    with pytest.raises(ReportError, match="is not a records file"):
        report.write("sqrt_dk_stability", [bad], tmp_path / "out2")

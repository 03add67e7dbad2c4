"""Experiment 4's report on synthetic sweeps whose answer is known by construction (synthetic_sweep.py): every verdict
where the prediction is true holds, every one where it is false fails, and the report regenerates from its kept
records byte for byte."""

import json

import pytest

from tests.experiments.positions.synthetic_sweep import SEEDS, World, make_draws, make_sweep
from tests.experiments.regenerated import assert_regenerates
from tinygpt.experiments import report
from tinygpt.experiments.positions import init_draws
from tinygpt.experiments.positions import report as positions_report

EVERY = ["M1", "M2", "M3", "P4"] + [f"{k} T={T}" for T in (64, 256)
                                    for k in ("C1", "C2", "C3", "L1", "L2", "L3", "P1", "P2", "P3")]


def verdicts(out) -> dict[str, str]:
    return {k.split(":")[0]: v for k, v in json.loads((out / "headline.json").read_text())["verdicts"]}


def written(tmp_path, monkeypatch, world: World, name: str):
    draws = tmp_path / f"{name}_draws.json"
    init_draws.save(make_draws(world), draws)
    monkeypatch.setattr(positions_report, "INIT_DRAWS", draws)
    root = tmp_path / name
    make_sweep(root, world)
    out = tmp_path / f"{name}_out"
    report.write("positions", [root], out)
    return root, out


@pytest.fixture
def predicted(tmp_path, monkeypatch):
    return written(tmp_path, monkeypatch, World(), "predicted")


def test_where_every_prediction_is_true_every_verdict_holds(predicted):
    _, out = predicted
    v = verdicts(out)
    assert sorted(v) == sorted(EVERY)
    assert {k: w for k, w in v.items() if w != "holds"} == {}
    text = (out / "README.md").read_text()
    assert "Without the causal mask, position cannot be recovered at all" in text
    assert "With the mask, position becomes linearly decodable from a model without positions" in text
    assert "Within the trained context it costs nothing beyond the band" in text
    for png in ("init_variance.png", "loss_past_context.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f"({png})" in text


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_where_every_prediction_is_false_every_verdict_fails(tmp_path, monkeypatch):
    world = World(loss={"learned": 0.0, "none": 0.1, "rope": -0.1, "alibi": 0.1},
                  rise={"none": -0.1, "rope": 0.0, "alibi": 0.2},
                  r2_end={"learned": -0.9, "none": -0.5, "rope": 0.3, "alibi": 0.3},
                  r2_init={"learned": 0.3, "none": -0.5, "rope": 0.0, "alibi": 0.0},
                  m_offset=0.3, m3_slope=-0.3, p4_r2=0.2)
    _, out = written(tmp_path, monkeypatch, world, "false")
    v = verdicts(out)
    assert {k: w for k, w in v.items() if w != "fails"} == {}, v
    text = (out / "README.md").read_text()
    assert "did not come out as the argument says" in text and "so here explicit positions are necessary too" in text


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_a_difference_at_the_bands_edge_is_undecided(tmp_path, monkeypatch):
    world = World(loss={"learned": 0.0, "none": 0.02, "rope": 0.0, "alibi": 0.0})
    _, out = written(tmp_path, monkeypatch, world, "edge")
    v = verdicts(out)
    assert v["C1 T=64"] == v["C1 T=256"] == "undecided" and v["C2 T=64"] == "holds"


def test_the_report_regenerates_byte_identically_from_its_records(predicted, tmp_path):
    assert_regenerates("positions", predicted[1], tmp_path / "again",
                       ("README.md", "headline.json", "init_variance.png", "loss_past_context.png"), 300_000)


def test_without_init_draws_the_report_says_how_to_make_them(tmp_path, monkeypatch):
    monkeypatch.setattr(positions_report, "INIT_DRAWS", tmp_path / "absent.json")
    make_sweep(tmp_path / "s", seeds=SEEDS[:2], contexts=(64,))
    from tinygpt.analysis.sweep import ReportError

    with pytest.raises(ReportError, match="python -m tinygpt.experiments.positions.init_draws"):
        report.write("positions", [tmp_path / "s"], tmp_path / "out")

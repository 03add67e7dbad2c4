"""scripts/benchmark.py --hf-only end to end on a tiny GPT-2: both programs at once on a core each, our GPT and
transformers' GPT2LMHeadModel with the same weights, a training step and cached greedy decoding, the same greedy
tokens; and its section in docs/benchmarks.md. No timing is checked."""

import json
import os
import shutil

import pytest

pytest.importorskip("transformers")

from helpers import ROOT  # noqa: E402
from tinygpt.bench import cli  # noqa: E402
from tinygpt.bench import report as bench_report  # noqa: E402

pytestmark = pytest.mark.skipif((os.cpu_count() or 1) < 2 or not shutil.which("taskset"),
                                reason="the side by side needs 2 cores and taskset")


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_the_transformers_side_by_side_runs_and_agrees(tmp_path):
    out = tmp_path / "hf.json"
    assert cli.main(["--quick", "--hf-only", "--hf-pairs", "1", "--out", str(out)]) == 0
    r = json.loads(out.read_text())
    assert set(r["hf"]) == {"tiny"} and set(r["hf"]["tiny"]) == {"train", "decode"}
    for res in r["hf"]["tiny"].values():
        (pair,) = res["pairs"]
        ours, theirs = pair["tinygpt"], pair["transformers"]
        assert {ours["core"], theirs["core"]} == {0, 1} and ours["threads"] == theirs["threads"] == 1
        assert ours["params"] == theirs["params"] and theirs["attention"]
        assert res["ratio"] == pytest.approx(ours["tokens_per_sec"] / theirs["tokens_per_sec"])
    decode = r["hf"]["tiny"]["decode"]["pairs"][0]
    assert decode["identical_tokens"] and decode["tokens_equal_before_first_difference"] == 8  # the same weights
    md_path = tmp_path / "docs" / "benchmarks.md"
    full = ROOT / "docs" / "records" / "benchmark" / "2026-11-30d.json"
    assert bench_report.main([str(full), str(out), "--out", str(md_path)]) == 0
    md = md_path.read_text()
    assert "## Side by side with transformers" in md and "| tiny (0.0M) | cached greedy decoding |" in md


def test_hf_needs_its_prerequisites_in_one_line(capsys):
    with pytest.raises(SystemExit):
        cli.main(["--hf-only", "--hf-pairs", "0"])
    assert "--hf-pairs=0 must be >= 1." in capsys.readouterr().err

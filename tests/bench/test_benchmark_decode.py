"""scripts/benchmark.py's decoding figures end to end on short runs: the memory bound it measures and prints, the
levers turned off one at a time (the same greedy tokens each), the profile, and their sections in
docs/benchmarks.md. No timing is checked: only that every figure is there and consistent."""

import json

import pytest

from helpers import ROOT
from tinygpt.bench import cli
from tinygpt.bench import report as bench_report
from tinygpt.bench.micro import DECODE_LEVERS, PROFILE_GROUPS


@pytest.fixture(scope="module")
def quick_decode(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "decode.json"
    assert cli.main(["--quick", "--generate-only", "--out", str(out)]) == 0
    return out, json.loads(out.read_text())


def test_the_bound_and_the_levers_are_measured_at_one_thread_and_all(quick_decode):
    _, r = quick_decode
    assert set(r["decode"]) == {"small (10.7M, context 256)", "baby (0.8M, context 64)"}
    for by_threads in r["decode"].values():
        assert "1" in by_threads
        for n, d in by_threads.items():
            assert d["threads"] == int(n) and d["weight_bytes"] > 0 and d["bandwidth_gbps"] > 0
            assert d["bound_tokens_per_sec"] == pytest.approx(d["bandwidth_gbps"] * 1e9 / d["weight_bytes"])
            assert d["fraction_of_bound"] == pytest.approx(d["cached_tokens_per_sec"] / d["bound_tokens_per_sec"])
            assert d["products_alone_ms"] > 0 and d["resident_read_gbps"] > 0 and d["weights_read_alone_ms"] > 0
            # the bound: the fastest of a read before the timings and one right before and after each round's
            reads, around = d["reads_gbps"], d["rounds_around"]
            assert len(reads) == 1 + 2 * d["rounds"] and len(around) == d["rounds"]
            assert d["bandwidth_gbps"] == max(reads) and [reads[1 + 2 * i] for i in range(d["rounds"])] == [
                x["read_before_gbps"] for x in around]
            for x in around:  # each round against the reads right around it
                assert x["fraction_of_bound"] == pytest.approx(
                    x["tokens_per_sec"] * d["weight_bytes"] / (1e9 * max(x["read_before_gbps"], x["read_after_gbps"])))
            assert d["cached_tokens_per_sec"] == pytest.approx(max(x["tokens_per_sec"] for x in around))
            expected = list(DECODE_LEVERS)  # at every thread count (one thread may split too)
            assert list(d["levers"]) == expected
            assert all(v["identical"] for v in d["levers"].values())  # every variant decodes the same tokens
            groups = d["profile"]["groups_us_per_token"]
            assert list(groups)[:len(PROFILE_GROUPS)] == [name for name, _ in PROFILE_GROUPS]
            assert groups["matrix-vector products"] > 0 and d["profile"]["top_ops"]
    small = r["decode"]["small (10.7M, context 256)"]["1"]
    assert small["weight_bytes"] == 4 * 10_745_088  # every parameter once, the tied embedding once


def test_the_report_renders_the_decode_sections_from_a_partial_run(quick_decode, tmp_path):
    path, r = quick_decode
    full = ROOT / "docs" / "records" / "benchmark" / "2026-11-30d.json"  # a committed full run for the other sections
    md_path = tmp_path / "docs" / "benchmarks.md"
    assert bench_report.main([str(full), str(path), "--out", str(md_path)]) == 0
    md = md_path.read_text()
    assert "## Decoding at the memory limit" in md and f"From `{path.name}`" in md
    small = r["decode"]["small (10.7M, context 256)"]["1"]
    assert f"{small['bound_tokens_per_sec']:,.0f} | {small['cached_tokens_per_sec']:,.0f}" in md
    assert "| none of them (the decode path before) |" in md and "| matrix-vector products |" in md
    assert "Reading it (one thread): on the small model a token's products alone are" in md
    if "2" in r["decode"]["small (10.7M, context 256)"]:  # two cores or more
        two = r["decode"]["small (10.7M, context 256)"]["2"]
        assert (f"What stops the small model at two threads ({two['fraction_of_bound']:.0%} of the bound in this "
                f"run)") in md and f"its products alone {two['products_alone_ms']:.2f} ms" in md
    without = tmp_path / "without.md"  # no run measured the bound: no such section, the generation table stays
    assert bench_report.main([str(full), "--out", str(without)]) == 0
    assert "## Decoding at the memory limit" not in without.read_text()
    assert "## Generation with the KV cache" in without.read_text()


def test_a_recorded_command_is_shown_without_the_measuring_machines_paths():
    from tinygpt.bench.report import ROOT, portable

    recorded = (f"python scripts/benchmark.py --nanogpt {ROOT.parent}/nanoGPT --data /home/me/data/"
                "tinyshakespeare/input.txt --out b.json")
    assert portable(recorded) == ("python scripts/benchmark.py --nanogpt ../nanoGPT --data <Tiny Shakespeare's "
                                  "input.txt> --out b.json")
    assert portable("python scripts/benchmark.py --data my.txt") == "python scripts/benchmark.py --data my.txt"

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


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
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
            assert d["products_in_cache_ms"] > 0
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


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
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
        assert "What stops the small model at two threads (" in md
        assert f"each call's dispatch included), took {two['products_alone_ms']:.2f} ms" in md
        assert f"so that the weight sits in the cache, took {two['products_in_cache_ms']:.2f} ms" in md
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


def _round(read_before, tokens_per_sec, read_after=None):
    return {"read_before_gbps": read_before, "tokens_per_sec": tokens_per_sec,
            "read_after_gbps": read_before if read_after is None else read_after}


@pytest.mark.parametrize("rounds, verdict", [
    ([_round(30, 700), _round(60, 705)], "does not follow"),  # the read doubled, the tokens did not move
    ([_round(30, 700), _round(60, 600)], "does not follow"),  # they fell
    ([_round(60, 1000), _round(30, 500)], "follows"),  # in step with the read, the fast round first
    ([_round(30, 500), _round(60, 760)], "follows"),  # half the read's rise or more
    ([_round(30, 500), _round(60, 700)], "partly"),
    ([_round(30, 700, 60), _round(31, 705), _round(33, 702)], "does not follow"),  # a round's read: the faster
    ([_round(50, 700), _round(55, 800)], None),  # reads too steady to tell
    ([_round(30, 700)], None),  # one round
])
def test_whether_the_decode_follows_the_memorys_rate(rounds, verdict):
    from tinygpt.bench.report import memory_following

    got = memory_following(rounds)
    assert (got if got is None else got[0]) == verdict
    if verdict is not None:
        assert f"the decode {'partly follows' if verdict == 'partly' else verdict} the memory's rate" in got[1]


def test_the_floor_paragraph_names_the_in_cache_products_and_whether_the_memory_sets_the_pace():
    d = {"weight_bytes": 43_000_000, "ms_per_token": 1.4, "products_alone_ms": 0.9, "weights_read_alone_ms": 0.5,
         "products_in_cache_ms": 0.6, "reads_gbps": [34.0, 65.0], "bandwidth_gbps": 65.0,
         "bound_tokens_per_sec": 65e9 / 43e6, "fraction_of_bound": 0.47, "cached_tokens_per_sec": 0.47 * 65e9 / 43e6,
         "llc_bytes": 32 * 2**20, "rounds_around": [_round(34.0, 720), _round(65.0, 700)],
         "profile": {"groups_us_per_token": {"matrix-vector products": 800.0, "attention kernel": 170.0,
                                             "LayerNorm": 45.0, "GELU": 35.0, "residual adds": 25.0,
                                             "outside the ops (Python, dispatch, profiler)": 380.0}}}
    (text,) = bench_report.what_stops_two_threads({"small (10.7M, context 256)": {"2": d}})
    bound_ms = 43e6 / 65e9 * 1000  # 0.66 ms; the rest: 1.4 - 0.9 = 0.5 ms
    assert text.startswith("What stops the small model at two threads (47% of the bound, at this run's read of "
                           "65.0 GB/s): The memory's read at two threads moved between 34.0 and 65.0 GB/s")
    needed = bound_ms / 0.6 - 0.5  # 0.60 ms for the products
    assert f"the products would have to take {needed:.2f} ms ({43e6 / needed / 1e6:.1f} GB/s)" in text
    assert f"would reach {bound_ms / (0.5 + 0.5):.0%} of the bound" in text  # reads alone + the rest
    assert f"took 0.60 ms for a token's products ({43e6 / 0.6e-3 / 1e9:.1f} GB/s)" in text
    assert (f"a token would reach {bound_ms / (0.6 + 0.5):.0%} of the bound, and a model of 43 MB against a "
            "32 MiB") in text
    assert ("took 0.28 ms a token as profiled (the profiler adds to each op): the product calls plus those, with no "
            f"views, cache writes or Python between them, would be 1.18 ms, {bound_ms / 1.175:.0%} of the bound"
            ) in text  # 0.9 + 0.275
    assert "from 34.0 to 65.0 GB/s (1.91x)" in text and "the decode does not follow the memory's rate" in text
    d["ms_per_token"] = 2.5  # a rest of 1.6 ms: over the whole budget of 60% (1.1 ms) on its own
    assert "would have to take no time at all: the rest alone is over the budget" in \
        bench_report.what_stops_two_threads({"small (10.7M, context 256)": {"2": d}})[0]


def test_the_floor_paragraph_of_a_slow_read_run_is_taken_against_the_fastest_read_of_its_type():
    from pathlib import Path

    d = {"weight_bytes": 43_000_000, "ms_per_token": 1.3, "products_alone_ms": 0.9, "weights_read_alone_ms": 0.7,
         "reads_gbps": [35.0, 36.0], "bandwidth_gbps": 36.0, "bound_tokens_per_sec": 36e9 / 43e6,
         "cached_tokens_per_sec": 1000 / 1.3, "fraction_of_bound": 43e6 / 1.3e-3 / 36e9,
         "profile": {"groups_us_per_token": {"attention kernel": 200.0, "GELU": 50.0}}}
    dec = {"small (10.7M, context 256)": {"2": d}}
    (text,) = bench_report.what_stops_two_threads(dec, (64.0, Path("fast.json")))
    fast_ms = 43e6 / 64e9 * 1000  # 0.67 ms: every figure against it
    assert text.startswith(f"What stops the small model at two threads ({fast_ms / 1.3:.0%} of the bound at the "
                           f"fastest read recorded on this type, 64.0 GB/s in `fast.json`; "
                           f"{43e6 / 1.3e-3 / 36e9:.0%} at this run's 36.0)")
    assert f"A token took 1.30 ms against the bound's {fast_ms:.2f} ms" in text
    assert f"would be 1.15 ms, {fast_ms / 1.15:.0%} of the bound" in text
    (own,) = bench_report.what_stops_two_threads(dec, (30.0, Path("slower.json")))  # a slower record: this run's
    assert own.startswith(f"What stops the small model at two threads ({43e6 / 1.3e-3 / 36e9:.0%} of the bound, at "
                          "this run's read of 36.0 GB/s)")

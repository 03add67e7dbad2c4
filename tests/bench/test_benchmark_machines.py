"""The benchmark report's row per machine type: the decided targets from each type's newest JSON."""

from pathlib import Path

from tinygpt.bench.report import machine_rows, machine_type


def pair(ours_wall, ref_wall, ours_tok, ref_tok, ours_mib=700.0, ref_mib=360.0):
    return {"tinygpt": {"wall_s": ours_wall, "tokens_per_sec": ours_tok, "peak_rss_mib": ours_mib},
            "reference": {"wall_s": ref_wall, "tokens_per_sec": ref_tok, "peak_rss_mib": ref_mib}}


def run(machine, pairs=None, startup=None, lightning=None, fraction=None):
    r = {"machine": f"2 cores ({machine}), 24 GiB, torch 2.13.0+cpu, 2 threads, fp32"}
    if pairs:
        r["side_by_side"] = pairs
    if startup is not None:
        r["startup_s"] = startup
    if lightning is not None:
        r["refusals"] = {"floors": {"python -c 'import lightning'": lightning}}
    if fraction is not None:
        r["decode"] = {"small (10.7M, context 256)": {"1": {"fraction_of_bound": 0.2},
                                                      "2": {"fraction_of_bound": fraction}}}
    return r


def test_the_machine_type_is_the_cpu_model_and_its_vector_extension():
    assert machine_type(run("Intel(R) Xeon(R) Processor, AVX-512")) == "Intel(R) Xeon(R) Processor, AVX-512"
    assert machine_type(run("AMD EPYC, AVX2")) == "AMD EPYC, AVX2"
    assert machine_type({}) == "unknown machine"


def test_each_type_gets_its_newest_measurement_and_the_wall_target_holds_per_pair():
    runs = [(Path("old-amd.json"), run("AMD EPYC, AVX-512", [pair(200, 100, 1, 1)])),
            (Path("xeon.json"), run("Intel(R) Xeon(R) Processor, AVX-512", [pair(109, 100, 105, 100),
                                                                                pair(112, 100, 103, 100)],
                                    startup=9.0, lightning=7.0, fraction=0.77)),
            (Path("amd.json"), run("AMD EPYC, AVX-512", [pair(105, 100, 104, 100), pair(108, 100, 102, 100)],
                                   startup=8.0, lightning=7.0))]
    rows = [line for line in machine_rows(runs) if line.startswith("| ") and "JSON" not in line]
    amd, xeon = rows  # in the order the types first appear; each from its newest JSON
    assert amd.startswith("| AMD EPYC, AVX-512 | `amd.json` | 1.030 (1.040, 1.020): met | 1.065 (1.050, 1.080): met")
    assert "+1.0 s over `import lightning`: met" in amd and amd.endswith("| - |")  # no decoding measured there
    assert "1.105 (1.090, 1.120): **not met**" in xeon  # the median is within 1.10 but one pair is not
    assert "+2.0 s over `import lightning`: **not met**" in xeon and "77% (`xeon.json`): met" in xeon
    assert "1.94 (1.94, 1.94): met" in xeon

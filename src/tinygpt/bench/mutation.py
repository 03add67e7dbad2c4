"""How strong the tests are: mutation scores per module from a `mutmut run` (make mutate), a Markdown table and the
survivors.

Reads mutmut's own result files (mutants/src/tinygpt/<module>.py.meta). Timeouts count as detected (the
mutant made a test hang, so a test noticed it). Mutants listed in docs/records/equivalent_mutants.txt (one name per
line, then ' # why') are left out of the score, as the issue's target is over non-equivalent mutants.

    python scripts/mutation_scores.py [--mutants mutants] [--equivalent docs/records/equivalent_mutants.txt]
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path

MODULES = {  # module (under src/tinygpt/) -> the group the target applies to
    "model/config": "attention", "model/attention": "attention", "model/textbook": "attention",
    "model/gpt": "model + generation", "sampling/generate": "model + generation",
    "train/probes/diagnostics": "diagnostics",
    "data/config": "data", "data/cache": "data", "data/windows": "data", "data/datamodule": "data",
}
TARGET = {"attention": 0.90, "model + generation": 0.90, "diagnostics": 0.90, "data": 0.80}
DETECTED = {"killed", "timeout", "caught by type check", "segfault"}


def status(code) -> str:
    from mutmut.stats import status_by_exit_code

    return status_by_exit_code[code]


def load(mutants: Path) -> dict[str, dict[str, str]]:
    out = {}
    for module in MODULES:
        meta = mutants / "src" / "tinygpt" / f"{module}.py.meta"
        codes = json.loads(meta.read_text())["exit_code_by_key"] if meta.exists() else {}
        out[module] = {name: status(code) for name, code in codes.items()}
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/mutation_scores.py", description=__doc__.splitlines()[0])
    ap.add_argument("--mutants", type=Path, default=Path("mutants"))
    ap.add_argument("--equivalent", type=Path, default=Path("docs/records/equivalent_mutants.txt"))
    args = ap.parse_args(argv)
    equivalent = set()
    if args.equivalent.exists():
        equivalent = {line.split("#")[0].strip() for line in args.equivalent.read_text().splitlines()
                      if line.split("#")[0].strip()}
    results = load(args.mutants)
    groups: dict[str, Counter] = {}
    survivors = []
    print("| module | mutants | checked | killed | timeout | survived | no tests | equivalent | score |")
    print("|---|---|---|---|---|---|---|---|---|")
    for module, by_name in results.items():
        c = Counter(by_name.values())
        eq = sum(1 for name, s in by_name.items() if name in equivalent and s not in DETECTED)
        g = groups.setdefault(MODULES[module], Counter())
        g.update(c)
        g["equivalent"] += eq
        scored = len(by_name) - eq - c["not checked"] - c["skipped"]
        detected = sum(c[s] for s in DETECTED)
        score = detected / scored if scored else float("nan")
        checked = len(by_name) - c["not checked"]
        print(f"| {module} | {len(by_name)} | {checked} | {c['killed']} | {c['timeout']} | {c['survived']} | "
              f"{c['no tests']} | {eq} | {score:.1%} |")
        survivors += [n for n, s in by_name.items() if s in ("survived", "no tests") and n not in equivalent]
    print()
    print("| target group | score | target | met |")
    print("|---|---|---|---|")
    for group, c in groups.items():
        scored = sum(c.values()) - c["equivalent"] * 2 - c["not checked"] - c["skipped"]  # equivalent counted once
        detected = sum(c[s] for s in DETECTED)
        score = detected / scored if scored else float("nan")
        met = "incomplete run" if c["not checked"] else ("yes" if score >= TARGET[group] else "no")
        print(f"| {group} | {score:.1%} | {TARGET[group]:.0%} | {met} |")
    print(f"\n{len(survivors)} surviving or untested mutants (not marked equivalent): `mutmut show <name>` shows one.")
    for name in survivors:
        print(f"- {name}")
    return 0


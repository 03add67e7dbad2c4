"""`make deps-check`: the fast suite on the oldest and on the newest versions pyproject.toml's ranges allow.

Two fresh virtualenvs under DIR (default: $TMPDIR/tinygpt-deps-check). `oldest` pins every direct requirement of
`dependencies` and the `test` extra (with the extras it names) to its lower bound (`name>=X` becomes `name==X`;
what those pull in resolves as pip likes); `newest` upgrades everything eagerly. Each then runs
`pytest -m "not slow"` from the repository. A range whose bound fails here gets corrected in pyproject.toml.

    python .ci/deps_check.py [--dir DIR] [oldest] [newest]      (both when none is named)
"""

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REQ = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[([^\]]*)\])?\s*([^;]*)")


def requirements(project: dict, extras: list[str]) -> list[str]:
    """`dependencies` plus the named extras, the project's own `name[extra]` references expanded."""
    reqs, todo, seen = list(project["dependencies"]), list(extras), set()
    while todo:
        extra = todo.pop()
        if extra in seen:
            continue
        seen.add(extra)
        for req in project["optional-dependencies"][extra]:
            name, inner, _ = REQ.match(req).groups()
            if name == project["name"]:
                todo += [e.strip() for e in (inner or "").split(",") if e.strip()]
            else:
                reqs.append(req)
    return reqs


def lower_bounds(reqs: list[str]) -> list[str]:
    """`name==X` for each `name>=X`; a requirement without a lower bound is an error (there is nothing to test)."""
    pins = []
    for req in reqs:
        name, _, spec = REQ.match(req).groups()
        low = [s.strip()[2:].strip() for s in spec.split(",") if s.strip().startswith(">=")]
        if not low:
            sys.exit(f"deps-check: {req!r} has no lower bound (>=): give it one")
        pins.append(f"{name}=={low[0]}")
    return pins


def sh(*cmd, **kw) -> None:
    print("+", " ".join(map(str, cmd)), flush=True)
    subprocess.run(cmd, check=True, **kw)


def build(env: Path, kind: str, pins: list[str]) -> None:
    sh(sys.executable, "-m", "venv", "--clear", env)
    py = env / "bin" / "python"
    sh(py, "-m", "pip", "install", "--quiet", "--upgrade", "pip")
    if kind == "oldest":
        constraints = env / "constraints-oldest.txt"
        constraints.write_text("\n".join(pins) + "\n")
        sh(py, "-m", "pip", "install", "--quiet", "-c", constraints, "-e", f"{ROOT}[test]")
    else:
        sh(py, "-m", "pip", "install", "--quiet", "--upgrade", "--upgrade-strategy", "eager", "-e", f"{ROOT}[test]")
    names = sorted({REQ.match(p).group(1).lower() for p in pins})
    freeze = subprocess.run([py, "-m", "pip", "freeze"], capture_output=True, text=True, check=True).stdout
    chosen = [line for line in freeze.splitlines() if re.split(r"[=@ ]", line)[0].lower().replace("_", "-") in names]
    print(f"deps-check [{kind}] installed:", ", ".join(chosen), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kinds", nargs="*", help="oldest, newest (both when none is named)")
    ap.add_argument("--dir", type=Path, default=Path(tempfile.gettempdir()) / "tinygpt-deps-check")
    args = ap.parse_args()
    kinds = args.kinds or ["oldest", "newest"]
    if set(kinds) - {"oldest", "newest"}:
        ap.error(f"unknown: {' '.join(sorted(set(kinds) - {'oldest', 'newest'}))} (oldest, newest)")
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    pins = lower_bounds(requirements(project, ["test"]))
    results = {}
    for kind in kinds:
        env = args.dir / kind
        start = time.monotonic()
        build(env, kind, pins)
        built = time.monotonic() - start
        pytest = [env / "bin" / "python", "-m", "pytest", "-q", "-m", "not slow", "-p", "no:cacheprovider"]
        test = subprocess.run(pytest, cwd=ROOT, env={**os.environ, "WANDB_MODE": "offline"})
        results[kind] = (test.returncode, built, time.monotonic() - start - built)
    for kind, (rc, built, tested) in results.items():
        print(f"deps-check [{kind}]: {'passed' if rc == 0 else f'FAILED (pytest exit {rc})'}; "
              f"install {built:.0f} s, fast suite {tested:.0f} s")
    return max(rc for rc, _, _ in results.values())


if __name__ == "__main__":
    sys.exit(main())

"""``tinygpt-verify TARGET``: the proof battery on an attention, a table of verdicts (``--json`` for CI).

    tinygpt-verify my_pkg.attn:MyAttention --arg n_embd=64 --arg n_head=4 --padding padding_mask --kv-cache step
    tinygpt-verify attn.py:attention              # a function (q, k, v, mask) -> out, against the formula itself

Exit status 0 when every check passes (a 16-bit warning included, unless --strict-16bit), 1 when one fails, 2 for
a bad argument (a target that does not import, a call that does not fit), in one line. A check that runs long says
how far it is on stderr. Needs torch alone (rich draws the table where it is installed, PyYAML reads --args).
"""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path

from tinygpt.runtime.errors import OneLineParser, print_error
from tinygpt.verify.settings import LEVELS, MASKS, POSITIONS, Settings

EPILOG = """The target is module:name or file.py:name: a class (built with --arg/--args), a zero-argument factory,
a module instance, or the attention function itself. A torch Module is checked as x (batch, time, width) -> y; any
other callable as f(q, k, v, mask) -> out with q, k, v (batch, heads, time, head_dim) and a bool mask, True where a
query may attend (--mask hide: True where it may not). Lesson 5 (docs/lessons/5-check-your-own-attention.md) walks
through it."""


def parser() -> OneLineParser:
    p = OneLineParser("python -m tinygpt.verify", description=__doc__.split("\n\n")[0], epilog=EPILOG)
    p.add_argument("target", help="module:name or file.py:name (a class, a factory, a module or a function)")
    p.add_argument("--arg", action="append", default=[], metavar="KEY=VALUE",
                   help="a constructor argument, its value read as YAML, then as a Python float (--arg n_head=4 "
                        "--arg bias=false --arg fill=-1e4)")
    p.add_argument("--args", type=Path, metavar="FILE", help="constructor arguments from a YAML mapping")
    p.add_argument("--level", choices=LEVELS, default="auto", help="what to check it as (default: detected)")
    p.add_argument("--width", type=int, help="the module's input width C (default: read from the module)")
    p.add_argument("--vocab", type=int, help="the module takes token ids in [0, VOCAB) (a whole language model)")
    p.add_argument("--max-len", type=int, default=Settings.max_len,
                   help=f"the longest sequence causality and the KV cache try (default {Settings.max_len}; every "
                        "length up to 64 is tried, random ones beyond; a long one's cost is said before it starts)")
    p.add_argument("--scale", type=float, help="the function's factor on q k^T (default 1/sqrt(head_dim))")
    p.add_argument("--mask", choices=MASKS, default="keep",
                   help="the function's mask: keep = True where a query may attend (default), hide = True where not")
    p.add_argument("--padding", metavar="KEYWORD", help="the module's keyword for a (B, T) bool mask, True = real")
    p.add_argument("--kv-cache", metavar="METHOD",
                   help="the module's method step(x_new, cache) -> (y_new, cache): cache None at first, x_new one or "
                        "more new tokens (the check decodes one at a time, and after a prefill of 5 in steps of 2, "
                        "3 and 16)")
    p.add_argument("--window", type=int, metavar="W",
                   help="the sliding window: each query sees its last W keys, itself included (Hugging Face's "
                        "sliding_window; flash-attn's window_size=(W - 1, 0)); a module's sees-past asserts it, a "
                        "function's formula check holds it to the formula with that window")
    p.add_argument("--positions", choices=POSITIONS,
                   help="the relative positions declared: a module's alibi or rope (the same token everywhere gives "
                        "the same output everywhere; with alibi, nearer keys weigh more), or a function's alibi (the "
                        "formula with ALiBi's bias, the paper's slopes)")
    p.add_argument("--only", action="append", metavar="CHECK", help="run only this check (repeatable)")
    p.add_argument("--strict-16bit", action="store_true", help="a 16-bit finding fails instead of warning")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", action="store_true", help="print the results as JSON (for CI)")
    return p


def constructor_args(given: list[str], path: Path | None) -> dict:
    """--args FILE's mapping, then each --arg key=value (a value read as YAML: 4 is an int, false a bool)."""
    try:
        import yaml
    except ImportError:  # torch alone: --arg values read as Python literals, --args needs PyYAML
        yaml = None
        if path is not None:
            raise ValueError(f"--args {path}: reading a YAML file needs PyYAML (pip install pyyaml), or give each "
                             "argument with --arg key=value.") from None
    args = {}
    if path is not None:
        try:
            loaded = yaml.safe_load(path.read_text())
        except (OSError, yaml.YAMLError) as err:
            raise ValueError(f"--args {path}: {str(err).splitlines()[0]}") from None
        if not isinstance(loaded, dict):
            raise ValueError(f"--args {path} must hold a YAML mapping of constructor arguments, got "
                             f"{type(loaded).__name__}.")
        args.update(loaded)
    for item in given:
        key, sep, value = item.partition("=")
        if not sep or not key.isidentifier():
            raise ValueError(f"--arg {item!r} must be key=value with key a Python name (--arg n_head=4).")
        if yaml is None:
            args[key] = literal(value)
            continue
        try:
            args[key] = yaml.safe_load(value)
        except yaml.YAMLError:
            args[key] = value
        if isinstance(args[key], str):  # YAML reads -1e4 and -inf as text; Python reads them as numbers
            try:
                args[key] = float(value)
            except ValueError:
                pass
    return args


def literal(value: str):
    """A --arg value without PyYAML: true/false/null (any case), an int, a float, or the text itself."""
    words = {"true": True, "false": False, "null": None, "none": None, "~": None}
    if value.lower() in words:
        return words[value.lower()]
    for kind in (int, float):
        try:
            return kind(value)
        except ValueError:
            pass
    return value


class Progress:
    """A long check's progress on stderr: a line once a check has run 3 s, then at most one each 5 s (a notice,
    such as a long --max-len's cost, at once)."""

    def __init__(self, stream=None):  # None: sys.stderr as it is when the check runs (a test's capture included)
        self.stream, self.start, self.last = stream or sys.stderr, time.perf_counter(), 0.0

    def ended(self, result, seconds: float) -> None:
        self.start, self.last = time.perf_counter(), 0.0

    def note(self, message: str, always: bool = False) -> None:
        now = time.perf_counter()
        if always or (now - self.start > 3 and now - self.last > 5):
            print(f"tinygpt-verify: {message} ({now - self.start:.0f} s)", file=self.stream, flush=True)
            self.last = now


def main(argv: list[str] | None = None) -> int:
    opts = parser().parse_args(argv)
    try:
        settings = Settings(level=opts.level, width=opts.width, vocab=opts.vocab, max_len=opts.max_len,
                            scale=opts.scale, mask=opts.mask, padding=opts.padding, kv_cache=opts.kv_cache,
                            strict_16bit=opts.strict_16bit, window=opts.window, positions=opts.positions,
                            seed=opts.seed)
        args = constructor_args(opts.arg, opts.args)
    except ValueError as err:
        print_error(f"tinygpt-verify: {err}")
        return 2
    import warnings

    # torch without numpy (a venv holding torch alone) warns at import that it cannot use numpy; nothing here does
    warnings.filterwarnings("ignore", message="Failed to initialize NumPy", category=UserWarning)
    from tinygpt.verify import run
    from tinygpt.verify.result import VerifyError
    from tinygpt.verify.target import factory_of, load

    progress = Progress()
    try:
        factory = factory_of(load(opts.target), args)
        results = run(factory, opts.only, progress=progress.ended, notes=progress.note, **settings.__dict__)
    except VerifyError as err:
        print_error(f"tinygpt-verify: {err}")
        return 2
    if opts.json:
        print(json.dumps({"target": opts.target, "passed": all(r.ok for r in results),
                          "results": [r.as_dict() for r in results]}, indent=1))
    else:
        show(opts.target, results)
    return 0 if all(r.ok for r in results) else 1


def show(target: str, results) -> None:
    """The table (rich's, where it is installed; plain text with torch alone) and a line of what passed."""
    failed = [r.check for r in results if not r.ok]
    line = f"{len(results) - len(failed)} of {len(results)} checks passed"
    for word, verdict in (("failed", "fail"), ("warnings", "warn"), ("not applicable", "n/a")):
        named = [r.check for r in results if r.verdict == verdict]
        line += f"; {word}: {', '.join(named)}" if named else ""
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:
        print(f"tinygpt-verify {target}")
        for r in results:
            print(f"  {r.check:13} {r.verdict:5} {r.measured}" + (f"\n  {'':13} {'':5} {r.why}" if r.why else ""))
        print(line)
        return
    piped = not sys.stdout.isatty() and not os.environ.get("COLUMNS")  # piped: not squeezed to 80, unless asked
    console = Console(width=160 if piped else None)  # None: the terminal's, or COLUMNS
    colour = {"pass": "green", "warn": "yellow", "fail": "bold red", "n/a": "dim"}
    table = Table(title=f"tinygpt-verify {target}", title_justify="left")
    for column in ("check", "verdict", "measured", "what failed, and where"):
        table.add_column(column, overflow="fold")
    for r in results:
        table.add_row(r.check, f"[{colour[r.verdict]}]{r.verdict}[/]", r.measured, r.why)
    console.print(table)
    console.print(line)


if __name__ == "__main__":
    sys.exit(main())

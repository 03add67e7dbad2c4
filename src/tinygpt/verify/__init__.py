"""Check anyone's attention: the project's proof battery on an attention a user wrote.

    tinygpt-verify my_pkg.attn:MyAttention --arg n_embd=64 --arg n_head=4     # the command (python -m tinygpt.verify)

    from tinygpt import verify
    verify.run(factory)               # every check's Result (verdict, measured number, what failed and where)
    verify.check(factory, "causality")  # in a test: raises CheckFailed with the sentence when the check fails

Two levels, detected from what ``factory()`` makes (or chosen with ``level=``): a torch Module is checked as a
module x (B, T, C) -> y (tinygpt.verify.module_checks), any other callable as a function (q, k, v, mask) -> out
against the formula softmax(q k^T * scale + mask) v itself (tinygpt.verify.function_checks). ``Settings`` names
every option. This package does not import the project's model: it checks that model as it checks anyone's.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from typing import TYPE_CHECKING

from tinygpt.verify.settings import Settings

if TYPE_CHECKING:
    from tinygpt.verify.result import Result

__all__ = ["CheckFailed", "Result", "Settings", "VerifyError", "check", "names", "run"]


def subject(factory: Callable[[], object], settings: Settings):
    """What the checks call: the function or module the factory makes, in the level it is checked at."""
    from tinygpt.verify import function_checks, module_checks
    from tinygpt.verify.result import VerifyError, computes_in
    from tinygpt.verify.target import level_of, width_of

    made = factory()
    level = level_of(made, settings)
    import torch

    if level == "function":
        given = [k for k in ("padding", "kv_cache") if getattr(settings, k)]
        if given:
            raise VerifyError(f"{given[0]} names a module's interface; a function's padding is in the mask it is "
                              "given, and it has no cache.")
        if settings.positions == "rope":
            raise VerifyError("positions=rope is declared for a module; a function is given q and k after their "
                              "rotation (positions=alibi is a function's: it adds the bias itself).")
        f = function_checks.Function(made, settings)
        q = torch.zeros(1, 1, 2, 4, dtype=torch.float64)  # (B, H, T, D)
        f(q, q, q, function_checks.causal(2))  # the call fits, or one sentence
        q, k, v = function_checks.qkv(torch.Generator().manual_seed(settings.seed), 8)
        f.work = computes_in(lambda: f(q, k, v, function_checks.causal(8)))  # float32 inside: checked in float32
        return f, function_checks.CHECKS

    module = module_checks.Module(made, width_of(made, settings), settings)
    module_checks.check_interfaces(made, settings)
    gen = torch.Generator().manual_seed(settings.seed)
    module.copy()(module.inputs(gen, 2, 1))  # the call fits, or one sentence
    x = module.inputs(gen, 2, 2)
    module.work = computes_in(lambda: module.copy()(x))  # float32 inside: checked in float32
    return module, {n: module_checks.CHECKS[n] for n in module_checks.applicable(settings)}


def names(factory: Callable[[], object], **settings) -> list[str]:
    """The checks that apply to what ``factory`` makes (for ``pytest.mark.parametrize``)."""
    return list(subject(factory, Settings(**settings))[1])


def run(factory: Callable[[], object], only: list[str] | None = None, *, progress=None, notes=None, **settings
        ) -> list[Result]:
    """Every applicable check (or ``only`` those), each on a fresh object from ``factory`` made under the same seed:
    the Results in order. ``settings`` are Settings' fields (level, width, vocab, max_len, scale, mask, padding,
    kv_cache, strict_16bit, window, positions, seed). An exception the attention raises inside a check is that
    check's failure (a 16-bit one a warning); one that stops every check (a call that does not fit) is a
    VerifyError.
    ``progress(result, seconds)`` is told as each check ends, ``notes(message, always)`` a long check's progress as
    it goes (``always``: a notice such as a cost said before it starts). The caller's random state is left as it
    was."""
    import torch

    from tinygpt.verify.result import LISTENERS, Result, VerifyError

    s = Settings(**settings)
    with torch.random.fork_rng():
        torch.manual_seed(s.seed)
        _, checks = subject(factory, s)
        unknown = [n for n in only or () if n not in checks]
        if unknown:
            level = "module" if "sees-itself" in checks else "function"
            raise VerifyError(f"no check {unknown[0]!r} at the {level} level; its checks are: {', '.join(checks)}.")
        results = []
        for name, fn in checks.items():
            if only and name not in only:
                continue
            torch.manual_seed(s.seed)
            thing, _ = subject(factory, s)
            start = time.perf_counter()
            try:
                if notes:
                    LISTENERS.append(notes)
                results.append(fn(thing, torch.Generator().manual_seed(s.seed)))
            except VerifyError as err:  # the attention raised inside this check: its verdict, the others go on
                lenient = name == "16-bit" and not s.strict_16bit  # 16 bits: a finding, as an overflow is
                results.append(Result(name, "warn" if lenient else "fail", "raised", str(err)))
            finally:
                if notes:
                    LISTENERS.remove(notes)
            if progress:
                progress(results[-1], time.perf_counter() - start)
    return results


def check(factory: Callable[[], object], name: str | None = None, **settings) -> list[Result]:
    """Run one check (or all of them) and raise CheckFailed, whose message is each failed check's sentence, when any
    fails (a 16-bit warning does not, unless ``strict_16bit=True``). Returns the Results."""
    from tinygpt.verify.result import CheckFailed

    results = run(factory, [name] if name else None, **settings)
    failed = [r for r in results if not r.ok]
    if failed:
        raise CheckFailed("; ".join(f"{r.check}: {r.why} [{r.measured}]" for r in failed))
    return results


def __getattr__(name: str):
    """The result types, imported on first use (they need torch): the command refuses a bad option before torch."""
    if name in ("CheckFailed", "Result", "VerifyError"):
        from tinygpt.verify import result

        return getattr(result, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

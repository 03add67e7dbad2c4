"""What to verify: ``my_pkg.attn:MyAttention`` (or ``path/to/file.py:name``) resolved to a factory, and what the
factory makes (a torch Module, checked as x -> y, or a function (q, k, v, mask) -> out).

The target may be a class (built with the constructor arguments given), a zero-argument factory, a module instance
or the attention function itself. Every way this can go wrong is a VerifyError: one sentence naming what was given
and what is expected.
"""

from __future__ import annotations

import copy
import difflib
import importlib
import importlib.util
import inspect
import os
import sys
from collections.abc import Callable
from pathlib import Path

from tinygpt.verify.result import VerifyError, described
from tinygpt.verify.settings import Settings

WIDTH_NAMES = ("n_embd", "embed_dim", "d_model", "hidden_size", "width", "dim")  # where a module keeps its width


def load(spec: str) -> object:
    """``pkg.mod:name`` or ``file.py:name`` -> the object named (the current directory is importable, as with
    ``python -m``)."""
    where, sep, name = spec.rpartition(":")
    if not sep or not where or not name or where.endswith(":"):
        raise VerifyError(f"target {spec!r} must be module:name, e.g. my_pkg.attn:MyAttention or "
                          "attn.py:make_attention.")
    if where.endswith(".py"):
        path = Path(where)
        if not path.is_file():
            raise VerifyError(f"target {spec!r}: there is no file {where}.")
        folder = str(path.resolve().parent)  # importable, as Python makes a script's folder: its sibling modules
        if folder not in sys.path:
            sys.path.insert(0, folder)
        module_spec = importlib.util.spec_from_file_location(path.stem, path)
        module = importlib.util.module_from_spec(module_spec)
        sys.modules.setdefault(path.stem, module)
        run = lambda: module_spec.loader.exec_module(module)  # noqa: E731
    else:
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        module = None
        run = lambda: importlib.import_module(where)  # noqa: E731
    try:
        module = run() or module
    except ModuleNotFoundError as err:
        if err.name and not where.endswith(".py") and (where == err.name or where.startswith(err.name + ".")):
            raise VerifyError(f"target {spec!r}: cannot import {where} ({err}); run from the folder that holds it, "
                              "or install it.") from None
        raise VerifyError(f"target {spec!r}: importing {where} raised {described(err)} (a module it imports is "
                          "not installed).") from None
    except Exception as err:  # the user's module raised while importing: its error, in one line
        raise VerifyError(f"target {spec!r}: importing {where} raised {described(err)}") from None
    obj = getattr(module, name, None)
    if obj is None:
        public = [n for n in vars(module) if not n.startswith("_")]
        near = difflib.get_close_matches(name, public, n=1)
        hint = f"; did you mean {near[0]}?" if near else f" (it has: {', '.join(sorted(public)[:8])})."
        raise VerifyError(f"target {spec!r}: {where} has no {name}{hint}")
    return obj


def factory_of(obj: object, args: dict | None = None) -> Callable[[], object]:
    """A zero-argument function that makes a fresh attention each time it is called (each check gets its own)."""
    from torch import nn

    args = dict(args or {})
    label = getattr(obj, "__name__", type(obj).__name__)
    if isinstance(obj, nn.Module):
        if args:
            raise VerifyError(f"{label} is a module already built; constructor arguments ({', '.join(args)}) apply "
                              "to a class or a factory.")
        return lambda: copy.deepcopy(obj)
    if inspect.isclass(obj) or (callable(obj) and required_params(obj) == 0):
        def make():
            try:
                return obj(**args)
            except Exception as err:
                given = ", ".join(f"{k}={v!r}" for k, v in args.items())
                hint = (" (give constructor arguments with --arg key=value)"
                        if isinstance(err, TypeError) and "argument" in str(err) else "")
                raise VerifyError(f"{label}({given}) raised {described(err).rstrip('.')}{hint}.") from None
        return make
    if callable(obj):  # the attention function itself, (q, k, v, mask) -> out
        if args:
            raise VerifyError(f"{label} takes (q, k, v, mask): constructor arguments ({', '.join(args)}) apply to a "
                              "class or a factory.")
        return lambda: obj
    kind = "Python module" if inspect.ismodule(obj) else type(obj).__name__
    raise VerifyError(f"{label} is a {kind}, not an attention: name a class, a torch Module, a factory or a function "
                      "(q, k, v, mask) -> out.")


def required_params(fn) -> int | None:
    """How many arguments ``fn`` needs (None when Python cannot tell)."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    return sum(p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) for p in params)


def level_of(made: object, settings: Settings) -> str:
    """'module' or 'function', as chosen or as detected from what the factory made."""
    from torch import nn

    if settings.level != "auto":
        if settings.level == "module" and not isinstance(made, nn.Module):
            raise VerifyError(f"level=module needs a torch Module, but the target made a {type(made).__name__}.")
        return settings.level
    if isinstance(made, nn.Module):
        return "module"
    if callable(made):
        return "function"
    raise VerifyError(f"the target made a {type(made).__name__}: expected a torch Module (x -> y) or a function "
                      "(q, k, v, mask) -> out.")


def width_of(module, settings: Settings) -> int:
    """The module's input width C: as given, else an attribute that names it, else its first Linear's input."""
    from torch import nn

    if settings.width is not None:
        return settings.width
    for holder in (module, getattr(module, "config", None)):
        for name in WIDTH_NAMES:
            value = getattr(holder, name, None)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                return value
    first = next((m for m in module.modules() if isinstance(m, nn.Linear)), None)
    if first is not None:
        return first.in_features
    raise VerifyError(f"cannot tell {type(module).__name__}'s input width: give it with --width C.")

"""Hydra schemas derived from the code that owns the settings, so that each setting is declared once.

``schema_of(Owner)`` is a dataclass with the owner's fields (a dataclass's fields, or the keyword parameters of a
class's ``__init__``), each typed as OmegaConf can check it and each MISSING: a run's default, with its comment, is
the YAML's (configs/). Registered in Hydra's ConfigStore and named at the head of a defaults list, it makes a mistyped
key or a value of the wrong type a one-line refusal while the config is composed, before any work
(tinygpt.runtime.errors). Types OmegaConf cannot check (a union, a class) become ``Any``: the owner checks them when it
is built.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
import typing
from collections.abc import Sequence
from typing import Any, List, Optional

from omegaconf import MISSING

PRIMITIVES = (bool, int, float, str)


@functools.cache
def schema_of(owner: type, *, target: bool = False, loose: tuple[str, ...] = (), skip: tuple[str, ...] = ()) -> type:
    """The MISSING-field schema of ``owner``'s settings (one class per owner and options). ``target``: a
    ``_target_`` key too (a node Hydra builds); ``loose``: fields typed ``Any`` whatever the owner says (e.g. a key
    whose default interpolates another key, so that a wrong value is named at the key set, not here); ``skip``:
    fields that are not config keys. Each field keeps its owner's metadata (``marked`` reads it)."""
    specs = [("_target_", str, dataclasses.field(default=MISSING))] if target else []
    marks = {f.name: f.metadata for f in dataclasses.fields(owner)} if dataclasses.is_dataclass(owner) else {}
    for name, hint in settings(owner).items():
        if name not in skip:
            typ = Any if name in loose else checkable(hint)
            specs.append((name, typ, dataclasses.field(default=MISSING, metadata=marks.get(name))))
    return dataclasses.make_dataclass(f"{owner.__name__}Schema", specs)


def marked(schema: type, mark: str, prefix: str = "") -> list[str]:
    """The dotted keys of ``schema``'s fields (a dataclass, nested ones walked) whose metadata holds ``mark``, e.g.
    the owner's ``path: str = field(default=None, metadata={"path": True})``: schema_of keeps each field's metadata."""
    keys, hints = [], type_hints(schema)
    for f in dataclasses.fields(schema):
        if f.metadata.get(mark):
            keys.append(prefix + f.name)
        hint = hints.get(f.name)
        if isinstance(hint, type) and dataclasses.is_dataclass(hint):
            keys += marked(hint, mark, f"{prefix}{f.name}.")
    return keys


def settings(owner: type) -> dict[str, Any]:
    """name -> type hint of each setting: a dataclass's init fields, else the keyword parameters of ``__init__``."""
    if dataclasses.is_dataclass(owner):
        hints = type_hints(owner)
        return {f.name: hints.get(f.name, Any) for f in dataclasses.fields(owner) if f.init}
    hints = type_hints(owner.__init__)
    params = list(inspect.signature(owner.__init__).parameters.values())[1:]  # less self
    kinds = (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    return {p.name: hints.get(p.name, Any) for p in params if p.kind in kinds}


def type_hints(obj) -> dict[str, Any]:
    """``obj``'s evaluated annotations; where one names what is imported only for type checkers (torch, kept out of
    the config's start-up), none: every field is then left to the owner to check (Any)."""
    try:
        return typing.get_type_hints(obj)
    except NameError:
        return {}


def checkable(hint) -> Any:
    """A type hint as OmegaConf can check it: a primitive, Optional of one, a list of one, a nested dataclass's
    schema; anything else Any."""
    if hint in PRIMITIVES:
        return hint
    if dataclasses.is_dataclass(hint):
        return schema_of(hint)
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if origin in (typing.Union, types.UnionType):
        rest = [a for a in args if a is not type(None)]
        if len(rest) == 1 and len(args) == 2:
            inner = checkable(rest[0])
            return Optional[inner] if inner is not Any else Any
        return Any
    if origin in (list, tuple, Sequence, typing.Sequence) and args:
        items = {a for a in args if a is not Ellipsis}
        if len(items) == 1 and (item := items.pop()) in PRIMITIVES:
            return List[item]
    return Any

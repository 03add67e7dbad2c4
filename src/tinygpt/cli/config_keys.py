"""Every configuration key, its default and its meaning, read from the YAML under configs/: a key's comment is its
documentation (the comment on its line, or the comment lines right above it), so each key is documented once, where
its default is. ``scripts/config_keys.py`` writes docs/configuration.md from it; tests/cli/test_config_keys.py
checks that every key is documented and that the page is up to date.

Documented: the root config (train.yaml) and the groups a run is made of (model, data, trainer, optim, logger,
callbacks). Not here: experiment/, arm/ and debug/ (recipes over these keys, each file commented on its own) and
hydra/ (Hydra's own settings).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from pathlib import Path

from omegaconf import OmegaConf

ROOT = Path(__file__).resolve().parents[3]  # a source checkout
GROUPS = ("model", "corpus", "data", "trainer", "optim", "logger", "callbacks")
KEY_LINE = re.compile(r"^(?P<indent>\s*)(?P<key>[A-Za-z_][\w]*):(?P<rest>.*)$")


@dataclass
class Key:
    """One key: its dotted name, its value in the file that documents it, its meaning, and that file."""

    name: str
    value: str
    doc: str
    source: str

    @property
    def mapping(self) -> bool:
        """A key whose value is the keys below it (documented by theirs)."""
        return not self.value


@dataclass
class Option:
    """One option of a group (a file): its name and the comment at the top of the file."""

    group: str
    name: str
    doc: str


def split_comment(rest: str) -> tuple[str, str]:
    """'  4   # four layers' -> ('4', 'four layers'); a '#' inside quotes is text."""
    quote = None
    for i, ch in enumerate(rest):
        if ch in "\"'" and quote in (None, ch):
            quote = None if quote else ch
        elif ch == "#" and quote is None and (i == 0 or rest[i - 1].isspace()):
            return rest[:i].strip(), rest[i + 1:].strip()
    return rest.strip(), ""


def read_file(path: Path, prefix: str) -> tuple[str, list[Key]]:
    """The file's own description (its first comment lines) and every key it sets, under ``prefix``."""
    header: list[str] = []
    keys: list[Key] = []
    stack: list[tuple[int, str]] = []  # (indent, key) of the mappings around the current line
    above: list[str] = []  # the comment lines right above the current line
    seen_key = False
    for line in path.read_text().splitlines():
        stripped = line.strip()
        if stripped.startswith("# @package"):
            continue
        if stripped.startswith("#"):
            (above if seen_key else header).append(stripped.lstrip("#").strip())
            continue
        match = KEY_LINE.match(line)
        if not match:  # a blank line, a list item, a continued value
            above = []
            continue
        seen_key = True
        indent, key = len(match["indent"]), match["key"]
        while stack and stack[-1][0] >= indent:
            stack.pop()
        value, comment = split_comment(match["rest"])
        name = ".".join(part for part in (prefix, *(k for _, k in stack), key) if part)
        if not key.startswith("_") and not (key == "defaults" and not stack):
            keys.append(Key(name, value, comment or " ".join(above), path.as_posix()))
        above = []
        if not value:  # a mapping (or a list on the next lines): its keys follow, indented
            stack.append((indent, key))
    return " ".join(header), keys


def read_configs(root: Path) -> tuple[list[Option], list[Key]]:
    """Every option of the documented groups and every key they set (train.yaml's under no prefix). A key set by
    several options of a group is listed once: from the option that documents it, the group's default first."""
    defaults = default_options(root)
    options: list[Option] = []
    found: dict[str, Key] = {}
    files = [("", "train", root / "train.yaml")]
    for group in GROUPS:
        names = sorted(p.stem for p in (root / group).glob("*.yaml"))
        names.sort(key=lambda n: n not in defaults.get(group, ()))  # the default option(s) first
        files += [(group, n, root / group / f"{n}.yaml") for n in names]
    for group, name, path in files:
        header, keys = read_file(path, group)
        if group:
            options.append(Option(group, name, header))
        for key in keys:
            if key.name not in found or (key.doc and not found[key.name].doc):
                found[key.name] = Key(key.name, key.value, key.doc, str(path.relative_to(root.parent)))
    return options, list(found.values())


def default_options(root: Path) -> dict[str, tuple[str, ...]]:
    """train.yaml's defaults list: group -> the option(s) a plain run uses."""
    out: dict[str, tuple[str, ...]] = {}
    for entry in OmegaConf.load(root / "train.yaml").defaults:
        if isinstance(entry, str) or not entry:
            continue
        for group, choice in entry.items():
            group = str(group).removeprefix("optional ")
            if choice is not None:
                out[group] = tuple(choice) if not isinstance(choice, str) else (choice,)
    return out


def undocumented(keys: list[Key]) -> list[str]:
    """The keys no comment explains (a mapping is explained by its keys)."""
    return [k.name for k in keys if not k.doc and not k.mapping]


def markdown(root: Path) -> str:
    """docs/configuration.md: the options of each group, then every key with its default and meaning."""
    options, keys = read_configs(root)
    defaults = default_options(root)
    lines = ["# Configuration: every key", "",
             "Generated by `python scripts/config_keys.py` from the comments in `configs/` (each key is documented "
             "where its default is set); do not edit by hand. Set any key with `key=value` and pick an option "
             "with `group=option` (docs/configuring.md). A value is the one in the file named; "
             "`${...}` is an interpolation, `???` must be given. The keys' types come from the code that owns them "
             "(`src/tinygpt/train/schema.py`: the root keys, `model` from `GPTConfig`, `optim` from `AdamWCosine`, "
             "`data` from `DataConfig`, each `corpus` from its class; each experiment's `prediction` from its "
             "folder): a value of the wrong type is refused in one line before any work.", "",
             "## Options", "", "| group | option | what |", "|---|---|---|"]
    for o in options:
        mark = " (default)" if o.name in defaults.get(o.group, ()) else ""
        lines.append(f"| `{o.group}` | `{o.name}`{mark} | {cell(o.doc)} |")
    lines += ["", "## Keys", "", "| key | value | meaning | set in |", "|---|---|---|---|"]
    for k in sorted((k for k in keys if not k.mapping or k.doc), key=lambda k: (k.name.split(".")[0] in GROUPS,
                                                                            k.name)):
        lines.append(f"| `{k.name}` | {cell(f'`{k.value}`' if k.value else '')} | {cell(k.doc)} | "
                     f"`{k.source}` |")
    return "\n".join(lines) + "\n"


def cell(text: str) -> str:
    """Text safe inside a Markdown table cell."""
    return text.replace("|", "\\|")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="scripts/config_keys.py", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--configs", type=Path, default=ROOT / "configs")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "configuration.md")
    ap.add_argument("--check", action="store_true", help="only check: every key documented, the page up to date")
    args = ap.parse_args(argv)
    _, keys = read_configs(args.configs)
    missing = undocumented(keys)
    if missing:
        print(f"error: config_keys: {len(missing)} key(s) without a comment in configs/: {', '.join(missing)}.",
              file=sys.stderr)
        return 1
    text = markdown(args.configs)
    if args.check:
        if not args.out.is_file() or args.out.read_text() != text:
            print(f"error: config_keys: {args.out} is not up to date; run python scripts/config_keys.py.",
                  file=sys.stderr)
            return 1
        return 0
    args.out.write_text(text)
    print(f"config_keys: {len(keys)} keys -> {args.out}")
    return 0

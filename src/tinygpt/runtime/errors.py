"""Mistakes in the configuration or the input: reported as one line, `error: <sentence>`, exit status 2."""

from __future__ import annotations

import argparse
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import NoReturn


class CheckpointWriteError(OSError):
    """A checkpoint could not be written (disk full, permissions); the previous file is unchanged (raised by
    runtime.checkpoint; declared here so that train.py's wrapper catches it without importing torch)."""


class ConfigError(ValueError):
    """A bad config value or input file, found before training starts. The message is one sentence that
    names the key (or file), the bad value and what is expected."""


def first_line(err: BaseException) -> str:
    """An exception's message as one line (Hydra and OmegaConf add context lines below the first)."""
    text = str(err).strip() or type(err).__name__
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if lines[0].endswith(":") and len(lines) > 1:  # "Error loading 'x.Y':" with the reason on the next line
        return f"{lines[0]} {lines[1]}"
    return lines[0]


def cause_of(err: BaseException) -> BaseException:
    """The error an object raised, unwrapped from Hydra's InstantiationException around it."""
    from hydra.errors import InstantiationException

    return err.__cause__ if isinstance(err, InstantiationException) and err.__cause__ else err


@contextmanager
def as_config_errors(*extra: type[BaseException]):
    """Re-raise ValueError, Hydra's instantiate and OmegaConf errors (and ``extra`` kinds) as ConfigError: used
    around the set-up phase, where any such error is a mistake in the config, not a bug in a run."""
    from hydra.errors import InstantiationException
    from omegaconf.errors import OmegaConfBaseException

    try:
        yield
    except ConfigError:
        raise
    except (ValueError, InstantiationException, OmegaConfBaseException, *extra) as err:
        raise ConfigError(first_line(cause_of(err))) from err


def full_traceback_requested() -> bool:
    """Hydra's convention: HYDRA_FULL_ERROR=1 shows the whole traceback instead of the one line."""
    return os.environ.get("HYDRA_FULL_ERROR") == "1"


def print_error(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


class OneLineParser(argparse.ArgumentParser):
    """argparse for the project's command lines: a bad argument is one line, ``error: <command>: <what>``, exit
    status 2 (argparse prints its usage first); the command is named as it was run: an installed command
    (tinygpt-sample) by its own name, else its script (scripts/sample.py)."""

    def __init__(self, script: str, **kwargs):
        name = Path(sys.argv[0]).name
        super().__init__(prog=name if name.startswith("tinygpt-") else script, **kwargs)

    def error(self, message: str) -> NoReturn:
        print_error(f"{self.prog}: {message}")
        sys.exit(2)


_HYDRA_RAISES = False  # HYDRA_FULL_ERROR=1 set by unknown_keys_as_config_errors until the config is composed


@contextmanager
def unknown_keys_as_config_errors(config_dir: Path | None = None):
    """train.py's entry: an override of a key the config does not have (``callbacks.leak_alarm.tolerence=1``) is
    one line naming it (and the nearest key, when one is close) and exit status 2, as every config mistake is,
    instead of Hydra's six lines, exit 1 and a hint to add the key with +. Hydra prints a composition error itself
    unless HYDRA_FULL_ERROR=1, so that is set until the config is composed (``config_composed``, called when the
    run or sweep starts); Hydra's other errors are printed as Hydra prints them. Set by the user, HYDRA_FULL_ERROR
    shows the traceback, as ever. (A group option that does not exist is checked before this: runtime/options.py.)"""
    global _HYDRA_RAISES
    from hydra.errors import CompactHydraException

    if full_traceback_requested():
        yield
        return
    os.environ["HYDRA_FULL_ERROR"], _HYDRA_RAISES = "1", True
    try:
        yield
    except CompactHydraException as err:
        if not _HYDRA_RAISES:  # after composition Hydra reports its errors itself
            raise
        message = composition_mistake(err, config_dir)
        if message:
            print_error(message)
            sys.exit(2)
        print_hydra_error(err)
        sys.exit(1)
    finally:
        config_composed()


def config_composed() -> None:
    """From here on Hydra reports errors itself again (unknown_keys_as_config_errors)."""
    global _HYDRA_RAISES
    if _HYDRA_RAISES:
        os.environ.pop("HYDRA_FULL_ERROR", None)
        _HYDRA_RAISES = False


def composition_mistake(err: BaseException, config_dir: Path | None = None) -> str | None:
    """The one sentence for a mistake Hydra found while composing the config: a group option it does not have
    (``model=smal``), a value of the wrong type (``model.n_layer=abc``), overriding or deleting a key it does not
    have (``config_dir``: where a key another option of its group has is looked up); None for any other error."""
    import re

    from omegaconf.errors import ConfigAttributeError, ConfigKeyError, ValidationError

    text = str(err)
    option = re.match(r"In '[^']*': Could not find '(.+)/([^/']+)'\n\nAvailable options in '([^']+)':\n((?:\t.*\n?)+)",
                      text)
    if option:  # a mistyped option of a config group: model=smal
        options = [o.strip() for o in option.group(4).splitlines() if o.strip()]
        return option_message(option.group(1), option.group(2), options)
    wrong = re.match(r"Error merging override (.+)", text.splitlines()[0] if text else "")
    if wrong and isinstance(err.__cause__, ValidationError):  # a value of the wrong type (tinygpt/train/schema.py)
        return wrong_type_message(wrong.group(1), err.__cause__)
    unused = re.match(r"Could not override '([^']+)'\. No match in the defaults list\.\n.*use \+(\S+)", text)
    if unused:  # arm/partial_leaks=off_by_one: a group the run's defaults do not list
        group, override = unused.group(1), unused.group(2)
        experiment = group.split("/")[1] if group.startswith("arm/") and group.count("/") == 1 else None
        uses = (f", or run the experiment that uses it: experiment={experiment}" if experiment and config_dir
                and (config_dir / "experiment" / f"{experiment}.yaml").is_file() else "")
        return f"{override} sets a group this run does not use; add it with +{override}{uses}."
    twice = re.match(r"Multiple values for (\S+)\. To override a value use 'override \1: (.+)'", text)
    if twice:  # +model=small: the group already has its default
        group, value = twice.group(1), twice.group(2)
        return f"+{group}={value} adds a second {group}, which already has one; choose it with {group}={value} (no +)."
    found = re.match(r"Could not override '([^']+)'\.", text)
    if found and not isinstance(err.__cause__, (ConfigAttributeError, ConfigKeyError)):
        return None  # e.g. a value of the wrong type for one of Hydra's own typed settings
    found = found or re.match(r"Could not delete from config\. '([^']+)' does not exist\.", text)
    if not found:
        return None
    key = found.group(1)
    near = nearest_key(key, err.__cause__) or nearest_in_options(key, config_dir)
    return key_message(key, near, options_with_key(key, config_dir))


def nearest_in_options(key: str, config_dir: Path | None) -> str | None:
    """The closest key to ``key`` among those the options of its group set at its level (``~callbacks.leak_alrm``:
    a deletion's error carries no config to look in); None when none is close or the group has no folder."""
    from omegaconf import OmegaConf

    group, _, rest = key.lstrip("+~").partition(".")
    folder = config_dir / group if config_dir is not None and rest else None
    if folder is None or not folder.is_dir():
        return None
    parts = rest.split(".")
    names: set[str] = set()
    for path in sorted(folder.glob("*.yaml")):
        try:
            node = OmegaConf.load(path)
        except Exception:  # a file OmegaConf cannot read is Hydra's to report
            continue
        holder = OmegaConf.select(node, ".".join(parts[:-1]), default=None) if len(parts) > 1 else node
        if holder is not None and hasattr(holder, "keys"):
            names.update(str(k) for k in holder.keys())
    near = closest_key(parts, len(parts) - 1, names)
    return f"{group}.{near}" if near else None


EXPECTED = (  # what OmegaConf's message says (lower case) -> what the key takes
    ("to integer", "an integer"), ("to float", "a number"), ("valid bool", "true or false"),
    ("not a listconfig", "a list, e.g. [1,2]"), ("to string", "a string"), ("is not optional", "a value, not null"),
    ("is not a subclass of", "keys of its own (key.name=value), not one value"),
)


def wrong_type_message(override: str, cause: BaseException) -> str:
    """The one sentence for an override whose value is not of its key's type (``model.n_layer=abc``), the key as
    OmegaConf names it (an item of a list: the list)."""
    key = str(getattr(cause, "full_key", "") or override.split("=", 1)[0].lstrip("+~"))
    first = first_line(cause).lower()
    expected = next((words for marker, words in EXPECTED if marker in first), None)
    if "[" in key:  # optim.betas[1]: an item of a typed list
        key = key.split("[", 1)[0]
        return f"{override} has the wrong type: {key} takes a list whose items are each {expected or 'of its type'}."
    if expected is None:
        return f"{override} has the wrong type for {key}."
    return f"{override} has the wrong type: {key} takes {expected}."


# settings of a launcher other than the default one (jobs one by one): where each comes from
LAUNCHER_KEYS = {"n_jobs": "hydra/launcher=parallel", "backend": "hydra/launcher=parallel",
                 "pre_dispatch": "hydra/launcher=parallel", "batch_size": "hydra/launcher=parallel",
                 "timeout_min": "hydra/launcher=slurm", "partition": "hydra/launcher=slurm",
                 "gpus_per_node": "hydra/launcher=slurm", "tasks_per_node": "hydra/launcher=slurm"}


def options_with_key(key: str, config_dir: Path | None) -> list[str]:
    """The options (``corpus=text_file``) of the group ``key`` starts with whose own file sets ``key``: a key of an
    option the run did not choose (``corpus.path`` with the default corpus). [] when there is none."""
    from omegaconf import OmegaConf

    group, _, rest = key.lstrip("+").partition(".")
    folder = config_dir / group if config_dir is not None and rest else None
    if folder is None or not folder.is_dir():
        return []
    owners = []
    for path in sorted(folder.glob("*.yaml")):
        try:
            node = OmegaConf.load(path)
        except Exception:  # a file OmegaConf cannot read is Hydra's to report
            continue
        if _holds(node, rest):  # set there, to a value, to null or to ??? (required)
            owners.append(f"{group}={path.stem}")
    return owners


def _holds(node, rest: str) -> bool:
    """Whether ``node`` has the dotted key ``rest`` (its parent node exists and holds the last part)."""
    from omegaconf import OmegaConf

    parent, _, last = rest.rpartition(".")
    holder = OmegaConf.select(node, parent, default=None) if parent else node
    return holder is not None and hasattr(holder, "keys") and last in holder.keys()  # `in` misses a ??? value


def key_message(key: str, near: str | None, owners: list[str] | None = None) -> str:
    """The one sentence for a key the config does not have, with the option that has it (``owners``) or the
    nearest key when there is one."""
    launcher_key = key.removeprefix("hydra.launcher.")
    if key.startswith("hydra.launcher.") and launcher_key in LAUNCHER_KEYS:
        return (f"{key} is a setting of {LAUNCHER_KEYS[launcher_key]}, not of the launcher this run uses (jobs one by "
                f"one, in this process); add {LAUNCHER_KEYS[launcher_key]} before it.")
    group = key.lstrip("+").split(".", 1)[0]
    swept = any(a.startswith(f"{group}=") and "," in a for a in sys.argv[1:])
    if owners and swept and ("-m" in sys.argv[1:] or "--multirun" in sys.argv[1:]):  # some jobs choose it
        return (f"{key} is a setting of {' and '.join(owners)}, which not every job of this sweep chooses; sweep "
                f"it only with {owners[0]}, and the other options in a sweep of their own.")
    chosen = next((a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith(f"{group}=") and "," not in a), None)
    if owners and chosen:  # another option of the group chosen on purpose: not told to add one it did not want
        return (f"{key} is a setting of {' and '.join(owners)}, not of {group}={chosen}, which this run chose; leave "
                f"{key} out, or choose {owners[0]} instead.")
    if owners:
        return (f"{key} is a setting of {' and '.join(owners)}, which this run did not choose; add "
                f"{owners[0]} before it.")
    if near:
        return f"{key} is not a key of the config; did you mean {near}?"
    return f"{key} is not a key of the config; check the spelling (python train.py --cfg job shows every key)."


def option_message(group: str, name: str, options: list[str]) -> str:
    """The one sentence for an option a config group does not have, with the nearest one and the list."""
    from difflib import get_close_matches

    near = get_close_matches(name, options, n=1)
    return (f"{group}={name} is not an option of {group}; " + (f"did you mean {group}={near[0]}? " if near else "")
            + f"the options: {', '.join(options)}.")


def nearest_key(key: str, cause: BaseException | None) -> str | None:
    """``key`` with its first unknown part (OmegaConf's error names it) replaced by the closest name the config
    has there, if one is close."""
    parent, missing = getattr(cause, "parent_node", None), getattr(cause, "full_key", None)
    if parent is None or not missing or not hasattr(parent, "keys") or not key.startswith(missing):
        return None
    return closest_key(key.split("."), missing.count("."), parent.keys())


def closest_key(parts: list[str], i: int, names) -> str | None:
    """The key ``parts`` with part ``i`` replaced by the closest of ``names`` (the keys the config has there), or
    None when none is close."""
    from difflib import get_close_matches

    near = get_close_matches(parts[i], [str(n) for n in names], n=1)
    return ".".join(parts[:i] + near + parts[i + 1:]) if near else None


def print_hydra_error(err: BaseException) -> None:
    """A Hydra error as Hydra prints it: its message, OmegaConf's below it, the hint for the traceback."""
    from omegaconf.errors import OmegaConfBaseException

    sys.stderr.write(f"{err}\n")
    if isinstance(err.__cause__, OmegaConfBaseException):
        sys.stderr.write(f"{err.__cause__}\n")
    sys.stderr.write("\nSet the environment variable HYDRA_FULL_ERROR=1 for a complete stack trace.\n")
    sys.stderr.flush()


def option_names(override) -> list[str]:
    """The option names an override gives: one, each of a list (``logger=[wandb,csv]``) or each of a sweep
    (``experiment=a,b``); none for a glob (Hydra reads those)."""
    from hydra.core.override_parser.types import ValueType

    if override.is_sweep_override():
        if override.value_type == ValueType.GLOB_CHOICE_SWEEP:
            return []
        return list(override.sweep_string_iterator())
    value = override.value()
    return [str(v) for v in value] if isinstance(value, list) else [str(value)]


def unknown_option(group: str, override) -> str | None:
    """The one sentence for a swept option the config group does not have (``-m model=smal,tiny``), from Hydra's
    list of the group's options; None when every value is one."""
    from hydra.core.global_hydra import GlobalHydra

    options = sorted(GlobalHydra.instance().config_loader().get_group_options(group))
    for name in option_names(override):
        if options and name not in options and not name.startswith("["):  # a swept list of options: Hydra's to read
            return option_message(group, name, options)
    return None


def main_config_dir(config) -> Path | None:
    """The folder of the run's own configs (Hydra's primary config source, as the composed config records it), or
    None when it is not a plain folder (a package's configs)."""
    for source in (config.hydra.runtime.get("config_sources") or []):
        if source.get("provider") == "main" and source.get("schema") == "file":
            return Path(str(source.path))
    return None


def swept_mistake(config, overrides: list[str], groups) -> str | None:
    """The one sentence for a swept key the config does not have (``callbacks.leak_alarm.tolerence=1,2``), a swept
    option a group does not have, or a swept value of the wrong type (``model.n_layer=2,abc``): Hydra composes a
    sweep's jobs only after the sweep has started, so these are caught here, from the sweep's own config, before
    any job runs. ``groups``: the config groups chosen (``model``, ``arm/causal_mask``), whose overrides name
    options, not keys. None when every swept override fits."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf import DictConfig

    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if key in groups and not key.startswith("hydra") and not override.is_delete():
            bad = unknown_option(key, override)
            if bad:
                return bad
            continue
        if override.is_add() or override.is_delete() or key.startswith("hydra") or "/" in key:
            continue
        node, parts = config, key.split(".")
        for i, part in enumerate(parts):
            if not isinstance(node, DictConfig):
                break
            if part not in node.keys():  # `in` misses a required (???) value: a sweep may be what sets it
                return key_message(key, closest_key(parts, i, node.keys()),
                                   options_with_key(key, main_config_dir(config)))
            if i == len(parts) - 1:
                bad = wrong_swept_type(node, part, override)
                if bad:
                    return bad
                break  # the value itself is not read: a required one (???) is what the sweep sets
            node = node[part]
    return None


def switch_mistake(config, overrides: list[str]) -> str | None:
    """The one sentence for a switch (a key the schema types bool) given anything but true or false: OmegaConf
    reads ``compile=yes``, ``on`` or ``1`` as true, where the project's rule is that a word is never a switch.
    None when every such override is true or false (single runs and each value of a sweep)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from omegaconf.nodes import BooleanNode

    from tinygpt.runtime.internals import config_node

    for override in OverridesParser.create().parse_overrides(list(overrides)):
        key = override.key_or_group
        if override.is_delete() or key.startswith("hydra") or "/" in key:
            continue
        if not isinstance(config_node(config, key), BooleanNode):
            continue
        written = (override.input_line or "").split("=", 1)[-1]
        values = list(override.sweep_iterator()) if override.is_sweep_override() else [override.value()]
        texts = written.split(",") if len(written.split(",")) == len(values) else [written] * len(values)
        for value, text in zip(values, texts, strict=True):
            if not isinstance(value, bool) and value is not None:
                return f"{key}={text} must be true or false (a word or a number is not a switch)."
    return None


def wrong_swept_type(parent, name: str, override) -> str | None:
    """The one sentence for a swept value that is not of its key's type (``-m model.n_layer=2,abc``), found by
    setting each value on a copy of the key's parent node (whose type, tinygpt/train/schema.py, converts or
    refuses it); None when every value fits."""
    import copy

    from omegaconf.errors import ValidationError

    written = (override.input_line or "").split("=", 1)[-1]  # the values as the user wrote them, for the message
    if override.is_sweep_override():
        parsed, texts = list(override.sweep_iterator()), written.split(",")
        if len(texts) != len(parsed):  # a value with a comma of its own: as Hydra prints it
            texts = list(override.sweep_string_iterator())
        values = zip(parsed, texts, strict=True)
    else:
        values = [(override.value(), written)]
    for value, typed in values:
        trial = copy.deepcopy(parent)
        try:
            trial[name] = value
        except ValidationError as err:
            return wrong_type_message(f"{override.key_or_group}={typed}", err)
    return None

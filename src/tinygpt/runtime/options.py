"""A group option that does not exist is one line before anything runs, for every group of configs/.

Hydra refuses a missing option of a plain group itself (``model=smal``), but skips an *optional* one without a word:
``experiment=causal_msk`` or ``debug=fsat`` would start the default run, and a sweep would run every job as the
default. So each ``group=option`` on the command line (one option, a list, or a sweep's ``a,b``) is read here
against the files of its group, before Hydra composes anything.
"""

from __future__ import annotations

from pathlib import Path

from tinygpt.runtime.errors import option_message, option_names


def unreadable_override(texts: list[str]) -> str | None:
    """The one sentence for the first override Hydra's grammar cannot read (``corpus.path=~/texts``: Hydra takes
    an unquoted ~, *, spaces and brackets as its own syntax), with the quoting that makes it a plain value."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    for text in texts:
        try:
            OverridesParser.create().parse_overrides([text])
        except HydraException:
            return (f"{text} cannot be read as an override: Hydra takes characters such as ~ * [ ] {{ }} , and "
                    f"spaces in a value as its own syntax; quote the value for Hydra, inside the shell's quotes: "
                    f"{quoted(text)}.")
    return None


def quoted(text: str) -> str:
    """``key=value`` with its value quoted for Hydra (a plain string), inside the shell's double quotes."""
    key, _, value = text.partition("=")
    return f"\"{key}='{value}'\""


FLAGS_WITH_A_VALUE = {"--cfg", "-c", "--package", "-p", "--info", "-i", "--config-path", "-cp", "--config-name",
                      "-cn", "--config-dir", "-cd", "--experimental-rerun"}  # Hydra's: the next word is theirs


def bare_key(argv: list[str]) -> str | None:
    """The one sentence for a key given without a value (``model.n_layer``: Hydra's 5 lines and exit 1), None when
    every word is an override, a deletion (~key) or a flag and its value."""
    for before, word in zip([None, *argv], argv, strict=False):
        if "=" in word or word.startswith(("-", "~")) or before in FLAGS_WITH_A_VALUE:
            continue
        key = word.lstrip("+")
        return f"{word} has no value: give one, {word}=<value> (or ~{key} to leave the key out)."
    return None


MODES = {"--run": "--run", "-r": "--run", "--multirun": "--multirun", "-m": "--multirun", "--cfg": "--cfg",
         "-c": "--cfg", "--info": "--info", "-i": "--info", "--shell-completion": "--shell-completion",
         "-sc": "--shell-completion"}  # Hydra runs one of these per command, and raises a ValueError for two


def mixed_modes(argv: list[str]) -> str | None:
    """The one sentence for a command that asks Hydra for two things at once (``-m ... --info``: Hydra's traceback
    and exit 1), None when it asks for at most one."""
    given = list(dict.fromkeys(MODES[word.split("=")[0]] for word in argv if word.split("=")[0] in MODES))
    if len(given) < 2:
        return None
    return (f"{' and '.join(given)} ask for two things at once: give one of --run, --multirun, --cfg, --info and "
            f"--shell-completion per command (here: drop {given[-1]} or {given[0]}).")


def primary_config(argv: list[str]) -> str | None:
    """The primary config ``--config-name``/``-cn`` names (without .yaml), None when none is named."""
    for before, word in zip([None, *argv], argv, strict=False):
        if before in ("--config-name", "-cn"):
            return word.removesuffix(".yaml")
        for flag in ("--config-name=", "-cn="):
            if word.startswith(flag):
                return word[len(flag):].removesuffix(".yaml")
    return None


def mistyped_option(argv: list[str], config_dir: Path) -> str | None:
    """The one sentence for the first ``group=option`` in ``argv`` whose group is a folder of ``config_dir`` and has
    no such option file (with the nearest option and the list); None when every one exists. Hydra's own groups
    (hydra/...) are left to Hydra; an override its grammar cannot read is one sentence too (unreadable_override)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.errors import HydraException

    named = primary_config(argv)
    other_dir = any(a in ("--config-dir", "-cd") or a.startswith(("--config-dir=", "-cd=")) for a in argv)
    if named is not None and not other_dir and not (config_dir / f"{named}.yaml").is_file():
        from difflib import get_close_matches

        configs = sorted(p.stem for p in config_dir.glob("*.yaml"))
        near = get_close_matches(named, configs, n=1)
        return (f"--config-name={named}: {config_dir.name}/ has no {named}.yaml; "
                + (f"did you mean --config-name={near[0]}? " if near else "") + f"the configs: {', '.join(configs)}.")
    bare = bare_key(argv) or mixed_modes(argv)
    if bare:
        return bare
    texts = [a for a in argv if ("=" in a or a.startswith("~")) and not a.startswith("-")]  # overrides (~key
    # deletes); Hydra's flags start with -
    try:
        overrides = OverridesParser.create().parse_overrides(texts)
    except HydraException:
        return unreadable_override(texts)
    if not {"-m", "--multirun"} & set(argv):
        for override in overrides:
            if override.is_sweep_override() and not override.key_or_group.startswith("hydra"):
                return (f"{override.input_line} gives several values, which makes a sweep: add -m to run one job per "
                        f"value (or, for one value that is this string, quote it for Hydra: "
                        f"{quoted(override.input_line)}).")
    required = required_groups(config_dir)
    for override in overrides:
        group = override.key_or_group
        folder = config_dir / group
        if override.is_delete() and group in required:  # ~model: composed without one, then a cryptic error
            options = sorted(p.stem for p in folder.glob("*.yaml"))
            return (f"{override.input_line} leaves out {group}, which every run needs; choose another with "
                    f"{group}=<option> (the options: {', '.join(options)}).")
        if override.is_delete() or group.split("/")[0] == "hydra" or not folder.is_dir():
            continue
        options = sorted(p.stem for p in folder.glob("*.yaml"))
        if not override.is_sweep_override() and override.value() is None:  # Hydra: a ValueError and its traceback
            return (f"{group}=null is not an option of {group}; leave it out for the default, or pick one of: "
                    f"{', '.join(options)}.")
        try:
            names = option_names(override)
        except HydraException:
            return None  # a sweep Hydra cannot list (interval(), range() of floats): Hydra says what is wrong
        for name in names:
            if name not in options:
                elsewhere = sorted(g.name for g in config_dir.iterdir() if (g / f"{name}.yaml").is_file())
                if elsewhere:  # data=text_file: the corpus is corpus=text_file; said as a fact, not a guess
                    return (f"{group}={name} is not an option of {group} (the options: {', '.join(options)}); "
                            f"{name} is an option of {', '.join(elsewhere[:-1]) + ' and ' if elsewhere[1:] else ''}"
                            f"{elsewhere[-1]}.")
                return option_message(group, name, options)
    return None



def required_groups(config_dir: Path) -> set[str]:
    """The groups train.yaml's defaults list chooses for every run (not ``optional``, not Hydra's own)."""
    from omegaconf import OmegaConf

    try:
        defaults = OmegaConf.to_container(OmegaConf.load(config_dir / "train.yaml")).get("defaults") or []
    except Exception:  # a train.yaml OmegaConf cannot read is Hydra's to report
        return set()
    return {key for entry in defaults if isinstance(entry, dict) for key in entry
            if not key.startswith(("optional ", "override ", "hydra"))}

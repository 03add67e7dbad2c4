"""A group option is checked against its group's files before Hydra composes anything (runtime/options.py)."""

import pytest

from helpers import ROOT
from tinygpt.runtime.options import mistyped_option

CONFIGS = ROOT / "configs"


@pytest.mark.parametrize("argv", [
    [], ["experiment=causal_mask"], ["-m", "experiment=causal_mask_quick,sqrt_dk_quick", "seed=1,2"],
    ["logger=[wandb,csv]"], ["model=tiny", "model.n_layer=3"], ["+experiment=partial_leaks_quick"], ["~debug"],
    ["arm/causal_mask=random_t64"], ["hydra/launcher=basic"], ["-m", "experiment=glob(causal*)"],
    ["--cfg", "job", "experiment=sqrt_dk"], ["model.attn.scale=none"], ["-m", "optim.lr=1e-3,2e-3"],
    ["-m", "experiment=interval(0,1)"],  # a sweep that lists no options: Hydra says what is wrong
    ["--config-name", "train"], ["--config-name=train.yaml"], ["-cn", "mine", "-cd", "/elsewhere"],
])
def test_existing_options_and_other_overrides_pass(argv):
    assert mistyped_option(argv, CONFIGS) is None


@pytest.mark.parametrize("argv, message", [
    (["experiment=causal_msk"], "experiment=causal_msk is not an option of experiment; did you mean "
                                "experiment=causal_mask? the options: "),
    (["-m", "seed=1,2", "experiment=sqrt_dk,sqrt_dk_quik"], "experiment=sqrt_dk_quik is not an option of experiment; "
                                                           "did you mean experiment=sqrt_dk_quick?"),
    (["logger=[wandb,cvs]"], "logger=cvs is not an option of logger; did you mean logger=csv? the options: csv, "
                             "none, wandb."),
    (["+debug=fsat"], "debug=fsat is not an option of debug; did you mean debug=fast?"),
    (["arm/partial_leaks=of_by_one"], "arm/partial_leaks=of_by_one is not an option of arm/partial_leaks; did you "
                                      "mean arm/partial_leaks=off_by_one?"),
    (["debug=zzz"], "debug=zzz is not an option of debug; the options: fast, overfit."),
    (["data=text_file"], "data=text_file is not an option of data (the options: default); text_file is an option of "
                         "corpus."),
    (["model=default"], "model=default is not an option of model (the options: baby, gpt2, gpt2_large, gpt2_medium, "
                        "gpt2_xl, small, tiny); default is an option of callbacks, data, hydra and trainer."),
    (["debug=null"], "debug=null is not an option of debug; leave it out for the default, or pick one of: fast, "
                     "overfit."),
    (["--config-name=trian"], "--config-name=trian: configs/ has no trian.yaml; did you mean --config-name=train? "
                              "the configs: train."),  # Hydra's own was 7 lines and exit 1
    (["-cn", "nope"], "--config-name=nope: configs/ has no nope.yaml; the configs: train."),
])
def test_a_missing_option_is_one_sentence_with_the_nearest(argv, message):
    assert mistyped_option(argv, CONFIGS).startswith(message)


@pytest.mark.parametrize("argv, message", [
    (["~model"], "~model leaves out model, which every run needs; choose another with model=<option> (the options: "
                 "baby, gpt2, gpt2_large, gpt2_medium, gpt2_xl, small, tiny)."),
    (["seed=1", "~logger"], "~logger leaves out logger, which every run needs; choose another with logger=<option> "
                            "(the options: csv, none, wandb)."),
])
def test_deleting_a_group_every_run_needs_is_one_sentence(argv, message):
    """Hydra composes without it, and the run stopped later on "Missing mandatory value: model"."""
    assert mistyped_option(argv, CONFIGS) == message


def test_a_group_is_a_folder_of_the_config_dir(tmp_path):
    (tmp_path / "flavour").mkdir()
    (tmp_path / "flavour" / "sweet.yaml").write_text("x: 1\n")
    assert mistyped_option(["flavour=sweet"], tmp_path) is None
    assert mistyped_option(["flavour=sour"], tmp_path) == ("flavour=sour is not an option of flavour; the options: "
                                                           "sweet.")
    assert mistyped_option(["model=anything"], tmp_path) is None  # no such folder here: a key, Hydra's to read


def test_an_override_hydras_grammar_cannot_read_is_one_line_with_the_quoting_that_works(tmp_path):
    """corpus.path=~/texts: Hydra's lexer failed over four lines with exit 1; now one line, exit 2, and the quoted
    form it suggests is read as a plain value (the corpus expands ~ itself)."""
    from helpers import run_train

    proc = run_train(["corpus=text_file", "corpus.path=~/texts", f"hydra.run.dir={tmp_path / 'r'}"], check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: corpus.path=~/texts cannot be read as an override: Hydra takes characters such as ~ * [ ] { } , and "
        "spaces in a value as its own syntax; quote the value for Hydra, inside the shell's quotes: "
        "\"corpus.path='~/texts'\"."]
    proc = run_train(["corpus=text_file", "corpus.path='~/no/such/file.txt'",
                      f"hydra.run.dir={tmp_path / 'r'}"], check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: corpus.path='~/no/such/file.txt' is not a file."]


def test_a_sweep_without_multirun_is_one_line_saying_to_add_m(tmp_path):
    """seed=1,2 without -m was Hydra's six-line 'Ambiguous value' with exit 1."""
    from helpers import run_train

    assert mistyped_option(["-m", "seed=1,2"], ROOT / "configs") is None
    proc = run_train(["seed=1,2", f"hydra.run.dir={tmp_path / 'r'}"], check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: seed=1,2 gives several values, which makes a sweep: add -m to run one job per value (or, for one "
        "value that is this string, quote it for Hydra: \"seed='1,2'\")."]


@pytest.mark.parametrize("argv, message", [
    (["model.n_layer"], "model.n_layer has no value: give one, model.n_layer=<value> (or ~model.n_layer to leave the "
                        "key out)."),
    (["seed=1", "+extra"], "+extra has no value: give one, +extra=<value> (or ~extra to leave the key out)."),
])
def test_a_key_without_a_value_is_one_sentence(argv, message):
    """Hydra's own answer had been 5 lines and exit 1 (`missing EQUAL at '<EOF>'`)."""
    assert mistyped_option(argv, CONFIGS) == message


@pytest.mark.parametrize("argv", [["--cfg", "job"], ["-c", "job", "seed=1"], ["--info", "defaults"],
                                  ["~callbacks.leak_alarm"], ["-m", "seed=1,2"], ["--config-name", "train"]])
def test_flags_their_values_and_deletions_are_not_bare_keys(argv):
    assert mistyped_option(argv, CONFIGS) is None


@pytest.mark.parametrize("argv, first, second", [
    (["-m", "seed=1,2", "--info"], "--multirun", "--info"),
    (["--cfg", "job", "-m", "seed=1,2"], "--cfg", "--multirun"),
    (["-r", "-i", "config"], "--run", "--info"),
])
def test_two_modes_at_once_are_one_sentence(argv, first, second):
    """Hydra's own answer had been a ValueError's traceback and exit 1 (`Only one of --run, --multirun, ...`)."""
    message = mistyped_option(argv, CONFIGS)
    assert message.startswith(f"{first} and {second} ask for two things at once")
    assert message.endswith(f"(here: drop {second} or {first}).")


def test_one_mode_given_twice_is_not_two():
    assert mistyped_option(["-m", "--multirun", "seed=1,2"], CONFIGS) is None

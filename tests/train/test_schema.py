"""The config's types (tinygpt/train/schema.py): every option of every group composes under them with nothing left
unset, the schemas and the YAML name the same keys, and a value of the wrong type is one sentence before any work."""

import dataclasses
import inspect
import typing
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException
from omegaconf import OmegaConf

from helpers import ROOT, compose_train, corpus_overrides
from tinygpt.analysis.sweep import Run, predictions
from tinygpt.experiments.registry import experiments
from tinygpt.model.config import AttnConfig, GPTConfig
from tinygpt.runtime.errors import composition_mistake, swept_mistake, switch_mistake
from tinygpt.runtime.schema import marked, schema_of
from tinygpt.train.optim import AdamWCosine
from tinygpt.data.corpus import CORPORA
from tinygpt.train.schema import DataSchema, ModelSchema, OptimSchema, path_keys

CONFIGS = ROOT / "configs"


def options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONFIGS / group).glob("*.yaml"))


def composed(overrides):
    """The config as the task function gets it (Hydra's runtime set, so ${hydra:...} resolves; nothing written)."""
    return compose_train(overrides, out_dir=Path("/nonexistent/run"))


@pytest.mark.parametrize("overrides", [[f"model={m}"] for m in options("model")]
                         + [[f"experiment={e}"] for e in options("experiment")]
                         + [[f"debug={d}"] for d in options("debug")]
                         + [corpus_overrides(source) for source in CORPORA])
def test_every_option_composes_under_the_schema_with_no_key_unset(overrides):
    cfg = composed(overrides)
    assert OmegaConf.missing_keys(cfg) == set()
    assert OmegaConf.get_type(cfg.model) is ModelSchema
    assert isinstance(cfg.model.n_layer, int) and isinstance(cfg.optim.lr, float)


@pytest.mark.parametrize("experiment, owner", [(c, e.name) for e in experiments().values() for c in e.configs])
def test_each_experiments_predictions_are_typed_by_its_own_folder(experiment, owner):
    cfg = composed([f"experiment={experiment}"])
    assert OmegaConf.get_type(cfg.prediction) is schema_of(experiments()[owner].prediction)
    assert OmegaConf.missing_keys(cfg.prediction) == set()  # the YAML gives every prediction the schema types


def fields_of(schema) -> dict:
    return {f.name: f.type for f in dataclasses.fields(schema)}


def test_each_schema_is_its_owners_fields_and_the_yaml_names_the_same_keys():
    """model.* is GPTConfig's fields (less the vocabulary, which the data gives), model.attn.* AttnConfig's, optim.*
    AdamWCosine's settings and its _target_: declared once, by the owner; and the default YAML sets each of them."""
    model = fields_of(ModelSchema)
    assert set(model) == {f.name for f in dataclasses.fields(GPTConfig)} - {"vocab_size"}
    assert set(fields_of(model["attn"])) == {f.name for f in dataclasses.fields(AttnConfig)}
    assert fields_of(model["attn"])["causal"] is bool and model["n_layer"] is int and model["dropout"] is float
    optim = fields_of(OptimSchema)
    assert set(optim) == {"_target_", *inspect.signature(AdamWCosine).parameters}
    assert optim["betas"] == typing.List[float] and optim["decay_steps"] is typing.Any  # ${trainer.max_steps}
    cfg = compose_train([])
    assert set(cfg.model) == set(model) and set(cfg.model.attn) == set(fields_of(model["attn"]))
    assert set(cfg.optim) == set(optim)


def test_the_owners_python_defaults_are_the_default_runs():
    """For use from Python the owners keep defaults of their own: the same as the default run's YAML."""
    composed = compose_train([])
    cfg = {k: OmegaConf.to_container(composed[k], resolve=True) for k in ("model", "optim")}
    model = dataclasses.asdict(GPTConfig())
    assert {k: v for k, v in model.items() if k != "vocab_size"} == cfg["model"]
    optim = {k: p.default for k, p in inspect.signature(AdamWCosine).parameters.items()}
    assert {**optim, "betas": list(optim["betas"])} == {k: v for k, v in cfg["optim"].items() if k != "_target_"}


def test_a_new_option_of_the_owner_is_a_typed_key_without_another_declaration():
    @dataclasses.dataclass
    class Options:
        causal: bool = True
        window: int | None = None  # a new option, declared here only
        heads: tuple[int, ...] = (1, 2)
        anything: str | float = "x"

    schema = fields_of(schema_of(Options))
    assert schema == {"causal": bool, "window": typing.Optional[int], "heads": typing.List[int],
                      "anything": typing.Any}
    node = OmegaConf.structured(schema_of(Options))
    assert OmegaConf.missing_keys(node) == {"causal", "window", "heads", "anything"}  # the defaults stay in YAML
    with pytest.raises(Exception, match="window"):
        OmegaConf.merge(node, {"window": "wide"})


def test_a_run_without_an_experiment_has_no_predictions_and_each_corpus_is_typed_by_its_class():
    assert composed([]).prediction is None
    assert OmegaConf.get_type(composed([]).data) is DataSchema
    for option, kind in CORPORA.items():
        cfg = composed([f"corpus={option}"])
        assert OmegaConf.get_type(cfg.corpus) is schema_of(kind, target=True)
        assert set(cfg.corpus) == {"_target_", *(f.name for f in dataclasses.fields(kind))}  # its own fields only
        assert cfg.corpus._target_ == f"tinygpt.data.corpus.{kind.__name__}"
    with pytest.raises(ConfigCompositionException) as err:
        compose_train(["corpus=random_tokens", "corpus.vocab_size=many"])
    assert composition_mistake(err.value) == ("corpus.vocab_size=many has the wrong type: corpus.vocab_size takes an "
                                              "integer.")


def test_an_unset_required_value_is_left_for_the_corpus_to_name():
    """corpus.path is ??? in text_file.yaml: composing succeeds and the corpus names it (tests/data)."""
    assert OmegaConf.missing_keys(composed(["corpus=text_file"])) == {"corpus.path"}


@pytest.mark.parametrize("override, message", [
    ("model.n_layer=abc", "model.n_layer=abc has the wrong type: model.n_layer takes an integer."),
    ("model.attn.causal=maybe", "model.attn.causal=maybe has the wrong type: model.attn.causal takes true or false."),
    ("optim.lr=fast", "optim.lr=fast has the wrong type: optim.lr takes a number."),
    ("seed=1.5", "seed=1.5 has the wrong type: seed takes an integer."),
    ("data.batch_size=twelve", "data.batch_size=twelve has the wrong type: data.batch_size takes an integer."),
    ("seed=true", "seed=true has the wrong type: seed takes an integer."),  # a bool is not an integer here
    ("optim.warmup_steps=abc", "optim.warmup_steps=abc has the wrong type: optim.warmup_steps takes an integer."),
    ("model.dropout=false", "model.dropout=false has the wrong type: model.dropout takes a number."),
    ("data.bpe_vocab_size=true", "data.bpe_vocab_size=true has the wrong type: data.bpe_vocab_size takes an integer."),
    ("model.n_layer='4 layers'", "model.n_layer='4 layers' has the wrong type: model.n_layer takes an integer."),
    ("model.attn={causal: maybe}",
     "model.attn={causal: maybe} has the wrong type: model.attn.causal takes true or false."),
    ("model.activation=[a,b]", "model.activation=[a,b] has the wrong type: model.activation takes a string."),
    ("model.n_layer=null", "model.n_layer=null has the wrong type: model.n_layer takes a value, not null."),
    ("model.attn=abc", "model.attn=abc has the wrong type: model.attn takes keys of its own (key.name=value), not one "
                       "value."),
    ("optim.betas=[0.9,abc]",
     "optim.betas=[0.9,abc] has the wrong type: optim.betas takes a list whose items are each a number."),
    ("diagnostics.max_val_tokens=lots",
     "diagnostics.max_val_tokens=lots has the wrong type: diagnostics.max_val_tokens takes an integer."),
])
def test_a_value_of_the_wrong_type_is_one_sentence(override, message):
    with pytest.raises(ConfigCompositionException) as err:
        compose_train([override])
    assert composition_mistake(err.value) == message


@pytest.mark.parametrize("override, message", [
    ("arm/partial_leaks=off_by_one", "arm/partial_leaks=off_by_one sets a group this run does not use; add it with "
                                     "+arm/partial_leaks=off_by_one, or run the experiment that uses it: "
                                     "experiment=partial_leaks."),
    ("+model=small", "+model=small adds a second model, which already has one; choose it with model=small (no +)."),
])
def test_a_group_override_hydra_cannot_place_is_one_sentence_with_the_form_that_works(override, message):
    with pytest.raises(ConfigCompositionException) as err:
        compose_train([override])
    assert composition_mistake(err.value, ROOT / "configs") == message


@pytest.mark.parametrize("override, message", [
    ("~callbacks.leak_alrm", "callbacks.leak_alrm is not a key of the config; did you mean callbacks.leak_alarm?"),
    ("~model.n_lyer", "model.n_lyer is not a key of the config; did you mean model.n_layer?"),
    ("~callbacks.zzzz", "callbacks.zzzz is not a key of the config; check the spelling (python train.py --cfg job "
                        "shows every key)."),
])
def test_deleting_a_key_the_config_lacks_names_the_nearest_key(override, message):
    """Hydra's error for a deletion carries no config to look in: the group's options are."""
    with pytest.raises(ConfigCompositionException) as err:
        compose_train([override])
    assert composition_mistake(err.value, ROOT / "configs") == message


def test_a_root_key_added_with_a_plus_is_refused_with_the_nearest_key():
    """Hydra adds +foo=bar to the root without a word; nothing would read it."""
    from tinygpt.runtime.errors import ConfigError
    from tinygpt.train.values import check_run_keys

    with pytest.raises(ConfigError, match=r"^sed is not a key of the config \(nothing would read it\); did you mean "
                                          r"seed\?$"):
        check_run_keys(compose_train(["+sed=3"]))


def test_a_prediction_of_the_wrong_type_is_one_sentence():
    with pytest.raises(ConfigCompositionException) as err:
        compose_train(["experiment=causal_mask", "prediction.slope=3"])
    assert composition_mistake(err.value) == ("prediction.slope=3 has the wrong type: prediction.slope takes a list, "
                                              "e.g. [1,2].")
    with pytest.raises(ConfigCompositionException) as err:
        compose_train(["experiment=sqrt_dk", "prediction.basin_delta=wide"])
    assert composition_mistake(err.value) == ("prediction.basin_delta=wide has the wrong type: prediction.basin_delta "
                                              "takes a number.")


def test_a_swept_value_of_the_wrong_type_is_one_sentence_before_any_job():
    cfg = compose_train([])
    groups = {"model", "data", "optim"}
    assert swept_mistake(cfg, ["model.n_layer=2,abc"], groups) == (
        "model.n_layer=abc has the wrong type: model.n_layer takes an integer.")
    assert swept_mistake(cfg, ["optim.lr=1e-3,2e-3", "seed=1,2"], groups) is None
    assert swept_mistake(cfg, ["model.attn.causal=true,false"], groups) is None
    assert swept_mistake(cfg, ["model.attn.causal=true,sometimes"], groups) == (
        "model.attn.causal=sometimes has the wrong type: model.attn.causal takes true or false.")
    assert swept_mistake(cfg, ["seed=1,true"], groups) == "seed=true has the wrong type: seed takes an integer."
    assert swept_mistake(cfg, ["data.bpe_vocab_size=512,1e3"], groups) == (  # as typed, not as parsed
        "data.bpe_vocab_size=1e3 has the wrong type: data.bpe_vocab_size takes an integer.")


def test_a_switch_is_true_or_false_never_a_word_or_a_number_that_omegaconf_would_read_as_one():
    """OmegaConf reads compile=yes, on or 1 as true; the schema's bools take only true and false."""
    for override in (["compile=yes"], ["compile=1"], ["model.attn.causal=off"]):
        cfg = compose_train(override)  # composes: OmegaConf converted it
        key, text = override[0].split("=")
        assert switch_mistake(cfg, override) == (
            f"{key}={text} must be true or false (a word or a number is not a switch).")
    cfg = compose_train([])
    assert switch_mistake(cfg, ["compile=true,yes"]) == (
        "compile=yes must be true or false (a word or a number is not a switch).")
    assert switch_mistake(cfg, ["compile=true", "model.attn.causal=false", "seed=1", "optim.lr=1e-3"]) is None
    assert switch_mistake(cfg, ["compile=true,false", "model=tiny", "~logger"]) is None


@pytest.mark.slow
def test_a_switch_given_a_word_is_refused_by_train_py_in_one_line(tmp_path):
    from helpers import run_train

    for args in (["compile=yes"], ["-m", "compile=false,on"]):
        proc = run_train([*args, f"hydra.run.dir={tmp_path / 'r'}", f"hydra.sweep.dir={tmp_path / 's'}"], check=False)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines()[-1].endswith(
            "must be true or false (a word or a number is not a switch).")
        assert not (tmp_path / "r").exists() and not (tmp_path / "s").exists()


@pytest.mark.parametrize("experiment", list(experiments()))
def test_a_report_reads_the_runs_predictions_over_the_experiments_yaml(experiment, tmp_path):
    """The YAML is the one home of each prediction: a run without one gets the YAML's, a run's own value wins."""
    committed = OmegaConf.to_container(OmegaConf.load(CONFIGS / "experiment" / f"{experiment}.yaml"))["prediction"]
    bare = Run(tmp_path, {"config": {"seed": 1}})
    assert predictions([bare], experiment) == committed
    key = next(iter(committed))
    own = Run(tmp_path, {"config": {"seed": 1, "prediction": {key: "the run's own"}}})
    assert predictions([own], experiment) == {**committed, key: "the run's own"}


@pytest.mark.parametrize("source", list(CORPORA))
def test_a_sweep_jobs_name_leaves_out_every_key_marked_as_a_path(source):
    """configs/hydra/default.yaml's exclude_keys is ${path_keys:}: every field its owner marks metadata={"path":
    True} (the root's, each group's, each corpus's), so a new path field is left out of job names by being marked."""
    own = [f"corpus.{key}" for key in marked(schema_of(CORPORA[source], target=True), "path")]
    paths = [k for k in path_keys() if not k.startswith("corpus.")] + own
    assert {"ckpt_path", "data.cache_dir"} <= set(paths)
    cfg = compose_train([f"corpus={source}", *(f"{key}=/some/where" for key in paths), "seed=3"])
    assert cfg.hydra.job.override_dirname == f"corpus={source},seed=3"
    assert list(cfg.hydra.job.config.override_dirname.exclude_keys) == path_keys()


def test_the_paths_are_found_in_the_owners_fields_through_their_schemas():
    assert marked(schema_of(CORPORA["text_file"], target=True), "path") == ["path"]  # the schema keeps the metadata
    assert {"corpus.path", "corpus.name", "data.cache_dir", "ckpt_path"} <= set(path_keys())
    assert not {"seed", "model.n_layer", "corpus.split"} & set(path_keys())

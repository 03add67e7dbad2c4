"""The worked example (templates/experiment/, README's experiment checklist): laid over the checkout as the checklist
says, it is found, its config composes under its own prediction schema, and its own tests pass; left where it is,
it is not one of the project's experiments (no record in the registry, no report in the index)."""

import importlib.util
import inspect
import re
import sys

import pytest
from hydra.core.config_store import ConfigStore

import tinygpt.experiments
from helpers import ROOT, compose_train
from tinygpt.analysis import sweep, templates
from tinygpt.experiments import registry, report

TEMPLATE = ROOT / "templates" / "experiment"
NAME = "tanh_gelu"


@pytest.fixture
def in_place(monkeypatch):
    """The template as if copied into the checkout: its package on tinygpt.experiments' path, its configs where the
    reports read an experiment's configs, its prediction's schema registered."""
    monkeypatch.setattr(tinygpt.experiments, "__path__",
                        [*tinygpt.experiments.__path__, str(TEMPLATE / "src" / "tinygpt" / "experiments")])
    monkeypatch.setattr(report, "CONFIGS", TEMPLATE / "configs" / "experiment")
    monkeypatch.setattr(sweep, "EXPERIMENT_CONFIGS", TEMPLATE / "configs" / "experiment")
    registry.experiments.cache_clear()
    registry.register_schemas()
    yield
    registry.experiments.cache_clear()
    templates.blocks.cache_clear()
    ConfigStore.instance().repo["schema"]["prediction"].pop(f"{NAME}.yaml", None)
    for module in [m for m in sys.modules if m.startswith(f"tinygpt.experiments.{NAME}")]:
        sys.modules.pop(module)


def template_tests():
    """The template's own test functions (tests/experiments/tanh_gelu/test_tanh_gelu_report.py), by name."""
    path = TEMPLATE / "tests" / "experiments" / NAME / f"test_{NAME}_report.py"
    spec = importlib.util.spec_from_file_location(f"template_{NAME}_test_report", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {name: f for name, f in inspect.getmembers(module, inspect.isfunction) if name.startswith("test_")}


def test_left_where_it_is_the_template_is_no_experiment_of_the_project():
    assert NAME not in registry.experiments()
    assert not (ROOT / "configs" / "experiment" / f"{NAME}.yaml").exists()
    assert not (ROOT / "docs" / "experiments" / NAME).exists()


def test_its_files_are_those_readmes_checklist_names_and_no_others():
    """Every path the experiment checklist names (``<name>`` for the experiment's) is in the template, and every file
    of the template but its own README.md lies under one of them."""
    text = (ROOT / "README.md").read_text()
    checklist = text[text.index("**Add an experiment**"):text.index("## Experiments")]
    named = {p.replace("<name>", NAME).rstrip("/")
             for p in re.findall(r"`((?:src|configs|docs|tests)/[^`]*<name>[^`]*)`", checklist)}
    assert named and all((TEMPLATE / p).exists() for p in named), \
        sorted(p for p in named if not (TEMPLATE / p).exists())
    files = {p.relative_to(TEMPLATE).as_posix() for p in TEMPLATE.rglob("*") if p.is_file()
             and "__pycache__" not in p.parts} - {"README.md"}
    assert files and all(any(f == p or f.startswith(p + "/") for p in named) for f in files), files


def test_laid_over_the_checkout_it_is_found_and_its_config_composes(in_place):
    assert registry.experiments()[NAME].configs == (NAME,)
    cfg = compose_train([f"hydra.searchpath=[file://{TEMPLATE / 'configs'}]", f"experiment={NAME}"])
    assert cfg.prediction.band == 0.02 and cfg.model.activation == "gelu" and cfg.trainer.max_steps == 500
    assert cfg.hydra.launcher._target_.endswith("JoblibLauncher")
    assert dict(cfg.hydra.sweeper.params) == {f"arm/{NAME}": "exact,tanh", "seed": "1,2,3"}
    tanh = compose_train([f"hydra.searchpath=[file://{TEMPLATE / 'configs'}]", f"experiment={NAME}",
                          f"arm/{NAME}=tanh"])
    assert tanh.model.activation == "gelu_tanh"


@pytest.mark.parametrize("name", sorted(template_tests()))
def test_laid_over_the_checkout_its_own_tests_pass(in_place, name, tmp_path):
    template_tests()[name](tmp_path)

"""The experiments are found in their folders (one EXPERIMENT record each), not listed by hand; each record's configs
exist, every experiment config with predictions belongs to one, and reading the records imports no torch."""

import subprocess
import sys
from pathlib import Path

import pytest

import tinygpt.experiments
from helpers import ROOT
from tinygpt.experiments import registry
from tinygpt.experiments.registry import Experiment, experiment_of, experiments

CONFIGS = ROOT / "configs" / "experiment"


def test_every_experiment_folder_is_found_with_its_configs_in_the_order_its_record_gives():
    found = experiments()
    folders = sorted(p.name for p in Path(tinygpt.experiments.__path__[0]).iterdir() if (p / "__init__.py").is_file())
    assert sorted(found) == folders and found
    orders = [record.order for record in found.values()]
    assert orders == sorted(orders) and len(set(orders)) == len(orders) and 0 not in orders  # each its own place
    for record in found.values():
        assert set(record.staged) <= set(record.configs) and record.sweeps
        for config in record.configs:
            assert (CONFIGS / f"{config}.yaml").is_file(), config


@pytest.mark.parametrize("config", [None, *sorted(p.stem for p in CONFIGS.glob("*.yaml"))])
def test_a_config_belongs_to_the_experiment_that_records_it_or_to_none(config):
    owners = [e.name for e in experiments().values() if config in e.configs]
    assert len(owners) <= 1, owners  # no config is two experiments'
    record = experiment_of(config)
    assert (record.name if record else None) == (owners[0] if owners else None)


def test_every_config_with_predictions_belongs_to_an_experiment():
    with_predictions = sorted(p.stem for p in CONFIGS.glob("*.yaml") if "prediction" in p.read_text())
    assert with_predictions and all(experiment_of(c) is not None for c in with_predictions), with_predictions


def test_a_new_folder_is_found_without_any_other_edit(tmp_path, monkeypatch):
    folder = tmp_path / "tinygpt_extra" / "my_probe"
    folder.mkdir(parents=True)
    (folder / "__init__.py").write_text(
        "from dataclasses import dataclass\n"
        "from tinygpt.experiments.registry import Experiment\n\n\n"
        "@dataclass\nclass Prediction:\n    gap: float\n\n\n"
        "EXPERIMENT = Experiment('my_probe', Prediction, variants=('my_probe_quick',))\n")
    monkeypatch.setattr(tinygpt.experiments, "__path__", [*tinygpt.experiments.__path__, str(folder.parent)])
    registry.experiments.cache_clear()
    try:
        found = experiments()
        assert list(found)[-1] == "my_probe" and experiment_of("my_probe_quick").name == "my_probe"  # no order: last
    finally:
        sys.modules.pop("tinygpt.experiments.my_probe", None)
        registry.experiments.cache_clear()


def test_a_record_named_for_another_folder_is_refused(monkeypatch):
    module = type(sys)("tinygpt.experiments.elsewhere")
    module.EXPERIMENT = Experiment("somewhere", object)
    monkeypatch.setitem(sys.modules, "tinygpt.experiments.elsewhere", module)
    monkeypatch.setattr(registry.pkgutil, "iter_modules",
                        lambda path: [type("Info", (), {"name": "elsewhere", "ispkg": True})()])
    registry.experiments.cache_clear()
    try:
        with pytest.raises(ValueError, match="holds the record of 'somewhere'"):
            experiments()
    finally:
        registry.experiments.cache_clear()


def test_registering_the_schemas_imports_no_torch():
    """train.py registers every schema before Hydra composes: a mistyped key must not wait for torch."""
    code = ("import sys\nfrom tinygpt.train import schema\nfrom tinygpt.experiments import registry\n"
            "schema.register_schemas(); registry.register_schemas()\n"
            "print(sorted(m for m in ('torch', 'lightning', 'wandb') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "[]", out.stderr[-2000:]

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


def test_every_experiment_folder_is_found_with_its_configs():
    found = experiments()
    folders = sorted(p.name for p in Path(tinygpt.experiments.__path__[0]).iterdir() if (p / "__init__.py").is_file())
    assert list(found) == folders and {"causal_mask", "sqrt_dk", "partial_leaks"} <= set(found)
    assert found["sqrt_dk"].sweeps == ("sqrt_dk", "sqrt_dk_fp16")
    assert found["sqrt_dk"].staged == ("sqrt_dk", "sqrt_dk_fp32", "sqrt_dk_fp16_probe")
    assert found["causal_mask"].sweeps == ("causal_mask",) and found["causal_mask"].staged == ()
    for record in found.values():
        for config in record.configs:
            assert (CONFIGS / f"{config}.yaml").is_file(), config


@pytest.mark.parametrize("config, name", [("causal_mask_quick", "causal_mask"), ("sqrt_dk", "sqrt_dk"),
                                          ("sqrt_dk_fp16", "sqrt_dk"), ("partial_leaks_quick", "partial_leaks"),
                                          ("gpu_small", None), (None, None)])
def test_a_config_belongs_to_its_experiment(config, name):
    record = experiment_of(config)
    assert (record.name if record else None) == name


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
        assert "my_probe" in found and experiment_of("my_probe_quick").name == "my_probe"
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

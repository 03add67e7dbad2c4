"""train.values: every value the config can be checked on is checked before torch is imported, in one line each."""

import os
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from tinygpt.runtime.errors import ConfigError
from tinygpt.train.values import TRAINER_NUMBERS, check_trainer

BAD_TRAINER = [  # each key Lightning takes as a number, with values it accepts and then fails on (or misreads)
    ("val_check_interval", 0), ("val_check_interval", -5), ("val_check_interval", 1.5), ("val_check_interval", True),
    ("log_every_n_steps", 0), ("log_every_n_steps", 2.5), ("gradient_clip_val", -1.0), ("gradient_clip_val", "x"),
    ("num_nodes", 0), ("devices", 0), ("devices", -2), ("devices", "0"), ("devices", []), ("devices", True),
    ("check_val_every_n_epoch", 0), ("num_sanity_val_steps", -2), ("accumulate_grad_batches", 0),
]
GOOD_TRAINER = [("val_check_interval", 1), ("val_check_interval", 0.25), ("log_every_n_steps", 1),
                ("gradient_clip_val", None), ("gradient_clip_val", 0), ("devices", -1), ("devices", "auto"),
                ("devices", [0, 1]), ("devices", "0,1"), ("check_val_every_n_epoch", None),
                ("num_sanity_val_steps", -1), ("accumulate_grad_batches", 4)]


@pytest.mark.parametrize("key, value", BAD_TRAINER)
def test_a_trainer_number_out_of_range_is_one_sentence_naming_it(key, value):
    with pytest.raises(ConfigError) as err:
        check_trainer(OmegaConf.create({"max_steps": 10, key: value}))
    assert str(err.value) == f"trainer.{key}={value!r} must be {TRAINER_NUMBERS[key][0]}."


@pytest.mark.parametrize("key, value", GOOD_TRAINER)
def test_a_trainer_number_lightning_takes_is_accepted(key, value):
    check_trainer(OmegaConf.create({"max_steps": 10, key: value}))


@pytest.mark.parametrize("override", ["model.n_head=5", "trainer.val_check_interval=0", "optim.lr=-1",
                                      "data.batch_size=0", "corpus=text_file"])
def test_train_py_refuses_a_bad_value_without_importing_torch_lightning_or_wandb(override, tmp_path):
    """The real command, watched by Python's import log: one line, exit 2, and none of the heavy modules loaded."""
    from helpers import ROOT

    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "train.py"), override], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "WANDB_MODE": "offline"})
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    errors = [line for line in lines if not line.startswith("import time:")]
    assert len(errors) == 1 and errors[0].startswith("error: ")
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert not imported & {"torch", "lightning", "wandb", "transformers"}
    assert "hydra" in imported  # the log is real
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").rglob("*.yaml"))

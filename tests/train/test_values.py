"""train.values: every value the config can be checked on is checked before torch is imported, in one line each."""

import os
import re
import subprocess
import sys

import pytest
from omegaconf import OmegaConf

from tinygpt.runtime.errors import ConfigError
from tinygpt.train.values import TRAINER_KEYS, TRAINER_NUMBERS, check_trainer

BAD_TRAINER = [  # each key Lightning takes as a number, with values it accepts and then fails on (or misreads)
    ("val_check_interval", 0), ("val_check_interval", -5), ("val_check_interval", 1.5), ("val_check_interval", True),
    ("log_every_n_steps", 0), ("log_every_n_steps", 2.5), ("gradient_clip_val", -1.0), ("gradient_clip_val", "x"),
    ("num_nodes", 0), ("devices", 0), ("devices", -2), ("devices", "0"), ("devices", []), ("devices", True),
    ("check_val_every_n_epoch", 0), ("num_sanity_val_steps", -2), ("accumulate_grad_batches", 0),
]
GOOD_TRAINER = [("val_check_interval", 1), ("log_every_n_steps", 1),
                ("gradient_clip_val", None), ("gradient_clip_val", 0), ("devices", -1), ("devices", "auto"),
                ("devices", [0, 1]), ("devices", "0,1"), ("check_val_every_n_epoch", None),
                ("num_sanity_val_steps", -1), ("accumulate_grad_batches", 4)]
GPU = {"max_steps": 10, "accelerator": "gpu"}  # -1 and device lists are GPUs' (the CPU takes a count only)


@pytest.mark.parametrize("key, value", BAD_TRAINER)
def test_a_trainer_number_out_of_range_is_one_sentence_naming_it(key, value):
    with pytest.raises(ConfigError) as err:
        check_trainer(OmegaConf.create({**GPU, key: value}))
    assert str(err.value) == f"trainer.{key}={value!r} must be {TRAINER_NUMBERS[key][0]}."


@pytest.mark.parametrize("key, value", GOOD_TRAINER)
def test_a_trainer_number_lightning_takes_is_accepted(key, value):
    check_trainer(OmegaConf.create({**GPU, key: value}))


@pytest.mark.parametrize("devices", [-1, [0, 1], "0,1"])
def test_gpu_only_device_counts_are_refused_on_the_cpu(devices):
    """Lightning's CPUAccelerator refuses these after torch ("should be an int > 0"); said here, naming the CPU."""
    with pytest.raises(ConfigError) as err:
        check_trainer(OmegaConf.create({"max_steps": 10, "accelerator": "cpu", "devices": devices}))
    assert str(err.value) == (f"trainer.devices={devices!r} must be a whole number of processes >= 1 or 'auto' on "
                              "the CPU (-1 and device lists name GPUs).")
    check_trainer(OmegaConf.create({"max_steps": 10, "accelerator": "cpu", "devices": 2}))


def test_a_fraction_of_an_epoch_is_refused_as_lightning_would_after_torch():
    """Validation is by steps (check_val_every_n_epoch=null), where Lightning takes only a whole number."""
    with pytest.raises(ConfigError, match=r"^trainer.val_check_interval=0.25 must be a whole number of steps >= 1 "):
        check_trainer(OmegaConf.create({"max_steps": 10, "val_check_interval": 0.25}))


@pytest.mark.parametrize("override", ["model.n_head=5", "trainer.val_check_interval=0", "optim.lr=-1",
                                      "data.batch_size=0", "corpus=text_file", "callbacks.leak_alarm.action=shout",
                                      "callbacks.text_samples.temperature=0", "ckpt_path=/nonexistent",
                                      "init_from=/nonexistent", "init_from=gpt3", "corpus=hf_hub",
                                      "model=gpt2_xl trainer.accelerator=cpu"])
def test_train_py_refuses_a_bad_value_without_importing_torch_lightning_or_wandb(override, tmp_path):
    """The real command, watched by Python's import log: one line, exit 2, and none of the heavy modules loaded."""
    from helpers import ROOT

    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "train.py"), *override.split()], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "WANDB_MODE": "offline"})
    assert out.returncode == 2
    lines = out.stderr.splitlines()
    errors = [line for line in lines if not line.startswith("import time:")]
    assert len(errors) == 1 and errors[0].startswith("error: ")
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert not imported & {"torch", "lightning", "wandb", "transformers"}
    assert "hydra" in imported  # the log is real
    assert not (tmp_path / "outputs").exists() or not any((tmp_path / "outputs").rglob("*.yaml"))


def test_a_hub_dataset_the_hub_cannot_serve_is_refused_before_torch(tmp_path):
    """corpus=hf_hub with a Hub id, no network (a closed local port for the endpoint) and no local copy: refused
    after 9.8 s (at set-up); now in the checks before torch."""
    from helpers import ROOT

    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "train.py"), "corpus=hf_hub",
                          "corpus.name=someone/nothing", f"data.cache_dir={tmp_path / 'cache'}"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120,
                         env={**{k: v for k, v in os.environ.items() if not k.endswith("_OFFLINE")},
                              "WANDB_MODE": "offline", "HF_ENDPOINT": "http://127.0.0.1:9"})
    lines = out.stderr.splitlines()
    errors = [line for line in lines if not line.startswith("import time:")]
    assert out.returncode == 2 and len(errors) == 1
    assert errors[0].startswith("error: corpus.name='someone/nothing': the Hugging Face Hub (http://127.0.0.1:9) is "
                                "unreachable (") and errors[0].endswith("give a local dir of data files.")
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert not imported & {"torch", "lightning", "datasets"}


def test_a_forced_online_wandb_without_credentials_is_refused_before_torch(tmp_path):
    """logger.wandb.mode=online with no credentials: refused after 10.7 s (at set-up); now before torch and
    Lightning (wandb itself is imported to find its credentials)."""
    from helpers import ROOT

    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB_")}
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "train.py"), "logger.wandb.mode=online"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**env, "NETRC": str(tmp_path / "netrc"), "WANDB_CONFIG_DIR": str(tmp_path)})
    lines = out.stderr.splitlines()
    errors = [line for line in lines if not line.startswith("import time:")]
    assert out.returncode == 2 and errors == [
        "error: logger.wandb.mode=online but wandb has no credentials; run `wandb login` (or set WANDB_API_KEY), "
        "or log offline: WANDB_MODE=offline."]
    imported = {line.rsplit("|", 1)[1].strip() for line in lines if line.startswith("import time:")}
    assert not imported & {"torch", "lightning"} and "wandb" in imported


@pytest.mark.parametrize("override, message", [
    ("callbacks.attention_maps.probe=''", "callbacks.attention_maps.probe is empty"),
    ("callbacks.attention_maps.every_n_steps=-1", "callbacks.attention_maps.every_n_steps=-1 must be a whole number"),
    ("callbacks.attention_maps.every_n_steps=2.5", "callbacks.attention_maps.every_n_steps=2.5 must be a whole number"),
    ("callbacks.text_samples.prompt=''", "callbacks.text_samples.prompt='' must be a non-empty text each sample"),
    ("callbacks.text_samples.top_k=0", "callbacks.text_samples.top_k=0 must be a positive integer"),
    ("callbacks.text_samples.max_new_tokens=-1", "callbacks.text_samples.max_new_tokens=-1 must be a whole number"),
    ("callbacks.honest_loss.positions=0", "callbacks.honest_loss.positions=0 must be a positive integer"),
    ("callbacks.stability.spike_factor=1", "callbacks.stability.spike_factor=1 must be above 1."),
    ("callbacks.stability.windows=0", "callbacks.stability.windows=0 must be a positive integer"),
    ("callbacks.leak_alarm.z=0", "callbacks.leak_alarm.z=0 must be a positive number"),
    ("callbacks.divergence_guard.factor=-3", "callbacks.divergence_guard.factor=-3 must be a positive number"),
    ("callbacks.heap_trim.every_n_steps=0", "callbacks.heap_trim.every_n_steps=0 must be a positive integer"),
    ("callbacks.progress_bar.refresh_rate=-1",
     "callbacks.progress_bar.refresh_rate=-1 must be a whole number >= 0 (0: no bar)."),
    ("ckpt_path=last", "ckpt_path=last but "),
    ("+model.foo=1", "model.foo is not a setting of the model; python train.py --cfg job shows model's keys."),
    ("init_from=Scratch", "init_from='Scratch': did you mean init_from=scratch (random weights)?"),
    ("init_from=gtp2", "init_from='gtp2' is not one of GPT-2's Hub names (gpt2, gpt2-medium, gpt2-large, gpt2-xl, "
                       "distilgpt2); did you mean gpt2?"),
    ("init_from=gpt2 model.position=alibi", "model.position='alibi' cannot start from init_from='gpt2': GPT-2's "
                                            "weights are a model with position='learned'; drop the override, or train "
                                            "from scratch."),  # before the Hub is asked
    ("model.position=sinusoidal", "model.position='sinusoidal' is not one of learned, none, rope, alibi."),
    ("model.extrapolate=true", "model.extrapolate=true attends past block_size, where model.position=learned has no "
                               "position"),
    ("callbacks.model_checkpoint.mode=minimum", "callbacks.model_checkpoint.mode='minimum' is not one of min, max."),
    ("callbacks.model_checkpoint.save_top_k=-2", "callbacks.model_checkpoint.save_top_k=-2 must be a whole number"),
    ("callbacks.lr_monitor.logging_interval=hour", "callbacks.lr_monitor.logging_interval='hour' is not one of step"),
    ("trainer.precision=fp16", "trainer.precision='fp16' is not one of 32-true, bf16-mixed, 16-mixed"),
    ("logger.wandb.mode=onlin", "logger.wandb.mode='onlin' is not one of online, offline, disabled, dryrun, shared "
                                "(or null to go by WANDB_MODE and the server)."),
    ("corpus=random_tokens data.tokenizer=bpe", "data.tokenizer='bpe' tokenizes a text corpus, and "
                                                "corpus=random_tokens is token ids already; leave data.tokenizer out."),
    ("data.tokenizer=pretrained data.tokenizer_dir=/nonexistent", "data.tokenizer_dir='/nonexistent' is not a "
                                                                  "directory."),
    ("data.cache_dir=/proc/tinygpt-cache", "data.cache_dir='/proc/tinygpt-cache' cannot be written: no file can be "
                                           "created in /proc ("),
    ("+callbacks.foo._target_=nope.Nope", "callbacks.foo._target_='nope.Nope' cannot be imported (no package "
                                          "'nope'); give a callback class as package.module.Class."),
    ("logger.wandb.mode=''", "logger.wandb.mode='' is not one of online, offline, disabled, dryrun, shared "),
    ("callbacks.model_checkpoint.dirpath=/proc/tinygpt-ckpt", "callbacks.model_checkpoint.dirpath="
                                                            "'/proc/tinygpt-ckpt' cannot be written: no file can be "
                                                            "created in /proc ("),
    ("callbacks.model_checkpoint.dirpath=''", "callbacks.model_checkpoint.dirpath='' must be a directory path (or "
                                             "null for Lightning's default)."),
    ("data.tokenizer=word", "data.tokenizer='word' is not one of char, bpe, pretrained."),
    ("data.bpe_vocab_size=-5", "data.bpe_vocab_size=-5 must be a positive integer."),
    ("data.tokenizer=bpe data.bpe_vocab_size=1", "data.bpe_vocab_size=1 is too small for byte-level BPE: it needs at "
                                                 "least 257 (256 bytes + <|endoftext|>)."),  # had taken 9-10 s
    ("corpus=random_tokens corpus.n_tokens=100000000000", "corpus.n_tokens=100000000000 draws 931.3 GiB of token "
                                                          "ids at once, more than the "),  # had been numpy's, after 9 s
    ("callbacks.text_samples.final_only=maybe", "callbacks.text_samples.final_only='maybe' must be true or false."),
    ("callbacks.stability.future_leak=1", "callbacks.stability.future_leak=1 must be true or false."),
    ("callbacks.model_checkpoint.monitor=val/los", "callbacks.model_checkpoint.monitor='val/los' is not a metric a "
                                                   "run logs (one of val/loss, val/loss_honest, val/loss_probe, "
                                                   "train/loss, or null for the last checkpoint only)."),
])
def test_each_callback_value_and_start_file_is_checked_before_torch(override, message, tmp_path):
    """check_values on the composed config, in this process: the sentences the callbacks themselves raise."""
    from helpers import compose_train
    from tinygpt.train.values import check_values

    cfg = compose_train(override.split(" "), out_dir=tmp_path)
    with pytest.raises(ConfigError) as err:
        check_values(cfg, tmp_path)
    assert str(err.value).startswith(message), str(err.value)


def test_every_callback_of_ours_has_its_settings_and_the_yamls_defaults():
    """Each tinygpt callback in configs/callbacks/default.yaml takes its settings from callback_settings (so they are
    checked before torch), and the YAML's values are the settings' defaults (declared once, as the model's are)."""
    from dataclasses import fields

    from helpers import ROOT
    from tinygpt.train.callback_settings import settings_of

    nodes = OmegaConf.load(ROOT / "configs" / "callbacks" / "default.yaml")
    ours = {name: node for name, node in nodes.items() if str(node["_target_"]).startswith("tinygpt.")}
    assert len(ours) >= 8
    for name, node in ours.items():
        settings = settings_of(node["_target_"])
        if node["_target_"].endswith("StepClock"):
            assert settings is None  # no settings of its own
            continue
        assert settings is not None, name
        defaults = {f.name: f.default for f in fields(settings)}
        given = {k: v for k, v in node.items() if k != "_target_"}
        assert {k: defaults[k] for k in given} == given or name == "progress_bar", (name, given, defaults)
        if name == "progress_bar":
            assert given == {"refresh_rate": 5} and defaults == {"refresh_rate": 1}  # Lightning's own default is 1


def test_a_misspelled_callback_setting_is_named_with_the_settings_it_has():
    from tinygpt.train.callback_settings import check_callbacks

    cfg = OmegaConf.create({"alarm": {"_target_": "tinygpt.train.probes.leak_alarm.LeakAlarm", "tolerence": 1.0}})
    with pytest.raises(ConfigError, match=r"^callbacks.alarm.tolerence is not a setting of LeakAlarm \(its settings: "
                                          r"action, min_gap, tolerance, windows, z\).$"):
        check_callbacks(cfg)


def test_a_sweep_refuses_a_value_its_jobs_share_before_any_job_or_dir(tmp_path):
    """`-m seed=1,2 optim.lr=-1`: one line and exit 2 from the sweep itself, no multirun dir (every job had failed
    in turn, leaving a sweep dir with an error.txt per job)."""
    from helpers import ROOT

    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", "seed=1,2", "optim.lr=-1"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env={**os.environ, "WANDB_MODE": "offline"})
    assert out.returncode == 2 and out.stderr.strip() == (
        "error: optim.lr=-1 must be > 0."), out.stderr
    assert not (tmp_path / "multirun").exists()


@pytest.mark.parametrize("swept, message", [
    # a required key the sweep itself sets had been "corpus.path is required but not set"; now each job's own value
    (["corpus=text_file", "corpus.path=/nowhere/a.txt,/nowhere/b.txt"], "corpus.path='/nowhere/a.txt' is not a file."),
    (["model.n_layer=2,four"], "model.n_layer=four has the wrong type: model.n_layer takes an integer."),
    (["+trainer.foo=1,2"], "trainer.foo is not an argument of Lightning's Trainer; python train.py --cfg job shows "
                           "the trainer's keys."),
])
def test_a_sweeps_own_values_are_checked_as_a_single_runs_are(swept, message, tmp_path):
    from helpers import ROOT

    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", *swept], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120, env={**os.environ, "WANDB_MODE": "offline"})
    assert out.returncode == 2 and out.stderr.strip() == f"error: {message}", out.stderr
    assert not (tmp_path / "multirun").exists()


def test_a_start_file_of_the_wrong_kind_is_refused_before_torch(tmp_path):
    """A ckpt_path that is no torch archive, an init_from dir without config.json: the retry had measured 9-10 s for
    each, after torch, Lightning and the checkpoint reader."""
    from helpers import compose_train
    from tinygpt.train.values import check_values

    (tmp_path / "notes.txt").write_text("not a checkpoint")
    (tmp_path / "empty").mkdir()
    (tmp_path / "bert").mkdir()
    (tmp_path / "bert" / "config.json").write_text('{"model_type": "bert"}')
    for override, message in ((f"ckpt_path={tmp_path / 'notes.txt'}", "notes.txt' is not a readable checkpoint"),
                              (f"init_from={tmp_path / 'empty'}", "empty has no config.json; a Hugging Face GPT-2"),
                              (f"init_from={tmp_path / 'bert'}", "bert': config.json: model_type='bert', not gpt2; "
                                                                 "init_from loads GPT-2 models only.")):
        with pytest.raises(ConfigError, match=re.escape(message)):
            check_values(compose_train([override], out_dir=tmp_path / "run"), tmp_path / "run")


def test_wandb_mode_from_the_environment_is_checked_with_the_config(tmp_path, monkeypatch):
    from helpers import compose_train
    from tinygpt.train.values import check_values

    monkeypatch.setenv("WANDB_MODE", "ofline")
    with pytest.raises(ConfigError, match=r"^WANDB_MODE='ofline' is not one of online, offline, disabled"):
        check_values(compose_train([], out_dir=tmp_path), tmp_path)
    monkeypatch.setenv("WANDB_MODE", "")  # set but empty: wandb itself fails on it with a pydantic traceback
    with pytest.raises(ConfigError, match=r"^WANDB_MODE='' is not one of online, .*, shared \(or unset it\)\.$"):
        check_values(compose_train([], out_dir=tmp_path), tmp_path)


def test_a_checkpoint_dir_under_a_file_is_refused_before_anything_is_made(tmp_path):
    from helpers import compose_train
    from tinygpt.train.values import check_values

    (tmp_path / "afile").write_text("x")
    with pytest.raises(ConfigError, match=re.escape(f"{tmp_path / 'afile'} is a file, not a directory; give a "
                                                    "writable directory.")):
        check_values(compose_train([f"callbacks.model_checkpoint.dirpath={tmp_path / 'afile' / 'ckpts'}"],
                                   out_dir=tmp_path / "run"), tmp_path / "run")
    writable = tmp_path / "new" / "ckpts"
    check_values(compose_train([f"callbacks.model_checkpoint.dirpath={writable}"], out_dir=tmp_path / "run"),
                 tmp_path / "run")
    assert not (tmp_path / "new").exists()  # found out without creating anything


def test_a_gpu_asked_for_on_a_linux_machine_without_a_gpu_driver_is_refused_before_torch(monkeypatch):
    """No NVIDIA or ROCm device file: torch could not see a GPU either (the retry measured 7-9 s to say so)."""
    from tinygpt.train import values

    monkeypatch.setattr(values.sys, "platform", "linux")
    monkeypatch.setattr(values, "GPU_DRIVER_FILES", ("/nonexistent/nvidia",))
    with pytest.raises(ConfigError, match=r"^trainer.accelerator='gpu' but this machine has no CUDA GPU; use "):
        values.check_gpu_visible(OmegaConf.create({"accelerator": "gpu"}))
    values.check_gpu_visible(OmegaConf.create({"accelerator": "auto"}))  # auto falls back to the CPU
    monkeypatch.setattr(values, "GPU_DRIVER_FILES", ("/",))  # a driver: torch decides at set-up
    values.check_gpu_visible(OmegaConf.create({"accelerator": "gpu"}))


def test_a_corpus_too_short_for_its_splits_is_refused_before_tokenizing(tmp_path):
    """A 5-byte corpus had been refused after torch and the tokenizer (9.4 s); the files' sizes bound the tokens."""
    from helpers import compose_train
    from tinygpt.train.values import check_values

    short = tmp_path / "short.txt"
    short.write_text("hello")
    cfg = compose_train(["corpus=text_file", f"corpus.path={short}"], out_dir=tmp_path)
    with pytest.raises(ConfigError) as err:
        check_values(cfg, tmp_path)
    assert str(err.value) == (
        f"corpus.path='{short}' holds 5 bytes, too few for a training and a validation split of data.block_size + 2 "
        "= 66 tokens each (a token is at least one byte); use a larger corpus or a smaller block_size.")
    short.write_text("hello!")  # 6 bytes may make two splits of 3 tokens: left to the tokenized splits
    check_values(compose_train(["corpus=text_file", f"corpus.path={short}", "model.block_size=1",
                                "data.block_size=1"], out_dir=tmp_path), tmp_path)


def test_a_corpus_file_of_another_encoding_is_refused_before_torch(tmp_path):
    """Its first MiB is decoded when the config is checked (the retry measured 10 s and Lightning's INFO lines
    before the sentence); a bad byte further in is found as the file is read, with the same sentence."""
    from helpers import compose_train
    from tinygpt.data.corpus import HEAD_CHECKED, check_utf8
    from tinygpt.train.values import check_values

    latin = tmp_path / "latin1.txt"
    latin.write_bytes("café\n".encode("latin-1"))
    with pytest.raises(ConfigError, match=r"^corpus.path='.*latin1.txt' is not UTF-8 text \(byte 0xe9 at offset 3\)"):
        check_values(compose_train(["corpus=text_file", f"corpus.path={latin}"], out_dir=tmp_path / "r"), tmp_path)
    late = tmp_path / "late.txt"
    late.write_bytes(b"a" * (HEAD_CHECKED - 1) + "é".encode() + b"\xff")  # a character cut by the head, then a bad byte
    check_utf8(late, head=HEAD_CHECKED)  # the head is clean (the cut character is not an error)
    with pytest.raises(ValueError, match=rf"byte 0xff at offset {HEAD_CHECKED + 1}\)"):
        check_utf8(late)


@pytest.mark.parametrize("args, line", [
    (["model.n_head=2,5"], "error: model.n_embd=128 must be divisible by model.n_head=5."),
    (["model.n_head=2,4", "model.n_embd=64,30"], "error: model.n_embd=30 must be divisible by model.n_head=4."),
    (["seed=1,2", "optim.lr=1e-3,-1"], "error: optim.lr=-1 must be > 0."),
    (["model.dropout=0.1,1.5"], "error: model.dropout=1.5 must be in [0, 1)."),  # as docs/configuring.md says
])
def test_a_swept_value_out_of_range_stops_the_sweep_before_any_job(tmp_path, args, line):
    """Each job's swept values are checked with the shared ones (the retry saw job 0 train while job 1 failed on its
    value): one line, exit 2, no sweep dir."""
    from helpers import ROOT

    out = subprocess.run([sys.executable, str(ROOT / "train.py"), "-m", *args, f"hydra.sweep.dir={tmp_path / 's'}"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "WANDB_MODE": "offline"})
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [line], out.stderr
    assert not (tmp_path / "s").exists()


def test_a_sweep_over_group_options_leaves_each_job_its_own_check():
    """model=tiny,small composes a different config per job: the shared composition cannot stand in for them."""
    from tinygpt.train.values import swept_values

    def config(task, params=None):
        return OmegaConf.create({"hydra": {"overrides": {"task": task}, "sweeper": {"params": params or {}},
                                           "runtime": {"choices": {"model": "small", "corpus": "shakespeare"}}},
                                 "seed": 0, "model": {"n_head": 4}})

    assert swept_values(config(["model=tiny,small", "model.n_head=2,4"])) is None
    assert swept_values(config(["seed=1", "model.n_head=2,4"], {"seed": "1,2,3"})) == {"model.n_head": [2, 4]}
    assert swept_values(config(["model.n_head=2,4"], {"seed": "1,2,3"})) == {"seed": [1, 2, 3], "model.n_head": [2, 4]}
    assert swept_values(config(["model.n_haed=2,4"])) == {}  # a typo: RunDirGuard's swept_mistake names it


def test_a_hub_name_the_offline_cache_lacks_is_refused_before_torch(tmp_path):
    """HF_HUB_OFFLINE and an empty cache: the sentence set-up gives, from the config check (the retry measured 9 s)."""
    from helpers import ROOT

    env = {**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "train.py"), "init_from=gpt2"], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, env=env)
    lines = out.stderr.splitlines()
    assert out.returncode == 2 and [x for x in lines if not x.startswith("import time:")] == [
        "error: init_from='gpt2' is not a local directory, the Hugging Face Hub cannot be used "
        "(https://huggingface.co: HF_HUB_OFFLINE is set) and its cache has no copy; pass a local model dir "
        "(config.json, model.safetensors or pytorch_model.bin, and tokenizer.json or vocab.json + merges.txt)."]
    assert not {x.rsplit("|", 1)[1].strip() for x in lines if x.startswith("import time:")} & {"torch", "lightning"}


def test_the_trainer_keys_named_without_lightning_are_its_trainers_arguments():
    """TRAINER_KEYS stands in for Lightning's signature before torch; a Lightning that adds or drops one fails here."""
    import inspect

    from lightning.pytorch import Trainer

    assert set(TRAINER_KEYS) == set(inspect.signature(Trainer.__init__).parameters) - {"self"}


@pytest.mark.parametrize("trainer, message", [
    ({"max_step": 5}, "trainer.max_step is not an argument of Lightning's Trainer; did you mean trainer.max_steps?"),
    ({"accelerator": "tpu"}, "trainer.accelerator='tpu' needs torch_xla, which is not installed; use cpu, gpu or "
                             "auto."),
    ({"accelerator": "npu"}, "trainer.accelerator='npu' is not one of auto, cpu, gpu, cuda, mps, tpu."),
])
def test_a_trainer_key_or_accelerator_lightning_would_refuse_after_torch_is_refused_before(trainer, message):
    with pytest.raises(ConfigError) as err:
        check_trainer(OmegaConf.create({"max_steps": 10, **trainer}))
    assert str(err.value) == message


def test_a_resume_that_changes_the_learning_rate_is_refused_from_the_runs_record_before_torch(tmp_path):
    """The run's config.yaml says what trained: a changed optim.lr (or seed) on ckpt_path=last is refused by the
    checks before torch (it took 7.7 s, at set-up), in the sentence set-up gives."""
    import torch
    from omegaconf import OmegaConf

    from helpers import compose_train
    from tinygpt.train.values import check_values

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    torch.save({"global_step": 4, "state_dict": {}, "hyper_parameters": {}}, run / "checkpoints" / "last.ckpt")
    recorded = compose_train([], out_dir=run)
    OmegaConf.save(OmegaConf.to_container(recorded, resolve=True), run / "config.yaml")
    ckpt = str(run / "checkpoints" / "last.ckpt")
    with pytest.raises(ConfigError) as err:
        check_values(compose_train(["ckpt_path=last", "optim.lr=0.005"], out_dir=run), run)
    assert str(err.value) == (
        f"ckpt_path={ckpt!r} was trained with optim.lr={recorded.optim.lr!r}, but this run sets 0.005: a resume "
        f"restores the optimizer and its schedule, so the new value would not train; resume with "
        f"optim.lr={recorded.optim.lr!r}, or start a new run.")
    with pytest.raises(ConfigError, match=r"belongs to a run with seed=1337, but this run sets 7: a resume continues"):
        check_values(compose_train(["ckpt_path=last", "seed=7"], out_dir=run), run)
    with pytest.raises(ConfigError, match=r"belongs to a run with data.val_windows=1024, but this run sets 64: a "):
        check_values(compose_train(["ckpt_path=last", "data.val_windows=64"], out_dir=run), run)  # another val/loss
    check_values(compose_train(["ckpt_path=last", "trainer.max_steps=4000"], out_dir=run), run)  # what resuming is for
    # the schedule and how steps are taken: refused too, where they would change what the record says trained
    with pytest.raises(ConfigError, match=r"was trained with optim.decay_steps=2000, but this run sets 100: the "):
        check_values(compose_train(["ckpt_path=last", "optim.decay_steps=100"], out_dir=run), run)
    with pytest.raises(ConfigError, match=r"was trained with trainer.gradient_clip_val=1.0, but this run sets 0.5: "):
        check_values(compose_train(["ckpt_path=last", "trainer.gradient_clip_val=0.5"], out_dir=run), run)
    with pytest.raises(ConfigError, match=r"was trained with trainer.precision='32-true', but this run sets "):
        check_values(compose_train(["ckpt_path=last", "trainer.precision=bf16-mixed"], out_dir=run), run)
    with pytest.raises(ConfigError, match=r"is at step 4, but its run's summary.json records 2000 steps"):
        (run / "summary.json").write_text('{"status": "completed", "steps": 2000}')  # the checkpoint is behind:
        check_values(compose_train(["ckpt_path=last"], out_dir=run), run)  # said truly, not "already at 2000"
    torch.save({"global_step": 2000, "state_dict": {}, "hyper_parameters": {}}, run / "checkpoints" / "last.ckpt")
    (run / "summary.json").write_text('{"status": "completed", "steps": 2000}')  # a run that ended at max_steps
    with pytest.raises(ConfigError, match=r"is already at step 2000, not before trainer.max_steps=2000; raise"):
        check_values(compose_train(["ckpt_path=last"], out_dir=run), run)
    (run / "summary.json").write_text('{"status": "interrupted", "steps": 2000}')  # stopped in its end phase
    check_values(compose_train(["ckpt_path=last"], out_dir=run), run)


def test_an_error_whose_first_line_ends_at_a_colon_keeps_its_reason():
    """Hydra's "Error loading 'x.Y':" puts the reason on the next line; the one line had ended at the colon."""
    from tinygpt.runtime.errors import first_line

    err = ValueError("Error loading 'lightning.pytorch.callbacks.Nope':\nModuleNotFoundError('No module named x')\n"
                     "Are you sure that 'Nope' is importable?")
    assert first_line(err) == ("Error loading 'lightning.pytorch.callbacks.Nope': ModuleNotFoundError('No module "
                               "named x')")
    assert first_line(ValueError("one line\nmore context")) == "one line"


def test_a_whole_number_written_as_a_float_or_null_is_said_as_typed():
    from omegaconf import OmegaConf

    from tinygpt.train.values import check_trainer

    with pytest.raises(ConfigError, match=r"val_check_interval=100.0 must be .* \(Hydra reads 100.0 as a float: "
                                          r"write 100\)\.$"):
        check_trainer(OmegaConf.create({"max_steps": 10, "val_check_interval": 1e2}))
    with pytest.raises(ConfigError, match=r"^trainer.val_check_interval=null must be a whole number"):
        check_trainer(OmegaConf.create({"max_steps": 10, "val_check_interval": None}))


def test_a_run_recorded_before_a_model_setting_existed_resumes_at_its_default(tmp_path):
    """A run whose config.yaml predates model.position (and rope_base, extrapolate, attn.scale_at) computed what their
    defaults compute: resuming it is not a change of its model; the same run resumed with a non-default value is."""
    import torch
    from omegaconf import OmegaConf

    from helpers import compose_train
    from tinygpt.train.values import check_values

    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    torch.save({"global_step": 4, "state_dict": {}, "hyper_parameters": {}}, run / "checkpoints" / "last.ckpt")
    recorded = OmegaConf.to_container(compose_train([], out_dir=run), resolve=True)
    for key in ("position", "rope_base", "extrapolate"):
        del recorded["model"][key]
    del recorded["model"]["attn"]["scale_at"]
    OmegaConf.save(recorded, run / "config.yaml")
    check_values(compose_train(["ckpt_path=last", "trainer.max_steps=4000"], out_dir=run), run)
    with pytest.raises(ConfigError, match=r"belongs to a run with model.position=None, but this run sets 'rope'"):
        check_values(compose_train(["ckpt_path=last", "model.position=rope"], out_dir=run), run)

"""pipeline.setup: every mistake in the config is one ConfigError sentence, found before any work
(checked in-process by composing the config, as train.py would)."""

import pytest
import torch

from helpers import TINY, compose_train
from tinygpt.train import run as run_phases
from tinygpt.train import setup
from tinygpt.runtime.errors import ConfigError


def setup_with(tmp_path, corpus_file, cache_dir, *overrides, corpus="text_file"):
    args = [*TINY, f"corpus={corpus}", f"data.cache_dir={cache_dir}", "logger=none"]
    if corpus == "text_file":
        args.append(f"corpus.path={corpus_file}")
    cfg = compose_train([*args, *overrides], out_dir=tmp_path / "run")
    return setup.setup(cfg, tmp_path / "run")


def test_a_good_config_sets_up_without_reading_data_or_writing(tmp_path, corpus_file, cache_dir):
    run = setup_with(tmp_path, corpus_file, cache_dir)
    assert run.dm.train_ids is None  # no data read yet
    assert not (tmp_path / "run").exists()  # nothing written
    assert run.trainer.max_steps == 20 and run.ckpt_path is None


BAD = [  # (overrides, the exact sentence)
    (["model.n_head=3"], "model.n_embd=16 must be divisible by model.n_head=3"),
    (["model.attn.scale=sqrt"], "model.attn.scale='sqrt' is not one of 'sqrt_dk', 'none', 'inv_dk' or a number."),
    (["model.attn.scale=foo"], "model.attn.scale='foo' is not one of"),
    (["model.attn.backend=flash"], "model.attn.backend='flash'"),
    (["model.dropout=1.5"], "model.dropout=1.5 must be in [0, 1)."),
    (["model.n_layer=0"], "model.n_layer=0 must be a positive integer."),
    (["trainer.max_steps=0"], "trainer.max_steps=0 must be a positive integer (training is step-based)."),
    (["trainer.max_steps=ten"], "trainer.max_steps='ten' must be a positive integer"),
    (["trainer.precision=bf17"], "bf17"),
    (["seed=-1"], "seed=-1 must be an integer in [0, 2**32)."),
    (["optim.warmup_steps=-5"], "optim.warmup_steps=-5 must be >= 0."),
    (["optim.lr=0"], "optim.lr=0 must be > 0."),
    (["optim.min_lr=0.1"], "optim.min_lr=0.1 must be in [0, optim.lr] = [0, 0.001]."),  # lr is fine: not blamed
    (["optim.decay_steps=0"], "optim.decay_steps=0 must be >= 1."),
    (["optim.betas=[0.9]"], "optim.betas=[0.9] must be two numbers in [0, 1)."),
    (["optim.weight_decay=-1"], "optim.weight_decay=-1 must be >= 0."),  # a float, echoed as written
    (["diagnostics.windows=0"], "diagnostics.windows=0 must be a positive integer (validation windows to probe)."),
    (["data.val_batch_size=0"], "data.val_batch_size=0 must be a positive integer."),
    (["data.batch_size=0"], "data.batch_size=0 must be a positive integer."),
    (["data.tokenizer=word"], "data.tokenizer='word' is not one of char, bpe, pretrained."),
    (["data.tokenizer=pretrained"], "data.tokenizer=pretrained needs data.tokenizer_dir=<a Hugging Face model dir "
                                    "with tokenizer.json or vocab.json + merges.txt> (init_from sets it)."),
    (["data.tokenizer=bpe", "data.bpe_vocab_size=100"], "data.bpe_vocab_size=100 is too small for byte-level BPE"),
    (["data.train_fraction=1.5"], "data.train_fraction=1.5 must be between 0 and 1."),
    (["corpus.path=/no/such/file.txt"], "corpus.path='/no/such/file.txt' is not a file."),
    (["data.block_size=32"], "data.block_size=32 must equal model.block_size=16."),
    (["callbacks.text_samples.top_k=0"], "callbacks.text_samples.top_k=0 must be a positive integer"),
    (["callbacks.text_samples.temperature=0"], "callbacks.text_samples.temperature=0"),
    (["callbacks.attention_maps.probe=''"], "callbacks.attention_maps.probe is empty"),
    (["callbacks.stability.every_n_steps=0"], "callbacks.stability"),
    (["callbacks.honest_loss.windows=0"],
     "callbacks.honest_loss.windows=0 must be a positive integer."),
    # a bool where a number is expected is refused everywhere (True is 1 to Python only); typed keys (seed, model.*,
    # optim.*: tinygpt/train/schema.py) refuse it while composing: tests/train/test_schema.py
    (["callbacks.leak_alarm.min_gap=true"], "callbacks.leak_alarm.min_gap=True must be a positive number."),
    (["callbacks.leak_alarm.tolerance=true"], "callbacks.leak_alarm.tolerance=True must be a positive number."),
    (["callbacks.leak_alarm.z=false"], "callbacks.leak_alarm.z=False must be a positive number."),
    (["callbacks.divergence_guard.factor=true"], "callbacks.divergence_guard.factor=True must be a positive number."),
    (["callbacks.text_samples.temperature=true"],
     "callbacks.text_samples.temperature=True must be a finite number > 0"),
    (["callbacks.text_samples.top_k=true"], "callbacks.text_samples.top_k=True must be a positive integer"),
    (["callbacks.text_samples.max_new_tokens=true"],
     "callbacks.text_samples.max_new_tokens=True must be a whole number >= 0"),
    (["callbacks.progress_bar.refresh_rate=true"], "callbacks.progress_bar.refresh_rate=True must be a whole number"),
    (["model.activation=relu"], "model.activation='relu' is not one of gelu, gelu_tanh."),
    (["model.ln_eps=0"], "model.ln_eps=0.0 must be a positive number (the LayerNorms' eps, e.g. 1e-5)."),
    (["init_from=/no/such/dir"], "init_from='/no/such/dir': no such directory. Pass a local Hugging Face model dir"),
    (["trainer.val_check_interval=true"], "trainer.val_check_interval=True must be a whole number of steps >= 1"),
    (["trainer.val_check_interval=0"], "trainer.val_check_interval=0 must be a whole number of steps >= 1"),
    (["trainer.gradient_clip_val=true"], "trainer.gradient_clip_val=True must be a number >= 0"),
    (["ckpt_path=/no/such.ckpt"], "ckpt_path='/no/such.ckpt' is not a checkpoint file or a run dir"),
    (["ckpt_path=last"], "ckpt_path=last but"),
    pytest.param(["trainer=gpu"], "trainer.accelerator='gpu' but ",  # no driver, or torch sees no GPU
                 marks=pytest.mark.skipif(torch.cuda.is_available(), reason="a GPU is visible")),
]


@pytest.mark.parametrize("overrides, message", BAD,
                         ids=[" ".join(getattr(b, "values", b)[0]) for b in BAD])
def test_each_bad_value_is_one_sentence_before_any_work(tmp_path, corpus_file, cache_dir, overrides, message):
    with pytest.raises(ConfigError) as err:
        setup_with(tmp_path, corpus_file, cache_dir, *overrides)
    text = str(err.value)
    assert message in text, text
    assert "\n" not in text and text.endswith((".", ")")), text  # one sentence
    assert not (tmp_path / "run").exists()


def test_a_missing_mandatory_path_names_the_key(tmp_path, corpus_file, cache_dir):
    cfg = compose_train([*TINY, "corpus=text_file", f"data.cache_dir={cache_dir}", "logger=none"], tmp_path / "r")
    with pytest.raises(ConfigError, match=r"^corpus.path is required but not set; pass corpus.path=<value> "):
        setup.setup(cfg, tmp_path / "r")


def test_an_unknown_key_is_one_sentence(tmp_path, corpus_file, cache_dir):
    with pytest.raises(ConfigError, match=r"^data.colour is not a setting of TextDataModule; check the spelling.$"):
        setup_with(tmp_path, corpus_file, cache_dir, "+data.colour=red")


@pytest.mark.parametrize("content, message", [
    (b"random bytes, not a checkpoint" * 10, "is not a readable checkpoint"),
    (None, "was not written by train.py"),
])
def test_a_bad_checkpoint_file_is_refused(tmp_path, corpus_file, cache_dir, content, message):
    path = tmp_path / "bad.ckpt"
    if content is None:
        torch.save({"weights": torch.zeros(2)}, path)
    else:
        path.write_bytes(content)
    with pytest.raises(ConfigError, match=message):
        setup_with(tmp_path, corpus_file, cache_dir, f"ckpt_path={path}")


def test_resuming_past_max_steps_says_so(tmp_path, corpus_file, cache_dir):
    path = tmp_path / "done" / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": {}, "hyper_parameters": {}, "global_step": 20}, path)
    (tmp_path / "done" / "summary.json").write_text('{"status": "completed"}')
    with pytest.raises(ConfigError, match=r"is already at step 20, not before trainer.max_steps=20; raise"):
        setup_with(tmp_path, corpus_file, cache_dir, f"ckpt_path={path}")
    with pytest.raises(ConfigError, match=r"is already at step 20, not before trainer.max_steps=10; raise"):
        setup_with(tmp_path, corpus_file, cache_dir, f"ckpt_path={path}", "trainer.max_steps=10")
    setup_with(tmp_path, corpus_file, cache_dir, f"ckpt_path={path}", "trainer.max_steps=30")  # fine


def test_a_run_stopped_at_its_last_step_is_resumed_to_finish_it(tmp_path, corpus_file, cache_dir):
    """A checkpoint at max_steps from a run stopped in its end-of-run phase (summary interrupted, or none): the
    resume is set up (it runs that phase only), not refused (issue 32 item 3)."""
    path = tmp_path / "stopped" / "checkpoints" / "last.ckpt"
    path.parent.mkdir(parents=True)
    torch.save({"state_dict": {}, "hyper_parameters": {}, "global_step": 20}, path)
    assert setup_with(tmp_path, corpus_file, cache_dir, f"ckpt_path={path}").ckpt_path == path  # no summary
    (tmp_path / "stopped" / "summary.json").write_text('{"status": "interrupted", "steps": 20}')
    assert setup_with(tmp_path, corpus_file, cache_dir, f"ckpt_path={path}").ckpt_path == path


def test_input_mistakes_found_while_preparing_data_are_config_errors(tmp_path, corpus_file, cache_dir):
    from tinygpt.data.corpus import HEAD_CHECKED

    latin1 = tmp_path / "latin1.txt"  # clean where the config check looks (its first MiB), latin-1 after it
    latin1.write_bytes(b"a" * HEAD_CHECKED + "caf\u00e9 au lait\n".encode("latin-1") * 200)
    run = setup_with(tmp_path, corpus_file, cache_dir, f"corpus.path={latin1}")
    with pytest.raises(ConfigError, match=rf"corpus.path='.*latin1.txt' is not UTF-8 text \(byte 0xe9 at offset "
                                          rf"{HEAD_CHECKED + 3}\)"):
        run_phases.prepare_data(run)
    a_file = tmp_path / "a_file"
    a_file.write_text("x")
    run = setup_with(tmp_path, corpus_file, f"{a_file}/cache")
    with pytest.raises(ConfigError, match=r"data.cache_dir='.*a_file/cache' cannot hold the token cache \(.*a_file "
                                          r"is a file, not a directory\)"):
        run_phases.prepare_data(run)


@pytest.mark.parametrize("off", ["callbacks.leak_alarm=null", "~callbacks.leak_alarm"])
def test_a_callback_is_switched_off_with_null_or_tilde(tmp_path, corpus_file, cache_dir, off):
    """Hydra's two ways to drop a node: the callback is left out, nothing None reaches the Trainer."""
    from tinygpt.train.progress import StepClock
    from tinygpt.train.probes.leak_alarm import LeakAlarm

    run = setup_with(tmp_path, corpus_file, cache_dir, off)
    assert None not in run.trainer.callbacks and not any(isinstance(c, LeakAlarm) for c in run.trainer.callbacks)
    assert run.alarm is None and isinstance(run.clock, StepClock) and run.stop is not None


def test_16_mixed_on_the_cpu_is_float16_not_lightnings_silent_bfloat16():
    """Lightning turns precision=16-mixed on the CPU into bf16-mixed (a warning only); Experiment 2's float16
    question needs float16, which torch's CPU autocast does: set-up passes the plugin itself."""
    import lightning as L
    import torch
    from omegaconf import OmegaConf

    from tinygpt.train.setup import cpu_float16

    cfg = OmegaConf.create({"accelerator": "cpu", "precision": "16-mixed"})
    (plugin,) = cpu_float16(cfg)
    trainer = L.Trainer(accelerator="cpu", plugins=[plugin], logger=False, enable_checkpointing=False)
    assert trainer.precision == "16-mixed"
    with trainer.precision_plugin.forward_context():
        assert torch.get_autocast_dtype("cpu") == torch.float16
        assert (torch.ones(2, 2) @ torch.ones(2, 2)).dtype == torch.float16
    assert trainer.precision_plugin.scaler is not None  # gradients scaled, as on a GPU
    for old_name in (16, "16"):  # Lightning's old name for 16-mixed (OmegaConf reads precision=16 as an int)
        assert len(cpu_float16(OmegaConf.create({"accelerator": "cpu", "precision": old_name}))) == 1
    assert L.Trainer(accelerator="cpu", precision=16, logger=False).precision == "bf16-mixed"  # what it did before
    for other in ({"accelerator": "cpu", "precision": "bf16-mixed"}, {"accelerator": "cpu", "precision": "32-true"}):
        assert cpu_float16(OmegaConf.create(other)) == []
    assert L.Trainer(accelerator="cpu", precision="16-mixed", logger=False).precision == "bf16-mixed"  # why


def test_a_resumed_run_silences_the_not_empty_warnings_only_for_its_own_dir(tmp_path):
    """quiet_resume(run): Lightning's 'exists and is not empty' warnings about dirs inside that run dir are off; the
    same warnings about another dir (two sweep jobs sharing one, say) still show."""
    import warnings

    from tinygpt.train.setup import quiet_resume

    run, other = tmp_path / "run", tmp_path / "other"
    messages = ["Checkpoint directory {}/checkpoints exists and is not empty.",
                "Experiment logs directory {}/history/ exists and is not empty. Previous log files in this directory "
                "will be deleted when the new ones are saved!"]
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_resume(run)
        for where in (run, other, tmp_path / "run2"):
            for message in messages:
                warnings.warn(message.format(where), UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == [m.format(where) for where in (other, tmp_path / "run2") for m in messages]


def test_a_resume_without_the_checkpoint_callback_drops_only_lightnings_note_about_it(tmp_path):
    """The run's own note says callbacks.model_checkpoint is off; Lightning's note listing ModelCheckpoint alone goes,
    one listing any other missing callback stays."""
    import warnings

    from tinygpt.train.setup import quiet_resume

    head = ("Be aware that when using `ckpt_path`, callbacks used to create the checkpoint need to be provided during "
            "`Trainer` instantiation. Please add the following callbacks: ")
    only = head + str(["ModelCheckpoint{'monitor': 'val/loss', 'mode': 'min'}"]) + "."
    more = head + str(["ModelCheckpoint{'monitor': 'val/loss', 'mode': 'min'}", "Mine"]) + "."
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        quiet_resume(tmp_path)
        warnings.warn(only, UserWarning, stacklevel=1)
        warnings.warn(more, UserWarning, stacklevel=1)
    assert [str(w.message) for w in seen] == [more]


def test_a_run_shorter_than_its_logging_interval_logs_at_its_last_step_and_records_it(tmp_path, corpus_file,
                                                                                       cache_dir, capsys):
    """5 steps with log_every_n_steps=10 would log no training row (Lightning warns): it logs every 5, says so in one
    line, and the recorded config says 5."""
    from helpers import TINY, compose_train
    from tinygpt.train.setup import log_every_run

    cfg = compose_train([*TINY, "trainer.max_steps=5", "trainer.log_every_n_steps=10"], out_dir=tmp_path)
    log_every_run(cfg)
    assert cfg.trainer.log_every_n_steps == 5
    assert "note: trainer.log_every_n_steps=10 > trainer.max_steps=5: logging every 5 steps" in capsys.readouterr().out
    cfg = compose_train([*TINY, "trainer.max_steps=50", "trainer.log_every_n_steps=10"], out_dir=tmp_path)
    log_every_run(cfg)
    assert cfg.trainer.log_every_n_steps == 10


def test_a_resume_that_stretches_the_schedule_says_how_the_rate_changes():
    """optim.decay_steps follows trainer.max_steps: raising it on a resume lifts the rate back from min_lr; said."""
    from tinygpt.train.optim import AdamWCosine
    from tinygpt.train.setup import schedule_note

    ckpt = {"global_step": 20, "hyper_parameters": {"optim": {"decay_steps": 20}}}
    optim = AdamWCosine(lr=1e-3, min_lr=1e-4, warmup_steps=2, decay_steps=40)
    assert schedule_note(ckpt, optim) == (  # 1e-4 + 9e-4 (1 + cos(pi 18 / 38)) / 2 = 0.000587 at step 20
        "note: optim.decay_steps follows trainer.max_steps, 20 -> 40: the cosine decay is stretched, so the rate at "
        "step 20 goes from 0.0001 to 0.000587 (summary.json records the new schedule).")
    assert schedule_note(ckpt, AdamWCosine(lr=1e-3, min_lr=1e-4, warmup_steps=2, decay_steps=20)) is None
    warming = {"global_step": 20, "hyper_parameters": {"optim": {"decay_steps": 40}}}  # still in warmup at step 20
    assert schedule_note(warming, AdamWCosine(lr=1e-3, min_lr=1e-4, warmup_steps=100, decay_steps=2000)) is None
    longer = {"global_step": 100, "hyper_parameters": {"optim": {"decay_steps": 2000}}}
    assert "1490: the cosine decay is shortened" in schedule_note(
        longer, AdamWCosine(lr=1e-3, min_lr=1e-4, warmup_steps=2, decay_steps=1490))


def test_a_run_that_ends_inside_its_warmup_says_it_never_reaches_the_rate():
    from tinygpt.train.optim import AdamWCosine
    from tinygpt.train.setup import warmup_note

    optim = AdamWCosine(lr=1e-3, min_lr=1e-4, warmup_steps=100, decay_steps=20)
    assert warmup_note(optim, 20) == (  # 1e-3 (19 + 1) / (100 + 1) = 0.000198 at step 19
        "note: optim.warmup_steps=100 is not below trainer.max_steps=20: the rate never reaches optim.lr=0.001 (it "
        "peaks at 0.000198 at the last step); lower optim.warmup_steps to train at the rate you set.")
    assert warmup_note(AdamWCosine(lr=1e-3, min_lr=1e-4, warmup_steps=19, decay_steps=20), 20) is None


def test_the_warmup_note_echoes_the_rate_as_written():
    """optim.lr=1e12 had been echoed as 1e+12 (Python's :g), not as the user wrote it."""
    from tinygpt.train.optim import AdamWCosine
    from tinygpt.train.setup import warmup_note

    note = warmup_note(AdamWCosine(lr=1e12, min_lr=0.0, warmup_steps=100, decay_steps=20), 20)
    assert "never reaches optim.lr=1e12 (it peaks at" in note


def test_debug_fast_does_not_tell_the_user_to_lower_its_own_warmup():
    """debug=fast's 10 steps under the default 100 warmup steps had printed the note asking the user to lower them."""
    from hydra.utils import instantiate

    from helpers import compose_train
    from tinygpt.train.setup import warmup_note

    cfg = compose_train(["debug=fast"])
    assert warmup_note(instantiate(cfg.optim), cfg.trainer.max_steps) is None


def test_more_cpu_processes_than_cores_is_said_with_the_global_batch(monkeypatch):
    """trainer.devices=4 on a 2-core CPU started 4 DDP processes without a word (global batch 48, another run)."""
    from omegaconf import OmegaConf

    from tinygpt.runtime import run_dirs
    from tinygpt.train import setup

    monkeypatch.setattr(run_dirs, "usable_cores", lambda: 2)
    trainer = OmegaConf.create({"accelerator": "cpu", "devices": 4})
    assert setup.more_processes_than_cores(trainer, 12) == (
        "note: trainer.devices=4 starts 4 training processes (DDP) on 2 usable CPU cores: they take turns, and each "
        "step's global batch is 4 x data.batch_size = 48, another run than one process; trainer.devices=1 for one.")
    assert setup.more_processes_than_cores(OmegaConf.create({"accelerator": "cpu", "devices": 2}), 12) is None
    assert setup.more_processes_than_cores(OmegaConf.create({"accelerator": "cpu", "devices": "auto"}), 12) is None
    assert setup.more_processes_than_cores(OmegaConf.create({"accelerator": "gpu", "devices": 4}), 12) is None

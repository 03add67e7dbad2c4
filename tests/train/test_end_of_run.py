"""The end of a run (final validation, diagnostics, summary): sized by diagnostics.max_val_tokens, and a signal
there leaves last.ckpt, a partial summary and a resume that finishes it (issue 32 items 3 and 4). In-process runs
of the tiny model, with the signal sent from inside the phase it must land in."""

import json
from pathlib import Path
import os
import signal
import warnings

import lightning as L
import pytest
import torch
from omegaconf import OmegaConf

from helpers import TINY, compose_train
from tinygpt.runtime.interrupts import SIGNALS, RunInterrupted
from tinygpt.runtime.resume_record import checkpoint_step
from tinygpt.train.values import check_values
from tinygpt.train.probes import diagnostics
from tinygpt.train import end_of_run
from tinygpt.train import run as run_phases
from tinygpt.train.summary import NOT_COMPARABLE


# ----------------------------------------------------------------------------- the sizing rule


def test_the_end_of_run_windows_are_capped_by_a_token_budget():
    assert end_of_run.end_windows(1024, 64, 65536) == 1024  # the default run: every window, as before
    assert end_of_run.end_windows(1024, 256, 65536) == 256  # model=small's context: a quarter of them
    assert end_of_run.end_windows(4000, 64, 65536) == 1024
    assert end_of_run.end_windows(32, 16, 65536) == 32  # fewer windows than the budget holds
    assert end_of_run.end_windows(1024, 256, None) == 1024  # null: every window
    assert end_of_run.end_windows(1024, 2048, 1000) == 1  # at least one


def test_the_default_cap_keeps_the_default_run_and_sizes_model_small():
    for overrides, windows in (([], 1024), (["model=small"], 256)):
        cfg = compose_train(overrides)
        assert cfg.diagnostics.max_val_tokens == 65536
        assert end_of_run.end_windows(cfg.data.val_windows, cfg.model.block_size,
                                      cfg.diagnostics.max_val_tokens) == windows


def test_only_a_validation_off_the_schedule_is_capped():
    """A validation the trainer's schedule runs at the last step scores every window even when a resume redoes it,
    so the resumed run's val loss is the one the run would have had; one added at the end of a run that ended
    between validations is sized by the cap."""
    def scheduled(every, max_steps):
        return end_of_run.scheduled_validation(OmegaConf.create({"val_check_interval": every,
                                                                 "max_steps": max_steps}), max_steps)

    assert scheduled(2, 2) and scheduled(500, 2000) and scheduled(0.5, 10)
    assert not scheduled(500, 2) and not scheduled(2, 5)


def test_the_plan_says_what_the_end_of_a_run_scores():
    assert end_of_run.end_plan(None, 1024, 1024, 32) == "each window's loss on 1,024 windows, the diagnostics on 32"
    assert end_of_run.end_plan(256, 256, 1024, 32) == (
        "a final validation on 256 windows, each window's loss on 256 windows of 1,024 (diagnostics.max_val_tokens), "
        "the diagnostics on 32")


def test_the_every_window_pass_reports_its_progress():
    from tinygpt.model.gpt import GPT, GPTConfig

    model = GPT(GPTConfig(vocab_size=11, block_size=8, n_layer=1, n_head=1, n_embd=8))
    x = torch.randint(0, 11, (10, 8))
    seen = []
    losses = diagnostics.window_losses(model, x, x, batch_size=4, progress=seen.append)
    assert seen == [4, 8, 10] and losses.shape == (10, 8)


# ----------------------------------------------------------------------------- a signal in the end-of-run phase


@pytest.fixture
def own_signal_handlers():
    """A stopped run leaves a handler that only notes further signals (so its exit is never cut short): the
    test process gets its own back."""
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)


class SignalInValidation(L.Callback):
    """SIGTERM to this process once, in the first validation batch at ``step``."""

    def __init__(self, step: int):
        self.step, self.sent = step, False

    def on_validation_batch_start(self, trainer, *args, **kwargs):
        if trainer.global_step == self.step and not self.sent:
            self.sent = True
            os.kill(os.getpid(), signal.SIGTERM)


def tiny_cfg(out, corpus_file, cache_dir, max_steps, *extra):
    return compose_train([*TINY, "corpus=text_file", f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}",
                          "logger=none", f"trainer.max_steps={max_steps}", "trainer.val_check_interval=2",
                          "callbacks.attention_maps.every_n_steps=0", *extra], out_dir=out)


def train_signalled(monkeypatch, cfg, where: str, step: int) -> RunInterrupted:
    """train(cfg) with SIGTERM sent in ``where``: the validation at ``step`` or the diagnostics."""
    if where == "diagnostics":
        real = diagnostics.run_all

        def run_all(*args):
            os.kill(os.getpid(), signal.SIGTERM)
            return real(*args)

        monkeypatch.setattr(diagnostics, "run_all", run_all)
    else:
        real_setup = run_phases.setup

        def setup(*args, **kwargs):
            run = real_setup(*args, **kwargs)
            run.trainer.callbacks.append(SignalInValidation(step))
            return run

        monkeypatch.setattr(run_phases, "setup", setup)
    with pytest.raises(RunInterrupted) as stopped:
        run_phases.train(cfg)
    monkeypatch.undo()
    return stopped.value


STRAIGHT: dict[int, dict] = {}  # max_steps -> the summary of a run never stopped


@pytest.mark.parametrize("max_steps, where, during", [
    (4, "validation", "training"),  # the trainer's own validation at the last step (item 3)
    (5, "validation", "final validation"),  # the one added at the end of a run that ended between validations
    (4, "diagnostics", "diagnostics"),
], ids=["scheduled final validation", "added final validation", "diagnostics"])
def test_a_signal_at_the_end_leaves_a_summary_and_the_resume_finishes_the_run(
        tmp_path, corpus_file, cache_dir, monkeypatch, own_signal_handlers, max_steps, where, during):
    out = tmp_path / "run"
    stopped = train_signalled(monkeypatch, tiny_cfg(out, corpus_file, cache_dir, max_steps), where, max_steps)
    assert stopped.exit_code == 143 and stopped.during == during
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["interrupted"] == "SIGTERM"
    assert summary["interrupted_during"] == during and summary["steps"] == max_steps
    assert summary["train_loss"] is not None
    assert torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)["global_step"] == max_steps

    resumed = run_phases.train(tiny_cfg(out, corpus_file, cache_dir, max_steps, "ckpt_path=last"))  # not refused
    if max_steps not in STRAIGHT:
        STRAIGHT[max_steps] = run_phases.train(tiny_cfg(tmp_path / "straight", corpus_file, cache_dir, max_steps))
    straight = STRAIGHT[max_steps]
    assert resumed["status"] == straight["status"] == "completed" and resumed["steps"] == max_steps
    differ = sorted(k for k in straight if k not in NOT_COMPARABLE and k != "config" and resumed.get(k) != straight[k])
    assert not differ, [(k, resumed.get(k), straight[k]) for k in differ]  # every other field: the same run's
    assert resumed["tokens_per_sec"] > 0 and resumed["train_seconds"] > 0  # the steps it had trained, not 0
    assert json.loads((out / "summary.json").read_text())["status"] == "completed"
    assert (out / "diagnostics.npz").exists()


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_a_run_resumed_mid_training_reports_what_the_whole_run_counted(tmp_path, corpus_file, cache_dir,
                                                                         own_signal_handlers):
    """The stability monitor's counts (the largest gradient norm, loss spikes) and the step clock's time and tokens
    are kept in the checkpoint: 3 steps, then resumed to 6, report the 6-step run's grad_norm_max and loss_spikes
    (a resumed run had reported 0.0), and tokens_per_sec over all 6 steps. Every field not named in NOT_COMPARABLE
    equals the uninterrupted run's."""
    extra = ("optim.decay_steps=6", "callbacks.stability.every_n_steps=1", "callbacks.stability.spike_window=1",
             "callbacks.stability.spike_factor=1.0001")
    straight = run_phases.train(tiny_cfg(tmp_path / "straight", corpus_file, cache_dir, 6, *extra))
    out = tmp_path / "run"
    run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 3, *extra))
    resumed = run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 6, "ckpt_path=last", *extra))
    assert straight["grad_norm_max"] > 0 and straight["loss_spikes"] > 0  # the counts are really exercised
    differ = sorted(k for k in straight if k not in NOT_COMPARABLE and k != "config" and resumed.get(k) != straight[k])
    assert not differ, [(k, resumed.get(k), straight[k]) for k in differ]
    tokens = [r["tokens_per_sec"] * r["train_seconds"] for r in (straight, resumed)]
    assert tokens[1] == pytest.approx(tokens[0])  # the resumed run's rate is over all 6 steps' tokens


def test_a_copied_run_dir_resumes_as_if_in_place(tmp_path, corpus_file, cache_dir, own_signal_handlers, recwarn):
    """A run dir copied elsewhere and resumed there: no 'dirpath has changed' warning, no stray last-v1.ckpt, and the
    best checkpoint is still the one the run knows (inside the copy), as in the original dir."""
    import shutil

    run_phases.train(tiny_cfg(tmp_path / "a", corpus_file, cache_dir, 4))
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    recwarn.clear()
    run_phases.train(tiny_cfg(tmp_path / "b", corpus_file, cache_dir, 6, "ckpt_path=last"))
    assert not [str(w.message) for w in recwarn if "dirpath has changed" in str(w.message)]
    names = sorted(p.name for p in (tmp_path / "b" / "checkpoints").iterdir())
    assert "last.ckpt" in names and not [n for n in names if n.startswith("last-v")], names
    state = next(v for k, v in torch.load(tmp_path / "b" / "checkpoints" / "last.ckpt",
                                          weights_only=True)["callbacks"].items() if k.startswith("ModelCheckpoint"))
    assert Path(state["best_model_path"]).parent == (tmp_path / "b" / "checkpoints").resolve()
    assert len([n for n in names if n.startswith("best")]) == 1  # top 1: the old best was replaced or kept, not lost


def test_a_finished_run_is_still_not_resumed_at_max_steps(tmp_path, corpus_file, cache_dir, own_signal_handlers):
    """Only a run stopped in its end-of-run phase is finished by a resume at max_steps; a completed one is refused
    as before (raise trainer.max_steps to train further)."""
    from tinygpt.runtime.errors import ConfigError

    out = tmp_path / "run"
    run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 2))
    with pytest.raises(ConfigError, match=r"already at step 2, not before trainer.max_steps=2; raise"):
        run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 2, "ckpt_path=last"))


def test_a_checkpoint_step_is_none_for_an_archive_it_cannot_read(tmp_path):
    import zipfile

    with zipfile.ZipFile(tmp_path / "other.ckpt", "w") as archive:
        archive.writestr("other/data.pkl", b"not a pickle")
    assert checkpoint_step(tmp_path / "other.ckpt") is None
    assert checkpoint_step(tmp_path / "missing.ckpt") is None


def test_a_last_checkpoint_behind_its_runs_record_is_not_resumed_over_it(tmp_path, corpus_file, cache_dir,
                                                                          own_signal_handlers, capsys):
    """A session resumed with ~callbacks.model_checkpoint trains to step 4 and saves nothing: last.ckpt stays at 2
    while summary.json says 4. Resuming that dir again would train steps 3-4 over their record: refused in one line;
    into a new dir it goes on from step 2."""
    from tinygpt.runtime.errors import ConfigError

    out = tmp_path / "run"
    run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 2))
    run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 4, "ckpt_path=last", "~callbacks.model_checkpoint"))
    assert ("note: callbacks.model_checkpoint is off: this session saves no checkpoint, so the steps it trains after "
            "step 2 cannot be resumed from.") in capsys.readouterr().out.replace("\n", "")
    last = out / "checkpoints" / "last.ckpt"
    assert json.loads((out / "summary.json").read_text())["steps"] == 4
    before = (out / "summary.json").read_text()
    with pytest.raises(ConfigError) as err:
        run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 6, "ckpt_path=last"))
    assert str(err.value) == (
        f"ckpt_path={str(last)!r} is at step 2, but its run's summary.json records 4 steps: a later session trained "
        "without saving a checkpoint, and resuming would train steps 3-4 again over that record; to go on from step "
        f"2 anyway, resume into a new dir (hydra.run.dir=<new dir> ckpt_path={str(last)!r}).")
    assert (out / "summary.json").read_text() == before
    assert checkpoint_step(last) == 2  # read without torch: the refusal comes from the checks before any import
    with pytest.raises(ConfigError, match=r"is at step 2, but its run's summary.json records 4 steps"):
        check_values(tiny_cfg(out, corpus_file, cache_dir, 6, "ckpt_path=last"), out)
    capsys.readouterr()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        summary = run_phases.train(tiny_cfg(tmp_path / "new", corpus_file, cache_dir, 6, f"ckpt_path={last}"))
    assert summary["steps"] == 6 and summary["resumed_from"]
    assert "note: resuming from another run's checkpoint" in capsys.readouterr().out.replace("\n", "")
    assert not [w for w in seen if "dirpath has changed" in str(w.message)]  # said plainly instead


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_a_resumed_run_logs_to_the_same_wandb_run(tmp_path, corpus_file, cache_dir, own_signal_handlers,
                                                   monkeypatch):
    """One training run, one W&B run: the session that resumes in place continues the first session's W&B run (its
    id from summary.json, resume="allow"); a resume into another dir starts its own."""
    monkeypatch.setenv("WANDB_MODE", "offline")
    out = tmp_path / "run"
    first = run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 2, "logger=wandb"))["wandb"]["id"]
    again = run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 4, "ckpt_path=last", "logger=wandb"))
    assert again["steps"] == 4 and again["wandb"]["id"] == first
    assert {p.name.rsplit("-", 1)[1] for p in (out / "wandb").glob("offline-run-*")} == {first}
    record = json.loads((out / "summary.json").read_text())  # an interrupted session's summary names no W&B run:
    del record["wandb"]  # the run's own wandb/ dir does
    (out / "summary.json").write_text(json.dumps(record))
    third = run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 6, "ckpt_path=last", "logger=wandb"))
    assert third["steps"] == 6 and third["wandb"]["id"] == first
    other = run_phases.train(tiny_cfg(tmp_path / "other", corpus_file, cache_dir, 8,
                                      f"ckpt_path={next((out / 'checkpoints').glob('best-*.ckpt'))}",
                                      "logger=wandb"))
    assert other["wandb"]["id"] != first


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_a_resume_that_changes_what_the_checkpoint_restores_is_refused_and_decay_follows_max_steps(
        tmp_path, corpus_file, cache_dir, own_signal_handlers):
    """optim.lr on a resume would be recorded but never trained with (the optimizer's base rate comes back from the
    checkpoint): refused in one line naming both values, before the run dir is touched. Raising trainer.max_steps
    (and with it optim.decay_steps) is what resuming is for: it goes on, and the record says what trained."""
    from tinygpt.runtime.errors import ConfigError

    out = tmp_path / "run"
    run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 4))
    before = (out / "summary.json").read_text()
    for override, key in (("optim.lr=0.005", "lr"), ("optim.weight_decay=0.5", "weight_decay"),
                          ("optim.warmup_steps=1", "warmup_steps")):
        cfg = tiny_cfg(out, corpus_file, cache_dir, 6, "ckpt_path=last", override)
        theirs = OmegaConf.select(tiny_cfg(out, corpus_file, cache_dir, 4), f"optim.{key}")
        with pytest.raises(ConfigError) as err:
            run_phases.train(cfg)
        assert str(err.value) == (
            f"ckpt_path={str(out / 'checkpoints' / 'last.ckpt')!r} was trained with optim.{key}={theirs!r}, but this "
            f"run sets {OmegaConf.select(cfg, f'optim.{key}')!r}: a resume restores the optimizer and its schedule, so "
            f"the new value would not train; resume with optim.{key}={theirs!r}, or start a new run.")
    for override, key, old, new in (("seed=7", "seed", 1337, 7),
                                     ("model.attn.causal=false", "model.attn.causal", True, False)):
        with pytest.raises(ConfigError) as err:  # the same weights' shapes, another run: refused too
            run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 6, "ckpt_path=last", override))
        assert str(err.value) == (
            f"ckpt_path={str(out / 'checkpoints' / 'last.ckpt')!r} belongs to a run with {key}={old!r}, but this run "
            f"sets {new!r}: a resume continues that run; resume with {key}={old!r}, or start a new run.")
    assert (out / "summary.json").read_text() == before
    summary = run_phases.train(tiny_cfg(out, corpus_file, cache_dir, 6, "ckpt_path=last"))
    assert summary["steps"] == 6 and summary["config"]["optim"]["decay_steps"] == 6


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_a_resumed_run_keeps_the_history_logged_before_its_checkpoint(tmp_path, corpus_file, cache_dir, recwarn):
    """Lightning's CSV logger deletes an existing metrics.csv when it starts: a run resumed from step 6 to 10 must
    still hold the training loss of steps 0-5 (the reports read onsets from it), once each, and the leak alarm's
    rows of the validations before the checkpoint. Lightning's warnings that the dirs are not empty and that the
    history will be deleted are not shown: neither is true of a resume in place."""
    import csv

    out = tmp_path / "run"

    def cfg(max_steps, *extra):
        c = tiny_cfg(out, corpus_file, cache_dir, max_steps, *extra)
        c.logger = compose_train(["logger=csv"], out_dir=out).logger
        return c

    run_phases.train(cfg(6, "trainer.log_every_n_steps=1"))
    recwarn.clear()
    run_phases.train(cfg(10, "trainer.log_every_n_steps=1", "ckpt_path=last"))
    assert not [str(w.message) for w in recwarn if "exists and is not empty" in str(w.message)]
    with open(out / "history" / "metrics.csv", newline="") as f:
        rows = list(csv.DictReader(f))
    train_steps = [int(r["step"]) for r in rows if r.get("train/loss")]
    assert train_steps == list(range(10))
    leak_steps = sorted(int(r["step"]) for r in rows if r.get("leak/future_leak"))
    assert leak_steps == [2, 4, 6, 8, 10]


@pytest.mark.parametrize("first, then", [(7, 13), (5, 10), (6, 8)])
def test_the_progress_bar_counts_the_runs_steps_also_when_resumed(tmp_path, corpus_file, cache_dir, monkeypatch,
                                                                   first, then):
    """The bar reads <steps done>/<max_steps> at the end of a run and of its resume; Lightning's own count is the
    batches of the epoch against the steps left, which a resumed run showed as e.g. 13/2."""
    from tinygpt.train.progress import StepProgressBar

    seen = []

    def on_train_end(self, trainer, pl_module):
        task = self.progress.tasks[self.train_progress_bar_id]
        seen.append((trainer.global_step, task.completed, task.total))

    monkeypatch.setattr(StepProgressBar, "on_train_end", on_train_end, raising=False)
    out = tmp_path / "run"
    run_phases.train(tiny_cfg(out, corpus_file, cache_dir, first))
    run_phases.train(tiny_cfg(out, corpus_file, cache_dir, then, "ckpt_path=last"))
    assert seen == [(first, first, first), (then, then, then)]


def test_a_resume_that_stretches_the_schedule_trains_its_first_step_at_the_new_rate(tmp_path, corpus_file, cache_dir,
                                                                                     own_signal_handlers):
    """The optimizer's state holds the rate the checkpoint's schedule gave its next step; with trainer.max_steps
    raised (optim.decay_steps with it) the first resumed step trains at the stretched schedule's rate, the one the
    resume's note announces and summary.json records (it trained at the old one: the newcomer retry's BAD-4)."""
    import csv

    from tinygpt.train.optim import lr_at

    out = tmp_path / "run"

    def cfg(max_steps, *extra):
        c = tiny_cfg(out, corpus_file, cache_dir, max_steps, "trainer.log_every_n_steps=1", *extra)
        c.logger = compose_train(["logger=csv"], out_dir=out).logger
        return c

    run_phases.train(cfg(4))
    summary = run_phases.train(cfg(8, "ckpt_path=last"))
    optim = summary["config"]["optim"]
    with open(out / "history" / "metrics.csv", newline="") as f:
        rates = {int(r["step"]): float(r["lr-AdamW/pg1"]) for r in csv.DictReader(f) if r.get("lr-AdamW/pg1")}
    for step, decay in ((0, 4), (3, 4), (4, 8), (5, 8), (7, 8)):
        assert rates[step] == pytest.approx(lr_at(step, lr=optim["lr"], min_lr=optim["min_lr"],
                                                  warmup_steps=optim["warmup_steps"], decay_steps=decay)), step
    assert lr_at(4, lr=optim["lr"], min_lr=optim["min_lr"], warmup_steps=optim["warmup_steps"], decay_steps=4) != \
        pytest.approx(rates[4])

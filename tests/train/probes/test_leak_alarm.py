"""The leak alarm: its rule on hand-made signals, its detection of every experiment-3 bug at the first validation,
its silence on causal models, and what it does on detection (one line, summary.json, action=stop)."""

import json
from types import SimpleNamespace

import pytest
import torch

from helpers import TINY, run_train
from tinygpt.experiments.partial_leaks.bugs import AttentionBug
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.train.probes.callbacks import HonestLoss
from tinygpt.train.probes.leak_alarm import LeakAlarm, honest_gap

BUG = "model.patch=[{_target_: tinygpt.experiments.partial_leaks.bugs.AttentionBug, kind: off_by_one}]"


def test_the_rule_on_hand_made_signals():
    alarm = LeakAlarm(tolerance=1e-4, min_gap=0.05, z=3.0)
    assert alarm.check(2e-4, None, None) == ("future_leak", 2e-4)
    assert alarm.check(1e-4, None, None) is None  # at the tolerance, not above it
    assert alarm.check(float("nan"), None, None) is None  # a diverged model: nothing measured
    assert alarm.check(0.0, 0.10, 0.01) == ("honest_gap", 0.10)  # 0.10 > max(3 x 0.01, 0.05)
    assert alarm.check(0.0, 0.10, 0.05) is None  # inside 3 standard errors: noise
    assert alarm.check(0.0, 0.04, 0.0) is None  # below min_gap: a causal model's rounding, however precise
    assert alarm.check(0.0, -1.0, 0.01) is None  # honest better than teacher-forced is not a leak
    assert alarm.check(5.0, 1.0, 0.01)[0] == "future_leak"  # the future leak is named first


def test_honest_gap_is_the_mean_and_its_standard_error():
    mean, se = honest_gap(torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=torch.float64))
    assert mean == pytest.approx(3.0)
    assert se == pytest.approx((14 / 3) ** 0.5 / 2)  # sd = sqrt(((-2)^2 + 1 + 0 + 9) / 3), / sqrt(4)
    assert honest_gap(torch.tensor([0.5])) == (0.5, 0.0)


def fake_trainer(model, step, windows=8):
    """What the alarm reads of a trainer at one validation: the step, fixed random-token windows, the honest-loss
    probe and no loggers."""
    g = torch.Generator().manual_seed(0)
    ids = torch.randint(0, model.config.vocab_size, (windows, model.config.block_size + 1), generator=g)
    x, y = ids[:, :-1], ids[:, 1:]  # (windows, T): y is x shifted by one
    dm = SimpleNamespace(spread_windows=lambda n: (x[:n], y[:n]))
    ar = HonestLoss(windows=windows, positions=4)
    trainer = SimpleNamespace(global_step=step, datamodule=dm, callbacks=[ar], loggers=[], is_global_zero=True,
                              world_size=1, sanity_checking=False, should_stop=False, strategy=None)
    module = SimpleNamespace(device=torch.device("cpu"), model=model, log_dict=lambda *a, **k: None)
    return trainer, module, ar


def tiny_model(bug=None, causal=True, n_embd=16):
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=16, block_size=16, n_layer=2, n_head=2, n_embd=n_embd, attn={"causal": causal}))
    return bug(m) if bug else m


@pytest.mark.parametrize("bug", [
    AttentionBug("off_by_one"), AttentionBug("no_mask", layers=[0]), AttentionBug("no_mask", layers=[-1]),
    AttentionBug("sliding_window", window=4), AttentionBug("finite_fill", fill=-1.0),
], ids=["off_by_one", "first_layer", "last_layer", "sliding_window", "finite_fill"])
def test_every_bug_is_caught_at_the_first_validation_and_stop_stops(bug, capsys):
    """A leaky mask moves earlier logits from the first step: the alarm needs no training to see it."""
    alarm = LeakAlarm(action="stop")
    trainer, module, ar = fake_trainer(tiny_model(bug), step=10)
    ar.on_validation_epoch_end(trainer, module)
    alarm.on_validation_end(trainer, module)
    assert (alarm.detected_step, alarm.signal) == (10, "future_leak") and alarm.value > 1e-4
    assert alarm.summary()["leak_expected"] is False
    assert trainer.should_stop and alarm.stopped
    out = capsys.readouterr().out
    assert "leak alarm at step 10" in out and "the model can see the future: check the attention mask" in out


def test_a_causal_model_is_never_flagged_over_many_validations_while_it_trains():
    """The production model, trained on random tokens for 60 steps with a validation after each: no alarm."""
    model = tiny_model()
    trainer, module, ar = fake_trainer(model, step=0)
    alarm = LeakAlarm()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for step in range(1, 61):
        idx = torch.randint(0, 16, (8, 17), generator=g)
        loss = model(idx[:, :-1], idx[:, 1:])[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
        trainer.global_step = step
        ar.on_validation_epoch_end(trainer, module)
        alarm.on_validation_end(trainer, module)
        assert alarm.detected_step is None, (step, alarm.signal, alarm.value)
    assert ar.gaps.abs().max().item() < 1e-5  # honest and teacher-forced agree to rounding on every window


def test_a_deliberately_leaky_model_is_recorded_without_alarm(capsys):
    alarm = LeakAlarm(action="stop")
    trainer, module, ar = fake_trainer(tiny_model(causal=False), step=4)
    ar.on_validation_epoch_end(trainer, module)
    alarm.on_validation_end(trainer, module)
    summary = alarm.summary()
    assert summary.pop("leak_alarm_seconds") > 0
    assert summary == {"leak_detected_step": 4, "leak_signal": "future_leak", "leak_value": alarm.value,
                       "leak_expected": True}
    assert not trainer.should_stop and "leak alarm" not in capsys.readouterr().out


def test_the_honest_gap_alone_is_caught():
    """A model whose future leak the probe does not see (tolerance set above it) is still caught by the gap between
    its honest and teacher-forced losses, once it has learned to read the future: a no-mask model trained to copy."""
    model = tiny_model(causal=False, n_embd=32)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    for _ in range(120):  # random tokens: only the future tells the next one
        idx = torch.randint(0, 16, (16, 17), generator=g)
        loss = model(idx[:, :-1], idx[:, 1:])[1]
        opt.zero_grad()
        loss.backward()
        opt.step()
    assert loss.item() < 1.5  # ln 16 = 2.77 is the best an honest model can do
    alarm = LeakAlarm(tolerance=1e9)
    trainer, module, ar = fake_trainer(model, step=120)
    ar.on_validation_epoch_end(trainer, module)
    alarm.on_validation_end(trainer, module)
    assert alarm.signal == "honest_gap" and alarm.value > 0.5


def test_bad_settings_are_one_sentence():
    with pytest.raises(ValueError, match=r"^callbacks.leak_alarm.action='panic' is not one of warn, stop.$"):
        LeakAlarm(action="panic")
    with pytest.raises(ValueError, match=r"^callbacks.leak_alarm.z=0 must be a positive number.$"):
        LeakAlarm(z=0)


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_train_py_with_a_bug_and_action_stop_ends_leaky_with_exit_0(tmp_path, corpus_args):
    out = tmp_path / "run"
    proc = run_train([*TINY, *corpus_args, BUG, "callbacks.leak_alarm.action=stop", "logger=csv",
                      "callbacks.stability.future_leak=true", f"hydra.run.dir={out}"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "leaky" and summary["steps"] == 10  # the first validation
    assert summary["leak_detected_step"] == 10 and summary["leak_signal"] == "future_leak"
    assert "leak alarm at step 10" in proc.stdout and "check the attention mask" in proc.stdout
    assert summary["future_leak"] > 1e-4  # the end-of-run diagnostics agree
    history = (out / "history" / "metrics.csv").read_text().splitlines()[0].split(",")
    assert {"leak/future_leak", "leak/honest_gap", "leak/detected_step", "stab/mask_margin",
            "stab/future_leak"} <= set(history)
    assert summary["stab_leak_seconds"] > 0 and summary["leak_alarm_seconds"] > 0


def test_a_w_and_b_alert_is_raised_online_only():
    """The first detection raises run.alert(WARN) when the W&B run is online; an offline run gets none (it could
    not deliver it)."""
    from unittest.mock import MagicMock

    import wandb
    from lightning.pytorch.loggers import WandbLogger

    for offline in (False, True):
        logger = MagicMock(spec=WandbLogger)
        logger.experiment.offline = offline
        alarm = LeakAlarm()
        trainer, module, ar = fake_trainer(tiny_model(AttentionBug("off_by_one")), step=50)
        trainer.loggers = [logger]
        ar.on_validation_epoch_end(trainer, module)
        alarm.on_validation_end(trainer, module)
        assert alarm.detected_step == 50
        if offline:
            logger.experiment.alert.assert_not_called()
        else:
            kwargs = logger.experiment.alert.call_args.kwargs
            assert kwargs["level"] == wandb.AlertLevel.WARN and "leak alarm at step 50" in kwargs["text"]
        logged = {k for call in logger.log_metrics.call_args_list for k in call.args[0]}
        assert {"leak/future_leak", "leak/honest_gap", "leak/detected_step"} <= logged

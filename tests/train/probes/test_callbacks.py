import math
from types import SimpleNamespace

import pytest
import torch

from tinygpt.train.probes.callbacks import AttentionMaps, StabilityMonitor, TextSamples
from tinygpt.train.guards import Diverged, DivergenceGuard
from tinygpt.pictures.plots import token_label


def fake(step=5, vocab=50):
    trainer = SimpleNamespace(global_step=step, should_stop=False)
    module = SimpleNamespace(config=SimpleNamespace(vocab_size=vocab))
    return trainer, module


def test_divergence_guard_stops_on_nan_and_explosion_only():
    guard = DivergenceGuard(factor=3.0)
    trainer, module = fake()
    guard.on_train_batch_end(trainer, module, {"loss": torch.tensor(2.0)}, None, 0)
    assert not guard.diverged and guard.reason is None
    with pytest.raises(Diverged, match="step 5"):
        guard.on_train_batch_end(trainer, module, {"loss": torch.tensor(3 * math.log(50) + 0.1)}, None, 0)
    assert guard.diverged
    guard2, (trainer2, module2) = DivergenceGuard(), fake()
    with pytest.raises(Diverged, match="nan"):
        guard2.on_train_batch_end(trainer2, module2, {"loss": torch.tensor(float("nan"))}, None, 0)
    assert guard2.diverged


def test_token_labels_are_visible():
    assert token_label(" ") == "␣" and token_label("\n") == "\\n" and token_label("") == "∅"
    assert token_label("ab") == "ab"


def test_stability_monitor_counts_loss_spikes():
    mon = StabilityMonitor(every_n_steps=10_000, spike_factor=1.5, spike_window=4)
    trainer = SimpleNamespace(global_step=1)  # never due for the probe: only the spike count runs
    for loss in [2.0, 2.0, 2.0, 2.0, 3.1, 2.9, 2.0, float("nan"), 9.0]:
        mon.on_train_batch_end(trainer, None, {"loss": torch.tensor(loss)}, None, 0)
    # 3.1 > 1.5 * 2.0 is a spike; 2.9 is not (mean of 2, 2, 2, 3.1 = 2.275 -> limit 3.41); NaN is skipped;
    # 9.0 > 1.5 * mean(2.0, 3.1, 2.9, 2.0) is a spike
    assert mon.spikes == 2


def test_stability_monitor_rejects_bad_settings():
    with pytest.raises(ValueError, match=r"^callbacks.stability.spike_factor=1.0 must be above 1.$"):
        StabilityMonitor(spike_factor=1.0)
    with pytest.raises(ValueError, match=r"^callbacks.stability.windows=0 must be a positive integer.$"):
        StabilityMonitor(windows=0)


@pytest.mark.parametrize("make, message", [
    (lambda: TextSamples(temperature=0), "callbacks.text_samples.temperature=0 must be a finite number > 0"),
    (lambda: TextSamples(top_k=0), "callbacks.text_samples.top_k=0 must be a positive integer"),
    (lambda: AttentionMaps(probe=""), "callbacks.attention_maps.probe is empty"),
    (lambda: AttentionMaps(every_n_steps=-1), "every_n_steps=-1 must be a whole number >= 0"),
])
def test_callback_settings_fail_when_built_not_after_training(make, message):
    with pytest.raises(ValueError, match=message):
        make()

import math
from types import SimpleNamespace

import torch

from tinygpt.callbacks import DivergenceGuard, token_label


def fake(step=5, vocab=50):
    trainer = SimpleNamespace(global_step=step, should_stop=False)
    module = SimpleNamespace(config=SimpleNamespace(vocab_size=vocab))
    return trainer, module


def test_divergence_guard_stops_on_nan_and_explosion_only():
    guard = DivergenceGuard(factor=3.0)
    trainer, module = fake()
    guard.on_train_batch_end(trainer, module, {"loss": torch.tensor(2.0)}, None, 0)
    assert not trainer.should_stop and not guard.diverged
    guard.on_train_batch_end(trainer, module, {"loss": torch.tensor(3 * math.log(50) + 0.1)}, None, 0)
    assert trainer.should_stop and guard.diverged and "step 5" in guard.reason
    guard2, (trainer2, module2) = DivergenceGuard(), fake()
    guard2.on_train_batch_end(trainer2, module2, {"loss": torch.tensor(float("nan"))}, None, 0)
    assert trainer2.should_stop and guard2.diverged


def test_token_labels_are_visible():
    assert token_label(" ") == "␣" and token_label("\n") == "\\n" and token_label("") == "∅"
    assert token_label("ab") == "ab"

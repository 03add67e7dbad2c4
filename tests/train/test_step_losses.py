import gc
import weakref

import torch

from tinygpt.train.step_losses import BLOCK, StepLosses


def losses(n, seed=0):
    return torch.rand(n, generator=torch.Generator().manual_seed(seed)) * 4  # (n,)


def test_every_loss_in_order_across_blocks_and_the_tail_mean_as_a_list_of_tensors_gave_it():
    values = losses(2 * BLOCK + 37)
    kept = StepLosses()
    for v in values:
        kept.append(v.clone())
    assert len(kept) == len(values) and len(kept.blocks) == 3
    assert torch.equal(kept.all(), values)
    for n in (1, 10, BLOCK + 5, len(values)):  # what tail_train_loss computed before: stack of 0-dim tensors
        assert kept.tail_mean(n) == torch.stack(list(values.unbind(0))[-n:]).float().mean().item()


def test_continues_a_checkpoints_losses():
    before, after = losses(50), losses(BLOCK, seed=1)
    kept = StepLosses(before)
    for v in after:
        kept.append(v)
    assert len(kept) == 50 + BLOCK
    assert torch.equal(kept.all(), torch.cat([before, after]))
    before[0] = -1.0  # the checkpoint's tensor is copied, not shared
    assert kept.all()[0] != -1.0


def test_no_steps_loss_tensor_outlives_its_step():
    """The point of the blocks: a list kept every step's 0-dim tensor alive (and its scrap of heap)."""
    kept = StepLosses()
    loss = torch.tensor(2.5)
    ref = weakref.ref(loss)
    kept.append(loss)
    del loss
    gc.collect()
    assert ref() is None
    assert kept.all().tolist() == [2.5]


def test_empty():
    kept = StepLosses(torch.empty(0))
    assert len(kept) == 0 and kept.all().numel() == 0 and kept.blocks == []

import math

import pytest
import torch

from tinygpt.train.module import GPTModule
from tinygpt.train.optim import AdamWCosine, lr_at, param_groups

MODEL = dict(n_layer=2, n_head=2, n_embd=8, block_size=8)


def test_decay_only_on_2d_weights_tied_counted_once():
    m = GPTModule(model={**MODEL, "bias": True}, vocab_size=20).model
    decay, no_decay = param_groups(m, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.dim() == 2 for p in decay["params"])
    assert all(p.dim() == 1 for p in no_decay["params"]) and no_decay["params"]
    ids = [id(p) for g in (decay, no_decay) for p in g["params"]]
    assert len(ids) == len(set(ids))  # the tied embedding/head appears once
    assert sum(p.numel() for g in (decay, no_decay) for p in g["params"]) == m.num_params(non_embedding=False)
    assert any(p is m.wte.weight for p in decay["params"])


def test_lr_schedule_values():
    kw = dict(lr=1e-3, min_lr=1e-4, warmup_steps=100, decay_steps=2000)
    assert lr_at(0, **kw) == pytest.approx(1e-3 / 101)
    assert lr_at(99, **kw) == pytest.approx(1e-3 * 100 / 101)
    assert lr_at(100, **kw) == pytest.approx(1e-3)
    assert lr_at(1050, **kw) == pytest.approx(5.5e-4)  # half way through the cosine
    assert lr_at(2000, **kw) == pytest.approx(1e-4)
    assert lr_at(5000, **kw) == pytest.approx(1e-4)
    lrs = [lr_at(s, **kw) for s in range(100, 2001)]
    assert all(a >= b for a, b in zip(lrs, lrs[1:], strict=False))


def test_optimizer_and_scheduler_follow_the_schedule():
    module = GPTModule(model=MODEL, vocab_size=20, optim=AdamWCosine(lr=2e-3, min_lr=2e-4, warmup_steps=10,
                                                                           decay_steps=50))
    conf = module.configure_optimizers()
    opt, sched = conf["optimizer"], conf["lr_scheduler"]["scheduler"]
    assert isinstance(opt, torch.optim.AdamW) and opt.defaults["betas"] == (0.9, 0.99)
    assert conf["lr_scheduler"]["interval"] == "step"
    seen = []
    for _ in range(60):
        seen.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    for step in (0, 5, 10, 30, 50, 59):
        assert seen[step] == pytest.approx(lr_at(step, lr=2e-3, min_lr=2e-4, warmup_steps=10, decay_steps=50))


def test_tail_train_loss_is_mean_of_last_tenth():
    module = GPTModule(model=MODEL, vocab_size=20)
    module.train_losses = [torch.tensor(float(i)) for i in range(100)]
    assert module.tail_train_loss(0.1) == pytest.approx(sum(range(90, 100)) / 10)
    assert math.isnan(GPTModule(model=MODEL, vocab_size=20).tail_train_loss())


def test_fused_adam_except_under_mixed_precision_with_clipping():
    """Lightning refuses to clip a fused optimizer's gradients under AMP: fall back to foreach there only."""
    from types import SimpleNamespace

    for precision, clip, fused in (("32-true", 1.0, True), ("bf16-mixed", 1.0, False), ("16-mixed", 1.0, False),
                                   ("bf16-mixed", None, True)):
        module = GPTModule(model=MODEL, vocab_size=20)
        module._trainer = SimpleNamespace(precision=precision, gradient_clip_val=clip)
        opt = module.configure_optimizers()["optimizer"]
        assert bool(opt.defaults["fused"]) is fused, (precision, clip)


def test_load_trained_gives_the_model_as_it_was_trained(tmp_path):
    """A run dir or its .ckpt file -> the GPT in eval mode with the run's attention bug, its weights, no tokenizer
    for token-id data, and the step."""
    from helpers import write_checkpoint
    from tinygpt.experiments.leaky_masks import BuggyAttention
    from tinygpt.train.module import load_trained

    bug = {"_target_": "tinygpt.experiments.leaky_masks.AttentionBug", "kind": "off_by_one", "layers": [1]}
    path = write_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt", step=7, attention_bug=bug)
    model, tok, step = load_trained(tmp_path / "run")
    assert not model.training and tok is None and step == 7
    assert [isinstance(b.attn, BuggyAttention) for b in model.blocks] == [False, True]
    again, _, _ = load_trained(path)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))

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
    for i in range(100):
        module.train_losses.append(torch.tensor(float(i)))
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


def _module_with_gradients(scale: float, precision: str = "32-true", strategy=None):
    """A module whose gradients have global norm ``scale``, attached to a stand-in trainer."""
    from types import SimpleNamespace

    from lightning.pytorch.strategies import SingleDeviceStrategy

    torch.manual_seed(0)
    module = GPTModule(model=MODEL, vocab_size=20)
    grads = [torch.randn_like(p) for p in module.parameters()]
    norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g) for g in grads]))
    for p, g in zip(module.parameters(), grads, strict=True):
        p.grad = g * (scale / norm)
    strategy = strategy or SingleDeviceStrategy(device=torch.device("cpu"))
    module._trainer = SimpleNamespace(precision=precision, strategy=strategy, gradient_clip_val=1.0,
                                      gradient_clip_algorithm=None)
    return module


@pytest.mark.parametrize("scale", [5.0, 1.5, 0.5, float("nan")])
def test_cpu_clipping_gives_torchs_gradients_bit_for_bit(scale):
    """The CPU clipping equals torch.nn.utils.clip_grad_norm_ exactly: scaled above the limit, untouched below
    it, and a NaN norm spreads as torch spreads it."""
    module = _module_with_gradients(scale)
    reference = [torch.nn.Parameter(p.detach().clone()) for p in module.parameters()]
    for r, p in zip(reference, module.parameters(), strict=True):
        r.grad = p.grad.clone()
    torch.nn.utils.clip_grad_norm_(reference, 1.0)
    opt = torch.optim.SGD(module.parameters(), lr=0.1)
    module.configure_gradient_clipping(opt, gradient_clip_val=1.0, gradient_clip_algorithm="norm")
    for p, r in zip(module.parameters(), reference, strict=True):
        assert torch.equal(p.grad, r.grad) or (torch.isnan(p.grad).all() and torch.isnan(r.grad).all())
    if scale > 1:
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(p.grad) for p in module.parameters()]))
        assert total.item() == pytest.approx(1.0, rel=1e-5)


def test_cpu_clipping_leaves_gradients_under_the_limit_untouched():
    """Under the limit no multiply runs at all (torch would multiply every gradient by 1.0 in place)."""
    module = _module_with_gradients(0.5)
    versions = [p.grad._version for p in module.parameters()]
    module.configure_gradient_clipping(torch.optim.SGD(module.parameters(), lr=0.1), 1.0, "norm")
    assert [p.grad._version for p in module.parameters()] == versions
    module = _module_with_gradients(5.0)
    versions = [p.grad._version for p in module.parameters()]
    module.configure_gradient_clipping(torch.optim.SGD(module.parameters(), lr=0.1), 1.0, "norm")
    assert all(p.grad._version > v for p, v in zip(module.parameters(), versions, strict=True))


def test_clipping_outside_the_plain_cpu_case_is_lightnings():
    """Mixed precision, FSDP's sharded gradients or clipping by value go to Lightning's own clipping."""
    from unittest import mock

    from lightning.pytorch.strategies import FSDPStrategy

    cases = [("bf16-mixed", None, "norm"), ("32-true", FSDPStrategy(), "norm"), ("32-true", None, "value")]
    for precision, strategy, algorithm in cases:
        module = _module_with_gradients(5.0, precision=precision, strategy=strategy)
        with mock.patch("lightning.pytorch.LightningModule.configure_gradient_clipping") as lightning_clip:
            module.configure_gradient_clipping(torch.optim.SGD(module.parameters(), lr=0.1), 1.0, algorithm)
        assert lightning_clip.call_count == 1, (precision, strategy, algorithm)


def test_the_training_loss_is_logged_on_the_steps_lightning_hands_to_the_loggers():
    """Lightning's rule: every log_every_n_steps counted from the first step, or when stopping; with 0 nothing
    reaches the loggers and every step is logged (the progress bar shows it)."""
    from types import SimpleNamespace

    module = GPTModule(model=MODEL, vocab_size=20)

    def logged(step, every=10, stop=False):
        module._trainer = SimpleNamespace(global_step=step, log_every_n_steps=every, should_stop=stop)
        return module._logging_step()

    assert [s for s in range(30) if logged(s)] == [9, 19, 29]
    assert logged(4, stop=True) and all(logged(s, every=0) for s in range(5))
    assert [s for s in range(6) if logged(s, every=1)] == list(range(6))


def test_load_trained_gives_the_model_as_it_was_trained(tmp_path):
    """A run dir or its .ckpt file -> the GPT in eval mode with the run's attention bug, its weights, no tokenizer
    for token-id data, and the step."""
    from helpers import write_checkpoint
    from tinygpt.experiments.partial_leaks.bugs import BuggyAttention
    from tinygpt.train.module import load_trained

    bug = {"_target_": "tinygpt.experiments.partial_leaks.bugs.AttentionBug", "kind": "off_by_one", "layers": [1]}
    path = write_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt", step=7, model={"patch": [bug]})
    model, tok, step = load_trained(tmp_path / "run")
    assert not model.training and tok is None and step == 7
    assert [isinstance(b.attn, BuggyAttention) for b in model.blocks] == [False, True]
    again, _, _ = load_trained(path)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), again.state_dict().values(), strict=True))


def test_a_checkpoint_with_a_setting_this_version_lacks_is_one_sentence(tmp_path):
    """A checkpoint written with a hyper-parameter this version does not have is refused in one sentence naming it:
    an older run's attention_bug (before model.patch) names today's setting and the run dir to migrate; the same
    key left empty (null) loads."""
    from helpers import write_checkpoint
    from tinygpt.runtime.errors import ConfigError
    from tinygpt.train.module import load_trained

    bug = {"_target_": "tinygpt.experiments.leaky_masks.AttentionBug", "kind": "off_by_one", "layers": [0]}
    path = write_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt", extra={"attention_bug": bug})
    with pytest.raises(ConfigError) as err:
        load_trained(tmp_path / "run")
    assert str(err.value) == (f"{path} was written by an earlier tinygpt: it names attention_bug (today model.patch)"
                              ". Rewrite it in today's names once with `python scripts/migrate_run.py "
                              f"{tmp_path / 'run'}`, then run this again.")
    write_checkpoint(path, extra={"some_later_setting": 3})
    with pytest.raises(ConfigError) as err:
        load_trained(path)
    assert str(err.value) == (f"{path} was written with some_later_setting, a setting this version of tinygpt does "
                              "not have; load it with the version that wrote it.")
    write_checkpoint(path, extra={"attention_bug": None})
    assert load_trained(path)[2] == 60


def _validated(tmp_path, precision="32-true", **data):
    """A small module validated once by a Lightning Trainer on the embedded corpus's first windows."""
    import lightning as L

    from tinygpt.data.datamodule import TextDataModule

    dm = TextDataModule(block_size=16, batch_size=4, val_windows=40, val_batch_size=16, cache_dir=str(tmp_path), **data)
    dm.prepare_data()
    dm.setup()
    torch.manual_seed(0)
    module = GPTModule(dict(n_layer=2, n_head=2, n_embd=32, block_size=16), dm.vocab_size)
    trainer = L.Trainer(accelerator="cpu", precision=precision, logger=False, enable_progress_bar=False,
                        enable_checkpointing=False, enable_model_summary=False, default_root_dir=tmp_path)
    trainer.validate(module, datamodule=dm, verbose=False)
    return module, dm


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_the_last_validations_window_losses_are_the_end_of_runs_to_the_bit(tmp_path):
    """The end of a run takes every window's loss from a validation at its last step instead of scoring the windows
    again: the same (N, T) float64 values, bit for bit, as diagnostics.window_losses computes on the model, three
    batches of 16 with a short last one; their mean is the validation's loss."""
    from tinygpt.train.probes.diagnostics import window_losses

    module, dm = _validated(tmp_path)
    kept = module.window_losses_of_validation_at(module.trainer.global_step)
    again = window_losses(module.model, dm.val_x, dm.val_y, dm.val_batch_size)
    assert kept.shape == again.shape == (40, 16) and kept.dtype == torch.float64
    assert torch.equal(kept, again)
    assert kept.mean().item() == pytest.approx(module.last_val_loss, rel=1e-6)
    assert module.window_losses_of_validation_at(module.trainer.global_step + 1) is None  # not at this step


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_the_window_losses_are_scored_again_where_the_validation_ran_otherwise(tmp_path):
    """In another precision than full (bfloat16 autocast here) the validation's logits are not the end's:
    nothing is taken from it."""
    module, _ = _validated(tmp_path, precision="bf16-mixed")
    assert module.val_position_losses and module.window_losses_of_validation_at(module.trainer.global_step) is None

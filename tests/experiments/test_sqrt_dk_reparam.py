"""Experiment 2's reparametrisation controls: the unscaled attention with its q and k rows divided by d_k^(1/4)
computes the scaled attention's scores at init, and with its Adam updates divided too, follows the scaled arm
through training (without clipping, up to Adam's eps)."""

import pytest
import torch

from tinygpt.experiments.sqrt_dk.reparam import QKReparam
from tinygpt.model.config import AttnConfig
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.train.optim import AdamWCosine


def model(scale: str, d: int = 16, seed: int = 0) -> GPT:
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=40, block_size=16, n_layer=2, n_head=1, n_embd=d, dropout=0.0,
                         attn=AttnConfig(backend="math", scale=scale, qk_init="unit")))


def train(m: GPT, steps: int, seed: int = 1) -> GPT:
    opt = AdamWCosine(lr=3e-3, min_lr=3e-3, warmup_steps=0, decay_steps=100, weight_decay=0.1)(m)["optimizer"]
    gen = torch.Generator().manual_seed(seed)
    for _ in range(steps):
        x = torch.randint(0, 40, (4, 16), generator=gen)
        _, loss = m(x, torch.roll(x, -1, 1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    return m


def logits(m: GPT) -> torch.Tensor:
    x = torch.randint(0, 40, (2, 16), generator=torch.Generator().manual_seed(9))
    with torch.no_grad():
        return m(x)[0]


def test_at_init_the_divided_rows_give_the_scaled_arms_scores_exactly():
    """d_k = 16: the rows divided by 2 and the scores by 4: powers of two, so bit for bit."""
    scaled, control, unscaled = model("sqrt_dk"), QKReparam(init=True)(model("none")), model("none")
    assert torch.equal(logits(control), logits(scaled))
    assert not torch.allclose(logits(unscaled), logits(scaled), atol=1e-3)


def test_with_its_steps_divided_the_control_follows_the_scaled_arm_and_without_them_it_does_not():
    scaled = train(model("sqrt_dk"), 20)
    full = train(QKReparam(init=True, step=True)(model("none")), 20)
    init_only = train(QKReparam(init=True)(model("none")), 20)
    reference = logits(scaled)
    follows = (logits(full) - reference).abs().max().item()
    strays = (logits(init_only) - reference).abs().max().item()
    assert follows < 1e-4 * reference.abs().max().item(), follows  # Adam's eps is all that differs
    assert strays > 1e3 * max(follows, 1e-7), (strays, follows)


def test_the_control_refuses_a_scaled_attention_and_a_step_without_the_init():
    with pytest.raises(ValueError, match=r"model.attn.scale='sqrt_dk' would apply the factor twice"):
        QKReparam()(model("sqrt_dk"))
    with pytest.raises(ValueError, match=r"step=true needs init=true"):
        QKReparam(init=False, step=True)

"""diagnostics.softmax_gradients: the quantities Vaswani et al.'s argument for 1/sqrt(d_k) is about, checked against
the softmax's Jacobian written out, on constructions whose answer is known, and against the premise's own slope."""

import math

import pytest
import torch

from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.train.probes.diagnostics import batch_qk, softmax_gradients


def model(d, scale="sqrt_dk", init="unit", heads=1, layers=2, **attn):
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=17, block_size=16, n_layer=layers, n_head=heads, n_embd=d,
                         attn={"scale": scale, "qk_init": init, **attn}))


def windows(n=6, t=16, seed=1):
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 17, (n, t), generator=g), torch.randint(0, 17, (n, t), generator=g)


def test_the_gain_is_the_softmax_jacobian_applied_to_the_gradient_of_the_weights():
    """||dL/dS|| / ||dL/dP|| with dL/dS = J^T dL/dP row by row, J = diag(p) - p p^T: computed here by hand from the
    weights and dL/dP (float64)."""
    m = model(8, layers=1).double()
    x, y = windows()
    m.blocks[0].attn.keep = kept = []
    _, loss = m(x, y)
    m.blocks[0].attn.keep = None
    (k,) = kept
    d_p, d_s = torch.autograd.grad(loss, [k["weights"], k["scores"]])
    p = k["weights"]
    by_hand = p * (d_p - (d_p * p).sum(-1, keepdim=True))  # (N, H, T, T): J^T g, J symmetric
    visible = torch.ones(16, 16, dtype=torch.bool).tril()
    assert torch.allclose(d_s.masked_fill(~visible, 0), by_hand.masked_fill(~visible, 0), atol=1e-15)
    expected = by_hand.masked_fill(~visible, 0).norm() / d_p.masked_fill(~visible, 0).norm()
    assert softmax_gradients(m, x, y)["softmax_gain"][0] == pytest.approx(expected.item(), rel=1e-9)


def test_uniform_weights_give_a_trace_of_one_and_a_saturated_softmax_gives_zero():
    uniform = model(16, init="gpt2")
    for block in uniform.blocks:  # W_Q = W_K = 0: every score 0, every row uniform over its keys
        torch.nn.init.zeros_(block.attn.c_attn.weight[:32])
    x, y = windows()
    r = softmax_gradients(uniform, x, y)
    assert r["jacobian_trace"] == pytest.approx([1.0, 1.0], abs=1e-6) and r["raw_qk"] == [0.0, 0.0]
    assert r["grad_wq"] == pytest.approx([0.0, 0.0], abs=1e-12)  # dL/dW_Q = 0 when k = 0
    saturated = model(16, scale="none")
    with torch.no_grad():
        for block in saturated.blocks:
            block.attn.c_attn.weight[:32] *= 30  # q.k ~ 900 x its unit-init spread: one-hot rows
    r = softmax_gradients(saturated, x, y)
    assert max(r["jacobian_trace"]) < 0.02 and max(r["softmax_gain"]) < 0.005  # ~0.04 at unit init


def test_at_unit_init_the_unscaled_trace_falls_with_d_k_and_the_scaled_one_does_not():
    """The premise by construction: q, k with unit-variance components make q.k's variance d_k, so without the
    factor the rows saturate more as d_k grows; with it the scores keep unit variance at every d_k."""
    x, y = windows(16)
    unscaled = [sum(softmax_gradients(model(d, scale="none"), x, y)["jacobian_trace"]) / 2 for d in (16, 64, 256)]
    scaled = [sum(softmax_gradients(model(d), x, y)["jacobian_trace"]) / 2 for d in (16, 64, 256)]
    assert unscaled[0] > unscaled[1] > unscaled[2] and unscaled[2] < 0.3
    assert min(scaled) > 0.85 and max(scaled) - min(scaled) < 0.05


def test_nothing_of_the_model_changes_and_every_layer_reports():
    m = model(32, heads=2, layers=3, backend="sdpa")  # sdpa: the probe runs the formula, the same function
    m.train()
    x, y = windows()
    before = {n: p.detach().clone() for n, p in m.named_parameters()}
    r = softmax_gradients(m, x, y)
    assert m.training and all(p.grad is None for p in m.parameters())
    assert all(torch.equal(p, before[n]) for n, p in m.named_parameters())
    assert all(len(v) == 3 and all(math.isfinite(u) for u in v) for v in r.values())
    assert all(block.attn.keep is None for block in m.blocks)


def test_in_float16_the_raw_product_overflows_only_with_the_scale_after_it():
    """d_k = 256, W_Q and W_K large enough that q.k passes 65504 while the scaled score (/16) does not: in float16
    autocast the scores are inf with the scale after the product and finite with it on q and k first."""
    x, y = windows(2)
    out = {}
    for scale_at in ("scores", "qk"):
        m = model(256, layers=1, backend="math", scale_at=scale_at)
        with torch.no_grad():
            m.blocks[0].attn.c_attn.weight[:512] *= 48  # q, k components of std 48: q.k of std 48^2 * 16 = 36,864
        out[scale_at] = softmax_gradients(m, x, y, autocast=lambda: torch.autocast("cpu", dtype=torch.float16))
    assert out["scores"]["raw_qk"] == [math.inf] and out["scores"]["scores_inf"] == [1.0]
    assert out["qk"]["raw_qk"] == [math.inf]  # the same q and k: their raw product overflows either way
    assert out["qk"]["scores_inf"] == [0.0] and 4096 < out["qk"]["scaled_qk"][0] < 65504


@pytest.mark.slow  # two in-process runs
def test_the_stability_probe_looks_at_the_initial_model_at_step_0_and_not_again_on_a_resume(
        tmp_path, corpus_file, cache_dir):
    """callbacks.stability.at_start: the probe before the first update, logged at step 0 (the argument for
    1/sqrt(d_k) is about the model at init); a resumed run does not probe its start again."""
    import csv

    from helpers import TINY, compose_train
    from tinygpt.train import run as run_phases

    def cfg(*extra):
        return compose_train([*TINY, "corpus=text_file", f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}",
                              "logger=csv", "trainer.max_steps=3", "trainer.val_check_interval=3",
                              "callbacks.stability.every_n_steps=2", "callbacks.attention_maps.every_n_steps=0",
                              *extra], out_dir=tmp_path)

    def probes():
        with open(tmp_path / "history" / "metrics.csv", newline="") as f:
            return {int(r["step"]): float(r["stab/jacobian_trace"]) for r in csv.DictReader(f)
                    if r.get("stab/jacobian_trace")}

    run_phases.train(cfg())
    assert sorted(probes()) == [0, 1]  # at init, then after 2 updates (at batch index 1)
    assert probes()[0] != probes()[1]  # two models
    run_phases.train(cfg("trainer.max_steps=5", "ckpt_path=last"))
    assert sorted(probes()) == [0, 1, 3]


def test_the_probe_at_start_is_a_setting_and_only_for_a_fresh_run(monkeypatch):
    from types import SimpleNamespace

    from tinygpt.train.probes.callbacks import StabilityMonitor

    for at_start, step, expected in ((True, 0, [0]), (True, 7, []), (False, 0, [])):
        mon = StabilityMonitor(at_start=at_start)
        seen = []
        monkeypatch.setattr(mon, "inspect", lambda trainer, module, mon=mon, seen=seen: seen.append(mon._at))
        mon.on_train_start(SimpleNamespace(global_step=step), None)
        assert seen == expected and mon._at is None


def test_the_gradients_at_w_q_and_w_k_are_the_query_and_key_rows_of_a_plain_backward():
    """Known answer, by another route: loss.backward() on the same forward, c_attn's weight gradient split into its
    query, key and value rows; the probe's grad_wq and grad_wk are the first two rows' norms, not the values'."""
    m = model(8, layers=1).double()
    x, y = windows()
    r = softmax_gradients(m, x, y)
    m.eval()
    _, loss = m(x, y)
    loss.backward()
    g = m.blocks[0].attn.c_attn.weight.grad  # (3C, C): rows of W_Q, W_K, W_V
    assert r["grad_wq"][0] == pytest.approx(g[:8].norm().item(), rel=1e-9)
    assert r["grad_wk"][0] == pytest.approx(g[8:16].norm().item(), rel=1e-9)
    assert abs(r["grad_wk"][0] - g[16:].norm().item()) > 1e-3 * g[16:].norm().item()  # the value rows differ


@pytest.mark.parametrize("scale", [0.25, 1.0])
def test_the_raw_product_is_q_dot_k_before_the_scale_and_the_scaled_score_is_after_it(scale):
    """Known answer, by another route: q and k from c_attn applied to ln_1 of the embeddings (layer 0) by hand, the
    largest |q.k| over visible pairs; the probe's raw_qk is it, its scaled_qk is it times the scale (0.25: not the
    raw product; 1.0: the same)."""
    m = model(8, scale=scale, layers=1).double()
    x, y = windows()
    r = softmax_gradients(m, x, y)
    with torch.no_grad():
        h = m.blocks[0].ln_1(m.wte(x) + m.wpe(torch.arange(16)))  # (N, T, C)
        q, k, _ = m.blocks[0].attn.c_attn(h).split(8, dim=2)  # (N, T, C) each, one head: D = C
        qk = (q @ k.transpose(-2, -1)).abs()  # (N, T, T)
        largest = qk.masked_fill(~torch.ones(16, 16, dtype=torch.bool).tril(), 0).max().item()
    assert r["raw_qk"][0] == pytest.approx(largest, rel=1e-6)  # the probe reports float32
    assert r["scaled_qk"][0] == pytest.approx(scale * largest, rel=1e-6)


@pytest.mark.parametrize("scale_at", ["scores", "qk"])
def test_the_training_batch_probe_is_q_dot_k_in_float32_before_and_after_the_scale(scale_at):
    """batch_qk, the float16 replay's per-step probe, by the same route by hand: the largest |q.k| over visible
    pairs in float32 before the scale, and the score after it (times 1/sqrt(8) wherever the scale sits), even
    inside a float16 autocast (the probe turns it off: a float16 product would be inf here)."""
    m = model(8, layers=1, scale_at=scale_at, backend="math")
    with torch.no_grad():
        m.blocks[0].attn.c_attn.weight[:16] *= 600  # q.k far past 65,504 in float32
        m.blocks[0].attn.c_attn.weight[8:16] *= -1  # k negated: the largest |q.k| is a negative product
    x, _ = windows()
    with torch.no_grad():
        h = m.blocks[0].ln_1(m.wte(x) + m.wpe(torch.arange(16)))  # (N, T, C)
        q, k, _ = m.blocks[0].attn.c_attn(h).split(8, dim=2)  # (N, T, C) each, one head: D = C
        qk = q @ k.transpose(-2, -1)  # (N, T, T)
        visible = torch.ones(16, 16, dtype=torch.bool).tril()
        largest = qk.abs().masked_fill(~visible, 0).max().item()
        top = qk.masked_fill(~visible, -math.inf).max().item()  # the most positive visible product
        bottom = qk.masked_fill(~visible, math.inf).min().item()
    assert largest > 65504 and bottom < 0 < top and top != largest  # both signs present, the largest |q.k| negative
    with torch.autocast("cpu", dtype=torch.float16):
        raw, scaled, raw_pos, scaled_pos = batch_qk(m, x)
    assert raw == pytest.approx(largest, rel=1e-5) and scaled == pytest.approx(largest / math.sqrt(8), rel=1e-5)
    assert raw_pos == pytest.approx(top, rel=1e-5) and scaled_pos == pytest.approx(top / math.sqrt(8), rel=1e-5)
    assert m.training  # the mode is restored


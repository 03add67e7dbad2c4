import math

import numpy as np
import pytest
import torch

from tinygpt.model.attention import causal_mask
from tinygpt.train.probes.diagnostics import (
    attention_stats,
    honest_loss,
    honest_loss_by_position,
    future_leak,
    loss_by_position,
    run_all,
    teacher_forced_loss,
)
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.train.probes import diagnostics


def model(causal=True, backend="sdpa", seed=0):
    torch.manual_seed(seed)
    return GPT(GPTConfig(vocab_size=23, block_size=10, n_layer=2, n_head=2, n_embd=16,
                         attn={"causal": causal, "backend": backend}))


def batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    w = torch.randint(0, 23, (6, 11), generator=g)
    return w[:, :-1], w[:, 1:]


@pytest.mark.parametrize("backend", ["sdpa", "math"])
def test_causal_model_autoregressive_equals_teacher_forced_and_no_leak(backend):
    m, (x, y) = model(backend=backend), batch()
    assert honest_loss(m, x, y) == pytest.approx(teacher_forced_loss(m, x, y), rel=1e-5)
    assert future_leak(m, x, positions=list(range(9))) == 0.0


def test_leaky_model_is_caught():
    m, (x, y) = model(causal=False), batch()
    m.blocks[0].attn.c_attn.weight.data.mul_(20)  # sharper attention: a larger leak
    assert future_leak(m, x) > 1e-3
    assert honest_loss(m, x, y) != pytest.approx(teacher_forced_loss(m, x, y), rel=1e-4)


def test_honest_loss_scores_prefixes_only():
    m, (x, y) = model(causal=False), batch()
    # by hand for one window: position t sees x[:t+1] only
    with torch.no_grad():
        hand = sum(
            torch.nn.functional.cross_entropy(m(x[:1, : t + 1])[0][:, -1], y[:1, t]).item() for t in range(10)
        ) / 10
    assert honest_loss(m, x[:1], y[:1]) == pytest.approx(hand, rel=1e-6)


def test_uniform_attention_has_entropy_one_and_zero_logits():
    m, (x, _) = model(), batch()
    for b in m.blocks:  # q = 0 -> all logits 0 -> uniform over the visible keys
        b.attn.c_attn.weight.data[: b.attn.n_embd] = 0
    stats = attention_stats(m, x)
    assert stats["attn_entropy"] == pytest.approx(1.0, abs=1e-6)
    assert stats["attn_max_logit"] == 0.0


def test_max_logit_matches_a_hand_computation():
    m, (x, _) = model(), batch()
    with torch.no_grad():
        h = m.wte(x) + m.wpe(torch.arange(10))
        a = m.blocks[0].attn
        q, k, _ = a.c_attn(m.blocks[0].ln_1(h)).split(16, dim=2)
        q = q.view(6, 10, 2, 8).transpose(1, 2)  # (B, H, T, D)
        k = k.view(6, 10, 2, 8).transpose(1, 2)
        s = (q @ k.transpose(-2, -1)) / math.sqrt(8)
        expected = s.masked_fill(~causal_mask(10, 10), float("-inf")).max().item()
    assert attention_stats(m, x)["attn_max_logit_per_layer"][0] == pytest.approx(expected, rel=1e-5)


def test_one_hot_attention_has_entropy_near_zero():
    m, (x, _) = model(), batch()
    stats = attention_stats(m, x)
    assert 0.0 < stats["attn_entropy"] <= 1.0
    for b in m.blocks:  # huge logits: near one-hot rows
        b.attn.c_attn.weight.data[: 2 * b.attn.n_embd] *= 300
    assert attention_stats(m, x)["attn_entropy"] < 0.2


def test_run_all_keys_and_mode_restored():
    m, (x, y) = model(), batch()
    m.train()
    out = run_all(m, x, y)
    assert {"val_loss_honest", "future_leak", "attn_entropy", "attn_max_logit"} <= out.keys()
    assert m.training


@pytest.mark.parametrize("causal", [True, False])
def test_loss_by_position_averages_to_the_teacher_forced_loss(causal):
    m, (x, y) = model(causal=causal), batch()
    by_pos = loss_by_position(m, x, y)
    assert by_pos.shape == (10,)
    assert by_pos.mean().item() == pytest.approx(teacher_forced_loss(m, x, y), rel=1e-6)
    with torch.no_grad():  # position 3 by hand
        expected = torch.nn.functional.cross_entropy(m(x)[0][:, 3].double(), y[:, 3]).item()
    assert by_pos[3].item() == pytest.approx(expected, rel=1e-9)


def test_autoregressive_by_position_equals_teacher_forced_by_position_for_a_causal_model():
    m, (x, y) = model(), batch()
    ar = honest_loss_by_position(m, x, y)
    assert torch.allclose(ar, loss_by_position(m, x, y), rtol=1e-5, atol=0)
    assert ar.mean().item() == pytest.approx(honest_loss(m, x, y), rel=1e-12)


def test_autoregressive_by_position_differs_from_teacher_forced_for_a_leaky_model():
    m, (x, y) = model(causal=False), batch()
    m.blocks[0].attn.c_attn.weight.data.mul_(20)
    ar, tf = honest_loss_by_position(m, x, y), loss_by_position(m, x, y)
    assert ar[-1].item() == pytest.approx(tf[-1].item(), rel=1e-5)  # the last position sees the whole window
    assert not torch.allclose(ar[:-1], tf[:-1], rtol=1e-3)  # the others lose their future


def test_future_attention_mass_zero_under_the_mask_and_exact_for_uniform_attention():
    x, _ = batch()
    causal, leaky = model(causal=True), model(causal=False)
    assert attention_stats(causal, x)["attn_future_mass"] == 0.0
    for b in leaky.blocks:  # q = 0: uniform attention over all T = 10 keys
        b.attn.c_attn.weight.data[: b.attn.n_embd] = 0
    # row i puts (T - 1 - i) / T on the future; the mean over rows is (T - 1) / (2 T) = 0.45
    stats = attention_stats(leaky, x)
    assert stats["attn_future_mass"] == pytest.approx(0.45, abs=1e-6)
    assert stats["attn_future_mass_per_layer"] == pytest.approx([0.45, 0.45], abs=1e-6)
    assert stats["attn_future_mass_max"] == pytest.approx(0.9, abs=1e-6)  # row 0: 9 of its 10 keys are future
    assert attention_stats(causal, x)["attn_future_mass_max"] == 0.0


def test_run_all_has_the_position_profiles():
    m, (x, y) = model(), batch()
    out = run_all(m, x, y)
    assert len(out["loss_by_position"]) == len(out["loss_by_position_honest"]) == 10
    assert out["attn_future_mass"] == 0.0


def test_spread_positions_include_both_ends():
    from tinygpt.train.probes.diagnostics import spread_positions

    assert spread_positions(64, 8) == [0, 9, 18, 27, 36, 45, 54, 63]
    assert spread_positions(5, 8) == [0, 1, 2, 3, 4]
    assert spread_positions(10, 1) == [9]


def test_honest_loss_at_chosen_positions():
    m, (x, y) = model(causal=False), batch()
    full = honest_loss_by_position(m, x, y)
    some = honest_loss_by_position(m, x, y, [0, 4, 9])
    assert torch.allclose(some, full[[0, 4, 9]], rtol=1e-12)
    assert honest_loss(m, x, y, [0, 4, 9]) == pytest.approx(full[[0, 4, 9]].mean().item(), rel=1e-12)


def test_stats_report_min_entropy_and_qk_rms():
    m, (x, _) = model(), batch()
    stats = attention_stats(m, x)
    for key in ("entropy", "entropy_min", "max_logit", "future_mass", "q_rms", "k_rms"):
        assert len(stats[f"attn_{key}_per_layer"]) == 2
    assert all(lo <= mean for lo, mean in zip(stats["attn_entropy_min_per_layer"], stats["attn_entropy_per_layer"],
                                              strict=True))
    with torch.no_grad():  # q RMS of layer 0 by hand
        h = m.blocks[0].ln_1(m.wte(x) + m.wpe(torch.arange(10)))
        q = m.blocks[0].attn.c_attn(h)[..., :16]
    assert stats["attn_q_rms_per_layer"][0] == pytest.approx(q.pow(2).mean().sqrt().item(), rel=1e-5)


class OneAhead(torch.nn.Module):
    """A 'model' whose logits at t are a one-hot of x[t+1]: it sees exactly one token ahead."""

    config = GPTConfig(vocab_size=23, block_size=10)

    def forward(self, idx, targets=None):
        nxt = torch.roll(idx, -1, dims=1)  # (N, T): x[t+1] at t (wraps at the end)
        return torch.nn.functional.one_hot(nxt, 23).float() * 10, None


def test_a_one_token_look_ahead_is_a_leak():
    x, _ = batch()
    assert future_leak(OneAhead(), x) > 1.0  # the token right after t is replaced too


def test_future_leak_of_a_causal_model_with_dropout_in_train_mode_is_zero():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=23, block_size=10, n_layer=2, n_head=2, n_embd=16, dropout=0.2))
    m.train()  # the probe must switch dropout off itself, or a correct model shows a 'leak'
    x, _ = batch()
    assert future_leak(m, x) == 0.0 and m.training


@pytest.mark.parametrize("T, n, expected", [(10, 3, [0, 4, 9]), (10, 2, [0, 9]), (10, 1, [9]), (5, 5, [0, 1, 2, 3, 4]),
                                            (5, 9, [0, 1, 2, 3, 4]), (64, 8, [0, 9, 18, 27, 36, 45, 54, 63])])
def test_spread_positions_by_hand(T, n, expected):
    from tinygpt.train.probes.diagnostics import spread_positions

    assert spread_positions(T, n) == expected


def test_the_cached_honest_loss_equals_rerunning_each_prefix():
    """A causal model is scored by KV-cache decoding; the reference reruns x[:, :t+1] for every t."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=19, block_size=12, n_layer=2, n_head=2, n_embd=16)).eval()
    x, y = torch.randint(0, 19, (3, 12)), torch.randint(0, 19, (3, 12))
    with torch.no_grad():
        ref = [torch.nn.functional.cross_entropy(m(x[:, : t + 1])[0][:, -1].double(), y[:, t]).item()
               for t in range(12)]
    got = honest_loss_by_position(m, x, y)
    assert got.tolist() == pytest.approx(ref, abs=1e-5)
    some = honest_loss_by_position(m, x, y, [0, 5, 11])
    assert some.tolist() == pytest.approx([ref[0], ref[5], ref[11]], abs=1e-5)


def test_a_leaky_model_scores_a_spread_subset_of_positions_and_says_so():
    from tinygpt.train.probes import diagnostics

    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=11, block_size=80, n_layer=1, n_head=2, n_embd=8, attn={"causal": False}))
    x, y = torch.randint(0, 11, (2, 80)), torch.randint(0, 11, (2, 80))
    out = diagnostics.run_all(m, x, y)
    assert out["honest_positions"] == diagnostics.LEAKY_AR_POSITIONS == 64
    at = out["honest_at"]
    assert len(at) == 64 and at[0] == 0 and at[-1] == 79
    assert len(out["loss_by_position_honest"]) == 64 and len(out["loss_by_position"]) == 80
    causal = diagnostics.run_all(GPT(GPTConfig(vocab_size=11, block_size=80, n_layer=1, n_head=2, n_embd=8)), x, y)
    assert causal["honest_positions"] == 80  # every position, by KV-cache decoding


# ----------------------------------------------------------------------------- closing what mutation testing found


@pytest.mark.parametrize("causal", [True, False])
def test_attention_stats_by_hand_from_the_probe(causal):
    """Every statistic recomputed by hand from the layer's weights, logits, q and k, for T = 3 (row 1 of a
    causal model has 2 visible keys and counts; row 0 has one and is skipped)."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=9, block_size=3, n_layer=1, n_head=2, n_embd=8, attn={"causal": causal})).eval()
    with torch.no_grad():  # large q, k weights: peaked, uneven attention (at init every row is near uniform,
        m.blocks[0].attn.c_attn.weight.mul_(40)  # entropy ~1 everywhere, and a wrong choice of rows goes unnoticed)
    x = torch.randint(0, 9, (2, 3))
    with torch.no_grad():
        p = m.dissect_attention(x)[0]
    w, s, q, k = p["weights"].double(), p["logits"].double(), p["q"].double(), p["k"].double()
    n_vis = torch.tensor([1, 2, 3] if causal else [3, 3, 3], dtype=torch.float64)
    rows = [1, 2] if causal else [0, 1, 2]
    ent = torch.stack([-(w[..., i, :] * w[..., i, :].clamp_min(1e-30).log()).sum(-1) / n_vis[i].log() for i in rows],
                      -1)  # (N, H, rows)
    visible = torch.ones(3, 3, dtype=torch.bool).tril() if causal else torch.ones(3, 3, dtype=torch.bool)
    future_mass = sum(w[..., i, j] for i in range(3) for j in range(i + 1, 3)).mean() / 3  # per row, then mean
    out = attention_stats(m, x)
    assert 0.05 < ent.mean().item() < 0.95 and ent.max() - ent.min() > 0.1  # not uniform, not one-hot
    assert out["attn_entropy"] == pytest.approx(ent.mean().item(), abs=1e-5)
    assert out["attn_entropy_min"] == pytest.approx(ent.min().item(), abs=1e-5)
    assert out["attn_max_logit"] == pytest.approx(s.masked_fill(~visible, float("-inf")).max().item(), abs=1e-5)
    assert out["attn_future_mass"] == pytest.approx(future_mass.item(), abs=1e-6)
    assert out["attn_q_rms_per_layer"] == pytest.approx([q.pow(2).mean().sqrt().item()], abs=1e-5)
    assert out["attn_k_rms_per_layer"] == pytest.approx([k.pow(2).mean().sqrt().item()], abs=1e-5)


def test_future_leak_probes_the_documented_positions_with_a_seeded_replacement():
    """The default positions are 0, T/4, T/2, 3T/4 and T-2; the replacement tokens come from
    Generator(seed) over the whole vocabulary; out-of-range positions are skipped, not the end of the list."""
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=7, block_size=16, n_layer=1, n_head=2, n_embd=8, attn={"causal": False})).eval()
    x = torch.randint(0, 7, (2, 16))
    seen = []
    forward = m.forward
    m.forward = lambda idx, *a, **kw: seen.append(idx.clone()) or forward(idx, *a, **kw)
    assert future_leak(m, x) == future_leak(m, x, seed=0) != future_leak(m, x, seed=1)  # seeded, default 0
    seen.clear()
    leak = future_leak(m, x, seed=5)
    probed = [int((c != x).any(0).nonzero()[0]) - 1 for c in seen[1:] if (c != x).any()]
    assert seen[0].equal(x) and len(seen) == 6 and probed == [0, 4, 8, 12, 14]
    gen, expected = torch.Generator().manual_seed(5), 0.0  # by hand, same draws
    with torch.no_grad():
        base = forward(x)[0]
        for t in (0, 4, 8, 12, 14):
            x2 = x.clone()
            x2[:, t + 1 :] = torch.randint(0, 7, (2, 15 - t), generator=gen)
            expected = max(expected, (base[:, : t + 1] - forward(x2)[0][:, : t + 1]).abs().max().item())
    assert leak == expected > 0
    seen.clear()
    future_leak(m, x, positions=[-1, 15, 3])  # nothing to perturb after 15; -1 is no position: both skipped
    assert len(seen) == 2 and int((seen[1] != x).any(0).nonzero()[0]) == 4


def test_future_leak_of_a_diverged_model_is_nan():
    m = GPT(GPTConfig(vocab_size=7, block_size=8, n_layer=1, n_head=1, n_embd=8))
    with torch.no_grad():
        m.lm_head.weight.fill_(float("nan"))
    assert math.isnan(future_leak(m, torch.zeros(1, 8, dtype=torch.long)))


def test_run_all_reports_which_positions_and_the_probe_loss():
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=11, block_size=6, n_layer=1, n_head=2, n_embd=8))
    x, y = torch.randint(0, 11, (3, 6)), torch.randint(0, 11, (3, 6))
    out = run_all(m, x, y)
    assert out["honest_at"] == list(range(6)) and out["honest_positions"] == 6
    assert out["val_loss_probe"] == pytest.approx(teacher_forced_loss(m, x, y), abs=1e-6)
    assert out["attn_entropy_min"] <= out["attn_entropy"]


def test_normalised_entropy_is_one_rule_for_torch_and_numpy():
    """Uniform over the visible keys is 1, one-hot is 0; a row with one visible key is left out; a numpy array
    (the explorer's saved weights) gives the same numbers as a tensor."""
    from tinygpt.model.attention import normalised_entropy

    T = 4
    uniform = causal_mask(T, T).float() / torch.arange(1, T + 1)[:, None]  # (T, T): row i over its i + 1 keys
    assert torch.allclose(normalised_entropy(uniform), torch.ones(T - 1))
    assert torch.equal(normalised_entropy(torch.eye(T)), torch.zeros(T - 1))
    assert torch.allclose(normalised_entropy(torch.full((T, T), 1 / T), causal=False), torch.ones(T))
    w = torch.softmax(torch.randn(2, 3, T, T).masked_fill(~causal_mask(T, T), float("-inf")), -1)  # (B, H, T, T)
    assert torch.allclose(torch.from_numpy(normalised_entropy(w.numpy())).float(), normalised_entropy(w))


@pytest.mark.parametrize("causal", [True, False])
def test_honest_losses_are_each_windows_own(causal):
    """honest_losses[n, i]: the cross-entropy of window n alone at positions[i], from x[n, :t+1] (not the windows'
    mean repeated), on both paths: KV-cache decoding (causal) and rerunning each prefix (no mask)."""
    from tinygpt.train.probes.diagnostics import honest_losses

    m, (x, y) = model(causal=causal), batch()
    positions = [0, 3, 9]
    got = honest_losses(m, x, y, positions)  # (N, P)
    with torch.no_grad():
        hand = [[torch.nn.functional.cross_entropy(m(x[n:n + 1, : t + 1])[0][0, -1].double(), y[n, t]).item()
                 for t in positions] for n in range(len(x))]
    assert got.shape == (6, 3) and got.dtype == torch.float64
    assert got.tolist() == [pytest.approx(row, abs=1e-5) for row in hand]
    assert got[:, 2].std() > 0.01  # the windows differ: a mean copied into every row would not


@pytest.mark.parametrize("causal, passes", [(True, 5), (False, 2)])
def test_honest_losses_decodes_only_up_to_the_last_scored_position(causal, passes):
    """Scoring positions 1 and 4 of 10: a causal model decodes tokens 0..4 with the KV cache (5 one-token passes,
    none past the last scored position); a model without the mask reruns one prefix per scored position (2)."""
    from tinygpt.train.probes.diagnostics import honest_losses

    m, (x, y) = model(causal=causal), batch()
    calls = []
    handle = m.register_forward_pre_hook(lambda module, args, kwargs: calls.append(args[0].shape[1]),
                                         with_kwargs=True)
    try:
        honest_losses(m, x, y, [1, 4])
    finally:
        handle.remove()
    assert calls == ([1] * 5 if causal else [2, 5])
    assert len(calls) == passes


def test_count_baselines_by_hand():
    """Training ids 0 1 0 1 1 (V = 3): unigram counts 2, 3, 0 -> add-one 3, 4, 1 of 8; pairs 01, 10, 01, 11 ->
    row 0 holds 01 x2 (row total 2 + 3 = 5), row 1 holds 10, 11 (2 + 3 = 5). Window x = [0, 1], y = [1, 2]:
    unigram -(ln 4/8 + ln 1/8) / 2; bigram pairs 01 (2 + 1 of 5) and 12 (0 + 1 of 5)."""
    got = diagnostics.count_baselines([0, 1, 0, 1, 1], torch.tensor([[0, 1]]), torch.tensor([[1, 2]]), 3)
    assert got["unigram_loss"] == pytest.approx(-(math.log(4 / 8) + math.log(1 / 8)) / 2, rel=1e-12)
    assert got["bigram_loss"] == pytest.approx(-(math.log(3 / 5) + math.log(1 / 5)) / 2, rel=1e-12)


@pytest.mark.parametrize("vocab", [65, 50257])
def test_count_baselines_equal_the_full_bigram_table(vocab):
    """Against the table itself (V x V counts, built here for a few hundred ids of a small alphabet inside the
    vocabulary, so GPT-2's size fits): equal to the last bit."""
    gen = np.random.default_rng(0)
    alphabet = gen.choice(vocab, size=12, replace=False)
    ids = alphabet[gen.integers(0, 12, size=400)]
    x = torch.from_numpy(alphabet[gen.integers(0, 12, size=(3, 16))])
    y = torch.from_numpy(alphabet[gen.integers(0, 12, size=(3, 16))])
    index = {int(t): i for i, t in enumerate(alphabet)}  # the table over the alphabet (the rest of a row is 0s)
    table = np.zeros((12, 12))
    for a, b in zip(ids[:-1], ids[1:], strict=True):
        table[index[int(a)], index[int(b)]] += 1
    rows = table.sum(1) + vocab
    expect = np.mean([-math.log((table[index[int(a)], index[int(b)]] + 1) / rows[index[int(a)]])
                      for a, b in zip(x.flatten(), y.flatten(), strict=True)])
    got = diagnostics.count_baselines(ids, x, y, vocab)
    assert got["bigram_loss"] == pytest.approx(expect, rel=1e-12)


@pytest.mark.parametrize("backend", ["sdpa", "math"])
def test_the_attention_statistics_from_the_gradient_probes_forward_are_attention_stats(backend):
    """The stability probe reads its attention statistics from the forward softmax_gradients keeps (one forward
    less): the same numbers as attention_stats' own forward, to float rounding (the first layer's exactly: the
    same input; later layers' residual stream went through the math path there, the model's backend here)."""
    m, (x, y) = model(backend=backend), batch()
    kept = []
    diagnostics.softmax_gradients(m, x, y, layers_out=kept)
    own, read = attention_stats(m, x), diagnostics.stats_of_layers(kept, True)
    assert own.keys() == read.keys() and len(kept) == 2
    for key, value in own.items():
        assert read[key] == pytest.approx(value, rel=1e-5, abs=1e-6), key
        if key.endswith("_per_layer"):
            assert read[key][0] == value[0], key
    assert all(not t.requires_grad for layer in kept for t in layer.values())

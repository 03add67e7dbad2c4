"""Experiment 4's measures on inputs whose answers are computed by hand (tinygpt.experiments.positions.measures and
init_draws.predicted_power)."""

import numpy as np
import pytest
import torch

from tinygpt.experiments.positions import measures
from tinygpt.experiments.positions.init_draws import predicted_power
from tinygpt.model.config import AttnConfig
from tinygpt.model.gpt import GPT, GPTConfig


def tiny(position="none", causal=True, T=8) -> GPT:
    torch.manual_seed(0)
    return GPT(GPTConfig(vocab_size=11, block_size=T, n_layer=2, n_head=2, n_embd=16, position=position,
                         attn=AttnConfig(causal=causal, backend="math"))).double()


def test_the_predicted_power_counts_each_prefixs_equal_token_pairs():
    """Tokens 0, 1, 0: t = 0 one pair of 1 (1); t = 1 the two diagonal pairs of 4 (0.5); t = 2 the diagonal's 3 and
    (0, 2), (2, 0) of 9 (5/9). A second window 2, 2, 2 (every pair equal: 1 at every t) averages in."""
    x = np.array([[0, 1, 0], [2, 2, 2]])
    np.testing.assert_allclose(predicted_power(x), [(1 + 1) / 2, (0.5 + 1) / 2, (5 / 9 + 1) / 2])


def test_the_probe_reads_a_position_written_in_a_feature_and_nothing_from_noise():
    N, T, C = 200, 16, 4
    gen = torch.Generator().manual_seed(0)
    noise = torch.randn(1, N, T, C, generator=gen, dtype=torch.float64)
    written = noise.clone()
    written[..., 0] = torch.arange(T, dtype=torch.float64)  # feature 0 is the position
    fit, held = measures.fit_and_held(N)
    assert fit.tolist() == list(range(0, N, 2)) and held.tolist() == list(range(1, N, 2))
    for states, lo, hi in ((written, 0.999, 1.0), (noise, -0.02, 0.01)):
        sse, sst = measures.probe_errors(states, fit, held)
        assert sse.shape == (1, len(held)) and sst.shape == (len(held),)
        r2 = float(1 - sse.sum() / sst.sum())
        assert lo <= r2 <= hi, r2
    assert float(sst[0]) == pytest.approx(float(((torch.arange(T) - 7.5) ** 2).sum()))


def test_the_attention_outputs_power_is_the_mean_square_of_a_prefix_average_when_the_weights_are_uniform():
    """W_Q = W_K = 0 makes every score 0: query t averages the values of keys 0 .. t exactly, so the power at t is
    the mean square of that average of v = W_V LN(x)."""
    m = tiny()
    C = m.config.n_embd
    with torch.no_grad():
        m.blocks[0].attn.c_attn.weight[: 2 * C] = 0.0
    x = torch.randint(0, 11, (3, 8), generator=torch.Generator().manual_seed(1))
    power = measures.attention_output_power(m, x)  # (3, 8)
    with torch.no_grad():
        v = m.blocks[0].attn.c_attn(m.blocks[0].ln_1(m.wte(x).double()))[..., 2 * C :]  # (3, 8, C)
        prefix = v.cumsum(1) / torch.arange(1, 9, dtype=torch.float64)[None, :, None]  # (3, 8, C)
    torch.testing.assert_close(power, (prefix**2).mean(-1))


def test_hidden_states_are_the_embedding_then_each_blocks_output():
    m = tiny()
    x = torch.randint(0, 11, (2, 8), generator=torch.Generator().manual_seed(2))
    states = measures.hidden_states(m, x)
    assert states.shape == (3, 2, 8, 16)
    with torch.no_grad():
        h = m.wte(x).double()
        torch.testing.assert_close(states[0], h)
        for i, block in enumerate(m.blocks):
            h = block(h)
            torch.testing.assert_close(states[i + 1], h)


def test_without_mask_and_positions_the_probe_reads_nothing_at_any_layer():
    """Equivariance: a window's hidden state at t depends on its token and the window's bag of tokens alone."""
    m = tiny(causal=False, T=16)
    x = torch.randint(0, 11, (64, 16), generator=torch.Generator().manual_seed(3))
    sse, sst = measures.probe_errors(measures.hidden_states(m, x), *measures.fit_and_held(64))
    assert (1 - sse.sum(1) / sst.sum() < 0.02).all()


@pytest.mark.parametrize("position", ["none", "rope", "alibi"])
def test_a_long_windows_first_positions_score_as_a_trained_length_window(position):
    """Past T the model attends to every earlier token; the positions before T see what a T-long window sees."""
    m = tiny(position, T=8)
    x = torch.randint(0, 11, (2, 33), generator=torch.Generator().manual_seed(4))
    m.config.extrapolate = True
    long = measures.long_window_losses(m, x[:, :32], x[:, 1:33])  # (2, 32)
    m.config.extrapolate = False
    short = measures.long_window_losses(m, x[:, :8], x[:, 1:9])  # (2, 8)
    torch.testing.assert_close(long[:, :8], short)
    assert torch.isfinite(long).all()

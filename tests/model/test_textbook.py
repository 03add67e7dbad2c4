"""The textbook's other pieces (tinygpt.model.textbook), checked against hand-computed examples: kernel
regression, additive scoring, valid lengths."""

import pytest
import torch

from tinygpt.model.textbook import AdditiveScore, lengths_to_mask, nadaraya_watson, valid_length_softmax


@pytest.mark.parametrize("w, expected", [(0.5, 1.477), (1.0, 1.940), (2.0, 2.912)])
def test_nadaraya_watson_predictions(w, expected):
    x = torch.tensor([1.0, 2.0, 4.0])
    y = torch.tensor([0.0, 3.0, 1.0])
    pred, weights = nadaraya_watson(torch.tensor([2.5]), x, y, w=w)
    assert pred.item() == pytest.approx(expected, abs=1e-3)
    assert weights.sum().item() == pytest.approx(1.0, abs=1e-6)


def test_nadaraya_watson_gradient_matches_hand_derivation():
    w = torch.nn.Parameter(torch.tensor(0.5, dtype=torch.float64))
    x = torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64)
    y = torch.tensor([0.0, 3.0, 1.0], dtype=torch.float64)
    q = torch.tensor([2.5], dtype=torch.float64)
    pred, a = nadaraya_watson(q, x, y, w=w)
    loss = (pred[0] - 3.0) ** 2 / 2
    loss.backward()
    assert loss.item() == pytest.approx(1.159, abs=1e-3)
    # hand derivation: s_i = -(q - x_i)^2 w^2 / 2, ds_i/dw = -(q - x_i)^2 w,
    # dyhat/dw = sum_i a_i (ds_i/dw - sum_j a_j ds_j/dw) y_i, dL/dw = (yhat - 3) dyhat/dw
    a = a[0].detach()
    ds = -((2.5 - x) ** 2) * 0.5
    dyhat = (a * (ds - (a * ds).sum()) * y).sum()
    hand = (pred[0].item() - 3.0) * dyhat.item()
    assert hand == pytest.approx(-0.906, abs=1e-3)
    assert w.grad.item() == pytest.approx(hand, abs=1e-9)


def test_valid_lengths_like_the_textbook():
    scores = torch.zeros(2, 2, 4)
    w = valid_length_softmax(scores, torch.tensor([2, 3]))
    assert w[0, 0].tolist() == pytest.approx([0.5, 0.5, 0, 0])
    assert w[1, 1].tolist() == pytest.approx([1 / 3, 1 / 3, 1 / 3, 0])
    w2 = valid_length_softmax(scores, torch.tensor([[1, 3], [2, 4]]))
    assert w2[0, 0].tolist() == pytest.approx([1, 0, 0, 0])
    assert w2[1, 1].tolist() == pytest.approx([0.25] * 4)
    # zero valid keys: zeros, not NaN
    assert valid_length_softmax(scores, torch.tensor([0, 4]))[0].abs().sum().item() == 0.0


def test_additive_score_with_different_query_and_key_sizes():
    torch.manual_seed(0)
    score = AdditiveScore(query_dim=5, key_dim=3, hidden=7)
    q, k, v = torch.randn(2, 4, 5), torch.randn(2, 6, 3), torch.randn(2, 6, 2)
    s = score(q, k)
    assert s.shape == (2, 4, 6)
    # by hand for one pair
    hand = score.w_v.weight[0] @ torch.tanh(score.W_q.weight @ q[1, 2] + score.W_k.weight @ k[1, 5])
    assert s[1, 2, 5].item() == pytest.approx(hand.item(), abs=1e-6)
    out, w = score.attend(q, k, v, padding_mask=torch.tensor([[True] * 6, [True] * 4 + [False] * 2]))
    assert out.shape == (2, 4, 2)
    assert (w[1, :, 4:] == 0).all()
    out.sum().backward()
    assert score.W_q.weight.grad.abs().sum() > 0


def test_nadaraya_watson_default_width_and_shapes():
    x, y = torch.tensor([1.0, 2.0, 4.0]), torch.tensor([0.0, 3.0, 1.0])
    default, _ = nadaraya_watson(torch.tensor([2.5]), x, y)
    assert default.item() == pytest.approx(1.940, abs=1e-3)  # w = 1
    two_d, w = nadaraya_watson(torch.tensor([2.5, 0.0]), x, torch.stack([y, 2 * y], -1))  # values (n_k, d)
    assert two_d.shape == (2, 2) and two_d[0].tolist() == pytest.approx([1.940, 3.880], abs=1e-3)
    assert w.sum(-1).tolist() == pytest.approx([1.0, 1.0])  # each query's weights sum to 1


@pytest.mark.parametrize("q, k, v, message", [
    (torch.zeros(2, 1), torch.zeros(3), torch.zeros(3),
     "nadaraya_watson expects queries (n_q,), keys (n_k,), values (n_k,) or (n_k, d); got (2, 1), (3,), (3,)."),
    (torch.zeros(2), torch.zeros(3, 1), torch.zeros(3),
     "nadaraya_watson expects queries (n_q,), keys (n_k,), values (n_k,) or (n_k, d); got (2,), (3, 1), (3,)."),
    (torch.zeros(2), torch.zeros(3), torch.zeros(3, 1, 1),
     "nadaraya_watson expects queries (n_q,), keys (n_k,), values (n_k,) or (n_k, d); got (2,), (3,), (3, 1, 1)."),
    (torch.zeros(2), torch.zeros(3), torch.zeros(4, 2), "3 keys but 4 values."),
])
def test_nadaraya_watson_bad_shapes_are_named(q, k, v, message):
    with pytest.raises(ValueError) as err:
        nadaraya_watson(q, k, v)
    assert str(err.value) == message


def test_lengths_to_mask_names_a_bad_shape():
    with pytest.raises(ValueError) as err:
        lengths_to_mask(torch.zeros(2, 3, 4, dtype=torch.long), 5)
    assert str(err.value) == "valid_lens must have shape (B,) or (B, T_q), got (2, 3, 4)."


def test_additive_score_on_unbatched_inputs_and_its_default_is_not_causal():
    torch.manual_seed(0)
    score = AdditiveScore(query_dim=3, key_dim=3, hidden=4)
    q, k, v = torch.randn(2, 3), torch.randn(2, 3), torch.randn(2, 5)  # (T, d): no batch dim
    s = score(q, k)
    assert s.shape == (2, 2)
    hand = score.w_v.weight[0] @ torch.tanh(score.W_q.weight @ q[0] + score.W_k.weight @ k[1])
    assert s[0, 1].item() == pytest.approx(hand.item(), abs=1e-6)
    _, w = score.attend(q, k, v)
    assert w[0, 1] > 0  # query 0 sees key 1: additive attention is not causal unless asked
    _, wc = score.attend(q, k, v, causal=True)
    assert wc[0, 1] == 0


@pytest.mark.parametrize("q, k", [(torch.zeros(2, 3, 3), torch.zeros(3, 3)), (torch.zeros(3), torch.zeros(3))])
def test_additive_score_refuses_mismatched_or_1d_inputs(q, k):
    with pytest.raises(ValueError) as err:
        AdditiveScore(3, 3, 4)(q, k)
    assert str(err.value) == (f"q and k must have the same rank, at least 2, got {tuple(q.shape)} and "
                              f"{tuple(k.shape)}.")




def test_valid_lengths_need_three_dimensional_scores():
    with pytest.raises(ValueError) as err:
        valid_length_softmax(torch.zeros(2, 3), torch.tensor([1, 2]))
    assert str(err.value) == "valid lengths need scores of shape (B, T_q, T_k), got (2, 3)."


def test_additive_attention_masks_keys_only_on_the_textbooks_example():
    """d2l's additive-attention example: keys all equal, so each query's output is the mean of the first
    valid_len value rows; a key mask (valid_lens) must not turn the (single, real) queries into padding."""
    torch.manual_seed(0)
    queries, keys = torch.normal(0, 1, (2, 1, 20)), torch.ones((2, 10, 2))
    values = torch.arange(40, dtype=torch.float32).reshape(1, 10, 4).repeat(2, 1, 1)  # row r: 4r .. 4r + 3
    valid_lens = torch.tensor([2, 6])
    score = AdditiveScore(query_dim=20, key_dim=2, hidden=8)
    out, w = score.attend(queries, keys, values, padding_mask=lengths_to_mask(valid_lens, 10)[:, 0])
    assert out[0, 0].tolist() == pytest.approx([2.0, 3.0, 4.0, 5.0])  # mean of rows 0, 1
    assert out[1, 0].tolist() == pytest.approx([10.0, 11.0, 12.0, 13.0])  # mean of rows 0 .. 5
    assert w[0, 0].tolist() == pytest.approx([0.5] * 2 + [0.0] * 8)
    # a query mask, given apart, zeroes only the padded queries
    out2, _ = score.attend(queries, keys, values, padding_mask=lengths_to_mask(valid_lens, 10)[:, 0],
                           query_mask=torch.tensor([[True], [False]]))
    assert out2[0, 0].tolist() == pytest.approx([2.0, 3.0, 4.0, 5.0]) and out2[1].abs().sum() == 0

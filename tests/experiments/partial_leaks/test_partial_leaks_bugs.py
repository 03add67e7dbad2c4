"""Experiment 3's bugs: each real-world mask slip, plugged into the model, is caught by the project's own leak tests
(the future-perturbation test and the Jacobian test of tests/model/test_gpt.py), which the production path passes.
The finite fill is the exception that makes the point: it passes both tests until the scores outgrow it."""

import pytest
import torch

from helpers import future_jacobian, past_moves_when_future_changes
from tinygpt.experiments.partial_leaks.bugs import AttentionBug, BuggyAttention, visible_keys
from tinygpt.model.attention import CausalSelfAttention, causal_mask
from tinygpt.model.gpt import GPT, GPTConfig

T = 8
FUTURE = torch.ones(T, T, dtype=torch.bool).triu(1)  # (T, T): key j after query t
NEXT = FUTURE & ~torch.ones(T, T, dtype=torch.bool).triu(2)  # (T, T): key t+1 only

BUGS = {  # name -> the AttentionBug that makes it, and the (query, key) pairs it leaks
    "no mask in every layer": (AttentionBug("no_mask"), FUTURE),
    "off by one": (AttentionBug("off_by_one"), NEXT),
    "first layer without mask": (AttentionBug("no_mask", layers=[0]), FUTURE),
    "last layer without mask": (AttentionBug("no_mask", layers=[-1]), FUTURE),
    "sliding window without its causal half": (AttentionBug("sliding_window", window=3), None),
    "finite fill outgrown": (AttentionBug("finite_fill", fill=-1.0), FUTURE),
}


def model(bug=None, double=False):
    torch.manual_seed(0)
    m = GPT(GPTConfig(vocab_size=31, block_size=T, n_layer=2, n_head=2, n_embd=8))
    m = bug(m) if bug is not None else m
    return (m.double() if double else m).eval()


def test_the_masks_are_the_slips_they_are_named_for():
    """Hand-written for T = 4: off by one opens the first diagonal above the main one; a sliding window of 2
    without its causal half opens one key on each side; the fill's mask is the correct causal one."""
    off = visible_keys("off_by_one", 4, 4)
    assert off.int().tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [1, 1, 1, 1], [1, 1, 1, 1]]
    assert torch.equal(off, ~torch.ones(4, 4, dtype=torch.bool).triu(2))  # what triu(diagonal=2) masks
    band = visible_keys("sliding_window", 4, 4, window=2)
    assert band.int().tolist() == [[1, 1, 0, 0], [1, 1, 1, 0], [0, 1, 1, 1], [0, 0, 1, 1]]
    assert torch.equal(visible_keys("finite_fill", 3, 5), causal_mask(3, 5))
    assert visible_keys("no_mask", 4, 4) is None


def test_the_finite_fill_is_added_not_filled():
    """softmax(scores + fill * masked), by hand: scores [0, 1] on a 2-key row whose second key is masked, fill -2:
    weights e^0 : e^(1-2) = 1 : e^-1."""
    attn = BuggyAttention(4, 1, kind="finite_fill", fill=-2.0)
    w = attn.weights_of(torch.tensor([[[[0.0, 1.0], [0.0, 1.0]]]]))  # (1, 1, 2, 2)
    e = torch.exp(torch.tensor(-1.0))
    torch.testing.assert_close(w[0, 0, 0], torch.stack([1 / (1 + e), e / (1 + e)]))
    torch.testing.assert_close(w[0, 0, 1], torch.softmax(torch.tensor([0.0, 1.0]), -1))  # nothing masked in row 2


@pytest.mark.parametrize("name", list(BUGS))
def test_each_bug_is_caught_by_the_perturbation_test(name):
    bug, _ = BUGS[name]
    idx = torch.randint(0, 31, (2, T), generator=torch.Generator().manual_seed(1))
    assert max(past_moves_when_future_changes(model(bug), idx, t) for t in range(T - 1)) > 1e-6
    assert max(past_moves_when_future_changes(model(), idx, t) for t in range(T - 1)) == 0  # production: exactly 0


@pytest.mark.parametrize("name", list(BUGS))
def test_each_bug_is_caught_by_the_jacobian_test_where_it_leaks(name):
    """The Jacobian has non-zero future entries: for the single-pair bugs exactly where the mask is open (through
    two layers an off-by-one mask reaches t+2 as well: layer 1 reads t+1, which layer 0 let read t+2)."""
    bug, leaked = BUGS[name]
    size = future_jacobian(model(bug, double=True), torch.randint(0, 31, (1, T)))  # (T, T)
    assert torch.any(size[FUTURE] > 1e-8)
    if name == "off by one":
        two_ahead = torch.ones(T, T, dtype=torch.bool).triu(1) & ~torch.ones(T, T, dtype=torch.bool).triu(3)
        assert torch.all(size[two_ahead] > 1e-8) and torch.all(size[FUTURE & ~two_ahead] == 0)
    elif leaked is FUTURE:
        assert torch.all(size[FUTURE] > 1e-8)
    clean = future_jacobian(model(double=True), torch.randint(0, 31, (1, T)))
    assert torch.all(clean[FUTURE] == 0)


def test_a_fill_of_minus_1e4_passes_both_tests_until_the_scores_outgrow_it():
    """The real-world fill: at initialisation the scores are tiny, exp(score - 1e4) is 0 and both leak tests pass;
    with the scores 1e7 x larger (spread over tens of thousands, as unscaled attention at a high learning rate
    reaches, experiment 2), the perturbation test catches it."""
    bug = AttentionBug("finite_fill", fill=-1.0e4)
    idx = torch.randint(0, 31, (2, T), generator=torch.Generator().manual_seed(1))
    m = model(bug)
    assert max(past_moves_when_future_changes(m, idx, t) for t in range(T - 1)) == 0
    assert torch.all(future_jacobian(model(bug, double=True), idx[:1])[FUTURE] == 0)
    with torch.no_grad():
        size = max(p["logits"].abs().max().item() for p in m.dissect_attention(idx))
    for block in m.blocks:
        block.attn.scale_factor *= 1e7  # the same attention pattern, logits 1e7 x larger
    assert size * 1e7 > 1e4
    assert max(past_moves_when_future_changes(m, idx, t) for t in range(T - 1)) > 1e-3


def test_the_bug_keeps_the_weights_and_the_models_outputs_on_the_past_the_bug_cannot_reach():
    """Swapping the attention keeps every parameter; with the bug in the last layer only, the first layer's
    output is unchanged, and with no future the buggy model equals the production one (T = 1, and with a cache)."""
    clean, buggy = model(), model(AttentionBug("off_by_one"))
    for (n1, p1), (n2, p2) in zip(clean.state_dict().items(), buggy.state_dict().items(), strict=True):
        assert n1 == n2 and torch.equal(p1, p2)
    assert isinstance(buggy.blocks[0].attn, BuggyAttention) and type(clean.blocks[0].attn) is CausalSelfAttention
    idx = torch.randint(0, 31, (2, T), generator=torch.Generator().manual_seed(2))
    with torch.no_grad():
        torch.testing.assert_close(buggy(idx[:, -1:])[0], clean(idx[:, -1:])[0])  # one token: nothing ahead
        last = model(AttentionBug("no_mask", layers=[-1]))
        assert type(last.blocks[0].attn) is CausalSelfAttention and isinstance(last.blocks[1].attn, BuggyAttention)


def test_bad_bug_settings_are_one_sentence():
    with pytest.raises(ValueError, match="AttentionBug kind='typo' is not one of"):
        AttentionBug("typo")
    with pytest.raises(ValueError, match=r"AttentionBug layers has 5, but the model has 2 layers"):
        AttentionBug("no_mask", layers=[5])(GPT(GPTConfig(vocab_size=31, block_size=T, n_layer=2, n_head=2, n_embd=8)))
    with pytest.raises(ValueError, match="AttentionBug fill=1.0 must be negative"):
        BuggyAttention(8, 2, kind="finite_fill", fill=1.0)


def test_the_replacing_fill_replaces_the_masked_scores():
    """GPT-2's masked_bias, by hand: scores [0, 5] on a 2-key row whose second key is masked, fill -2: the masked
    score becomes -2 whatever it was, weights e^0 : e^-2; with visible scores [-9] below the fill, the masked key
    wins (e^-2 : e^-9): the published bug."""
    attn = BuggyAttention(4, 1, kind="replace_fill", fill=-2.0)
    w = attn.weights_of(torch.tensor([[[[0.0, 5.0], [0.0, 1.0]]]]))  # (1, 1, 2, 2)
    torch.testing.assert_close(w[0, 0, 0], torch.softmax(torch.tensor([0.0, -2.0]), -1))
    torch.testing.assert_close(w[0, 0, 1], torch.softmax(torch.tensor([0.0, 1.0]), -1))  # nothing masked in row 2
    low = attn.weights_of(torch.tensor([[[[-9.0, 3.0], [0.0, 1.0]]]]))
    assert low[0, 0, 0, 1] > 0.99
    with pytest.raises(ValueError, match="must be negative"):
        BuggyAttention(8, 2, kind="replace_fill", fill=1.0)


@pytest.mark.parametrize("kind, window, fill, message", [
    ("typo", 16, -1.0e4, "AttentionBug kind='typo' is not one of no_mask, off_by_one, sliding_window, finite_fill, "
                         "replace_fill."),
    ("sliding_window", 0, -1.0e4, "AttentionBug window=0 must be a positive number of keys."),
    ("finite_fill", 16, 0.0, "AttentionBug fill=0.0 must be negative (the value given to masked scores)."),
    ("replace_fill", 16, 5.0, "AttentionBug fill=5.0 must be negative (the value given to masked scores)."),
])
def test_each_bad_bug_setting_is_its_own_sentence(kind, window, fill, message):
    from tinygpt.experiments.partial_leaks.bugs import check_bug

    with pytest.raises(ValueError) as err:
        check_bug(kind, window, fill)
    assert str(err.value) == message


@pytest.mark.parametrize("kind, window, fill", [("sliding_window", 1, -1.0e4), ("off_by_one", 0, -1.0e4),
                                                ("no_mask", 16, 3.0), ("finite_fill", 0, -1e-9)])
def test_a_setting_only_another_kind_reads_is_not_checked(kind, window, fill):
    from tinygpt.experiments.partial_leaks.bugs import check_bug

    assert check_bug(kind, window, fill) is None

"""tinygpt.verify on attentions whose answer is known: correct ones pass (the project's, torch's, transformers'
GPT-2), and each real or planted bug is caught by the check that should catch it, with the sentence naming where."""

import math

import pytest
import torch
import torch.nn.functional as F

from tests.verify import ours as our
from tests.verify.planted import HFGPT2Attention, Handmade, TorchMHA, attention
from tinygpt import verify
from tinygpt.experiments.partial_leaks.bugs import KINDS, AttentionBug, BuggyAttention
from tinygpt.model.attention import CausalSelfAttention, masked_softmax
from tinygpt.model.config import AttnConfig, GPTConfig
from tinygpt.model.gpt import GPT
from tinygpt.verify import module_checks

HANDMADE = {"padding": "padding_mask", "kv_cache": "step", "max_len": 64}  # 64: past the leak at 32, and quick


def verdicts(factory, **settings) -> dict[str, str]:
    return {r.check: r.verdict for r in verify.run(factory, **settings)}


def failed(factory, **settings) -> dict[str, str]:
    """check -> its sentence, for the checks that failed."""
    return {r.check: r.why for r in verify.run(factory, **settings) if r.verdict == "fail"}


def ours(backend):
    return lambda: CausalSelfAttention(32, 4, AttnConfig(backend=backend))


@pytest.mark.parametrize("factory, settings", [
    (ours("sdpa"), {"padding": "padding_mask", "max_len": 64}),
    (ours("math"), {"padding": "padding_mask", "max_len": 64}),
    (lambda: GPT(GPTConfig(vocab_size=50, block_size=64, n_layer=2, n_head=4, n_embd=32)),
     {"vocab": 50, "max_len": 64}),
    (Handmade, HANDMADE),
    (TorchMHA, {"max_len": 64}),
    pytest.param(HFGPT2Attention, {"max_len": 64}, marks=pytest.mark.slow),  # eager float64: the slowest here
    (lambda: attention, {"max_len": 64}),  # the function level: against the formula itself
    (lambda: lambda q, k, v, m: F.scaled_dot_product_attention(q, k, v, attn_mask=m), {"max_len": 64}),
    (lambda: lambda q, k, v, m: masked_softmax(q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1]), m) @ v,
     {"max_len": 64}),
], ids=["ours-sdpa", "ours-math", "ours-gpt", "handmade", "torch-mha", "hf-gpt2", "formula-fn", "torch-sdpa-fn",
        "ours-masked-softmax-fn"])
def test_correct_attentions_fail_no_check(factory, settings):
    results = verify.run(factory, **settings)
    assert len(results) >= 5 and not [r for r in results if r.verdict == "fail"], results


def test_every_applicable_check_runs_at_each_level():
    assert verify.names(Handmade, **HANDMADE) == ["deterministic", "causality", "sees-itself", "sees-past", "batch",
                                                   "padding", "kv-cache", "gradients", "16-bit"]
    assert verify.names(Handmade) == ["deterministic", "causality", "sees-itself", "sees-past", "batch", "gradients",
                                      "16-bit"]
    assert verify.names(lambda: attention) == ["deterministic", "formula", "causality", "padding", "batch",
                                               "gradients", "16-bit"]


@pytest.mark.parametrize("kind", KINDS)
def test_experiment_3s_bugs_are_leaks_the_causality_check_finds(kind):
    bad = failed(lambda: BuggyAttention(32, 4, AttnConfig(backend="math"), kind=kind, window=4), only=["causality"])
    assert list(bad) == ["causality"] and "position 0 sees position 1" in bad["causality"]


@pytest.mark.parametrize("kind", ["finite_fill", "replace_fill"])
def test_a_finite_fill_is_caught_only_where_scores_outgrow_it(kind, monkeypatch):
    """-1e4 added (BERT's extended mask) or substituted (GPT-2's masked_bias) hides the future at ordinary scores:
    the check finds these two at input scale 1e4, and passes them when it only tries scale 1."""
    make = lambda: BuggyAttention(32, 4, AttnConfig(backend="math"), kind=kind)  # noqa: E731
    assert "(input scale 10000, eval mode)" in failed(make, only=["causality"])["causality"]
    monkeypatch.setattr(module_checks, "SCALES", (1.0,))
    assert verdicts(make, only=["causality"], max_len=64) == {"causality": "pass"}


def test_a_stacked_model_names_the_layer_the_leak_arises_in():
    def gpt():
        model = GPT(GPTConfig(vocab_size=50, block_size=64, n_layer=3, n_head=4, n_embd=32))
        return AttentionBug("off_by_one", [1])(model)
    why = failed(gpt, vocab=50, max_len=64, only=["causality"])["causality"]
    assert why.endswith("position 0 sees position 1; the leak arises in blocks.1.attn."), why


def test_a_leak_past_position_32_is_found_only_at_lengths_past_it():
    why = failed(lambda: Handmade(leak_after=32), **HANDMADE)  # decoding with the cache, causal, differs too
    assert list(why) == ["causality", "kv-cache"] and "at T=34," in why["causality"]  # the first length it shows at
    assert "position 32 sees position 33" in why["causality"]
    assert verdicts(lambda: Handmade(leak_after=32), max_len=32, only=["causality"]) == {"causality": "pass"}


@pytest.mark.parametrize("flags, check, words", [
    ({"softmax_dim": -2}, "causality", "sees"),  # normalising over the queries lets later queries move earlier rows
    ({"hide_diagonal": True}, "sees-itself", "the mask hides the diagonal"),  # off by one the other way
    ({"pad_queries_only": True}, "padding", "a real query sees padded keys"),
    ({"cache_top_left": True}, "kv-cache", "differs from the whole sequence from position 1 on"),
    ({"train_leak": True}, "causality", "(input scale 1, train mode): position 0 sees position 1"),
    ({"cache_window": 16}, "kv-cache", "differs from the whole sequence from position 17 on"),  # 12 tokens missed it
])
def test_each_planted_module_bug_fails_its_check(flags, check, words):
    bad = failed(lambda: Handmade(**flags), **HANDMADE)
    assert check in bad and words in bad[check], bad


def test_a_module_that_maps_each_position_alone_is_not_attention():
    """A Linear or an MLP passes causality, sees-itself, batch and gradients (it is trivially causal); sees-past is
    the check it fails. A window that sees only the previous token passes, and the number says how far it sees."""
    from torch import nn

    bad = failed(lambda: nn.Linear(8, 8), width=8)
    assert list(bad) == ["sees-past"], bad
    assert "Linear does not mix positions" in bad["sees-past"]

    class PreviousToken(nn.Module):  # y_t = x_t + x_{t-1}: causal, mixes exactly one earlier position
        def forward(self, x):
            return x + torch.nn.functional.pad(x, (0, 0, 1, 0))[:, :-1]  # (B, T, C), shifted one step down

    result = verify.run(lambda: PreviousToken(), width=8, only=["sees-past"])[0]
    assert result.verdict == "pass" and result.measured.startswith("position 7 follows position 6 of 0-6 (a window?")
    assert verify.run(Handmade, only=["sees-past"])[0].measured == "position 7 follows positions 0-6 of 0-6"


def test_rows_with_no_visible_key_are_caught_forward_and_backward():
    bad = failed(lambda: Handmade(nan_rows=True), **HANDMADE)
    assert set(bad) == {"padding", "gradients"} and "non-finite output" in bad["padding"]


@pytest.mark.slow  # a whole battery
def test_torchs_multihead_attention_gives_nan_for_a_query_that_sees_only_padding():
    """A finding, not a planted bug: nn.MultiheadAttention with key_padding_mask and a causal attn_mask gives NaN
    where a left-padded query sees no real key (pytorch/pytorch#41508, open)."""
    bad = failed(TorchMHA, padding="padding_mask", max_len=64)
    assert list(bad) == ["padding"] and "non-finite output" in bad["padding"]


@pytest.mark.parametrize("slip, words", [
    ({"dim": -2}, "the softmax over the queries (dim -2) instead of the keys"),
    ({"times": 2}, "the scale applied twice"),
])
def test_the_formula_check_names_the_slip(slip, words):
    bad = failed(lambda: lambda q, k, v, m: attention(q, k, v, m, **slip), only=["formula"])
    assert "formula" in bad and bad["formula"].endswith(f"it equals the formula with {words}."), bad


def test_the_mask_convention_is_the_users_to_state():
    hiding = lambda: lambda q, k, v, m: attention(q, k, v, ~m)  # noqa: E731  True = hidden, as masked_fill(mask, -inf)
    assert verify.run(hiding, mask="hide", only=["formula"])[0].verdict == "pass"
    assert "the mask's meaning inverted" in failed(hiding, only=["formula"])["formula"]


def test_a_function_that_scales_after_the_product_is_named_in_float16():
    late = lambda: lambda q, k, v, m: attention(q, k, v, m, prescale=False)  # noqa: E731
    (r,) = verify.run(late, only=["16-bit"])
    assert r.verdict == "warn" and "q k^T reaches" in r.why and "a scale applied after the product overflows" in r.why
    assert verify.run(late, only=["16-bit"], strict_16bit=True)[0].verdict == "fail"
    assert verify.run(lambda: attention, only=["16-bit"])[0].verdict == "pass"  # the same, scaled first


def test_a_module_that_scales_after_the_product_is_named_in_float16():
    """Watching the scores grow, the check tests float16 where q k^T passes 65504 while the scaled scores do not:
    the same module scaling q first stays finite there. The project's math path is written as the formula reads,
    (q k^T) * scale, and shows the finding; its default fused path does not."""
    (late,) = verify.run(lambda: Handmade(late_scale=True), only=["16-bit"])
    assert late.verdict == "warn" and "q k^T reaches" in late.why and "before its scale" in late.why, late
    (early,) = verify.run(Handmade, only=["16-bit"])
    assert early.verdict == "pass" and "float16 finite at input scale" in early.measured, early
    assert verify.run(ours("math"), only=["16-bit"])[0].verdict == "warn"
    assert verify.run(ours("sdpa"), only=["16-bit"])[0].verdict == "pass"


@pytest.mark.slow  # a whole battery with padding and a cache
def test_the_scale_is_invisible_from_outside_a_module():
    """Scaling twice leaves a module causal, finite and batch-independent: only the function level sees it."""
    assert not failed(lambda: Handmade(scale_twice=True), **HANDMADE)


def test_check_in_a_users_test_raises_with_the_sentence():
    verify.check(Handmade, "causality", max_len=64)
    with pytest.raises(verify.CheckFailed, match=r"causality: at T=2, .* position 0 sees position 1"):
        verify.check(lambda: BuggyAttention(32, 4, AttnConfig(backend="math"), kind="off_by_one"), "causality")


def test_the_checks_are_seeded_and_leave_the_callers_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    first = verify.run(Handmade, seed=1, only=["sees-itself"])[0].measured
    assert torch.equal(torch.rand(3), expected)  # the caller's generator is where it was
    assert verify.run(Handmade, seed=1, only=["sees-itself"])[0].measured == first  # the same seed, the same number
    assert verify.run(Handmade, seed=2, only=["sees-itself"])[0].measured != first


def test_an_exception_inside_a_check_is_that_checks_verdict_and_the_others_run():
    """A float16 copy that raises (a float32 mask added to float16 scores) warns in the 16-bit check, naming the
    error; every other check still reports (the first version stopped the whole battery with exit 2)."""
    results = {r.check: r for r in verify.run(lambda: Handmade(float32_fill=True))}
    assert list(results) == ["deterministic", "causality", "sees-itself", "sees-past", "batch", "gradients",
                             "16-bit"]
    r = results["16-bit"]
    assert r.verdict == "warn" and r.measured == "raised" and "in float16 raised RuntimeError" in r.why, r
    assert verify.run(lambda: Handmade(float32_fill=True), only=["16-bit"], strict_16bit=True)[0].verdict == "fail"

    class OneAtATime(Handmade):
        def step(self, x, cache):
            assert x.shape[1] == 1, "step decodes one token at a time"
            return super().step(x, cache)
    (r,) = verify.run(OneAtATime, kv_cache="step", only=["kv-cache"])
    assert r.verdict == "fail" and "raised AssertionError: step decodes one token at a time" in r.why, r


# ----------------------------------------------------------------------------- model.position: ours, and its bugs

POSITIONED = {"padding": "padding_mask", "max_len": 64}
DECODING = {"vocab": our.VOCAB, "padding": "padding_mask", "kv_cache": "step", "max_len": 30}  # past 5, 2, 3, 16


@pytest.mark.parametrize("position", ["none", "rope", "alibi"])
def test_our_attention_with_each_position_fails_no_check(position):
    declared = {"positions": position} if position in ("rope", "alibi") else {}
    results = verify.run(our.attention(position), **POSITIONED, **declared)
    assert not [r for r in results if r.verdict == "fail"], results
    assert ("distance" in [r.check for r in results]) == bool(declared)


@pytest.mark.parametrize("position", ["learned", "none", "rope", "alibi"])
def test_our_gpt_with_each_position_fails_no_check_cache_and_padding_included(position):
    declared = {"positions": position} if position in ("rope", "alibi") else {}
    results = {r.check: r for r in verify.run(lambda: our.Decoding(position), **DECODING, **declared)}
    assert not [r for r in results.values() if r.verdict == "fail"], results
    assert results["kv-cache"].verdict == "pass" and results["padding"].measured.endswith("a padded sequence = itself "
                                                                                          "alone")


@pytest.mark.slow  # 11 whole batteries, about 30 s: the slow tier (make test-all, CI)
@pytest.mark.parametrize("factory, settings, check, words", [
    (lambda: our.Decoding("rope", attn=our.RopeOffsetForgotten), {**DECODING, "positions": "rope"}, "kv-cache",
     "decoding with the cache (a prefill of 1, then one token at a time) differs from the whole sequence from "
     "position 1 on."),
    (our.attention("rope", bug=our.RopeOffsetForgotten), {"kv_cache": None}, None, None),  # no cache: no bug
    (lambda: our.Decoding("rope", attn=our.RopeOnValues), {**DECODING, "positions": "rope"}, "distance",
     "something absolute enters (RoPE applied to the values? a position table as well?)."),
    (our.attention("rope", bug=our.RopeOnValues), {"positions": "rope"}, "distance", "differs from position 0's"),
    (our.attention("alibi", bug=our.AlibiSlopesNegated), {"positions": "alibi"}, "distance",
     "grows with distance"),
    (our.attention("alibi", bug=our.AlibiAfterFiniteMask), {"positions": "alibi", "max_len": 64}, "causality",
     "(input scale 10000, eval mode)"),
    (lambda: our.Decoding("rope", gpt=our.PositionsRestartEvery4), DECODING, "padding",
     "a sequence whose mask is all real differs from the same sequence without a mask (given a mask, are its "
     "positions counted otherwise, or restarted inside the row?)."),
    (lambda: our.Decoding("alibi", gpt=our.PositionsRestartEvery4), DECODING, "padding", "restarted inside the row"),
    (lambda: our.Decoding("learned", gpt=our.PositionsRestartEvery4), DECODING, "padding", "restarted inside the row"),
    (lambda: our.Decoding("learned", gpt=our.PositionsCountThePads), DECODING, "padding",
     "sequence 0 (left-padded by 4) gives its real tokens other outputs than the same tokens alone: its positions "
     "count the pads, or restart inside it"),
    (lambda: our.Decoding("rope", gpt=our.PositionsCountThePads), DECODING, None, None),  # relative: no bug
], ids=["rope-offset-forgotten", "rope-offset-uncached", "rope-on-v-gpt", "rope-on-v", "alibi-slopes-negated",
        "alibi-after-finite-mask", "rope-restart", "alibi-restart", "learned-restart", "learned-counts-pads",
        "rope-counts-pads"])
def test_each_planted_position_bug_fails_its_check(factory, settings, check, words):
    """Each practitioner's slip with positions fails the check that should catch it, with a sentence naming it
    (and nothing else fails); RoPE's forgotten offset is a bug only where a cache is (unchecked without one)."""
    bad = failed(factory, **settings)
    if check is None:
        assert not bad, bad
        return
    assert list(bad) == [check] and words in bad[check], bad


def test_the_alibi_bias_after_an_infinite_mask_is_the_same_function():
    """-inf + b = -inf: ALiBi's bias after a -inf mask (rather than before, as attention() adds it) changes nothing,
    to float64 rounding; so the bug needs a finite fill, which causality finds where scores outgrow it."""
    attn, after = our.attention("alibi")(), our.attention("alibi", bug=our.AlibiAfterFiniteMask)()
    after.load_state_dict(attn.state_dict())
    after.fill = float("-inf")
    x = torch.randn(2, 9, 32, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    with torch.no_grad():
        torch.testing.assert_close(after.double()(x), attn.double()(x), rtol=0, atol=1e-12)


def test_our_alibi_formula_is_the_papers_and_reversed_slopes_are_named():
    """At the function level, positions=alibi: the formula with the paper's bias, slopes 2^(-8h/H); ours passes, and
    the slopes in reversed head order (invisible from outside a module: a relabelling of its heads) are named."""
    assert verify.run(lambda: our.alibi_function(), ["formula"], positions="alibi")[0].verdict == "pass"
    assert verify.run(lambda: our.alibi_function(), ["formula"])[0].verdict == "fail"  # the plain formula: not it
    bad = failed(lambda: our.alibi_function(reverse=True), only=["formula"], positions="alibi")
    assert bad["formula"].endswith("it equals the formula with ALiBi's slopes in reversed head order."), bad
    r = verify.run(lambda: attention, ["formula"], positions="alibi")[0]  # no bias at all
    assert r.verdict == "fail" and r.why.endswith("it equals the formula with no ALiBi bias."), r

"""Issue 56's peer battery as known answers: local copies of the patterns practitioners' attentions use (a softmax
in float32, inputs changed in place, windows, soft caps, tiled kernels) must fail no check, and the bugs the first
version let through (a fixed scale, a tiled kernel without its rescale, a square mask or is_causal with a cache,
a leak at one length, a leak on the 16-bit path, dropout left on in eval) fail the check that should catch each,
with a sentence that names it."""

import contextlib
import io
import re
from pathlib import Path

import pytest

from tests.verify import peers
from tests.verify.planted import Handmade
from tinygpt import verify

QUICK = {"max_len": 24}  # past every length listed below and quick; the formula check goes to T=128 on its own
ROOT = Path(__file__).resolve().parents[2]
CACHED = {"padding": "padding_mask", "kv_cache": "step", "max_len": 30}  # 30: past the steps 5, 2, 3, 16


def failed(factory, **settings) -> dict[str, str]:
    """check -> its sentence, for the checks that failed."""
    return {r.check: r.why for r in verify.run(factory, **settings) if r.verdict == "fail"}


def result(factory, check: str, **settings):
    (r,) = verify.run(factory, [check], **settings)
    return r


@pytest.mark.parametrize("factory, settings", [
    (lambda: peers.llama_softmax, QUICK),  # float32 softmax, the dtype's lowest value as the fill
    (lambda: peers.llama_idiom, QUICK),  # softmax(x.float()).type_as(x)
    (lambda: peers.scales_in_place, QUICK),  # q.mul_(scale)
    (lambda: peers.tiled, QUICK),  # a flash-style kernel, its rescale right
    (peers.PositionInPlace, QUICK),  # x += pos
    (peers.Float32Softmax, CACHED),  # x-transformers' float32 softmax with a cache and padding
], ids=["llama-softmax-fn", "llama-idiom-fn", "in-place-fn", "tiled-fn", "in-place-module", "float32-softmax"])
def test_correct_peers_fail_no_check(factory, settings):
    results = verify.run(factory, **settings)
    assert not [r for r in results if r.verdict == "fail"], results


def test_a_float32_softmax_is_judged_in_float32_and_says_so():
    """Given float64, these compute in float32: checked in float32 (where their fill is float32's), the tolerance
    named in the number."""
    kv = result(peers.Float32Softmax, "kv-cache", **CACHED)
    assert kv.verdict == "pass" and "float32, the precision it computes in (tolerance 1e-05)" in kv.measured, kv
    formula = result(lambda: peers.llama_idiom, "formula")
    assert formula.verdict == "pass" and "float32" in formula.measured, formula
    assert "float64" in result(Handmade, "batch").measured


@pytest.mark.parametrize("factory, check, words", [
    (lambda: peers.fixed_scale, "formula", "at T=128, head size 64; it equals the formula with a fixed scale 1/4"),
    (lambda: lambda q, k, v, m: peers.tiled(q, k, v, m, rescale=False), "formula", "at T=128"),
    (lambda: peers.assumes_causal, "formula", "under the random mask"),  # the random mask is what finds it
    (lambda: peers.mixes_next_sequence, "batch", "sequences are mixed"),  # sequence 1 moves sequence 2 only
])
def test_function_bugs_fail_their_check(factory, check, words):
    r = result(factory, check, **QUICK)
    assert r.verdict == "fail" and words in r.why, r


@pytest.mark.parametrize("factory, words", [
    (lambda: peers.sliding_window, "a sliding window (each query's last 4, itself included"),
    (lambda: peers.soft_capped, "the scores soft-capped at 50"),
])
def test_the_formula_does_not_apply_to_a_variant_and_padding_compares_it_with_itself(factory, words):
    results = {r.check: r for r in verify.run(factory, **QUICK)}
    assert results["formula"].verdict == "n/a" and words in results["formula"].why, results["formula"]
    assert results["padding"].verdict == "pass" and "the function on the unpadded" in results["padding"].measured
    assert not [r for r in results.values() if r.verdict == "fail"], results


def test_a_function_declared_with_its_window_is_held_to_the_formula_with_it():
    """--window W on a function: the formula with each query's last W keys is the reference (formula and padding
    pass); a window of W + 1 keys (transformers#39408's slip) fails the formula check, which names both windows."""
    results = {r.check: r for r in verify.run(lambda: peers.sliding_window, window=4, **QUICK)}
    assert results["formula"].verdict == "pass" and "each query's last 4 keys" in results["formula"].measured
    assert results["padding"].verdict == "pass" and "real rows = the formula" in results["padding"].measured
    assert not [r for r in results.values() if r.verdict != "pass"], results
    wider = result(lambda: lambda q, k, v, m: peers.sliding_window(q, k, v, m, w=5), "formula", window=4)
    assert wider.verdict == "fail", wider
    assert "with each query's last 4 keys (the declared window" in wider.why, wider.why
    assert "it is a sliding window (each query's last 5, itself included)" in wider.why, wider.why
    plain = result(lambda: peers.llama_softmax, "formula", window=4)  # no window at all: fails, names no variant
    assert plain.verdict == "fail" and "it is" not in plain.why, plain.why
    undeclared = result(lambda: peers.sliding_window, "formula")  # the n/a sentence points to the option
    assert undeclared.verdict == "n/a" and "--window W declares it" in undeclared.why, undeclared.why


@pytest.mark.parametrize("factory, words", [
    (peers.SquareMaskCache, "raised"),  # meta-llama/llama#899: (T_new, T_new) against T_k keys
    (peers.CausalFlagCache, "(the step of 2 tokens at positions 5-6)"),  # pytorch/executorch#21749
])
def test_a_multi_token_step_after_a_prefill_is_checked(factory, words):
    r = result(factory, "kv-cache", kv_cache="step", max_len=30)
    assert r.verdict == "fail" and words in r.why and "a prefill of 5, then steps of 2, 3 and 16" in r.why, r


def test_a_leak_at_one_length_alone_is_found():
    """Every length up to 64 is tried (the first version tried 2, 8, 33, 64 and the longest), and the longest."""
    at_23 = failed(lambda: peers.LeaksAtLength(leaks=lambda t: t == 23), only=["causality"], **QUICK)
    assert "at T=23," in at_23["causality"] and "position 0 sees position 1" in at_23["causality"], at_23
    longest = failed(lambda: peers.LeaksAtLength(leaks=lambda t: t == 30), only=["causality"], max_len=30)
    assert "at T=30," in longest["causality"] and "(input scale 1, eval mode)" in longest["causality"], longest
    # the longest length is among those the eval-mode sweep tries (the train-mode pass alone would find it too)


def test_the_longest_length_is_tried_past_every_length_up_to_64():
    """Past 64 the lengths are drawn at random; the longest is always among them."""
    longest = failed(lambda: peers.LeaksAtLength(leaks=lambda t: t == 80), only=["causality"], max_len=80)
    assert "at T=80," in longest["causality"] and "(input scale 1, eval mode)" in longest["causality"], longest


@pytest.mark.slow  # up to T=128
def test_a_leak_at_lengths_past_64_is_found_at_random_lengths():
    leaky = lambda: peers.LeaksAtLength(leaks=lambda t: t > 64 and t % 64)  # noqa: E731  not at 64 or 128
    assert "causality" in failed(leaky, only=["causality"], max_len=128)


def test_dropout_left_on_in_eval_is_named_as_randomness_not_a_leak():
    results = {r.check: r for r in verify.run(peers.DropoutInEval, ["deterministic", "causality", "batch"], **QUICK)}
    assert results["deterministic"].verdict == "fail" and "random in eval mode" in results["deterministic"].why
    assert results["causality"].verdict == "pass" and results["batch"].verdict == "pass", results


def test_a_leak_on_the_16_bit_path_is_a_leak():
    r = result(peers.LeaksIn16Bit, "causality", **QUICK)
    assert r.verdict == "fail" and "in float16, eval mode" in r.why and "position 0 sees position 1" in r.why, r


def test_a_module_that_mixes_the_next_sequence_fails_batch():
    r = result(peers.MixesNextSequence, "batch", **QUICK)
    assert r.verdict == "fail" and "sequences are mixed" in r.why, r


def test_a_padding_mask_read_as_true_is_padding_is_named():
    r = result(peers.PadTrue, "padding", padding="padding_mask", max_len=12)
    assert r.verdict == "fail" and "reads True as padding (torch's key_padding_mask convention)" in r.why, r


@pytest.mark.parametrize("factory, verdict, words", [
    (lambda: peers.SlidingWindow(w=4), "pass", "follows positions 2-4 of 0-4: its window of 4 keys, itself included"),
    (lambda: peers.SlidingWindow(w=4, slip=True), "fail",  # transformers#39408: flash-attn's (W, 0) is W + 1 keys
     "sees 5 keys, itself included, back to position 1: one more than the window of 4 (positions 2-5), the slip of "
     "transformers#39408"),
    (lambda: peers.SlidingWindow(w=3), "fail", "does not follow position 2, inside the window of 4 keys"),
    (Handmade, "fail", "sees 6 keys, itself included, back to position 0: more than the window of 4"),
])
def test_a_declared_window_is_the_receptive_field_sees_past_measures(factory, verdict, words):
    r = result(factory, "sees-past", window=4)
    assert r.verdict == verdict and words in (r.why or r.measured), r


def test_a_window_past_64_keys_is_measured_at_its_edges():
    """Past 64 keys sees-past changes the two positions just outside the window, its 8 oldest and newest and 8
    between: the slip of one key still shows."""
    r = result(lambda: peers.SlidingWindow(w=70, slip=True), "sees-past", window=70, max_len=8)
    assert r.verdict == "fail" and "sees 71 keys" in r.why, r
    assert result(lambda: peers.SlidingWindow(w=70), "sees-past", window=70, max_len=8).verdict == "pass"


@pytest.mark.parametrize("factory, positions, verdict, words", [
    (peers.Alibi, "alibi", "pass", "falling at every step (ALiBi: nearer keys weigh more)"),
    (lambda: peers.Alibi(sign=-1.0), "alibi", "fail", "grows with distance (the key 15 away weighs 2.4 times the "
                                                     "nearest earlier one): ALiBi's bias, -slope * distance, favours "
                                                     "nearer keys; slopes of the wrong sign?"),
    (Handmade, "alibi", "fail", "do not fall with distance"),  # no bias at all: every key weighs the same
    (peers.Alibi, "rope", "pass", "the same token everywhere gives the same output everywhere (relative error"),
    (peers.Alibi, "rope", "pass", "RoPE's weights depend on q and k as well as on their distance"),
])
def test_relative_positions_weigh_keys_by_distance_as_declared(factory, positions, verdict, words):
    r = result(factory, "distance", positions=positions)
    assert r.verdict == verdict and words in (r.why or r.measured), r


def test_the_distance_check_runs_only_where_positions_are_declared():
    assert "distance" not in verify.names(peers.Alibi)
    assert verify.names(peers.Alibi, positions="alibi")[3:5] == ["sees-past", "distance"]


def test_a_strictly_causal_design_with_a_learned_null_key_sees_itself_passes():
    """Query i sees keys j < i and a learned null key: position 0 ignores its own token by design; position 1
    follows its own (through its query). A hidden diagonal with nothing besides fails (test_known_answers)."""
    r = result(peers.NullKey, "sees-itself")
    assert r.verdict == "pass" and "strictly causal" in r.measured, r


@pytest.mark.parametrize("factory", [peers.QKNorm, peers.SoftClamp], ids=["qk-norm", "softclamp"])
def test_bounded_scores_give_no_16_bit_warning(factory):
    """The first version grew the input until it overflowed float16 by itself (scale 8.8e5), the scores bounded by
    the norm or the cap all along: a warning about nothing. Scores that stop growing stop the input growing."""
    r = result(factory, "16-bit")
    assert r.verdict == "pass" and "the scores stop growing with the input" in r.measured, r


@pytest.mark.parametrize("flags, position", [
    ({}, 2),  # the keys cached rotated: each later step rotates them again (its defaults: rotary, exact window)
    ({"rotary": False, "exact_windowsize": False}, 7),  # the cut -(W + len % W): the last query of each block
    ({"rotary": False, "qk_rmsnorm": True}, 1),  # the cached step's scale 1/sqrt(d), not qk_rmsnorm's 8
])
def test_local_attentions_localmha_cache_bugs_are_found(flags, position):
    """local-attention 1.11.2's LocalMHA cache, as a local copy of its pattern (the package's own test takes one
    cached step after a prefill of 1,000: none of these shows there)."""
    r = result(lambda: peers.LocalMHA(**flags), "kv-cache", kv_cache="step", max_len=40)
    assert r.verdict == "fail" and f"(a prefill of 1, then one token at a time) differs from the whole sequence " \
                                   f"from position {position} on" in r.why, r


def test_local_attentions_localmha_cache_without_those_paths_passes():
    r = result(lambda: peers.LocalMHA(rotary=False), "kv-cache", kv_cache="step", max_len=40)
    assert r.verdict == "pass", r


def test_the_verify_pages_cache_snippet_prints_what_it_says():
    """docs/verify.md's reproduction of LocalMHA's first cache bug runs as written and prints its comment."""
    code = re.search(r"```python\n(.*?)```", (ROOT / "docs" / "verify.md").read_text(), re.S).group(1)
    expected = " ".join(line.removeprefix("# ") for line in code.splitlines() if line.startswith("# "))
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/verify.md", "exec"), {"__name__": "snippet"})
    assert out.getvalue().strip() == expected

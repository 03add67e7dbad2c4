"""Logit size at init against d_k: Vaswani's sqrt(d_k) argument, measured on the real model."""

import math

import pytest

from tinygpt.analysis.init_stats import logits_at_init, slopes
from tinygpt.analysis.stats import loglog_slope


@pytest.fixture(scope="module")
def rows():
    return logits_at_init(n_embd=256, head_dims=(8, 16, 32, 64, 128, 256), windows=4)


def test_loglog_slope_of_a_power_law():
    assert loglog_slope([1, 2, 4, 8], [3 * x**0.5 for x in [1, 2, 4, 8]]) == pytest.approx(0.5)


def test_unit_variance_init_gives_the_textbook_slopes(rows):
    s = slopes(rows)
    assert s[("unit", "none")] == pytest.approx(0.5, abs=0.08)  # unscaled logits grow like sqrt(d_k)
    assert s[("unit", "sqrt_dk")] == pytest.approx(0.0, abs=0.08)  # 1/sqrt(d_k) keeps them flat
    assert s[("unit", "inv_dk")] == pytest.approx(-0.5, abs=0.08)  # 1/d_k shrinks them


def test_unit_init_logit_std_is_about_one_with_the_scale(rows):
    for r in rows:
        if r["init"] == "unit" and r["scale"] == "sqrt_dk":
            assert 0.7 < r["logit_std"] < 1.3, r
        if r["init"] == "unit" and r["scale"] == "none":
            assert r["logit_std"] == pytest.approx(math.sqrt(r["d_k"]), rel=0.3), r


def test_gpt2_init_logits_are_small_so_attention_starts_uniform(rows):
    """GPT-2's std 0.02: q, k components have variance 0.02^2 * C ~ 0.1, so even unscaled logits are small."""
    s = slopes(rows)
    assert s[("gpt2", "none")] == pytest.approx(0.5, abs=0.08)  # the same exponent, a smaller constant
    for r in rows:
        if r["init"] == "gpt2" and r["scale"] == "sqrt_dk":
            assert r["logit_std"] < 0.15 and r["entropy"] > 0.99, r


def test_unscaled_unit_init_saturates_the_softmax_at_large_d_k(rows):
    ent = {(r["init"], r["scale"], r["d_k"]): r["entropy"] for r in rows}
    assert ent[("unit", "none", 256)] < 0.2 < 0.8 < ent[("unit", "sqrt_dk", 256)]  # near one-hot vs spread
    assert ent[("unit", "none", 256)] < ent[("unit", "none", 8)]  # saturation grows with d_k

"""The reports' prose templates: named blocks read from the .md beside the code, placeholders filled."""

import pytest

from tinygpt.analysis.templates import blocks, prose


@pytest.mark.parametrize("experiment, names", [("causal_mask", {"intro", "terms", "literature"}),
                                               ("sqrt_dk", {"intro", "terms"})])
def test_each_experiment_has_its_blocks(experiment, names):
    assert set(blocks(experiment)) == names
    assert all(body.strip() and not body.endswith("\n") for body in blocks(experiment).values())


def test_placeholders_are_filled_and_a_missing_one_is_named():
    text = prose("causal_mask", "intro", n_runs=7, sweeps="`multirun/x`")
    assert text.startswith("# Experiment 1: what the causal mask prevents\n")
    assert "(7 runs; sweep dirs: `multirun/x`)" in text and "{" not in text
    with pytest.raises(KeyError, match="n_runs"):
        prose("sqrt_dk", "intro", sweeps="`s`")


def test_doubled_braces_stay_literal():
    assert "{" not in prose("causal_mask", "literature")  # no placeholder there: any brace would be a typo

"""The reports' prose templates: named blocks read from the .md beside the code, placeholders filled."""

import re

import pytest

from tinygpt.analysis.templates import blocks, prose
from tinygpt.experiments.registry import experiments


@pytest.mark.parametrize("experiment, names", [
    ("causal_mask", {"intro", "terms", "changes", "history", "literature", "threats"}),
    ("sqrt_dk", {"intro", "setup", "terms", "answer", "described", "fp16_missing", "stage2_ran", "threats",
                 "literature", "changes", "fp16_setup", "replay_intro", "replay_reading", "described_steps", "bigram",
                 "bars", "bands", "draws", "draws_change", "draws_missing", "f1_cross_check", "f1_cross_check_differs",
                 "f1_intro", "f1_reading", "seed_outcomes", "seed_outcomes_none", "stability", "f3_intro",
                 "f3_reading"}),
    ("partial_leaks", {"intro", "terms", "changes", "seen", "fill_seen", "onset", "onset_why_earlier", "onset_why_same",
                       "onset_why_later", "onset_shapes_seen", "onset_shapes_other", "alarm", "fill", "fill_misses",
                       "fill_closing", "literature", "limits", "replace", "threats", "probe_blind",
                       "probe_blind_replace"}),
])
def test_each_experiment_has_its_blocks(experiment, names):
    assert set(blocks(experiment)) == names
    assert all(body.strip() and not body.endswith("\n") for body in blocks(experiment).values())


def test_placeholders_are_filled_and_a_missing_one_is_named():
    text = prose("causal_mask", "intro", n_runs="7 runs", sweeps="`multirun/x`", lo=0.5, hi=2)
    assert text.startswith("# Experiment 1: what the causal mask prevents\n")
    assert "(7 runs; sweep dirs: `multirun/x`)" in text and "{" not in text
    assert "between 0.5 and 2 at every" in text
    with pytest.raises(KeyError, match="n_runs"):
        prose("sqrt_dk", "intro", sweeps="`s`")


def test_doubled_braces_stay_literal():
    assert "{" not in prose("causal_mask", "literature")  # no placeholder there: any brace would be a typo


# the formula's own symbols and the names of things: not measurements
SYMBOLS = re.compile(r"Experiment \d|et al\. \d{4}|1/sqrt\(d_k\)|1/d_k|1/T|x\[t\+1\]|x\[:t\+1\]|T-1|t\+1"
                     r"|\b[01] = (uniform|one-hot)|excludes 0|above 0|below 0|contains 0|\(0 for|\{\w+(:[^}]*)?\}"
                     # names, not measurements: issue numbers, an enumeration, code, dtypes, zero as a concept
                     r"|issues? \d+(?: and \d+)?|\(\d\)|triu\(diagonal=\d\)|i\+1|float32|\b(?:fp|bf)(?:16|32)\b"
                     r"|exactly 0|[Pp]redictions? \d(?: and \d)?|GPT-2|Gemma 2|PR \d+|commit [0-9a-f]{7}"
                     # Experiment 2's names: its predictions P1..P7, dtypes and precision settings, log10, its stage 2
                     r"|\bP\d\b|\b(?:b?[Ff]loat)(?:16|32)\b|\b16-(?:mixed|bit)\b|sqrt_dk_fp16|log10|[Ss]tage[- ]2"
                     r"|layer 0|ViT-22B|across 0"
                     # design 2's: its designs and predictions M1 ... F2, its sweeps, the paper's section and footnote
                     r"|\(1 - p_j\)|1 - 1/n|\b[01] for a (?:uniform|one-hot)|[Dd]esign \d|\b[MCGRF]\d\b|sqrt_dk_fp32"
                     r"|section \d(?:\.\d)+|footnote \d|AVX512-FP16|[Aa]mendments? \d(?:, \d)*(?: and \d)?"
                     # counting conventions and a ratio's definition, not measurements
                     r"|numbered from 0|0-based|means minus 1"
                     r"|allow_fp16_reduced_precision_reduction"
                     # Experiment 4's symbols: the prefix a causal query averages, the probe's score, the buckets
                     r"|\(t \+ 1\)(?:\^2)?|t \+ 1|s2\([t0]\)|j, k <= t|R\^2|1 - SSE / SST|T/2|T - 1|\(1 \+ t q\)"
                     # design 3's: the argument's factor, its predictions Q1 and S1-S3, the rounding's variance, S seeds
                     r"|d_k\^\(1/4\)|\b[QS]\d\b|designs \d and \d|\(step\^2 / 12\)|S - 1|\b1 uniform, 0 one-hot"
                     r"|width 0")


@pytest.mark.parametrize("experiment", experiments())
def test_the_report_prose_has_no_typed_numbers(experiment):
    """Every number a report states comes from the runs or the config through a placeholder; the literature
    block, which cites published figures, is the only exception."""
    for name, body in blocks(experiment).items():
        if name == "literature":
            continue
        left = SYMBOLS.sub("", body)
        assert not re.search(r"\d", left), (name, re.findall(r".{20}\d.{20}", left))

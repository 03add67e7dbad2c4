"""The sweep reader's helpers (tinygpt.analysis.sweep)."""

import pytest


def test_the_honest_gap_step_is_the_first_validation_the_alarm_rule_passes():
    """Gaps 0.01, 0.2, 0.5 with standard errors 0.1: the rule (above 3 SE and above 0.05 nats) first passes at the
    third validation; 0.2 is above 0.05 but not above 3 SE."""
    from tinygpt.analysis.sweep import Run, honest_gap_step
    cfg = {"callbacks": {"leak_alarm": {"z": 3.0, "min_gap": 0.05}}}
    run = Run(dir=None, summary={"config": cfg},
              history={"leak/honest_gap": ([100, 200, 300], [0.01, 0.2, 0.5]),
                       "leak/honest_gap_se": ([100, 200, 300], [0.1, 0.1, 0.1])})
    assert honest_gap_step(run) == 300
    run.history["leak/honest_gap"] = ([100, 200, 300], [0.01, 0.2, 0.25])
    assert honest_gap_step(run) is None


OLD_FORMS = [  # summary.json's config as runs made before the corpus group wrote it -> today's data and corpus
    ({"source": "shakespeare", "batch_size": 12, "corpus": {"_target_": "tinygpt.data.corpus.Shakespeare"}},
     {"batch_size": 12}, {"_target_": "tinygpt.data.corpus.Shakespeare"}),
    ({"source": "text_file", "path": ["a.txt"], "tokenizer": "bpe", "vocab_size": 300, "seed": 3},
     {"tokenizer": "bpe", "bpe_vocab_size": 300, "seed": 3}, {"_target_": "tinygpt.data.corpus.TextFile",
                                                             "path": ["a.txt"]}),
    ({"source": "random_tokens", "vocab_size": 64, "n_tokens": 5000, "seed": 7, "batch_size": 12},
     {"seed": 7, "batch_size": 12}, {"_target_": "tinygpt.data.corpus.RandomTokens", "vocab_size": 64,
                                     "n_tokens": 5000, "seed": 7}),
    ({"source": "hf_hub", "name": "some/set", "config": None, "split": "train", "text_column": "text"},
     {}, {"_target_": "tinygpt.data.corpus.HfHub", "name": "some/set", "config": None, "split": "train",
          "text_column": "text"}),
]


@pytest.mark.parametrize("old, data, corpus", OLD_FORMS, ids=[o[0]["source"] for o in OLD_FORMS])
def test_a_run_written_before_the_corpus_group_reads_in_todays_form(old, data, corpus):
    """Each old form is read as the corpus node and data keys today's runs write; that node builds the same corpus
    (and today's form is left as it is)."""
    from hydra.utils import instantiate

    from tinygpt.analysis.sweep import corpus_source, current_summary

    read = current_summary({"status": "completed", "config": {"seed": 1, "data": old}})
    assert read["config"]["data"] == data and read["config"]["corpus"] == corpus and read["config"]["seed"] == 1
    assert corpus_source(read["config"]) == old["source"]
    if old["source"] in ("shakespeare", "random_tokens"):
        assert instantiate(corpus).source == old["source"]
    assert current_summary(read) == read

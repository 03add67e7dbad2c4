"""scripts/migrate_run.py: a run written by an earlier version (data.source, an attention_bug, the old name of the
honest loss) is rewritten in today's names, in place, once; its checkpoint then loads with its bug, and the reports
read it as they read today's runs."""

import csv
import json

import pytest
import yaml

from helpers import write_checkpoint
from tinygpt.cli.migrate_run import current_names, current_summary, main
from tinygpt.analysis.sweep import ReportError, Run, load_runs
from tinygpt.runtime.errors import ConfigError

BUG = {"_target_": "tinygpt.experiments.leaky_masks.AttentionBug", "kind": "off_by_one", "layers": [1]}
OLD_CONFIG = {"seed": 1, "attention_bug": BUG,
              "model": {"n_layer": 2, "attn": {"causal": True}},
              "data": {"source": "text_file", "path": ["a.txt"], "batch_size": 12, "vocab_size": 300,
                       "tokenizer": "bpe", "corpus": {"_target_": "tinygpt.data.corpus.TextFile", "path": ["a.txt"]}}}
TODAY = {"seed": 1, "model": {"n_layer": 2, "attn": {"causal": True}, "patch": [
             {**BUG, "_target_": "tinygpt.experiments.partial_leaks.bugs.AttentionBug"}]},
         "data": {"batch_size": 12, "bpe_vocab_size": 300, "tokenizer": "bpe"},
         "corpus": {"_target_": "tinygpt.data.corpus.TextFile", "path": ["a.txt"]}}


def old_run(root):
    run = root / "sweep" / "0"
    (run / "history").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"status": "completed", "val_loss_autoregressive": 2.5,
                                                  "config": OLD_CONFIG}))
    (run / "config.yaml").write_text(yaml.safe_dump(OLD_CONFIG))
    (run / "history" / "metrics.csv").write_text("step,train/loss,val/loss_autoregressive\r\n0,4.1,\r\n1,3.9,3.8\r\n")
    write_checkpoint(run / "checkpoints" / "last.ckpt", model={"n_layer": 2}, extra={"attention_bug": BUG})
    return run


def test_an_old_run_is_rewritten_in_todays_names_and_its_checkpoint_loads_with_its_bug(tmp_path, capsys):
    from tinygpt.experiments.partial_leaks.bugs import BuggyAttention
    from tinygpt.train.module import load_trained

    run = old_run(tmp_path)
    with pytest.raises(ConfigError, match=r"earlier tinygpt: it names attention_bug \(today model.patch\)\. .*"
                                          r"`python scripts/migrate_run.py .*sweep/0`"):
        load_trained(run)
    with pytest.raises(ReportError, match=r"earlier tinygpt: it names val_loss_autoregressive \(today val_loss_honest"):
        load_runs([tmp_path / "sweep"])  # the reports read one spelling: an old run is refused, naming the script
    assert main([str(tmp_path / "sweep")]) == 0
    assert capsys.readouterr().out.strip() == "migrate_run: 4 files rewritten in 1 run dirs"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["config"] == TODAY and summary["val_loss_honest"] == 2.5 and "val_loss_autoregressive" not in summary
    assert yaml.safe_load((run / "config.yaml").read_text()) == TODAY
    with open(run / "history" / "metrics.csv", newline="") as f:
        assert list(csv.reader(f)) == [["step", "train/loss", "val/loss_honest"], ["0", "4.1", ""], ["1", "3.9", "3.8"]]
    model, _, step = load_trained(run)
    assert step == 60 and [isinstance(b.attn, BuggyAttention) for b in model.blocks] == [False, True]
    assert load_runs([tmp_path / "sweep"])[0].summary["val_loss_honest"] == 2.5
    assert main([str(tmp_path / "sweep")]) == 0  # a second time: nothing left to rewrite
    assert capsys.readouterr().out.strip() == "migrate_run: 0 files rewritten in 1 run dirs"


def test_a_path_that_is_not_a_directory_is_one_line(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.strip() == f"error: migrate_run: {tmp_path / 'nowhere'} is not a directory; give " \
                                              "run or sweep dirs."


def test_a_checkpoint_patch_outside_tinygpt_is_never_built(tmp_path):
    """weights_only loading keeps a file from running code; a patch's _target_ would undo that: only tinygpt's
    classes, without Hydra's _args_ and the like, are built from a checkpoint."""
    from tinygpt.train.module import load_trained

    for node in ({"_target_": "builtins.eval", "_args_": ["1"]}, {"_target_": "os.system"},
                 {"_target_": "tinygpt.experiments.partial_leaks.bugs.AttentionBug", "_args_": ["off_by_one"]}):
        path = write_checkpoint(tmp_path / "ckpt.ckpt", model={"patch": [node]})
        with pytest.raises(ConfigError, match="is not a class of tinygpt's"):
            load_trained(path)


def test_old_names_read_as_todays_at_any_depth_and_under_diag():
    old = {"val_loss_autoregressive": 2.0, "diag/autoregressive_at": 3, "x": [{"autoregressive_loss": {"windows": 4}}]}
    assert current_names(old) == {"val_loss_honest": 2.0, "diag/honest_at": 3, "x": [{"honest_loss": {"windows": 4}}]}
    both = {"val/loss_autoregressive": ([1], [9.0]), "val/loss_honest": ([2], [1.0])}  # today's name keeps its own
    assert current_names(both) == {"val/loss_honest": ([2], [1.0])}


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

    from tinygpt.analysis.sweep import corpus_source

    read = current_summary({"status": "completed", "config": {"seed": 1, "data": old}})
    assert read["config"]["data"] == data and read["config"]["corpus"] == corpus and read["config"]["seed"] == 1
    assert corpus_source(read["config"]) == old["source"]
    if old["source"] in ("shakespeare", "random_tokens"):
        assert instantiate(corpus).source == old["source"]
    assert current_summary(read) == read


def test_every_reader_of_runs_refuses_an_old_one_until_it_is_migrated(tmp_path):
    """Resuming it, auditing its alarm, and reading its per-window diagnostics each name the script; after the
    script they read it."""
    import numpy as np

    from tinygpt.analysis.alarm_audit import read_summary
    from tinygpt.runtime import checkpoint

    run = old_run(tmp_path)
    ckpt_path = run / "checkpoints" / "last.ckpt"
    with pytest.raises(ConfigError, match=r"it names attention_bug .*migrate_run.py .*sweep/0`"):
        checkpoint.check_resume_names(checkpoint.load(ckpt_path), ckpt_path)
    with pytest.raises(ConfigError, match=r"it names val_loss_autoregressive .*migrate_run.py"):
        read_summary(run / "summary.json")
    np.savez(run / "diagnostics.npz", autoregressive_window_position=np.ones((2, 3)))
    with pytest.raises(ReportError, match=r"diagnostics.npz was written by an earlier tinygpt: it names "
                                          r"autoregressive_window_position \(today honest_window_position\)"):
        Run(run, {}).windows("honest_window_position")
    assert main([str(run)]) == 0
    assert load_runs([run])[0].windows("honest_window_position").tolist() == [[1.0] * 3] * 2
    checkpoint.check_resume_names(checkpoint.load(ckpt_path), ckpt_path)
    assert read_summary(run / "summary.json")["val_loss_honest"] == 2.5

"""scripts/migrate_run.py: a run written by an earlier version (data.source, an attention_bug, the old name of the
honest loss) is rewritten in today's names, in place, once; its checkpoint then loads with its bug, and the reports
read it as they read today's runs."""

import csv
import json

import pytest
import yaml

from helpers import write_checkpoint
from tinygpt.cli.migrate_run import main
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
    with pytest.raises(ConfigError, match=r"was written with attention_bug, .* python scripts/migrate_run.py"):
        load_trained(run)
    assert main([str(tmp_path / "sweep")]) == 0
    assert capsys.readouterr().out.strip() == "migrate_run: 4 files rewritten in 1 run dirs"
    summary = json.loads((run / "summary.json").read_text())
    assert summary["config"] == TODAY and summary["val_loss_honest"] == 2.5 and "val_loss_autoregressive" not in summary
    assert yaml.safe_load((run / "config.yaml").read_text()) == TODAY
    with open(run / "history" / "metrics.csv", newline="") as f:
        assert list(csv.reader(f)) == [["step", "train/loss", "val/loss_honest"], ["0", "4.1", ""], ["1", "3.9", "3.8"]]
    model, _, step = load_trained(run)
    assert step == 60 and [isinstance(b.attn, BuggyAttention) for b in model.blocks] == [False, True]
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

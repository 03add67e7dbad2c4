"""train.py as the shell sees it: one-line errors with exit status 2, quiet normal runs."""

import re
from pathlib import Path

import pytest

from helpers import TINY, run_train

PY_WARNING = re.compile(r"\.py:\d+: \w*(Warning|Deprecat)|warnings\.warn|UserWarning|DeprecationWarning")


def tiny(out, corpus_file, cache_dir, *extra):
    return [*TINY, "corpus=text_file", f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}",
            f"hydra.run.dir={out}", *extra]


@pytest.mark.slow
def test_a_config_mistake_is_one_line_with_exit_status_2(tmp_path, corpus_file, cache_dir):
    out = tmp_path / "bad"
    proc = run_train(tiny(out, corpus_file, cache_dir, "optim.warmup_steps=-5"), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: optim.warmup_steps=-5 must be >= 0."]
    assert not out.exists()  # refused at set-up: the run dir Hydra made is gone
    full = run_train(tiny(tmp_path / "bad2", corpus_file, cache_dir, "optim.warmup_steps=-5"),
                     env={"HYDRA_FULL_ERROR": "1"}, check=False)
    assert full.returncode != 0 and "Traceback" in full.stderr and "ConfigError" in full.stderr
    typed = run_train(tiny(tmp_path / "bad3", corpus_file, cache_dir, "optim.warmup_steps=abc"), check=False)
    assert typed.returncode == 2  # the wrong type, refused while the config is composed (tinygpt/train/schema.py)
    assert typed.stderr.strip().splitlines() == ["error: optim.warmup_steps=abc has the wrong type: "
                                                 "optim.warmup_steps takes an integer."]
    assert not (tmp_path / "bad3").exists()


@pytest.mark.slow
def test_a_default_run_prints_no_library_warning_and_falls_back_offline(tmp_path, corpus_file, cache_dir):
    """The default loggers (W&B + CSV) with credentials but no reachable server: offline within seconds, one
    notice, no Python warning, no promotional tip, no v_num, and the sync hint at the end."""
    env = {"WANDB_MODE": None, "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
           "WANDB_BASE_URL": "http://127.0.0.1:9", "NETRC": str(tmp_path / "netrc")}
    proc = run_train(tiny(tmp_path / "run", corpus_file, cache_dir), env=env)
    console = proc.stdout + proc.stderr
    assert not PY_WARNING.search(console), PY_WARNING.search(console)
    assert "Tip" not in console and "v_num" not in console and "anonymous" not in console
    assert "credentials found but http://127.0.0.1:9 is unreachable" in proc.stderr
    assert "wandb sync" in proc.stderr


@pytest.mark.slow
def test_compile_true_trains_without_recompile_warnings(tmp_path, corpus_file, cache_dir):
    """Only the fixed-shape training/validation forward is compiled; the diagnostics and samples (every length
    up to block_size) use the plain model, so torch's recompile limit is never reached."""
    out = tmp_path / "compiled"
    proc = run_train(tiny(out, corpus_file, cache_dir, "compile=true", "logger=none", "trainer.max_steps=12",
                          "trainer.val_check_interval=6"))
    console = proc.stdout + proc.stderr
    assert "recompile" not in console.lower() and not PY_WARNING.search(console)
    import torch

    keys = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(k.startswith("model.") and "_orig_mod" not in k for k in keys)


def test_a_mistyped_key_is_one_line_naming_it_with_exit_status_2(tmp_path):
    """A key the config does not have: one line, the nearest key when one is close, exit 2, no run dir; an
    explicit addition (+key=value) is still Hydra's to make (and the object that gets it refuses it)."""
    out = tmp_path / "run"
    proc = run_train(["callbacks.leak_alarm.tolerence=1", f"hydra.run.dir={out}"], check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == ["error: callbacks.leak_alarm.tolerence is not a key of the config; "
                                                "did you mean callbacks.leak_alarm.tolerance?"]
    for args in (["hydra.launcher.n_jobs=1", f"hydra.run.dir={out}"],
                 ["-m", "hydra.launcher.n_jobs=1", "seed=1,2", f"hydra.sweep.dir={out}"]):  # not misspelled: elsewhere
        proc = run_train(args, check=False)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
            "error: hydra.launcher.n_jobs is a setting of hydra/launcher=parallel, not of the launcher this run uses "
            "(jobs one by one, in this process); add hydra/launcher=parallel before it."], proc.stderr
    proc = run_train(["no_such.key=1", f"hydra.run.dir={out}"], check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: no_such.key is not a key of the config; check the spelling (python train.py --cfg job shows "
        "every key)."]
    proc = run_train(["+callbacks.leak_alarm.extra=1", "--cfg", "job"], check=False)
    assert proc.returncode == 0 and "extra: 1" in proc.stdout, proc.stderr
    assert not out.exists()
    # a mistyped option of a config group, single and swept: one line with the options, nothing written
    for args in (["model=smal", f"hydra.run.dir={out}"], ["-m", "model=smal,tiny", f"hydra.sweep.dir={out}"]):
        proc = run_train(args, check=False)
        assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
            "error: model=smal is not an option of model; did you mean model=small? the options: baby, gpt2, "
            "gpt2_large, gpt2_medium, gpt2_xl, small, tiny."], proc.stderr
        assert not out.exists()
    # swept: Hydra composes a sweep's jobs after it starts; the typo is caught before any job runs
    sweep = tmp_path / "sweep"
    proc = run_train(["-m", "callbacks.leak_alarm.tolerence=1,2", f"hydra.sweep.dir={sweep}"], check=False)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip().splitlines() == ["error: callbacks.leak_alarm.tolerence is not a key of the config; "
                                                "did you mean callbacks.leak_alarm.tolerance?"]
    assert not sweep.exists()


@pytest.mark.parametrize("args", [["corpus.path=/tmp/my.txt"], ["-m", "corpus.path=/tmp/a.txt,/tmp/b.txt"]],
                         ids=["single", "swept"])
def test_a_key_of_an_option_the_run_did_not_choose_names_that_option(tmp_path, args):
    """corpus.path without corpus=text_file: the key is not misspelled, the option is missing (the retry had "check
    the spelling")."""
    out = tmp_path / "out"
    proc = run_train([*args, f"hydra.run.dir={out}", f"hydra.sweep.dir={out}"], check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: corpus.path is a setting of corpus=text_file, which this run did not choose; add corpus=text_file "
        "before it."], proc.stderr
    assert not out.exists()


def test_a_key_of_another_option_than_the_one_chosen_is_not_told_to_add_it(monkeypatch):
    """corpus=shakespeare corpus.path=...: the run chose its corpus on purpose; "add corpus=text_file before it" had
    read as if it had chosen none (in-process: the sentence is made from the command line)."""
    from tinygpt.runtime.errors import key_message

    monkeypatch.setattr("sys.argv", ["train.py", "corpus=shakespeare", "corpus.path=/tmp/my.txt"])
    assert key_message("corpus.path", None, ["corpus=text_file"]) == (
        "corpus.path is a setting of corpus=text_file, not of corpus=shakespeare, which this run chose; leave "
        "corpus.path out, or choose corpus=text_file instead.")
    monkeypatch.setattr("sys.argv", ["train.py", "corpus.path=/tmp/my.txt"])
    assert key_message("corpus.path", None, ["corpus=text_file"]).endswith("add corpus=text_file before it.")


def test_a_key_of_an_option_only_some_jobs_of_a_sweep_choose_says_so(tmp_path):
    """-m corpus=text_file,shakespeare corpus.path=...: one job did choose corpus=text_file ('this run did not choose'
    had read as false)."""
    out = tmp_path / "out"
    proc = run_train(["-m", "corpus=text_file,shakespeare", "corpus.path=/tmp/my.txt", f"hydra.sweep.dir={out}"],
                     check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        "error: corpus.path is a setting of corpus=text_file, which not every job of this sweep chooses; sweep it "
        "only with corpus=text_file, and the other options in a sweep of their own."], proc.stderr
    assert not out.exists()


# the experiment group's options, as the refusal lists them: every config under configs/experiment/, in name order
EXPERIMENT_OPTIONS = ", ".join(sorted(p.stem for p in (Path(__file__).resolve().parents[2] / "configs" /
                                                       "experiment").glob("*.yaml")))


@pytest.mark.slow
@pytest.mark.parametrize("args, line", [
    (["experiment=causal_msk"], "error: experiment=causal_msk is not an option of experiment; did you mean "
                                f"experiment=causal_mask? the options: {EXPERIMENT_OPTIONS}."),
    (["debug=fsat"], "error: debug=fsat is not an option of debug; did you mean debug=fast? the options: fast, "
                     "overfit."),
    (["-m", "experiment=causal_mask_quik"], "error: experiment=causal_mask_quik is not an option of experiment; did "
                                            "you mean experiment=causal_mask_quick? the options: "
                                            f"{EXPERIMENT_OPTIONS}."),
    (["-m", "seed=1,2", "debug=fast,fsat"], "error: debug=fsat is not an option of debug; did you mean debug=fast? "
                                            "the options: fast, overfit."),
    (["experiment=null"], "error: experiment=null is not an option of experiment; leave it out for the default, or "
                          f"pick one of: {EXPERIMENT_OPTIONS}."),
], ids=["experiment", "debug", "swept experiment", "swept debug", "null"])
def test_a_mistyped_option_of_an_optional_group_never_starts_a_run(tmp_path, args, line):
    """experiment and debug are optional groups, whose missing option Hydra skipped without a word (the default run
    started, or every job of a sweep ran as the default): one line, exit 2, nothing written."""
    out = tmp_path / "out"
    proc = run_train([*args, f"hydra.run.dir={out}", f"hydra.sweep.dir={out}"], check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [line], proc.stderr[-2000:]
    assert not out.exists()


def test_a_refused_start_leaves_no_run_dir(tmp_path, corpus_file, cache_dir):
    """A run refused before any training: one line, exit 2, and the run dir Hydra made (with .hydra/ and train.log)
    and its new parents removed (any machine refuses GPT-2 XL at batch 4096: on the CPU the memory floor refuses it
    before torch, on a GPU set-up's estimate after the data are read)."""
    out = tmp_path / "new" / "run"
    proc = run_train(["model=gpt2_xl", "model.block_size=16", "data.batch_size=4096", "corpus=text_file",
                      f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}", "logger=none",
                      f"hydra.run.dir={out}"],
                     check=False)
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert lines[-1].startswith("error: the model") and "training it at batch 4096 needs" in lines[-1]
    assert not any(line.startswith("error") for line in lines[:-1])
    assert not (tmp_path / "new").exists()

"""scripts/export_hf.py's refusals, in-process on small train.py-like checkpoints: each is one exact line
(`error: export_hf: <sentence>`), exit status 2, before anything is written: --out is left as it was (not even made
when it did not exist). A model GPT-2 cannot express names its option; a model without biases is not refused (it is
written with zero biases). --force writes over a dir's model files and keeps its other files."""

import json
import runpy
import sys
from pathlib import Path

import pytest

from helpers import ROOT, TEXT, write_checkpoint
from tinygpt.data.tokenizer import train_tokenizer
from tinygpt.cli.export_hf import main

CANNOT = "has no GPT-2 equivalent ({}); such a model cannot be written as GPT-2."


def export(capsys, *args) -> tuple[int, str, str]:
    """scripts/export_hf.py ARGS in-process: (exit status, stdout, stderr)."""
    code = main([*map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def tree(path: Path) -> dict | None:
    """Everything under ``path`` (relative name -> bytes, or None for a dir); None when it does not exist."""
    if not path.exists():
        return None
    return {p.relative_to(path).as_posix(): (p.read_bytes() if p.is_file() else None) for p in path.rglob("*")}


@pytest.fixture
def run(tmp_path):
    """A run dir with a checkpoint of a small GPT and its char tokenizer."""
    tok = train_tokenizer("char", [TEXT])
    write_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt", vocab_size=tok.get_vocab_size(),
                     tokenizer=tok.to_str())
    return tmp_path / "run"


@pytest.fixture
def full_out(tmp_path):
    """An --out that already holds someone's files."""
    out = tmp_path / "out"
    (out / "notes").mkdir(parents=True)
    (out / "config.json").write_text('{"mine": 1}')
    (out / "notes" / "keep.txt").write_text("mine")
    return out


def refused(capsys, ckpt, out, *extra) -> str:
    """The one error line of an export that must be refused, after checking that --out did not change."""
    before = tree(out)
    code, stdout, err = export(capsys, "--ckpt", ckpt, "--out", out, *extra)
    assert code == 2 and stdout == "" and len(err.strip().splitlines()) == 1, err
    assert tree(out) == before
    return err.strip()


@pytest.mark.parametrize("model, bug, message", [
    ({"attn": {"qk_norm": True}}, None,
     "model.attn.qk_norm=True " + CANNOT.format("GPT-2's attention has qk_norm=False")),
    ({"attn": {"scale": "none"}}, None,
     "model.attn.scale='none' " + CANNOT.format("GPT-2's attention has scale='sqrt_dk'")),
    ({"attn": {"scale": 0.5}}, None,
     "model.attn.scale=0.5 " + CANNOT.format("GPT-2's attention has scale='sqrt_dk'")),
    ({"attn": {"causal": False}}, None,
     "model.attn.causal=False " + CANNOT.format("GPT-2's attention has causal=True")),
    ({}, {"_target_": "tinygpt.experiments.partial_leaks.bugs.AttentionBug", "kind": "off_by_one"},
     "model.patch=AttentionBug(kind='off_by_one') " + CANNOT.format("a patch changes the built model; GPT-2's is "
                                                                   "the plain one")),
    ({"position": "rope"}, None, "model.position='rope' " + CANNOT.format("GPT-2's model has position='learned'")),
    ({"position": "alibi"}, None, "model.position='alibi' " + CANNOT.format("GPT-2's model has position='learned'")),
    ({"position": "none"}, None, "model.position='none' " + CANNOT.format("GPT-2's model has position='learned'")),
], ids=["qk_norm", "scale none", "scale number", "not causal", "attention bug", "rope", "alibi", "no positions"])
def test_a_model_gpt2_cannot_express_is_refused_naming_the_option(tmp_path, full_out, capsys, model, bug, message):
    model = {**model, "patch": [bug] if bug else []}
    ckpt = write_checkpoint(tmp_path / "odd" / "checkpoints" / "last.ckpt", model=model)
    assert refused(capsys, ckpt.parent.parent, tmp_path / "new") == f"error: export_hf: {message}"
    assert not (tmp_path / "new").exists()
    assert refused(capsys, ckpt, full_out, "--force") == f"error: export_hf: {message}"  # --force changes nothing


def test_a_checkpoint_that_is_not_there_is_one_line(tmp_path, capsys):
    missing = tmp_path / "nowhere"
    assert refused(capsys, missing, tmp_path / "new") == (
        f"error: export_hf: checkpoint {str(missing)!r} does not exist.")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert refused(capsys, empty, tmp_path / "new") == (
        f"error: export_hf: {empty} holds no checkpoint (no checkpoints/last.ckpt); pass a run dir or a .ckpt file.")
    stopped = tmp_path / "stopped"  # a run that ended before its first checkpoint
    stopped.mkdir()
    (stopped / "summary.json").write_text(json.dumps({"status": "failed", "steps": 0}))
    assert refused(capsys, stopped, tmp_path / "new") == (
        f"error: export_hf: {stopped} is a run dir without a checkpoint (status 'failed' at step 0: it stopped before "
        "its first checkpoint); pass another run.")
    junk = tmp_path / "junk.ckpt"
    junk.write_text("not a checkpoint")
    assert refused(capsys, junk, tmp_path / "new") == (
        f"error: export_hf: checkpoint {str(junk)!r} is not a readable checkpoint (not a torch archive: truncated, or "
        "another kind of file).")
    assert not (tmp_path / "new").exists()


def test_an_out_that_cannot_take_the_model_is_one_line(run, tmp_path, full_out, capsys):
    a_file = tmp_path / "a_file"
    a_file.write_text("mine")
    assert refused(capsys, run, a_file) == f"error: export_hf: --out={a_file} is a file; give a directory for the " \
                                           "model's files."
    assert refused(capsys, run, a_file / "sub") == (
        f"error: export_hf: --out={a_file / 'sub'} cannot be written: {a_file} is a file, not a directory; give a path "
        "in a writable directory.")
    assert refused(capsys, run, full_out) == (
        f"error: export_hf: --out={full_out} already holds config.json, notes; give a new or empty directory, or "
        "--force to write the model's files over those in it.")
    if Path("/proc/self").is_dir():  # Linux: not even root can create a file there
        assert refused(capsys, run, Path("/proc/tinygpt-export")) == (
            "error: export_hf: --out=/proc/tinygpt-export cannot be written: no file can be created in /proc (No such "
            "file or directory); give a path in a writable directory.")


def test_force_writes_the_model_over_a_dirs_model_files_and_keeps_the_rest(run, full_out, capsys):
    (full_out / "pytorch_model.bin").write_bytes(b"another model's weights")  # would be read instead: removed
    code, out, err = export(capsys, "--ckpt", run, "--out", full_out, "--force")
    assert code == 0 and out == (f"export_hf: GPT2LMHeadModel, 2 layers x 2 heads, 16 wide, 16 positions, vocab 46; "
                                 f"tokenizer: char (46 tokens) -> {full_out}\n")
    assert err == (f"# {run / 'checkpoints' / 'last.ckpt'} (step 60)\n"
                   "# note: model.bias=false: written as GPT-2 with zero biases (the same function)\n"
                   "# note: n_positions=16 is the run's model.block_size: the exported model reads at most 16 tokens "
                   "(a GPT-2 fine-tuned at a shorter block_size keeps only those positions)\n")
    assert sorted(tree(full_out)) == ["config.json", "model.safetensors", "notes", "notes/keep.txt", "tokenizer.json",
                                      "tokenizer_config.json"]
    assert json.loads((full_out / "config.json").read_text())["model_type"] == "gpt2"
    assert (full_out / "notes" / "keep.txt").read_text() == "mine"


def test_the_script_refuses_in_one_line_with_exit_status_2(tmp_path, capsys, monkeypatch):
    """scripts/export_hf.py run as the shell runs it (as __main__; in-process, since a new interpreter would spend
    seconds importing torch and Lightning again)."""
    ckpt = write_checkpoint(tmp_path / "odd.ckpt", model={"attn": {"qk_norm": True}})
    monkeypatch.setattr(sys, "argv", ["scripts/export_hf.py", "--ckpt", str(ckpt), "--out", str(tmp_path / "new")])
    with pytest.raises(SystemExit) as stopped:
        runpy.run_path(str(ROOT / "scripts" / "export_hf.py"), run_name="__main__")
    out, err = capsys.readouterr()
    assert stopped.value.code == 2 and out == "" and not (tmp_path / "new").exists()
    assert err.splitlines() == [
        "error: export_hf: model.attn.qk_norm=True " + CANNOT.format("GPT-2's attention has qk_norm=False")]


def test_every_setting_that_changes_the_function_is_refused_on_export():
    """GPT-2's settings are every field of GPTConfig and AttnConfig that config.json does not hold, at its default,
    less the attention options that change how it is computed (backend, where the scale is applied) or initialised
    (qk_init): each other value of every other field is refused, naming it; those three are not. The fields come
    from the dataclasses: a new option is checked here by being a field (its values: helpers.other_values)."""
    from dataclasses import fields, replace

    from helpers import other_values
    from tinygpt.model.config import AttnConfig, GPTConfig
    from tinygpt.model.hf_gpt2 import GPT2_SETTINGS, HOW_NOT_WHAT, hf_config
    from tinygpt.runtime.errors import ConfigError

    base = GPTConfig(vocab_size=10, attn=AttnConfig(backend="math"))  # scale_at=qk needs the formula
    owners = {"": (GPTConfig, lambda **v: replace(base, **v)),
              "attn.": (AttnConfig, lambda **v: replace(base, attn=replace(base.attn, **v)))}
    refused = set()
    for prefix, (owner, build) in owners.items():
        for f in fields(owner):
            if f"{prefix}{f.name}" not in GPT2_SETTINGS and not (prefix and f.name in HOW_NOT_WHAT):
                continue  # config.json holds it (the architecture, the vocabulary, dropout), or a patch: apart
            for value in other_values(f):
                if f.name in HOW_NOT_WHAT:
                    assert hf_config(build(**{f.name: value}))["n_layer"] == 4
                    continue
                with pytest.raises(ConfigError, match=rf"^model\.{prefix}{f.name}="):
                    hf_config(build(**{f.name: value}))
                refused.add(f"{prefix}{f.name}")
    assert refused == set(GPT2_SETTINGS) and {"attn.causal", "attn.scale", "attn.qk_norm"} <= refused


def test_a_checkpoint_written_with_an_attention_bug_is_not_exported_as_gpt2(tmp_path):
    """A run made before model.patch kept its bug as attention_bug: refused, as a patch is, not written as GPT-2."""
    import torch

    from tinygpt.cli.export_hf import gpt2_files
    from tinygpt.runtime.errors import ConfigError

    bug = {"_target_": "tinygpt.experiments.partial_leaks.bugs.AttentionBug", "kind": "off_by_one"}
    path = write_checkpoint(tmp_path / "old.ckpt", extra={"attention_bug": bug})
    with pytest.raises(ConfigError, match=r"it names attention_bug \(today model.patch\)"):
        gpt2_files(torch.load(path, weights_only=True), str(path))

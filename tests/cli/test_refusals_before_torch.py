"""The CLIs refuse a wrong --ckpt (missing, a dir without a checkpoint, a file that is no torch archive) before
importing torch: the retry had measured 7-9 s for each (train.py took 1 s for the same mistake)."""

import os
import subprocess
import sys

import pytest

from helpers import ROOT


@pytest.mark.parametrize("script, extra", [("sample.py", []), ("attention.py", ["--text", "hi"]),
                                           ("export_hf.py", ["--out", "{tmp}/exported"])])
@pytest.mark.parametrize("what", ["missing", "empty dir", "not an archive", "a zip of other files"])
def test_a_wrong_ckpt_is_one_line_before_torch(tmp_path, script, extra, what):
    import zipfile

    (tmp_path / "empty").mkdir()
    (tmp_path / "notes.ckpt").write_text("not a checkpoint")
    with zipfile.ZipFile(tmp_path / "notes.zip", "w") as z:
        z.writestr("notes/a.txt", "hello")
    ckpt = {"missing": tmp_path / "nothing", "empty dir": tmp_path / "empty", "not an archive": tmp_path / "notes.ckpt",
            "a zip of other files": tmp_path / "notes.zip"}
    args = [a.format(tmp=tmp_path) for a in extra]
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / script), "--ckpt",
                          str(ckpt[what]), *args], cwd=tmp_path, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "WANDB_MODE": "offline"})
    errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    assert out.returncode == 2 and len(errors) == 1 and errors[0].startswith("error: "), out.stderr[-2000:]
    said = {"missing": "does not exist", "empty dir": "holds no checkpoint", "not an archive": "not a torch archive",
            "a zip of other files": "not one torch wrote: it holds no data.pkl"}
    assert said[what] in errors[0], errors[0]
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and "lightning" not in imported
    assert not (tmp_path / "exported").exists()


@pytest.mark.parametrize("source", [["--ckpt", "{tmp}/nothing"], ["--init_from", "gpt2"]])
def test_an_empty_text_for_the_attention_page_is_one_line_before_torch(tmp_path, source):
    """--text "" was refused only after the model had loaded (5 s): now before torch, whichever model."""
    args = [a.format(tmp=tmp_path) for a in source]
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / "attention.py"), *args,
                          "--text", ""], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    assert out.returncode == 2 and errors == ["error: attention: --text is empty; give the text to look at."]
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported


def test_a_model_gpt2_cannot_express_is_refused_before_torch(tmp_path):
    """A causal=false (or patched) run: its checkpoint's own settings, read without torch, say so (7-8 s before)."""
    from helpers import write_checkpoint

    run = write_checkpoint(tmp_path / "leaky" / "checkpoints" / "last.ckpt", model={"attn": {"causal": False}})
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / "export_hf.py"), "--ckpt",
                          str(run.parent.parent), "--out", str(tmp_path / "exported")], cwd=tmp_path,
                         capture_output=True, text=True, timeout=120)
    errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    assert out.returncode == 2 and errors == [
        "error: export_hf: model.attn.causal=False has no GPT-2 equivalent (GPT-2's attention has causal=True); such "
        "a model cannot be written as GPT-2."], out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and not (tmp_path / "exported").exists()


def test_a_prompt_the_checkpoint_cannot_take_is_one_line_before_torch(tmp_path):
    """An empty prompt (6.8 s, after loading the model) and a text prompt for a token-id checkpoint (8.2 s): the
    checkpoint's tokenizer and vocabulary, read from its pickle without torch, say so at once."""
    from helpers import write_checkpoint
    from tinygpt.data.tokenizer import train_tokenizer

    text = write_checkpoint(tmp_path / "text" / "checkpoints" / "last.ckpt",
                            tokenizer=train_tokenizer("char", ["hello world"]).to_str(), vocab_size=64)
    ids = write_checkpoint(tmp_path / "ids" / "checkpoints" / "last.ckpt")
    for ckpt, prompt, says in [
        (text, "", "the prompt '' encodes to no tokens; give a non-empty prompt."),
        (ids, "ROMEO:", "this checkpoint has no tokenizer (its data were token ids, e.g. random_tokens): give the "
                        "prompt as space-separated ids, e.g. --prompt '3 14 15', not 'ROMEO:'.")]:
        out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / "sample.py"), "--ckpt",
                              str(ckpt), "--prompt", prompt], cwd=tmp_path, capture_output=True, text=True,
                             timeout=120)
        errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
        assert out.returncode == 2 and errors == [f"error: scripts/sample.py: {says}"], out.stderr[-2000:]
        imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines()
                    if line.startswith("import time:")}
        assert "torch" not in imported


def test_a_hub_name_sample_cannot_reach_is_one_line_before_torch(tmp_path):
    """sample.py --init_from gpt2 offline took 9-12 s where train.py says the same in under 2."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_CACHE": str(tmp_path / "hf")}
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / "sample.py"), "--init_from",
                          "gpt2"], cwd=tmp_path, capture_output=True, text=True, timeout=120, env=env)
    errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    assert out.returncode == 2 and errors == [
        "error: scripts/sample.py: init_from='gpt2' is not a local directory, the Hugging Face Hub cannot be used "
        "(https://huggingface.co: HF_HUB_OFFLINE is set) and its cache has no copy; pass a local model dir "
        "(config.json, model.safetensors or pytorch_model.bin, and tokenizer.json or vocab.json + merges.txt)."], \
        out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported


@pytest.mark.parametrize("text, says", [
    ("hello", "this checkpoint has no tokenizer (its data were token ids, e.g. random_tokens): give the text as "
              "space-separated ids, e.g. --text '3 14 15', not 'hello'."),
    ("3 14 999", "token id 999 in --text '3 14 999' is outside this checkpoint's vocabulary of 64 tokens; give ids "
                 "from 0 to 63."),
])
def test_a_text_the_attention_checkpoint_cannot_take_is_one_line_before_torch(tmp_path, text, says):
    """A text for a token-id checkpoint had been refused only after the model had loaded: the checkpoint's tokenizer
    and vocabulary, read from its pickle without torch, say so at once."""
    from helpers import write_checkpoint

    ckpt = write_checkpoint(tmp_path / "ids" / "checkpoints" / "last.ckpt")
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / "attention.py"), "--ckpt",
                          str(ckpt), "--text", text], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    assert out.returncode == 2 and errors == [f"error: attention: {says}"], out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "torch" not in imported and not (tmp_path / "ids" / "attention").exists()

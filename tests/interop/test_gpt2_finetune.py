"""Fine-tuning, sampling and looking at the attention of an imported GPT-2 (a small random one saved by
`transformers`): `python train.py init_from=<dir>` starts from its weights (the loss at step 0 is transformers' loss
on that batch), with everything a run has, and resumes from its checkpoint; scripts/sample.py and
scripts/attention.py take --init_from <dir> and give transformers' greedy text and attention weights."""

import csv
import json

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from transformers import GPT2LMHeadModel

from helpers import run_train, write_hf_gpt2
from tinygpt.cli.attention_page import main as attention_main
from tinygpt.data.tokenizer import decode, encode, load_pretrained_tokenizer
from tinygpt.data.windows import RandomWindows
from tinygpt.cli.sample import main as sample_main

RECIPE = ["logger=csv", "data.batch_size=4", "data.val_windows=8", "trainer.val_check_interval=2",
          "trainer.log_every_n_steps=1", "optim.warmup_steps=1", "optim.lr=1e-4", "diagnostics.windows=4",
          "callbacks.attention_maps.every_n_steps=2", "callbacks.text_samples.max_new_tokens=8",
          "callbacks.stability.every_n_steps=2"]


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return write_hf_gpt2(tmp_path_factory.mktemp("gpt2") / "tiny-gpt2")


@pytest.fixture(scope="module")
def theirs(gpt2_dir):
    return GPT2LMHeadModel.from_pretrained(gpt2_dir, attn_implementation="eager").eval()


@pytest.mark.slow
def test_fine_tuning_starts_from_the_imported_weights_and_resumes(tmp_path, gpt2_dir, theirs, corpus_file,
                                                                  cache_dir):
    out = tmp_path / "run"
    args = [f"init_from={gpt2_dir}", "corpus=text_file", f"corpus.path={corpus_file}", f"data.cache_dir={cache_dir}",
            f"hydra.run.dir={out}", *RECIPE]
    run_train([*args, "trainer.max_steps=4"])
    summary = json.loads((out / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["steps"] == 4 and summary["leak_detected_step"] is None
    config = summary["config"]
    assert config["init_from"] == str(gpt2_dir) and config["data"]["tokenizer"] == "pretrained"
    assert (config["model"]["n_embd"], config["model"]["activation"], summary["vocab_size"]) == (32, "gelu_tanh", 300)
    for made in ("attention/explorer.html", "diagnostics.npz", "samples.jsonl", "checkpoints/last.ckpt"):
        assert (out / made).is_file(), made

    # the corpus went through GPT-2's tokenizer, into a cache of its own; step 0 trained the imported model
    [cache] = cache_dir.glob("text_file-*-pretrained*")
    train_ids = np.load(cache / "train.npy")
    text = corpus_file.read_text()
    assert train_ids.tolist() == encode(load_pretrained_tokenizer(gpt2_dir), text[:int(len(text) * 0.9)])
    x, y = RandomWindows(train_ids, block_size=16, batch_size=4, seed=1337).batch(0)  # (4, 16) each
    with torch.no_grad():
        expected = F.cross_entropy(theirs(x).logits.reshape(-1, 300), y.reshape(-1)).item()
    with open(out / "history" / "metrics.csv", newline="") as f:
        first = next(float(r["train/loss"]) for r in csv.DictReader(f) if r["step"] == "0" and r["train/loss"])
    assert abs(first - expected) < 1e-5 * expected

    run_train([*args, "trainer.max_steps=6", "ckpt_path=last"])  # resumed: the checkpoint's weights, not GPT-2's
    resumed = json.loads((out / "summary.json").read_text())
    assert resumed["status"] == "completed" and resumed["steps"] == 6
    assert resumed["resumed_from"] == str(out / "checkpoints" / "last.ckpt")


def greedy(theirs, ids: list[int], new: int, block_size: int = 16) -> list[int]:
    seq = torch.tensor([ids])
    with torch.no_grad():
        for _ in range(new):
            seq = torch.cat((seq, theirs(seq[:, -block_size:]).logits[:, -1:].argmax(-1)), dim=1)
    return seq[0].tolist()


def test_sample_from_the_imported_model(gpt2_dir, theirs, capsys):
    code = sample_main(["--init_from", str(gpt2_dir), "--prompt", "To be, or", "--max-new-tokens", "20",
                        "--top-k", "1", "--device", "cpu"])
    out, err = capsys.readouterr()
    tok = load_pretrained_tokenizer(gpt2_dir)
    assert code == 0 and err.startswith(f"# {gpt2_dir}\n")
    assert out == decode(tok, greedy(theirs, encode(tok, "To be, or"), 20)) + "\n"  # past the 16-token context


def test_the_attention_page_of_the_imported_model(gpt2_dir, theirs, tmp_path, monkeypatch, capsys):
    from tinygpt.cli.attention_page import weights_of
    from tinygpt.train.init_from import load_model

    text = "To be, or not to be"
    page = tmp_path / "page.html"
    assert attention_main(["--init_from", str(gpt2_dir), "--text", text, "--out", str(page)]) == 0
    out, err = capsys.readouterr()
    ids = encode(load_pretrained_tokenizer(gpt2_dir), text)
    assert out == f"attention: {len(ids)} tokens, 2 layers x 2 heads -> {page}\n" and page.is_file()
    assert err == f"# init_from {gpt2_dir} ({gpt2_dir})\n"
    model, _, _ = load_model(str(gpt2_dir))
    with torch.no_grad():
        expected = torch.cat(theirs(torch.tensor([ids]), output_attentions=True).attentions)  # (2, H, T, T)
    torch.testing.assert_close(weights_of(model, ids), expected, rtol=1e-5, atol=1e-6)
    monkeypatch.chdir(tmp_path)  # without --out: outputs/attention/<model name>_<text hash>.html
    assert attention_main(["--init_from", str(gpt2_dir), "--text", text]) == 0
    assert [p.name.split("_")[0] for p in (tmp_path / "outputs" / "attention").iterdir()] == ["tiny-gpt2"]


def test_the_clis_refuse_a_bad_init_from_in_one_line(tmp_path, gpt2_dir, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    message = (f"init_from={str(empty)!r}: {empty} has no config.json; a Hugging Face GPT-2 dir holds config.json, "
               "model.safetensors or pytorch_model.bin, and its tokenizer files.")
    assert attention_main(["--init_from", str(empty), "--text", "x", "--out", str(tmp_path / "p.html")]) == 2
    assert capsys.readouterr().err.strip().splitlines() == [f"error: attention: {message}"]
    with pytest.raises(SystemExit) as stopped:
        sample_main(["--init_from", str(empty), "--device", "cpu"])
    err = capsys.readouterr().err
    assert stopped.value.code == 2 and "Traceback" not in err and err.strip().splitlines()[-1].endswith(message)
    with pytest.raises(SystemExit):
        sample_main(["--init_from", str(gpt2_dir), "--ckpt", str(tmp_path)])
    assert "argument --ckpt: not allowed with argument --init_from" in capsys.readouterr().err


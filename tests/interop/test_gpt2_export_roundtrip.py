"""GPT-2 in and out: a small random GPT-2 saved by `transformers` (2 layers, 32 wide, 32 positions, biases and
LayerNorms random, its byte-level BPE of 300 tokens), fine-tuned through train.py init_from=<dir> (in-process) and
exported by scripts/export_hf.py, loads with AutoModelForCausalLM and AutoTokenizer and computes what our checkpoint
computes; with the training steps made too small to move a float32 weight, the exported dir holds the original's
weights bit for bit, config and tokenizer, and gives the original's logits. No network."""

import json

import pytest
import torch
from safetensors.torch import load_file
from transformers import AutoModelForCausalLM, AutoTokenizer, GPT2LMHeadModel

from helpers import EXPORT_RECIPE, TEXT, greedy_three_ways, train_in_process, transformers_agreement, write_hf_gpt2
from tinygpt.data.tokenizer import decode, encode
from tinygpt.cli.export_hf import main as export_main
from tinygpt.train.module import load_trained

FINE_TUNE = ["optim.lr=1e-3"]
UNMOVED = ["optim.lr=1e-30", "optim.min_lr=0", "trainer.max_steps=1"]  # AdamW's step, ~1e-30, is below every ulp


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return write_hf_gpt2(tmp_path_factory.mktemp("gpt2") / "tiny-gpt2", n_positions=32)


@pytest.fixture(scope="module")
def exported(tmp_path_factory, gpt2_dir, corpus_file, cache_dir):
    """recipe name -> the export dir of a run init_from=gpt2_dir with it, trained and exported on first use."""
    made = {}

    def get(name, overrides):
        if name not in made:
            root = tmp_path_factory.mktemp(name)
            train_in_process(root / "run", [f"init_from={gpt2_dir}", "corpus=text_file", f"corpus.path={corpus_file}",
                                            f"data.cache_dir={cache_dir}", *EXPORT_RECIPE, *overrides])
            assert export_main(["--ckpt", str(root / "run" / "checkpoints" / "last.ckpt"), "--out",
                                str(root / "hf")]) == 0
            made[name] = root
        return made[name]

    return get


@pytest.fixture(scope="module")
def fine_tuned(exported):
    """(our model, our tokenizer, transformers' model, transformers' tokenizer) of the fine-tuned run."""
    root = exported("fine_tuned", FINE_TUNE)
    ours, tok, _ = load_trained(root / "run")
    theirs = AutoModelForCausalLM.from_pretrained(root / "hf").eval()
    return ours, tok, theirs, AutoTokenizer.from_pretrained(root / "hf")


def test_the_fine_tuned_gpt2_computes_our_logits_loss_and_greedy_text(fine_tuned, gpt2_dir):
    ours, tok, theirs, _ = fine_tuned
    original = GPT2LMHeadModel.from_pretrained(gpt2_dir)
    assert not torch.equal(theirs.transformer.wte.weight, original.transformer.wte.weight)  # it did train
    ids = torch.randint(0, 300, (3, 32), generator=torch.Generator().manual_seed(0))
    far = transformers_agreement(ours, theirs, ids)
    assert far["float32"] < 1e-5 and far["float64"] < 1e-10 and far["loss"] < 1e-5, far
    prompt = encode(tok, "To be, or not")
    cached, recomputed, hf = greedy_three_ways(ours, theirs, prompt, 20)
    assert cached == recomputed == hf and len(hf) == len(prompt) + 20


def test_the_fine_tuned_gpt2_keeps_gpt2s_tokenizer(fine_tuned, exported, gpt2_dir):
    _, tok, _, hf_tok = fine_tuned
    original = AutoTokenizer.from_pretrained(gpt2_dir)
    for text in (TEXT, "Zounds, ¿qué? <|endoftext|> 12 €"):
        ids = encode(tok, text)
        assert hf_tok(text)["input_ids"] == ids == original(text)["input_ids"]
        assert hf_tok.decode(ids) == decode(tok, ids) == text
    out = exported("fine_tuned", FINE_TUNE) / "hf"
    written = json.loads((out / "tokenizer.json").read_text())
    assert written == json.loads((gpt2_dir / "tokenizer.json").read_text())  # GPT-2's tokenizer.json, as it was
    config = json.loads((out / "tokenizer_config.json").read_text())
    assert {k: config[k] for k in ("bos_token", "eos_token", "unk_token")} == dict.fromkeys(
        ("bos_token", "eos_token", "unk_token"), "<|endoftext|>")


def test_import_then_export_gives_back_the_original(exported, gpt2_dir):
    root = exported("unmoved", UNMOVED)
    original, written = (load_file(d / "model.safetensors") for d in (gpt2_dir, root / "hf"))
    assert written.keys() <= original.keys() and all(torch.equal(written[k], original[k]) for k in written)
    assert original.keys() - written.keys() <= {"lm_head.weight"}  # tied: transformers may store it, we do not
    config, before = (json.loads((d / "config.json").read_text()) for d in (root / "hf", gpt2_dir))
    keys = ("n_layer", "n_head", "n_embd", "n_positions", "vocab_size", "activation_function", "layer_norm_epsilon",
            "bos_token_id", "eos_token_id")
    assert {k: config[k] for k in keys} == {k: before[k] for k in keys}
    theirs, back = (GPT2LMHeadModel.from_pretrained(d).eval() for d in (gpt2_dir, root / "hf"))
    ids = torch.randint(0, 300, (3, 32), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert torch.equal(back(ids).logits, theirs(ids).logits)  # the original's logits, to the bit
    ours, _, _ = load_trained(root / "run")  # and on the way, our GPT computed them too
    far = transformers_agreement(ours, theirs, ids)
    assert far["float32"] < 1e-5 and far["float64"] < 1e-10 and far["loss"] < 1e-5, far

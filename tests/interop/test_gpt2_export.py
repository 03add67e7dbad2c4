"""scripts/export_hf.py on runs of train.py (in-process, a few steps of the tiny model): `transformers` loads the
exported dir with AutoModelForCausalLM and AutoTokenizer and computes what our checkpoint computes: the same logits
(float32 within 1e-5 relative, float64 within 1e-10), loss and 20 greedy tokens (ours with and without the KV cache,
transformers' generate), and the tokenizer gives our ids and decodes them back. With biases and without (written as
zero biases), with the char tokenizer (its <unk> decoded as ours is) and our byte-level BPE. No network."""

import json

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedTokenizerFast

from helpers import EXPORT_RECIPE, TEXT, greedy_three_ways, train_in_process, transformers_agreement
from tinygpt.data.tokenizer import decode, encode
from tinygpt.cli.export_hf import main as export_main
from tinygpt.train.module import load_trained

RUNS = {  # name -> train.py overrides
    "char, bias": ["model.bias=true"],
    "char, no bias": ["model.bias=false"],
    "bpe, no bias, gelu_tanh": ["model.bias=false", "data.tokenizer=bpe", "data.bpe_vocab_size=320",
                                "model.activation=gelu_tanh"],
}


@pytest.fixture(scope="module")
def exports(tmp_path_factory, corpus_file, cache_dir):
    """name -> (our model, our tokenizer, transformers' model, transformers' tokenizer, the export dir), trained and
    exported on first use."""
    made = {}

    def get(name):
        if name not in made:
            root = tmp_path_factory.mktemp(name.replace(", ", "-").replace(" ", "_"))
            train_in_process(root / "run", ["corpus=text_file", f"corpus.path={corpus_file}",
                                            f"data.cache_dir={cache_dir}", "model=tiny", "model.block_size=32",
                                            *EXPORT_RECIPE, *RUNS[name]])
            assert export_main(["--ckpt", str(root / "run"), "--out", str(root / "hf")]) == 0
            ours, tok, _ = load_trained(root / "run")
            theirs = AutoModelForCausalLM.from_pretrained(root / "hf").eval()
            made[name] = ours, tok, theirs, AutoTokenizer.from_pretrained(root / "hf"), root / "hf"
        return made[name]

    return get


def batch(vocab: int, n: int = 3, t: int = 32) -> torch.Tensor:
    return torch.randint(0, vocab, (n, t), generator=torch.Generator().manual_seed(0))


@pytest.mark.parametrize("name", RUNS)
def test_the_exported_model_computes_our_logits_and_loss(exports, name):
    ours, _, theirs, _, _ = exports(name)
    far = transformers_agreement(ours, theirs, batch(ours.config.vocab_size))
    assert far["float32"] < 1e-5 and far["float64"] < 1e-10 and far["loss"] < 1e-5, far


@pytest.mark.parametrize("name", RUNS)
def test_greedy_generation_is_the_same_in_both(exports, name):
    ours, tok, theirs, _, _ = exports(name)
    prompt = encode(tok, "HAMLET:\nTo be")[:8]
    cached, recomputed, hf = greedy_three_ways(ours, theirs, prompt, 20)
    assert cached == recomputed == hf and len(hf) == len(prompt) + 20


@pytest.mark.parametrize("name", RUNS)
def test_the_tokenizer_gives_our_ids_and_the_text_back(exports, name):
    ours, tok, theirs, hf_tok, out = exports(name)
    text = TEXT[:300]
    ids = encode(tok, text)
    assert hf_tok(text)["input_ids"] == ids and hf_tok.decode(ids) == decode(tok, ids) == text
    inputs = hf_tok(text[:32], return_tensors="pt")  # what model(**tokenizer(text)) is given: no token_type_ids
    assert sorted(inputs) == ["attention_mask", "input_ids"]
    with torch.no_grad():
        torch.testing.assert_close(theirs(**inputs).logits, ours(inputs["input_ids"])[0], rtol=1e-5, atol=1e-6)
    fast = PreTrainedTokenizerFast(tokenizer_file=str(out / "tokenizer.json"))
    assert fast.encode(text) == ids and fast.decode(ids) == text
    odd = "Zounds, ¿qué?"  # Z, ¿ and é are not in the corpus: the char tokenizer reads <unk>, shown as U+FFFD
    odd_ids = encode(tok, odd)
    assert hf_tok(odd)["input_ids"] == odd_ids and hf_tok.decode(odd_ids) == decode(tok, odd_ids)
    assert decode(tok, odd_ids) == ("\ufffdounds, \ufffdqu\ufffd?" if name.startswith("char") else odd)

def test_config_json_is_gpt2s_with_our_settings(exports):
    ours, _, theirs, _, out = exports("char, no bias")
    config = json.loads((out / "config.json").read_text())
    c = ours.config
    assert {k: config[k] for k in ("model_type", "n_layer", "n_head", "n_embd", "n_positions", "vocab_size",
                                   "activation_function", "layer_norm_epsilon", "n_inner", "tie_word_embeddings",
                                   "bos_token_id", "eos_token_id")} == {
        "model_type": "gpt2", "n_layer": c.n_layer, "n_head": c.n_head, "n_embd": c.n_embd, "n_positions": 32,
        "vocab_size": c.vocab_size, "activation_function": "gelu", "layer_norm_epsilon": 1e-5, "n_inner": None,
        "tie_word_embeddings": True, "bos_token_id": None, "eos_token_id": None}
    assert config["architectures"] == ["GPT2LMHeadModel"] and type(theirs).__name__ == "GPT2LMHeadModel"
    biases = [p for n, p in theirs.named_parameters() if n.endswith(".bias")]
    assert len(biases) == 6 * c.n_layer + 1 and all(not p.any() for p in biases)  # bias=false: zeros
    assert theirs.lm_head.weight.data_ptr() == theirs.transformer.wte.weight.data_ptr()  # tied, as ours
    tok_config = json.loads((out / "tokenizer_config.json").read_text())
    assert tok_config["tokenizer_class"] == "PreTrainedTokenizerFast" and tok_config["unk_token"] == "<unk>"
    gelu_tanh = json.loads((exports("bpe, no bias, gelu_tanh")[4] / "config.json").read_text())
    assert gelu_tanh["activation_function"] == "gelu_new"
    assert gelu_tanh["bos_token_id"] == gelu_tanh["eos_token_id"] == exports("bpe, no bias, gelu_tanh")[1].token_to_id(
        "<|endoftext|>")

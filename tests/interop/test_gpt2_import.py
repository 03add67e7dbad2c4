"""init_from loads a GPT-2 saved by `transformers` into our GPT, and it computes what `transformers` computes: the
same logits (float64 to 1e-10, float32 to 1e-5 relative), the same loss, the same greedy generations with and
without our KV cache, past the context window too; the tokenizer gives transformers' ids; the names map both ways.
A small random GPT-2 (2 layers, 32 wide, 16 positions, 300 tokens) built here, no network."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

from helpers import TEXT, write_hf_gpt2
from tinygpt.data.tokenizer import encode, load_pretrained_tokenizer
from tinygpt.model import hf_gpt2
from tinygpt.sampling.generate import generate
from tinygpt.model.gpt import GPT, GPTConfig
from tinygpt.train.init_from import attention_note, load_model, load_weights, locate


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return write_hf_gpt2(tmp_path_factory.mktemp("gpt2") / "tiny-gpt2")


@pytest.fixture(scope="module")
def models(gpt2_dir):
    """(ours, transformers'), float32, eval mode, from the same files."""
    ours, _, _ = load_model(str(gpt2_dir))
    return ours, GPT2LMHeadModel.from_pretrained(gpt2_dir).eval()


def batch(n: int = 3, t: int = 16, vocab: int = 300, seed: int = 0) -> torch.Tensor:
    return torch.randint(0, vocab, (n, t), generator=torch.Generator().manual_seed(seed))


def test_the_config_comes_from_config_json(models):
    ours, theirs = models
    c = ours.config
    assert (c.n_layer, c.n_head, c.n_embd, c.block_size, c.vocab_size) == (2, 2, 32, 16, 300)
    assert (c.bias, c.activation, c.ln_eps, c.dropout) == (True, "gelu_tanh", 1e-5, 0.0)
    assert ours.num_params(non_embedding=False) == theirs.num_parameters()


def test_float64_logits_agree_to_1e_10(models):
    ours, theirs = (m.double() for m in models)
    try:
        with torch.no_grad():
            a, b = ours(batch())[0], theirs(batch()).logits  # (3, 16, 300)
        assert (a - b).abs().max().item() < 1e-10
        exact_gelu = GPT(GPTConfig(**{**ours.config.to_dict(), "activation": "gelu"})).double().eval()
        exact_gelu.load_state_dict(ours.state_dict())
        with torch.no_grad():  # the check has teeth: the exact GELU, GPT-2's only difference, is far off
            assert (exact_gelu(batch())[0] - b).abs().max().item() > 1e-5
    finally:
        ours.float(), theirs.float()


def test_float32_logits_agree_to_1e_5_relative(models):
    ours, theirs = models
    with torch.no_grad():
        a, b = ours(batch())[0], theirs(batch()).logits  # (3, 16, 300)
    assert ((a - b).abs().max() / b.abs().max()).item() < 1e-5


def test_the_loss_on_a_batch_agrees(models):
    ours, theirs = models
    ids = batch()
    with torch.no_grad():
        _, loss = ours(ids[:, :-1], ids[:, 1:])  # positions 0..14 predict 1..15
        expected = theirs(input_ids=ids, labels=ids).loss  # transformers shifts the labels itself
    assert abs(loss.item() - expected.item()) < 1e-5 * expected.item()


def greedy_reference(theirs, prompt: torch.Tensor, new: int, block_size: int) -> torch.Tensor:
    """transformers' greedy continuation, fed the last block_size tokens at every step (GPT-2's learned positions
    end there: a sliding window, as our generate recomputes past the context)."""
    seq = prompt
    with torch.no_grad():
        for _ in range(new):
            nxt = theirs(seq[:, -block_size:]).logits[:, -1].argmax(-1, keepdim=True)  # (B, 1)
            seq = torch.cat((seq, nxt), dim=1)
    return seq


@pytest.mark.parametrize("use_cache", [True, False])
def test_greedy_generation_is_identical_past_the_context_window(models, use_cache):
    ours, theirs = models
    prompt = batch(2, 8, seed=1)
    expected = greedy_reference(theirs, prompt, 20, block_size=16)  # 8 + 20 = 28 tokens > 16 positions
    got = generate(ours, prompt, 20, top_k=1, use_cache=use_cache)
    assert torch.equal(got, expected)
    inside = theirs.generate(prompt, max_new_tokens=8, do_sample=False, pad_token_id=0)  # within the window, cached
    assert torch.equal(got[:, :16], inside)


@pytest.mark.parametrize("files", ["tokenizer.json", "vocab.json"])
def test_the_tokenizer_gives_transformers_ids(tmp_path, files):
    d = write_hf_gpt2(tmp_path / "m", tokenizer_files=files)
    ours = load_pretrained_tokenizer(d)
    text = TEXT + " héllo ☃ <|endoftext|> end"
    theirs = AutoTokenizer.from_pretrained(d)  # GPT-2's tokenizer, from the same files
    assert encode(ours, text) == theirs(text)["input_ids"]
    assert ours.get_vocab_size() == len(theirs) == 300
    assert ours.decode(encode(ours, text), skip_special_tokens=False) == text


def test_the_names_map_both_ways(models):
    ours, theirs = models
    hf = hf_gpt2.to_hf_state_dict(ours)
    expected = {k: v for k, v in theirs.state_dict().items() if k != "lm_head.weight"}
    assert hf.keys() == expected.keys()
    assert all(torch.equal(hf[k], expected[k]) for k in hf)
    again = GPT(ours.config)
    assert hf_gpt2.load_hf_state_dict(again, hf) == []
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), ours.state_dict().values(), strict=True))
    for name in ours.state_dict():
        mapped = hf_gpt2.hf_name(name)
        assert name == "lm_head.weight" or hf_gpt2.our_name(mapped[0]) == name
    assert hf_gpt2.our_name("h.1.mlp.c_fc.weight") == "blocks.1.mlp.c_fc.weight"  # saved without "transformer."
    assert hf_gpt2.our_name("h.1.attn.bias") is None  # GPT-2's causal-mask buffer


def test_a_model_without_biases_is_gpt2_with_zero_biases():
    torch.manual_seed(0)
    ours = GPT(GPTConfig(vocab_size=50, block_size=8, n_layer=1, n_head=2, n_embd=8, bias=False)).eval()
    theirs = GPT2LMHeadModel(GPT2Config(n_layer=1, n_head=2, n_embd=8, n_positions=8, vocab_size=50,
                                        activation_function="gelu")).eval()
    result = theirs.load_state_dict(hf_gpt2.to_hf_state_dict(ours), strict=False)
    assert result.unexpected_keys == [] and set(result.missing_keys) <= {"lm_head.weight"}  # the head is tied
    ids = batch(2, 8, vocab=50)
    with torch.no_grad():
        assert (ours(ids)[0] - theirs(ids).logits).abs().max().item() < 1e-5


def test_the_config_maps_both_ways():
    cfg = GPTConfig(vocab_size=300, block_size=16, n_layer=2, n_head=2, n_embd=32, bias=True, activation="gelu_tanh")
    hf = hf_gpt2.hf_config(cfg)
    model, vocab = hf_gpt2.model_settings(hf)
    assert vocab == 300 and GPTConfig(vocab_size=vocab, **model) == cfg
    assert GPT2Config(**hf).to_dict()["activation_function"] == "gelu_new"
    with pytest.raises(ValueError, match=r"^model.attn.qk_norm=True has no GPT-2 equivalent"):
        hf_gpt2.hf_config(GPTConfig(attn={"qk_norm": True}))


def test_gpt2_small_on_the_meta_device_has_transformers_names_and_shapes():
    """GPT-2's own config.json (124M) builds our GPT with exactly transformers' tensors, without allocating them."""
    config = GPT2Config().to_dict()  # GPT-2 small: the Hub's gpt2/config.json fields
    model, vocab = hf_gpt2.model_settings(config)
    assert (vocab, model["n_layer"], model["n_embd"], model["block_size"]) == (50257, 12, 768, 1024)
    with torch.device("meta"):
        ours = GPT(GPTConfig(vocab_size=vocab, **model))
        theirs = GPT2LMHeadModel(GPT2Config(**config))
    assert ours.num_params(non_embedding=False) == theirs.num_parameters() == 124_439_808
    shapes = {k: v.shape for k, v in hf_gpt2.to_hf_state_dict(ours).items()}
    assert shapes == {k: v.shape for k, v in theirs.state_dict().items() if k != "lm_head.weight"}


def test_a_shorter_context_crops_the_position_table(gpt2_dir):
    state = hf_gpt2.read_weights(gpt2_dir)
    cropped = hf_gpt2.crop_positions(state, 8)
    assert cropped["transformer.wpe.weight"].shape == (8, 32) and state["transformer.wpe.weight"].shape == (16, 32)
    short = GPT(GPTConfig(vocab_size=300, block_size=8, n_layer=2, n_head=2, n_embd=32, bias=True,
                          activation="gelu_tanh")).eval()
    hf_gpt2.load_hf_state_dict(short, cropped)
    full, _, _ = load_model(str(gpt2_dir))
    ids = batch(2, 8)
    with torch.no_grad():
        torch.testing.assert_close(short(ids)[0], full(ids)[0], rtol=0, atol=0)


def test_loss_matches_cross_entropy_of_transformers_logits(models):
    """The loss the training step logs is cross-entropy of the same logits: checked on every position at once."""
    ours, theirs = models
    x, y = batch(4, 16, seed=3), batch(4, 16, seed=4)
    with torch.no_grad():
        _, loss = ours(x, y)
        expected = F.cross_entropy(theirs(x).logits.reshape(-1, 300), y.reshape(-1))
    assert abs(loss.item() - expected.item()) < 1e-6


def test_attention_options_gpt2_lacks_load_with_a_note(gpt2_dir):
    """qk_norm (for a fine-tuning experiment): every GPT-2 tensor loads, qk_norm's LayerNorms start at identity."""
    pre = locate(str(gpt2_dir))
    model = GPT(GPTConfig(vocab_size=pre.vocab_size, **pre.model, attn={"qk_norm": True}))
    kept = load_weights(model, pre)
    assert kept == [f"blocks.{i}.attn.{n}_norm.{p}" for i in (0, 1) for n in "qk" for p in ("weight", "bias")]
    assert all(torch.equal(model.state_dict()[k], torch.ones(16) if k.endswith("weight") else torch.zeros(16))
               for k in kept)
    theirs = hf_gpt2.read_weights(gpt2_dir)
    assert torch.equal(model.blocks[1].mlp.c_proj.bias, theirs["transformer.h.1.mlp.c_proj.bias"])
    assert attention_note(model.config.to_dict()) == (
        "note: model.attn.qk_norm=True: GPT-2's weights under another attention than GPT-2's (qk_norm's LayerNorms, "
        "which GPT-2 lacks, start at identity); a fine-tuning experiment, not GPT-2.")
    assert attention_note(pre.model) is None
    bug = {"_target_": "tinygpt.experiments.partial_leaks.bugs.AttentionBug", "kind": "off_by_one"}
    assert attention_note({**pre.model, "patch": [bug]}) == (
        "note: model.patch=AttentionBug(kind='off_by_one'): GPT-2's weights under another attention than GPT-2's; a "
        "fine-tuning experiment, not GPT-2.")

"""Every bad init_from is one sentence, said before any work: a dir without config.json, another model type, a
config field our GPT cannot be, missing or foreign or misshapen tensors, no weights, a pickle, no tokenizer, an
override that disagrees with the checkpoint, and an unreachable Hub (within seconds, no retries)."""

import json
import socket
import time

import pytest
import torch
from safetensors.torch import load_file, save_file

from helpers import compose_train, write_hf_gpt2
from tinygpt.runtime import hub
from tinygpt.runtime.errors import ConfigError
from tinygpt.train.init_from import configure, load_model, locate

WHAT_A_DIR_HOLDS = "config.json, model.safetensors or pytorch_model.bin, and tokenizer.json or vocab.json + merges.txt"


@pytest.fixture
def gpt2_dir(tmp_path):
    return write_hf_gpt2(tmp_path / "m")


def refused(source: str) -> str:
    """The one sentence load_model (what sample.py and attention.py call) and locate (train.py's set-up) refuse with."""
    with pytest.raises(ConfigError) as err:
        load_model(source)
    message = str(err.value)
    with pytest.raises(ConfigError) as again:
        locate(source)
    assert "\n" not in message and str(again.value) == message
    return message


def edit_config(d, **fields):
    config = json.loads((d / "config.json").read_text())
    (d / "config.json").write_text(json.dumps({**config, **fields}))


def edit_weights(d, change):
    state = load_file(d / "model.safetensors")
    change(state)
    save_file(state, d / "model.safetensors")


def test_a_dir_without_config_json(gpt2_dir):
    (gpt2_dir / "config.json").unlink()
    assert refused(str(gpt2_dir)) == (
        f"init_from={str(gpt2_dir)!r}: {gpt2_dir} has no config.json; a Hugging Face GPT-2 dir holds config.json, "
        "model.safetensors or pytorch_model.bin, and its tokenizer files.")


def test_another_model_type(gpt2_dir):
    edit_config(gpt2_dir, model_type="llama")
    assert refused(str(gpt2_dir)) == (f"init_from={str(gpt2_dir)!r}: config.json: model_type='llama', not gpt2; "
                                      "init_from loads GPT-2 models only.")


@pytest.mark.parametrize("field, value, expected", [
    ("n_inner", 100, "expected null or 4 * n_embd = 128 (the MLP is 4 times as wide)"),
    ("activation_function", "relu", "expected one of gelu_new, gelu_pytorch_tanh, gelu"),
    ("scale_attn_by_inverse_layer_idx", True, "expected false (tinygpt's GPT has no other)"),
    ("n_layer", 0, "expected a positive integer"),
])
def test_a_config_field_our_gpt_cannot_be(gpt2_dir, field, value, expected):
    edit_config(gpt2_dir, **{field: value})
    assert refused(str(gpt2_dir)) == f"init_from={str(gpt2_dir)!r}: config.json: {field}={value!r}, {expected}."


def test_a_missing_tensor(gpt2_dir):
    edit_weights(gpt2_dir, lambda s: s.pop("transformer.h.1.mlp.c_fc.bias"))
    assert refused(str(gpt2_dir)) == (f"init_from={str(gpt2_dir)!r}: tensor transformer.h.1.mlp.c_fc.bias is "
                                      "missing; a GPT-2 checkpoint of this config has it.")


def test_a_tensor_of_another_shape(gpt2_dir):
    edit_weights(gpt2_dir, lambda s: s.update({"transformer.h.0.attn.c_attn.weight": torch.zeros(32, 64)}))
    assert refused(str(gpt2_dir)) == (f"init_from={str(gpt2_dir)!r}: tensor transformer.h.0.attn.c_attn.weight has "
                                      "shape (32, 64), expected (32, 96) from its config.json.")


def test_a_tensor_of_another_architecture(gpt2_dir):
    edit_weights(gpt2_dir, lambda s: s.update({"model.layers.0.self_attn.q_proj.weight": torch.zeros(4, 4)}))
    assert refused(str(gpt2_dir)) == (
        f"init_from={str(gpt2_dir)!r}: tensor transformer.model.layers.0.self_attn.q_proj.weight has no place in this "
        "model (not a tensor of a 2-layer GPT-2); init_from loads GPT-2 models only.")


def test_an_untied_head(gpt2_dir):
    """Seen when the weights are read (locate reads only their shapes)."""
    edit_weights(gpt2_dir, lambda s: s.update({"lm_head.weight": torch.zeros(300, 32)}))
    with pytest.raises(ConfigError) as err:
        load_model(str(gpt2_dir))
    assert str(err.value) == (f"init_from={str(gpt2_dir)!r}: tensor lm_head.weight is not tied to "
                              "transformer.wte.weight; tinygpt's GPT ties its head to the token embedding, as GPT-2 "
                              "does.")


def test_no_weights(gpt2_dir):
    (gpt2_dir / "model.safetensors").unlink()
    assert refused(str(gpt2_dir)) == (f"init_from={str(gpt2_dir)!r}: {gpt2_dir} has no weights: neither "
                                      "model.safetensors nor pytorch_model.bin (nor their sharded .index.json).")


def test_pytorch_model_bin_loads_with_weights_only_and_a_pickle_is_refused(gpt2_dir):
    state = load_file(gpt2_dir / "model.safetensors")
    (gpt2_dir / "model.safetensors").unlink()
    torch.save({k.removeprefix("transformer."): v for k, v in state.items()}, gpt2_dir / "pytorch_model.bin")
    model, _, _ = load_model(str(gpt2_dir))  # saved from GPT2Model: no "transformer." prefix
    assert torch.equal(model.blocks[1].mlp.c_fc.weight, state["transformer.h.1.mlp.c_fc.weight"].t())
    torch.save({"weights": state, "code": ConfigError("a Python object")}, gpt2_dir / "pytorch_model.bin")
    bin_file = gpt2_dir / "pytorch_model.bin"
    assert refused(str(gpt2_dir)) == (f"init_from={str(gpt2_dir)!r}: {bin_file} holds Python objects other than "
                                      "tensors; not loaded, since such a file can run code (convert it to "
                                      "model.safetensors).")


def test_no_tokenizer(gpt2_dir):
    (gpt2_dir / "tokenizer.json").unlink()
    assert refused(str(gpt2_dir)) == (f"init_from={str(gpt2_dir)!r}: {gpt2_dir} has no tokenizer: neither "
                                      "tokenizer.json nor vocab.json + merges.txt.")


def test_a_file_or_a_path_that_is_no_hub_name(gpt2_dir):
    assert refused(str(gpt2_dir / "config.json")) == (
        f"init_from={str(gpt2_dir / 'config.json')!r} is a file; pass a Hugging Face model dir ({WHAT_A_DIR_HOLDS}) "
        "or a Hub name such as gpt2.")
    assert refused("/no/such/dir") == (
        f"init_from='/no/such/dir': no such directory. Pass a local Hugging Face model dir ({WHAT_A_DIR_HOLDS}) or a "
        "Hub name (gpt2, gpt2-medium, gpt2-large, gpt2-xl, distilgpt2 or owner/name).")


def test_a_mistyped_dir_or_gpt2_name_gets_a_suggestion_before_any_network(gpt2_dir):
    typo = str(gpt2_dir.parent / "nm")  # the fixture's dir is "m"; a sibling that is close enough
    (gpt2_dir.parent / "model-dir").mkdir()
    assert refused(str(gpt2_dir.parent / "model-dri")).startswith(
        f"init_from={str(gpt2_dir.parent / 'model-dri')!r}: no such directory (did you mean "
        f"{gpt2_dir.parent / 'model-dir'}?). Pass a local")
    assert "did you mean" not in refused(typo + "-far-off-name")
    assert refused("gpt2-small") == ("init_from='gpt2-small' is not one of GPT-2's Hub names (gpt2, gpt2-medium, "
                                     "gpt2-large, gpt2-xl, distilgpt2); did you mean gpt2 (GPT-2 small)? Another "
                                     "model is owner/name, or a local dir.")
    assert "did you mean gpt2-medium?" in refused("gpt2-meduim")


# ----------------------------------------------------------------------------- train.py's overrides


def test_an_override_that_disagrees_with_the_checkpoint(gpt2_dir):
    for overrides, message in [
        (["model.n_layer=3"], "model.n_layer=3 conflicts with init_from={d!r}, whose config.json makes it 2: "
                              "init_from sets the model's architecture; drop the override."),
        (["model=small"], "model=small sets model.n_layer=6, which conflicts with init_from={d!r}, whose config.json "
                          "makes it 2: init_from sets the model's architecture; drop model=small."),
        (["model.activation=gelu"], "model.activation='gelu' conflicts with init_from={d!r}, whose config.json makes "
                                    "it 'gelu_tanh': init_from sets the model's architecture; drop the override."),
        (["model.block_size=32"], "model.block_size=32 is longer than the n_positions=16 of init_from={d!r} (its "
                                  "learned positions end there); give at most 16 (a shorter one crops them)."),
        (["data.tokenizer=char"], "data.tokenizer='char' conflicts with init_from={d!r}, whose model reads its own "
                                  "tokens: init_from sets data.tokenizer=pretrained; drop the override."),
    ]:
        overrides = [f"init_from={gpt2_dir}", *overrides]
        with pytest.raises(ConfigError) as err:
            configure(compose_train(overrides), overrides)
        assert str(err.value) == message.format(d=str(gpt2_dir)), overrides


@pytest.mark.parametrize("position", ["none", "rope", "alibi"])
def test_positions_gpt2_lacks_are_refused_before_the_checkpoint_is_read(position, tmp_path):
    """GPT-2's weights were trained with its learned table: another model.position is one sentence, before the dir
    (here: none at all) or the Hub is looked at."""
    source = str(tmp_path / "never-read")
    overrides = [f"init_from={source}", f"model.position={position}"]
    with pytest.raises(ConfigError) as err:
        configure(compose_train(overrides), overrides)
    assert str(err.value) == (f"model.position={position!r} cannot start from init_from={source!r}: GPT-2's weights "
                              "are a model with position='learned'; drop the override, or train from scratch.")


def test_the_checkpoint_sets_the_architecture_and_the_tokenizer(gpt2_dir):
    overrides = [f"init_from={gpt2_dir}", "model.n_layer=2", "model.block_size=8", "model.attn.qk_norm=true"]
    cfg = compose_train(overrides)
    pre = configure(cfg, overrides)
    m = cfg.model
    assert (m.n_layer, m.n_head, m.n_embd, m.block_size, m.bias, m.activation, m.ln_eps) == (
        2, 2, 32, 8, True, "gelu_tanh", 1e-5)  # an agreeing override is fine, a shorter context crops
    assert m.attn.qk_norm is True and m.dropout == 0.0  # not architecture: the user's
    assert (cfg.data.tokenizer, cfg.data.tokenizer_dir, cfg.data.block_size) == ("pretrained", str(gpt2_dir), 8)
    assert pre.vocab_size == 300 and pre.path == gpt2_dir
    assert configure(compose_train([]), []) is None  # init_from=scratch: nothing changes


# ----------------------------------------------------------------------------- the Hub


def test_an_offline_hub_is_one_sentence_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))  # an empty cache
    monkeypatch.delenv("HF_ENDPOINT", raising=False)
    t0 = time.perf_counter()
    assert refused("gpt2") == (
        "init_from='gpt2' is not a local directory, the Hugging Face Hub cannot be used (https://huggingface.co: "
        f"HF_HUB_OFFLINE is set) and its cache has no copy; pass a local model dir ({WHAT_A_DIR_HOLDS}).")
    assert time.perf_counter() - t0 < 5


def test_an_unreachable_hub_is_one_sentence_within_seconds(tmp_path, monkeypatch):
    """A Hub that accepts the connection and never answers: the probe gives up after hub.HUB_TIMEOUT_S, once."""
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(1)
    endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}"
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hf"))
    monkeypatch.setenv("HF_ENDPOINT", endpoint)
    monkeypatch.setattr(hub, "HUB_TIMEOUT_S", 1.0)
    try:
        t0 = time.perf_counter()
        with pytest.raises(ConfigError) as err:
            locate("openai-community/gpt2")
        elapsed = time.perf_counter() - t0
    finally:
        silent.close()
    assert str(err.value) == (
        f"init_from='openai-community/gpt2' is not a local directory, the Hugging Face Hub cannot be used ({endpoint}: "
        f"timed out) and its cache has no copy; pass a local model dir ({WHAT_A_DIR_HOLDS}).")
    assert elapsed < 5


def test_model_gpt2_from_scratch_says_its_weights_are_random():
    from tinygpt.train.init_from import random_gpt2_note

    assert random_gpt2_note("gpt2_medium", "scratch") == (
        "note: model=gpt2_medium is GPT-2's architecture with random weights; init_from=gpt2-medium loads the "
        "pretrained ones.")
    assert random_gpt2_note("gpt2", "/some/dir") is None and random_gpt2_note("baby", "scratch") is None

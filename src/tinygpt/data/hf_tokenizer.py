"""Our tokenizers as `transformers` loads them: the tokenizer files of a Hugging Face model dir, which
``PreTrainedTokenizerFast(tokenizer_file=...)`` and ``AutoTokenizer.from_pretrained(dir)`` read (scripts/export_hf.py).

- ``tokenizer.json``: the tokenizer itself, as `tokenizers` saves it (the same model, pre-tokenizer and vocabulary,
  so the same ids). GPT-2's byte-level BPE (a run with data.tokenizer=pretrained) and ours (``bpe``) are written
  unchanged. The char tokenizer's decoder also shows ``<unk>`` as U+FFFD, as ``tokenizer.decode`` does here, so
  ``decode(encode(text))`` gives the text back in both libraries (with U+FFFD for a character the vocabulary lacks).
- ``tokenizer_config.json``: the class (PreTrainedTokenizerFast), the context length, the special tokens (the char
  tokenizer's ``<unk>``; a byte-level BPE's ``<|endoftext|>`` as its bos, eos and unk, as GPT-2 has them), no
  clean-up of spaces (transformers' clean-up would decode the char tokenizer's ``a .`` as ``a.``), and GPT-2's model
  inputs, ids and attention mask only: PreTrainedTokenizerFast of transformers 4 also returns token_type_ids, which
  GPT2LMHeadModel(**tokenizer(text)) would add to the input as token embeddings.
"""

from __future__ import annotations

from tokenizers import Tokenizer, decoders

from tinygpt.data.tokenizer import EOT, REPLACEMENT, UNK

TOKENIZER_FILE = "tokenizer.json"
CONFIG_FILE = "tokenizer_config.json"


def for_transformers(tok: Tokenizer) -> Tokenizer:
    """A copy of ``tok`` that decodes as ``tinygpt.data.tokenizer.decode`` does (``<unk>`` as U+FFFD)."""
    out = Tokenizer.from_str(tok.to_str())
    if out.token_to_id(UNK) is not None:  # the char tokenizer: every other token is one character
        out.decoder = decoders.Sequence([decoders.Replace(UNK, REPLACEMENT)] + ([tok.decoder] if tok.decoder else []))
    return out


def tokenizer_config(tok: Tokenizer, model_max_length: int) -> dict:
    """tokenizer_config.json for ``tok`` and a model of ``model_max_length`` positions."""
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "model_max_length": model_max_length,
              "clean_up_tokenization_spaces": False,
              "model_input_names": ["input_ids", "attention_mask"]}  # GPT-2's: token_type_ids would add wte rows
    if tok.token_to_id(UNK) is not None:
        config["unk_token"] = UNK
    if tok.token_to_id(EOT) is not None:  # GPT-2's: <|endoftext|> begins, ends and stands for the unknown
        config.update(bos_token=EOT, eos_token=EOT, unk_token=EOT)
    return config


def special_token_ids(tok: Tokenizer | None) -> dict:
    """config.json's bos_token_id and eos_token_id: ``<|endoftext|>``'s id, as GPT-2's; null without it (GPT2Config
    would otherwise make them GPT-2's 50256, outside a smaller vocabulary)."""
    eot = tok.token_to_id(EOT) if tok is not None else None
    return {"bos_token_id": eot, "eos_token_id": eot}

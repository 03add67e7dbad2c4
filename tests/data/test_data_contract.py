"""tinygpt.data's contract in detail: constructor defaults and messages, the corpora, the random-window sampler's
range, the cache's name, layout and build, the loaders. Written to close what a mutation run found unguarded."""

import dataclasses
import itertools
import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch

from hydra.utils import instantiate

from helpers import compose_train, corpus_overrides
from tinygpt.data import corpus
from tinygpt.data import cache
from tinygpt.data.cache import tokenize_to_array
from tinygpt.data.config import DataConfig
from tinygpt.data.datamodule import TextDataModule
from tinygpt.data.windows import RandomWindows, fixed_windows
from tinygpt.data.tokenizer import TokenizerSpec, train_tokenizer


def make_dm(corpus_file, cache_dir, **kw):
    args = dict(block_size=16, batch_size=4, cache_dir=str(cache_dir))
    args.update(kw)
    return TextDataModule(corpus.TextFile(path=str(corpus_file)), **args)


# ----------------------------------------------------------------------------- constructor


def test_constructor_defaults_are_the_configs_defaults():
    """Using TextDataModule and the corpora from Python gives the recipe `python train.py` uses."""
    defaults = {f.name: f.default for f in dataclasses.fields(DataConfig)}  # TextDataModule's settings
    cfg = compose_train()
    for key in ("tokenizer", "bpe_vocab_size", "tokenizer_dir", "train_fraction", "block_size", "batch_size",
                "val_batch_size", "val_windows", "seed", "overfit"):
        assert defaults[key] == cfg.data[key], key
    assert defaults["cache_dir"] == "data/cache"
    assert TextDataModule().corpus == corpus.Shakespeare() == instantiate(cfg.corpus)
    rand = compose_train(["corpus=random_tokens"]).corpus
    assert corpus.RandomTokens() == corpus.RandomTokens(rand.vocab_size, rand.n_tokens, cfg.seed)
    assert corpus.RandomTokens().n_tokens == 1_000_000
    hub = compose_train(["corpus=hf_hub", "corpus.name=some/set"]).corpus
    assert corpus.HfHub("some/set") == corpus.HfHub("some/set", hub.config, hub.split, hub.text_column)


@pytest.mark.parametrize("source", list(corpus.CORPORA))
def test_each_corpus_option_builds_the_class_its_source_names(source, corpus_file):
    """configs/corpus/<source>.yaml: its _target_ and its own fields; the data module gets the built corpus."""
    own = ["corpus.vocab_size=50", "corpus.n_tokens=5000", "seed=7"] if source == "random_tokens" else []
    cfg = compose_train([*corpus_overrides(source, corpus_file), *own])
    built = instantiate(cfg.corpus)
    assert type(built) is corpus.CORPORA[source] and built.source == source
    dm = instantiate(cfg.data, built)
    assert dm.corpus is built and dm.source == source
    if source == "random_tokens":
        assert (built.vocab_size, built.n_tokens, built.seed, dm.seed) == (50, 5000, 7, 7)


CORPUS_BAD = [
    (lambda: corpus.TextFile(), "corpus=text_file needs corpus.path=<file> (one or more UTF-8 text files)."),
    (lambda: corpus.TextFile([]), "corpus=text_file needs corpus.path=<file> (one or more UTF-8 text files)."),
    (lambda: corpus.TextFile("/no/such.txt"), "corpus.path='/no/such.txt' is not a file."),
    (lambda: corpus.HfHub(), "corpus=hf_hub needs corpus.name=<hub id or local dataset directory>."),
    (lambda: corpus.RandomTokens(vocab_size=0), "corpus.vocab_size=0 must be a positive integer."),
    (lambda: corpus.RandomTokens(vocab_size=True), "corpus.vocab_size=True must be a positive integer."),
    (lambda: corpus.RandomTokens(vocab_size=1), "corpus.vocab_size=1 must be at least 2 for random_tokens."),
    (lambda: corpus.RandomTokens(n_tokens=0), "corpus.n_tokens=0 must be a positive integer."),
]


@pytest.mark.parametrize("build, message", CORPUS_BAD, ids=[b[1][:40] for b in CORPUS_BAD])
def test_each_corpus_checks_its_own_fields(build, message):
    with pytest.raises(ValueError) as err:
        build()
    assert str(err.value) == message


def test_a_corpus_key_is_not_a_data_key(corpus_file):
    """The data module takes the built corpus and its own settings only: a corpus's key given to it (data.path, as
    configs written before the corpus group had it) is refused as any unknown setting is."""
    files = corpus.TextFile(str(corpus_file))
    assert TextDataModule(files).corpus is files
    for key, value in (("name", "some/set"), ("path", str(corpus_file)), ("source", "text_file")):
        with pytest.raises(TypeError, match=rf"unexpected keyword argument '{key}'$"):
            TextDataModule(files, **{key: value})


BAD = [
    (dict(tokenizer="word"), "data.tokenizer='word' is not one of char, bpe, pretrained."),
    (dict(tokenizer="pretrained"), "data.tokenizer=pretrained needs data.tokenizer_dir=<a Hugging Face model dir "
                                   "with tokenizer.json or vocab.json + merges.txt> (init_from sets it)."),
    (dict(tokenizer="pretrained", tokenizer_dir="/no/such"), "data.tokenizer_dir='/no/such' is not a directory."),
    (dict(tokenizer_dir="/no/such"), "data.tokenizer_dir='/no/such' is used only with data.tokenizer=pretrained (this "
                                     "run has data.tokenizer='char'); add data.tokenizer=pretrained to tokenize with "
                                     "it, or init_from=/no/such to start from its weights too."),
    (dict(tokenizer="bpe", bpe_vocab_size=256),
     "data.bpe_vocab_size=256 is too small for byte-level BPE: it needs at least 257 (256 bytes + <|endoftext|>)."),
    (dict(train_fraction=0.0), "data.train_fraction=0.0 must be between 0 and 1."),
    (dict(train_fraction=1.0), "data.train_fraction=1.0 must be between 0 and 1."),
    (dict(batch_size=0), "data.batch_size=0 must be a positive integer."),
    (dict(block_size=0), "data.block_size=0 must be a positive integer."),
    (dict(val_windows=0), "data.val_windows=0 must be a positive integer."),
    (dict(val_batch_size=0), "data.val_batch_size=0 must be a positive integer."),
]


@pytest.mark.parametrize("kw, message", BAD, ids=[b[1][:40] for b in BAD])
def test_each_bad_setting_is_named_exactly(kw, message):
    with pytest.raises(ValueError) as err:
        TextDataModule(**kw)
    assert str(err.value) == message


def test_boundary_values_are_accepted():
    TextDataModule(tokenizer="bpe", bpe_vocab_size=257)
    TextDataModule(corpus.RandomTokens(vocab_size=2))
    TextDataModule(corpus.RandomTokens(vocab_size=2**31))
    TextDataModule(corpus.RandomTokens(), tokenizer="bpe")  # random tokens use none: any of the three is accepted
    with pytest.raises(ValueError, match=r"^data.tokenizer='word' is not one of char, bpe, pretrained.$"):
        TextDataModule(corpus.RandomTokens(), tokenizer="word")  # a misspelling is refused, whatever the corpus
    TextDataModule(batch_size=1, block_size=1, val_windows=1, val_batch_size=1, train_fraction=0.5)
    assert TextDataModule().tokenizer is None


# ----------------------------------------------------------------------------- windows


def test_random_windows_reach_both_ends_of_the_ids_and_nothing_beyond():
    ids = np.arange(6, dtype=np.uint16)  # block_size 4: a window holds 5 tokens, so starts 0 and 1 only
    ds = RandomWindows(ids, block_size=4, batch_size=64, seed=0)
    starts = set(ds.batch(0)[0][:, 0].tolist())
    assert starts == {0, 1}


def test_overfit_repeats_step_zeros_batch_and_iteration_starts_at_step_zero():
    ids = np.arange(500, dtype=np.uint16)
    plain = RandomWindows(ids, 8, 4, seed=3)
    assert not torch.equal(plain.batch(5)[0], plain.batch(0)[0])
    over = RandomWindows(ids, 8, 4, seed=3, overfit=True)
    assert torch.equal(over.batch(5)[0], plain.batch(0)[0]) and torch.equal(over.batch(1)[1], plain.batch(0)[1])
    first = next(iter(RandomWindows(ids, 8, 4, seed=3)))
    assert torch.equal(first[0], plain.batch(0)[0])


def test_fixed_windows_do_not_overlap():
    ids = np.arange(16)
    x, y = fixed_windows(ids, block_size=4, max_windows=100)
    assert len(x) == 3  # 16 tokens hold 3 non-overlapping windows of 4 + 1
    assert (x[1:, 0] >= x[:-1, 0] + 4).all() and int(y[-1, -1]) <= 15


def test_more_validation_windows_than_the_split_holds_is_said_once(corpus_file, tmp_path, capsys):
    """data.val_windows is a maximum: asking for 10^8 uses every window the split holds, and says how many."""
    dm = make_dm(corpus_file, tmp_path, val_windows=10**8)
    dm.setup()
    dm.setup()
    n = len(dm.val_x)
    assert 0 < n < 10**8
    printed = capsys.readouterr().out.replace("\n", "")
    assert printed.count("note: data.val_windows=100000000") == 1
    assert (f"note: data.val_windows=100000000, but the validation split holds {n:,} windows of 16 tokens; all {n:,} "
            "are used at each validation (the end of the run caps its own at diagnostics.max_val_tokens).") in printed
    quiet = make_dm(corpus_file, tmp_path, val_windows=n)
    quiet.setup()
    assert "note:" not in capsys.readouterr().out


# ----------------------------------------------------------------------------- cache


def test_cache_dir_names(corpus_file, tmp_path):
    """The names earlier runs' caches are found by: each corpus's cache key, then the cache's version."""
    import hashlib

    text = corpus_file.read_text()
    h = hashlib.sha256(text.encode("utf-8")).hexdigest()[:12]
    char, bpe = TokenizerSpec.checked("char", 512), TokenizerSpec.checked("bpe", 300)
    files = corpus.TextFile(str(corpus_file))
    assert cache.dir_for(tmp_path, files.cache_key(text, char, 0.9)) == tmp_path / f"text_file-{h}-char-f0.9-c1"
    assert files.cache_key(text, bpe, 0.9) == f"text_file-{h}-bpe300-f0.9"
    assert corpus.Shakespeare().cache_key(text, char, 0.8) == f"shakespeare-{h}-char-f0.8"
    assert corpus.HfHub("some/set").cache_key(text, char, 0.9) == f"hf_hub-{h}-char-f0.9"
    r = corpus.RandomTokens(vocab_size=50, n_tokens=5000, seed=7)
    assert r.cache_key(None, None, 0.9) == "random_tokens-v50-n5000-s7"
    dm = make_dm(corpus_file, tmp_path, tokenizer="bpe", bpe_vocab_size=300)
    dm.prepare_data()
    assert dm.cache_path == tmp_path / f"text_file-{h}-bpe300-f0.9-c1"
    r = TextDataModule(corpus.RandomTokens(vocab_size=50, n_tokens=5000, seed=7), seed=7, cache_dir=str(tmp_path))
    r.prepare_data()
    assert r.cache_path == tmp_path / "random_tokens-v50-n5000-s7-c1"


def test_the_cache_layout_meta_and_memory_mapping(corpus_file, tmp_path):
    dm = make_dm(corpus_file, tmp_path / "a" / "b" / "cache")  # parents created
    dm.setup()
    meta = json.loads((dm.cache_path / "meta.json").read_text())
    assert meta == {"source": "text_file", "tokenizer": "char", "vocab_size": dm.vocab_size,
                    "train_tokens": len(dm.train_ids), "val_tokens": len(dm.val_ids)}
    assert isinstance(dm.train_ids, np.memmap) and isinstance(dm.val_ids, np.memmap)
    assert dm.train_ids.dtype == dm.val_ids.dtype == np.uint16
    assert not [p for p in dm.cache_path.parent.iterdir() if ".tmp-" in p.name]  # no temporary dir left


@pytest.mark.parametrize("vocab, dtype", [(65536, np.uint16), (65537, np.int32)])
def test_random_token_ids_use_uint16_while_the_vocab_fits(tmp_path, vocab, dtype):
    dm = TextDataModule(corpus.RandomTokens(vocab_size=vocab, n_tokens=2000), block_size=8, cache_dir=str(tmp_path))
    dm.setup()
    assert dm.train_ids.dtype == dtype and int(dm.train_ids.max()) < vocab
    assert json.loads((dm.cache_path / "meta.json").read_text())["tokenizer"] is None


def test_a_builder_that_loses_the_race_keeps_the_winners_cache(corpus_file, tmp_path, monkeypatch):
    """Another process renames its complete cache into place while this one builds: ours is dropped, no error."""
    dm = make_dm(corpus_file, tmp_path / "cache")
    build = dm.corpus.build_cache

    def build_and_lose(out, text, tokenizer, train_fraction):
        build(out, text, tokenizer, train_fraction)
        final = cache.dir_for(dm.cache_root, dm.corpus.cache_key(text, tokenizer, train_fraction))
        (final.parent / "winner").mkdir()
        build(final.parent / "winner", text, tokenizer, train_fraction)
        (final.parent / "winner").rename(final)  # the other process finishes first

    monkeypatch.setattr(dm.corpus, "build_cache", build_and_lose)
    dm.setup()
    assert (dm.cache_path / "meta.json").exists()
    assert not [p for p in dm.cache_path.parent.iterdir() if ".tmp-" in p.name]  # our temporary dir removed


def test_empty_corpus_and_too_small_splits_are_named(tmp_path):
    nothing = tmp_path / "nothing.txt"
    nothing.write_text("")
    with pytest.raises(ValueError) as err:  # a file of 0 bytes: said by the corpus's settings, before torch
        corpus.TextFile(path=str(nothing))
    assert str(err.value) == f"corpus.path={str(nothing)!r} is empty; give a text file to train on."
    empty = tmp_path / "empty.txt"  # blank lines only: found when the text is read
    empty.write_text("\n\n")
    with pytest.raises(ValueError) as err:
        TextDataModule(corpus.TextFile(path=str(empty)), cache_dir=str(tmp_path / "c")).setup()
    assert str(err.value) == "the corpus for corpus=text_file is empty."
    small = tmp_path / "small.txt"
    small.write_text("abcdefghij" * 20)  # 200 chars: 180 train, 20 validation
    with pytest.raises(ValueError) as err:
        TextDataModule(corpus.TextFile(path=str(small)), block_size=19, cache_dir=str(tmp_path / "c")).setup()
    assert str(err.value) == ("the validation split has 20 tokens, fewer than data.block_size + 2 = 21; use a larger "
                              "corpus or a smaller block_size.")
    TextDataModule(corpus.TextFile(path=str(small)), block_size=18, cache_dir=str(tmp_path / "c")).setup()  # 20 ok
    with pytest.raises(ValueError, match="^the train split has 180 tokens, fewer than data.block_size"):
        TextDataModule(corpus.TextFile(path=str(small)), block_size=179, train_fraction=0.9,
                       cache_dir=str(tmp_path / "c")).setup()


def test_tokenize_to_array_dtype_and_empty_text():
    tok = train_tokenizer("char", ["abc\n"])
    ids = tokenize_to_array(tok, "abca\n", np.uint16)
    assert ids.dtype == np.uint16 and ids.tolist() == [tok.token_to_id(c) for c in "abca\n"]
    empty = tokenize_to_array(tok, "", np.uint16)
    assert empty.shape == (0,) and empty.dtype == np.uint16


def test_shakespeare_text_is_read_from_the_cache_or_converted_into_scratch(tmp_path, monkeypatch):
    root, scratch = tmp_path / "cache", tmp_path / "scratch"
    plays = corpus.Shakespeare()
    converted = tmp_path / "converted.txt"
    converted.write_text("ROMEO:\nhello\n")
    calls = []
    monkeypatch.setattr(corpus, "shakespeare_text_file", lambda where: calls.append(where) or converted)
    assert plays.text(root, scratch) == "ROMEO:\nhello\n" and calls == [scratch]  # not converted yet: into scratch
    root.mkdir()
    (root / corpus.SHAKESPEARE_FILE).write_text("JULIET:\nhi\n")
    assert plays.text(root, scratch) == "JULIET:\nhi\n" and calls == [scratch]  # the cached conversion, as is


def test_hf_hub_settings_reach_the_reader(tmp_path, monkeypatch):
    seen = {}
    monkeypatch.setattr(corpus, "read_hf_dataset", lambda name, **kw: seen.update(name=name, **kw) or "text")
    hub = corpus.HfHub(name="some/set", config="cfg", split="valid", text_column="body")
    assert hub.text(tmp_path / "cache", tmp_path) == "text"  # `datasets`' own cache goes under the scratch dir
    assert seen == {"name": "some/set", "config": "cfg", "split": "valid", "text_column": "body", "cache_dir": tmp_path}


# ----------------------------------------------------------------------------- loaders


def test_the_train_loader_continues_at_the_trainers_step_and_rank(corpus_file, cache_dir):
    dm = make_dm(corpus_file, cache_dir, seed=9, overfit=False)
    dm.setup()
    dm.trainer = SimpleNamespace(global_step=3, global_rank=1, world_size=2, max_steps=5)
    batches = list(dm.train_dataloader())
    ref = RandomWindows(dm.train_ids, 16, 4, seed=9)
    ref.rank, ref.world_size = 1, 2
    assert len(batches) == 2 and all(torch.equal(b[0], ref.batch(s)[0]) for b, s in zip(batches, (3, 4), strict=True))
    dm.trainer = SimpleNamespace(global_step=0, global_rank=0, world_size=1, max_steps=1)
    assert len(list(dm.train_dataloader())) == 1
    dm.trainer = SimpleNamespace(global_step=0, global_rank=0, world_size=1, max_steps=-1)  # no step limit: endless
    assert len(list(itertools.islice(dm.train_dataloader(), 7))) == 7
    over = make_dm(corpus_file, cache_dir, seed=9, overfit=True)
    over.setup()
    over.trainer = SimpleNamespace(global_step=2, global_rank=0, world_size=1, max_steps=4)
    a, b = list(over.train_dataloader())
    assert torch.equal(a[0], b[0])  # overfit reaches the sampler


def test_the_validation_loader_keeps_order_and_batch_size(corpus_file, cache_dir):
    dm = make_dm(corpus_file, cache_dir, val_batch_size=5, val_windows=12)
    dm.setup()
    batches = list(dm.val_dataloader())
    assert [len(b[0]) for b in batches] == [5, 5, min(12, len(dm.val_x)) - 10][: len(batches)]
    assert torch.equal(torch.cat([b[0] for b in batches]), dm.val_x)


def test_encode_without_a_tokenizer_says_what_to_do(tmp_path):
    dm = TextDataModule(corpus.RandomTokens(vocab_size=50, n_tokens=5000), block_size=8, cache_dir=str(tmp_path))
    dm.setup()
    with pytest.raises(ValueError) as err:
        dm.encode("abc")
    assert str(err.value) == "this data source has no tokenizer (random_tokens); pass token ids instead."


def test_a_second_prepare_returns_at_once(corpus_file, tmp_path, monkeypatch):
    dm = make_dm(corpus_file, tmp_path / "cache")
    dm.prepare_data()
    monkeypatch.setattr(dm.corpus, "text", lambda root, where: pytest.fail("read again"))
    dm.prepare_data()  # the cache is known: nothing is read again
    dm.setup()
    assert len(dm.train_ids) > 0


def test_random_tokens_build_into_a_cache_dir_whose_parents_do_not_exist(tmp_path):
    dm = TextDataModule(corpus.RandomTokens(vocab_size=20, n_tokens=3000), block_size=8,
                        cache_dir=str(tmp_path / "a" / "b" / "c"))
    dm.setup()
    assert dm.cache_path.parent == tmp_path / "a" / "b" / "c" and len(dm.train_ids) == 2700


def test_local_files_read_as_datasets_text_loader_reads_them(tmp_path):
    """The cache key hashes this text: reading without `datasets` must give its exact string (newlines
    translated, files joined by one newline, no trailing newline added or removed)."""
    from datasets import load_dataset

    a, b = tmp_path / "a.txt", tmp_path / "b.txt"
    a.write_bytes("ROMEO:\r\nBut soft,\r\nwhat light\n".encode())
    b.write_bytes("JULIET:\nAy me.\n\n  spaced  ".encode())
    ds = load_dataset("text", data_files=[str(a), str(b)], sample_by="document", split="train",
                      cache_dir=str(tmp_path / "hf"))
    assert corpus.read_text_files([a, b]) == "\n".join(ds["text"]) == (
        "ROMEO:\nBut soft,\nwhat light\n\nJULIET:\nAy me.\n\n  spaced  ")


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_a_warm_cache_is_used_without_importing_datasets(corpus_file, tmp_path):
    import subprocess
    import sys

    make_dm(corpus_file, tmp_path / "cache").setup()  # build it
    code = ("import sys\nfrom tinygpt.data import corpus\nfrom tinygpt.data.datamodule import TextDataModule\n"
            f"dm = TextDataModule(corpus.TextFile(path={str(corpus_file)!r}), block_size=16, batch_size=4, "
            f"cache_dir={str(tmp_path / 'cache')!r})\n"
            "dm.setup()\nprint(len(dm.train_ids), 'datasets' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    out = out.strip().splitlines()[-1].split()  # after the note on the validation windows this small corpus holds
    assert int(out[0]) > 0 and out[1] == "False"

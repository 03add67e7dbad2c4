"""The token cache's directory check: a cache dir that cannot hold the cache is found before any work."""


import pytest

from tinygpt.data.corpus import RandomTokens
from tinygpt.data.datamodule import TextDataModule


def test_a_cache_dir_that_cannot_be_created_is_one_sentence_before_any_work(tmp_path):
    ids = RandomTokens(vocab_size=50, n_tokens=5000)
    dm = TextDataModule(ids, block_size=8, cache_dir="/proc/tinygpt-cache")  # root passes os.access there, yet
    # cannot create a file
    with pytest.raises(ValueError, match=r"^data.cache_dir='/proc/tinygpt-cache' cannot hold the token cache "
                                         r"\(no file can be created in /proc \(.*\)\) and has no cache for this "
                                         r"corpus yet; set "):
        dm.prepare_data()
    fresh = TextDataModule(ids, block_size=8, cache_dir=str(tmp_path / "new" / "cache"))
    fresh.prepare_data()  # a cache dir that does not exist yet is made
    assert (fresh.cache_path / "meta.json").exists() and fresh.cache_path.parent == tmp_path / "new" / "cache"

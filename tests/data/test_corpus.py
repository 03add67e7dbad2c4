"""Reading a corpus from the Hub when the Hub cannot be reached: one sentence at once, or the local copy."""

import time

import pytest

from tinygpt.data import corpus
from tinygpt.runtime.network import REACH_TIMEOUT_S


def test_an_unreachable_hub_without_a_local_copy_is_one_sentence_at_once(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")  # a closed local port stands in for no network
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    t0 = time.perf_counter()
    with pytest.raises(ValueError, match=r"^corpus.name='someone/corpus': the Hugging Face Hub \(http://127.0.0.1:9\) "
                                         r"is unreachable \(.*\) and there is no local copy under .*hf; connect"):
        corpus.hub_reachable_or_cached("someone/corpus", tmp_path / "hf")
    assert time.perf_counter() - t0 < REACH_TIMEOUT_S * 3
    (tmp_path / "hf" / "someone___corpus").mkdir(parents=True)  # what datasets leaves after a first download
    corpus.hub_reachable_or_cached("someone/corpus", tmp_path / "hf")  # the local copy will do
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    corpus.hub_reachable_or_cached("other/corpus", tmp_path / "hf")  # offline by choice: datasets decides

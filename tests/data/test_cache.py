"""The token cache's directory checks."""

from pathlib import Path


def test_a_cache_dir_that_cannot_be_created_is_found_before_any_work(tmp_path):
    from tinygpt.data.cache import unwritable

    assert unwritable(tmp_path / "a" / "b") is None and (tmp_path / "a" / "b").is_dir()
    reason = unwritable(Path("/proc/tinygpt-cache"))  # root passes os.access there, yet mkdir fails
    assert reason is not None and reason.startswith("/proc/tinygpt-cache: ")
    (tmp_path / "f").write_text("x")
    assert unwritable(tmp_path / "f" / "cache") == f"{tmp_path / 'f'} is not a directory"

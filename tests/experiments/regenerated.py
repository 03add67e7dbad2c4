"""The check every report's synthetic tests share: a report written again from the records it kept is the same bytes."""

from tinygpt.experiments import report


def assert_regenerates(name: str, out, again, files: tuple[str, ...], max_bytes: int) -> None:
    """``out`` holds ``name``'s report and its runs.json.gz (under ``max_bytes``); written from that file into
    ``again``, each of ``files`` is the same bytes."""
    kept = out / "runs.json.gz"
    assert kept.is_file() and kept.stat().st_size < max_bytes
    report.write(name, [kept], again)
    for file in files:
        assert (again / file).read_bytes() == (out / file).read_bytes(), file

"""scripts/attention.py as the shell sees it, in-process on a small random checkpoint: bad --out and --png paths and
bad token ids are one line with exit status 2 before any work, nothing left behind; without --out the page goes
into the run dir it reads, and the run, its real step, and the page's place are printed."""

import json
import re
from pathlib import Path

import pytest

from helpers import write_checkpoint
from tinygpt.cli.attention_page import main


@pytest.fixture
def run(tmp_path):
    """A run dir holding a random token-id checkpoint (vocabulary 64, context 16) saved at step 60."""
    write_checkpoint(tmp_path / "run" / "checkpoints" / "last.ckpt")
    return tmp_path / "run"


def attention(capsys, *args) -> tuple[int, str, str]:
    """scripts/attention.py ARGS in-process: (exit status, stdout, stderr)."""
    code = main([*map(str, args)])
    out, err = capsys.readouterr()
    return code, out, err


def one_error(err: str) -> str:
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: attention: "), err
    return lines[0]


def test_an_existing_directory_as_out_is_one_line_and_leaves_nothing(run, tmp_path, capsys):
    target = tmp_path / "pages"
    target.mkdir()
    code, out, err = attention(capsys, "--ckpt", run, "--text", "1 2 3", "--out", target)
    assert code == 2 and out == ""
    assert one_error(err) == (f"error: attention: --out={target} is a directory; give the page's file name, e.g. "
                              f"{target / 'attention.html'}.")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["pages", "run"]  # no pages.tmp.html beside it
    assert list(target.iterdir()) == [] and not (run / "attention").exists()


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_an_out_where_no_file_can_be_created_is_one_line(run, capsys):
    code, _, err = attention(capsys, "--ckpt", run, "--text", "1 2 3", "--out", "/proc/x.html")
    assert code == 2 and "--out=/proc/x.html cannot be written: no file can be created in /proc" in one_error(err)


def test_an_existing_file_as_png_dir_is_refused_before_the_page_is_written(run, tmp_path, capsys):
    (tmp_path / "taken").write_text("mine")
    page = tmp_path / "page.html"
    code, _, err = attention(capsys, "--ckpt", run, "--text", "1 2 3", "--out", page, "--png", tmp_path / "taken")
    assert code == 2
    assert one_error(err) == f"error: attention: --png={tmp_path / 'taken'} is an existing file; give a directory for "\
                             "the PNGs."
    assert not page.exists() and (tmp_path / "taken").read_text() == "mine"


def test_an_out_file_that_is_not_an_attention_page_is_kept_unless_forced(run, tmp_path, capsys):
    """--out notes.txt had replaced the user's file with the page; a page this script wrote is replaced, as is any
    file with --force."""
    notes = tmp_path / "notes.txt"
    notes.write_text("my notes")
    code, out, err = attention(capsys, "--ckpt", run, "--text", "1 2 3", "--out", notes)
    assert code == 2 and out == ""
    assert one_error(err) == (f"error: attention: --out={notes} is an existing file that is not an attention page; "
                              "give a new file name, or --force to replace it.")
    assert notes.read_text() == "my notes" and not (run / "attention").exists()
    page = tmp_path / "page.html"
    assert attention(capsys, "--ckpt", run, "--text", "1 2 3", "--out", page)[0] == 0
    assert attention(capsys, "--ckpt", run, "--text", "3 2 1", "--out", page)[0] == 0  # its own page: replaced
    assert attention(capsys, "--ckpt", run, "--text", "1 2 3", "--out", notes, "--force")[0] == 0
    assert b'id="tinygpt-explorer"' in notes.read_bytes()


@pytest.mark.parametrize("text, says", [
    ("3 14 999", "token id 999 in --text '3 14 999' is outside this checkpoint's vocabulary of 64 tokens; give ids "
                 "from 0 to 63."),
    ("hello", "this checkpoint has no tokenizer (its data were token ids, e.g. random_tokens): give the text as "
              "space-separated ids, e.g. --text '3 14 15', not 'hello'."),
])
def test_bad_token_ids_are_named_in_one_line(run, tmp_path, capsys, text, says):
    code, _, err = attention(capsys, "--ckpt", run, "--text", text, "--out", tmp_path / "page.html")
    assert code == 2 and one_error(err) == f"error: attention: {says}"
    assert not (tmp_path / "page.html").exists()


def test_without_out_the_page_goes_into_the_newest_run_with_its_real_step(run, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    newest = write_checkpoint(tmp_path / "outputs" / "day" / "checkpoints" / "last.ckpt", step=60)
    code, out, err = attention(capsys, "--text", "1 2 3 4 5", "--png", tmp_path / "png")
    assert code == 0
    assert f"# {newest.relative_to(tmp_path)} (step 60)" in err.splitlines()  # the run it uses
    pages = list((tmp_path / "outputs" / "day" / "attention").glob("last_step60_*.html"))
    assert len(pages) == 1 and f"-> {pages[0].relative_to(tmp_path)}" in out
    assert sorted(p.name for p in tmp_path.iterdir()) == ["outputs", "png", "run"]  # nothing in the working dir
    data = json.loads(re.search(r"const D = (\{.*?\});\n", pages[0].read_text(), re.S).group(1))
    assert data["steps"] == [60] and data["causal"] is True
    assert sorted(p.name for p in (tmp_path / "png").iterdir()) == ["step000060_layer0.png", "step000060_layer1.png"]


def test_an_unknown_character_has_a_two_character_label_that_fits_its_cell():
    """'€' is not in a tokenizer trained on plain letters: its label is '¿€' (was '<unk>:€', seven characters that
    overflowed the text strip's cell and the key axis), and the note says what '¿' means."""
    from tinygpt.cli.attention_page import tokens
    from tinygpt.data.tokenizer import train_tokenizer

    tok = train_tokenizer("char", ["abc de"])
    ids, labels, notes = tokens(tok, "a€b", block_size=16, vocab_size=tok.get_vocab_size())
    assert labels == ["a", "¿€", "b"] and max(map(len, labels)) <= 2
    assert notes == ["note: '€' not in the vocabulary; the model sees <unk> there (the page shows '€' as ¿€)"]


def test_the_page_names_the_positions_and_clips_the_text_to_the_models_context(tmp_path, capsys):
    """A rope model's page says so in its title; the text is clipped to block_size (16), unless the model attends
    past it (model.extrapolate=true)."""
    text = " ".join(["1"] * 20)
    for name, model, length in (("learned", {}, 16), ("rope", {"position": "rope"}, 16),
                                ("long", {"position": "rope", "extrapolate": True}, 20)):
        write_checkpoint(tmp_path / name / "checkpoints" / "last.ckpt", model=model)
        page = tmp_path / f"{name}.html"
        code, out, err = attention(capsys, "--ckpt", tmp_path / name, "--text", text, "--out", page)
        assert code == 0, err
        assert ("clipped to the model's block_size 16" in err) == (length == 16), name
        data = json.loads(re.search(r"const D = (\{.*?\});\n", page.read_text(), re.S).group(1))
        assert data["T"] == length, name
        assert data["title"].endswith("(causal)" if name == "learned" else "(causal, rope positions)"), data["title"]

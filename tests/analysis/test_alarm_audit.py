"""scripts/alarm_audit.py's input checks: a path that cannot be a sweep, or a broken summary.json, is one line
and exit status 2 (a mistyped path must not pass the audit with 0 runs)."""

import json

import pytest

from tinygpt.analysis import alarm_audit


def audit(capsys, *paths) -> tuple[int, list[str]]:
    code = alarm_audit.main([str(p) for p in paths])
    return code, capsys.readouterr().err.strip().splitlines()


def test_a_missing_path_is_one_line_and_exit_2(tmp_path, capsys):
    code, err = audit(capsys, tmp_path / "no_such_sweep")
    assert code == 2 and err == [f"error: {tmp_path / 'no_such_sweep'} does not exist; give a sweep or run "
                                 "directory (multirun/<experiment>/<date_time>)."]


def test_a_file_is_not_a_sweep(tmp_path, capsys):
    path = tmp_path / "README.md"
    path.write_text("# not a sweep\n")
    code, err = audit(capsys, path)
    assert code == 2 and len(err) == 1 and err[0].startswith(f"error: {path} is not a directory;")


def test_a_dir_without_runs_is_refused(tmp_path, capsys):
    (tmp_path / "empty" / "0").mkdir(parents=True)
    code, err = audit(capsys, tmp_path / "empty")
    assert code == 2 and err == [f"error: {tmp_path / 'empty'} holds no runs (no summary.json under it); give a "
                                 "sweep or run directory."]


@pytest.mark.parametrize("text", ['{"status": "completed", "config": {"mod', "[1, 2]", ""])
def test_a_broken_summary_names_the_file(tmp_path, capsys, text):
    good, bad = tmp_path / "sweep" / "0", tmp_path / "sweep" / "1"
    for d in (good, bad):
        d.mkdir(parents=True)
    (good / "summary.json").write_text(json.dumps({"status": "completed", "config": {"model": {"attn": {}}}}))
    (bad / "summary.json").write_text(text)
    code, err = audit(capsys, tmp_path / "sweep")
    assert code == 2 and len(err) == 1, err
    assert err[0].startswith(f"error: {bad / 'summary.json'} is not a readable summary.json (")


def test_a_sweep_without_causal_runs_still_audits(tmp_path, capsys):
    run = tmp_path / "sweep" / "0"
    run.mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({"config": {"model": {"attn": {"causal": False}}}}))
    assert alarm_audit.main([str(tmp_path / "sweep")]) == 0
    assert "alarm audit: 0 causal runs, 0 false alarms" in capsys.readouterr().out


def test_the_audit_leaves_the_callers_thread_count_alone(tmp_path):
    """main() runs with one thread (many small models) and restores the caller's: called in-process (as these
    tests do) it once left the test session at one thread, which a later test compared against."""
    import torch

    from tinygpt.analysis.alarm_audit import main

    before = torch.get_num_threads()
    main([str(tmp_path / "nowhere")])
    assert torch.get_num_threads() == before


def test_the_audit_rebuilds_a_finished_runs_data_and_model(tmp_path, capsys, corpus_file, cache_dir):
    """A real tiny causal run, trained in this process, audited from its own files: its corpus and data module are
    rebuilt from its summary.json and its model from its checkpoint, and the alarm stays silent."""
    from helpers import TINY, train_in_process

    train_in_process(tmp_path / "sweep" / "0", [*TINY, "corpus=text_file", f"corpus.path={corpus_file}",
                                                f"data.cache_dir={cache_dir}", "logger=csv"])
    assert alarm_audit.main([str(tmp_path / "sweep")]) == 0
    assert "alarm audit: 1 causal runs, 0 false alarms" in capsys.readouterr().out

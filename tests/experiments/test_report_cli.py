"""What scripts/report.py accepts as results: completed runs of its own experiment; where it writes."""

import json
from pathlib import Path

import numpy as np
import pytest

from helpers import write_job as write_run
from tests.experiments.causal_mask.test_causal_mask_report import cm_config
from tests.experiments.sqrt_dk.design2_synthetic_sweep import config as sq_config
from tinygpt.analysis.sweep import load_runs
from tinygpt.experiments import report


def hydra_files(run_dir, experiment, overrides, swept=None):
    """What Hydra records of a job: its config's choices, the sweep config's params (``swept``: key -> values)
    and the job's overrides."""
    (run_dir / ".hydra").mkdir()
    choices = f"      experiment: {experiment}\n" if experiment else "      experiment: null\n"
    params = "".join(f"      {k}: {v}\n" for k, v in (swept or {}).items())
    sweeper = f"  sweeper:\n    params:\n{params}" if params else ""
    (run_dir / ".hydra" / "hydra.yaml").write_text(f"hydra:\n{sweeper}  runtime:\n    choices:\n{choices}")
    (run_dir / ".hydra" / "overrides.yaml").write_text("".join(f"- {o}\n" for o in overrides))


def causal_sweep(root, experiment="causal_mask", extra=(), status=None):
    """A synthetic causal_mask sweep: T = 64, causal and leaky, 3 seeds."""
    rng = np.random.default_rng(0)
    job = 0
    for causal in (True, False):
        for seed in (1, 2, 3):
            w = rng.uniform(1.5, 2.5, (32, 64)) if causal else rng.uniform(0, 0.01, (32, 64))
            d = root / str(job)
            write_run(d, config=cm_config(64, causal, seed), windows=w, train_loss=np.full(800, 2.0),
                      summary={"train_loss": 2.0})
            hydra_files(d, experiment, [f"model.attn.causal={causal}", f"seed={seed}", *extra]
                        + ([f"experiment={experiment}"] if experiment else []),
                        swept={"model.attn.causal": "true,false", "seed": "1,2,3"} if experiment else None)
            job += 1
    if status:
        s = json.loads((root / "0" / "summary.json").read_text())
        s.update(status="interrupted", interrupted="SIGTERM", steps=36)
        (root / "0" / "summary.json").write_text(json.dumps(s))
    return root


def test_an_interrupted_run_is_excluded_named_and_listed(tmp_path, capsys):
    sweep = causal_sweep(tmp_path / "sweep", status="interrupted")
    path, n, _ = report.write("causal_mask", [sweep], tmp_path / "out")
    assert n == 5
    err = capsys.readouterr().err
    assert f"warning: report: {sweep / '0'} excluded: interrupted by SIGTERM at step 36 of 800" in err
    text = path.read_text()
    assert "## Excluded runs" in text and "interrupted by SIGTERM at step 36 of 800" in text
    assert "| 2, 3 |" in text  # the causal arm's seeds: seed 1 was the interrupted one


def test_every_job_of_a_half_finished_sweep_is_named(tmp_path, capsys):
    """A sweep of 10 jobs (multirun.yaml: causal x seed 1-5) of which 5 completed, 1 was interrupted, 1 failed
    (error.txt, no summary), 1 got a dir holding only Hydra's files (the sweep was stopped as it began) and 2 never
    got a dir: the report counts 5 runs of 10 jobs and names the other 5, in the warnings and its Excluded section."""
    sweep = causal_sweep(tmp_path / "sweep", status="interrupted")  # jobs 0-5: causal x seed 1-3; job 0 interrupted
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  sweeper:\n    params:\n      model.attn.causal: true,false\n      seed: 1,2,3,4,5\n"
        "  overrides:\n    task:\n    - experiment=causal_mask\n")
    failed, empty = sweep / "6", sweep / "7"
    for d, causal in ((failed, True), (empty, False)):
        d.mkdir()
        hydra_files(d, "causal_mask", [f"model.attn.causal={causal}", "seed=4", "experiment=causal_mask"])
    (failed / "error.txt").write_text("data.val_batch_size=0 must be a positive integer.\n")
    (empty / "train.log").write_text("")
    assert report.main(["causal_mask", str(sweep), "--out", str(tmp_path / "out")]) == 0
    out = capsys.readouterr()
    assert "report: 5 runs of 10 jobs ->" in out.out
    for where, why in ((sweep / "0", "interrupted by SIGTERM at step 36 of 800"),
                       (failed, "failed (data.val_batch_size=0 must be a positive integer.)"),
                       (empty, "never started"),
                       *((f"{sweep} job model.attn.causal={c} seed=5 experiment=causal_mask", "never started")
                         for c in (True, False))):  # as Hydra's sweeper writes them
        assert f"warning: report: {where} excluded: {why}" in out.err
        assert f"- `{where}`: {why}" in (tmp_path / "out" / "README.md").read_text()


def sweep_of_three_jobs_one_run(tmp_path, summary: bool = True):
    """A sweep of 3 jobs (seeds 1-3) where only job 0 left a dir, interrupted (with its summary or without)."""
    import shutil

    sweep = causal_sweep(tmp_path / "sweep", status="interrupted")
    for d in sweep.iterdir():
        if d.is_dir() and d.name != "0":
            shutil.rmtree(d)
    if not summary:
        (sweep / "0" / "summary.json").unlink()
    (sweep / "multirun.yaml").write_text(
        "hydra:\n  sweeper:\n    params:\n      model.attn.causal: true\n      seed: 1,2,3\n"
        "  overrides:\n    task:\n    - experiment=causal_mask\n")
    return sweep


def test_a_sweep_with_no_result_counts_its_jobs_not_its_runs(tmp_path, capsys):
    """3 jobs, one interrupted and two never started: "none of the 3 jobs", not "none of the 1 runs"."""
    sweep = sweep_of_three_jobs_one_run(tmp_path)
    assert report.main(["causal_mask", str(sweep), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err == ("error: report: none of the 3 jobs completed (1 interrupted, 2 never started; the first: "
                   "interrupted by SIGTERM at step 36 of 800); nothing to report.")
    assert not (tmp_path / "out").exists()


def test_a_sweep_whose_jobs_left_no_summary_at_all_is_reported_by_its_jobs(tmp_path, capsys):
    """Stopped before any job wrote a summary: the jobs are named by what they are, not 'is it a sweep dir?'."""
    sweep = sweep_of_three_jobs_one_run(tmp_path, summary=False)
    assert report.main(["causal_mask", str(sweep), "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: report: none of the 3 jobs completed (1 left no summary, 2 never started; the "
                          "first: started, but left no summary.json"), err
    assert not (tmp_path / "out").exists()


def test_runs_of_another_experiment_are_refused_in_one_line(tmp_path, capsys):
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    d = sweep / "0"
    write_run(d, config=sq_config("unit", 256, "none", "", 1e-3, 11), windows=np.full((32, 4), 2.0), summary={})
    hydra_files(d, "sqrt_dk", ["experiment=sqrt_dk"])
    assert report.main(["causal_mask", str(sweep), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "is a run of experiment=sqrt_dk, not of causal_mask" in err


def test_a_plain_sweep_without_an_experiment_still_makes_the_report(tmp_path):
    sweep = causal_sweep(tmp_path / "sweep", experiment=None)
    path, n, _ = report.write("causal_mask", [sweep], tmp_path / "out")
    assert n == 6 and path.exists()


def test_the_committed_report_is_left_alone_by_a_partial_sweep(tmp_path, capsys, monkeypatch):
    docs = tmp_path / "docs"
    monkeypatch.setattr(report, "DOCS", docs)
    sweep = causal_sweep(tmp_path / "sweep", extra=["trainer.max_steps=20"])
    path, _, _ = report.write("causal_mask", [sweep])
    assert path == sweep / "report-causal_mask" / "README.md" and not docs.exists()
    err = capsys.readouterr().err
    assert "not the full experiment=causal_mask sweep" in err and "the committed report is left alone" in err


def test_a_partial_report_written_into_docs_says_it_is_committed_until_the_full_sweep(tmp_path, monkeypatch):
    """--out docs/experiments/<name> on a partial sweep: the committed report, and it says it is partial."""
    docs = tmp_path / "docs"
    monkeypatch.setattr(report, "DOCS", docs)
    sweep = causal_sweep(tmp_path / "sweep")
    path, _, _ = report.write("causal_mask", [sweep], docs / "causal_mask")
    text = path.read_text()
    assert "A partial report (it has 6 runs of experiment=causal_mask, the full sweep 40), committed until the full " \
           "sweep replaces it. Do not edit by hand: rerun" in text
    assert "## Changes since the last version" in text


def test_the_full_sweep_check_counts_the_configs_grid(tmp_path):
    sweep = causal_sweep(tmp_path / "sweep")
    runs = load_runs([sweep])
    gap = report.full_sweep_gap(runs, [], "causal_mask")
    assert gap == "it has 6 runs of experiment=causal_mask, the full sweep 40"
    assert report.full_sweep_gap(runs, [(runs[0], "interrupted")], "causal_mask") == "1 of its runs did not complete"


class Job:  # what full_sweep_gap reads of a run
    def __init__(self, experiment, overrides):
        self.experiment, self.overrides = experiment, [*overrides, f"experiment={experiment}"]


def grid_jobs(experiment, extra=()):
    keys, cells = report.grid_cells(report.CONFIGS / f"{experiment}.yaml")
    return [Job(experiment, [f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in sorted(c, key=str)]
                + list(extra)) for c in cells]  # written as Hydra records them: 0.0001, not 1e-4


def test_experiment_2s_full_sweep_is_its_two_grids_and_may_add_float32_reruns():
    main, fp16 = grid_jobs("sqrt_dk"), grid_jobs("sqrt_dk_fp16")
    assert (len(main), len(fp16)) == (294, 30)
    assert report.full_sweep_gap(main + fp16, [], "sqrt_dk") is None
    assert report.full_sweep_gap(main, [], "sqrt_dk") == "it lacks the runs of experiment=sqrt_dk_fp16"
    reruns = [Job("sqrt_dk_fp32", ["arm/sqrt_dk=fp16_sqrt_scores", "optim.lr=0.02154", f"seed={s}"])
              for s in (11, 12, 13)]
    assert report.full_sweep_gap(main + fp16 + reruns, [], "sqrt_dk") is None  # the design's float32 reruns
    gap = report.full_sweep_gap(main[1:] + fp16, [], "sqrt_dk")
    assert gap == "it has 293 runs of experiment=sqrt_dk, the full sweep 294"
    moved = [Job("sqrt_dk", ["arm/sqrt_dk=unit_dk256_sqrt", "optim.lr=5e-3", "seed=11"])]
    gap = report.full_sweep_gap(main[1:] + moved + fp16, [], "sqrt_dk")
    assert gap == "it lacks 1 job of experiment=sqrt_dk's grid"
    other = [Job("sqrt_dk", ["arm/sqrt_dk=unit_dk256_sqrt", "optim.lr=1e-3", "seed=11", "trainer.max_steps=10"])]
    assert report.full_sweep_gap(main + fp16 + other, [], "sqrt_dk") == "it overrides trainer.max_steps"
    extra_fp16 = [Job("sqrt_dk_fp16", [f"{k}={v}" for k, v in sorted(c, key=str)])  # float16 is not staged
                  for c in [next(iter(report.grid_cells(report.CONFIGS / "sqrt_dk_fp16.yaml")[1]))]]
    gap = report.full_sweep_gap(main + fp16 + extra_fp16, [], "sqrt_dk")
    assert gap == "it has 31 runs of experiment=sqrt_dk_fp16, the full sweep 30"


@pytest.mark.parametrize("override,kept", [
    ("logger=csv", True), ("logger.wandb.project=mine", True), ("hydra.launcher.n_jobs=2", True),
    ("+hydra/launcher=parallel", True), ("ckpt_path=x/last.ckpt", True), ("data.cache_dir=/tmp/c", True),
    ("loggers=x", False), ("trainer.max_steps=10", False), ("data.batch_size=4", False)])
def test_one_rule_says_which_overrides_are_bookkeeping_for_both_checks(override, kept):
    """full_sweep_gap and refuse_mixed read the same rule (report.bookkeeping): an override that only says where a run
    logs, how its sweep is launched or resumed neither makes the full sweep partial nor mixes its runs (given to
    some jobs only); any other override does both."""
    from tinygpt.analysis.sweep import ReportError

    assert report.bookkeeping(override) is kept
    main, fp16 = grid_jobs("sqrt_dk", [override]), grid_jobs("sqrt_dk_fp16", [override])
    gap = report.full_sweep_gap(main + fp16, [], "sqrt_dk")
    assert gap == (None if kept else f"it overrides {override.split('=')[0]}")
    for job in main + fp16:
        job.swept_keys = set()
    some = main[:5] + [Job(j.experiment, [o for o in j.overrides if o != override and not o.startswith("experiment=")])
                       for j in main[5:10]]
    for job in some:
        job.swept_keys = set()
    if kept:
        report.refuse_mixed(some, "sqrt_dk")
    else:
        with pytest.raises(ReportError, match=f"the runs differ in {override.split('=')[0]}"):
            report.refuse_mixed(some, "sqrt_dk")


def test_an_out_that_is_a_file_is_one_line_before_any_work(tmp_path, capsys):
    sweep = causal_sweep(tmp_path / "sweep")
    target = tmp_path / "README.md"
    target.write_text("mine")
    assert report.main(["causal_mask", str(sweep), "--out", str(target)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and f"--out {target} is a file; give a directory" in err
    assert target.read_text() == "mine" and not (sweep / "report-causal_mask").exists()


@pytest.mark.skipif(not Path("/proc").is_dir(), reason="needs /proc, where no dir can be made")
def test_an_out_that_cannot_be_written_is_one_line(tmp_path, capsys):
    sweep = causal_sweep(tmp_path / "sweep")
    assert report.main(["causal_mask", str(sweep), "--out", "/proc/report"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "--out /proc/report cannot be written (" in err


def test_a_truncated_summary_is_named_and_excluded(tmp_path, capsys):
    """A job killed while writing its summary.json: the report names it and goes on with the others."""
    sweep = causal_sweep(tmp_path / "sweep")
    (sweep / "2" / "summary.json").write_text('{"status": "compl')
    path, n, _ = report.write("causal_mask", [sweep], tmp_path / "out")
    assert n == 5
    err = capsys.readouterr().err
    assert f"warning: report: {sweep / '2'} excluded: unreadable (summary.json: Unterminated string" in err
    assert "unreadable (summary.json" in path.read_text()


def test_a_single_plain_run_gets_a_partial_report_that_says_why_it_finds_nothing(tmp_path, capsys):
    """One run of plain train.py: '1 run', no 'experiment=None', no 'Do not edit by hand', no 'Changes since the
    last version' (those belong to the committed report), and the empty Finding says why."""
    run = tmp_path / "run"
    write_run(run, config=cm_config(64, True, 1), windows=np.full((32, 64), 2.0), train_loss=np.full(800, 2.0),
              summary={"train_loss": 2.0})
    hydra_files(run, None, [])
    assert report.main(["causal_mask", str(run)]) == 0
    out = capsys.readouterr()
    assert "report: 1 run of 1 job ->" in out.out
    assert "plain runs, made without experiment=" in out.err and "experiment=None" not in out.err
    text = (run / "report-causal_mask" / "README.md").read_text()
    assert "(1 run; sweep dirs" in text and "A partial report (plain runs, made without experiment=)" in text
    assert "Do not edit by hand" not in text and "## Changes since the last version" not in text
    assert "## Finding\n\nNone: these runs hold no corpus with both a masked and an unmasked arm" in text


def test_equal_training_losses_are_not_said_to_fall(tmp_path):
    """Leaky and causal runs with the same training loss: 'ends at', never 'falls to'."""
    sweep = causal_sweep(tmp_path / "sweep")
    path, _, _ = report.write("causal_mask", [sweep], tmp_path / "out")
    text = path.read_text()
    assert "the training loss ends at 2.000 (causal: 2.000)" in text and "falls to 2.000" not in text


def test_a_jobs_override_matches_its_grid_value_however_either_is_written():
    """Hydra records what it parsed (True, 0.0001); the sweep config says true, 1e-4: the same cell."""
    from tinygpt.experiments.report import setting

    assert setting("model.attn.causal=True") == setting("model.attn.causal=true") == ("model.attn.causal", True)
    assert setting("optim.lr=0.0001") == setting("optim.lr=1e-4") == ("optim.lr", 1e-4)
    assert setting("seed=1") == setting("seed=1.0")
    assert setting("model.attn.scale=none") == ("model.attn.scale", "none") != setting("model.attn.scale=null")


def test_a_run_written_with_the_old_names_is_refused_then_reads_as_todays_once_migrated(tmp_path):
    """Runs written before the honest loss had one name (the committed sweeps) are refused by the report in one line
    naming the migration script; after it they read under today's names: summary keys at any depth, the config's
    callback, history columns and diagnostics.npz arrays."""
    import json

    import numpy as np

    from tinygpt.analysis.sweep import ReportError, load_runs
    from tinygpt.cli.migrate_run import main as migrate

    run = tmp_path / "sweep" / "0"
    (run / "history").mkdir(parents=True)
    (run / "summary.json").write_text(json.dumps({
        "status": "completed", "val_loss_autoregressive": 2.5, "autoregressive_positions": 8,
        "diagnostics": {"loss_by_position_autoregressive": [1.0, 2.0], "autoregressive_at": [0, 63]},
        "config": {"seed": 1, "callbacks": {"autoregressive_loss": {"windows": 16, "positions": 8}}}}))
    (run / "history" / "metrics.csv").write_text("step,epoch,val/loss_autoregressive,val/loss\n99,0,2.5,1.5\n")
    np.savez(run / "diagnostics.npz", autoregressive_window_position=np.ones((2, 3)), val_window_position=np.zeros(4))
    with pytest.raises(ReportError, match=r"it names val_loss_autoregressive \(today val_loss_honest\)\. Rewrite it "
                                          r"in today's names once with `python scripts/migrate_run.py .*sweep`"):
        load_runs([tmp_path / "sweep"])
    assert migrate([str(tmp_path / "sweep")]) == 0
    (r,) = load_runs([tmp_path / "sweep"])
    assert r.summary["val_loss_honest"] == 2.5 and r.summary["honest_positions"] == 8
    assert r.summary["diagnostics"] == {"loss_by_position_honest": [1.0, 2.0], "honest_at": [0, 63]}
    assert r.config["callbacks"] == {"honest_loss": {"windows": 16, "positions": 8}}
    assert [list(a) for a in r.series("val/loss_honest")] == [[99], [2.5]]
    assert r.windows("honest_window_position").shape == (2, 3) and r.windows().shape == (4,)
    assert "val_loss_autoregressive" not in r.summary and r.windows("autoregressive_window_position") is None


def test_a_failed_report_leaves_no_out_dir_and_one_written_elsewhere_links_the_glossary(tmp_path, capsys,
                                                                                          monkeypatch):
    """--out DIR of a report refused (no runs there) leaves no DIR behind, also when the report fails while it
    writes; a report written outside docs/experiments links to the real glossary, and one seed is '1 seed'."""
    import os

    from tinygpt.analysis.templates import DOCS

    empty = tmp_path / "empty"
    empty.mkdir()
    assert report.main(["causal_mask", str(empty), "--out", str(tmp_path / "a" / "b")]) == 2
    assert not (tmp_path / "a").exists()
    sweep = causal_sweep(tmp_path / "sweep")
    module = __import__("tinygpt.experiments.causal_mask.report", fromlist=["write_report"])

    def broken(runs, out, sweeps):
        (out / "half.png").write_bytes(b"")
        raise RuntimeError("disk full")

    monkeypatch.setattr(module, "write_report", broken)
    with pytest.raises(RuntimeError):
        report.write("causal_mask", [sweep], tmp_path / "c" / "d")
    assert not (tmp_path / "c").exists()
    monkeypatch.undo()
    one = tmp_path / "one"
    for job in ("0", "3"):  # one seed per arm
        (one / job).parent.mkdir(exist_ok=True)
        os.rename(sweep / job, one / job)
    path, _, _ = report.write("causal_mask", [one], tmp_path / "out")
    text = path.read_text()
    link = os.path.relpath(DOCS / "GLOSSARY.md", path.parent)
    assert "](../GLOSSARY.md)" not in text and f"[glossary]({link})" in text
    assert (path.parent / link).resolve() == (DOCS / "GLOSSARY.md").resolve() and (DOCS / "GLOSSARY.md").exists()
    assert "rests on 1 seed." in text and "1 seeds" not in text


def test_runs_that_differ_in_a_setting_the_grid_does_not_vary_are_refused(tmp_path, capsys):
    """A plain sweep of trainer.max_steps=20,600,20 had been reported as 3 seeds of one 20-step setting."""
    sweep = causal_sweep(tmp_path / "sweep", experiment=None)
    o = sweep / "1" / ".hydra" / "overrides.yaml"
    o.write_text(o.read_text() + "- trainer.max_steps=600\n")
    assert report.main(["causal_mask", str(sweep), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (
        "error: report: the runs differ in trainer.max_steps (600, not set (the default) in 5), which "
        "experiment=causal_mask's sweeps do not vary (they vary arm/causal_mask, model.attn.causal, seed); a report "
        "pools runs of its grid only: give the runs of one setting.")
    assert not (tmp_path / "out").exists()


def test_runs_that_differ_only_in_where_they_keep_files_are_one_setting(tmp_path):
    """data.cache_dir and the logger say where a run keeps its files, not what it computes: not a mixed sweep."""
    sweep = causal_sweep(tmp_path / "sweep", experiment=None)
    for job, extra in (("1", "- data.cache_dir=/tmp/elsewhere\n"), ("2", "- logger=csv\n")):
        o = sweep / job / ".hydra" / "overrides.yaml"
        o.write_text(o.read_text() + extra)
    assert report.main(["causal_mask", str(sweep), "--out", str(tmp_path / "out")]) == 0


def test_away_from_a_clone_the_grid_is_what_the_runs_recorded(tmp_path, capsys, monkeypatch):
    """An installed tinygpt has no configs/: the keys its sweep varied come from Hydra's record in each run's
    .hydra/hydra.yaml (the wheel's report had refused a real causal_mask sweep for differing in model.attn.causal)."""
    monkeypatch.setattr(report, "CONFIGS", tmp_path / "no-configs")
    sweep = causal_sweep(tmp_path / "sweep")
    for summary in sweep.rglob("summary.json"):
        summary.write_text(summary.read_text().replace('"drop_to": 0.25',
                                                      '"drop_to": 0.25, "premise_band": [-0.05, 0.05]'))
    assert report.main(["causal_mask", str(sweep), "--out", str(tmp_path / "out")]) == 0
    o = sweep / "1" / ".hydra" / "overrides.yaml"
    o.write_text(o.read_text() + "- trainer.max_steps=600\n")
    assert report.main(["causal_mask", str(sweep), "--out", str(tmp_path / "out2")]) == 2
    assert capsys.readouterr().err.strip().endswith(
        "the runs differ in trainer.max_steps (600, not set (the default) in 5), which experiment=causal_mask's "
        "sweeps do not vary (they vary model.attn.causal, seed); a report pools runs of its grid only: give the runs "
        "of one setting.")


@pytest.mark.parametrize("argv", [["--help"], ["nosuch", "/tmp"]])
def test_the_report_commands_help_and_refusals_import_no_torch_or_scipy(argv):
    """--help and a refused argument answer at once (the retry measured 2.6-3.6 s: the analysis imported scipy and
    torch first)."""
    import subprocess
    import sys

    from helpers import ROOT

    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / "report.py"), *argv],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == (0 if argv == ["--help"] else 2)
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert "tinygpt.experiments.report" in imported and not imported & {"torch", "scipy", "matplotlib", "lightning"}


@pytest.mark.parametrize("case", ["a stranger's dir", "an --out of the user's files", "a dir that is not there",
                                  "a sweep with no completed job"])
def test_the_report_refuses_what_its_files_answer_before_torch(tmp_path, case):
    """A dir whose summary.json is not a run's, or a sweep none of whose jobs completed, had been refused after the
    experiment's report module had imported torch and scipy (3-4.6 s CPU where the other refusals take under 1.5):
    what the run dirs hold is read first."""
    import subprocess
    import sys

    from helpers import ROOT

    (tmp_path / "stranger").mkdir()
    (tmp_path / "stranger" / "summary.json").write_text(json.dumps({"accuracy": 0.9}))
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "README.md").write_text("mine")
    (tmp_path / "failed" / "0").mkdir(parents=True)
    (tmp_path / "failed" / "0" / "summary.json").write_text(json.dumps({"status": "failed", "config": {}}))
    argv = {"a stranger's dir": ["stranger"], "an --out of the user's files": ["stranger", "--out", "mine"],
            "a dir that is not there": ["nothing"], "a sweep with no completed job": ["failed"]}[case]
    out = subprocess.run([sys.executable, "-X", "importtime", str(ROOT / "scripts" / "report.py"), "causal_mask",
                          *argv], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    errors = [line for line in out.stderr.splitlines() if not line.startswith("import time:")]
    assert out.returncode == 2 and len(errors) == 1 and errors[0].startswith("error: report: "), out.stderr[-2000:]
    imported = {line.rsplit("|", 1)[1].strip() for line in out.stderr.splitlines() if line.startswith("import time:")}
    assert not imported & {"torch", "scipy", "matplotlib", "lightning"}, errors[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["failed", "mine", "stranger"]
    assert sorted(p.name for p in (tmp_path / "failed").iterdir()) == ["0"]
    assert (tmp_path / "mine" / "README.md").read_text() == "mine"


def test_a_dir_whose_summary_is_not_a_runs_is_refused_in_one_line(tmp_path, capsys):
    """A summary.json some other program wrote (no status, no config) had crashed the report: KeyError: 'config'."""
    sweep = causal_sweep(tmp_path / "sweep")
    stranger = tmp_path / "stranger"
    stranger.mkdir()
    (stranger / "summary.json").write_text(json.dumps({"accuracy": 0.9}))
    assert report.main(["causal_mask", str(sweep), str(stranger), "--out", str(tmp_path / "out")]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: report: {stranger / 'summary.json'} is not a train.py run's summary (it has no status or config); "
        "give the dirs of train.py's runs or sweeps.")
    assert not (tmp_path / "out").exists()
    (stranger / "summary.json").write_text(json.dumps({"status": "completed"}))
    assert report.main(["causal_mask", str(stranger)]) == 2
    assert capsys.readouterr().err.strip().endswith("(it has no config); give the dirs of train.py's runs or sweeps.")


@pytest.mark.parametrize("given", ["twice", "spelled otherwise", "a job dir too"])
def test_each_run_counts_once_however_the_given_dirs_overlap(tmp_path, capsys, given):
    """The same sweep dir given twice (or a sweep and one of its job dirs) had been '12 runs of 12 jobs', every arm
    resting on twice its seeds, with intervals to match: silently wrong statistics."""
    sweep = causal_sweep(tmp_path / "sweep")
    once = report.write("causal_mask", [sweep], tmp_path / "once")
    capsys.readouterr()
    other = {"twice": sweep, "spelled otherwise": tmp_path / "sweep" / ".." / "sweep", "a job dir too": sweep / "3"}
    path, n, jobs = report.write("causal_mask", [sweep, other[given]], tmp_path / "twice")
    assert (n, jobs) == (once[1], once[2]) == (6, 6)
    assert path.read_text().replace("twice", "once") == once[0].read_text()


def test_an_out_holding_a_users_files_is_refused_unless_forced(tmp_path, capsys):
    """--out into a dir of the user's own had replaced its README.md and curves.png without a word; a report's own
    dir is rewritten, and --force writes into any (the user's other files stay)."""
    sweep = causal_sweep(tmp_path / "sweep")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "README.md").write_text("my notes")
    (mine / "curves.png").write_bytes(b"my plot")
    (mine / "keep.txt").write_text("mine too")
    assert report.main(["causal_mask", str(sweep), "--out", str(mine)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"error: report: --out {mine} holds files this script did not write (README.md, curves.png, keep.txt); give "
        "a new or empty directory, or --force to write the report over the files of the same names in it.")
    assert (mine / "README.md").read_text() == "my notes" and (mine / "curves.png").read_bytes() == b"my plot"
    assert sorted(p.name for p in mine.iterdir()) == ["README.md", "curves.png", "keep.txt"]
    assert report.main(["causal_mask", str(sweep), "--out", str(mine), "--force"]) == 0
    assert report.report_dir(mine) and (mine / "keep.txt").read_text() == "mine too"
    assert report.main(["causal_mask", str(sweep), "--out", str(mine)]) == 0  # now a report's own dir: rewritten
    empty = tmp_path / "empty"
    empty.mkdir()
    assert report.main(["causal_mask", str(sweep), "--out", str(empty)]) == 0

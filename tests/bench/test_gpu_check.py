"""scripts/gpu_check.py on a machine without a GPU: the one-line answer, the plan (1 GPU vs several), the dry run,
and the reading of what checks wrote (fake run dirs and logs; no GPU, no training)."""

import json
import sys

import pytest
import torch

from helpers import ROOT, compose_train
from tinygpt.bench import gpu_check as gc

BABY = {"n_layer": 4, "n_head": 4, "n_embd": 128, "block_size": 64, "dropout": 0.0, "bias": False,
        "attn": {"causal": True, "scale": "sqrt_dk", "backend": "sdpa", "qk_norm": False, "qk_init": "gpt2",
                 "scale_at": "scores"}}


def fake_summary(run_dir, **values):
    """A summary.json with the keys a finished train.py run writes (tinygpt.train.summary.base_summary)."""
    summary = {"status": "completed", "train_loss": 2.19, "val_loss": 2.21, "diverged": False, "steps": 300,
               "tokens_per_sec": 1_000_000.0, "train_seconds": 2.3, "step_seconds_median": 0.0007,
               "first_step_unix_time": 1796130663.1, "threads": 16, "world_size": 1, "n_params": 796800,
               "vocab_size": 72, "resumed_from": None, "config": {"model": BABY, "data": {"batch_size": 12}}}
    summary.update(values)
    run_dir.mkdir(parents=True)
    (run_dir / "summary.json").write_text(json.dumps(summary))


def names(checks):
    return [c.name for c in checks]


def test_without_a_gpu_it_says_so_in_one_line_and_writes_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    out = tmp_path / "results"
    assert gc.main(["--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines == [f"gpu-check: no CUDA GPU visible (torch {torch.__version__}); nothing to run. "
                     "Run it on a GPU machine: make gpu-check"]
    assert not out.exists() and not list(tmp_path.iterdir())


def test_one_gpu_plan_has_no_ddp_and_fits_the_budget(tmp_path):
    checks = gc.plan(tmp_path, n_gpus=1)
    assert names(checks) == ["figures", "default", "kv_cache", "no_cache", "gpu_small_compile_off", "fsdp_1gpu",
                             "gpu_small_compile_on"]
    assert sum(c.timeout_s for c in checks) <= gc.BUDGET_S <= 8 * 60
    by_name = {c.name: c for c in checks}
    assert "trainer=gpu" in by_name["default"].argv
    for name, compile_flag in (("gpu_small_compile_off", "compile=false"), ("gpu_small_compile_on", "compile=true")):
        argv = by_name[name].argv
        assert {"experiment=gpu_small", compile_flag, f"trainer.max_steps={gc.STEPS}"} <= set(argv)
    assert {"trainer=fsdp", "trainer.devices=1"} <= set(by_name["fsdp_1gpu"].argv)
    for c in checks:
        if c.kind == "train":  # each run into its own dir under out, with the CSV logger only
            assert c.argv[:2] == [sys.executable, "train.py"]
            assert f"hydra.run.dir={tmp_path / c.name}" in c.argv and "logger=csv" in c.argv
    assert by_name["kv_cache"].needs == "default" and "--no-cache" in by_name["no_cache"].argv
    assert str(tmp_path / "default") in by_name["kv_cache"].argv


def test_ddp_only_with_more_than_one_gpu(tmp_path):
    checks = gc.plan(tmp_path, n_gpus=2)
    ddp = [c for c in checks if c.name.startswith("ddp")]
    assert names(ddp) == ["ddp_2gpu"] and {"trainer=ddp", "trainer.devices=2"} <= set(ddp[0].argv)
    assert sum(c.timeout_s for c in checks) <= gc.BUDGET_S
    assert names(gc.plan(tmp_path, n_gpus=1)) == [n for n in names(checks) if n != "ddp_2gpu"]


def test_the_visible_gpu_count_picks_the_plan(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 4)
    assert gc.main(["--dry-run", "--out", str(tmp_path / "r")]) == 0
    printed = capsys.readouterr().out
    assert printed.startswith("gpu-check plan for 4 GPUs: 8 checks") and "trainer=ddp trainer.devices=4" in printed
    assert not (tmp_path / "r").exists()


def test_train_check_overrides_compose(tmp_path):
    """Every train.py check's overrides make a valid config (Hydra composes them; nothing runs)."""
    for check in gc.plan(tmp_path, n_gpus=2):
        if check.kind == "train":
            cfg = compose_train([a for a in check.argv[2:] if not a.startswith("hydra.")])
            assert cfg.trainer.accelerator == "gpu" and cfg.trainer.precision == "bf16-mixed", check.name
            assert list(cfg.logger) == ["csv"], check.name


def test_dry_run_prints_the_plan_without_a_gpu(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gc.main(["--dry-run", "--out", str(tmp_path / "r")]) == 0
    printed = capsys.readouterr().out
    lines = printed.splitlines()
    assert lines[0] == ("gpu-check plan for 1 GPU (no GPU visible here): 7 checks, 410 s of time limits within a "
                        "budget of 480 s")
    assert "python train.py experiment=gpu_small trainer.max_steps=300 compile=true logger=csv" in printed
    assert "ddp" not in printed and not (tmp_path / "r").exists()


def test_only_selects_checks_and_names_the_known_ones(tmp_path, capsys):
    assert gc.main(["--dry-run", "--gpus", "2", "--only", "ddp_2gpu", "--out", str(tmp_path)]) == 0
    assert "1 check," in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        gc.main(["--dry-run", "--only", "nope"])
    assert bad.value.code == 2 and "no check named nope; the checks: figures, default" in capsys.readouterr().err
    # a check's prerequisite comes with it: kv_cache samples from the default run's checkpoint
    assert gc.main(["--dry-run", "--only", "kv_cache", "--out", str(tmp_path)]) == 0
    assert "2 checks," in capsys.readouterr().out
    with pytest.raises(SystemExit) as bad:
        gc.main(["--dry-run", "--budget", "-5"])
    assert bad.value.code == 2 and "--budget=-5 must be a positive number of seconds." in capsys.readouterr().err


def test_a_gpu_machine_with_a_cpu_only_torch_is_told_so_and_fails(monkeypatch, capsys):
    monkeypatch.setattr(gc.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(gc.torch.version, "cuda", None)
    monkeypatch.setattr(gc.shutil, "which", lambda name: "/usr/bin/nvidia-smi" if name == "nvidia-smi" else None)
    assert gc.main([]) == 1
    assert "is a CPU-only build, and this machine has an NVIDIA driver" in capsys.readouterr().out


def test_a_completed_run_dir_becomes_a_row(tmp_path):
    fake_summary(tmp_path / "default")
    row = gc.train_result("default", tmp_path / "default", 0, 41.5, rss=2048.0)
    assert (row.status, row.exit_code, row.seconds, row.steps) == ("completed", 0, 41.5, 300)
    assert (row.tokens_per_sec, row.val_loss, row.train_loss, row.peak_rss_mib) == (1e6, 2.21, 2.19, 2048.0)
    assert row.details["flops_per_token"] == 6.0 * 796800 + 12.0 * 4 * 128 * 64  # GPT.flops_per_token
    assert row.error_tail is None and row.note == ""


def test_a_run_that_exits_0_keeps_its_own_status(tmp_path):
    fake_summary(tmp_path / "d", status="diverged")
    assert gc.train_result("d", tmp_path / "d", 0, 5.0).status == "diverged"


def test_a_failed_check_keeps_its_exit_code_and_error_tail(tmp_path):
    check = gc.train_check("fsdp_1gpu", "fsdp", ["trainer=fsdp"], tmp_path, 60)
    fake_summary(tmp_path / "fsdp_1gpu", status="failed", error="NCCL error: unhandled system error")
    logs = tmp_path / "logs"
    logs.mkdir()
    (logs / "fsdp_1gpu.err").write_text("Traceback (most recent call last):\n  ...\nRuntimeError: NCCL error\n")
    row = gc.result_of(check, tmp_path, 1, 12.0, None)
    assert (row.status, row.exit_code) == ("failed", 1)
    assert row.error_tail.endswith("RuntimeError: NCCL error") and "NCCL error: unhandled" in row.note


def test_a_check_with_no_summary_or_out_of_time(tmp_path):
    row = gc.result_of(gc.train_check("x", "x", [], tmp_path, 60), tmp_path, None, 60.0, None)
    assert (row.status, row.note, row.error_tail) == ("timeout", "no summary.json", "")


def test_a_check_actually_run_and_failing(tmp_path):
    """run_check on a real (CPU-only, instant) command: its exit code, its stderr as the error tail."""
    check = gc.Check("boom", "fails", [sys.executable, "-c", "import sys; print('hi'); sys.exit('it broke')"], 30,
                     "sample")
    code, seconds, _ = gc.run_check(check, tmp_path, 30)
    row = gc.result_of(check, tmp_path, code, seconds, None)
    assert (row.status, row.exit_code, row.error_tail) == ("failed", 1, "it broke")
    assert row.details["text"] == "hi"


def test_a_check_past_its_limit_is_stopped(tmp_path):
    check = gc.Check("slow", "sleeps", [sys.executable, "-c", "import time; time.sleep(30)"], 1, "sample")
    code, seconds, _ = gc.run_check(check, tmp_path, 1)
    assert code is None and seconds < 15


def test_a_check_whose_prerequisite_failed_is_skipped(tmp_path, monkeypatch):
    monkeypatch.setattr(gc, "run_check", lambda check, out, timeout: (1, 1.0, None))
    rows = gc.run_plan([c for c in gc.plan(tmp_path, 1) if c.name in ("default", "kv_cache")], tmp_path, 480)
    assert [(r.name, r.status) for r in rows] == [("default", "failed"), ("kv_cache", "skipped")]
    assert "needs default" in rows[1].note


def test_mfu_and_kv_cache_comparison_from_fake_rows(tmp_path):
    fake_summary(tmp_path / "default")
    default = gc.train_result("default", tmp_path / "default", 0, 40.0)
    figures = gc.Result("figures", "completed", details={"spec_peak_flops": 989e12, "matmul_peak_flops": 700e12})
    kv = gc.Result("kv_cache", "completed", details={"text": "ROMEO: the"})
    plain = gc.Result("no_cache", "completed", details={"text": "ROMEO: the"})
    gc.finish_rows({r.name: r for r in (figures, default, kv, plain)})
    fpt = default.details["flops_per_token"]
    assert default.mfu == pytest.approx(1e6 * fpt / 989e12)
    assert default.mfu_measured == pytest.approx(1e6 * fpt / 700e12)
    assert kv.details["identical_to_no_cache"] is True and kv.note == "same text as without the cache"


def test_the_json_and_markdown_from_fake_results(tmp_path):
    rows = [gc.Result("default", "completed", 0, 40.2, tokens_per_sec=1.5e6, val_loss=2.2101, mfu=0.0123),
            gc.Result("fsdp_1gpu", "failed", 1, 12.0, error_tail="Traceback\nRuntimeError: a | b"),
            gc.Result("kv_cache", "skipped", note="needs default, which did not complete")]
    header = {"started": "2026-12-01T13:00:00", "gpus": 1, "torch": "2.13.0", "budget_s": 480, "wall_s": 52.2,
              "passed": 1, "plan": []}
    json_path, md_path = gc.write_reports(tmp_path / "r", rows, header)
    data = json.loads(json_path.read_text())
    assert data["passed"] == 1 and [r["status"] for r in data["results"]] == ["completed", "failed", "skipped"]
    assert data["results"][1]["error_tail"].endswith("a | b")
    md = md_path.read_text().splitlines()
    assert md[0] == "# gpu-check 2026-12-01T13:00:00" and "1/3 checks completed in 52 s" in md[2]
    assert "| default | completed | 40 | 1,500,000 | 2.2101 | 1.2% | - |  |" in md
    assert "| fsdp_1gpu | failed | 12 | - | - | - | - | RuntimeError: a / b |" in md  # the pipe cannot break the table
    assert md[-1].startswith("| kv_cache | skipped | - |")


def test_the_figures_probe_runs_on_the_cpu(tmp_path):
    """The figures check's code path, tiny and on the CPU (on a GPU machine it runs on cuda:0)."""
    arch = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 16, "dropout": 0.0, "bias": False}
    fig = gc.gpu_figures(torch.device("cpu"), matmul_n=64, arch=arch, new_tokens=8)
    assert fig["matmul_peak_flops"] > 0 and fig["spec_peak_flops"] is None
    assert fig["decode"]["identical"] and fig["decode"]["new_tokens"] == 8
    path = tmp_path / "figures" / "figures.json"
    path.parent.mkdir()
    path.write_text(json.dumps(fig))
    row = gc.figures_result("figures", path, 0, 3.0)
    assert row.status == "completed" and row.tokens_per_sec == fig["decode"]["cached_tokens_per_sec"]


def test_the_script_is_the_module():
    assert "from tinygpt.bench.gpu_check import main" in (ROOT / "scripts" / "gpu_check.py").read_text()


def test_a_plan_over_its_budget_names_what_it_could_skip(tmp_path, monkeypatch, capsys):
    """410 s of limits in a budget of 100 s: the plan says so and names the checks that would not start if each
    took its whole limit."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert gc.main(["--dry-run", "--budget", "100", "--out", str(tmp_path / "r")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].endswith("7 checks, 410 s of time limits over a budget of 100 s")
    plan = gc.plan(tmp_path / "r", 1)
    checks, limits = [c.name for c in plan], {c.name: c.timeout_s for c in plan}
    starts = dict(zip(checks, [sum(limits[n] for n in checks[:i]) for i in range(len(checks))], strict=True))
    cut = [n for n in checks if 100 - starts[n] < 10]
    assert cut and lines[1] == ("more than the budget: the checks run in this order until it is spent; if each took "
                                f"its whole limit, these would be skipped: {', '.join(cut)}")

"""train.py as the shell sees it: one-line errors with exit status 2, quiet normal runs."""

import re

import pytest

from helpers import TINY, run_train

PY_WARNING = re.compile(r"\.py:\d+: \w*(Warning|Deprecat)|warnings\.warn|UserWarning|DeprecationWarning")


def tiny(out, corpus_file, cache_dir, *extra):
    return [*TINY, "data=text_file", f"data.path={corpus_file}", f"data.cache_dir={cache_dir}",
            f"hydra.run.dir={out}", *extra]


@pytest.mark.slow
def test_a_config_mistake_is_one_line_with_exit_status_2(tmp_path, corpus_file, cache_dir):
    out = tmp_path / "bad"
    proc = run_train(tiny(out, corpus_file, cache_dir, "optim.warmup_steps=abc"), check=False)
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == ["error: optim.warmup_steps='abc' must be an integer number of steps."]
    assert not (out / "checkpoints").exists() and not (out / "summary.json").exists()
    full = run_train(tiny(tmp_path / "bad2", corpus_file, cache_dir, "optim.warmup_steps=abc"),
                     env={"HYDRA_FULL_ERROR": "1"}, check=False)
    assert full.returncode != 0 and "Traceback" in full.stderr and "ConfigError" in full.stderr


@pytest.mark.slow
def test_a_default_run_prints_no_library_warning_and_falls_back_offline(tmp_path, corpus_file, cache_dir):
    """The default loggers (W&B + CSV) with credentials but no reachable server: offline within seconds, one
    notice, no Python warning, no promotional tip, no v_num, and the sync hint at the end."""
    env = {"WANDB_MODE": None, "WANDB_API_KEY": "0123456789abcdef0123456789abcdef01234567",
           "WANDB_BASE_URL": "http://127.0.0.1:9", "NETRC": str(tmp_path / "netrc")}
    proc = run_train(tiny(tmp_path / "run", corpus_file, cache_dir), env=env)
    console = proc.stdout + proc.stderr
    assert not PY_WARNING.search(console), PY_WARNING.search(console)
    assert "Tip" not in console and "v_num" not in console and "anonymous" not in console
    assert "credentials found but http://127.0.0.1:9 is unreachable" in proc.stderr
    assert "wandb sync" in proc.stderr


@pytest.mark.slow
def test_compile_true_trains_without_recompile_warnings(tmp_path, corpus_file, cache_dir):
    """Only the fixed-shape training/validation forward is compiled; the diagnostics and samples (every length
    up to block_size) use the plain model, so torch's recompile limit is never reached."""
    out = tmp_path / "compiled"
    proc = run_train(tiny(out, corpus_file, cache_dir, "compile=true", "logger=none", "trainer.max_steps=12",
                          "trainer.val_check_interval=6"))
    console = proc.stdout + proc.stderr
    assert "recompile" not in console.lower() and not PY_WARNING.search(console)
    import torch

    keys = torch.load(out / "checkpoints" / "last.ckpt", weights_only=True)["state_dict"]
    assert all(k.startswith("model.") and "_orig_mod" not in k for k in keys)

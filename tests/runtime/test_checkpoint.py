"""Checkpoints: atomic writes, weights_only loading, resume checks that name both sides."""

import errno

import pytest
import torch

from tinygpt.runtime import checkpoint, run_dirs
from tinygpt.runtime.errors import ConfigError
from tinygpt.model.gpt import GPT, GPTConfig


def test_a_failed_write_leaves_the_previous_checkpoint_intact(tmp_path, monkeypatch):
    io = checkpoint.AtomicCheckpointIO()
    path = tmp_path / "best.ckpt"
    io.save_checkpoint({"state_dict": {"w": torch.ones(3)}}, path)
    good = path.read_bytes()

    def disk_full(obj, f):
        with open(f, "wb") as fh:
            fh.write(b"half a checkpoint")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(checkpoint.torch, "save", disk_full)
    with pytest.raises(checkpoint.CheckpointWriteError, match=r"^could not write checkpoint .*best.ckpt \(no space "
                                                              r"left on the disk holding .*: \d+ MiB free\); the last "
                                                              r"good checkpoint is .*best.ckpt, unchanged\.$"):
        io.save_checkpoint({"state_dict": {"w": torch.zeros(3)}}, path)
    assert path.read_bytes() == good
    assert [p.name for p in tmp_path.iterdir()] == ["best.ckpt"]  # no temporary file left behind


def test_torchs_cxx_stream_error_on_a_full_disk_is_named_as_a_full_disk(tmp_path, monkeypatch):
    """torch's C++ writer reports a full disk as 'basic_ios::clear: iostream error' (a RuntimeError): with little
    space left the sentence says so instead of quoting it."""
    def stream_error(obj, f):
        raise RuntimeError("[enforce fail at inline_container.cc:595] . unexpected pos 0 vs 64\nbasic_ios::clear")

    monkeypatch.setattr(checkpoint.torch, "save", stream_error)
    monkeypatch.setattr("shutil.disk_usage", lambda p: type("U", (), {"free": 3 * 2**20})())
    with pytest.raises(checkpoint.CheckpointWriteError) as err:
        checkpoint.AtomicCheckpointIO().save_checkpoint({"w": 1}, tmp_path / "last.ckpt")
    assert "\n" not in str(err.value) and "(no space left on the disk holding" in str(err.value)
    assert ": 3 MiB free); no earlier checkpoint exists, unchanged." in str(err.value)


def test_a_full_disk_is_measured_while_the_partial_file_still_fills_it(tmp_path, monkeypatch):
    """The partial file was removed before the free space was read, so a disk the write had filled showed room again
    and the sentence quoted torch's 'unexpected pos' instead of naming the full disk."""
    from pathlib import Path

    def fills_the_disk(obj, f):
        Path(f).write_bytes(b"partial")
        raise RuntimeError("[enforce fail at inline_container.cc:595] . unexpected pos 0 vs 64")

    def usage(p):  # 2 MiB free while the partial file is there, 900 once it is gone
        full = any(tmp_path.glob(".last.ckpt.tmp-*"))
        return type("U", (), {"free": (2 if full else 900) * 2**20})()

    monkeypatch.setattr(checkpoint.torch, "save", fills_the_disk)
    monkeypatch.setattr("shutil.disk_usage", usage)
    with pytest.raises(checkpoint.CheckpointWriteError) as err:
        checkpoint.AtomicCheckpointIO().save_checkpoint({"w": 1}, tmp_path / "last.ckpt")
    assert str(err.value) == (f"could not write checkpoint {tmp_path / 'last.ckpt'} (no space left on the disk holding "
                              f"{tmp_path}: 2 MiB free); no earlier checkpoint exists, unchanged.")
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_dir_that_cannot_be_made_is_a_failed_write_not_a_traceback(tmp_path):
    """The dir is made inside the write's own error handling (it was made before it: a PermissionError or
    NotADirectoryError escaped as a traceback at the first save)."""
    (tmp_path / "afile").write_text("x")
    with pytest.raises(checkpoint.CheckpointWriteError) as err:
        checkpoint.AtomicCheckpointIO().save_checkpoint({"w": 1}, tmp_path / "afile" / "ckpts" / "last.ckpt")
    assert str(err.value) == (f"could not write checkpoint {tmp_path / 'afile' / 'ckpts' / 'last.ckpt'} (Not a "
                              "directory); no earlier checkpoint exists, unchanged.")


def test_a_failed_run_marks_its_summary_failed(tmp_path):
    """After an in-place resume that fails, summary.json must not keep the earlier run's 'completed'."""
    import json

    from tinygpt.train.summary import mark_failed

    (tmp_path / "summary.json").write_text(json.dumps({"status": "completed", "steps": 20}))
    mark_failed(tmp_path, "could not write checkpoint x (no space left)")
    s = json.loads((tmp_path / "summary.json").read_text())
    assert s["status"] == "failed" and s["error"].startswith("could not write") and s["steps"] == 20
    mark_failed(tmp_path / "missing", "x")  # best effort: no dir, no error


def test_checkpoints_load_with_weights_only_and_code_is_refused(tmp_path):
    class Payload:
        def __reduce__(self):
            return (print, ("this ran",))

    path = tmp_path / "evil.ckpt"
    torch.save({"state_dict": {}, "hyper_parameters": {}, "x": Payload()}, path)
    with pytest.raises(ConfigError, match="is not a readable checkpoint"):
        checkpoint.load(path)


def test_a_truncated_checkpoint_is_one_sentence(tmp_path):
    path = tmp_path / "t.ckpt"
    torch.save({"state_dict": {"w": torch.randn(100, 100)}, "hyper_parameters": {}}, path)
    path.write_bytes(path.read_bytes()[:5000])
    with pytest.raises(ConfigError, match=r"^checkpoint '.*t.ckpt' is not a readable checkpoint \(.*\)\.$"):
        checkpoint.load(path)


def fake_ckpt(n_embd: int, vocab: int, tokenizer: str | None = "tok-A") -> dict:
    cfg = {"n_layer": 1, "n_head": 2, "n_embd": n_embd, "block_size": 8}
    model = GPT(GPTConfig(vocab_size=vocab, **cfg))
    return {"state_dict": {f"model.{k}": v for k, v in model.state_dict().items()},
            "hyper_parameters": {"model": cfg, "vocab_size": vocab}, "tokenizer": tokenizer, "global_step": 3}


def test_resume_refuses_another_shape_or_vocab_naming_both(tmp_path):
    ours_cfg = {"n_layer": 1, "n_head": 2, "n_embd": 16, "block_size": 8}
    ours = GPT(GPTConfig(vocab_size=30, **ours_cfg)).state_dict()
    checkpoint.check_resume_model(fake_ckpt(16, 30), tmp_path, ours, ours_cfg, 30, "tok-A")  # same: fine
    theirs = r"holds a model with n_layer=1, n_head=2, n_embd=32, block_size=8, vocab 30, "
    with pytest.raises(ConfigError, match=theirs + r"but this run builds n_layer=1, n_head=2, n_embd=16, block_size=8"):
        checkpoint.check_resume_model(fake_ckpt(32, 30), tmp_path, ours, ours_cfg, 30, "tok-A")
    with pytest.raises(ConfigError, match="vocab 40, but this run builds .* vocab 30"):
        checkpoint.check_resume_model(fake_ckpt(16, 40), tmp_path, ours, ours_cfg, 30, "tok-A")
    with pytest.raises(ConfigError, match="another tokenizer than this run's data"):
        checkpoint.check_resume_model(fake_ckpt(16, 30, "tok-B"), tmp_path, ours, ours_cfg, 30, "tok-A")
    # the same vocab size, but one side has no tokenizer at all (random tokens): compared, not skipped
    with pytest.raises(ConfigError, match="trained on text through a tokenizer, but this run's data are token ids "
                                          r"without one \(corpus=random_tokens\), with the same vocab size 30"):
        checkpoint.check_resume_model(fake_ckpt(16, 30, "tok-A"), tmp_path, ours, ours_cfg, 30, None)
    with pytest.raises(ConfigError, match="trained on token ids without a tokenizer, but this run's data are text"):
        checkpoint.check_resume_model(fake_ckpt(16, 30, None), tmp_path, ours, ours_cfg, 30, "tok-A")
    checkpoint.check_resume_model(fake_ckpt(16, 30, None), tmp_path, ours, ours_cfg, 30, None)  # both ids: fine


def test_ckpt_path_forms(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    last = run / "checkpoints" / "last.ckpt"
    last.write_bytes(b"x")
    assert run_dirs.resolve_ckpt_path(None, run) is None
    assert run_dirs.resolve_ckpt_path("last", run) == last
    assert run_dirs.resolve_ckpt_path(str(run), tmp_path) == last
    assert run_dirs.resolve_ckpt_path(str(last), tmp_path) == last
    with pytest.raises(ConfigError, match="ckpt_path=last but .* does not exist"):
        run_dirs.resolve_ckpt_path("last", tmp_path / "other")


def test_a_resume_on_another_process_count_says_the_global_batch_changes(tmp_path):
    ckpt = fake_ckpt(16, 30)
    assert checkpoint.world_size_note(ckpt, tmp_path, 1, 12) is None  # an old checkpoint: unknown, no note
    ckpt["world_size"] = 2
    assert checkpoint.world_size_note(ckpt, tmp_path, 2, 12) is None
    note = checkpoint.world_size_note(ckpt, tmp_path / "last.ckpt", 1, 12)
    assert note.startswith("note: ckpt_path=") and "was trained on 2 process(es) (global batch 24), this run has 1 " \
        "(global batch 12): each step from here sees a smaller batch" in note


def test_a_run_dir_names_one_checkpoint_for_ckpt_path_and_for_the_clis(tmp_path):
    """checkpoints/last.ckpt first, else a last.ckpt beside the run's files: ckpt_path=<run dir> (train.py) and
    --ckpt <run dir> (the CLIs) take the same file, and refuse a dir without one, each in its own sentence."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    ckpt = {"state_dict": {}, "hyper_parameters": {}}  # its layout: what the CLIs check before importing torch
    torch.save(ckpt, run / "last.ckpt")
    assert run_dirs.checkpoint_file(run) == run_dirs.resolve_ckpt_path(str(run), tmp_path) == run / "last.ckpt"
    torch.save(ckpt, run_dirs.last_path_in(run))
    assert run_dirs.checkpoint_file(run) == run_dirs.resolve_ckpt_path(str(run), tmp_path) == \
        run / "checkpoints" / "last.ckpt"
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="holds no checkpoint"):
        run_dirs.checkpoint_file(tmp_path / "empty")
    with pytest.raises(ConfigError, match="is not a checkpoint file or a run dir holding checkpoints/last.ckpt"):
        run_dirs.resolve_ckpt_path(str(tmp_path / "empty"), tmp_path)


def test_a_stop_before_the_first_checkpoint_resumes_into_last_ckpt_not_beside_it(tmp_path):
    """A run stopped before ModelCheckpoint had saved anything (DDP rank 0 signalled in the rendezvous, stopping at
    step 0; any stop before the first validation) left ModelCheckpoint recording no last checkpoint, so the resumed
    run found a last.ckpt it did not know, wrote last-v1.ckpt beside it and kept last.ckpt at the stop's step (a
    later resume in place was then refused). GracefulStop records its last.ckpt as ModelCheckpoint's."""
    import signal

    import lightning as L
    import torch
    from lightning.pytorch.callbacks import ModelCheckpoint

    from tinygpt.runtime.graceful_stop import GracefulStop
    from tinygpt.runtime.interrupts import RunInterrupted

    class Tiny(L.LightningModule):
        def __init__(self):
            super().__init__()
            self.layer = torch.nn.Linear(4, 1)

        def training_step(self, batch, _):
            return self.layer(batch[0]).pow(2).mean()

        def configure_optimizers(self):
            return torch.optim.SGD(self.parameters(), lr=0.1)

        def train_dataloader(self):
            return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.randn(64, 4)), batch_size=4)

    class SignalAt(L.Callback):  # as if a signal arrived during step 2
        def __init__(self, stop):
            self.stop = stop

        def on_train_batch_end(self, trainer, *_):
            if trainer.global_step == 2:
                self.stop.signum = signal.SIGTERM

    def trainer(*extra):
        return L.Trainer(max_steps=6, callbacks=[ModelCheckpoint(dirpath=tmp_path, save_last=True,
                                                                 every_n_train_steps=3), *extra],
                         logger=False, enable_progress_bar=False, enable_model_summary=False)

    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1, signal.SIGUSR2)}
    try:
        stop = GracefulStop()
        with pytest.raises(RunInterrupted):
            trainer(SignalAt(stop), stop).fit(Tiny())
        assert sorted(p.name for p in tmp_path.iterdir()) == ["last.ckpt"]
        trainer(GracefulStop()).fit(Tiny(), ckpt_path=tmp_path / "last.ckpt", weights_only=False)
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
    assert "last-v1.ckpt" not in {p.name for p in tmp_path.iterdir()}
    assert torch.load(tmp_path / "last.ckpt", weights_only=False)["global_step"] == 6

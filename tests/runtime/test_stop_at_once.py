

def test_an_idle_worker_left_behind_by_its_sweep_ends_on_a_signal(monkeypatch):
    """A worker whose sweep's process is gone (parent 1) ends on the next signal instead of ignoring it for ever;
    one whose sweep is alive stays, as before."""
    import signal as signal_module

    from tinygpt.runtime import interrupts

    ended = []
    monkeypatch.setattr(interrupts.os, "_exit", ended.append)
    monkeypatch.setattr(interrupts.os, "getppid", lambda: 4242)
    interrupts._noted_between_jobs(signal_module.SIGTERM, None)
    assert ended == []
    monkeypatch.setattr(interrupts.os, "getppid", lambda: 1)
    interrupts._noted_between_jobs(signal_module.SIGTERM, None)
    assert ended == [128 + signal_module.SIGTERM]


def test_a_sweep_stopped_at_once_kills_its_workers(monkeypatch):
    """The second signal kills joblib's workers before the sweep's process ends (they had outlived it), and makes
    no executor where there is none."""
    import signal as signal_module

    from joblib.externals.loky import reusable_executor

    from tinygpt.runtime import interrupts

    killed = []
    monkeypatch.setattr(interrupts.os, "kill", lambda pid, sig: killed.append((pid, sig)))
    monkeypatch.setattr(reusable_executor, "_executor", None)
    interrupts.stop_workers()
    assert killed == []

    class Executor:
        _processes = {101: object(), 102: object()}

    monkeypatch.setattr(reusable_executor, "_executor", Executor())
    interrupts.stop_workers()
    assert killed == [(101, signal_module.SIGKILL), (102, signal_module.SIGKILL)]


def test_a_sweep_stopped_at_once_prints_how_to_continue(tmp_path, monkeypatch, capsys):
    """The second signal ends the sweep without its table, so the handler prints the continue command itself (the
    one the sweep's table would print: SweepReport hands it over)."""
    import signal as signal_module

    from omegaconf import OmegaConf

    from tinygpt.runtime import interrupts

    OmegaConf.save(OmegaConf.create({"hydra": {"overrides": {"hydra": ["hydra.mode=MULTIRUN"],
                                                             "task": ["seed=1,2", "model=tiny"]}}}),
                   tmp_path / "multirun.yaml")
    from tinygpt.runtime.run_dirs import continue_command

    stop = interrupts.SweepStop(tmp_path, continue_with=lambda: continue_command(tmp_path))
    stop.signum = signal_module.SIGINT  # the first was recorded
    monkeypatch.setattr(interrupts, "stop_workers", lambda: None)
    monkeypatch.setattr(interrupts.os, "kill", lambda pid, sig: None)
    monkeypatch.setattr(interrupts.signal, "signal", lambda *a: None)
    stop._handle(signal_module.SIGINT, None)
    out = capsys.readouterr()
    assert "SIGINT again: stopped at once" in out.out + out.err
    assert f"python train.py -m seed=1,2 model=tiny hydra.sweep.dir={tmp_path} ckpt_path=last" in out.out + out.err

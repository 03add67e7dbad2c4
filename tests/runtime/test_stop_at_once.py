

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

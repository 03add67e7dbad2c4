"""A parallel sweep's stop file (runtime.interrupts.SweepStop), in-process: a continued sweep is not stopped by
the file its stopped run left (issue 32 item 1), and a job run in the sweep's own process (hydra.launcher.n_jobs=1)
stops the whole sweep, not just itself (item 2). The end-to-end versions are in tests/e2e/test_interrupts.py."""

import signal

import pytest
from omegaconf import OmegaConf

from tinygpt.runtime.interrupts import SIGNALS, STOP_FILE, RunInterrupted, SweepStop, sweep_stop_signal
from tinygpt.runtime.graceful_stop import GracefulStop
from tinygpt.runtime.run_dirs import SweepReport

JOBLIB = "hydra_plugins.hydra_joblib_launcher.joblib_launcher.JoblibLauncher"


@pytest.fixture(autouse=True)
def own_signal_handlers():
    before = {sig: signal.getsignal(sig) for sig in SIGNALS}
    yield
    for sig, handler in before.items():
        signal.signal(sig, handler)
    SweepStop.current = None


def start_sweep(sweep_dir, launcher=JOBLIB):
    config = OmegaConf.create({"hydra": {"sweep": {"dir": str(sweep_dir)}, "launcher": {"_target_": launcher}}})
    SweepReport().on_multirun_start(config)


@pytest.mark.parametrize("launcher", [JOBLIB, "hydra._internal.core_plugins.basic_launcher.BasicLauncher"])
def test_a_continued_sweep_is_not_stopped_by_the_signal_of_the_run_it_continues(tmp_path, launcher):
    (tmp_path / STOP_FILE).write_text(str(int(signal.SIGTERM)))  # left by the stopped run
    start_sweep(tmp_path, launcher)
    assert sweep_stop_signal(tmp_path) is None  # its jobs start, its table says nothing about a stop


def test_a_signal_to_a_parallel_sweep_is_recorded_once(tmp_path):
    start_sweep(tmp_path)
    signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    assert sweep_stop_signal(tmp_path) == signal.SIGTERM
    SweepStop.current.record(signal.SIGINT)  # a later one does not overwrite the first
    assert sweep_stop_signal(tmp_path) == signal.SIGTERM


@pytest.mark.parametrize("training", [True, False])
def test_a_job_in_the_sweeps_own_process_stops_the_whole_sweep(tmp_path, training):
    """n_jobs=1: the job's handler replaces the sweep's while it runs; its signal still reaches the stop file, so
    the sweep skips the jobs after it and ends with its table, exit status and continue command."""
    start_sweep(tmp_path)
    stop = GracefulStop()
    stop.install()
    stop.training = training
    if training:  # the job stops after its step
        stop._handle(signal.SIGTERM, None)
    else:  # outside the training loop: at once
        with pytest.raises(RunInterrupted):
            stop._handle(signal.SIGTERM, None)
    stop.uninstall()
    assert sweep_stop_signal(tmp_path) == signal.SIGTERM


def test_a_run_outside_a_parallel_sweep_writes_no_stop_file(tmp_path):
    stop = GracefulStop()
    stop.install()
    with pytest.raises(RunInterrupted):
        stop._handle(signal.SIGTERM, None)
    stop.uninstall()
    assert not list(tmp_path.iterdir())


def test_the_same_signal_again_at_once_is_the_same_stop_for_a_sweep(tmp_path, monkeypatch):
    """A signal to a process group reaches the sweep's process two or three times at once (`timeout` forwards its
    own to the command and to the group): that is one stop, not a stop at once whose message a killed process never
    printed. The same signal a second later, or another signal, still stops it at once."""
    from tinygpt.runtime import interrupts

    now = [100.0]
    monkeypatch.setattr(interrupts.time, "monotonic", lambda: now[0])
    stopped = []
    monkeypatch.setattr(interrupts, "stop_workers", lambda: stopped.append("workers"))
    monkeypatch.setattr(interrupts.os, "kill", lambda pid, sig: stopped.append(sig))
    start_sweep(tmp_path)
    handler = signal.getsignal(signal.SIGTERM)
    handler(signal.SIGTERM, None)
    now[0] += 0.01
    handler(signal.SIGTERM, None)
    assert stopped == [] and sweep_stop_signal(tmp_path) == signal.SIGTERM
    handler(signal.SIGINT, None)  # another signal: a second one
    assert stopped == ["workers", signal.SIGINT]
    stopped.clear()
    signal.signal(signal.SIGTERM, handler)
    now[0] += interrupts.ECHO_S  # the same one, later: a second one
    handler(signal.SIGTERM, None)
    assert stopped == ["workers", signal.SIGTERM]


def test_the_same_signal_again_at_once_is_the_same_stop_for_a_run(monkeypatch):
    """In training, two SIGTERMs at once end the run after its step (a checkpoint there), not at once."""
    from tinygpt.runtime import interrupts

    now = [100.0]
    monkeypatch.setattr(interrupts.time, "monotonic", lambda: now[0])
    stop = GracefulStop()
    stop.install()
    stop.training = True
    stop._handle(signal.SIGTERM, None)
    now[0] += 0.2
    stop._handle(signal.SIGTERM, None)  # not raised: the step finishes and is saved
    assert stop.signum == signal.SIGTERM and stop.training
    now[0] += interrupts.ECHO_S
    with pytest.raises(RunInterrupted):
        stop._handle(signal.SIGTERM, None)
    stop.uninstall()


def test_the_stop_messages_are_one_line_each_in_a_pipe(tmp_path, capsys, monkeypatch):
    """Piped (80 columns), the first signal's message is one line to grep, not cut mid-sentence."""
    from tinygpt.runtime import interrupts

    monkeypatch.setattr(interrupts, "stop_workers", lambda: None)
    start_sweep(tmp_path)
    signal.getsignal(signal.SIGTERM)(signal.SIGTERM, None)
    run = GracefulStop()
    run.training = True
    run._handle(signal.SIGINT, None)
    err = capsys.readouterr().err.splitlines()
    assert err[0].startswith("SIGTERM: the running jobs stop") and err[0].endswith("(send it again to stop at once).")
    assert err[1].startswith("SIGINT: stopping after this step") and err[1].endswith("to stop at once).")

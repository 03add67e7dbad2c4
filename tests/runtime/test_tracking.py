"""W&B set-up: credentials as wandb itself finds them, a fast offline fallback, quiet runs."""

import socket
import time
from types import SimpleNamespace
from urllib.parse import urlparse

import pytest

from tinygpt.runtime import network, tracking, wandb_mode

KEY = "0123456789abcdef0123456789abcdef01234567"  # the 40-character form wandb accepts


@pytest.fixture
def no_credentials(monkeypatch, tmp_path):
    for var in ("WANDB_API_KEY", "WANDB_MODE", "WANDB_IDENTITY_TOKEN_FILE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))  # an empty netrc: not the user's
    return tmp_path / "netrc"


def test_no_credentials_means_offline_without_touching_the_network(no_credentials, monkeypatch):
    monkeypatch.setattr(network, "unreachable", lambda url, timeout=0: pytest.fail("no probe without credentials"))
    assert not tracking.has_credentials()
    assert tracking.choose_mode(None) == "offline"


def test_a_netrc_entry_for_wandbs_own_host_counts(no_credentials):
    """The host is the one wandb is configured with (not a hard-coded name)."""
    host = urlparse(wandb_mode._wandb_settings().base_url).hostname
    no_credentials.write_text(f"machine {host}\n  login user\n  password {KEY}\n")
    no_credentials.chmod(0o600)
    assert tracking.has_credentials()
    no_credentials.write_text(f"machine other.example.com\n  login user\n  password {KEY}\n")
    assert not tracking.has_credentials()


def test_credentials_with_an_unreachable_server_fall_back_to_offline_with_one_line(no_credentials, monkeypatch,
                                                                                   capsys):
    monkeypatch.setenv("WANDB_API_KEY", KEY)
    monkeypatch.setattr(wandb_mode, "_wandb_settings", lambda: SimpleNamespace(base_url="http://127.0.0.1:9"))
    assert tracking.choose_mode(None) == "offline"
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "credentials found but http://127.0.0.1:9 is unreachable" in err[0]
    assert "logging offline" in err[0]


def test_a_server_that_does_not_answer_costs_the_timeout_not_minutes():
    """A socket that accepts connections but never answers: the probe gives up after its timeout."""
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(1)
        t0 = time.perf_counter()
        reason = tracking.unreachable(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.5)
    assert reason is not None and "timed out" in reason
    assert time.perf_counter() - t0 < 0.5 * 20  # about the timeout, not the minutes wandb waits


def test_mode_as_asked_wins(no_credentials, monkeypatch):
    assert tracking.choose_mode("disabled") == "disabled"
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_API_KEY", KEY)
    assert tracking.choose_mode(None) == "offline"


def test_forced_online_and_unreachable_stops_at_once_in_one_line(no_credentials, monkeypatch):
    """A closed local port stands in for no network: the same 3-second check as the automatic mode, then one
    ConfigError instead of wandb's minute of retries and its 45-line CommError."""
    monkeypatch.setenv("WANDB_API_KEY", KEY)
    monkeypatch.setattr(wandb_mode, "_wandb_settings", lambda: SimpleNamespace(base_url="http://127.0.0.1:9"))
    t0 = time.perf_counter()
    with pytest.raises(tracking.ConfigError, match=r"^logger.wandb.mode=online but http://127.0.0.1:9 is "
                                                   r"unreachable \(.*\); log offline with WANDB_MODE=offline"):
        tracking.choose_mode("online")
    assert time.perf_counter() - t0 < tracking.REACH_TIMEOUT_S * 3
    monkeypatch.setenv("WANDB_MODE", "online")
    with pytest.raises(tracking.ConfigError, match="^WANDB_MODE=online but"):
        tracking.choose_mode(None)


def test_forced_online_without_credentials_and_a_bogus_mode_are_one_line(no_credentials, monkeypatch):
    monkeypatch.setattr(network, "unreachable", lambda url, timeout=0: pytest.fail("no probe without credentials"))
    with pytest.raises(tracking.ConfigError, match="WANDB_MODE=online but wandb has no credentials; run `wandb "
                                                   "login`"):
        monkeypatch.setenv("WANDB_MODE", "online")
        tracking.choose_mode(None)
    with pytest.raises(tracking.ConfigError, match="logger.wandb.mode='bogus' is not one of online, offline"):
        tracking.choose_mode("bogus")


def test_the_logger_drops_the_deprecated_anonymous_setting(tmp_path):
    lg = tracking.QuietWandbLogger(project="p", save_dir=str(tmp_path), mode="offline")
    assert "anonymous" not in lg._wandb_init and lg._wandb_init["settings"]["quiet"] is True


def test_the_sync_hint_names_every_session_of_a_resumed_run_oldest_first(tmp_path):
    """A run resumed twice offline has three local dirs of one W&B run: `wandb sync` needs all of them."""
    names = ["offline-run-20261204_050850-abc", "offline-run-20261204_050751-abc", "offline-run-20261204_051919-xyz",
             "offline-run-20261204_050821-abc"]
    for name in names:
        (tmp_path / name).mkdir()
    latest = tmp_path / "offline-run-20261204_050850-abc"
    assert [d.name for d in tracking.sessions_of(latest)] == [
        "offline-run-20261204_050751-abc", "offline-run-20261204_050821-abc", "offline-run-20261204_050850-abc"]

"""Is a server there? One HTTP request with a short timeout, so that a tool facing a dead network says so in one line
within seconds instead of waiting through a library's retries (W&B's server, the Hugging Face Hub)."""

from __future__ import annotations

import urllib.error
import urllib.request

REACH_TIMEOUT_S = 3.0


def unreachable(url: str, timeout: float = REACH_TIMEOUT_S) -> str | None:
    """None if the server at ``url`` answers an HTTP request within ``timeout`` seconds (any status), else why not."""
    try:
        with urllib.request.urlopen(urllib.request.Request(url, method="HEAD"), timeout=timeout):
            return None
    except urllib.error.HTTPError:
        return None  # it answered
    except urllib.error.URLError as err:
        return str(err.reason)
    except (OSError, ValueError) as err:
        return str(err) or type(err).__name__

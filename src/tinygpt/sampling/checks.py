"""The sampling settings' checks, torch-free: a bad temperature or top_k is refused before anything heavy is imported
(by train.py for its text samples, by the sample command for its arguments)."""

from __future__ import annotations

import math

from tinygpt.runtime.checks import is_int, is_number


def check_sampling(temperature: float, top_k: int | None) -> None:
    """One sentence for a bad temperature or top_k, before any work."""
    if not is_number(temperature) or not 0 < temperature < math.inf:
        raise ValueError(f"temperature={temperature!r} must be a finite number > 0 (use top_k=1 for greedy "
                         "decoding; a very large one samples nearly uniformly).")
    if top_k is not None and (not is_int(top_k) or top_k < 1):
        raise ValueError(f"top_k={top_k!r} must be a positive integer or None (no cut).")

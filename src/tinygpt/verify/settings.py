"""What a verification is told about the attention it checks (``tinygpt-verify --help`` names each as an option):
its level, its sizes, which interfaces it offers, how strict the 16-bit check is. Checked on construction, one
sentence naming the option; torch-free, so that a bad option is refused before anything heavy is imported."""

from __future__ import annotations

from dataclasses import dataclass

from tinygpt.runtime.checks import is_number, one_of, positive_int

LEVELS = ("auto", "function", "module")
MASKS = ("keep", "hide")
POSITIONS = ("alibi", "rope")  # relative positions declared: a module's (the distance check), alibi a function's too


@dataclass(frozen=True)
class Settings:
    level: str = "auto"  # auto: a torch Module is checked as x -> y, any other callable as (q, k, v, mask) -> out
    width: int | None = None  # the module's input width C; None: read from the module (n_embd, embed_dim, ...)
    vocab: int | None = None  # the module takes token ids (B, T) in [0, vocab) instead of vectors (a whole LM)
    max_len: int = 128  # the longest sequence tried (a module that refuses a length stops the sweep there)
    scale: float | None = None  # the function level's formula: scores = q k^T * scale; None: 1/sqrt(d_k)
    mask: str = "keep"  # keep: the function's mask is True where a query may attend (torch's); hide: True = hidden
    padding: str | None = None  # the module's keyword for a (B, T) bool padding mask, True = real token
    kv_cache: str | None = None  # the module's method step(x_new, cache) -> (y_new, cache), cache None at first
    strict_16bit: bool = False  # a 16-bit failure fails (by default it is a warning: a finding, not a math bug)
    window: int | None = None  # a sliding window: each query sees its last `window` keys, itself included (a
    # module's sees-past asserts it; a function's formula check compares with the formula under that window)
    positions: str | None = None  # alibi | rope: relative positions declared (a module's distance check; a function's
    # formula with ALiBi's bias)
    seed: int = 0

    def __post_init__(self):
        one_of("level", self.level, LEVELS)
        one_of("mask", self.mask, MASKS)
        if self.positions is not None:
            one_of("positions", self.positions, POSITIONS)
        for key in ("width", "vocab", "window"):
            if getattr(self, key) is not None:
                positive_int(key, getattr(self, key))
        positive_int("max_len", self.max_len)
        if self.max_len < 2:
            raise ValueError(f"max_len={self.max_len} must be at least 2 (causality needs a past and a future).")
        if self.scale is not None and not (is_number(self.scale) and self.scale > 0):
            raise ValueError(f"scale={self.scale!r} must be a positive number (the formula's factor on q k^T).")
        for key in ("padding", "kv_cache"):
            value = getattr(self, key)
            if value is not None and not (isinstance(value, str) and value.isidentifier()):
                raise ValueError(f"{key}={value!r} must be a Python name (the module's keyword or method).")


EVERY = 64  # causality tries every length up to this one (a leak at one length alone is found)...
BEYOND = 8  # ...and this many random lengths between it and the longest, and the longest itself


def lengths_tried(longest: int, seed: int = 0) -> list[int]:
    """The lengths causality tries: every one from 2 to 64, 8 drawn (by ``seed``) between 64 and ``longest``, and
    ``longest`` itself."""
    import random

    beyond = range(EVERY + 1, longest)
    drawn = random.Random(seed).sample(beyond, min(BEYOND, len(beyond)))
    return sorted({*range(2, min(EVERY, longest) + 1), *drawn, longest})

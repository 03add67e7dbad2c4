"""Giving freed heap memory back to the system during training.

PyTorch's CPU allocator returns tensors to glibc's malloc, which keeps freed memory in its heaps; with
steps, validations, samples and maps each freeing differently sized blocks, the resident size of a default
run grew by ~400 MiB over 2,000 steps here (Python objects and live tensors stayed flat: 13 MiB of
tensors). ``malloc_trim(0)`` hands the free pages back; called every 50 steps
(``callbacks.heap_trim.every_n_steps``) and after each validation, it held the same run near its start-up
size. Elsewhere than glibc (macOS, musl) it does nothing.
"""

from __future__ import annotations

import ctypes
import ctypes.util
from functools import cache

import lightning as L


@cache
def _malloc_trim():
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        return libc.malloc_trim
    except (OSError, AttributeError):  # not glibc
        return None


def release_free_heap() -> bool:
    """Return the heap's free pages to the OS; True when glibc did so (or had nothing to give back)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class HeapTrim(L.Callback):
    """``release_free_heap`` every ``every_n_steps`` steps and after each validation (a few ms each)."""

    def __init__(self, every_n_steps: int = 50):
        if not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(f"callbacks.heap_trim.every_n_steps={every_n_steps!r} must be a positive integer.")
        self.every_n_steps = every_n_steps

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step % self.every_n_steps == 0:
            release_free_heap()

    def on_validation_end(self, trainer, module):
        release_free_heap()

"""What keeps a run healthy, beside the probes: the divergence guard, and giving freed heap memory back to the
system (the progress bar and the step clock: progress.py).

Heap: PyTorch's CPU allocator returns tensors to glibc's malloc, which keeps freed memory in its heaps; with
steps, validations, samples and maps each freeing differently sized blocks, a default run's resident size grew
over its 2,000 steps while Python objects and live tensors stayed flat. ``malloc_trim(0)`` hands the free pages
back (every 50 steps, ``callbacks.heap_trim.every_n_steps``, and after each validation). glibc also gives every
thread that allocates its own heap (an "arena": W&B's threads, the progress bar's, the attention maps' renderer),
each holding its own freed blocks; the trim returns little of those. So the callback, when built (before the
loggers and the trainer start their threads), has glibc keep one heap for every thread (``mallopt(M_ARENA_MAX,
1)``): the default run's peak fell by about 70 MiB at the same speed. Elsewhere than glibc (macOS, musl) both do
nothing. Measured in docs/benchmarks.md.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from functools import cache

import lightning as L
import torch

from tinygpt.runtime.console import say
from tinygpt.train.callback_settings import DivergenceGuardSettings, HeapTrimSettings, take


class Diverged(Exception):
    """Raised by DivergenceGuard to end fit at once: no validation, checkpoint or sample of a broken model."""


class DivergenceGuard(L.Callback):
    """Stop cleanly when the training loss is non-finite or exceeds ``factor`` x ln(vocab): the run
    then writes the summary with ``diverged: true`` and the reason, keeps the last good checkpoint and
    exits 0, so a sweep goes on."""

    def __init__(self, **settings):
        take(self, DivergenceGuardSettings(**settings))  # factor, every_n_steps
        self.diverged, self.reason = False, None

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step % self.every_n_steps:
            return
        loss = outputs["loss"].detach()
        limit = self.factor * math.log(module.config.vocab_size)
        if not torch.isfinite(loss) or loss.item() > limit:
            self.diverged = True
            self.reason = f"training loss {loss.item():.4g} at step {trainer.global_step} (limit {limit:.3g})"
            say(f"[bold red]diverged:[/] {self.reason}; stopping.")
            raise Diverged(self.reason)


@cache
def _glibc():
    """The C library when it is glibc (it has malloc_trim), else None (macOS, musl)."""
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        libc.malloc_trim, libc.mallopt  # noqa: B018 (glibc's own: an AttributeError elsewhere)
        return libc
    except (OSError, AttributeError):  # not glibc
        return None


def _malloc_trim():
    libc = _glibc()
    return None if libc is None else libc.malloc_trim


M_ARENA_MAX = -8  # glibc's malloc.h: mallopt's parameter for the most heaps (arenas) threads may use


def one_heap_for_all_threads() -> bool:
    """Have glibc's malloc give threads created from now on the main heap instead of heaps of their own; True when
    glibc took the setting (False elsewhere)."""
    libc = _glibc()
    return libc is not None and libc.mallopt(M_ARENA_MAX, 1) == 1


def release_free_heap() -> bool:
    """Return the heap's free pages to the OS; True when glibc did so (or had nothing to give back)."""
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


class HeapTrim(L.Callback):
    """``release_free_heap`` every ``every_n_steps`` steps and after each validation (a few ms each), and, from its
    construction on, one heap for every thread (the module's docstring says why)."""

    def __init__(self, **settings):
        take(self, HeapTrimSettings(**settings))  # every_n_steps
        self.one_heap = one_heap_for_all_threads()

    def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
        if trainer.global_step % self.every_n_steps == 0:
            release_free_heap()

    def on_validation_end(self, trainer, module):
        release_free_heap()

"""tinygpt.train.guards' heap: HeapTrim has glibc keep one heap (arena) for every thread, so that freed blocks of
W&B's, the bar's and the renderer's threads land where malloc_trim returns them. Checked by the arenas glibc
itself reports (malloc_stats), in a fresh interpreter whose threads each allocate."""

import subprocess
import sys

import pytest

from tinygpt.train import guards

pytestmark = pytest.mark.skipif(guards._malloc_trim() is None, reason="glibc's malloc only (macOS, musl: nothing)")

THREADS_ALLOCATE = """
import ctypes, ctypes.util, sys, threading
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
if sys.argv[1] == "one":
    from tinygpt.train.guards import HeapTrim
    HeapTrim(every_n_steps=50)
kept = []
def allocate():
    kept.append(libc.malloc(4096))
for _ in range(3):
    t = threading.Thread(target=allocate)
    t.start()
    t.join()
libc.malloc_stats()  # to stderr: one "Arena N:" block per heap
"""


def arenas(mode: str) -> int:
    proc = subprocess.run([sys.executable, "-c", THREADS_ALLOCATE, mode], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    return sum(line.startswith("Arena ") for line in proc.stderr.splitlines())


@pytest.mark.slow  # several seconds: the slow tier (make test-all, CI)
def test_threads_share_the_main_heap_once_heap_trim_is_built():
    assert arenas("default") >= 2  # glibc's default: a thread that allocates gets a heap of its own
    assert arenas("one") == 1


def test_the_callback_says_whether_glibc_took_the_setting():
    assert guards.HeapTrim(every_n_steps=50).one_heap is True

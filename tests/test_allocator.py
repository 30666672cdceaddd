"""repro.allocator: glibc's malloc thresholds, set through mallopt."""

import ctypes
import ctypes.util
import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from repro import allocator
from repro.allocator import LARGEST_MMAP_THRESHOLD, fix_malloc_thresholds

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # malloc.h


class _Libc:
    """A C library whose mallopt records what it is asked and answers `answer(param)`."""

    def __init__(self, answer=lambda param: 1):
        self.calls, self.answer = [], answer

    def mallopt(self, param, value):
        self.calls.append((param, value))
        return self.answer(param)


def _with_libc(monkeypatch, libc):
    loaded = []
    monkeypatch.setattr(ctypes, "CDLL", lambda name: loaded.append(name) or libc)
    return loaded


def test_both_thresholds_go_to_the_c_librarys_mallopt_under_their_malloc_h_numbers(monkeypatch):
    libc = _Libc()
    loaded = _with_libc(monkeypatch, libc)
    assert fix_malloc_thresholds(trim_threshold=5 * 2**20, mmap_threshold=3 * 2**20) == {
        "mmap_threshold": 3 * 2**20, "trim_threshold": 5 * 2**20}
    assert sorted(libc.calls) == [(M_MMAP_THRESHOLD, 3 * 2**20), (M_TRIM_THRESHOLD, 5 * 2**20)]
    assert set(loaded) == {None}  # the symbols the process has loaded, the C library's among them
    libc.calls.clear()
    assert fix_malloc_thresholds(trim_threshold=7) == {"mmap_threshold": 32 * 2**20, "trim_threshold": 7}
    assert LARGEST_MMAP_THRESHOLD == 32 * 2**20  # glibc's largest (HEAP_MAX_SIZE / 2 on 64-bit)
    assert sorted(libc.calls) == [(M_MMAP_THRESHOLD, 32 * 2**20), (M_TRIM_THRESHOLD, 7)]


@pytest.mark.parametrize("refused", [M_MMAP_THRESHOLD, M_TRIM_THRESHOLD])
def test_a_threshold_mallopt_refuses_gives_none(monkeypatch, refused):
    _with_libc(monkeypatch, _Libc(lambda param: 0 if param == refused else 1))
    assert fix_malloc_thresholds(trim_threshold=2**30) is None


def test_no_mallopt_or_no_c_library_gives_none(monkeypatch):
    _with_libc(monkeypatch, object())  # a C library without mallopt (not glibc)
    assert fix_malloc_thresholds(trim_threshold=2**30) is None
    monkeypatch.undo()
    # symbols that cannot be loaded (ctypes raises OSError)
    monkeypatch.setattr(ctypes, "CDLL", lambda name: ctypes.cdll.LoadLibrary("/nonexistent/libc.so.6"))
    assert fix_malloc_thresholds(trim_threshold=2**30) is None


_MAPPED = """
import ctypes, ctypes.util, json, sys
from repro.allocator import fix_malloc_thresholds

class MallInfo2(ctypes.Structure):  # struct mallinfo2 (glibc 2.33)
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd",
                                                      "usmblks", "fsmblks", "uordblks", "fordblks", "keepcost")]

libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.mallinfo2.restype, libc.malloc.restype = MallInfo2, ctypes.c_void_p
libc.malloc.argtypes, libc.free.argtypes = [ctypes.c_size_t], [ctypes.c_void_p]

def mapped(size):
    before = libc.mallinfo2().hblks
    block = libc.malloc(size)
    after = libc.mallinfo2().hblks
    libc.free(block)
    return after - before

seen = {}
for threshold, given in ((2**20, {"mmap_threshold": 2**20}), (32 * 2**20, {})):  # given, and by default
    fixed = fix_malloc_thresholds(trim_threshold=2**30, **given)
    # above the threshold first (no freed heap to serve it from), then below it
    seen[threshold] = [fixed, mapped(threshold + 2**16), mapped(threshold - 2**16)]
json.dump({str(k): v for k, v in seen.items()}, sys.stdout)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt")
def test_on_glibc_blocks_below_the_mmap_threshold_come_from_the_heap_and_larger_ones_are_mapped():
    # the thresholds this process's trace combine sets: accepted as they are
    assert fix_malloc_thresholds(trim_threshold=256 * 2**20) == {"mmap_threshold": 32 * 2**20,
                                                                 "trim_threshold": 256 * 2**20}
    if not hasattr(ctypes.CDLL(ctypes.util.find_library("c")), "mallinfo2"):
        pytest.skip("glibc before 2.33 (no mallinfo2)")
    # in a fresh process (this one's heap may hold freed blocks to serve any size from), importing
    # the package this process imported
    env = {**os.environ, "PYTHONPATH": str(Path(allocator.__file__).parents[1])}
    seen = json.loads(subprocess.run([sys.executable, "-c", _MAPPED], env=env, capture_output=True, text=True,
                                     check=True).stdout)
    assert seen == {
        str(2**20): [{"mmap_threshold": 2**20, "trim_threshold": 2**30}, 1, 0],
        str(32 * 2**20): [{"mmap_threshold": 32 * 2**20, "trim_threshold": 2**30}, 1, 0],
    }

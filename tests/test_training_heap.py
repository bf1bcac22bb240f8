"""dtrain.training.heap: memory a step frees stays mapped for the next step (glibc), and a
user's own malloc settings win."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from dtrain.training import heap

# A step in miniature: allocate, touch and free a block larger than glibc's largest dynamic mmap
# threshold (32 MiB), 20 times, and count the minor page faults of the loop.
LOOP = """
import resource, sys
if sys.argv[1] == "kept":
    from dtrain.training.heap import keep_freed_memory
    assert keep_freed_memory() == "on"
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(20):
    block = bytearray(64 << 20)  # zero-filled: every page touched
    del block
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""

glibc_only = pytest.mark.skipif(heap.glibc() is None, reason="glibc's malloc settings")


def _faults(side: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "GLIBC_TUNABLES"}
    out = subprocess.run([sys.executable, "-c", LOOP, side], capture_output=True, text=True, env=env, check=True)
    return int(out.stdout)


@pytest.mark.slow
@glibc_only
def test_freed_memory_is_not_faulted_in_again():
    pages = (64 << 20) // os.sysconf("SC_PAGE_SIZE")
    default, kept = _faults("default"), _faults("kept")
    assert default >= 15 * pages  # glibc maps and unmaps the block every time
    assert kept <= 3 * pages  # the first block faults in; the next 19 reuse it


@pytest.mark.parametrize("variables, named", [
    ({"MALLOC_TRIM_THRESHOLD_": "131072"}, "MALLOC_TRIM_THRESHOLD_"),
    ({"MALLOC_MMAP_THRESHOLD_": "1", "MALLOC_TOP_PAD_": "0"}, "MALLOC_MMAP_THRESHOLD_, MALLOC_TOP_PAD_"),
    ({"GLIBC_TUNABLES": "glibc.malloc.trim_threshold=0"}, "GLIBC_TUNABLES"),
])
def test_a_users_own_malloc_settings_win(variables, named):
    assert heap.keep_freed_memory({"PATH": "/bin", **variables}) == f"off: {named} set by the user"


def test_other_tunables_do_not_stop_it():
    expected = "on" if heap.glibc() is not None else "off: not glibc"
    assert heap.keep_freed_memory({"GLIBC_TUNABLES": "glibc.pthread.rseq=0"}) == expected


def test_without_glibc_nothing_is_changed(monkeypatch):
    def no_glibc(name):
        raise ValueError(f"unrecognized configuration name {name}")

    monkeypatch.setattr(heap.os, "confstr", no_glibc)
    assert heap.glibc() is None
    assert heap.keep_freed_memory({}) == "off: not glibc"

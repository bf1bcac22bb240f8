"""Keep the memory a training step frees mapped in the process, instead of returning it every step.

A step allocates and frees the same large tensors (activations and their gradients) every time.
glibc's malloc serves a block above its mmap threshold with a fresh `mmap` and gives it back with
`munmap`, and trims the top of its heap once more than its trim threshold is free there, so on a
CPU each step faults its whole working set in again: one trap and one zeroed page per 4 KiB (the
demo recipe: 3,000-14,000 minor faults a step; the paper recipe at batch 2: 540,000-580,000, 2.2 GB).
Raising both thresholds keeps that memory mapped for the next step, as PyTorch's CUDA caching
allocator does for GPU memory: the resident size stays at the step's peak instead of dropping
between steps (docs/benchmarks.md, "Freed memory kept").

Only glibc has these settings (musl, macOS and an LD_PRELOADed jemalloc or tcmalloc manage their
own); a user who set glibc's own MALLOC_*_ or GLIBC_TUNABLES malloc variables keeps them.
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Mapping

M_TRIM_THRESHOLD = -1  # mallopt parameters, <malloc.h>
M_MMAP_THRESHOLD = -3
MMAP_THRESHOLD = 1 << 30  # blocks up to 1 GiB come from the heap (the paper recipe's largest is ~75 MB a frame)
OLD_GLIBC_MMAP_MAX = 32 << 20  # older glibc refuses a threshold above HEAP_MAX_SIZE / 2 (32 MiB)
NEVER_TRIM = -1  # mallopt(3): -1 disables trimming
USER_VARIABLES = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def glibc() -> ctypes.CDLL | None:
    """The process's C library when it is glibc, else None."""
    try:
        if not os.confstr("CS_GNU_LIBC_VERSION"):
            return None
    except (ValueError, OSError, AttributeError):  # not glibc, or not a POSIX system
        return None
    return ctypes.CDLL(None)


def user_settings(env: Mapping[str, str]) -> list[str]:
    """The variables of `env` through which the user set glibc's malloc thresholds themselves."""
    chosen = [name for name in USER_VARIABLES if name in env]
    if "glibc.malloc." in env.get("GLIBC_TUNABLES", ""):
        chosen.append("GLIBC_TUNABLES")
    return chosen


def keep_freed_memory(env: Mapping[str, str] | None = None) -> str:
    """Raise glibc's mmap and trim thresholds for this process and its forked children (data
    loader workers). Returns what was done, for the training log: 'on', or why not."""
    chosen = user_settings(os.environ if env is None else env)
    if chosen:
        return f"off: {', '.join(chosen)} set by the user"
    libc = glibc()
    if libc is None:
        return "off: not glibc"
    mallopt = libc.mallopt
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    if not (mallopt(M_MMAP_THRESHOLD, MMAP_THRESHOLD) or mallopt(M_MMAP_THRESHOLD, OLD_GLIBC_MMAP_MAX)):
        return "off: glibc refused mallopt"
    mallopt(M_TRIM_THRESHOLD, NEVER_TRIM)
    return "on"

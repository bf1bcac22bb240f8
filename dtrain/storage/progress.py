"""Progress of long snapshots, restores and verifications: counters shared by worker threads,
reported to a callback or a tqdm bar on a TTY."""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Callable, Iterator

Progress = Callable[[int, int], None]  # progress(done_bytes, total_bytes)


@contextlib.contextmanager
def reporter(progress: Progress | bool | None, desc: str) -> Iterator[Progress | None]:
    """`progress` as given when callable; a bar on stderr when None and stderr is a terminal;
    nothing when False."""
    if callable(progress):
        yield progress
        return
    if progress is False or not sys.stderr.isatty():
        yield None
        return
    from tqdm import tqdm  # imported only when a bar is drawn: keeps CLI start-up fast

    bar = tqdm(total=0, desc=desc, unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr, leave=False)

    def update(done: int, total: int) -> None:
        bar.total = total
        bar.update(done - bar.n)

    try:
        yield update
    finally:
        bar.close()


class Run:
    """Counters and progress of one capture or restore, shared by its worker threads."""

    def __init__(self, total: int, progress: Progress | None):
        self.total, self.progress = total, progress
        self.done = self.read = self.added = self.objects = 0
        self.fell_back = False
        self.changing: list[str] = []  # files written to during every read of a capture (torn)
        self.xattrs: dict[str, dict | None] = {}  # a capture's paths read: their extended attributes
        self._claimed: dict[str, object] = {}
        self._lock = threading.Lock()

    def claim(self, digest: str) -> bool:
        """True for the first thread to bring this content: the others need not write it.
        No lock: `setdefault` is one atomic step on a dict, and only the caller whose token
        went in gets it back (a lock here was taken once per chunk by every thread)."""
        mine = object()
        return self._claimed.setdefault(digest, mine) is mine

    def add(self, *, done=0, read=0, added=0, objects=0) -> None:
        with self._lock:
            self.done += done
            self.read += read
            self.added += added
            self.objects += objects
            if self.progress and done:
                self.progress(self.done, self.total)

"""Fakes for the engine's I/O seam and a tree fingerprint, shipped for tests (like httpx's
MockTransport): pass one as ``Engine(root, io=...)``."""

from __future__ import annotations

import errno
import hashlib
import os
import stat
import threading
import time
from pathlib import Path

from dtrain.storage.fileio import FileIO


class CountingIO(FileIO):
    """Counts the bytes read from files (volumes and store alike)."""

    def __init__(self):
        self.bytes_read = 0
        self._lock = threading.Lock()

    def read_into(self, fd, buf, offset):
        n = super().read_into(fd, buf, offset)
        with self._lock:
            self.bytes_read += n
        return n


class FullDiskIO(FileIO):
    """Fails with ENOSPC once `limit` bytes were written or copied, as a full disk does."""

    def __init__(self, limit: int):
        self.limit, self.written = limit, 0
        self._lock = threading.Lock()

    def _spend(self, n: int) -> None:
        with self._lock:
            if self.written + n > self.limit:
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
            self.written += n

    def write_at(self, fd, data, offset):
        self._spend(len(data))
        super().write_at(fd, data, offset)

    def copy(self, src, dst, length, src_offset, dst_offset):
        self._spend(length)
        super().copy(src, dst, length, src_offset, dst_offset)

    def clone(self, src, dst, length, src_offset, dst_offset):
        raise OSError(errno.EOPNOTSUPP, "fake disk has no clones")


class SlowIO(FileIO):
    """Sleeps before each read and copy, so that a test can kill a run midway."""

    def __init__(self, delay_s: float):
        self.delay_s = delay_s

    def read_into(self, fd, buf, offset):
        time.sleep(self.delay_s)
        return super().read_into(fd, buf, offset)

    def copy(self, src, dst, length, src_offset, dst_offset):
        time.sleep(self.delay_s)
        super().copy(src, dst, length, src_offset, dst_offset)


def tree_state(root: Path) -> dict[str, tuple]:
    """Everything a restore must reproduce, per relative path: type, mode, owner, mtime (ns),
    and a file's sha256, a symlink's target or a device node's number; extended attributes where
    there are some."""
    state = {}
    for folder, dirs, files in _walk(root):
        for name in [".", *dirs, *files] if folder == os.fspath(root) else [*dirs, *files]:
            path = os.path.normpath(os.path.join(folder, name))
            st = os.lstat(path)
            if stat.S_ISLNK(st.st_mode):
                what = os.readlink(path)
            elif stat.S_ISREG(st.st_mode):
                what = hashlib.sha256(Path(path).read_bytes()).hexdigest()
            elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                what = st.st_rdev
            else:
                what = None
            rel = os.path.relpath(path, root)
            state[rel] = (stat.S_IFMT(st.st_mode), stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid,
                          st.st_mtime_ns, what)
            if not stat.S_ISLNK(st.st_mode) and (names := os.listxattr(path, follow_symlinks=False)):
                state[rel] += (sorted((n, os.getxattr(path, n, follow_symlinks=False)) for n in names),)
    return state


def _walk(root: Path):
    """os.walk without its recursion (one frame per level): a tree of any depth."""
    waiting = [os.fspath(root)]
    while waiting:
        folder = waiting.pop()
        dirs, files = [], []
        for item in os.scandir(folder):
            (dirs if item.is_dir(follow_symlinks=False) else files).append(item.name)
        yield folder, dirs, files
        waiting += [os.path.join(folder, name) for name in dirs]

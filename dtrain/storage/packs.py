"""Pack files: how new objects are appended to shared files by many threads, read back by
many threads, and freed in place. The engine (engine.py) decides what goes in; this module
only moves bytes and names files."""

from __future__ import annotations

import contextlib
import os
import threading
from pathlib import Path
from typing import TYPE_CHECKING

from dtrain.storage import fileio

if TYPE_CHECKING:
    from dtrain.storage.engine import Engine
    from dtrain.storage.progress import Run

BLOCK = 4096  # file system block: objects of ALIGNED bytes or more start on a boundary
ALIGNED = 64 << 10  # so that deleting them frees whole blocks
OPEN_PACKS = 256  # pack descriptors a restore or verify keeps open at once


class Pack:
    """A pack being written: space handed out, writes in flight, the objects it holds."""

    def __init__(self, fd: int, tmp: str | None, name: str):
        self.fd, self.tmp, self.name = fd, tmp, name
        self.size = self.pending = 0
        self.full = self.failed = False
        self.rows: list[tuple[str, str, int, int]] = []  # (digest, pack, offset, length)

    def discard(self) -> None:
        os.close(self.fd)
        if self.tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)


class Packer:
    """New objects of one capture, appended by the worker threads to shared pack files.

    Space in the open pack is handed out under a lock; the writes themselves run in
    parallel. The last writer into a full pack seals it (flushes it and gives it its name)
    while the others go on into the next one."""

    def __init__(self, engine: Engine, run: Run):
        self.engine, self.run = engine, run
        self.known = engine._known()  # objects the store holds already
        self.lock = threading.Lock()
        self.current: Pack | None = None
        self.unsealed: list[Pack] = []
        self.sealed: list[Pack] = []
        self.syncfs = False  # packs were named without their own flush

    def wants(self, digest: str) -> bool:
        """True for content the store lacks, once per capture (the first thread to bring it)."""
        return digest not in self.known and self.run.claim(digest)

    def put(self, data: memoryview, digest: str) -> None:
        n = len(data)
        with self.lock:
            pack = self.current
            if pack is None:
                pack = self.current = self.engine._new_pack()
                self.unsealed.append(pack)
            offset = _block_up(pack.size) if n >= ALIGNED else pack.size
            pack.size = offset + n
            pack.pending += 1
            pack.rows.append((digest, pack.name, offset, n))
            if pack.size >= self.engine.pack_size:
                pack.full, self.current = True, None
        try:
            self.engine.io.write_at(pack.fd, data, offset)
        except BaseException:
            pack.failed = True
            raise
        finally:
            with self.lock:
                pack.pending -= 1
                last = pack.full and pack.pending == 0 and not pack.failed
        self.run.add(added=n, objects=1)
        if last:
            self.seal(pack)

    def seal(self, pack: Pack, *, sync: bool = True) -> None:
        """Flush a complete pack (durable stores; with sync=False, `finish` flushes the whole
        file system once) and name it; its objects are indexed at `finish`."""
        try:
            if self.engine.durable and sync:
                os.fdatasync(pack.fd)
            elif self.engine.durable:
                self.syncfs = True
            path = self.engine.pack_path(pack.name)
            if pack.tmp is None:
                fileio.link_fd(pack.fd, path)
            else:
                os.rename(pack.tmp, path)
        except BaseException:
            pack.failed = True
            raise
        with self.lock:
            if pack in self.unsealed:
                self.unsealed.remove(pack)
            self.sealed.append(pack)
        os.close(pack.fd)

    def finish(self) -> None:
        """Seal the last pack, flush the folders that got new names, then index everything."""
        if self.current is not None:
            self.seal(self.current)
            self.current = None
        if not self.sealed:
            return
        if self.syncfs:  # one btrfs/XFS commit rather than an fdatasync per cloned file
            fileio.syncfs(self.engine.root)
        elif self.engine.durable:
            folders = sorted({p.name[:2] for p in self.sealed})
            self.engine._parallel(lambda f: fileio.fsync_path(Path(self.engine._packs, f), directory=True), folders)
        self.engine._index(self.sealed)

    def abort(self) -> None:
        """Drop the packs still being written (named ones are swept later)."""
        with self.lock:
            for pack in self.unsealed:
                with contextlib.suppress(OSError):
                    pack.discard()
            self.unsealed, self.current = [], None


class PackFiles:
    """Read descriptors of pack files, shared by a restore's or a verification's threads;
    at most OPEN_PACKS stay open (reflink stores hold one pack per file)."""

    def __init__(self, engine: Engine):
        self.engine = engine
        self.fds: dict[str, int] = {}
        self.lock = threading.Lock()

    def __enter__(self) -> PackFiles:
        return self

    def __exit__(self, *exc) -> None:
        for fd in self.fds.values():
            os.close(fd)
        self.fds.clear()

    @contextlib.contextmanager
    def open(self, name: str):
        fd = self.fds.get(name)
        if fd is not None:
            yield fd
            return
        fd = os.open(self.engine.pack_path(name), os.O_RDONLY)
        with self.lock:
            if len(self.fds) < OPEN_PACKS and name not in self.fds:
                self.fds[name] = fd
                cached = True
            else:
                cached = False
        try:
            yield fd
        finally:
            if not cached:
                os.close(fd)


def _block_up(offset: int) -> int:
    return -(-offset // BLOCK) * BLOCK


def punch_dead(path: str, live: list[tuple[int, int]]) -> None:
    """Free the blocks of a pack that no live object touches; cut a dead tail off."""
    live.sort()
    os.chmod(path, 0o644)
    fd = os.open(path, os.O_RDWR)
    try:
        end = 0
        for offset, length in live:
            start = _block_up(end)
            stop = offset // BLOCK * BLOCK
            if stop > start:
                fileio.punch_hole(fd, start, stop - start)
            end = max(end, offset + length)
        if os.fstat(fd).st_size > end:
            os.ftruncate(fd, end)
    finally:
        os.close(fd)
        os.chmod(path, 0o444)

"""Restoring a stored snapshot: recreate a manifest's tree from the pack store.

The engine's `materialize` calls this for every snapshot that is not a native subvolume. It
imports nothing of the engine: the engine hands over its pack store, byte seam, method and
worker pool.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Callable
from pathlib import Path

from dtrain.errors import StorageError
from dtrain.storage.fileio import UNSUPPORTED, FileIO
from dtrain.storage.manifest import Entry, Manifest
from dtrain.storage.packs import PackFiles, PackStore
from dtrain.storage.progress import Progress, Run


class Restore:
    """One engine's way of writing a tree back: clones where the store reflinks, copies elsewhere."""

    def __init__(self, store: PackStore, *, io: FileIO, method: str, parallel: Callable,
                 wrap: Callable[..., StorageError]):
        self.packs = store
        self.io = io
        self.method = method
        self._parallel = parallel  # fn over items on the engine's worker threads, in order
        self._wrap = wrap  # an OSError -> StorageError naming the store and the space needed

    def tree(self, manifest: Manifest, dest: Path, *, progress: Progress | None = None) -> str:
        """Recreate the tree at `dest`, which must not exist; returns the method used. On
        failure `dest` is left partial."""
        run = Run(sum(e.size for e in manifest.entries if e.kind == "file"), progress)
        where = self.packs.locations(manifest.digests())
        as_root = os.geteuid() == 0
        root = os.fspath(dest)
        try:
            with self.packs.files() as packs:
                os.mkdir(root, 0o700)
                levels: dict[int, list[Entry]] = {}  # folders by depth: each level in parallel
                for e in manifest.entries:
                    if e.kind == "dir" and e.path != ".":
                        levels.setdefault(e.path.count("/"), []).append(e)
                for depth in sorted(levels):
                    self._parallel(lambda e: os.mkdir(f"{root}/{e.path}", 0o700), levels[depth])
                files = [e for e in manifest.entries if e.kind == "file"]
                batches = [files[i:i + 32] for i in range(0, len(files), 32)]  # a task per file costs more than a small file
                self._parallel(lambda batch: [self._restore_file(e, root, manifest.chunk_size, as_root, where, packs, run)
                                              for e in batch], batches)
            for e in manifest.entries:
                if e.kind == "symlink":
                    path = f"{root}/{e.path}"
                    os.symlink(e.target, path)
                    if as_root:
                        os.lchown(path, e.uid, e.gid)
                    os.utime(path, ns=(e.mtime_ns, e.mtime_ns), follow_symlinks=False)
            for depth in sorted(levels, reverse=True):  # deepest first: a read-only folder is finished last
                self._parallel(lambda e: _finish_dir(f"{root}/{e.path}", e, as_root), levels[depth])
            for e in manifest.entries:
                if e.path == ".":  # not always first: '-x' sorts before '.'
                    _finish_dir(root, e, as_root)
        except OSError as err:
            raise self._wrap(err, f"restoring into {dest}", needed=run.total - run.done) from err
        return "cas" if run.fell_back else self.method

    def _restore_file(self, e: Entry, dest: str, chunk_size: int, as_root: bool, where: dict,
                      packs: PackFiles, run: Run) -> None:
        fd = os.open(f"{dest}/{e.path}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            for i, digest in enumerate(e.chunks):
                pack, offset, length = where[digest]
                try:
                    with packs.open(pack) as src:
                        self._restore_chunk(digest, src, offset, length, fd, i * chunk_size, run)
                except FileNotFoundError:
                    raise StorageError(f"object {digest[:12]} is missing from the snapshot store (its pack "
                                       f"is gone); run `dtrain snapshot verify`") from None
            if as_root:
                os.fchown(fd, e.uid, e.gid)  # before chmod: chown clears setuid bits
            os.fchmod(fd, e.mode)
            os.utime(fd, ns=(e.mtime_ns, e.mtime_ns))
        finally:
            os.close(fd)

    def _restore_chunk(self, digest: str, src: int, offset: int, length: int, fd: int, at: int, run: Run) -> None:
        try:
            if self.method == "reflink" and not run.fell_back:
                try:
                    self.io.clone(src, fd, length, offset, at)
                    run.add(done=length)
                    return
                except OSError as err:
                    if err.errno not in UNSUPPORTED:
                        raise
                    if err.errno != errno.EINVAL:  # EINVAL: this range is not block-aligned
                        run.fell_back = True
            self.io.copy(src, fd, length, offset, at)
            run.add(done=length)
        except EOFError:
            raise StorageError(f"object {digest[:12]} is shorter than recorded: the snapshot store is "
                               f"damaged; run `dtrain snapshot verify`") from None


def _finish_dir(path: str, e: Entry, as_root: bool) -> None:
    if as_root:
        os.chown(path, e.uid, e.gid)
    os.chmod(path, e.mode)
    os.utime(path, ns=(e.mtime_ns, e.mtime_ns))

"""Restoring a stored snapshot: recreate a manifest's tree from the pack store.

The engine's `materialize` calls this for every snapshot that is not a native subvolume. It
imports nothing of the engine: the engine hands over its pack store, byte seam, method and
worker pool.
"""

from __future__ import annotations

import errno
import os
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from dtrain.errors import StorageError
from dtrain.names import counted
from dtrain.storage import hashing
from dtrain.storage.fileio import UNSUPPORTED, FileIO, is_disk_full, plain_command
from dtrain.storage.entries import Entry, hard_links
from dtrain.storage.manifest import Manifest, open_beneath
from dtrain.storage.packs import UNHASHED, PackFiles, PackStore
from dtrain.storage.progress import Progress, Run


class Restore:
    """One engine's way of writing a tree back: clones where the store reflinks, copies elsewhere."""

    def __init__(self, store: PackStore, *, io: FileIO, method: str, parallel: Callable,
                 wrap: Callable[..., StorageError], command: Callable[[str], str] = plain_command):
        self.packs = store
        self.io = io
        self.method = method
        self._parallel = parallel  # fn over items on the engine's worker threads, in order
        self._wrap = wrap  # an OSError -> StorageError naming the store and the space needed
        self.command = command  # how a hint names a dtrain command
        self._local = threading.local()  # each thread's read buffer
        self._expected: dict[str, str] = {}  # content id -> the hash its bytes must have

    def tree(self, manifest: Manifest, dest: Path, *, progress: Progress | None = None) -> str:
        """Recreate the tree at `dest`, which must not exist; returns the method used. On
        failure `dest` is left partial."""
        run = Run(sum(e.size for e in manifest.entries if e.kind == "file"), progress)
        digests = manifest.digests()
        where = self.packs.locations(digests)
        # what each object's bytes must hash to: its name, or for one stored unhashed (a reflink
        # clone) the hash verify recorded, if any (unrecorded ones are copied unchecked)
        self._expected = {d: d for d in digests if not d.startswith(UNHASHED)}
        self._xattrs = manifest.xattrs or {}  # path -> {name: base64 value}
        self._refused: list[str] = []  # attributes this process may not set (or the file system keeps none)
        self._expected |= self.packs.recorded_hashes({d for d in digests if d.startswith(UNHASHED)})
        as_root = os.geteuid() == 0
        root = os.fspath(dest)
        # Every path below is reached from a descriptor of `dest` with no link followed on any
        # component (open_beneath): a folder swapped for a link while the restore runs fails the
        # restore (ELOOP) instead of leading a mkdir, a new file, a chown or a chmod outside.
        root_fd = None
        try:
            os.mkdir(root, 0o700)
            root_fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
            with self.packs.files() as packs:
                levels: dict[int, list[Entry]] = {}  # folders by depth: each level in parallel
                for e in manifest.entries:
                    if e.kind == "dir" and e.path != ".":
                        levels.setdefault(e.path.count("/"), []).append(e)
                for depth in sorted(levels):
                    self._parallel(lambda e: _in_parent(root, root_fd, e.path, _mkdir), levels[depth])
                files = [e for e in manifest.entries if e.kind == "file"]
                links = hard_links(files)  # later paths of one inode: linked to the first below
                if links:
                    files = [e for e in files if e.path not in links]
                batches = [files[i:i + 32] for i in range(0, len(files), 32)]  # a task per file costs more than a small file
                self._parallel(lambda batch: [self._restore_file(e, root, root_fd, manifest.chunk_size, as_root, where,
                                                                 packs, run) for e in batch], batches)
            _links_and_nodes(manifest, links, root, root_fd, as_root, run)
            for depth in sorted(levels, reverse=True):  # deepest first: a read-only folder is finished last
                self._parallel(lambda e: self._finish_dir(root, root_fd, e, as_root), levels[depth])
            for e in manifest.entries:
                if e.path == ".":  # not always first: '-x' sorts before '.'
                    self._finish_dir(root, root_fd, e, as_root)
            if self._refused:
                import logging  # here, not at start-up: only a restore of attributes it may not set needs it

                logging.getLogger(__name__).warning(
                    "restore into %s leaves out %s this user or file system cannot set, "
                    "e.g. %s", dest, counted(len(self._refused), "extended attribute"), self._refused[0])
        except OSError as err:
            raise self._wrap(err, f"restoring into {dest}", needed=run.total - run.done) from err
        finally:
            if root_fd is not None:
                os.close(root_fd)
        return "cas" if run.fell_back else self.method

    def _restore_file(self, e: Entry, dest: str, root_fd: int, chunk_size: int, as_root: bool, where: dict,
                      packs: PackFiles, run: Run) -> None:
        fd = open_beneath(dest, e.path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, root_fd=root_fd, mode=0o600)
        try:
            holes = False
            for i, digest in enumerate(e.chunks):
                pack, offset, length = where[digest]
                if length == chunk_size and self._zeros(digest, length):
                    holes = True  # a whole chunk of zeros stays a hole: a sparse file stays sparse
                    run.add(done=length)
                    continue
                try:
                    with packs.open(pack) as src:
                        holes = self._restore_chunk(digest, src, offset, length, fd, i * chunk_size, run) or holes
                except FileNotFoundError:
                    raise StorageError(f"object {digest[:12]} of {e.path!r} is missing from the snapshot store "
                                       f"(its pack is gone); run '{self.command('snapshot verify')}'") from None
                except _Damaged as bad:
                    raise StorageError(f"object {digest[:12]} of {e.path!r} {bad}: the snapshot store is damaged "
                                       f"and nothing was restored; run '{self.command('snapshot verify')}' to see which "
                                       f"snapshots it breaks") from None
            if holes:
                os.ftruncate(fd, e.size)  # a hole at the end too
            if as_root:
                os.fchown(fd, e.uid, e.gid)  # before chmod: chown clears setuid bits (and capabilities)
            if e.path in self._xattrs:
                self._set_xattrs(fd, e.path)  # while still writable: a user.* attribute needs write access
            os.fchmod(fd, e.mode)
            os.utime(fd, ns=(e.mtime_ns, e.mtime_ns))
        finally:
            os.close(fd)

    def _set_xattrs(self, fd: int, path: str) -> None:
        import base64

        for name, value in self._xattrs[path].items():
            try:
                os.setxattr(fd, name, base64.b64decode(value))
            except OSError as err:  # trusted.* or security.* as a user; a file system without them
                if err.errno not in (errno.EPERM, errno.EACCES, errno.ENOTSUP, errno.EOPNOTSUPP):
                    raise
                self._refused.append(f"{path}: {name}")

    def _finish_dir(self, root: str, root_fd: int, e: Entry, as_root: bool) -> None:
        """A folder's owner, attributes, mode and time, set through a descriptor of the folder
        itself (a link put in its place is never followed)."""
        fd = root_fd if e.path == "." else open_beneath(root, e.path, os.O_RDONLY | os.O_DIRECTORY,
                                                        root_fd=root_fd)
        try:
            if as_root:
                os.fchown(fd, e.uid, e.gid)
            if e.path in self._xattrs:
                self._set_xattrs(fd, e.path)
            os.fchmod(fd, e.mode)
            os.utime(fd, ns=(e.mtime_ns, e.mtime_ns))
        finally:
            if fd != root_fd:
                os.close(fd)

    def _restore_chunk(self, digest: str, src: int, offset: int, length: int, fd: int, at: int, run: Run) -> bool:
        """Write one object at `at`; True when its tail was left a hole (the file's size is then
        set at the end)."""
        try:
            if self.method == "reflink" and not run.fell_back:
                try:
                    self.io.clone(src, fd, length, offset, at)
                    run.add(done=length)
                    return False
                except OSError as err:
                    if err.errno not in UNSUPPORTED:
                        raise
                    if err.errno != errno.EINVAL:  # EINVAL: this range is not block-aligned
                        run.fell_back = True
            expected = self._expected.get(digest)
            if expected is None:  # stored unhashed and never verified: nothing to check against
                self.io.copy(src, fd, length, offset, at)
                run.add(done=length)
                return False
            # Copied through a buffer and hashed on the way: a restore never writes bytes that
            # are not what the snapshot recorded (a flipped bit in a pack, a pack cut short).
            buf = self._buffer(length)
            try:
                n = self.io.read_into(src, buf, offset)
            except OSError as err:
                if is_disk_full(err):
                    raise
                raise _Damaged(f"cannot be read ({err.strerror or err})") from None
            if n < length:
                raise EOFError
            h = hashing.hasher_for(expected)
            h.update(buf)
            if not hashing.matches(expected, h):
                raise _Damaged("is corrupt (its bytes no longer match their hash)")
            runs = _data_runs(self._local.raw, length)  # whole blocks of zeros stay holes
            for start, end in runs:
                self.io.write_at(fd, buf[start:end], at + start)
            run.add(done=length)
            return not runs or runs[-1][1] < length
        except EOFError:
            raise _Damaged("is shorter than recorded") from None

    def _zeros(self, digest: str, length: int) -> bool:
        """Whether the object `digest` names is `length` zero bytes (by its name, or for one
        stored unhashed by the hash verify recorded)."""
        expected = self._expected.get(digest)
        return expected is not None and expected == hashing.zeros(length, hashing.algorithm_of(expected))

    def _buffer(self, length: int) -> memoryview:
        buf = getattr(self._local, "buf", None)
        if buf is None or len(buf) < length:
            self._local.raw = bytearray(length)  # kept too: its startswith compares without a copy
            buf = self._local.buf = memoryview(self._local.raw)
        return buf[:length]


BLOCK = 4096  # the unit of a hole: a file system block on ext4, XFS and btrfs
_ZERO_BLOCK = bytes(BLOCK)


def _data_runs(raw: bytearray, length: int) -> list[tuple[int, int]]:
    """(start, end) of the runs of raw[:length] to write, in order: everything but whole blocks
    of zeros, which a new file already reads as (holes), as `cp --sparse` leaves them. A sparse
    file's data regions sit inside chunks of zeros: 4 KiB of data in a 1 GiB file restored
    4 MiB of disk. Each block is compared in place (bytearray.startswith, a memcmp): ~0.1 ms a
    4 MiB chunk, against ~0.7 ms to hash it."""
    runs: list[tuple[int, int]] = []
    start = None
    whole = length - length % BLOCK
    for i in range(0, whole, BLOCK):
        if raw.startswith(_ZERO_BLOCK, i):
            if start is not None:
                runs.append((start, i))
                start = None
        elif start is None:
            start = i
    if start is not None or whole < length:  # a tail shorter than a block is written as it is
        runs.append((whole if start is None else start, length))
    return runs


class _Damaged(Exception):
    """An object that cannot be restored as recorded (the text says how)."""


def _in_parent(root: str, root_fd: int, rel: str, fn: Callable[[str, int], None]) -> None:
    """fn(name, parent folder's descriptor) for the path `rel` beneath `root`, its parent
    reached with no link followed."""
    parent, _, name = rel.rpartition("/")
    if not parent:
        fn(name, root_fd)
        return
    fd = open_beneath(root, parent, os.O_RDONLY | os.O_DIRECTORY, root_fd=root_fd)
    try:
        fn(name, fd)
    finally:
        os.close(fd)


def _links_and_nodes(manifest: Manifest, links: dict[str, str], root: str, root_fd: int, as_root: bool,
                     run: Run) -> None:
    """What is not a folder nor a file's first path: hard links, symlinks and special files."""
    refused: list[str] = []  # device nodes this process may not make (not root)
    for e in manifest.entries:
        if e.path in links:
            _link(root, root_fd, links[e.path], e.path)
            run.add(done=e.size)
        elif e.kind == "symlink":
            _in_parent(root, root_fd, e.path, lambda name, at, e=e: _symlink(name, at, e, as_root))
        elif e.kind in _NODES:
            _in_parent(root, root_fd, e.path, lambda name, at, e=e: _special(name, at, e, as_root, refused))
    if refused:
        import logging  # here, not at start-up: only a restore of device nodes as a user needs it

        logging.getLogger(__name__).warning("restore into %s leaves out %s (only root may make "
                                            "them), e.g. %s", root, counted(len(refused), "device node"), refused[0])


def _link(root: str, root_fd: int, first: str, rel: str) -> None:
    """`rel` as another name of the file restored at `first` (both beneath `root`, their
    folders reached with no link followed; the file itself is never a link, as it was made here)."""
    def link(name: str, at: int) -> None:
        _in_parent(root, root_fd, first, lambda first_name, first_at: os.link(
            first_name, name, src_dir_fd=first_at, dst_dir_fd=at, follow_symlinks=False))

    _in_parent(root, root_fd, rel, link)


def _mkdir(name: str, at: int) -> None:
    os.mkdir(name, 0o700, dir_fd=at)


def _symlink(name: str, at: int, e: Entry, as_root: bool) -> None:
    os.symlink(e.target, name, dir_fd=at)
    if as_root:
        os.chown(name, e.uid, e.gid, dir_fd=at, follow_symlinks=False)
    os.utime(name, ns=(e.mtime_ns, e.mtime_ns), dir_fd=at, follow_symlinks=False)


_NODES = {"fifo": stat.S_IFIFO, "socket": stat.S_IFSOCK, "chardev": stat.S_IFCHR, "blockdev": stat.S_IFBLK}


def _special(name: str, at: int, e: Entry, as_root: bool, refused: list[str]) -> None:
    """A fifo, socket or device node made again (never opened: opening a device can act on it),
    then its owner, mode and time set on the name without following a link."""
    try:
        os.mknod(name, 0o600 | _NODES[e.kind], e.device, dir_fd=at)
    except PermissionError:
        if e.kind not in ("chardev", "blockdev"):
            raise
        refused.append(e.path)
        return
    if as_root:
        os.chown(name, e.uid, e.gid, dir_fd=at, follow_symlinks=False)  # before chmod: chown clears setuid
    try:
        os.chmod(name, e.mode, dir_fd=at, follow_symlinks=False)
    except NotImplementedError:  # a C library without fchmodat(AT_SYMLINK_NOFOLLOW): the node made just now
        os.chmod(name, e.mode, dir_fd=at)
    os.utime(name, ns=(e.mtime_ns, e.mtime_ns), dir_fd=at, follow_symlinks=False)

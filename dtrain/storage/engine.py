"""The content-addressed snapshot store: a few verbs, no policy.

Layout under the store root::

    objects/ab/cdef...   one file per distinct chunk, named by its sha256, read-only
    manifests/<id>.json.gz   what one snapshot holds (see manifest.py); written last
    tmp/                 objects and manifests being written; renamed into place when whole
    damaged/             objects that failed verification, moved aside so they are rewritten
    pins/                one marker per running capture or restore (crash detection)
    lock                 flock: shared while capturing or restoring, exclusive while sweeping

Files are cut into fixed chunks (4 MiB) so that a checkpoint appended to or partly rewritten
stores only the chunks that changed; identical chunks are stored once across all volumes.
Where the file system clones copy-on-write (btrfs, XFS), chunks are cloned into and out of
the store (method 'reflink': no data copied); elsewhere they are copied (method 'cas').
Store objects are never hard-linked into a volume: a job writing in place would corrupt them.

Crash safety: an object or manifest only appears under its final name once complete, and a
snapshot exists only once the caller registers its manifest. Everything a killed process left
(temp files, unreferenced objects, unregistered manifests) is removed by `sweep`, which runs
only while nobody holds a pin.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import itertools
import logging
import os
import shutil
import stat
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from dtrain.errors import StorageError
from dtrain.storage import fileio
from dtrain.storage.fileio import UNSUPPORTED, FileIO
from dtrain.storage.info import CaptureStats, SweepStats, VerifyStats, human_bytes
from dtrain.storage.manifest import Entry, Manifest, meta_entry, scan, unchanged
from dtrain.storage.progress import Progress, Run

CHUNK_SIZE = 4 << 20
log = logging.getLogger(__name__)


class Engine:
    """Snapshot store verbs: capture, commit, load, materialize, drop, sweep, verify."""

    def __init__(self, root: Path, *, io: FileIO | None = None, chunk_size: int = CHUNK_SIZE,
                 workers: int | None = None, racy_window_ns: int = 100_000_000,
                 method: str | None = None, durable: bool = True):
        self.root = Path(root)
        self.io = io or FileIO()  # the seam tests swap to count reads or fake a full disk
        self.chunk_size = chunk_size  # bytes per chunk; a multiple of the file system block
        # threads overlap the latency of file creation (the bottleneck on small files), and
        # hashing and copies release the GIL: more threads than cores pay off
        self.workers = workers or min(16, max(8, 2 * (os.cpu_count() or 1)))
        self.racy_window_ns = racy_window_ns  # files changed this close to a capture get re-read
        self.durable = durable  # flush objects to disk before a manifest refers to them
        for sub in ("objects", "manifests", "tmp", "damaged", "pins"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        if not (self.root / "objects" / "ff").is_dir():
            fileio.spread_subfolders(self.root / "objects")
            for i in range(256):
                (self.root / "objects" / f"{i:02x}").mkdir(exist_ok=True)
        self.method = method or ("reflink" if fileio.probe_reflink(self.root) else "cas")
        self._anonymous = fileio.probe_tmpfile(self.root)  # O_TMPFILE: no temp names to clean up
        self._objects = os.fspath(self.root / "objects")
        self._tmpdir = os.fspath(self.root / "tmp")
        self._local = threading.local()
        self._names = itertools.count()

    # --- paths -------------------------------------------------------------------------
    def object_path(self, digest: str) -> str:
        return f"{self._objects}/{digest[:2]}/{digest[2:]}"  # a str: built once per chunk

    def manifest_path(self, manifest_id: str) -> Path:
        return self.root / "manifests" / f"{manifest_id}.json.gz"

    def _tmp(self) -> str:
        return f"{self._tmpdir}/{os.getpid()}-{threading.get_ident()}-{next(self._names)}"

    # --- pins and sweeping -------------------------------------------------------------
    @contextlib.contextmanager
    def pin(self):
        """Hold while capturing, committing or restoring: no object vanishes meanwhile."""
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        marker = self.root / "pins" / f"{os.getpid()}-{uuid.uuid4().hex}"
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            marker.touch()
            yield
        finally:
            marker.unlink(missing_ok=True)
            os.close(fd)

    def request_sweep(self) -> None:
        (self.root / "sweep-pending").touch()

    def sweep(self, live_ids: Callable[[], Iterable[str]], *, force: bool = False) -> SweepStats | None:
        """Delete what no registered manifest needs; None when a pin is held (retried later).

        Runs only when forced, requested, or when pins of killed processes are left over.
        `live_ids` is called under the lock, so it sees every commit that happened before.
        """
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return None
            pending = self.root / "sweep-pending"
            if not (force or pending.exists() or os.listdir(self.root / "pins")):
                return SweepStats(objects=0, bytes=0, leftovers=0)
            stats, complete = self._sweep_locked(set(live_ids()))
            if complete:
                pending.unlink(missing_ok=True)
            return stats
        finally:
            os.close(fd)

    def _sweep_locked(self, live: set[str]) -> tuple[SweepStats, bool]:
        leftovers = 0
        for sub in ("tmp", "pins"):
            for item in os.scandir(self.root / sub):
                os.unlink(item.path)
                leftovers += 1
        for item in os.scandir(self.root / "manifests"):
            if item.name.removesuffix(".json.gz") not in live:  # written, then killed before registering
                os.unlink(item.path)
                leftovers += 1
        needed: set[str] = set()
        for manifest_id in live:
            try:
                needed |= self.load(manifest_id).digests()
            except (OSError, ValueError):  # never delete what an unreadable manifest may need
                return SweepStats(objects=0, bytes=0, leftovers=leftovers), False
        objects = freed = 0
        for fan in os.scandir(self.root / "objects"):
            for item in os.scandir(fan.path):
                if fan.name + item.name not in needed:
                    freed += item.stat().st_size
                    os.unlink(item.path)
                    objects += 1
        for item in os.scandir(self.root / "damaged"):
            if item.name not in needed or os.path.exists(self.object_path(item.name)):
                os.unlink(item.path)
        return SweepStats(objects=objects, bytes=freed, leftovers=leftovers), True

    # --- capture -----------------------------------------------------------------------
    def capture(self, src: Path, *, base: Manifest | None = None, progress: Progress | None = None,
                store: bool = True) -> tuple[Manifest, CaptureStats]:
        """Record the tree under `src`, storing new chunks (call inside `pin`).

        Files whose lstat matches `base` are not read. With store=False nothing is written:
        the manifest describes the live tree (used by diff).
        """
        started = time.time_ns()
        old = {e.path: e for e in base.entries} if base else {}
        cutoff = base.started_ns - self.racy_window_ns if base else 0
        damaged = set(os.listdir(self.root / "damaged"))
        run = Run(0, progress)
        items, reading, skipped = [], {}, []
        pool = ThreadPoolExecutor(self.workers)
        try:
            for rel, st in scan(src):  # reading starts while the walk goes on
                items.append((rel, st))
                if stat.S_ISREG(st.st_mode) and not unchanged(old.get(rel), st, cutoff, damaged):
                    run.total += st.st_size
                    reading[rel] = pool.submit(self._ingest, src, rel, store, run)
            items.sort()
            entries = [self._entry(src, rel, st, old, reading, skipped) for rel, st in items]
            if self.durable and run.fanouts:  # the new names, once their data is on disk
                self._parallel(lambda d: fileio.fsync_path(Path(self._objects, d), directory=True),
                               sorted(run.fanouts))
        except BaseException as err:
            pool.shutdown(cancel_futures=True)
            self.request_sweep()  # the objects written so far are garbage now
            if isinstance(err, OSError):
                raise self._wrap(err, f"snapshotting {src}", needed=run.total) from err
            raise
        finally:
            pool.shutdown()
        if skipped:
            log.warning("snapshot of %s skips %d socket(s), fifo(s) or device(s), e.g. %s",
                        src, len(skipped), skipped[0])
        done = tuple(e for e in entries if e is not None)
        files = [e for e in done if e.kind == "file"]
        stats = CaptureStats(files=len(files), bytes=sum(e.size for e in files), read_bytes=run.read,
                             added_bytes=run.added, added_objects=run.objects, skipped=tuple(skipped),
                             method="cas" if run.fell_back else self.method)
        if base is not None and not reading and base.same_tree(done):
            return base, stats  # commit links the stored manifest: an unchanged volume adds no bytes
        return Manifest(entries=done, started_ns=started, chunk_size=self.chunk_size), stats

    def _entry(self, src: Path, rel: str, st: os.stat_result, old: dict, reading: dict,
               skipped: list) -> Entry | None:
        if rel in reading:
            return reading[rel].result()
        if stat.S_ISREG(st.st_mode):
            return old[rel]  # same ctime: mode and owner are unchanged too
        if stat.S_ISDIR(st.st_mode):
            return meta_entry(rel, st)
        if stat.S_ISLNK(st.st_mode):
            return meta_entry(rel, st, os.readlink(f"{src}/{rel}"))
        skipped.append(rel)
        return None

    def _ingest(self, src: Path, rel: str, store: bool, run: Run) -> Entry | None:
        """Hash one file chunk by chunk, storing chunks the store lacks; None if it vanished."""
        try:
            fd = os.open(f"{src}/{rel}", os.O_RDONLY | os.O_NOFOLLOW)
        except FileNotFoundError:  # deleted since the walk: the snapshot records it as gone
            return None
        try:
            st = os.fstat(fd)
            chunks, offset = [], 0
            while True:
                length, digest = self._put_chunk(fd, offset, st.st_size, store, run)
                if length == 0:
                    break
                chunks.append(digest)
                offset += length
                if length < self.chunk_size:
                    break
        finally:
            os.close(fd)
        # a file that changed size while being read is recorded as read, and re-read next time
        ctime = st.st_ctime_ns if offset == st.st_size else 0
        return Entry(rel, "file", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns, offset,
                     chunks, st.st_ino, ctime)

    def _put_chunk(self, fd: int, offset: int, size: int, store: bool, run: Run) -> tuple[int, str]:
        if store and self.method == "reflink" and not run.fell_back and offset < size:
            try:
                return self._clone_chunk(fd, offset, min(self.chunk_size, size - offset), run)
            except OSError as err:
                if err.errno not in UNSUPPORTED:
                    raise
                run.fell_back = True
        buf = self._buffer()
        n = self.io.read_into(fd, buf, offset)
        if n == 0:
            return 0, ""
        digest = hashlib.sha256(buf[:n]).hexdigest()
        run.add(done=n, read=n)
        if store and not os.path.exists(self.object_path(digest)) and run.claim(digest):
            out, tmp = self._open_new(digest[:2])
            try:
                self.io.write(out, buf[:n])
                if self.durable:  # this object's data only: its cost does not depend on other writers
                    os.fdatasync(out)
            except BaseException:
                self._discard(out, tmp)
                raise
            self._publish(out, tmp, digest, n, run)
        return n, digest

    def _clone_chunk(self, fd: int, offset: int, length: int, run: Run) -> tuple[int, str]:
        """Clone the range first and hash the clone, so the digest names exactly what is kept
        even if the file is being rewritten meanwhile."""
        out, tmp = self._open_new()
        try:
            self.io.clone(fd, out, length, offset, 0)
            if self.durable:
                os.fdatasync(out)
            buf = self._buffer()
            n = self.io.read_into(out, buf, 0)
            digest = hashlib.sha256(buf[:n]).hexdigest()
        except BaseException:
            self._discard(out, tmp)
            raise
        run.add(done=n, read=n)
        if os.path.exists(self.object_path(digest)) or not run.claim(digest):
            self._discard(out, tmp)
        else:
            self._publish(out, tmp, digest, n, run)
        return n, digest

    def _open_new(self, fanout: str | None = None) -> tuple[int, str | None]:
        """A file for a new object: unnamed (O_TMPFILE) where possible, so that a killed run
        leaves nothing behind and naming it is a single link; a temp file elsewhere. Created in
        its final folder when known: ext4 allocates inodes near their folder, and 256 folders
        spread over many block groups allocate much faster than one."""
        if self._anonymous:
            folder = f"{self._objects}/{fanout}" if fanout else self._tmpdir
            return os.open(folder, os.O_TMPFILE | os.O_RDWR, 0o444), None
        tmp = self._tmp()
        return os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o444), tmp

    def _publish(self, fd: int, tmp: str | None, digest: str, n: int, run: Run) -> None:
        """Name a complete object and close it. Another process storing the same content at
        the same moment wins the race harmlessly."""
        try:
            if tmp is None:
                fileio.link_fd(fd, self.object_path(digest))
            else:
                os.rename(tmp, self.object_path(digest))
            run.add(added=n, objects=1, fanout=digest[:2])
        except FileExistsError:
            pass
        finally:
            os.close(fd)

    def _discard(self, fd: int, tmp: str | None) -> None:
        os.close(fd)
        if tmp is not None:
            os.unlink(tmp)

    def _parallel(self, fn: Callable, items: list) -> list:
        """fn over items on the worker threads, results in order; the first error cancels the rest."""
        if len(items) < 2 or self.workers == 1:
            return [fn(item) for item in items]
        with ThreadPoolExecutor(self.workers) as pool:
            futures = [pool.submit(fn, item) for item in items]
            try:
                return [f.result() for f in futures]
            except BaseException:
                pool.shutdown(wait=True, cancel_futures=True)
                raise

    def _buffer(self) -> memoryview:
        buf = getattr(self._local, "buf", None)
        if buf is None or len(buf) != self.chunk_size:
            buf = self._local.buf = memoryview(bytearray(self.chunk_size))
        return buf

    # --- manifests -----------------------------------------------------------------------
    def commit(self, manifest_id: str, manifest: Manifest) -> None:
        """Write the manifest under its final name (call inside `pin` and the caller's
        registration transaction, so that a crash leaves either both or a sweepable file)."""
        tmp = self._tmp()
        try:
            try:  # manifests are immutable: an unchanged tree shares its base's file
                if manifest.id is None:
                    raise FileNotFoundError
                os.link(self.manifest_path(manifest.id), self.manifest_path(manifest_id))
            except FileNotFoundError:
                with open(tmp, "wb") as f:
                    f.write(manifest.dump())
                    if self.durable:
                        os.fsync(f.fileno())
                os.rename(tmp, self.manifest_path(manifest_id))
            if self.durable:
                fileio.fsync_path(self.root / "manifests", directory=True)
        except OSError as err:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise self._wrap(err, "writing a snapshot manifest", needed=0) from err

    def load(self, manifest_id: str) -> Manifest:
        return Manifest.parse(self.manifest_path(manifest_id).read_bytes(), manifest_id)

    def drop(self, manifest_id: str) -> None:
        """Forget a manifest; its objects go at the next sweep."""
        self.manifest_path(manifest_id).unlink(missing_ok=True)
        self.request_sweep()

    # --- restore -----------------------------------------------------------------------
    def materialize(self, manifest: Manifest, dest: Path, *, progress: Progress | None = None) -> str:
        """Recreate the tree at `dest`, which must not exist (call inside `pin`).

        Returns the method used. On failure `dest` is left partial: restore into a temporary
        folder and rename it into place.
        """
        run = Run(sum(e.size for e in manifest.entries if e.kind == "file"), progress)
        as_root = os.geteuid() == 0
        root = os.fspath(dest)
        try:
            os.mkdir(root, 0o700)
            levels: dict[int, list[str]] = {}  # folders by depth: each level in parallel
            for e in manifest.entries:
                if e.kind == "dir" and e.path != ".":
                    levels.setdefault(e.path.count("/"), []).append(f"{root}/{e.path}")
            for depth in sorted(levels):
                self._parallel(lambda path: os.mkdir(path, 0o700), levels[depth])
            files = [e for e in manifest.entries if e.kind == "file"]
            self._parallel(lambda e: self._restore_file(e, root, manifest.chunk_size, as_root, run), files)
            for e in manifest.entries:
                if e.kind == "symlink":
                    path = f"{root}/{e.path}"
                    os.symlink(e.target, path)
                    if as_root:
                        os.lchown(path, e.uid, e.gid)
                    os.utime(path, ns=(e.mtime_ns, e.mtime_ns), follow_symlinks=False)
            for e in reversed(manifest.entries):  # children first: a read-only folder is finished last
                if e.kind == "dir":
                    path = f"{root}/{e.path}"
                    if as_root:
                        os.chown(path, e.uid, e.gid)
                    os.chmod(path, e.mode)
                    os.utime(path, ns=(e.mtime_ns, e.mtime_ns))
        except OSError as err:
            raise self._wrap(err, f"restoring into {dest}", needed=run.total - run.done) from err
        return "cas" if run.fell_back else self.method

    def _restore_file(self, e: Entry, dest: str, chunk_size: int, as_root: bool, run: Run) -> None:
        fd = os.open(f"{dest}/{e.path}", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            for i, digest in enumerate(e.chunks):
                offset = i * chunk_size
                self._restore_chunk(digest, fd, min(chunk_size, e.size - offset), offset, run)
            if as_root:
                os.fchown(fd, e.uid, e.gid)  # before chmod: chown clears setuid bits
            os.fchmod(fd, e.mode)
            os.utime(fd, ns=(e.mtime_ns, e.mtime_ns))
        finally:
            os.close(fd)

    def _restore_chunk(self, digest: str, fd: int, length: int, offset: int, run: Run) -> None:
        try:
            src = os.open(self.object_path(digest), os.O_RDONLY)
        except FileNotFoundError:
            raise StorageError(f"object {digest[:12]} is missing from the snapshot store; run "
                               f"`dtrain snapshot verify` to see which snapshots it damages") from None
        try:
            if self.method == "reflink" and not run.fell_back:
                try:
                    self.io.clone(src, fd, length, 0, offset)
                    run.add(done=length)
                    return
                except OSError as err:
                    if err.errno not in UNSUPPORTED:
                        raise
                    run.fell_back = True
            self.io.copy(src, fd, length, 0, offset)
            run.add(done=length)
        except EOFError:
            raise StorageError(f"object {digest[:12]} is shorter than recorded: the snapshot store is "
                               f"damaged; run `dtrain snapshot verify`") from None
        finally:
            os.close(src)

    # --- verification ----------------------------------------------------------------------
    def verify(self, manifest_ids: Iterable[str], *, progress: Progress | None = None) -> VerifyStats:
        """Re-hash every object the manifests refer to (call inside `pin`)."""
        digests: set[str] = set()
        bad_manifests = []
        for manifest_id in manifest_ids:
            try:
                digests |= self.load(manifest_id).digests()
            except (OSError, ValueError):
                bad_manifests.append(manifest_id)
        sizes = {}
        for d in digests:
            with contextlib.suppress(FileNotFoundError):
                sizes[d] = os.stat(self.object_path(d)).st_size
        run = Run(sum(sizes.values()), progress)
        intact = dict(zip(sizes, self._parallel(lambda d: self._check_object(d, run), list(sizes)), strict=True))
        corrupt = frozenset(d for d, ok in intact.items() if not ok)
        for d in corrupt:  # aside, so that the next capture of this content writes it afresh
            os.replace(self.object_path(d), self.root / "damaged" / d)
        return VerifyStats(objects=len(sizes), bytes=run.done, missing=frozenset(digests - sizes.keys()),
                           corrupt=corrupt, bad_manifests=tuple(bad_manifests))

    def _check_object(self, digest: str, run: Run) -> bool:
        h = hashlib.sha256()
        buf = self._buffer()
        fd = os.open(self.object_path(digest), os.O_RDONLY)
        try:
            offset = 0
            while n := self.io.read_into(fd, buf, offset):
                h.update(buf[:n])
                offset += n
        finally:
            os.close(fd)
        run.add(done=offset)
        return h.hexdigest() == digest

    # --- errors ------------------------------------------------------------------------------
    def _wrap(self, err: OSError, doing: str, *, needed: int) -> StorageError:
        """A full disk becomes a StorageError saying how much was needed and what to do."""
        if isinstance(err, StorageError):
            return err
        if not fileio.is_disk_full(err):
            return StorageError(f"{doing} failed: {err}")
        free = shutil.disk_usage(self.root).free
        return StorageError(
            f"no space left on the device while {doing}: needed up to {human_bytes(needed)}, "
            f"{human_bytes(free)} free under {self.root}; partial work was removed. Free space "
            f"(delete old snapshots: `dtrain snapshot delete NAME`) and retry")


"""The content-addressed snapshot store: a few verbs, no policy.

Layout under the store root::

    packs/ab/<name>      pack files: new content appended, object after object, read-only
    index.db             SQLite: which pack, offset and length hold each object (by sha256)
                         (both kept by the pack store, packs.py)
    manifests/<id>.json.gz   what one snapshot holds (see manifest.py); written last
    manifests/<id>.key.json  the tree key of the walk it came from: the next snapshot of an
                         unchanged volume matches it without loading the manifest (a cache)
    manifests/<id>.sweepable  the manifest is being registered or deleted: a sweep may delete
                         it when the caller's database does not list it (see `sweep`)
    tmp/                 manifests (and, without O_TMPFILE, packs) being written
    pins/                one marker per running capture or restore (crash detection)
    lock                 flock: shared while capturing or restoring, exclusive while sweeping

Files are cut into fixed chunks (4 MiB) so that a checkpoint appended to or partly rewritten
stores only the chunks that changed; identical chunks (objects) are stored once across all
volumes. New objects are appended to a few shared pack files rather than written one file
each: creating an inode costs more than writing 200 KB on ext4, and a TuSimple volume is
mostly small images. Objects of 64 KiB or more start on a 4 KiB boundary, so that deleting
them frees whole blocks (`fallocate(PUNCH_HOLE)`); a pack is deleted once it holds nothing live.
Where the file system clones copy-on-write (btrfs, XFS), each new file is cloned into a pack
of its own (method 'reflink': no data copied) and restores clone back; elsewhere content is
copied (method 'cas'). Store data is never hard-linked into a volume: a job writing in place
would corrupt it.

Crash safety: a pack only appears under its name once complete (O_TMPFILE, then linkat); its
objects enter the index in one transaction after that, and a snapshot exists only once the
caller registers its manifest. Everything a killed process left (temp files, unindexed packs,
objects no registered manifest needs, unregistered manifests) is removed by `sweep`, which runs
only while nobody holds a pin. A manifest the caller's database does not list is deleted only
when marked sweepable (written and not yet registered, or being deleted): a database moved away,
replaced or put back from an older copy lists fewer snapshots than the store holds, and their
content is kept, not swept.

Engine's verbs are grouped in mixins, one module each: pins and the sweep (sweeping.py), the
manifests/ folder and the tree keys beside it (manifest_files.py), reading files into the store
(ingest.py) and verify (integrity.py); this module holds capture (the walk) and materialize.
"""

from __future__ import annotations

import functools
import itertools
import os
import stat
import threading
import time
from collections.abc import Callable
from pathlib import Path

from dtrain.errors import StorageError
from dtrain.names import counted
from dtrain.storage import fileio, hashing, native
from dtrain.storage.fileio import FileIO
from dtrain.storage.info import CaptureStats
from dtrain.storage.entries import Entry
from dtrain.storage.manifest import Manifest, scan
from dtrain.storage.reuse import same_meta, tree_key, unchanged
from dtrain.storage.packs import PackStore
from dtrain.storage.progress import Progress, Run
from dtrain.storage.restore import Restore
from dtrain.storage.ingest import READS_OF_A_CHANGING_FILE, Ingest, _in_hole  # noqa: F401 (read as engine.NAME too)
from dtrain.storage.integrity import Integrity
from dtrain.storage.manifest_files import SWEEPABLE, ManifestFiles  # noqa: F401 (read as engine.NAME too)
from dtrain.storage.sweeping import Sweeping

CHUNK_SIZE = 4 << 20
PACK_SIZE = 64 << 20  # a pack is closed (and flushed) once it holds this much


class Engine(Sweeping, ManifestFiles, Ingest, Integrity):
    """Snapshot store verbs: capture, commit, load, materialize, drop, sweep, verify."""

    def __init__(self, root: Path, *, io: FileIO | None = None, chunk_size: int = CHUNK_SIZE,
                 workers: int | None = None, racy_window_ns: int = 100_000_000,
                 method: str | None = None, durable: bool = True, pack_size: int = PACK_SIZE,
                 hash_algorithm: str = hashing.ALGORITHM, defer_hashing: bool = True,
                 command: Callable[[str], str] = fileio.plain_command):
        """`command(words)`: the `dtrain WORDS` a message's hint names (Storage's: with -p and --backend
        where the command that failed had them)."""
        self.root = Path(root)
        self.command = command
        self.io = io or FileIO()  # the seam tests swap to count reads or fake a full disk
        self.chunk_size = chunk_size  # bytes per chunk; a multiple of the file system block
        self.pack_size = pack_size
        self.hash_algorithm = hash_algorithm  # for new content; 'sha256' writes what older stores did
        # reflink path: clone without reading; verify hashes the clones later (packs.py `hashes`)
        self.defer_hashing = defer_hashing
        # threads for restores and verification: one per core. More contend in the kernel:
        # creating folders in one parent serializes on its lock, and 8 threads on 2 cores spent
        # 3-4x the CPU time of 2 spinning on it (a 1 GiB, 15,000-path restore: 2.9-3.4 s
        # against 1.2-1.3 s). Captures use as many (see capture).
        self.workers = workers or min(16, max(2, os.cpu_count() or 1))
        self.racy_window_ns = racy_window_ns  # files changed this close to a capture get re-read
        self.durable = durable  # flush packs to disk before the index and a manifest refer to them
        for sub in ("manifests", "tmp", "pins"):
            (self.root / sub).mkdir(parents=True, exist_ok=True)
        probed = fileio.probe(self.root)  # cached per file system: no test files on every start
        self.method = method or ("reflink" if probed.reflink else "cas")
        self._local = threading.local()
        # functions that do not hold the engine, shared with its pack store: no reference cycle,
        # so a dropped engine closes its index at once rather than whenever the cyclic collector runs
        self._tmp = _tmp_names(os.fspath(self.root / "tmp"))
        self._parallel = functools.partial(_parallel, self.workers)  # fn over items on the worker threads
        self.packs = PackStore(self.root, io=self.io, durable=durable, pack_size=pack_size, anonymous=probed.tmpfile,
                               tmp_name=self._tmp, parallel=self._parallel, command=command)
        self.subvols = native.Subvolumes(self.root)  # native snapshots, where the store is on btrfs
        if (self.root / "objects").is_dir():  # a store of the first format: one file per object
            self.packs.import_objects(self.root / "objects")
            import shutil  # on first use: ~5 ms of every start otherwise
            shutil.rmtree(self.root / "damaged", ignore_errors=True)

    def close(self) -> None:
        self.packs.close()

    def manifest_path(self, manifest_id: str) -> Path:
        return self.root / "manifests" / f"{manifest_id}.json.gz"

    # --- capture -----------------------------------------------------------------------
    def capture(self, src: Path, *, base: Manifest | None = None, base_id: str | None = None,
                progress: Progress | None = None, store: bool = True) -> tuple[Manifest, CaptureStats]:
        """Record the tree under `src`, storing new chunks (call inside `pin`).

        Files whose lstat matches `base` are not read. `base_id` names a stored manifest to use
        as `base`, loaded only when the walk differs from the tree key committed with it: a
        snapshot of an unchanged volume then returns that manifest with its entries unloaded.
        With store=False nothing is written: the manifest describes the live tree (used by diff).
        """
        started = time.time_ns()
        if self.subvols.usable(src) and (done := self.subvols.capture_manifest(src, started, self.chunk_size, store)):
            return done
        key = None
        self._check_folder(src)
        try:
            # the whole walk first: its key may spare loading the base at all, and a walk going on
            # while the threads read made three threads hand the GIL around at every system call
            # (a first snapshot of 10,000 files took 7-12% longer that way, cached or cold)
            walked = list(scan(src))
        except OSError as err:
            raise self._wrap(err, f"snapshotting {src}", needed=0) from err
        if base_id is not None and base is None:
            key = tree_key(walked)  # kept for the new manifest if the tree differs
            if unchanged_tree := self._same_as_key(base_id, key):
                return unchanged_tree
            try:
                base = self.load(base_id)
            except (OSError, ValueError):  # read every file again rather than fail
                base = None
        if base is not None and base.subvolume:
            base = None  # its unhashed ids name no stored object: read everything once
        old = {e.path: e for e in base.entries} if base else {}
        cutoff = base.started_ns - self.racy_window_ns if base else 0
        damaged = self.packs.damaged() if base else set()
        run = Run(0, progress)
        packer = None
        jobs, batch, skipped, same = [], _Batch(), [], 0
        inodes: dict[tuple[int, int], str] = {}  # a file with hard links: the first of its paths read
        twins: dict[str, str] = {}  # another path of an inode being read -> that first path
        pool = None  # started with the first file to read: an unchanged volume needs none
        try:
            for rel, st in walked:
                if not stat.S_ISREG(st.st_mode):
                    same += same_meta(old.get(rel), st)
                elif unchanged(old.get(rel), st, cutoff, damaged):
                    same += 1
                else:
                    if st.st_nlink > 1:  # a hard link: one inode is read once, whatever its paths
                        first = inodes.setdefault((st.st_dev, st.st_ino), rel)
                        if first != rel:
                            twins[rel] = first
                            continue
                    if store and packer is None:
                        packer = self.packs.packer(run)
                    run.total += st.st_size
                    if batch.add(rel, st):  # files go in batches: a task per file costs more than a small file
                        # one thread per core: on 2 cores, 4 threads took 8-15% longer on a cached volume
                        # (each hand-over of the GIL is a context switch) and no less on a cold one
                        pool = pool or _thread_pool(self.workers)
                        jobs.append(pool.submit(self._ingest_many, src, batch.items, packer, run))
                        batch = _Batch()
            if batch.items:
                pool = pool or _thread_pool(self.workers)
                jobs.append(pool.submit(self._ingest_many, src, batch.items, packer, run))
            if key is None and store:
                key = tree_key(walked)  # in walk order, before the sort below
            if base is not None and same == len(walked) == len(base.entries):  # every path as in base
                files = [e for e in base.entries if e.kind == "file"]
                return base._replace(key=key), CaptureStats(
                    files=len(files), bytes=sum(e.size for e in files), read_bytes=0, added_bytes=0,
                    added_objects=0, skipped=(), method=self.method)
            reading = {rel: entry for job in jobs for rel, entry in job.result()}
            if twins:
                walked_st = dict(walked)
                for rel, first in twins.items():
                    reading[rel] = self._twin(src, rel, walked_st[rel], reading.get(first), packer, run)
            walked.sort()
            entries = [self._entry(src, rel, st, old, reading, skipped, run.xattrs) for rel, st in walked]
            if packer is not None and packer.finish():
                self.request_sweep()  # another process stored some of the same objects first
        except BaseException as err:
            if pool is not None:
                pool.shutdown(cancel_futures=True)
            if packer is not None:
                packer.abort()
            self.request_sweep()  # packs named so far are garbage now
            if isinstance(err, OSError):
                raise self._wrap(err, f"snapshotting {src}", needed=run.total) from err
            raise
        finally:
            if pool is not None:
                pool.shutdown()
        if skipped:
            import logging  # here, not at start-up: a CLI snapshot is short

            logging.getLogger(__name__).warning("snapshot of %s skips %s of an unknown type, e.g. %s",
                                                src, counted(len(skipped), "file"), skipped[0])
        if run.changing:
            import logging

            logging.getLogger(__name__).warning(
                "snapshot of %s: %s kept changing while read (%d times each), e.g. %s: their content in "
                "this snapshot may mix old and new bytes; snapshot again once nothing writes to them",
                src, counted(len(run.changing), "file"), READS_OF_A_CHANGING_FILE, run.changing[0])
        done = tuple(e for e in entries if e is not None)
        files = [e for e in done if e.kind == "file"]
        stats = CaptureStats(files=len(files), bytes=sum(e.size for e in files), read_bytes=run.read,
                             added_bytes=run.added, added_objects=run.objects, skipped=tuple(skipped),
                             changing=tuple(sorted(run.changing)),
                             method="cas" if run.fell_back else self.method)
        if base is not None and not reading and base.same_tree(done):
            return base._replace(key=key), stats  # commit links the stored manifest: an unchanged volume adds no bytes
        return Manifest(entries=done, started_ns=started, chunk_size=self.chunk_size, hash=self.hash_algorithm,
                        xattrs=_xattrs(done, old, base, run.xattrs), key=key), stats

    @staticmethod
    def _check_folder(src: Path) -> None:
        if not os.path.isdir(src) or os.path.islink(src):
            raise StorageError(f"cannot snapshot {src}: it is not a folder (a volume's data folder must be "
                               f"a real directory, not a symlink or a file)")

    # --- restore -----------------------------------------------------------------------
    def materialize(self, manifest: Manifest, dest: Path, *, progress: Progress | None = None) -> str:
        """Recreate the tree at `dest`, which must not exist (call inside `pin`).

        Returns the method used. On failure `dest` is left partial: restore into a temporary
        folder and rename it into place.
        """
        if manifest.subvolume:  # a writable snapshot of the stored one: constant time
            try:
                self.subvols.restore(manifest.subvolume, dest)
            except OSError as err:
                raise self._wrap(err, "restoring a subvolume snapshot", needed=0) from err
            return "subvolume"
        where = Path(dest).parent
        while where.name.startswith(".") and where.parent != where:  # a staging folder, gone after a failure
            where = where.parent

        def wrap(err: OSError, doing: str, *, needed: int) -> StorageError:  # the disk that filled is dest's
            return fileio.storage_error(err, doing, needed=needed, where=where, command=self.command)

        return Restore(self.packs, io=self.io, method=self.method, parallel=self._parallel,
                       wrap=wrap, command=self.command).tree(manifest, dest, progress=progress)

    def _wrap(self, err: OSError, doing: str, *, needed: int) -> StorageError:
        return fileio.storage_error(err, doing, needed=needed, where=self.root, command=self.command)


class _Batch:
    """Files for one reading task: up to 64 of them or 16 MiB."""

    def __init__(self):
        self.items: list[tuple[str, os.stat_result]] = []  # (path, what the walk saw)
        self.bytes = 0

    def add(self, rel: str, st: os.stat_result) -> bool:
        """Add a file; True once the batch is full."""
        self.items.append((rel, st))
        self.bytes += st.st_size
        return len(self.items) >= 64 or self.bytes >= 16 << 20


def _xattrs(entries: tuple[Entry, ...], old: dict[str, Entry], base: Manifest | None,
            read: dict[str, dict | None]) -> dict[str, dict] | None:
    """Each path's extended attributes: as read now, or the base's for an entry kept from it
    (setting one changes the ctime, so a kept entry's are unchanged)."""
    before = (base.xattrs if base is not None else None) or {}
    found = {}
    for e in entries:
        x = before.get(e.path) if e is old.get(e.path) else read.get(e.path)
        if x:
            found[e.path] = x
    return found or None


def _thread_pool(workers: int):
    """A ThreadPoolExecutor, imported on first use: concurrent.futures brings logging with it,
    and a snapshot on the native path or of an unchanged volume needs neither."""
    from concurrent.futures import ThreadPoolExecutor
    return ThreadPoolExecutor(workers)


def _parallel(workers: int, fn: Callable, items: list) -> list:
    """fn over items on `workers` threads, results in order; the first error cancels the rest."""
    if len(items) < 2 or workers == 1:
        return [fn(item) for item in items]
    with _thread_pool(workers) as pool:
        futures = [pool.submit(fn, item) for item in items]
        try:
            return [f.result() for f in futures]
        except BaseException:
            pool.shutdown(wait=True, cancel_futures=True)
            raise


def _tmp_names(folder: str) -> Callable[[], str]:
    """Fresh paths in the store's tmp/ (swept after a crash): unique per process, thread and call."""
    names = itertools.count()
    return lambda: f"{folder}/{os.getpid()}-{threading.get_ident()}-{next(names)}"

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
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import functools
import itertools
import json
import os
import sqlite3
import stat
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path

from dtrain import db
from dtrain.errors import StorageError
from dtrain.names import counted
from dtrain.storage import fileio, hashing, native
from dtrain.storage.fileio import UNSUPPORTED, FileIO
from dtrain.storage.info import CaptureStats, SweepStats, VerifyStats
from dtrain.storage import manifest as mf
from dtrain.storage.manifest import Entry, Manifest, meta_entry, same_meta, scan, unchanged
from dtrain.storage.packs import UNHASHED, Pack, Packer, PackStore
from dtrain.storage.progress import Progress, Run
from dtrain.storage.restore import Restore

CHUNK_SIZE = 4 << 20
PACK_SIZE = 64 << 20  # a pack is closed (and flushed) once it holds this much
SWEEPABLE = ".sweepable"  # manifests/<id>.sweepable: see `sweep`
READS_OF_A_CHANGING_FILE = 3  # reads of a file written to meanwhile before it is recorded as torn


class Engine:
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

    # --- pins and sweeping -------------------------------------------------------------
    @contextlib.contextmanager
    def pin(self, *, marked: bool = True):
        """Hold while capturing, committing or restoring: no object vanishes meanwhile. The shared
        lock is what holds; the marker in pins/ tells a later sweep that a pinned process was
        killed. `marked=False` (a check on a full or read-only disk, which writes nothing to clean
        up after) makes the marker only where the disk takes it."""
        fd = os.open(self.root / "lock", os.O_RDWR | os.O_CREAT, 0o644)
        marker = self.root / "pins" / f"{os.getpid()}-{os.urandom(16).hex()}"
        try:
            fcntl.flock(fd, fcntl.LOCK_SH)
            try:
                marker.touch()
            except OSError:
                if marked:
                    raise
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
            requested = pending.exists()
            pending.touch()  # a sweep killed midway (pins gone, objects forgotten) is finished by the next
            stats, complete = self._sweep_locked(set(live_ids()))
            if complete or not requested:  # stopped by an unreadable manifest: asked for as before
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
        names = [item.name for item in os.scandir(self.root / "manifests")]
        sweepable = {n.split(".")[0] for n in names if n.endswith(SWEEPABLE)}
        unlisted = set()
        for name in names:
            manifest_id = name.split(".")[0]
            if manifest_id in live:
                if name.endswith(SWEEPABLE):  # registered (its marker left by a killed process), or not deleted
                    os.unlink(self.root / "manifests" / name)
            elif manifest_id in sweepable:  # written, then killed before registering; or deleted
                os.unlink(self.root / "manifests" / name)
                leftovers += name.endswith(".json.gz")
            elif name.endswith(".json.gz"):
                unlisted.add(manifest_id)  # the database lost it (moved away, an older copy): kept
        needed: set[str] = set()
        subvols: set[str | None] = set()
        for manifest_id in live | unlisted:
            try:
                m = Manifest.parse(self.manifest_path(manifest_id).read_bytes(), manifest_id)
            except (OSError, ValueError):  # never delete what an unreadable manifest may need
                return SweepStats(objects=0, bytes=0, leftovers=leftovers), False
            needed |= m.digests()
            subvols.add(m.subvolume)
        # a subvolume no manifest names: its snapshot was deleted, or a capture was killed before
        # registering it. What deleting it frees is not known without quotas: counted, 0 bytes.
        gone_subvols = [n for n in self.subvols.names() if n not in subvols]
        for name in gone_subvols:
            self.subvols.delete(name)
        objects, freed, unindexed = self.packs.free(needed)
        return SweepStats(objects=objects + len(gone_subvols), bytes=freed, leftovers=leftovers + unindexed,
                          unlisted=len(unlisted)), True

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
            key = mf.tree_key(walked)  # kept for the new manifest if the tree differs
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
                key = mf.tree_key(walked)  # in walk order, before the sort below
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

    def _same_as_key(self, base_id: str, key: mf.TreeKey | None) -> tuple[Manifest, CaptureStats] | None:
        """The stored manifest `base_id`, entries unloaded, when the walk's `key` matches the
        tree key committed with it, every file's ctime precedes that capture by the racy window
        (as `unchanged` asks of each file), and no stored object is damaged (a damaged file must
        be read again); None otherwise."""
        try:
            rec = self._key_record(base_id)
            recorded = mf.TreeKey(rec["digest"], rec["files"], rec["bytes"], rec["newest_ctime_ns"])
            started_ns, chunk_size, hash_algorithm = rec["started_ns"], rec["chunk_size"], rec["hash"]
        except (OSError, ValueError, KeyError, TypeError):  # none yet (an older store), or unreadable
            return None
        if key != recorded or recorded.newest_ctime_ns >= started_ns - self.racy_window_ns or self.packs.damaged():
            return None
        manifest = Manifest(entries=mf.LazyEntries(lambda: self.load(base_id).entries), started_ns=started_ns,
                            chunk_size=chunk_size, id=base_id, hash=hash_algorithm, key=recorded)
        return manifest, CaptureStats(files=recorded.files, bytes=recorded.bytes, read_bytes=0, added_bytes=0,
                                      added_objects=0, skipped=(), method=self.method)

    def _entry(self, src: Path, rel: str, st: os.stat_result, old: dict, reading: dict,
               skipped: list, xattrs: dict) -> Entry | None:
        """`rel`'s entry: read by a worker, kept from the base, or made from `st` (a folder's
        extended attributes go into `xattrs`); None when it is gone."""
        if rel in reading:
            return reading[rel]
        if stat.S_ISREG(st.st_mode):
            return old[rel]  # same ctime: mode and owner are unchanged too
        if same_meta(old.get(rel), st):
            return old[rel]  # a symlink's target cannot change without a new ctime
        if stat.S_ISDIR(st.st_mode):
            try:
                fd = mf.open_beneath(src, rel, os.O_RDONLY | os.O_DIRECTORY)
            except OSError as err:
                if err.errno in mf.GONE:
                    return None
                raise
            try:
                xattrs[rel] = mf.read_xattrs(fd)
            finally:
                os.close(fd)
            return meta_entry(rel, st)
        if stat.S_ISLNK(st.st_mode):
            try:
                return meta_entry(rel, st, mf.readlink_beneath(src, rel))
            except OSError as err:
                # gone since the walk: removed, its folder moved behind a link, or (EINVAL) the
                # link itself replaced by something that is not a link
                if err.errno in mf.GONE or err.errno == errno.EINVAL:
                    return None
                raise
        if stat.S_IFMT(st.st_mode) in mf.SPECIALS:  # a fifo, socket or device node: recorded, never opened
            return meta_entry(rel, st)
        skipped.append(rel)  # a type Linux does not make (a Solaris door): nothing to record it as
        return None

    def _twin(self, src: Path, rel: str, st: os.stat_result, first: Entry | None, packer: Packer | None,
              run: Run) -> Entry | None:
        """A hard link to a file read under another path: that path's entry, when it recorded the
        inode as the walk saw it here; otherwise (it changed or vanished in between) read anew."""
        if first is not None and (first.ino, first.ctime_ns, first.size, first.mtime_ns) == (
                st.st_ino, st.st_ctime_ns, st.st_size, st.st_mtime_ns):
            run.xattrs[rel] = run.xattrs.get(first.path)  # one inode: the same attributes
            return first._replace(path=rel)
        run.total += st.st_size
        return self._ingest_many(src, [(rel, st)], packer, run)[0][1]

    def _ingest_many(self, src: Path, items: list[tuple[str, os.stat_result]], packer: Packer | None,
                     run: Run) -> list:
        root_fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
        try:
            return [(rel, self._ingest(src, root_fd, rel, seen, packer, run)) for rel, seen in items]
        finally:
            os.close(root_fd)

    @staticmethod
    def _open_walked(src: Path, root_fd: int, rel: str, seen: os.stat_result) -> tuple[int, os.stat_result]:
        """Open a file the walk saw, with no link followed on the way (a folder swapped for a
        link mid-capture must not bring outside bytes in), and its fstat.

        One `open` of the whole relative path first, O_NOFOLLOW (and O_NONBLOCK: a fifo
        swapped in does not hang it); it is kept only when it reached the very file the walk
        lstat'ed, found by its device, inode and ctime, which a file reached through a link
        elsewhere cannot match. Anything else (the file changed or was replaced since the
        walk, or the open failed) is opened again by `open_beneath`, which checks every
        component. That stricter call goes through ctypes (openat2) or takes two system calls
        per folder; on two threads each extra call releasing the GIL cost a hand-over, and a
        first snapshot of 10,000 files took 20% longer."""
        try:
            fd = os.open(rel, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=root_fd)
        except OSError:
            fd = None
        if fd is not None:
            st = os.fstat(fd)
            if (st.st_ino, st.st_dev, st.st_ctime_ns) == (seen.st_ino, seen.st_dev, seen.st_ctime_ns):
                return fd, st
            os.close(fd)
        fd = mf.open_beneath(src, rel, os.O_RDONLY | os.O_NONBLOCK, root_fd=root_fd)
        try:
            return fd, os.fstat(fd)
        except BaseException:
            os.close(fd)
            raise

    def _ingest(self, src: Path, root_fd: int, rel: str, seen: os.stat_result, packer: Packer | None,
                run: Run) -> Entry | None:
        """Hash one file chunk by chunk, storing chunks the store lacks; None if it vanished."""
        try:
            fd, st = self._open_walked(src, root_fd, rel, seen)
        except OSError as err:  # deleted, or moved behind a link, since the walk: recorded as gone
            if err.errno in mf.GONE:
                return None
            raise
        try:
            if not stat.S_ISREG(st.st_mode):  # replaced by a fifo, device or folder since the walk: gone
                return None
            # A file written to while it is read yields chunks of two versions: a checkpoint saved
            # in place during a snapshot was restored as a file that never existed. Read again
            # while its lstat fields move; one that never settles is recorded as read, flagged to
            # be read again next time (ctime 0), and reported.
            for attempt in range(READS_OF_A_CHANGING_FILE):
                chunks, size = self._read_file(fd, st, packer, run)
                now = os.fstat(fd)
                settled = (now.st_size, now.st_mtime_ns, now.st_ctime_ns) == (st.st_size, st.st_mtime_ns,
                                                                                st.st_ctime_ns)
                if settled or attempt == READS_OF_A_CHANGING_FILE - 1:
                    break
                st = now
                run.total += now.st_size
            if not settled:
                run.changing.append(rel)
            if attempt:
                self.request_sweep()  # chunks of the torn reads that no manifest names
            run.xattrs[rel] = mf.read_xattrs(fd)
        finally:
            os.close(fd)
        # a file that changed size or content while being read is recorded as read, and re-read next time
        ctime = st.st_ctime_ns if size == st.st_size and settled else 0
        return Entry(rel, "file", stat.S_IMODE(st.st_mode), st.st_uid, st.st_gid, st.st_mtime_ns, size,
                     chunks, st.st_ino, ctime)

    def _read_file(self, fd: int, st: os.stat_result, packer: Packer | None, run: Run) -> tuple[list[str], int]:
        """(chunk digests, bytes) of one read of an open file: cloned where the store reflinks,
        hashed (and stored when `packer` is given) chunk by chunk elsewhere."""
        if packer is not None and self.method == "reflink" and not run.fell_back and st.st_size:
            try:
                return self._clone_file(fd, st, packer, run)
            except OSError as err:
                if err.errno not in UNSUPPORTED:
                    raise
                run.fell_back = True
        # a file with fewer blocks than bytes has holes: chunks lying wholly in one are not read
        hashed = self._hash_chunks(fd, run, packer, st.st_size, sparse=st.st_blocks * 512 < st.st_size)
        return [d for d, _ in hashed], sum(n for _, n in hashed)

    def _clone_file(self, fd: int, st: os.stat_result, packer: Packer, run: Run) -> tuple[list[str], int]:
        """Clone the whole file into a pack of its own; chunks the store already holds are
        punched out of the clone. The digests must name what the clone holds: they are read
        from the source (its pages are cached; the clone's are not) when the source provably
        did not change meanwhile (same size, mtime and ctime after hashing, and a ctime older
        than the racy window), from the clone otherwise."""
        pack = self.packs.new_pack()
        try:
            started = time.time_ns()
            self.io.clone(fd, pack.fd, st.st_size, 0, 0)
            if self.defer_hashing:
                return self._unhashed_chunks(pack, packer, run)
            hashed = None
            if st.st_ctime_ns < started - self.racy_window_ns:
                hashed = self._hash_chunks(fd, run)
                now = os.fstat(fd)
                if (now.st_size, now.st_mtime_ns, now.st_ctime_ns) != (st.st_size, st.st_mtime_ns, st.st_ctime_ns):
                    hashed = None  # rewritten while we looked: what the clone holds is unknown
            if hashed is None:
                hashed = self._hash_chunks(pack.fd, run)
            chunks, offset, dead = [], 0, []
            for digest, n in hashed:
                if packer.wants(digest):
                    pack.rows.append((digest, pack.name, offset, n))
                    run.add(added=n, objects=1)
                else:
                    dead.append((offset, n))
                chunks.append(digest)
                offset += n
            if not pack.rows:
                pack.discard()
                return chunks, offset
            for start, length in dead:
                fileio.punch_hole(pack.fd, start, length)
        except BaseException:
            pack.discard()
            raise
        packer.seal(pack, sync=False)  # thousands of small clones: one syncfs at the end instead
        return chunks, offset

    def _unhashed_chunks(self, pack: Pack, packer: Packer, run: Run) -> tuple[list[str], int]:
        """A clone indexed as it is, nothing read: chunk ids `u-<pack>-<i>` stand for hashes that
        verify computes and records later. Identical content is not deduplicated on this path;
        the clones share their extents with the volume, so it costs no disk."""
        size = os.fstat(pack.fd).st_size  # what the clone holds, even if the source grew meanwhile
        chunks = []
        for i, offset in enumerate(range(0, size, self.chunk_size)):
            chunks.append(f"{UNHASHED}{pack.name}-{i}")
            pack.rows.append((chunks[-1], pack.name, offset, min(self.chunk_size, size - offset)))
        run.add(added=size, objects=len(chunks))
        packer.seal(pack, sync=False)
        return chunks, size

    def _hash_chunks(self, fd: int, run: Run, packer: Packer | None = None,
                     size: int | None = None, sparse: bool = False) -> list[tuple[str, int]]:
        """(digest, length) of each chunk of a file, read to its end; with `packer`, the
        chunks the store lacks are stored as they go by.

        `size`, the file's size when it was opened, ends the reading there: a file that grew
        since has a newer ctime and size, so the next capture reads it again (without it, a
        small file took a second read to find its end).

        `sparse`: a chunk inside a hole (SEEK_DATA finds no data in it) is named as zeros without
        reading it: a 1 TiB file of holes costs one lseek per chunk, not a terabyte of reads."""
        out, offset, buf = [], 0, self._buffer()
        whole = len(buf)
        while True:
            want = whole if size is None else min(whole, size - offset)
            if want <= 0:
                break
            if sparse and want == whole and _in_hole(fd, offset, want):
                digest = hashing.zeros(want, self.hash_algorithm)
                if packer is not None and packer.wants(digest):
                    packer.put(memoryview(bytes(want)), digest)
                    run.add(done=want, added=want, objects=1)
                else:
                    run.add(done=want)
                out.append((digest, want))
                offset += want
                continue
            n = self.io.read_into(fd, buf[:want], offset)
            if not n:
                break
            digest = hashing.digest(buf[:n], self.hash_algorithm)
            if packer is not None and packer.wants(digest):
                packer.put(buf[:n], digest)
                run.add(done=n, read=n, added=n, objects=1)
            else:
                run.add(done=n, read=n)
            out.append((digest, n))
            offset += n
            if n < want:
                break
        return out

    def _buffer(self) -> memoryview:
        buf = getattr(self._local, "buf", None)
        if buf is None or len(buf) != self.chunk_size:
            buf = self._local.buf = memoryview(bytearray(self.chunk_size))
        return buf

    # --- manifests -----------------------------------------------------------------------
    def commit(self, manifest_id: str, manifest: Manifest) -> None:
        """Write the manifest under its final name (call inside `pin` and the caller's
        registration transaction, so that a crash leaves either both or a sweepable file), marked
        sweepable until `registered`."""
        tmp = self._tmp()
        try:
            self.mark_sweepable(manifest_id)
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
            if manifest.key is not None:
                self._write_key(manifest_id, manifest)
            if self.durable:
                fileio.fsync_path(self.root / "manifests", directory=True)
        except OSError as err:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp)
            raise self._wrap(err, "writing a snapshot manifest", needed=0) from err

    def mark_sweepable(self, manifest_id: str) -> None:
        """Let a sweep delete this manifest once the caller's database no longer lists it (call
        before registering it, and before deleting it from that database)."""
        path = self.root / "manifests" / f"{manifest_id}{SWEEPABLE}"
        path.touch()
        if self.durable:
            fileio.fsync_path(path.parent, directory=True)

    def registered(self, manifest_id: str) -> None:
        """The caller's database lists the manifest now (call after that commit, inside `pin`):
        no sweep deletes it unless `mark_sweepable` says so again."""
        (self.root / "manifests" / f"{manifest_id}{SWEEPABLE}").unlink(missing_ok=True)

    def key_path(self, manifest_id: str) -> Path:
        return self.root / "manifests" / f"{manifest_id}.key.json"

    def _key_record(self, manifest_id: str) -> dict:
        """What _write_key stored for `manifest_id` (OSError or ValueError when it cannot tell)."""
        return json.loads(self.key_path(manifest_id).read_bytes())

    def _write_key(self, manifest_id: str, manifest: Manifest) -> None:
        """The tree key of the walk that produced `manifest` (see _same_as_key). Not flushed: a
        lost or torn key only costs the next snapshot the full comparison."""
        rec = {**manifest.key._asdict(), "started_ns": manifest.started_ns, "chunk_size": manifest.chunk_size,
               "hash": manifest.hash}
        if manifest.id is not None:  # a shared manifest: share its key too when it says the same
            with contextlib.suppress(OSError, ValueError):
                if self._key_record(manifest.id) == rec:
                    os.link(self.key_path(manifest.id), self.key_path(manifest_id))
                    return
        tmp = self._tmp()
        with open(tmp, "w") as f:
            f.write(json.dumps(rec))
        os.rename(tmp, self.key_path(manifest_id))

    def load(self, manifest_id: str) -> Manifest:
        m = Manifest.parse(self.manifest_path(manifest_id).read_bytes(), manifest_id)
        if m.subvolume is None:
            return m
        if not self.subvols.path(m.subvolume).is_dir():
            raise FileNotFoundError(f"subvolume {m.subvolume} of snapshot {manifest_id} is gone")
        return m._replace(entries=self.subvols.entries(m.subvolume))

    def drop(self, manifest_id: str) -> None:
        """Forget a manifest the caller's database no longer lists (marked sweepable before it
        was deleted there); its objects go at the next sweep."""
        self.manifest_path(manifest_id).unlink(missing_ok=True)
        self.key_path(manifest_id).unlink(missing_ok=True)
        (self.root / "manifests" / f"{manifest_id}{SWEEPABLE}").unlink(missing_ok=True)
        self.request_sweep()

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

    # --- verification ----------------------------------------------------------------------
    def verify(self, manifest_ids: Iterable[str], *, progress: Progress | None = None,
               write: bool = True) -> VerifyStats:
        """Re-hash every object the manifests refer to (call inside `pin`). Objects found
        corrupt or cut short leave the index, so that the next capture of a volume that still
        holds their content stores it afresh (self-healing). `write=False` (a full or read-only
        disk): nothing is recorded or taken out; what is found is reported all the same."""
        digests: set[str] = set()
        bad_manifests = []
        natives: list[Manifest] = []
        for manifest_id in manifest_ids:
            try:
                m = self.load(manifest_id)
            except (OSError, ValueError):
                bad_manifests.append(manifest_id)
                continue
            digests |= m.digests()
            if m.subvolume:
                natives.append(m)
        where = self.packs.where(digests)
        order = sorted(where, key=where.get)  # pack by pack, in file order
        run = Run(sum(n for _, _, n in where.values()), progress)
        with self.packs.files() as packs:
            found = self._parallel(lambda d: self.packs.check(d, where[d], packs, self._buffer(), run), order)
        gone = {d for d, state in zip(order, found, strict=True) if state == "missing"}
        corrupt = frozenset(d for d, state in zip(order, found, strict=True) if state == "corrupt")
        # not taken out of the index: a pack that cannot be read now (a permission, a failing disk)
        # may read again later, and a sweep would delete what the index no longer names
        unreadable = frozenset(d for d, state in zip(order, found, strict=True) if state == "unreadable")
        computed = [(d, state) for d, state in zip(order, found, strict=True) if state.startswith("b3-")]
        unrecorded = False
        try:  # a disk that filled meanwhile: what was found is reported all the same, unrecorded
            if computed and write:
                self.packs.record_hashes(computed)  # hashes deferred at capture, computed now
            if (gone or corrupt) and write:  # out of the index: the next capture holding their content stores it afresh
                self.packs.mark_damaged(gone, corrupt, where)
        except (sqlite3.Error, OSError) as err:
            if not db.no_room(err):
                raise
            unrecorded = True
        files = hashed = 0
        for m in natives:  # a native snapshot's files, hashed now (recorded the first time)
            n, b, bad, unsaved = native.verify_tree(self.subvols.path(m.subvolume), m.entries,
                                                    self.root / "manifests" / f"{m.id}.hashes.gz",
                                                    self.io.read_into, self._buffer(), save=write and not unrecorded)
            files, hashed, corrupt = files + n, hashed + b, corrupt | bad
            unrecorded |= unsaved and write  # a disk that filled: said as the content path says it
        return VerifyStats(objects=len(where) + files, bytes=run.done + hashed,
                           missing=frozenset(digests - where.keys() | gone), corrupt=corrupt,
                           bad_manifests=tuple(bad_manifests), unreadable=unreadable, unrecorded=unrecorded)

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


def _in_hole(fd: int, offset: int, length: int) -> bool:
    """True when no data lies in [offset, offset + length) of the file: a hole, reading as zeros."""
    try:
        return os.lseek(fd, offset, os.SEEK_DATA) >= offset + length
    except OSError as err:
        return err.errno == errno.ENXIO  # no data from here to the end of the file


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

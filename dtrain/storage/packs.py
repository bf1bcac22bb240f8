"""The pack store: objects (chunks) appended to shared pack files, and the index of where
each one lies. The engine (engine.py) decides what goes in, and when something may go; this
module only moves bytes, names files and keeps the index. It imports nothing of the engine:
the engine builds a `PackStore`, hands it a way to run work on its threads, and calls its verbs.

Layout under the store root: ``packs/ab/<name>`` (read-only pack files, in 256 folders) and
``index.db`` (SQLite: objects, damaged, dirty, and the hashes verify computed for objects
stored unhashed).
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
import threading
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from dtrain import db
from dtrain.errors import StorageError
from dtrain.storage import fileio, hashing
from dtrain.storage.fileio import FileIO

if TYPE_CHECKING:
    from dtrain.storage.progress import Run

BLOCK = 4096  # file system block: objects of ALIGNED bytes or more start on a boundary
ALIGNED = 64 << 10  # so that deleting them frees whole blocks
OPEN_PACKS = 256  # pack descriptors a restore or verify keeps open at once
INDEX = """
CREATE TABLE IF NOT EXISTS objects (digest TEXT PRIMARY KEY, pack TEXT NOT NULL,
    offset INTEGER NOT NULL, length INTEGER NOT NULL) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS objects_by_pack ON objects (pack);
CREATE TABLE IF NOT EXISTS damaged (digest TEXT PRIMARY KEY, problem TEXT) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS dirty (pack TEXT PRIMARY KEY) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS hashes (id TEXT PRIMARY KEY, digest TEXT NOT NULL) WITHOUT ROWID;
"""
UNHASHED = "u-"  # an object indexed unread (a deferred-hash clone): its hash is in `hashes` once verified
Where = tuple[str, int, int]  # (pack name, offset, length) of one object


class PackStore:
    """Pack files and their index: add (`packer`, `new_pack`, `index`), find (`known`,
    `where`, `locate`), read (`files`), judge (`mark_damaged`, `damaged`) and free (`free`)."""

    def __init__(self, root: Path, *, io: FileIO, durable: bool, pack_size: int, anonymous: bool,
                 tmp_name: Callable[[], str], parallel: Callable[[Callable, list], list],
                 command: Callable[[str], str] = fileio.plain_command):
        self.root = os.fspath(Path(root) / "packs")
        self.command = command  # how a hint names a dtrain command (fileio.plain_command)
        self.io, self.durable, self.pack_size = io, durable, pack_size
        self._anonymous = anonymous  # O_TMPFILE: no temp names to clean up
        self._tmp_name = tmp_name  # a fresh path in the store's tmp/ (swept after a crash)
        self.parallel = parallel  # fn over items on the engine's worker threads, results in order
        if not os.path.isdir(f"{self.root}/ff"):
            os.makedirs(self.root, exist_ok=True)
            fileio.spread_subfolders(Path(self.root))
            for i in range(256):
                os.makedirs(f"{self.root}/{i:02x}", exist_ok=True)
        self.conn = db.connect(Path(root) / "index.db", owner=self)
        self.conn.row_factory = None
        if not durable:
            self.conn.execute("PRAGMA synchronous=NORMAL")
        self.conn.executescript(INDEX)
        if "problem" not in {r[1] for r in self.conn.execute("PRAGMA table_info(damaged)")}:  # a store of before
            with contextlib.suppress(sqlite3.OperationalError):  # another process added it just now
                self.conn.execute("ALTER TABLE damaged ADD COLUMN problem TEXT")

    def close(self) -> None:
        self.conn.close()

    def path(self, name: str) -> str:
        return f"{self.root}/{name[:2]}/{name}"

    # --- adding ----------------------------------------------------------------------------
    def packer(self, run: Run) -> Packer:
        return Packer(self, run)

    def new_pack(self) -> Pack:
        """A pack file, unnamed (O_TMPFILE) where possible, so that a killed run leaves nothing
        behind and naming it is a single link; a temp file elsewhere. Created in its final
        folder: ext4 allocates inodes near their folder, and 256 folders spread over many
        block groups allocate faster than one."""
        name = os.urandom(16).hex()
        if self._anonymous:
            fd = os.open(f"{self.root}/{name[:2]}", os.O_TMPFILE | os.O_RDWR, 0o444)
            return Pack(fd, None, name)
        tmp = self._tmp_name()
        return Pack(os.open(tmp, os.O_RDWR | os.O_CREAT | os.O_EXCL, 0o444), tmp, name)

    def index(self, packs: list[Pack]) -> bool:
        """Make the sealed packs' objects known: one transaction, after their data is on disk.
        True when another process stored some first: their copies here wait for a sweep."""
        rows = [row for pack in packs for row in pack.rows]
        with db.transaction(self.conn):
            before = self.conn.total_changes
            self.conn.executemany("INSERT OR IGNORE INTO objects VALUES (?,?,?,?)", rows)
            raced = self.conn.total_changes - before < len(rows)
            if raced:
                self.conn.executemany("INSERT OR IGNORE INTO dirty VALUES (?)", [(p.name,) for p in packs])
            if self.conn.execute("SELECT 1 FROM damaged LIMIT 1").fetchone():  # healed: stored afresh
                self.conn.executemany("DELETE FROM damaged WHERE digest = ?", [(r[0],) for r in rows])
        return raced

    def import_objects(self, folder: Path) -> None:
        """Adopt a store of the first format (one file per object under objects/): each
        object becomes a pack of its own, without copying."""
        rows = []
        for fan in os.scandir(folder):
            for item in os.scandir(fan.path):
                digest = fan.name + item.name
                os.rename(item.path, self.path(digest))
                rows.append((digest, digest, 0, os.stat(self.path(digest)).st_size))
        with db.transaction(self.conn):
            self.conn.executemany("INSERT OR IGNORE INTO objects VALUES (?,?,?,?)", rows)
        import shutil  # on first use: ~5 ms of every start otherwise
        shutil.rmtree(folder)

    # --- finding and reading -------------------------------------------------------------------
    def known(self) -> set[str]:
        return {d for (d,) in self.conn.execute("SELECT digest FROM objects")}

    def damaged(self) -> set[str]:
        return {d for (d,) in self.conn.execute("SELECT digest FROM damaged")}

    def damaged_problems(self) -> dict[str, str]:
        """What a verify found wrong with each object it took out of the index: 'missing' or
        'corrupt' ('missing' for one recorded before the store kept the word)."""
        return {d: p or "missing" for d, p in self.conn.execute("SELECT digest, problem FROM damaged")}

    def locate(self, digest: str) -> Where | None:
        """(pack file path, offset, length) of a stored object, None when the store lacks it."""
        row = self.conn.execute("SELECT pack, offset, length FROM objects WHERE digest = ?", (digest,)).fetchone()
        return (self.path(row[0]), row[1], row[2]) if row else None

    def where(self, digests: set[str]) -> dict[str, Where]:
        """(pack, offset, length) of each of `digests` the index holds."""
        return {d: (p, o, n) for d, p, o, n in self.conn.execute("SELECT * FROM objects") if d in digests}

    def locations(self, digests: set[str]) -> dict[str, Where]:
        """Like `where`, but every one of `digests` must be there."""
        where = self.where(digests)
        if missing := digests - where.keys():
            more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
            raise StorageError(f"object {min(missing)[:12]}{more} is missing from the snapshot store; run "
                               f"'{self.command('snapshot verify')}' to see which snapshots it damages")
        return where

    def files(self) -> PackFiles:
        """Shared read descriptors for one restore or verification."""
        return PackFiles(self)

    # --- judging and freeing -------------------------------------------------------------------
    def check(self, digest: str, where: Where, files: PackFiles, buf: memoryview, run: Run) -> str:
        """Re-hash one object: 'ok', 'corrupt' (other bytes), 'missing' (pack gone or cut short)
        or 'unreadable' (the pack is there but reading it fails: EIO, EACCES...); for an object
        stored unhashed and never verified, its BLAKE3 name (for `record_hashes`)."""
        pack, offset, length = where
        recorded = None
        if digest.startswith(UNHASHED):
            row = self.conn.execute("SELECT digest FROM hashes WHERE id = ?", (digest,)).fetchone()
            recorded = row[0] if row else ""
        h, done = hashing.hasher_for(hashing.PREFIX if recorded == "" else recorded or digest), 0
        try:
            with files.open(pack) as fd:
                while done < length:
                    n = self.io.read_into(fd, buf[: min(len(buf), length - done)], offset + done)
                    if n == 0:
                        break
                    h.update(buf[:n])
                    done += n
        except FileNotFoundError:
            pass
        except OSError:  # a bad sector, a pack someone made unreadable: reported, never a crash
            run.add(done=done)
            return "unreadable"
        run.add(done=done)
        if done < length:
            return "missing"
        if recorded == "":
            return hashing.PREFIX + h.hexdigest()
        return "ok" if hashing.matches(recorded or digest, h) else "corrupt"

    def recorded_hashes(self, ids: set[str]) -> dict[str, str]:
        """{id: hash} of the objects stored unhashed whose hash verify has recorded."""
        if not ids:
            return {}
        return {i: d for i, d in self.conn.execute("SELECT id, digest FROM hashes") if i in ids}

    def record_hashes(self, computed: list[tuple[str, str]]) -> None:
        """Remember the hashes of objects stored unhashed: later verifications compare with them."""
        with db.transaction(self.conn):
            self.conn.executemany("INSERT OR IGNORE INTO hashes VALUES (?,?)", computed)

    def mark_damaged(self, gone: set[str], corrupt: Iterable[str], where: dict[str, Where]) -> None:
        """Objects found missing or corrupt leave the index (the next capture that meets their
        content stores it afresh); packs holding corrupt bytes get those bytes freed."""
        corrupt = set(corrupt)
        bad = set(gone) | corrupt
        with db.transaction(self.conn):
            self.conn.executemany("DELETE FROM objects WHERE digest = ?", [(d,) for d in bad])
            self.conn.executemany("INSERT OR IGNORE INTO damaged VALUES (?, ?)",
                                  [(d, "corrupt" if d in corrupt else "missing") for d in bad])
            self.conn.executemany("INSERT OR IGNORE INTO dirty VALUES (?)", {(where[d][0],) for d in corrupt})

    def free(self, needed: set[str]) -> tuple[int, int, int]:
        """Delete every object not in `needed` (caller holds the store's exclusive lock): first
        forget, then free, so that a crash in between only leaks. Returns (objects, bytes,
        unindexed packs removed)."""
        rows = self.conn.execute("SELECT digest, pack, offset, length FROM objects").fetchall()
        dead, kept = [], {}  # kept: pack -> (offset, length) of its live objects
        for digest, pack, offset, length in rows:
            if digest in needed:
                kept.setdefault(pack, []).append((offset, length))
            else:
                dead.append((digest, pack, offset, length))
        with db.transaction(self.conn):
            self.conn.executemany("INSERT OR IGNORE INTO dirty VALUES (?)", {(r[1],) for r in dead})
            self.conn.executemany("DELETE FROM objects WHERE digest = ?", [(r[0],) for r in dead])
            self.conn.executemany("DELETE FROM hashes WHERE id = ?", [(r[0],) for r in dead if r[0].startswith(UNHASHED)])
            damaged = [d for (d,) in self.conn.execute("SELECT digest FROM damaged")]
            self.conn.executemany("DELETE FROM damaged WHERE digest = ?", [(d,) for d in damaged if d not in needed])
        dirty = {p for (p,) in self.conn.execute("SELECT pack FROM dirty")}
        indexed = {r[1] for r in rows}
        # A pack no row names is a killed capture's, unless the index lost rows (an index.db moved
        # away or restored from an older copy): then live manifests need objects it does not know,
        # and such a pack may hold them. Kept until every needed object is indexed again.
        lost = not needed <= {r[0] for r in rows}
        leftovers = 0
        for fan in os.scandir(self.root):
            for item in os.scandir(fan.path):
                if item.name not in indexed and lost:
                    continue
                if item.name not in kept:  # nothing live left, or never indexed (killed capture)
                    os.unlink(item.path)
                    leftovers += item.name not in dirty
                elif item.name in dirty:
                    punch_dead(item.path, kept[item.name])
        with db.transaction(self.conn):
            self.conn.execute("DELETE FROM dirty")
        return len(dead), sum(r[3] for r in dead), leftovers


class Pack:
    """A pack being written by one thread: its size so far and the objects it holds."""

    def __init__(self, fd: int, tmp: str | None, name: str):
        self.fd, self.tmp, self.name = fd, tmp, name
        self.size = self.kicked = 0  # bytes written; bytes whose write-back was started
        self.rows: list[tuple[str, str, int, int]] = []  # (digest, pack, offset, length)

    def discard(self) -> None:
        os.close(self.fd)
        if self.tmp is not None:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.tmp)


class Packer:
    """New objects of one capture, appended by the worker threads to pack files.

    Each thread appends to a pack of its own, so that writing takes no lock (and two threads
    do not queue on one file's inode lock), and seals it (flushes it and gives it its name)
    once full. On a durable store the disk starts writing each pack while it fills
    (`WRITEBACK` bytes at a time, asynchronously), so the flush at its seal waits for little
    more than the tail, and the disk works while the threads read and hash (a gigabyte takes
    this machine's disk about a second; benchmarks.md, "First snapshots with fewer hand-overs")."""

    WRITEBACK = 8 << 20

    def __init__(self, store: PackStore, run: Run):
        self.store, self.run = store, run
        self.known = store.known()  # objects the store holds already
        self.lock = threading.Lock()
        self.current: dict[int, Pack] = {}  # thread ident -> the pack it appends to
        self.unsealed: list[Pack] = []
        self.sealed: list[Pack] = []
        self.syncfs = False  # packs were named without their own flush

    def wants(self, digest: str) -> bool:
        """True for content the store lacks, once per capture (the first thread to bring it)."""
        return digest not in self.known and self.run.claim(digest)

    def put(self, data: memoryview, digest: str) -> None:
        me = threading.get_ident()
        pack = self.current.get(me)
        if pack is None:
            pack = self.store.new_pack()
            with self.lock:
                self.unsealed.append(pack)
                self.current[me] = pack
        n = len(data)
        offset = _block_up(pack.size) if n >= ALIGNED else pack.size
        self.store.io.write_at(pack.fd, data, offset)
        pack.size = offset + n
        pack.rows.append((digest, pack.name, offset, n))  # the caller counts it in its Run
        if self.store.durable and pack.size - pack.kicked >= self.WRITEBACK:
            fileio.start_writeback(pack.fd, pack.kicked, pack.size - pack.kicked)
            pack.kicked = pack.size
        if pack.size >= self.store.pack_size:
            with self.lock:
                del self.current[me]
            self.seal(pack)

    def seal(self, pack: Pack, *, sync: bool = True) -> None:
        """Flush a complete pack (durable stores; with sync=False, `finish` flushes the whole
        file system once) and name it; its objects are indexed at `finish`."""
        if self.store.durable and sync:
            os.fdatasync(pack.fd)
        elif self.store.durable:
            self.syncfs = True
        path = self.store.path(pack.name)
        if pack.tmp is None:
            fileio.link_fd(pack.fd, path)
        else:
            os.rename(pack.tmp, path)
        with self.lock:
            if pack in self.unsealed:
                self.unsealed.remove(pack)
            self.sealed.append(pack)
        os.close(pack.fd)

    def finish(self) -> bool:
        """Seal the packs still open, flush the folders that got new names, then index
        everything. True when another process stored some of the same objects first (sweep
        the copies)."""
        with self.lock:
            last, self.current = list(self.current.values()), {}
        for pack in last:
            self.seal(pack)
        if not self.sealed:
            return False
        if self.syncfs:  # one btrfs/XFS commit rather than an fdatasync per cloned file
            fileio.syncfs(self.store.root)
        elif self.store.durable:
            folders = sorted({p.name[:2] for p in self.sealed})
            self.store.parallel(lambda f: fileio.fsync_path(Path(self.store.root, f), directory=True), folders)
        return self.store.index(self.sealed)

    def abort(self) -> None:
        """Drop the packs still being written (named ones are swept later)."""
        with self.lock:
            for pack in self.unsealed:
                with contextlib.suppress(OSError):
                    pack.discard()
            self.unsealed, self.current = [], {}


class PackFiles:
    """Read descriptors of pack files, shared by a restore's or a verification's threads;
    at most OPEN_PACKS stay open (reflink stores hold one pack per file)."""

    def __init__(self, store: PackStore):
        self.store = store
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
        fd = os.open(self.store.path(name), os.O_RDONLY)
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

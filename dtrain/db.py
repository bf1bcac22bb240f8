"""SQLite access shared by every local component: one file, WAL, safe for concurrent CLIs."""

from __future__ import annotations

import contextlib
import errno
import os
import sqlite3
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

from dtrain.errors import StorageError

BUSY_S = 30.0  # how long a connection waits for another one's lock


def connect(path: str | Path, *, owner: object | None = None) -> sqlite3.Connection:
    """Open the state database; autocommit mode so that `transaction` controls locking.

    `owner`: the object the connection belongs to; the connection is closed when the owner is
    freed. A sqlite3.Connection sits in a reference cycle of its own (its statement cache holds
    it, CPython 3.11), so without this a dropped, unclosed one keeps its three files open until
    the cyclic collector runs; an owner outside any cycle is freed, and closes them, at once."""
    path = Path(path)
    if path.is_symlink() and not path.exists():  # SQLite would make a database wherever it points
        raise StorageError(f"{path} is a symbolic link to {os.readlink(path)}, which does not exist: "
                           f"remove the link, or set DTRAIN_HOME to another folder")
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = None
    try:
        conn = sqlite3.connect(str(path), timeout=BUSY_S, isolation_level=None, check_same_thread=False)
        conn.row_factory = sqlite3.Row
        _use_wal(conn)
        conn.execute(f"PRAGMA busy_timeout={int(BUSY_S * 1000)}")
        conn.execute("PRAGMA foreign_keys=ON")
    except sqlite3.DatabaseError as err:
        if conn is not None:
            conn.close()
        conn = _read_only_where_writes_fail(path, err) if _reads_only else None
        if conn is None:
            refused = unusable(path, err)
            if refused is None:
                raise
            raise refused from None
    _opened.add(path)
    if owner is not None:
        weakref.finalize(owner, conn.close).atexit = False  # at exit: as before, the interpreter's teardown
    return conn


_opened: set[Path] = set()  # the databases this process opened: the one a "locked" error is about is among them


def lock_refused(err: BaseException) -> str | None:
    """One line for a write that waited BUSY_S for another process's lock on a database and gave up
    ("database is locked"), naming the database and the processes holding a write lock on it
    (/proc/locks), or None for any other error. The write was not made: nothing stored changed."""
    if type(err).__module__ != "sqlite3" or "locked" not in str(err):
        return None
    found = [(path, pids) for path in sorted(_opened) if (pids := lock_holders(path))]
    if found:
        path, pids = found[0]
        held = f"{path} is held locked by {', '.join(f'pid {p} ({_command(p)})' for p in pids[:3])}"
    else:
        held = (" or ".join(str(p) for p in sorted(_opened)) or "a database of the home folder ($DTRAIN_HOME)") + \
            " was held locked by another process"
    return (f"{held} for more than {BUSY_S:g} s, so this command could not write it: wait for that process to "
            f"finish, or stop it, and retry; nothing stored was changed")


def lock_holders(path: Path) -> list[int]:
    """Pids of other processes holding a write lock on the database `path`, its -wal or its -shm file
    (SQLite's locks are POSIX record locks, listed in /proc/locks); [] if none is seen."""
    files = set()
    for f in (path, path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")):
        try:
            st = os.stat(f)
        except OSError:
            continue
        files.add(f"{os.major(st.st_dev):02x}:{os.minor(st.st_dev):02x}:{st.st_ino}")
    pids = []
    try:
        lines = Path("/proc/locks").read_text().splitlines()
    except OSError:
        return []
    for line in lines:
        fields = line.split()
        if len(fields) < 8 or fields[1] == "->" or fields[3] != "WRITE" or fields[5] not in files:
            continue
        try:
            pid = int(fields[4])
        except ValueError:
            continue
        if pid > 0 and pid != os.getpid() and pid not in pids:
            pids.append(pid)
    return pids


def _command(pid: int) -> str:
    try:
        words = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return "gone"
    text = " ".join(" ".join(w.decode("utf-8", "replace") for w in words).split())  # one line
    return text if len(text) <= 80 else text[:77] + "..."


_reads_only = False  # set by `reads_only()`: this process only reads, and only for a moment


@contextlib.contextmanager
def reads_only():
    """Within: a database whose disk is full or read-only may be opened read-only
    (`_read_only_where_writes_fail`).
    Only for a command that reads once and ends (`list`, `describe`): such a connection never sees
    later changes, so nothing that waits or follows, and no long-lived process, may use it."""
    global _reads_only
    before, _reads_only = _reads_only, True
    try:
        yield
    finally:
        _reads_only = before


def _read_only_where_writes_fail(path: Path, err: sqlite3.DatabaseError) -> sqlite3.Connection | None:
    """A read-only connection to a database that WAL mode cannot open because its disk is full or
    read-only (a mount, a folder the user may not write), or None.

    Opening a WAL database makes its -wal and -shm files, which a full or read-only disk refuses;
    then not even `dtrain list` could show what is stored. When every change is already in the main
    file (no -wal file, or an empty one: the last connection checkpointed), SQLite can read that
    file alone (`immutable`); when some are still in the -wal file, a read-only connection reads
    them through the -wal and -shm files already there (it makes neither). Any write through this
    connection is refused ("readonly"), and the CLI says the disk is full."""
    if not isinstance(err, sqlite3.OperationalError):
        return None
    wal, shm = path.with_name(path.name + "-wal"), path.with_name(path.name + "-shm")
    try:
        if not path.is_file() or path.is_symlink():
            return None
        # SQLite's "full" is the disk's word (its -shm file alone takes 32 KiB, more than a nearly
        # full disk may have left); an I/O error counts only on a disk that has no room at all
        full = "full" in str(err) or ("disk I/O error" in str(err) and _full(path.parent))
        if not full and not _read_only(path.parent):
            return None
        # changes still in the -wal file (a writer lives, or died without a checkpoint): read with
        # it, through the -shm index that is there too; else the main file alone
        pending = wal.exists() and wal.stat().st_size > 0
        if pending and not (shm.is_file() and not shm.is_symlink() and not wal.is_symlink()):
            return None
    except OSError:
        return None
    from urllib.parse import quote

    try:
        how = "mode=ro" if pending else "immutable=1"
        conn = sqlite3.connect(f"file:{quote(str(path.resolve()))}?{how}", uri=True, isolation_level=None,
                               check_same_thread=False, factory=ReadOnlyConnection)
        conn.row_factory = sqlite3.Row
        conn.execute("PRAGMA foreign_keys=ON")
        conn.execute("SELECT count(*) FROM sqlite_schema").fetchone()
    except sqlite3.DatabaseError:
        return None
    return conn


class ReadOnlyConnection(sqlite3.Connection):
    """A connection `_read_only_where_writes_fail` opened: its disk is full or read-only, every write
    through it is refused. A verb that would tidy as it reads (`snapshot verify`) asks `writable`."""


def writable(conn: sqlite3.Connection) -> bool:
    """False for a connection opened read-only because its disk is full or read-only."""
    return not isinstance(conn, ReadOnlyConnection)


def unusable(path: Path, err: sqlite3.DatabaseError) -> StorageError | None:
    """One line for a database file SQLite cannot use at all (not a database, damaged, a folder, a
    place it may not create one), naming the file; None for the rest (a lock held too long, a full
    or read-only disk), which the CLI words itself. Nothing is written to such a file."""
    why = getattr(err, "sqlite_errorname", "")
    if why in ("SQLITE_NOTADB", "SQLITE_CORRUPT"):
        what = "is not an SQLite database" if why == "SQLITE_NOTADB" else f"is a damaged database ({err})"
        if path.name == INDEX:  # the snapshot store's: its packs cannot be read without it
            return StorageError(f"{path} {what}: it is the snapshot store's index, without which no snapshot can "
                                f"be read; put back a copy of it if you keep one (moving it away loses nothing, "
                                f"but every snapshot stays unreadable until it is back)")
        return StorageError(f"{path} {what}: put back a copy of it if you keep one, or move it away (the jobs, "
                            f"volumes and snapshot names it records are then forgotten; the snapshots' stored "
                            f"content is kept), or set DTRAIN_HOME to another folder")
    if why != "SQLITE_CANTOPEN":
        return None
    if path.is_dir():
        return StorageError(f"{path} is a folder, not a database file: move it away, or set DTRAIN_HOME "
                            f"to another folder")
    full = _full(path.parent)
    if full:
        return StorageError(f"cannot open or create the database {path}: {full}; free some there (df -h, df -i) "
                            f"and retry")
    return StorageError(f"cannot open or create the database {path} ({err}): set DTRAIN_HOME to a folder "
                        f"you can write")


def disk_refused(err: BaseException) -> bool:
    """Whether an SQLite error says the disk refused the write (full, failing or read-only): a
    write SQLite could not finish leaves what was stored as it was."""
    return type(err).__module__ == "sqlite3" and any(w in str(err) for w in ("full", "I/O error", "readonly"))


def no_room(err: BaseException) -> bool:
    """Whether `err` is the disk refusing a write (full, out of quota, read-only, failing), from
    SQLite or from the file system; not a lock held too long."""
    if isinstance(err, OSError):
        return err.errno in (errno.ENOSPC, errno.EDQUOT, errno.EROFS)
    return disk_refused(err)


INDEX = "index.db"  # the snapshot store's index (dtrain.storage.packs)

RESERVE = "space-reserve"  # in the home folder: room kept for a delete to commit on a full disk
# 1 MiB: a snapshot delete on a full tmpfs committed with 96 KiB free (state.db's and index.db's -shm
# files, 32 KiB each, and a few WAL pages); the rest is for the index rows of a larger snapshot's data.
RESERVE_BYTES = 1 << 20
RESERVE_FROM = 16 * RESERVE_BYTES  # made only where this much is free: never more than 1/16 of what is left


def keep_reserve(home: Path) -> None:
    """Hold RESERVE_BYTES in the home folder (a file whose blocks are allocated), so that a command that
    frees space (`room_to_free`) can still open and write the databases once the disk is full: opening
    a WAL database makes its -wal and -shm files, and a commit writes to the -wal. Made, or completed
    after a crash, only where the disk has RESERVE_FROM free; nothing is stored in it, so losing it
    loses nothing."""
    path = Path(home) / RESERVE
    try:
        if path.stat().st_blocks * 512 >= RESERVE_BYTES:
            return
    except FileNotFoundError:
        pass
    except OSError:
        return
    try:
        fs = os.statvfs(home)
        if fs.f_bavail * fs.f_frsize < RESERVE_FROM:
            return
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW, 0o600)
        try:
            os.posix_fallocate(fd, 0, RESERVE_BYTES)
        finally:
            os.close(fd)
    except OSError:  # a disk that filled meanwhile, a folder not ours: no reserve, as before it existed
        with contextlib.suppress(OSError):
            if path.is_file() and not path.is_symlink() and path.stat().st_blocks * 512 < RESERVE_BYTES:
                path.unlink()


@contextlib.contextmanager
def room_to_free(home: Path):
    """Around a command that frees space in the home folder (a snapshot or volume delete): where its
    disk has less than RESERVE_BYTES free, the reserve is given up first, so that the databases open
    and the delete commits (else the way out of a full disk is refused for want of the room it would
    make); it is made again after, where the disk then has room for it (`keep_reserve`). A crash in
    between leaves the reserve missing until the next storage command makes it again. Yields whether
    the reserve was given up (a message measuring the free space then says so)."""
    path = Path(home) / RESERVE
    given_up = False
    try:
        fs = os.statvfs(home)
        if fs.f_bavail * fs.f_frsize < RESERVE_BYTES and path.is_file() and not path.is_symlink():
            path.unlink()
            given_up = True
    except OSError:
        pass
    try:
        yield given_up
    finally:
        if given_up:
            keep_reserve(home)


def _read_only(folder: Path) -> bool:
    """Whether no file can be made in `folder`: a read-only mount, or a folder this user may not write."""
    try:
        return bool(os.statvfs(folder).f_flag & os.ST_RDONLY) or not os.access(folder, os.W_OK)
    except OSError:
        return False


def _full(folder: Path) -> str | None:
    """'its disk has no free space' / '... no free inodes' when that is why a file cannot be made there."""
    try:
        fs = os.statvfs(folder)
    except OSError:
        return None
    if fs.f_files and fs.f_favail == 0:
        return f"the disk holding {folder} has no free inodes (no new file can be made there)"
    if fs.f_blocks and fs.f_bavail == 0:  # (a pseudo file system such as /proc has no blocks at all)
        return f"the disk holding {folder} has no free space"
    return None


def _use_wal(conn: sqlite3.Connection) -> None:
    """Switch the database to WAL (once per file; later calls find it so).

    The switch takes the file's exclusive lock. When several processes open a new database at
    the same moment (six `dtrain submit` in a fresh home), one that holds the shared lock and
    asks for the exclusive one while another already waits for it is refused at once with
    "database is locked": SQLite does not call the busy handler there, since both waiting would
    deadlock. So it is retried here, with a short random pause, within the same BUSY_S bound."""
    deadline = time.monotonic() + BUSY_S
    pause = 0.002
    while True:
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as err:
            if "locked" not in str(err) or time.monotonic() >= deadline:
                raise
        import random  # only here: most commands never wait

        time.sleep(pause * (1 + random.random()))
        pause = min(pause * 2, 0.1)


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection):
    """BEGIN IMMEDIATE: take the write lock up front so read-check-write is atomic across processes."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        if conn.in_transaction:  # a full disk mid-statement: SQLite may have rolled it back already
            conn.execute("ROLLBACK")
        raise
    try:
        conn.execute("COMMIT")
    except BaseException:  # a full disk: SQLite keeps the transaction open, and its lock, until told
        if conn.in_transaction:
            conn.execute("ROLLBACK")
        raise


_ERRNO_HINTS = {
    errno.ENOSPC: "free space on that disk and retry",
    errno.EDQUOT: "free space within your disk quota and retry",
    errno.EROFS: "that file system is read-only: use a writable folder",
    errno.EACCES: "you may not write there: use a folder you own, or fix its permissions",
}


def machine_refused(err: BaseException) -> str | None:
    """One line for what the machine refused a command (a full or read-only disk, a folder it may
    not write), or None for anything else. The state database changes in transactions, so a
    write SQLite could not finish left what was stored as it was."""
    if getattr(err, "sqlite_errorname", None) in ("SQLITE_CORRUPT", "SQLITE_NOTADB"):  # found past db.connect's checks
        return (f"the state database (state.db in the home folder, $DTRAIN_HOME) is damaged ({err}): put back a "
                f"copy of it if you keep one, or move it away (the snapshots' stored content is kept), or set "
                f"DTRAIN_HOME to another folder")
    if (locked := lock_refused(err)) is not None:
        return locked
    if disk_refused(err) and "readonly" in str(err):  # read through a read-only connection (db.connect)
        return (f"the state database could not be written ({err}): the home folder ($DTRAIN_HOME) is on a full or "
                f"read-only disk, or is not yours to write; free space there (df -h), or set DTRAIN_HOME to a "
                f"folder you can write, and retry; nothing stored was changed")
    if disk_refused(err):
        return (f"the state database could not be opened or written ({err}): the disk holding the home folder ($DTRAIN_HOME) is "
                f"probably full or read-only; free space there (df -h) and retry; nothing stored was changed")
    if isinstance(err, OSError) and err.errno in _ERRNO_HINTS:
        where = f" writing {err.filename}" if err.filename else ""
        return f"{err.strerror}{where}: {_ERRNO_HINTS[err.errno]}"
    return None


IN_BATCH = 500  # values bound per query: well under SQLite's limit on variables (999 before 3.32, 32766 since)


def rows_in(conn: sqlite3.Connection, sql: str, values: Sequence[object]) -> list[tuple]:
    """The rows of `sql`, whose one `IN ({})` is filled with `values`, asked in batches of IN_BATCH (one query
    for a listing of up to that many; SQLite refuses a query binding more variables than its limit)."""
    values = list(dict.fromkeys(values))
    out: list[tuple] = []
    for at in range(0, len(values), IN_BATCH):
        part = values[at:at + IN_BATCH]
        out += conn.execute(sql.format(",".join("?" * len(part))), part).fetchall()
    return out

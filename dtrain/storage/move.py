"""Moving a volume to another storage class: a journaled state machine that a kill cannot split.

A storage class is a root folder (config.yaml `storage_classes:`); a volume of class C lives in
`<root of C>/<name>/data`, and its row in `volumes` records that root. Moving it:

    journal row ('rename')       rename(<old>/<name>, <new>/<name>)  COMMIT POINT: the rename
      (same file system)         UPDATE volumes (class, root); DELETE journal
    journal row ('copy')         copy into <new>/.move-<pid>-<hex>; syncfs; hash both trees with
      (another file system)      the snapshot engine and compare; rename into <new>/<name>;
                                 UPDATE volumes + journal 'committed'   COMMIT POINT: that transaction
                                 remove <old>/<name>; DELETE journal

Recovery runs on the next access once the mover's process is gone (pid and start time): a
'rename' row rolls forward if the folder reached the new root, back otherwise; an uncommitted
'copy' row removes the copy (the old folder is whole); a committed one removes the old folder.
So after any kill the volume is whole in exactly one place and the row says where.

Jobs and moves exclude each other without a lock held across processes: the mover writes its
journal row, then asks who uses the volume (and undoes the row if anyone does); a job's row is
written before its supervisor resolves its mounts, and the supervisor waits while a live move of
the volume exists. Whichever writes second sees the other.

For tests only, DTRAIN_MOVE_KILL_AT=<point> makes the mover SIGKILL itself at that point
(journaled, renamed, copied, verified, placed, committed, removed).
"""

from __future__ import annotations

import errno
import os
import signal
import sqlite3
import stat
from collections.abc import Callable
from pathlib import Path

from dtrain import db, procs
from dtrain.errors import ConflictError, StorageError
from dtrain.storage import fileio, folders
from dtrain.storage import manifest as mf
from dtrain.storage.entries import SPECIALS, Entry, hard_links
from dtrain.storage.engine import Engine
from dtrain.storage.info import human_bytes

SCHEMA = """
CREATE TABLE IF NOT EXISTS volume_moves (
    volume TEXT PRIMARY KEY, uid TEXT NOT NULL, method TEXT NOT NULL, state TEXT NOT NULL,
    src_class TEXT NOT NULL, dst_class TEXT NOT NULL, src TEXT NOT NULL, dst TEXT NOT NULL,
    dst_root TEXT NOT NULL, staging TEXT NOT NULL, pid INTEGER NOT NULL, pid_start TEXT);
"""
KILL_ENV = "DTRAIN_MOVE_KILL_AT"


def process_start(pid: int) -> str | None:
    """The kernel's start time of a live pid, with the boot it counts from: a recorded pid means
    nothing without them (see dtrain.procs)."""
    start = procs.start_time(pid)
    return None if start is None else f"{procs.boot_id()}:{start}"


def _checkpoint(point: str) -> None:
    if os.environ.get(KILL_ENV) == point:
        os.kill(os.getpid(), signal.SIGKILL)


class Mover:
    """Moves volume folders between class roots; `conn` is the state database."""

    def __init__(self, conn: sqlite3.Connection, engine: Engine):
        self.conn = conn
        self.engine = engine
        conn.executescript(SCHEMA)

    # --- who is moving ---------------------------------------------------------------------
    def live(self, volume: str) -> sqlite3.Row | None:
        """The journal row of a move still running in some process, if any."""
        row = self.conn.execute("SELECT * FROM volume_moves WHERE volume = ?", (volume,)).fetchone()
        if row is not None and process_start(row["pid"]) == row["pid_start"]:
            return row
        return None

    def moving(self) -> set[str]:
        return {r[0] for r in self.conn.execute("SELECT volume FROM volume_moves")}

    def recover(self) -> None:
        """Finish or undo the moves of processes that died (none: one cheap SELECT)."""
        if self.conn.in_transaction:
            return
        for row in self.conn.execute("SELECT * FROM volume_moves").fetchall():
            if process_start(row["pid"]) != row["pid_start"]:
                self._recover(row)

    def _recover(self, row: sqlite3.Row) -> None:
        src, dst, staging = Path(row["src"]), Path(row["dst"]), Path(row["staging"])
        if row["method"] == "rename":
            if os.path.lexists(dst) and not os.path.lexists(src):
                self._switch(row, final=True)  # the rename happened: roll forward
            else:
                self._forget(row)
            return
        try:
            if row["state"] == "committed":
                _remove(src)
            else:
                _remove(staging)
                _remove(dst)  # a copy renamed into place before the commit; the name was free then
        except OSError as err:  # a disk gone read-only: the volume is whole where its row says; say what stays
            _left_behind(row, err, committed=row["state"] == "committed")
        self._forget(row)

    # --- the move --------------------------------------------------------------------------
    def move(self, *, volume: str, uid: str, src_class: str, dst_class: str, src: Path, dst_root: Path,
             check_users: Callable[[], None]) -> str:
        """Move folder `src` (<root>/<volume>) into `dst_root`; returns 'rename' or 'copy'."""
        dst = dst_root / volume
        staging = dst_root / folders.staging_name("move")
        same_fs = os.stat(src).st_dev == os.stat(dst_root).st_dev
        with db.transaction(self.conn):
            if self.conn.execute("SELECT 1 FROM volume_moves WHERE volume = ?", (volume,)).fetchone():
                raise ConflictError(f"volume {volume!r} is already being moved: wait for that "
                                    f"'dtrain volume update' to finish")
            if os.path.lexists(dst):
                raise StorageError(f"cannot move volume {volume!r}: {dst} already exists; remove it or pick "
                                   f"another class")
            self.conn.execute("INSERT INTO volume_moves VALUES (?,?,?,?,?,?,?,?,?,?,?,?)",
                              (volume, uid, "rename" if same_fs else "copy", "moving", src_class, dst_class,
                               str(src), str(dst), str(dst_root), str(staging), os.getpid(),
                               process_start(os.getpid())))
        try:
            check_users()  # after the journal row: a job that starts later waits for the move
        except BaseException:
            self._forget(self._row(volume))
            raise
        _checkpoint("journaled")
        if same_fs:
            try:
                os.rename(src, dst)  # the commit point
            except OSError as err:
                if err.errno != 18:  # EXDEV: another mount of the same device; copy instead
                    self._forget(self._row(volume))
                    raise StorageError(f"cannot move volume {volume!r} to {dst}: {err.strerror}") from None
                self.conn.execute("UPDATE volume_moves SET method = 'copy' WHERE volume = ?", (volume,))
            else:
                _checkpoint("renamed")
                self._switch(self._row(volume), final=True)
                return "rename"
        self._copy(self._row(volume))
        return "copy"

    def relabel(self, *, volume: str, uid: str, dst_class: str, dst_root: Path) -> None:
        """Give the volume class `dst_class`, whose root `dst_root` is the folder it is in already
        (two spellings of one folder at most): one transaction, no file touched, nothing to journal."""
        with db.transaction(self.conn):
            if self.conn.execute("SELECT 1 FROM volume_moves WHERE volume = ?", (volume,)).fetchone():
                raise ConflictError(f"volume {volume!r} is already being moved: wait for that "
                                    f"'dtrain volume update' to finish")
            self.conn.execute("UPDATE volumes SET storage_class = ?, root = ? WHERE name = ? AND uid = ?",
                              (dst_class, str(dst_root), volume, uid))

    def _copy(self, row: sqlite3.Row) -> None:
        src, dst, staging = Path(row["src"]), Path(row["dst"]), Path(row["staging"])
        try:
            os.mkdir(staging, 0o700)
            copy_tree(src / "data", staging / "data")
            fileio.syncfs(staging)  # the copy is on disk before the old folder may go
            _checkpoint("copied")
            self._verify(row["volume"], src / "data", staging / "data")
            _checkpoint("verified")
            os.rename(staging, dst)
            _checkpoint("placed")
        except BaseException as err:
            _remove(staging)
            _remove(dst)
            self._forget(row)
            if fileio.is_disk_full(err):
                import shutil  # on first use: ~5 ms of every start otherwise
                needed = sum(st.st_blocks * 512 for _, st in mf.scan(src / "data"))
                free = shutil.disk_usage(dst.parent).free
                raise StorageError(f"no space left in storage class {row['dst_class']!r} for volume "
                                   f"{row['volume']!r}: it needs {human_bytes(needed)}, {human_bytes(free)} are free "
                                   f"under {dst.parent}; the volume stays where it was, unchanged. Free space "
                                   f"there or choose another class, and retry") from None
            if isinstance(err, OSError) and not isinstance(err, StorageError):
                raise StorageError(f"copying volume {row['volume']!r} to {dst.parent} failed: {err}; the "
                                   f"volume stays where it was") from err
            raise
        self._switch(row, final=False)  # the commit point
        _checkpoint("committed")
        try:
            _remove(src)
        except OSError as err:  # the move is done; an old folder that cannot go (a read-only disk) is named
            _left_behind(row, err, committed=True)
        _checkpoint("removed")
        self._forget(row)

    def _verify(self, volume: str, a: Path, b: Path) -> None:
        """The snapshot engine hashes both trees; every path, byte, mode, owner, time and link agrees."""
        with self.engine.pin():
            old, _ = self.engine.capture(a, store=False)
            new, _ = self.engine.capture(b, store=False)
        if [_comparable(e) for e in old.entries] != [_comparable(e) for e in new.entries] or old.xattrs != new.xattrs:
            changed = [c.path for c in mf.diff(old, new)][:3]
            raise StorageError(f"the copy of volume {volume!r} differs from the original at {', '.join(changed)}"
                               f" (did something write to it during the move?); nothing was switched: retry")
        links, copied = hard_links(old.entries), hard_links(new.entries)
        if links != copied:
            changed = sorted(links.keys() ^ copied.keys() or links)[:3]
            raise StorageError(f"the copy of volume {volume!r} does not keep the hard links of the original at "
                               f"{', '.join(changed)} (did something write to it during the move?); nothing was "
                               f"switched: retry")

    # --- journal steps ---------------------------------------------------------------------
    def _row(self, volume: str) -> sqlite3.Row:
        return self.conn.execute("SELECT * FROM volume_moves WHERE volume = ?", (volume,)).fetchone()

    def _switch(self, row: sqlite3.Row, *, final: bool) -> None:
        """One transaction: the volume's class and root, and the journal's state."""
        with db.transaction(self.conn):
            self.conn.execute("UPDATE volumes SET storage_class = ?, root = ? WHERE name = ? AND uid = ?",
                              (row["dst_class"], row["dst_root"], row["volume"], row["uid"]))
            if final:
                self.conn.execute("DELETE FROM volume_moves WHERE volume = ?", (row["volume"],))
            else:
                self.conn.execute("UPDATE volume_moves SET state = 'committed' WHERE volume = ?", (row["volume"],))

    def _forget(self, row: sqlite3.Row | None) -> None:
        if row is not None:
            with db.transaction(self.conn):
                self.conn.execute("DELETE FROM volume_moves WHERE volume = ?", (row["volume"],))


def _left_behind(row: sqlite3.Row, err: OSError, *, committed: bool) -> None:
    """Warn about the folder a finished or undone move could not remove. Raising instead failed the
    move that had committed, and every later command (`volume list` included) in recovery, until
    the disk was writable again: moving a volume off a disk that went read-only is when it matters."""
    import logging

    where = row["dst"] if committed else row["src"]
    left = row["src"] if committed else f"{row['staging']} (or {row['dst']})"
    logging.getLogger(__name__).warning(
        "volume %r is in storage class %r (%s), whole; %s could not be removed (%s): remove it by hand",
        row["volume"], row["dst_class"] if committed else row["src_class"], where, left, err.strerror or err)


def _comparable(e: Entry) -> tuple:
    """An entry without what a copy must change (inode, ctime)."""
    return (e.path, e.kind, e.mode, e.uid, e.gid, e.mtime_ns, e.size, e.data)


def copy_tree(src: Path, dst: Path) -> None:
    """Bytes, modes, owners (as root), times, symlinks, hard links and special files (fifos,
    sockets; device nodes as root, refused otherwise: the copy must be exact). Folders get their
    mode and times last, deepest first, so a read-only folder is filled first."""
    import shutil  # on first use: ~5 ms of every start otherwise

    as_root = os.geteuid() == 0
    os.mkdir(dst, 0o700)
    folders = [(src, dst)]
    copied: dict[tuple[int, int], Path] = {}  # a file with hard links: its first copy, linked for the others
    waiting = [src]  # not os.walk: it recursed once per level, and a job may nest 1,000 folders
    while waiting:
        here = waiting.pop()
        rel = os.path.relpath(here, src)
        for entry in os.scandir(here):
            s, d = Path(entry.path), dst / rel / entry.name
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISDIR(st.st_mode):
                os.mkdir(d, 0o700)
                folders.append((s, d))
                waiting.append(s)
                continue
            if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
                first = copied.setdefault((st.st_dev, st.st_ino), d)
                if first != d:
                    os.link(first, d, follow_symlinks=False)  # one inode, as in the original
                    continue
            if stat.S_ISLNK(st.st_mode):
                os.symlink(os.readlink(s), d)
            elif stat.S_ISREG(st.st_mode) and st.st_blocks * 512 < st.st_size:
                _copy_sparse(s, d)  # holes stay holes: a sparse image copied dense could fill the class
            elif stat.S_ISREG(st.st_mode):
                shutil.copyfile(s, d, follow_symlinks=False)  # copy_file_range/sendfile underneath
            elif stat.S_IFMT(st.st_mode) in SPECIALS:
                _make_node(s, d, st, as_root)
            else:
                raise StorageError(f"cannot move {s}: a file of an unknown type; remove it")
            if as_root:
                os.lchown(d, st.st_uid, st.st_gid)
            if stat.S_ISREG(st.st_mode):
                _copy_xattrs(s, d)  # after chown, which clears capabilities; before a read-only mode
            if not stat.S_ISLNK(st.st_mode):
                os.chmod(d, stat.S_IMODE(st.st_mode))  # after chown, which clears setuid and setgid
            os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns), follow_symlinks=False)
    for s, d in reversed(folders):
        st = os.lstat(s)
        if as_root:
            os.chown(d, st.st_uid, st.st_gid)
        _copy_xattrs(s, d)
        os.chmod(d, stat.S_IMODE(st.st_mode))
        os.utime(d, ns=(st.st_atime_ns, st.st_mtime_ns))


def _copy_xattrs(src: Path, dst: Path) -> None:
    """Extended attributes of a file or folder (user.*, ACLs, capabilities); the verify that
    follows finds any the target could not take."""
    try:
        names = os.listxattr(src, follow_symlinks=False)
    except OSError as err:
        if err.errno in (errno.ENOTSUP, errno.EOPNOTSUPP):
            return
        raise
    for name in names:
        os.setxattr(dst, name, os.getxattr(src, name, follow_symlinks=False), follow_symlinks=False)


def _make_node(src: Path, dst: Path, st: os.stat_result, as_root: bool) -> None:
    """A fifo, socket or device node like `st` at `dst` (made, never opened)."""
    try:
        os.mknod(dst, 0o600 | stat.S_IFMT(st.st_mode), st.st_rdev)
    except PermissionError:
        if not (stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode)) or as_root:
            raise
        raise StorageError(f"cannot move {src}: it is a device node and only root can make one; "
                           f"move the volume as root, or remove it") from None


def _copy_sparse(src: Path, dst: Path) -> None:
    """Copy only the data regions of a file with holes (SEEK_DATA / SEEK_HOLE); the rest stays a hole."""
    fin = os.open(src, os.O_RDONLY | os.O_NOFOLLOW)
    try:
        fout = os.open(dst, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        try:
            size, at, io = os.fstat(fin).st_size, 0, fileio.FileIO()
            while at < size:
                try:
                    start = os.lseek(fin, at, os.SEEK_DATA)
                except OSError as err:
                    if err.errno == errno.ENXIO:  # only a hole from here on
                        break
                    raise
                end = min(os.lseek(fin, start, os.SEEK_HOLE), size)
                io.copy(fin, fout, end - start, start, start)
                at = end
            os.ftruncate(fout, size)
        finally:
            os.close(fout)
    finally:
        os.close(fin)


def _remove(path: Path) -> None:
    """Rename aside first (one atomic step), then delete: a kill mid-delete leaves a '.trash-' folder
    that housekeeping removes, never a half-deleted volume under its own name."""
    if not os.path.lexists(path):
        return
    trash = path.parent / folders.staging_name("trash")
    os.rename(path, trash)
    folders.rmtree(trash)

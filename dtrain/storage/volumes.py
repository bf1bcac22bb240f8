"""Local volumes and their snapshots: names, lineage and restore policy over the engine.

Words map one to one to Kubernetes: a volume is a PersistentVolumeClaim (its size is
``spec.resources.requests.storage``, its storage class ``spec.storageClassName``, its origin
snapshot ``spec.dataSource``); a snapshot is a CSI VolumeSnapshot (its volume is
``spec.source.persistentVolumeClaimName``, its bytes ``status.restoreSize``). Restoring to a
new volume is a PVC with a VolumeSnapshot data source (NetApp ``clone volume``); restoring in
place is NetApp's ``snapshot restore``. Deleting a volume keeps its snapshots, as Kubernetes does.

Layout under the dtrain home: ``volumes/<name>/data`` (the folder a job mounts), ``store/``
(the engine), and the tables ``volumes`` and ``snapshots`` in ``state.db``. A volume of another
storage class (config.yaml ``storage_classes:``, a root folder each) lives in
``<root>/<name>/data``; its row records the root, and move.py moves it between classes.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import sqlite3
import stat
import time
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime
from pathlib import Path

from dtrain import db
from dtrain.errors import ConflictError, NotFoundError, SpecError, StorageError
from dtrain.names import check_name, check_storage_class, listed, parse_size, parse_volume_size
from dtrain.storage import fileio, folders
from dtrain.storage import manifest as mf
from dtrain.storage.engine import Engine
from dtrain.storage.info import (TIDYING_SKIPPED, Damage, Freed, Snapshot, StorageClass, VerifyReport, Volume,
                                 human_bytes)
from dtrain.storage.move import Mover
from dtrain.storage.progress import Progress, reporter

SCHEMA = """
CREATE TABLE IF NOT EXISTS volumes (
    name TEXT PRIMARY KEY, uid TEXT NOT NULL, created TEXT NOT NULL, size TEXT NOT NULL,
    storage_class TEXT NOT NULL, origin_snapshot TEXT, head_snapshot TEXT, labels TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS snapshots (
    name TEXT PRIMARY KEY, uid TEXT NOT NULL UNIQUE, volume TEXT NOT NULL, volume_uid TEXT NOT NULL,
    created TEXT NOT NULL, created_ns INTEGER NOT NULL, volume_size TEXT NOT NULL,
    storage_class TEXT NOT NULL, job TEXT, job_spec TEXT, source_snapshot TEXT,
    files INTEGER NOT NULL, bytes INTEGER NOT NULL, added_bytes INTEGER NOT NULL, method TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS snapshots_by_volume ON snapshots (volume_uid, created_ns);
CREATE TABLE IF NOT EXISTS class_roots (root TEXT PRIMARY KEY);
"""
DEFAULT_CLASS = "local"  # the class whose root is <home>/volumes
ROOT_MARK = ".dtrain-volumes"  # in a class root: dtrain may tidy this folder
PENDING = folders.PENDING  # in a volume's folder until its row commits (see folders.py)
DELETING = ".deleting-"  # '.deleting-<owner>-<volume uid>' (folders.owner_tag): a volume folder renamed aside by a delete


def volume_heads(conn, volumes: Sequence[str]) -> list[dict]:
    """Lineage of the volumes a job mounts, read (on `conn`, in the caller's transaction) when it
    starts: for each one (in order, once) whose content is a snapshot's (its head: the latest
    restored into it or taken of it), the volume and that snapshot, by name and by uid (names are
    reused after a delete, uids never)."""
    out, seen = [], set()
    for name in volumes:
        if name in seen:
            continue
        seen.add(name)
        row = conn.execute("SELECT v.name, v.uid, s.name, s.uid FROM volumes v JOIN snapshots s "
                           "ON s.name = v.head_snapshot WHERE v.name = ?", (name,)).fetchone()
        if row is not None:
            out.append({"volume": row[0], "volume_uid": row[1], "snapshot": row[2], "snapshot_uid": row[3]})
    return out


class Storage:
    """Volumes (folders jobs mount) and point-in-time snapshots of them."""

    def __init__(self, home: Path, *, engine: Engine | None = None, classes: Mapping[str, Path] | None = None,
                 command: Callable[[str], str] | None = None,
                 job_command: Callable[[str, str], str] | None = None):
        """`classes`: storage class -> root folder (config.yaml); 'local' is <home>/volumes.
        `command(words)`: the `dtrain WORDS` a message's hint names, so that it works as printed (the
        local backend's carries the -p PROJECT and --backend of the command that failed); None: plain.
        `job_command(words, job)`: the same for a command on job `job` (its own project's -p, not the
        volume's); None: `command`."""
        self.home = Path(home).expanduser()
        self.cmd = command or fileio.plain_command
        self._job_command = job_command  # not a lambda on self: a cycle would keep the databases open
        self.classes = {name: Path(root) for name, root in (classes or {}).items()}
        self.volumes_dir = self.home / "volumes"
        if not self.volumes_dir.is_dir():
            try:
                self.volumes_dir.mkdir(parents=True)
            except FileExistsError:  # made meanwhile by another command or server thread (a file there still fails)
                if not self.volumes_dir.is_dir():
                    raise
            else:
                fileio.spread_subfolders(self.volumes_dir)  # volumes in different ext4 block groups
        self.conn = db.connect(self.home / "state.db", owner=self)
        db.keep_reserve(self.home)  # a delete's room on a full disk (db.room_to_free)
        self.conn.executescript(SCHEMA)
        if not self._has_root_column():
            with db.transaction(self.conn):  # checked again as the one writer: another command may add it first
                if not self._has_root_column():
                    self.conn.execute("ALTER TABLE volumes ADD COLUMN root TEXT")  # NULL: <home>/volumes
        if not self._has_job_uid_column():  # a home of before job uids: its snapshots' job_uid is NULL (unknown)
            try:
                with db.transaction(self.conn):
                    if not self._has_job_uid_column():
                        self.conn.execute("ALTER TABLE snapshots ADD COLUMN job_uid TEXT")
            except sqlite3.OperationalError as err:
                if not db.disk_refused(err):
                    raise  # a read-only disk: snapshots are read without it (job_uid None)
        self.engine = engine or Engine(self.home / "store", command=self.cmd)
        self.mover = Mover(self.conn, self.engine)

    def _has_job_uid_column(self) -> bool:
        return "job_uid" in {r[1] for r in self.conn.execute("PRAGMA table_info(snapshots)")}

    def _has_root_column(self) -> bool:
        return "root" in {r[1] for r in self.conn.execute("PRAGMA table_info(volumes)")}

    def close(self) -> None:
        self.conn.close()
        self.engine.close()

    # --- volumes ---------------------------------------------------------------------------
    def create_volume(self, name: str, *, size: str | None = None, storage_class: str = "local",
                      origin_snapshot: str | None = None, labels: Mapping[str, str] | None = None,
                      progress: Progress | bool | None = None) -> Volume:
        """An empty volume, or one holding `origin_snapshot`'s content (size defaults to the
        snapshot's volume size, else 10Gi)."""
        check_name(name, "volume")
        labels = _check_labels(labels)
        root = self.class_root(storage_class)
        if size is not None:
            parse_volume_size(size)
        if origin_snapshot is not None:
            return self._clone(self.get_snapshot(origin_snapshot), name, size=size,
                               storage_class=storage_class, labels=labels, progress=progress)
        self.ensure_free(name)
        self._collect()
        with db.transaction(self.conn):
            self.ensure_free(name)
            self._ensure_no_folder(name, root)
            (root / name).mkdir()
            (root / name / PENDING).touch()
            folders.make_data_folder(root / name / "data")
            self._insert_volume(name, size or "10Gi", storage_class, None, labels, root)
        (root / name / PENDING).unlink(missing_ok=True)
        return self.get_volume(name)

    def update_volume(self, name: str, *, storage_class: str, check_users=lambda: None) -> Volume:
        """Move the volume to `storage_class`'s root (move.py); `check_users` raises ConflictError
        when a job uses the volume, and runs after the move is journaled."""
        vol = self.get_volume(name)
        root = self.class_root(storage_class)
        if vol.storage_class == storage_class and vol.path.parent.parent == root:
            return vol
        self._collect(sweep=False)
        with self.hold(vol, exclusive=True):
            self.mover.move(volume=name, uid=vol.uid, src_class=vol.storage_class, dst_class=storage_class,
                            src=vol.path.parent, dst_root=root, check_users=check_users)
        return self.get_volume(name)

    def settled(self, name: str) -> None:
        """Refuse while another process moves the volume to another class."""
        row = self.mover.live(name)
        if row is not None:
            raise ConflictError(f"volume {name!r} is moving to storage class {row['dst_class']!r} (pid "
                                f"{row['pid']}): retry when that 'dtrain volume update' has finished")

    @contextlib.contextmanager
    def hold(self, vol: Volume, *, exclusive: bool, wait: bool = False):
        """A lock on one volume: shared while a snapshot reads its folder, exclusive while a
        command replaces, moves or removes that folder (an in-place restore's swap, a move, a
        delete). Without it a snapshot taken meanwhile recorded a mix of the old and the new files,
        or the files not yet read as gone, and called it a snapshot. Refused at once when held,
        unless `wait` (the swap and the delete are short; they wait for a snapshot to finish). A
        flock on the volume's folder (<root>/<name>, which holds data/): nothing to create, so it
        works on a full disk, and a killed process drops it with its descriptors. Yields the volume
        as it is now, refused when another command deleted or moved it since `vol` was read."""
        try:
            fd = _lock_fd(vol)
        except FileNotFoundError:  # deleted meanwhile (get_volume says so), or Lost: nothing to hold
            yield self._same(vol)
            return
        except OSError as err:  # ELOOP, ENOTDIR: a link or a file put at the volume's folder by hand
            raise StorageError(f"volume {vol.name!r}: {vol.path.parent} is not the folder made for it "
                               f"({err.strerror}); a link there is never followed: put the volume's folder "
                               f"back in its place") from None
        try:
            try:
                fcntl.flock(fd, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                raise ConflictError(f"volume {vol.name!r} is busy: another command is snapshotting, restoring, "
                                    f"moving or deleting it; retry when that has finished") from None
            yield self._same(vol)
        finally:
            os.close(fd)

    def _same(self, vol: Volume) -> Volume:
        """The volume `vol` as it is now; refused when another command deleted or moved it."""
        now = self.get_volume(vol.name)
        if (now.uid, now.path) != (vol.uid, vol.path):
            raise ConflictError(f"volume {vol.name!r} was moved or deleted by another command just now; retry")
        return now

    def get_volume(self, name: str) -> Volume:
        self.mover.recover()
        row = self.conn.execute("SELECT * FROM volumes WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFoundError(f"no volume named {name!r}: list volumes with `{self.cmd('volume list')}`")
        return self._volume(row)

    def list_volumes(self) -> list[Volume]:
        self.mover.recover()
        self._finish_sweep()
        return [self._volume(r) for r in self.conn.execute("SELECT * FROM volumes ORDER BY name")]

    def names(self, what: str) -> list[str]:
        """The names of the volumes (`what` 'volume') or of the snapshots, read from the table alone."""
        table = "volumes" if what == "volume" else "snapshots"
        return [r[0] for r in self.conn.execute(f"SELECT name FROM {table}")]

    def job_cmd(self, words: str, job: str) -> str:
        """`dtrain WORDS` for a command on job `job`, as `job_command` names it (else `cmd`)."""
        return self._job_command(words, job) if self._job_command is not None else self.cmd(words)

    def stop_hint(self, jobs: Sequence[str], verb: str = "delete") -> str:
        """The commands that stop `jobs` (or `verb` them: suspend), as the hints of a refusal name them
        (each with its job's -p)."""
        said = ", ".join(f"`{self.job_cmd(f'{verb} {job}', job)}`" for job in jobs[:3])
        return said + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")

    def delete_volume(self, name: str, *, in_use_by: Sequence[str] = (), force: bool = False) -> None:
        """Delete a volume's data; its snapshots stay. Refused while jobs use it, unless forced."""
        vol = self.get_volume(name)
        self.settled(name)
        in_use_by = [in_use_by] if isinstance(in_use_by, str) else list(in_use_by)
        if in_use_by and not force:
            raise ConflictError(f"volume {name!r} is in use by {listed(in_use_by, 'job')}: wait for "
                                f"them to finish, stop them ({self.stop_hint(in_use_by)}), or delete with --force")
        folder = vol.path.parent
        # named after the volume's uid: killed between this rename and the commit, the row still
        # stands, and _collect puts the folder back instead of deleting a registered volume's data
        trash = folder.parent / f"{DELETING}{folders.owner_tag()}-{vol.uid}"
        with self.hold(vol, exclusive=True, wait=True):
            with db.transaction(self.conn):
                # This volume, if still there: a concurrent delete (or a delete and a new volume of the
                # same name) leaves this caller nothing to delete, and it says so.
                if self.conn.execute("DELETE FROM volumes WHERE name = ? AND uid = ?", (name, vol.uid)).rowcount == 0:
                    raise NotFoundError(f"no volume named {name!r}: list volumes with `{self.cmd('volume list')}`")
                if folder.exists():
                    os.rename(folder, trash)
        folders.rmtree(trash)

    def volume_roots(self) -> list[Path]:
        """Every folder volumes live in: <home>/volumes, each configured class's root, and each root
        a volume is recorded in (a class since taken out of config.yaml)."""
        stored = [Path(r[0]) for r in self.conn.execute("SELECT DISTINCT root FROM volumes WHERE root IS NOT NULL")]
        return list(dict.fromkeys([self.volumes_dir, *self.classes.values(), *stored]))

    def volume_path(self, name: str) -> Path:
        """The folder a job mounts (at /mnt in the reference setup), once no move is under way and
        no in-place restore is swapping it. The job's record is active before this is asked, so an
        in-place restore that takes the volume's lock later sees the job and is refused; one that
        holds it now is waited for here (a shared lock, taken and dropped), and the job mounts the
        restored folder, not the one the swap moves aside and removes."""
        while True:
            while self.mover.live(name) is not None:  # see move.py: jobs wait for a running move
                time.sleep(0.2)
            vol = self.get_volume(name)
            try:
                fd = _lock_fd(vol)
            except OSError:  # Lost (the job's start says so), or moved just now (asked again)
                if self.mover.live(name) is None:
                    return vol.path
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_SH)
            finally:
                os.close(fd)
            if self.mover.live(name) is None and self.get_volume(name).path == vol.path:
                return vol.path


    def usage(self, name: str) -> int:
        """Bytes of disk the volume's files take (like `du`)."""
        return sum(st.st_blocks * 512 for _, st in mf.walk(self.volume_path(name)))

    def still_there(self, volume_uids: Sequence[str], snapshot_uids: Sequence[str]) -> tuple[set[str], set[str]]:
        """Which of these volume and snapshot uids exist now (not deleted since they were recorded)."""
        def there(table: str, uids: Sequence[str]) -> set[str]:
            uids = list(set(uids))
            if not uids:
                return set()
            return {r[0] for r in self.conn.execute(f"SELECT uid FROM {table} WHERE uid IN ({','.join('?' * len(uids))})",
                                                    uids)}
        return there("volumes", volume_uids), there("snapshots", snapshot_uids)

    def has_job_snapshot(self, name: str, job: str, since: float, uid: str | None = None) -> bool:
        """Whether the snapshot `name` that job `job` (created at unix time `since`, its uid `uid`) left
        is still there: one of that name that recorded that job uid; one that recorded none (taken
        before uids) is that job's when linked to its name and taken after it was made (a name may be
        reused). Time alone told wrong within its 1 s slack, or where the clock stepped back."""
        if not self._has_job_uid_column():  # a read-only home of before job uids: time only
            return self.conn.execute("SELECT 1 FROM snapshots WHERE name = ? AND job = ? AND created_ns >= ?",
                                     (name, job, int(since * 1e9) - 10**9)).fetchone() is not None
        return self.conn.execute("SELECT 1 FROM snapshots WHERE name = ? AND job = ? AND (job_uid = ? OR "
                                 "(job_uid IS NULL AND created_ns >= ?))",
                                 (name, job, uid, int(since * 1e9) - 10**9)).fetchone() is not None

    # --- snapshots -------------------------------------------------------------------------
    def _require_folder(self, vol: Volume, doing: str, *, replaced: bool = False) -> None:
        """One line, before anything is written, where `vol`'s data folder is gone (Lost: removed by
        hand, or its storage class's disk not mounted) or, unless `replaced` (an in-place restore puts
        a folder there), is not a folder: a link or a file put in its place, never followed. The
        engine said "cannot snapshot PATH: it is not a folder" for all three, for a diff too."""
        try:
            st = os.lstat(vol.path)
        except FileNotFoundError:
            raise StorageError(f"cannot {doing}: volume {vol.name!r} has lost its folder {vol.path} (removed by "
                               f"hand, or the disk of storage class {vol.storage_class!r} is not mounted): put it "
                               f"back, or restore one of its snapshots into a new volume "
                               f"(`{self.cmd('snapshot restore SNAP --to NEW')}`; its snapshots: "
                               f"`{self.cmd(f'snapshot list --volume {vol.name}')}`)") from None
        if not replaced and not stat.S_ISDIR(st.st_mode):
            what = (f"a symbolic link (to {os.readlink(vol.path)}), which is never followed"
                    if stat.S_ISLNK(st.st_mode) else "not a folder")
            raise StorageError(f"cannot {doing}: the folder of volume {vol.name!r}, {vol.path}, is {what}: put "
                               f"the volume's own folder back there")

    def create_snapshot(self, volume: str, *, name: str | None = None, job: str | None = None,
                        job_spec: Mapping | None = None, source_snapshot: str | None = None,
                        job_uid: str | None = None, progress: Progress | bool | None = None) -> Snapshot:
        """Capture `volume` now. Lineage: `source_snapshot` (the data the job started from)
        -> `job` (with its spec and `job_uid`, which tells it from a later job of the same name)
        -> this snapshot. Default name: <volume>-<UTC time>."""
        vol = self.get_volume(volume)
        self.settled(volume)
        if name is not None:
            check_name(name, "snapshot")
            self._ensure_no_snapshot(name)
        if job is not None:
            check_name(job, "job")
        if source_snapshot is not None:
            check_name(source_snapshot, "snapshot")
        spec_text = _spec_json(job_spec)
        self._collect()
        try:
            with self.hold(vol, exclusive=False), self.engine.pin():
                self._require_folder(vol, f"snapshot volume {volume!r}")  # under the hold: no move or swap runs
                base_id = self._latest_id(vol.uid)  # under the pin: its objects cannot be swept
                with reporter(progress, f"snapshot {volume}") as cb:
                    manifest, stats = self.engine.capture(vol.path, base_id=base_id, progress=cb)
                snap_id = os.urandom(16).hex()
                with db.transaction(self.conn):
                    if name is None:
                        name = self._default_name(volume)
                    self._ensure_no_snapshot(name)
                    self.engine.commit(snap_id, manifest)
                    self.conn.execute(
                        "INSERT INTO snapshots (name, uid, volume, volume_uid, created, created_ns, volume_size, "
                        "storage_class, job, job_spec, source_snapshot, files, bytes, added_bytes, method, job_uid) "
                        "VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)",
                        (name, snap_id, volume, vol.uid, _now(), manifest.started_ns, vol.size,
                         vol.storage_class, job, spec_text, source_snapshot, stats.files, stats.bytes,
                         stats.added_bytes, stats.method, job_uid if job is not None else None))
                    self.conn.execute("UPDATE volumes SET head_snapshot = ? WHERE uid = ?", (name, vol.uid))
                self.engine.registered(snap_id)
        except BaseException:
            self.engine.request_sweep()  # objects written for a snapshot that never registered
            raise
        finally:
            self._sweep()
        return self.get_snapshot(name)

    def get_snapshot(self, name: str) -> Snapshot:
        row = self.conn.execute("SELECT * FROM snapshots WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFoundError(f"no snapshot named {name!r}: list snapshots with `{self.cmd('snapshot list')}`")
        return self._snapshot(row)

    def list_snapshots(self, *, volume: str | None = None, job: str | None = None) -> list[Snapshot]:
        """Oldest first."""
        self._finish_sweep()
        return self._snapshots(volume=volume, job=job)

    def _snapshots(self, *, volume: str | None = None, job: str | None = None) -> list[Snapshot]:
        sql, args = "SELECT * FROM snapshots WHERE 1", []
        for column, value in (("volume", volume), ("job", job)):
            if value is not None:
                sql, args = sql + f" AND {column} = ?", args + [value]
        return [self._snapshot(r) for r in self.conn.execute(sql + " ORDER BY created_ns, name", args)]

    def restore_snapshot(self, name: str, *, to: str | None = None, in_place: bool = False,
                         storage_class: str | None = None,
                         in_use_by: Sequence[str] | Callable[[], Sequence[str]] = (),
                         progress: Progress | bool | None = None) -> Volume:
        """Into a new volume `to` (which records origin_snapshot=name) in `storage_class` (None:
        the snapshot's class), or over the snapshot's own volume when `in_place`, which keeps its
        class (refused while jobs in `in_use_by` use it: a callable is asked again under the
        volume's lock, just before the swap)."""
        if (to is None) == (not in_place):
            raise SpecError(f"restore of snapshot {name!r}: give exactly one of a new volume name "
                            f"(--to NAME) or in-place restore (--in-place)")
        if in_place and storage_class is not None:
            raise SpecError(f"restore of snapshot {name!r}: an in-place restore keeps the volume's storage class; "
                            f"move it with `{self.cmd(f'volume update VOLUME --class {storage_class}')}`")
        snap = self.get_snapshot(name)
        if to is not None and self.conn.execute("SELECT 1 FROM volumes WHERE name = ? AND uid = ?",
                                                (to, snap.volume_uid)).fetchone():
            raise ConflictError(f"volume {to!r} already exists: it is the volume snapshot {name!r} was taken of; roll "
                                f"it back with `{self.cmd(f'snapshot restore {name} --in-place')}`, or give a new volume's "
                                f"name to --to")
        if to is not None:
            return self._clone(snap, to, size=None, storage_class=storage_class, labels={}, progress=progress)
        return self._restore_in_place(snap, in_use_by, progress)

    def delete_snapshot(self, name: str) -> Freed:
        """Forget a snapshot and free the content no other snapshot shares."""
        snap = self.get_snapshot(name)
        self.engine.request_sweep()  # first: killed after the row goes, the next command still frees its data
        self.engine.mark_sweepable(snap.id)
        with db.transaction(self.conn):  # the one read, by its uid: a new snapshot of that name is another
            gone = self.conn.execute("DELETE FROM snapshots WHERE uid = ?", (snap.id,)).rowcount
            # the volume's head no longer names it: a job started on the volume later would say its data
            # came from a snapshot that is gone (or from a new one that took the name, of another volume)
            self.conn.execute("UPDATE volumes SET head_snapshot = NULL WHERE uid = ? AND head_snapshot = ?",
                              (snap.volume_uid, snap.name))
        if not gone:  # another command deleted it between the read and here: that one freed it
            raise NotFoundError(f"no snapshot named {name!r}: another command deleted it just now; list snapshots "
                                f"with `{self.cmd('snapshot list')}`")
        self.engine.drop(snap.id)
        try:
            swept, no_room = self._sweep(), False
        except (sqlite3.Error, OSError) as err:  # a full disk: the snapshot is gone and its sweep requested
            if not db.no_room(err):             # (sweep-pending), so the next command with room frees its data
                raise
            swept, no_room = None, True
        return Freed(snapshot=name, bytes=swept.bytes if swept else 0,
                     objects=swept.objects if swept else 0, pending=swept is None, no_room=no_room)

    def verify(self, name: str | None = None, *, progress: Progress | bool | None = None) -> VerifyReport:
        """Clean up crash leftovers, then re-hash the content of one snapshot or all of them.

        On a disk that is full or read-only (the databases opened read-only: `db.reads_only`, or a
        write refused since this Client opened them: a server's) it only checks: nothing is tidied,
        swept or set aside, the findings are reported as ever, and `skipped` says what was not done."""
        rows = [self.get_snapshot(name)] if name is not None else self._snapshots()  # its own sweep reports garbage
        write = db.writable(self.conn) and db.writable(self.engine.packs.conn)
        swept = None
        if write:
            try:
                self._collect(sweep=False)
                swept = self.engine.sweep(self._live_ids, force=True)
            except (sqlite3.Error, OSError) as err:  # the disk filled since this Client opened (a server)
                if not db.no_room(err):             # what was not finished is finished by the next command
                    raise
                write = False
        with self.engine.pin(marked=write), reporter(progress, "verify") as cb:
            stats = self.engine.verify([s.id for s in rows], progress=cb, write=write)
        skipped = None
        if not write:
            skipped = (f"{TIDYING_SKIPPED}: the disk holding the home folder ($DTRAIN_HOME) is full or read-only, so "
                       "leftovers of interrupted snapshots were neither counted nor removed and damaged objects were "
                       "not set aside; free space there (df -h) and verify again to tidy")
        elif stats.unrecorded:
            skipped = ("setting aside skipped: the disk holding the home folder ($DTRAIN_HOME) filled, so damaged "
                       "objects were not taken out of the store and hashes computed now were not recorded; free space "
                       "there (df -h) and verify again")
        bad = ({d: "missing" for d in stats.missing} | {d: "corrupt" for d in stats.corrupt}
               | {d: "unreadable" for d in stats.unreadable})
        hits = self._hits(set(bad)) if bad else {}
        # absent now because an earlier verify took it out: that verify's finding, not 'missing'
        earlier = self.engine.packs.damaged_problems() if stats.missing else {}
        damaged = [Damage(object=d, problem=earlier.get(d, p) if p == "missing" else p, hits=tuple(hits.get(d, ())),
                          earlier=p == "missing" and d in earlier) for d, p in sorted(bad.items())]
        by_id = {s.id: s.name for s in rows}
        # a manifest that could not be read because another command deleted its snapshot meanwhile
        # is no damage: that snapshot is simply gone (the report said 'manifest' damage, exit 1)
        deleted = {m for m in stats.bad_manifests
                   if self.conn.execute("SELECT 1 FROM snapshots WHERE uid = ?", (m,)).fetchone() is None}
        if name is not None and deleted:
            raise NotFoundError(f"no snapshot named {name!r}: another command deleted it just now; list snapshots "
                                f"with `{self.cmd('snapshot list')}`")
        damaged += [Damage(object=m, problem="manifest", hits=((by_id[m], "*"),))
                    for m in stats.bad_manifests if m not in deleted]
        return VerifyReport(snapshots=tuple(s.name for s in rows if s.id not in deleted), objects=stats.objects, bytes=stats.bytes,
                            damaged=tuple(damaged), garbage_objects=swept.objects if swept else 0,
                            garbage_bytes=swept.bytes if swept else 0,
                            unlisted_manifests=swept.unlisted if swept else 0, skipped=skipped)

    def diff(self, a: str, b: str | None = None) -> list[mf.Change]:
        """Changes from snapshot `a` to snapshot `b`, or to the live volume `a` was taken of."""
        snap = self.get_snapshot(a)
        old = self._load(snap)
        if b is not None:
            return mf.diff(old, self._load(self.get_snapshot(b)))
        row = self.conn.execute("SELECT name FROM volumes WHERE uid = ?", (snap.volume_uid,)).fetchone()
        if row is None:  # (a volume of that name made since is another one: its files are not this snapshot's)
            raise NotFoundError(f"snapshot {a!r} was taken of volume {snap.volume!r}, which has been deleted since, so "
                                f"there is no live volume to compare it with: name a second snapshot "
                                f"(`{self.cmd(f'snapshot diff {a} OTHER')}`)")
        vol = self.get_volume(row[0])
        self._require_folder(vol, f"compare snapshot {a!r} with volume {vol.name!r}")
        with self.engine.pin():
            live, _ = self.engine.capture(vol.path, base=old, store=False)
        return mf.diff(old, live)

    # --- restore paths ---------------------------------------------------------------------
    def _clone(self, snap: Snapshot, to: str, *, size: str | None, storage_class: str | None,
               labels: dict, progress) -> Volume:
        check_name(to, "volume")
        if storage_class is None:
            storage_class = self.snapshot_class(snap)
        root = self.class_root(storage_class)
        self.ensure_free(to)
        self._collect()
        self._ensure_no_folder(to, root)
        staging = root / folders.staging_name("tmp")
        manifest = None
        try:
            staging.mkdir()
            (staging / PENDING).touch()
            with self.engine.pin(), reporter(progress, f"restore {snap.name}") as cb:
                manifest = self._load(snap)
                self.engine.materialize(manifest, staging / "data", progress=cb)
            with db.transaction(self.conn):
                self.ensure_free(to)
                self._ensure_no_folder(to, root)  # rename(2) would replace an empty one silently
                os.rename(staging, root / to)
                self._insert_volume(to, size or snap.volume_size, storage_class, snap.name, labels, root)
        except OSError as err:
            if not (fileio.is_disk_full(err) or fileio.is_disk_full(err.__cause__)):
                raise
            folders.rmtree(staging)  # first: the space free is measured without it
            raise self._no_room(snap, to, storage_class, root, manifest) from None
        finally:
            folders.rmtree(staging)
        (root / to / PENDING).unlink(missing_ok=True)
        return self.get_volume(to)

    def _no_room(self, snap: Snapshot, to: str, storage_class: str, root: Path,
                  manifest: mf.Manifest | None) -> StorageError:
        """A restore into a new volume that filled its class's disk, said of the volume and the class
        (the engine's message named the staging folder, a name the user never gave, and what was left
        to write rather than what the restore needs), measured after the partial copy was removed."""
        entries = manifest.entries if manifest is not None else ()
        need = sum(e.size for e in entries if e.kind == "file") or snap.bytes or 0
        try:
            fs = os.statvfs(root)
        except OSError:
            fs = None
        doing = f"in storage class {storage_class!r} for volume {to!r} while restoring snapshot {snap.name!r}"
        free = 0 if fs is None else fs.f_bavail * fs.f_frsize

        def fix(what: str) -> str:
            return (f"nothing was restored and nothing is left behind. Free {what} there (delete files, or old "
                    f"snapshots: `{self.cmd('snapshot delete NAME')}`) or restore into another class "
                    f"(`{self.cmd(f'snapshot restore {snap.name} --to {to} --class CLASS')}`), and retry")
        if fs is not None and fs.f_files and fs.f_favail < len(entries):
            return StorageError(f"no room for new files {doing}: it needs {len(entries)} files and folders, and only "
                                f"{fs.f_favail} inodes are free under {root}; " + fix("files"))
        more = f"at least {human_bytes(need - free)}" if need > free else "space"
        return StorageError(f"no space left {doing}: it needs about {human_bytes(need)}, {human_bytes(free)} free "
                            f"under {root}; " + fix(more))

    def snapshot_class(self, snap: Snapshot) -> str:
        """The class a restore of `snap` into a new volume goes to without --class: the class its
        volume was in, where this machine still has it, else the default."""
        known = snap.storage_class == DEFAULT_CLASS or snap.storage_class in self.classes
        return snap.storage_class if known else DEFAULT_CLASS

    def in_place_target(self, snap: Snapshot) -> Volume:
        """The volume an in-place restore of `snap` writes over: the one it was taken of, still
        there (not deleted, nor deleted and made again under its name); else the one line naming
        the restore that works, into a new volume."""
        try:
            vol = self.get_volume(snap.volume)
        except NotFoundError:
            raise NotFoundError(f"volume {snap.volume!r} of snapshot {snap.name!r} was deleted, so there is nothing "
                                f"to restore in place: restore it to a new volume with --to NAME") from None
        if vol.uid != snap.volume_uid:
            raise ConflictError(f"volume {vol.name!r} was deleted and created again since snapshot "
                                f"{snap.name!r}: restore it to a new volume with --to NAME")
        return vol

    def _restore_in_place(self, snap: Snapshot, in_use_by: Sequence[str], progress) -> Volume:
        vol = self.in_place_target(snap)
        self.settled(vol.name)
        users = in_use_by if callable(in_use_by) else (lambda: [in_use_by] if isinstance(in_use_by, str) else in_use_by)
        if jobs := users():
            raise ConflictError(f"volume {vol.name!r} is in use by {listed(jobs, 'job')}: "
                                f"wait for them to finish or stop them ({self.stop_hint(jobs)}) before an in-place restore")
        doing = f"restore snapshot {snap.name!r} in place"
        self._require_folder(vol, doing, replaced=True)  # else every file is written, then the swap fails
        self._collect()
        staging = vol.path.parent / folders.staging_name("restore")  # beside data/, in the volume's class root
        try:
            with self.engine.pin(), reporter(progress, f"restore {snap.name}") as cb:
                self.engine.materialize(self._load(snap), staging, progress=cb)
            with self.hold(vol, exclusive=True, wait=True):
                # Asked again: a job started while the files were written mounts the folder the swap
                # would move aside and remove (a job starting from now waits in volume_path).
                if jobs := users():
                    raise ConflictError(f"{listed(jobs, 'job')} started on volume {vol.name!r} while snapshot "
                                        f"{snap.name!r} was being restored; the volume is unchanged: restore again "
                                        f"once they finish or are stopped ({self.stop_hint(jobs)})")
                self._require_folder(vol, doing, replaced=True)  # lost while the files were written
                with db.transaction(self.conn):
                    folders.swap(staging, vol.path)
                    self.conn.execute("UPDATE volumes SET head_snapshot = ? WHERE name = ?", (snap.name, vol.name))
        finally:
            folders.rmtree(staging)  # the old data after a swap, a partial restore otherwise
        return self.get_volume(vol.name)

    # --- housekeeping ----------------------------------------------------------------------
    def _collect(self, *, sweep: bool = True) -> None:
        """Remove what killed processes left in volumes/ (staging folders, unregistered volumes)
        and, with `sweep`, in the store."""
        trash = []
        self.mover.recover()
        with db.transaction(self.conn):
            rows = self.conn.execute("SELECT name, root, uid FROM volumes").fetchall()
            by_uid = {uid: name for name, _, uid in rows}
            moving = self.mover.moving()  # their folders are the mover's (or its recovery's) to tidy
            # One folder may be spelled several ways (config.yaml names a class's folder through a
            # link or with '..', or changed its spelling since a volume was made): what is known in a
            # folder is decided by the folder itself, never by how its path is written.
            where = {name: Path(at or self.volumes_dir) for name, at, _ in rows}
            ident = {root: _folder_identity(root) for root in {self.volumes_dir, *self.classes.values(),
                                                                *where.values()}}
            known_in: dict[tuple[int, int], set[str]] = {}
            for name, root in where.items():
                if ident[root] is not None:
                    known_in.setdefault(ident[root], set()).add(name)
            roots: dict[tuple[int, int], Path] = {}
            for root in (self.volumes_dir, *self.classes.values(), *where.values()):  # first spelling wins
                if ident[root] is not None:
                    roots.setdefault(ident[root], root)
            for folder, root in roots.items():
                known = known_in.get(folder, set())
                for item in os.scandir(root):
                    if item.name.startswith("."):
                        if not folders.owner_dead(item.name):
                            continue
                        back = by_uid.get(item.name.split("-", 2)[-1]) if item.name.startswith(DELETING) else None
                        if back is not None and ident[where[back]] == folder and not os.path.lexists(root / back):
                            os.rename(item.path, root / back)  # a delete killed before its commit
                        else:
                            trash.append(Path(item.path))
                    elif item.name in moving:
                        continue
                    elif item.name not in known:
                        if folders.uncommitted(Path(item.path)):  # made or renamed into place, killed before the commit
                            trash.append(root / folders.staging_name("trash"))
                            os.rename(item.path, trash[-1])
                    else:
                        trash += folders.collect_volume(Path(item.path))
        for path in trash:
            folders.rmtree(path)
        if sweep:
            self._sweep()

    def _sweep(self):
        return self.engine.sweep(self._live_ids)

    def _finish_sweep(self) -> None:
        """Free what a snapshot delete left to a later command (sweep-pending: the disk had no room
        for the index's changes, or a sweep was killed): `volume list` and `snapshot list`, the
        commands a user runs next, finish it once there is room; on a disk still full (or opened
        read-only) it stays requested. Nothing is swept when nothing was requested."""
        if not (self.engine.root / "sweep-pending").exists():
            return
        if not (db.writable(self.conn) and db.writable(self.engine.packs.conn)):
            return
        try:
            self._sweep()
        except (sqlite3.Error, OSError) as err:
            if not db.no_room(err):
                raise

    def _live_ids(self) -> list[str]:
        return [r[0] for r in self.conn.execute("SELECT uid FROM snapshots")]

    def _hits(self, bad: set[str]) -> dict[str, list[tuple[str, str]]]:
        """Which (snapshot, path) pairs hold each damaged object."""
        hits: dict[str, list[tuple[str, str]]] = {}
        for snap in self.list_snapshots():
            with contextlib.suppress(OSError, ValueError):
                for e in self.engine.load(snap.id).entries:
                    for d in bad.intersection(e.chunks):
                        hits.setdefault(d, []).append((snap.name, e.path))
        return hits

    def _load(self, snap: Snapshot) -> mf.Manifest:
        try:
            return self.engine.load(snap.id)
        except (OSError, ValueError) as err:
            self.get_snapshot(snap.name)  # NotFoundError if deleted meanwhile
            raise StorageError(f"snapshot {snap.name!r} is damaged: its manifest cannot be read ({err}); "
                               f"run `{self.cmd(f'snapshot verify {snap.name}')}`") from None

    def _latest_id(self, volume_uid: str) -> str | None:
        """The manifest of the volume's newest snapshot: the next capture's base."""
        row = self.conn.execute("SELECT uid FROM snapshots WHERE volume_uid = ? ORDER BY created_ns DESC "
                                "LIMIT 1", (volume_uid,)).fetchone()
        return None if row is None else row[0]

    def _default_name(self, volume: str) -> str:
        stem = f"{volume[:34].rstrip('-')}-{datetime.now(UTC):%Y%m%d-%H%M%S}"
        name, n = stem, 1
        while self.conn.execute("SELECT 1 FROM snapshots WHERE name = ?", (name,)).fetchone():
            n += 1
            name = f"{stem}-{n}"
        return name

    def ensure_free(self, name: str) -> None:
        if self.conn.execute("SELECT 1 FROM volumes WHERE name = ?", (name,)).fetchone():
            raise ConflictError(f"volume {name!r} already exists: choose another name or delete it "
                                f"first ({self.cmd(f'volume delete {name}')})")

    @staticmethod
    def _ensure_no_folder(name: str, root: Path) -> None:
        """No file or folder at the new volume's place (housekeeping removed those a kill left)."""
        if os.path.lexists(root / name):
            raise ConflictError(f"volume {name!r} cannot be made: {root / name} is in the way (a folder not made by "
                                f"dtrain, or a volume of an older state database); move it elsewhere and retry")

    def _ensure_no_snapshot(self, name: str) -> None:
        if self.conn.execute("SELECT 1 FROM snapshots WHERE name = ?", (name,)).fetchone():
            raise ConflictError(f"snapshot {name!r} already exists: choose another name or delete it "
                                f"first ({self.cmd(f'snapshot delete {name}')})")

    def _insert_volume(self, name, size, storage_class, origin, labels, root: Path) -> None:
        self.conn.execute("INSERT INTO volumes (name, uid, created, size, storage_class, origin_snapshot, "
                          "head_snapshot, labels, root) VALUES (?,?,?,?,?,?,?,?,?)",
                          (name, os.urandom(16).hex(), _now(), size, storage_class, origin, origin,
                           json.dumps(labels, sort_keys=True), None if root == self.volumes_dir else str(root)))

    def storage_classes(self) -> list[StorageClass]:
        """Every class: 'local', each of config.yaml, and each that volumes still record but config.yaml
        no longer names. Read only: a class is checked as its first use would check it (class_root
        with claim=False), so a disk not mounted or a folder holding other files shows here first."""
        counts: dict[str, int] = {}
        roots: dict[str, Path] = {}
        for row in self.conn.execute("SELECT storage_class, root, COUNT(*) FROM volumes GROUP BY storage_class, root"):
            counts[row[0]] = counts.get(row[0], 0) + row[2]
            roots.setdefault(row[0], Path(row[1]) if row[1] else self.volumes_dir)
        out = []
        for name in dict.fromkeys([DEFAULT_CLASS, *self.classes, *sorted(counts)]):
            if name != DEFAULT_CLASS and name not in self.classes:
                root, status = roots[name], "NotConfigured"
                message = (f"volumes live in {root}, but {self.home / 'config.yaml'} names no class {name!r}: "
                           f"name its folder under 'storage_classes:' again (dtrain config storage-class {name} "
                           f"{root}) to use or move them")
            else:
                root, status, message = self.classes.get(name, self.volumes_dir), "Ready", ""
                try:
                    self.class_root(name, claim=False)
                except StorageError as err:  # used before, its mark gone: a disk not mounted
                    status, message = "NotMounted", str(err).removeprefix(f"storage class {name!r}: ")
                except (SpecError, NotFoundError) as err:
                    status, message = "Unusable", str(err).removeprefix(f"storage class {name!r}: ")
                else:
                    if name != DEFAULT_CLASS and not (root / ROOT_MARK).exists():
                        message = f"not used yet: the first volume in it makes and marks {root}"
            out.append(StorageClass(name=name, root=root, status=status, message=message,
                                    volumes=counts.get(name, 0), **_space(root)))
        return out

    def class_root(self, storage_class: str, *, claim: bool = True) -> Path:
        """The root folder of a class, claimed for dtrain on first use (empty, or already marked);
        `claim` False checks the same and changes nothing (a dry run). A folder that is gone is not
        made again where that would put a volume on the wrong disk (see _lost_root), whichever verb
        puts it there (create, restore --to, a job's new volume, a move); a class's first folder
        still is."""
        check_storage_class(storage_class)
        if storage_class == DEFAULT_CLASS:
            return self.volumes_dir
        if storage_class not in self.classes:
            known = ", ".join(sorted({DEFAULT_CLASS, *self.classes}))
            # NotFound, not a malformed request: which classes exist is configuration (kubectl says
            # 'storageclass "x" not found'), so a well-formed name can only be missing.
            raise NotFoundError(f"unknown storage class {storage_class!r}: use one of {known}, or name its root "
                            f"folder under 'storage_classes:' in {self.home / 'config.yaml'}")
        root = self.classes[storage_class]
        self._check_apart(storage_class, root)
        fix = f"name a folder you can write under 'storage_classes:' in {self.home / 'config.yaml'}"
        there = root  # the folder, or the nearest of its parents that exists: a file there is no place for it
        while not os.path.exists(there) and there != there.parent:
            there = there.parent
        if not there.is_dir():
            what = "is a file" if there == root else f"lies under {there}, a file"
            raise SpecError(f"storage class {storage_class!r}: its folder {root} {what}, not a folder: {fix}")
        if not root.is_dir() and self._lost_root(root, there):
            raise StorageError(f"storage class {storage_class!r}: its folder {root} does not exist (removed, or its "
                               f"disk is not mounted): mount the disk or make the folder (mkdir -p {root}), or point "
                               f"the class at another folder (dtrain config storage-class {storage_class} FOLDER), "
                               f"and retry")
        if claim:
            try:
                root.mkdir(parents=True, exist_ok=True)
            except OSError as err:
                raise SpecError(f"storage class {storage_class!r}: cannot make its folder {root} "
                                f"({err.strerror}): {fix}") from None
        real = os.path.realpath(root)
        if not (root / ROOT_MARK).exists():
            self._check_not_unmounted(storage_class, root, real)
            if root.is_dir() and any(os.scandir(root)):
                raise SpecError(f"storage class {storage_class!r}: {root} holds files dtrain did not put there; "
                                f"give the class an empty folder of its own")
            if claim:
                try:
                    (root / ROOT_MARK).touch()
                except OSError as err:  # a read-only disk or folder: one line, not a traceback
                    raise SpecError(f"storage class {storage_class!r}: cannot write in its folder {root} "
                                    f"({err.strerror}): {fix}") from None
        if claim and self.conn.execute("SELECT 1 FROM class_roots WHERE root = ?", (real,)).fetchone() is None:
            with db.transaction(self.conn):
                self.conn.execute("INSERT OR IGNORE INTO class_roots VALUES (?)", (real,))
        return root

    def _lost_root(self, root: Path, there: Path) -> bool:
        """Whether a missing class folder is one that was removed (dtrain used it: volumes live there
        or it was claimed) or lies below the empty mount point of a disk not mounted (`there`, the
        nearest folder that exists, empty and no mount point): a move made it, and put the volume
        on the disk beneath, hidden once the disk was mounted (or in a folder made by mistake)."""
        real = os.path.realpath(root)
        if self.conn.execute("SELECT 1 FROM class_roots WHERE root = ?", (real,)).fetchone() is not None:
            return True
        if any(os.path.realpath(r[0]) == real
               for r in self.conn.execute("SELECT DISTINCT root FROM volumes WHERE root IS NOT NULL")):
            return True
        # ismount() of a symbolic link is False: a disk mounted at /mnt/nvme and named as /data/fast -> /mnt/nvme
        return there.is_dir() and not os.path.ismount(os.path.realpath(there)) and not any(os.scandir(there))

    def _check_not_unmounted(self, storage_class: str, root: Path, real: str) -> None:
        """A class folder dtrain used before that has lost its mark is most likely the empty mount
        point of a disk not mounted now: claiming it put volumes on the disk beneath, hidden (and
        Lost) once the class's disk was mounted over them again."""
        there = sorted(r["name"] for r in self.conn.execute("SELECT name, root FROM volumes WHERE root IS NOT NULL")
                       if os.path.realpath(r["root"]) == real)
        used = self.conn.execute("SELECT 1 FROM class_roots WHERE root = ?", (real,)).fetchone() is not None
        if there or used:
            live = "lives" if len(there) == 1 else "live"
            held = f" and {listed(there[:5], 'volume')} {live} there (listed Lost)" if there else ""
            raise StorageError(f"storage class {storage_class!r}: its folder {root} lacks the file {ROOT_MARK} that "
                               f"marked it as used{held}: is its disk mounted? Mount it and retry; if you emptied "
                               f"the folder on purpose, create {root / ROOT_MARK} (an empty file) to use it again")

    def _check_apart(self, storage_class: str, root: Path) -> None:
        """A class root neither lies inside nor holds the dtrain home or another class's root (where
        other volumes live): deleting a volume there would delete the volumes inside its folder."""
        here = Path(os.path.realpath(root))
        stored = [Path(r[0]) for r in self.conn.execute("SELECT DISTINCT root FROM volumes WHERE root IS NOT NULL")]
        others = [(self.home, False, ""),
                  *((r, False, f" (storage class {n!r}'s folder)") for n, r in self.classes.items() if n != storage_class),
                  *((r, True, "") for r in stored)]  # a stored root equal to this one: this class's own volumes
        for other, may_equal, whose in others:
            there = Path(os.path.realpath(other))
            if (here.is_relative_to(there) or there.is_relative_to(here)) and not (may_equal and here == there):
                raise SpecError(f"storage class {storage_class!r}: its folder {root} overlaps {other}{whose}, where "
                                f"other volumes or the state database live; give the class a folder of its own, "
                                f"outside the home folder {self.home} and apart from the other classes' folders")

    def _volume(self, row) -> Volume:
        root = Path(row["root"]) if row["root"] else self.volumes_dir
        return Volume(name=row["name"], uid=row["uid"], path=root / row["name"] / "data",
                          size=row["size"], size_bytes=parse_size(row["size"]), storage_class=row["storage_class"],
                          created=_unix(row["created"]), origin_snapshot=row["origin_snapshot"],
                          head_snapshot=row["head_snapshot"], labels=json.loads(row["labels"]),
                          snapshots=self._method(root / row["name"] / "data"))

    def _method(self, path: Path) -> str:
        """'subvolume' (a btrfs subvolume: constant-time snapshots), else the store's 'reflink'
        (copy-on-write clones) or 'cas' (copies)."""
        return "subvolume" if self.engine.subvols.usable(path) else self.engine.method

    def _snapshot(self, row) -> Snapshot:
        return Snapshot(name=row["name"], id=row["uid"], volume=row["volume"], volume_uid=row["volume_uid"],
                            created=_unix(row["created"]), volume_size=row["volume_size"],
                            storage_class=row["storage_class"], job=row["job"],
                            job_spec=json.loads(row["job_spec"]) if row["job_spec"] else None,
                            source_snapshot=row["source_snapshot"], files=row["files"], bytes=row["bytes"],
                            added_bytes=row["added_bytes"], method=row["method"],
                            job_uid=row["job_uid"] if "job_uid" in row.keys() else None)


def _space(root: Path) -> dict[str, int | None]:
    """Free and total bytes of the file system holding `root` (or its nearest parent that exists)."""
    there = root
    while not there.exists() and there != there.parent:
        there = there.parent
    try:
        st = os.statvfs(there)
    except OSError:
        return {"free_bytes": None, "total_bytes": None}
    return {"free_bytes": st.f_bavail * st.f_frsize, "total_bytes": st.f_blocks * st.f_frsize}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _unix(stored: str) -> float:
    """The tables keep ISO 8601 UTC text (readable in sqlite3); records carry unix seconds."""
    # fromisoformat reads the trailing Z (3.11+) in C; strptime's first call imports _strptime,
    # locale and calendar: ~10 ms of every command that shows a volume or a snapshot
    return datetime.fromisoformat(stored).timestamp()


def _check_labels(labels) -> dict[str, str]:
    labels = dict(labels or {})
    for key, value in labels.items():
        if not (isinstance(key, str) and key and isinstance(value, str)):
            raise SpecError(f"invalid label {key!r}={value!r}: labels map non-empty strings to strings")
    return labels


def _spec_json(job_spec) -> str | None:
    if job_spec is None:
        return None
    if not isinstance(job_spec, Mapping):
        raise SpecError(f"job_spec must be a dict (JobSpec.to_dict()), not {type(job_spec).__name__}")
    try:
        return json.dumps(dict(job_spec), sort_keys=True)
    except (TypeError, ValueError) as err:
        raise SpecError(f"job_spec cannot be stored as JSON ({err}): pass JobSpec.to_dict()") from None


def _folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the folder `path` names, through links (a class's folder may be given
    through one); None when it is not a folder."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


def _lock_fd(vol: Volume) -> int:
    """A descriptor of the volume's folder (<root>/<name>), the one Storage.hold and volume_path
    lock: opened without following a link at its name."""
    return os.open(vol.path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)

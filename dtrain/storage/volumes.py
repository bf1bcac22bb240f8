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

Storage's verbs are grouped in mixins, one module each: the per-volume lock (locks.py), storage
classes and their roots (classes.py), restores (restoring.py), `snapshot verify` (verifying.py) and
crash leftovers (housekeeping.py); this module holds the tables, the volume and snapshot verbs.
"""

from __future__ import annotations

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
from dtrain.names import check_name, listed, parse_size, parse_volume_size, them
from dtrain.storage import fileio, folders
from dtrain.storage import manifest as mf
from dtrain.storage.engine import Engine
from dtrain.storage.info import Freed, Snapshot, Volume
from dtrain.storage.classes import DEFAULT_CLASS, ROOT_MARK, ClassRoots  # noqa: F401 (their names, read from here too)
from dtrain.storage.housekeeping import DELETING, Housekeeping
from dtrain.storage.locks import VolumeLocks
from dtrain.storage.move import Mover
from dtrain.storage.restoring import Restores
from dtrain.storage.verifying import Verifying
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
PENDING = folders.PENDING  # in a volume's folder until its row commits (see folders.py)


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


class Storage(VolumeLocks, ClassRoots, Restores, Verifying, Housekeeping):
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
        when a job uses the volume, and runs after the move is journaled. A class whose root is the
        folder the volume is in already (a class named where a removed class's volumes live) takes
        it without a move: its folder would be its own destination."""
        vol = self.get_volume(name)
        root = self.class_root(storage_class)
        if vol.storage_class == storage_class and vol.path.parent.parent == root:
            return vol
        self._collect(sweep=False)
        with self.hold(vol, exclusive=True):
            if os.path.realpath(vol.path.parent.parent) == os.path.realpath(root):
                self.mover.relabel(volume=name, uid=vol.uid, dst_class=storage_class, dst_root=root)
                return self.get_volume(name)
            self.mover.move(volume=name, uid=vol.uid, src_class=vol.storage_class, dst_class=storage_class,
                            src=vol.path.parent, dst_root=root, check_users=check_users)
        return self.get_volume(name)

    def get_volume(self, name: str) -> Volume:
        self.mover.recover()
        row = self.conn.execute("SELECT * FROM volumes WHERE name = ?", (name,)).fetchone()
        if row is None:
            raise NotFoundError(f"no volume named {name!r}: list volumes with '{self.cmd('volume list')}'")
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
        said = ", ".join(f"'{self.job_cmd(f'{verb} {job}', job)}'" for job in jobs[:3])
        return said + (f" and {len(jobs) - 3} more" if len(jobs) > 3 else "")

    def delete_volume(self, name: str, *, in_use_by: Sequence[str] = (), force: bool = False) -> None:
        """Delete a volume's data; its snapshots stay. Refused while jobs use it, unless forced."""
        vol = self.get_volume(name)
        self.settled(name)
        in_use_by = [in_use_by] if isinstance(in_use_by, str) else list(in_use_by)
        if in_use_by and not force:
            raise ConflictError(f"volume {name!r} is in use by {listed(in_use_by, 'job')}: wait for "
                                f"{them(in_use_by)} to finish, stop {them(in_use_by)} ({self.stop_hint(in_use_by)}), or delete with --force")
        folder = vol.path.parent
        # named after the volume's uid: killed between this rename and the commit, the row still
        # stands, and _collect puts the folder back instead of deleting a registered volume's data
        trash = folder.parent / f"{DELETING}{folders.owner_tag()}-{vol.uid}"
        with self.hold(vol, exclusive=True, wait=True):
            with db.transaction(self.conn):
                # This volume, if still there: a concurrent delete (or a delete and a new volume of the
                # same name) leaves this caller nothing to delete, and it says so.
                if self.conn.execute("DELETE FROM volumes WHERE name = ? AND uid = ?", (name, vol.uid)).rowcount == 0:
                    raise NotFoundError(f"no volume named {name!r}: list volumes with '{self.cmd('volume list')}'")
                if folder.exists():
                    os.rename(folder, trash)
        folders.rmtree(trash)

    def volume_roots(self) -> list[Path]:
        """Every folder volumes live in: <home>/volumes, each configured class's root, and each root
        a volume is recorded in (a class since taken out of config.yaml)."""
        stored = [Path(r[0]) for r in self.conn.execute("SELECT DISTINCT root FROM volumes WHERE root IS NOT NULL")]
        return list(dict.fromkeys([self.volumes_dir, *self.classes.values(), *stored]))

    def usage(self, name: str) -> int:
        """Bytes of disk the volume's files take (like `du`)."""
        return sum(st.st_blocks * 512 for _, st in mf.walk(self.volume_path(name)))

    def still_there(self, volume_uids: Sequence[str], snapshot_uids: Sequence[str]) -> tuple[set[str], set[str]]:
        """Which of these volume and snapshot uids exist now (not deleted since they were recorded)."""
        def there(table: str, uids: Sequence[str]) -> set[str]:
            return {r[0] for r in db.rows_in(self.conn, f"SELECT uid FROM {table} WHERE uid IN ({{}})", uids)}
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

    def source_there(self, snapshot: str, since: float) -> bool:
        """Whether the snapshot `snapshot` that a volume or snapshot made at unix time `since` came from
        is still there: one of that name taken before then (1 s slack: a volume's time is kept to the
        second); one taken later took a deleted one's name, and is another snapshot."""
        return (snapshot, since) in self.sources_there([(snapshot, since)])

    def sources_there(self, sources: Sequence[tuple[str, float]]) -> set[tuple[str, float]]:
        """The (snapshot, since) pairs of `sources` whose snapshot is still there, as `source_there`
        tells one, in one query for all (a listing's rows, not a query each)."""
        names = list({name for name, _ in sources})
        if not names:
            return set()
        first = dict(db.rows_in(self.conn, "SELECT name, MIN(created_ns) FROM snapshots WHERE name IN ({}) "
                                           "GROUP BY name", names))
        return {(name, since) for name, since in sources
                if name in first and first[name] <= int(since * 1e9) + 10**9}

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
                               f"('{self.cmd('snapshot restore SNAP --to NEW')}'; its snapshots: "
                               f"'{self.cmd(f'snapshot list --volume {vol.name}')}')") from None
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
            raise NotFoundError(f"no snapshot named {name!r}: list snapshots with '{self.cmd('snapshot list')}'")
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
                                f"with '{self.cmd('snapshot list')}'")
        self.engine.drop(snap.id)
        try:
            swept, no_room = self._sweep(), False
        except (sqlite3.Error, OSError) as err:  # a full disk: the snapshot is gone and its sweep requested
            if not db.no_room(err):             # (sweep-pending), so the next command with room frees its data
                raise
            swept, no_room = None, True
        return Freed(snapshot=name, bytes=swept.bytes if swept else 0,
                     objects=swept.objects if swept else 0, pending=swept is None, no_room=no_room)

    def has_folder(self, name: str, path: str) -> bool:
        """Whether snapshot `name` holds a folder at `path` (relative to its volume, '/'-separated)."""
        return any(e.path == path and e.kind == "dir" for e in self._load(self.get_snapshot(name)).entries)

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
                                f"('{self.cmd(f'snapshot diff {a} OTHER')}')")
        vol = self.get_volume(row[0])
        self._require_folder(vol, f"compare snapshot {a!r} with volume {vol.name!r}")
        with self.engine.pin():
            live, _ = self.engine.capture(vol.path, base=old, store=False)
        return mf.diff(old, live)

    def _load(self, snap: Snapshot) -> mf.Manifest:
        try:
            return self.engine.load(snap.id)
        except (OSError, ValueError) as err:
            self.get_snapshot(snap.name)  # NotFoundError if deleted meanwhile
            raise StorageError(f"snapshot {snap.name!r} is damaged: its manifest cannot be read ({err}); "
                               f"run '{self.cmd(f'snapshot verify {snap.name}')}'") from None

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
                                f"first with '{self.cmd(f'volume delete {name}')}'")

    @staticmethod
    def _ensure_no_folder(name: str, root: Path) -> None:
        """No file or folder at the new volume's place (housekeeping removed those a kill left)."""
        if os.path.lexists(root / name):
            raise ConflictError(f"volume {name!r} cannot be made: {root / name} is in the way (a folder not made by "
                                f"dtrain, or a volume of an older state database); move it elsewhere and retry")

    def _ensure_no_snapshot(self, name: str) -> None:
        if self.conn.execute("SELECT 1 FROM snapshots WHERE name = ?", (name,)).fetchone():
            raise ConflictError(f"snapshot {name!r} already exists: choose another name or delete it "
                                f"first with '{self.cmd(f'snapshot delete {name}')}'")

    def _insert_volume(self, name, size, storage_class, origin, labels, root: Path) -> None:
        self.conn.execute("INSERT INTO volumes (name, uid, created, size, storage_class, origin_snapshot, "
                          "head_snapshot, labels, root) VALUES (?,?,?,?,?,?,?,?,?)",
                          (name, os.urandom(16).hex(), _now(), size, storage_class, origin, origin,
                           json.dumps(labels, sort_keys=True), None if root == self.volumes_dir else str(root)))

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

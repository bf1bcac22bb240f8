"""Restoring a snapshot: into a new volume (a clone: a PVC with a VolumeSnapshot data source), in
the snapshot's class unless another is given, or over its own volume in place (NetApp's `snapshot
restore`), swapped in under the volume's lock once no job uses it. A mixin of Storage (volumes.py).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from dtrain import db
from dtrain.errors import ConflictError, NotFoundError, SpecError, StorageError
from dtrain.names import check_name, listed, them
from dtrain.storage import fileio, folders
from dtrain.storage.classes import DEFAULT_CLASS
from dtrain.storage import manifest as mf
from dtrain.storage.folders import PENDING
from dtrain.storage.info import Snapshot, Volume, human_bytes
from dtrain.storage.progress import Progress, reporter

if TYPE_CHECKING:
    import sqlite3

    from dtrain.storage.engine import Engine


class Restores:
    """Mixed into Storage, which provides the rows, the class roots, the lock and housekeeping."""

    if TYPE_CHECKING:
        conn: sqlite3.Connection
        engine: Engine
        cmd: Callable[[str], str]

        def get_volume(self, name: str) -> Volume: ...

        def get_snapshot(self, name: str) -> Snapshot: ...

        def class_root(self, storage_class: str, *, claim: bool = True) -> Path: ...

        def snapshot_class(self, snap: Snapshot) -> str: ...

        def ensure_free(self, name: str) -> None: ...

        @staticmethod
        def _ensure_no_folder(name: str, root: Path) -> None: ...

        def _insert_volume(self, name, size, storage_class, origin, labels, root: Path) -> None: ...

        def _collect(self, *, sweep: bool = True) -> None: ...

        def _load(self, snap: Snapshot) -> mf.Manifest: ...

        def _require_folder(self, vol: Volume, doing: str, *, replaced: bool = False) -> None: ...

        def settled(self, name: str) -> None: ...

        def hold(self, vol: Volume, *, exclusive: bool, wait: bool = False): ...

        def stop_hint(self, jobs: Sequence[str], verb: str = "delete") -> str: ...

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
                            f"move it with '{self.cmd(f'volume update VOLUME --class {storage_class}')}'")
        snap = self.get_snapshot(name)
        if to is not None and self.conn.execute("SELECT 1 FROM volumes WHERE name = ? AND uid = ?",
                                                (to, snap.volume_uid)).fetchone():
            raise ConflictError(f"volume {to!r} already exists: it is the volume snapshot {name!r} was taken of; roll "
                                f"it back with '{self.cmd(f'snapshot restore {name} --in-place')}', or give a new volume's "
                                f"name to --to")
        if to is not None:
            return self._clone(snap, to, size=None, storage_class=storage_class, labels={}, progress=progress)
        return self._restore_in_place(snap, in_use_by, progress)

    def restore_root(self, snap: Snapshot, to: str, storage_class: str | None, *,
                     claim: bool = True) -> tuple[str, Path]:
        """The class and root folder a restore of `snap` into new volume `to` goes to: the given class, else
        the snapshot's. A snapshot's class whose folder is gone (a disk not mounted, the lost volume's) is
        refused naming --class too: the lost volume's own refusal sends its user here, and the way out is
        another class."""
        given = storage_class is not None
        storage_class = storage_class if given else self.snapshot_class(snap)
        try:
            return storage_class, self.class_root(storage_class, claim=claim)
        except StorageError as err:
            if given or storage_class == DEFAULT_CLASS:
                raise
            fix = self.cmd(f"snapshot restore {snap.name} --to {to} --class {DEFAULT_CLASS}")
            raise StorageError(f"{err}; or restore into another class: '{fix}'") from None

    def _clone(self, snap: Snapshot, to: str, *, size: str | None, storage_class: str | None,
               labels: dict, progress) -> Volume:
        check_name(to, "volume")
        storage_class, root = self.restore_root(snap, to, storage_class)
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
                    f"snapshots: '{self.cmd('snapshot delete NAME')}') or restore into another class "
                    f"('{self.cmd(f'snapshot restore {snap.name} --to {to} --class CLASS')}'), and retry")
        if fs is not None and fs.f_files and fs.f_favail < len(entries):
            return StorageError(f"no room for new files {doing}: it needs {len(entries)} files and folders, and only "
                                f"{fs.f_favail} inodes are free under {root}; " + fix("files"))
        more = f"at least {human_bytes(need - free)}" if need > free else "space"
        return StorageError(f"no space left {doing}: it needs about {human_bytes(need)}, {human_bytes(free)} free "
                            f"under {root}; " + fix(more))

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
                                f"wait for {them(jobs)} to finish or stop {them(jobs)} ({self.stop_hint(jobs)}) before an "
                                f"in-place restore")
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
                                        f"once {them(jobs, 'they')} {'finishes or is' if len(jobs) == 1 else 'finish or are'} stopped "
                                        f"({self.stop_hint(jobs)})")
                self._require_folder(vol, doing, replaced=True)  # lost while the files were written
                with db.transaction(self.conn):
                    folders.swap(staging, vol.path)
                    self.conn.execute("UPDATE volumes SET head_snapshot = ? WHERE name = ?", (snap.name, vol.name))
        finally:
            folders.rmtree(staging)  # the old data after a swap, a partial restore otherwise
        return self.get_volume(vol.name)

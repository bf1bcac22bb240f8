"""Housekeeping: what killed processes left in the volume roots (staging folders, volumes renamed
aside by a delete, unregistered folders) removed or put back, and the store swept of objects no
snapshot holds. A mixin of Storage (volumes.py).
"""

from __future__ import annotations

import os
import sqlite3
import stat
from pathlib import Path
from typing import TYPE_CHECKING

from dtrain import db
from dtrain.storage import folders
from dtrain.storage.classes import ROOT_MARK

if TYPE_CHECKING:
    from dtrain.storage.engine import Engine
    from dtrain.storage.move import Mover

DELETING = ".deleting-"  # '.deleting-<owner>-<volume uid>' (folders.owner_tag): a volume folder renamed aside by a delete


class Housekeeping:
    """Mixed into Storage, which provides the roots, the engine, the mover and the state database."""

    if TYPE_CHECKING:
        volumes_dir: Path
        classes: dict[str, Path]
        conn: sqlite3.Connection
        engine: Engine
        mover: Mover

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
            # a class's folder only once claimed (marked): one named at a folder of the user's, or inside a
            # volume's data, is no folder of dtrain's to tidy (its empty folders were removed as leftovers)
            claimed = [root for root in self.classes.values() if os.path.lexists(root / ROOT_MARK)]
            ident = {root: _folder_identity(root) for root in {self.volumes_dir, *claimed, *where.values()}}
            known_in: dict[tuple[int, int], set[str]] = {}
            for name, root in where.items():
                if ident[root] is not None:
                    known_in.setdefault(ident[root], set()).add(name)
            roots: dict[tuple[int, int], Path] = {}
            for root in (self.volumes_dir, *claimed, *where.values()):  # first spelling wins
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


def _folder_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the folder `path` names, through links (a class's folder may be given
    through one); None when it is not a folder."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None

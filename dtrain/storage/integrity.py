"""The engine's verify: every object the given manifests refer to re-hashed, pack by pack on the
worker threads; objects found corrupt or cut short leave the index (the next capture holding their
content stores it afresh), hashes deferred at capture are recorded, and a native snapshot's files
are hashed. A mixin of Engine (engine.py).
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from dtrain import db
from dtrain.storage import native
from dtrain.storage.info import VerifyStats
from dtrain.storage.manifest import Manifest
from dtrain.storage.progress import Progress, Run

if TYPE_CHECKING:
    from dtrain.storage.fileio import FileIO
    from dtrain.storage.packs import PackStore


class Integrity:
    """Mixed into Engine, which provides the store's root, pack store, subvolumes, worker threads and buffers."""

    if TYPE_CHECKING:
        root: Path
        io: FileIO
        packs: PackStore
        subvols: native.Subvolumes
        _parallel: Callable

        def load(self, manifest_id: str) -> Manifest: ...

        def _buffer(self) -> memoryview: ...

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

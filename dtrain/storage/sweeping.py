"""The store's pins and its sweep: a shared flock held while capturing, committing or restoring
(a marker in pins/ tells a later sweep that a pinned process was killed), and the sweep, under the
exclusive lock, deleting what no registered manifest needs: temp files, unindexed packs, objects,
unregistered manifests and subvolumes. A mixin of Engine (engine.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from dtrain.storage.info import SweepStats
from dtrain.storage.manifest import Manifest
from dtrain.storage.manifest_files import SWEEPABLE

if TYPE_CHECKING:
    from dtrain.storage.native import Subvolumes
    from dtrain.storage.packs import PackStore


class Sweeping:
    """Mixed into Engine, which provides the store's root, its pack store and subvolumes."""

    if TYPE_CHECKING:
        root: Path
        packs: PackStore
        subvols: Subvolumes

        def manifest_path(self, manifest_id: str) -> Path: ...

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

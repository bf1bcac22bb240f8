"""The store's manifests/ folder: a snapshot's manifest written (commit), marked sweepable until
the caller registers it, loaded and dropped; and the tree key kept beside it, which lets the next
capture of an unchanged volume return the stored manifest without loading it. A mixin of Engine
(engine.py); the manifest's format is manifest.py's.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from dtrain.storage import fileio
from dtrain.storage.entries import LazyEntries
from dtrain.storage.info import CaptureStats
from dtrain.storage.manifest import Manifest
from dtrain.storage.reuse import TreeKey

if TYPE_CHECKING:
    from dtrain.errors import StorageError
    from dtrain.storage.native import Subvolumes
    from dtrain.storage.packs import PackStore

SWEEPABLE = ".sweepable"  # manifests/<id>.sweepable: see `sweep`


class ManifestFiles:
    """Mixed into Engine, which provides the store's root, temp names, pack store, subvolumes and sweep."""

    if TYPE_CHECKING:
        root: Path
        durable: bool
        method: str
        racy_window_ns: int
        packs: PackStore
        subvols: Subvolumes
        _tmp: Callable[[], str]

        def manifest_path(self, manifest_id: str) -> Path: ...

        def request_sweep(self) -> None: ...

        def _wrap(self, err: OSError, doing: str, *, needed: int) -> StorageError: ...

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

    def _same_as_key(self, base_id: str, key: TreeKey | None) -> tuple[Manifest, CaptureStats] | None:
        """The stored manifest `base_id`, entries unloaded, when the walk's `key` matches the
        tree key committed with it, every file's ctime precedes that capture by the racy window
        (as `unchanged` asks of each file), and no stored object is damaged (a damaged file must
        be read again); None otherwise."""
        try:
            rec = self._key_record(base_id)
            recorded = TreeKey(rec["digest"], rec["files"], rec["bytes"], rec["newest_ctime_ns"])
            started_ns, chunk_size, hash_algorithm = rec["started_ns"], rec["chunk_size"], rec["hash"]
        except (OSError, ValueError, KeyError, TypeError):  # none yet (an older store), or unreadable
            return None
        if key != recorded or recorded.newest_ctime_ns >= started_ns - self.racy_window_ns or self.packs.damaged():
            return None
        manifest = Manifest(entries=LazyEntries(lambda: self.load(base_id).entries), started_ns=started_ns,
                            chunk_size=chunk_size, id=base_id, hash=hash_algorithm, key=recorded)
        return manifest, CaptureStats(files=recorded.files, bytes=recorded.bytes, read_bytes=0, added_bytes=0,
                                      added_objects=0, skipped=(), method=self.method)

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

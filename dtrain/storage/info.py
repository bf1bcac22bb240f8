"""What the storage layer returns: frozen records of the local store.

The local backend turns them into the interface's records (dtrain.backends.base: VolumeInfo,
SnapshotInfo, FreedInfo); these keep what only the local store knows (folders, uids, methods).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any


class _Record:
    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        for key, value in out.items():
            if isinstance(value, Path):
                out[key] = str(value)
        return out


@dataclass(frozen=True, kw_only=True)
class Volume(_Record):
    """A volume: a folder every process of a job mounts read-write (a PersistentVolumeClaim)."""

    name: str  # DNS-1123 name (PVC metadata.name)
    uid: str  # unique per creation: a volume deleted and created again is a new volume
    path: Path  # the folder a job bind-mounts, <home>/volumes/<name>/data
    size: str  # requested capacity, a Kubernetes quantity (not enforced by the local backend)
    size_bytes: int  # `size` in bytes
    storage_class: str  # 'local' here; a StorageClass name on Kubernetes
    created: float  # unix seconds
    origin_snapshot: str | None  # the snapshot it was created from (PVC dataSource), if any
    head_snapshot: str | None  # the latest snapshot taken of it or restored into it
    labels: Mapping[str, str]  # free-form tags
    snapshots: str = "cas"  # how its snapshots are taken: 'subvolume' (btrfs), 'reflink' or 'cas' (see engine.py)


@dataclass(frozen=True, kw_only=True)
class Snapshot(_Record):
    """A point-in-time, read-only copy of a volume (a CSI VolumeSnapshot)."""

    name: str  # DNS-1123 name (VolumeSnapshot metadata.name)
    id: str  # the engine's manifest id
    volume: str  # the volume it was taken of (spec.source.persistentVolumeClaimName)
    volume_uid: str  # that volume's uid, which tells a re-created volume of the same name apart
    created: float  # unix seconds
    volume_size: str  # the volume's requested size then: the default size of a restore
    storage_class: str  # the volume's storage class then
    job: str | None  # the job whose results it holds
    job_spec: Mapping[str, Any] | None  # that job's spec (JobSpec.to_dict())
    source_snapshot: str | None  # the snapshot the job's data started from (lineage)
    files: int  # regular files it holds
    bytes: int  # their total size (status.restoreSize)
    added_bytes: int  # new content it stored; 0 for a snapshot of an unchanged volume
    method: str  # 'reflink' (copy-on-write clones) or 'cas' (copies into the content store)


@dataclass(frozen=True, kw_only=True)
class Freed(_Record):
    """What deleting a snapshot gave back."""

    snapshot: str  # the deleted snapshot
    bytes: int  # disk bytes freed: content no other snapshot shared
    objects: int  # store objects removed
    pending: bool  # True when a running snapshot or restore delayed the cleanup to a later call


@dataclass(frozen=True, kw_only=True)
class Damage(_Record):
    """One damaged piece of the store and what it breaks."""

    object: str  # sha256 of a content chunk, or the id of a manifest
    problem: str  # 'missing', 'corrupt' (moved aside) or 'manifest' (unreadable snapshot record)
    hits: tuple[tuple[str, str], ...]  # (snapshot, path) pairs that need it; '*' for a whole snapshot


@dataclass(frozen=True, kw_only=True)
class VerifyReport(_Record):
    """The result of re-hashing the store."""

    snapshots: tuple[str, ...]  # snapshots checked
    objects: int  # objects re-hashed
    bytes: int  # bytes re-hashed
    damaged: tuple[Damage, ...]  # everything found wrong
    garbage_objects: int  # leftovers of interrupted snapshots removed first
    garbage_bytes: int  # their size

    @property
    def ok(self) -> bool:
        return not self.damaged

    def to_dict(self) -> dict[str, Any]:
        return super().to_dict() | {"ok": self.ok}


# --- what the engine reports to the policy layer ---------------------------------------------
@dataclass(frozen=True, kw_only=True)
class CaptureStats:
    """What one capture did."""

    files: int  # regular files in the snapshot
    bytes: int  # their total size
    read_bytes: int  # bytes read because a file was new or changed
    added_bytes: int  # bytes of new objects written to the store
    added_objects: int  # number of new objects
    skipped: tuple[str, ...]  # sockets, fifos and devices, which are not captured
    method: str  # 'reflink' or 'cas': how data got into the store


@dataclass(frozen=True, kw_only=True)
class SweepStats:
    """What one sweep removed."""

    objects: int  # unreferenced objects deleted
    bytes: int  # their size
    leftovers: int  # temp files, unregistered manifests and stale pins deleted


@dataclass(frozen=True, kw_only=True)
class VerifyStats:
    """What one verification found."""

    objects: int  # objects re-hashed
    bytes: int  # bytes re-hashed
    missing: frozenset[str]  # referenced but absent
    corrupt: frozenset[str]  # content no longer matches the name (taken out of the index)
    bad_manifests: tuple[str, ...]  # manifest ids missing or unreadable


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    if abs(n) < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "TiB":
            break
    return f"{n:.1f} {unit}"

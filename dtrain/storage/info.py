"""What the storage layer returns: frozen records of the local store.

The local backend turns them into the interface's records (dtrain.backends.base: VolumeInfo,
SnapshotInfo, FreedInfo); these keep what only the local store knows (folders, uids, methods).
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any, NamedTuple

# Records are NamedTuples, not dataclasses: every `dtrain` command and every fresh process that
# takes a snapshot imports this package, and `dataclasses` (with the `inspect` it imports) plus
# generating eight frozen classes cost ~40 ms of a ~0.1 s start (docs/benchmarks.md, issue 17).


def _plain(value: Any) -> Any:
    """A record's field as JSON-ready data: records become dicts, paths strings."""
    if hasattr(value, "_asdict"):
        return {k: _plain(v) for k, v in value._asdict().items()}
    if isinstance(value, Path):
        return str(value)
    if isinstance(value, (tuple, list)):
        return type(value)(_plain(v) for v in value)
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    return value


def _to_dict(self) -> dict[str, Any]:
    return _plain(self)


class Volume(NamedTuple):
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

    to_dict = _to_dict


class Snapshot(NamedTuple):
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
    job_uid: str | None = None  # `job`'s uid (unique per submit); None where not recorded (a snapshot of before)

    to_dict = _to_dict


class Freed(NamedTuple):
    """What deleting a snapshot gave back."""

    snapshot: str  # the deleted snapshot
    bytes: int  # disk bytes freed: content no other snapshot shared
    objects: int  # store objects removed
    pending: bool  # True when a running snapshot or restore delayed the cleanup to a later call
    no_room: bool = False  # pending because the disk had no room for it: the next storage command with room frees it

    to_dict = _to_dict


class Damage(NamedTuple):
    """One damaged piece of the store and what it breaks."""

    object: str  # sha256 of a content chunk, or the id of a manifest
    # 'missing', 'corrupt' (moved aside), 'unreadable' (its pack fails to read: left as it is) or
    # 'manifest' (unreadable snapshot record)
    problem: str
    hits: tuple[tuple[str, str], ...]  # (snapshot, path) pairs that need it; '*' for a whole snapshot
    # found so by an earlier verify, which took it out of the store: what it found is `problem`
    # (this verify finds it absent); the next snapshot of a volume still holding its content stores it again
    earlier: bool = False

    to_dict = _to_dict


TIDYING_SKIPPED = "tidying skipped"  # how VerifyReport.skipped begins when no leftover was looked for


class VerifyReport(NamedTuple):
    """The result of re-hashing the store."""

    snapshots: tuple[str, ...]  # snapshots checked
    objects: int  # objects re-hashed
    bytes: int  # bytes re-hashed
    damaged: tuple[Damage, ...]  # everything found wrong
    garbage_objects: int  # leftovers of interrupted snapshots removed first
    garbage_bytes: int  # their size
    unlisted_manifests: int = 0  # snapshots in the store the database does not list: kept (see engine)
    # what this verify left undone because the disk is full or read-only, and how to do it; None
    # when nothing was (the garbage_* and unlisted_manifests counts are then 0: not looked for)
    skipped: str | None = None

    @property
    def ok(self) -> bool:
        return not self.damaged

    @property
    def tidied(self) -> bool:
        """Whether leftovers were looked for: the garbage_* and unlisted_manifests counts are what
        was found (False: the disk was too full to tidy, and their 0 means not looked for)."""
        return not (self.skipped or "").startswith(TIDYING_SKIPPED)

    def to_dict(self) -> dict[str, Any]:
        return _plain(self) | {"ok": self.ok}


# --- what the engine reports to the policy layer ---------------------------------------------
class CaptureStats(NamedTuple):
    """What one capture did."""

    files: int  # regular files in the snapshot
    bytes: int  # their total size
    read_bytes: int  # bytes read because a file was new or changed
    added_bytes: int  # bytes of new objects written to the store
    added_objects: int  # number of new objects
    skipped: tuple[str, ...]  # files of a type no manifest records (none on Linux: special files are kept)
    method: str  # 'reflink' or 'cas': how data got into the store
    changing: tuple[str, ...] = ()  # files written to during every read: recorded as read, read again next time


class SweepStats(NamedTuple):
    """What one sweep removed."""

    objects: int  # unreferenced objects deleted
    bytes: int  # their size
    leftovers: int  # temp files, unregistered manifests and stale pins deleted
    unlisted: int = 0  # manifests the database does not list and that were not marked sweepable: kept


class VerifyStats(NamedTuple):
    """What one verification found."""

    objects: int  # objects re-hashed
    bytes: int  # bytes re-hashed
    missing: frozenset[str]  # referenced but absent
    corrupt: frozenset[str]  # content no longer matches the name (taken out of the index)
    bad_manifests: tuple[str, ...]  # manifest ids missing or unreadable
    unreadable: frozenset[str] = frozenset()  # in a pack that fails to read (kept in the index)
    unrecorded: bool = False  # asked to record what it found, the disk refused (full): reported, not recorded


def human_bytes(n: float) -> str:
    """1536 -> '1.5 KiB'."""
    if abs(n) < 1024:
        return f"{n:.0f} B"
    for unit in ("KiB", "MiB", "GiB", "TiB"):
        n /= 1024
        if abs(n) < 1024 or unit == "TiB":
            break
    return f"{n:.1f} {unit}"


class StorageClass(NamedTuple):
    """A storage class as this machine sees it: its root folder, whether volumes can go there now."""

    name: str
    root: Path  # where its volumes live
    status: str  # Ready, NotMounted (used before, its folder unmarked or gone), Unusable, NotConfigured
    message: str  # why it is not Ready, or what its first use does
    free_bytes: int | None  # free space on the file system of its folder (or of the nearest parent that exists)
    total_bytes: int | None
    volumes: int  # volumes recorded in it
    # where they live: `root` first, then each other folder they record (the class re-pointed since), with counts
    folders: dict[str, int]
    to_dict = _to_dict

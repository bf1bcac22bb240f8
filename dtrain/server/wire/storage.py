"""The payloads of volumes and snapshots: their requests (a volume size as the API takes it), their
records, a snapshot freed or verified, a volume's changes and the lineage graph."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from dtrain.names import MIN_VOLUME
from dtrain.server.wire.common import CLASS, NAME, _In, _Out

# A volume size as the API takes it: the part of the Kubernetes quantity grammar whose every value
# lies from 1Mi to 1Ei (names.parse_volume_size's range), so the schema promises no size the
# server then refuses: no leading zero, no milli or exponent forms, a whole part of at least the
# suffix's share of 1Mi (_LEAST: 1048576 bytes, 1049k, 2M) and no more digits than the suffix leaves
# room for (99999999999999999.9 bytes, 999.9Pi: each under 2**60).
_DIGITS = {"": 17, "k": 14, "K": 14, "Ki": 14, "M": 11, "Mi": 11, "G": 8, "Gi": 8, "T": 5, "Ti": 5, "P": 2, "Pi": 2}
_UNIT = {"": 1, "k": 10**3, "K": 10**3, "Ki": 2**10, "M": 10**6, "Mi": 2**20}  # the rest: 1Mi or more
_LEAST = {s: -(-MIN_VOLUME // _UNIT.get(s, MIN_VOLUME)) for s in _DIGITS}


def _at_least(least: int, digits: int) -> str:
    """A pattern of the whole numbers from `least` with at most `digits` digits, no leading zero."""
    text = str(least)
    forms = [text] + [f"{text[:i]}[{int(text[i]) + 1}-9][0-9]{{{len(text) - i - 1}}}"
                      for i in range(len(text)) if text[i] != "9"]
    if len(text) < digits:
        forms.append(f"[1-9][0-9]{{{len(text)},{digits - 1}}}")
    return "(?:" + "|".join(forms) + ")"


VOLUME_SIZE = "^(?:" + "|".join(f"{_at_least(_LEAST[s], n + 1)}(?:\\.[0-9]+)?{s}" for s, n in _DIGITS.items()) \
    + "|1Ei|1E)$"


# ---- volumes and snapshots ----------------------------------------------------------------------
class VolumeIn(_In):
    name: str = Field(pattern=NAME)
    size: str = Field("10Gi", pattern=VOLUME_SIZE, max_length=32,
                      description="a Kubernetes quantity from 1Mi to 1Ei, e.g. 100Gi")
    storage_class: str | None = Field(None, pattern=CLASS, max_length=253)


class VolumeUpdate(_In):
    """`dtrain volume update NAME --class C`: a volume moved to another storage class in place."""

    storage_class: str = Field(pattern=CLASS, max_length=253, description="local: a class of config.yaml's "
                               "storage_classes; Kubernetes: a VolumeAttributesClass")


class SnapshotIn(_In):
    volume: str = Field(pattern=NAME, description="the volume to snapshot")
    name: str | None = Field(None, pattern=NAME, description="default: <volume>-<time>")
    job: str | None = Field(None, pattern=NAME, description="link the snapshot to this job")


class RestoreTo(_In):
    """Restore into a new volume."""

    to: str = Field(pattern=NAME, description="the new volume to fill from the snapshot")
    in_place: Literal[False] = False
    storage_class: str | None = Field(None, pattern=CLASS, max_length=253, description="the new volume's storage "
                                      "class (`--class`); default: the class of the snapshot's volume")


class RestoreInPlace(_In):
    """Roll the snapshot's own volume back (refused while a job uses it)."""

    in_place: Literal[True]
    storage_class: None = Field(None, description="null or absent: an in-place restore keeps the volume's class "
                                "(change it with PATCH /volumes/{name}, or restore into a new volume)")


IN_PLACE_CLASS = ("invalid request: storage_class does not go with in_place: an in-place restore keeps the volume's "
                  "storage class; change it with PATCH /api/v1/volumes/NAME {\"storage_class\": CLASS}, or restore "
                  "into a new volume with {\"to\": NEW_VOLUME, \"storage_class\": CLASS}")
RESTORE_BODY = ('send {"to": "NEW_VOLUME"} to restore into a new volume, or {"in_place": true} to roll the '
                "snapshot's volume back (one of the two)")


class Volume(_Out):
    """`dtrain.VolumeInfo`; `extra` holds the backend's details (locally: path, uid, head_snapshot)."""

    name: str
    backend: str
    size: str
    size_bytes: int
    storage_class: str | None
    created: float
    status: str
    origin_snapshot: str | None
    origin_snapshot_deleted: bool = Field(False, description="that snapshot was deleted since; "
                                          "`extra.origin_snapshot_deleted` is a copy, kept for one release")
    job: str | None
    used_bytes: int | None = Field(None, description="allocated bytes of its files, as du counts them; null where "
                                   "the backend cannot tell (a PVC) or the verb did not measure (create, restore)")
    labels: dict[str, str]
    extra: dict[str, Any]


class StorageClass(_Out):
    """`dtrain.StorageClassInfo`: a performance tier volumes can use (`dtrain volume classes`)."""

    name: str
    backend: str
    kind: Literal["StorageClass", "VolumeAttributesClass"] = Field(
        description="Kubernetes: a VolumeAttributesClass is the tier `volume update --class` sets; local classes "
                    "are StorageClasses, for create and update alike")
    default: bool = Field(description="the class `volume create` without a class uses")
    root: str | None = Field(description="the folder its volumes live in (local)")
    provisioner: str | None = Field(description="Kubernetes: a StorageClass's provisioner, a "
                                                "VolumeAttributesClass's driverName")
    status: Literal["Ready", "NotMounted", "Unusable", "NotConfigured"] | None = Field(
        description="whether volumes can go there now (local: NotMounted, a folder used before that lost its mark; "
                    "Unusable, a folder that is a file, overlaps another or holds other files; NotConfigured, a "
                    "class volumes record that config.yaml no longer names); null where the backend cannot tell")
    message: str
    free_bytes: int | None
    total_bytes: int | None
    volumes: int = Field(description="volumes in it (Kubernetes: the project's PVCs)")
    folders: dict[str, int] = Field(default_factory=dict, description=(
        "local: the folder config.yaml names (root) first, then every other folder its volumes live in (a class "
        "re-pointed since keeps its volumes where they were made), each with how many; empty on Kubernetes"))
    extra: dict[str, Any]


class Snapshot(_Out):
    """`dtrain.SnapshotInfo`; `extra` locally: id, volume_uid, added_bytes, method."""

    name: str
    backend: str
    volume: str | None
    volume_deleted: bool = Field(False, description="that volume was deleted since (or deleted and made again); "
                                 "`extra.volume_deleted` is a copy, kept for one release")
    created: float
    ready: bool
    error: str | None
    job: str | None
    job_uid: str | None = Field(None, description="that job's uid when the snapshot was taken; null where unknown")
    earlier_run: bool = Field(False, description="the job now named `job` is a later submit of that name: this "
                                                 "snapshot holds an earlier run's results")
    job_deleted: bool = Field(False, description="no job is named `job` now: it was deleted (or purged) and not "
                                                 "submitted again")
    job_spec: dict[str, Any] | None
    source_snapshot: str | None
    source_snapshot_deleted: bool = Field(False, description="that snapshot was deleted since; "
                                          "`extra.source_snapshot_deleted` is a copy, kept for one release")
    files: int | None
    bytes: int | None
    volume_size: str | None
    storage_class: str | None
    extra: dict[str, Any]


class VolumeDeleting(_Out):
    """DELETE /volumes/{name}'s 202: the volume is being deleted but kept a while (its 204 says it is gone)."""
    name: str
    status: str = Field(description="Terminating: Kubernetes keeps a claim pods still use until they stop "
                                    "(its pvc-protection finalizer), as `kubectl get pvc` shows it")
    kept: str = Field(description="what keeps it, in words, as `dtrain volume delete` says it")


class Freed(_Out):
    snapshot: str
    backend: str
    bytes: int | None
    pending: bool
    no_room: bool = Field(False, description="pending because the home disk is full: the next volume or snapshot "
                                             "list with room frees it")
    extra: dict[str, Any]


class Damage(BaseModel):
    object: str = Field(description="a content chunk's hash, or a snapshot's manifest id")
    problem: Literal["missing", "corrupt", "unreadable", "manifest"]
    hits: list[tuple[str, str]] = Field(description="(snapshot, path) pairs that need it; path '*': the whole snapshot")
    earlier: bool = Field(False, description="found so by an earlier verify, which took it out of the store; "
                                             "a snapshot of a volume still holding its content stores it again")


class VerifyReport(BaseModel):
    """`dtrain snapshot verify [NAME] --json`: the store re-hashed; `ok` false when anything is damaged."""

    snapshots: list[str]
    objects: int
    bytes: int
    damaged: list[Damage]
    garbage_objects: int = Field(description="leftovers of interrupted snapshots, removed first")
    garbage_bytes: int
    unlisted_manifests: int
    skipped: str | None = Field(None, description="what this verify left undone because the disk holding the home "
                                                  "folder is full or read-only (tidying; setting damaged objects "
                                                  "aside), and how to do it; null when nothing was")
    ok: bool


class Change(BaseModel):
    path: str = Field(description="relative to the volume; bytes of a name that are not UTF-8 written as \\xNN")
    kind: Literal["added", "removed", "modified"]
    fields: list[str] = []


class LineageNode(BaseModel):
    id: str = Field(description="kind:name; kind:name@OTHER for an earlier, deleted job or snapshot of a reused "
                                "name (the snapshot or volume that points at it)")
    kind: Literal["volume", "snapshot", "job", "jobs"] = Field(
        description="'jobs': the older jobs that only mounted a volume, folded into one node (jobs:VOLUME)")
    name: str
    status: str | None = Field(None, description="a job's status (none where the job was not read); 'gone' for a "
                                                 "deleted volume or snapshot")
    project: str | None = Field(None, description="a job's project (its page's ?project=), where its record or "
                                                  "its snapshot's says")
    count: int | None = Field(None, description="for kind 'jobs': how many jobs it stands for")


class LineageEdge(BaseModel):
    source: str
    target: str
    label: str


class Lineage(BaseModel):
    nodes: list[LineageNode]
    edges: list[LineageEdge]
    jobs_unread: int = Field(0, description="older jobs than the `jobs` newest read (not drawn, but a snapshot's "
                                            "job, without its status)")

"""A PVC read back as a VolumeInfo and a VolumeSnapshot as a SnapshotInfo (the records volumes.py's
hooks return), from the objects alone: pure, no API call. volumes.py imports every name here.
"""

from __future__ import annotations

import json

from dtrain.backends.base import SnapshotInfo, VolumeInfo
from dtrain.names import parse_size

from .objects import ANN_JOB_UID, ANN_SOURCE_CLASS, ANN_SOURCE_SIZE, ANN_SPEC, LABEL_JOB, LABEL_SOURCE_SNAPSHOT
from .status import parse_time

def _bytes(quantity: str | None) -> int | None:
    return parse_size(str(quantity)) if quantity else None


def _created(meta: dict) -> float:
    """creationTimestamp in unix seconds; the API server always sets it (0.0 if a reply lacks it)."""
    return parse_time(meta.get("creationTimestamp")) or 0.0


def volume_info(pvc: dict) -> VolumeInfo:
    meta, spec, status = pvc["metadata"], pvc.get("spec") or {}, pvc.get("status") or {}
    labels = meta.get("labels") or {}
    size = (status.get("capacity") or {}).get("storage") or spec["resources"]["requests"]["storage"]
    origin = labels.get(LABEL_SOURCE_SNAPSHOT) or (spec.get("dataSource") or {}).get("name")
    return VolumeInfo(name=meta["name"], backend="kubernetes", size=size, size_bytes=parse_size(size),
                      storage_class=spec.get("storageClassName"), created=_created(meta),
                      # a claim deleted while pods use it stays until they stop: kubectl's 'Terminating'
                      status="Terminating" if meta.get("deletionTimestamp") else status.get("phase", "Pending"),
                      origin_snapshot=origin, job=labels.get(LABEL_JOB),
                      labels=dict(labels), extra={"uid": meta.get("uid"), "namespace": meta.get("namespace"),
                                                  "access_modes": list(spec.get("accessModes") or []),
                                                  "volume_attributes_class": spec.get("volumeAttributesClassName"),
                                                  "current_volume_attributes_class":
                                                      status.get("currentVolumeAttributesClassName"),
                                                  # while a class change is under way, or refused by the
                                                  # driver: {status: Pending|InProgress|Infeasible, target...}
                                                  "modify_volume_status": status.get("modifyVolumeStatus")})


def snapshot_info(snap: dict) -> SnapshotInfo:
    meta, spec, status = snap["metadata"], snap.get("spec") or {}, snap.get("status") or {}
    annotations = meta.get("annotations") or {}
    return SnapshotInfo(name=meta["name"], backend="kubernetes",
                        volume=(spec.get("source") or {}).get("persistentVolumeClaimName"), created=_created(meta),
                        ready=bool(status.get("readyToUse")), error=(status.get("error") or {}).get("message"),
                        job=(meta.get("labels") or {}).get(LABEL_JOB), job_uid=annotations.get(ANN_JOB_UID),
                        job_spec=_job_spec(annotations),
                        bytes=_bytes(status.get("restoreSize")),
                        volume_size=annotations.get(ANN_SOURCE_SIZE), storage_class=annotations.get(ANN_SOURCE_CLASS),
                        extra={"uid": meta.get("uid"), "namespace": meta.get("namespace"),
                               "snapshot_class": spec.get("volumeSnapshotClassName")})


def _job_spec(annotations: dict) -> dict | None:
    """The spec of the job whose results a snapshot holds (--snapshot-on-success records it); None
    for one without it, or with an annotation another hand wrote that is not a JSON object."""
    try:
        spec = json.loads(annotations[ANN_SPEC])
    except (KeyError, TypeError, ValueError):
        return None
    return spec if isinstance(spec, dict) else None

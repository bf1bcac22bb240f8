"""Volumes (PVCs) and snapshots (VolumeSnapshots): the storage verbs of the Kubernetes backend.

Every verb works in the configured project's namespace. The dicts they return:
    volume:   name, uid, namespace, size, size_bytes, storage_class, access_modes, status
              (Pending/Bound/Lost), created (unix seconds), job, origin_snapshot, labels, backend
    snapshot: name, uid, namespace, volume, job, created, ready, size (restoreSize), bytes,
              volume_size, storage_class (of the source then), snapshot_class, status, backend
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from dtrain.errors import BackendError, ConflictError, NotFoundError, SpecError
from dtrain.spec import check_name, parse_size

from .client import POD, PVC, Missing
from .objects import ANN_SOURCE_CLASS, ANN_SOURCE_SIZE, LABEL_JOB, LABEL_SOURCE_SNAPSHOT, SNAPSHOT_HINT, VOLUME_SNAPSHOT
from .render_storage import render_restore, render_snapshot, render_volume
from .status import parse_time

Progress = Callable[[int, int], None]  # (done, total), as the CLI's progress bar takes it

if TYPE_CHECKING:
    from .client import KubeApi
    from .config import KubernetesConfig


def _bytes(quantity: str | None) -> int | None:
    return parse_size(str(quantity)) if quantity else None


def volume_dict(pvc: dict) -> dict:
    meta, spec, status = pvc["metadata"], pvc.get("spec") or {}, pvc.get("status") or {}
    labels = meta.get("labels") or {}
    size = (status.get("capacity") or {}).get("storage") or spec["resources"]["requests"]["storage"]
    origin = labels.get(LABEL_SOURCE_SNAPSHOT) or (spec.get("dataSource") or {}).get("name")
    return {"name": meta["name"], "uid": meta.get("uid"), "namespace": meta.get("namespace"), "size": size,
            "size_bytes": _bytes(size), "storage_class": spec.get("storageClassName"),
            "access_modes": list(spec.get("accessModes") or []), "status": status.get("phase", "Pending"),
            "created": parse_time(meta.get("creationTimestamp")), "job": labels.get(LABEL_JOB),
            "origin_snapshot": origin, "labels": labels, "backend": "kubernetes"}


def snapshot_dict(snap: dict) -> dict:
    meta, spec, status = snap["metadata"], snap.get("spec") or {}, snap.get("status") or {}
    annotations = meta.get("annotations") or {}
    error = (status.get("error") or {}).get("message")
    ready = bool(status.get("readyToUse"))
    return {"name": meta["name"], "uid": meta.get("uid"), "namespace": meta.get("namespace"),
            "volume": (spec.get("source") or {}).get("persistentVolumeClaimName"),
            "job": (meta.get("labels") or {}).get(LABEL_JOB), "created": parse_time(meta.get("creationTimestamp")),
            "ready": ready, "size": status.get("restoreSize"), "bytes": _bytes(status.get("restoreSize")),
            "volume_size": annotations.get(ANN_SOURCE_SIZE), "storage_class": annotations.get(ANN_SOURCE_CLASS),
            "snapshot_class": spec.get("volumeSnapshotClassName"),
            "status": f"Error: {error}" if error else ("Ready" if ready else "Pending"), "backend": "kubernetes"}


class VolumeVerbs:
    """Mixed into KubernetesBackend, which provides api, config and namespace."""

    api: KubeApi
    config: KubernetesConfig
    namespace: str

    def _ensure_namespace(self, namespace: str, project: str) -> None: ...

    # ---------------------------------------------------------------- volumes

    def create_volume(self, name: str, *, size: str = "10Gi", storage_class: str | None = None) -> dict:
        check_name(name, "volume")
        parse_size(size, "volume size")
        pvc = render_volume(name, project=self.config.project, size=size, storage_class=storage_class,
                            config=self.config)
        self._ensure_namespace(self.namespace, self.config.project)
        try:
            return volume_dict(self.api.create(pvc, PVC))
        except ConflictError:
            raise ConflictError(f"volume {name!r} already exists in namespace {self.namespace}: "
                                f"pick another name or delete it first") from None

    def list_volumes(self) -> list[dict]:
        return sorted((volume_dict(p) for p in self.api.list(PVC, self.namespace)), key=lambda v: v["name"])

    def _pvc(self, name: str) -> dict:
        try:
            return self.api.read(PVC, self.namespace, name)
        except Missing:
            raise NotFoundError(f"volume {name!r} not found in namespace {self.namespace}: "
                                f"see 'dtrain volume list'") from None

    def get_volume(self, name: str) -> dict:
        return volume_dict(self._pvc(name))

    def delete_volume(self, name: str, *, force: bool = False) -> None:
        self._pvc(name)
        users = [p for p in self.api.list(POD, self.namespace)
                 if (p.get("status") or {}).get("phase") in ("Pending", "Running")
                 and any((v.get("persistentVolumeClaim") or {}).get("claimName") == name
                         for v in (p.get("spec") or {}).get("volumes") or [])]
        if users and not force:
            pod = users[0]["metadata"]
            job = (pod.get("labels") or {}).get(LABEL_JOB, "?")
            raise ConflictError(f"volume {name!r} is in use by job {job!r} (pod {pod['name']}): wait for it, "
                                f"delete the job, or pass --force")
        # With --force the claim is marked deleted now; Kubernetes frees it when its last pod stops.
        self.api.delete(PVC, self.namespace, name)

    # ---------------------------------------------------------------- snapshots

    def create_snapshot(self, volume: str, *, name: str | None = None, job: str | None = None,
                        progress: Progress | None = None) -> dict:
        """Ask the CSI driver for a snapshot; it is taken asynchronously ('ready' turns True)."""
        pvc = self._pvc(volume)
        if name is None:
            name = f"{volume[:37].rstrip('-')}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
        check_name(name, "snapshot")
        spec = pvc.get("spec") or {}
        snap = render_snapshot(name, volume, project=self.config.project, config=self.config, job=job,
                               source_size=spec["resources"]["requests"]["storage"],
                               source_class=spec.get("storageClassName"))
        try:
            made = snapshot_dict(self.api.create(snap, VOLUME_SNAPSHOT))
        except Missing as err:
            if err.api_missing:
                raise BackendError(f"the cluster does not serve VolumeSnapshots: {SNAPSHOT_HINT}") from None
            raise
        except ConflictError:
            raise ConflictError(f"snapshot {name!r} already exists in namespace {self.namespace}: "
                                f"pick another name") from None
        if progress:
            progress(1, 1)  # the request is done; the copy is the storage system's
        return made

    def _snapshots(self) -> list[dict]:
        try:
            return self.api.list(VOLUME_SNAPSHOT, self.namespace)
        except Missing as err:
            if err.api_missing:
                raise BackendError(f"the cluster does not serve VolumeSnapshots: {SNAPSHOT_HINT}") from None
            raise

    def list_snapshots(self, *, volume: str | None = None, job: str | None = None) -> list[dict]:
        snaps = [snapshot_dict(s) for s in self._snapshots()]
        snaps = [s for s in snaps if (volume is None or s["volume"] == volume) and (job is None or s["job"] == job)]
        return sorted(snaps, key=lambda s: (s["created"] or 0.0, s["name"]))

    def _snapshot(self, name: str) -> dict:
        try:
            return self.api.read(VOLUME_SNAPSHOT, self.namespace, name)
        except Missing as err:
            hint = SNAPSHOT_HINT if err.api_missing else "see 'dtrain snapshot list'"
            raise NotFoundError(f"snapshot {name!r} not found in namespace {self.namespace}: {hint}") from None

    def get_snapshot(self, name: str) -> dict:
        return snapshot_dict(self._snapshot(name))

    def restore_snapshot(self, name: str, *, to: str | None = None, in_place: bool = False,
                         progress: Progress | None = None) -> dict:
        """A new PVC `to` provisioned from the snapshot; Kubernetes cannot roll a PVC back in place."""
        if in_place:
            raise SpecError(f"in-place restore of {name!r} is not possible on Kubernetes (a PVC cannot be "
                            f"rolled back): restore into a new volume with --to NEW and mount that")
        if to is None:
            raise SpecError(f"restoring snapshot {name!r} needs a new volume name: pass --to NEW")
        check_name(to, "volume")
        snap = self._snapshot(name)
        if self._exists(to):
            raise ConflictError(f"volume {to!r} already exists in namespace {self.namespace}: "
                                f"restore into a new name or delete it first")
        size, storage_class = self._restore_size(snap)
        pvc = render_restore(name, to, project=self.config.project, size=size, storage_class=storage_class,
                             config=self.config)
        made = volume_dict(self.api.create(pvc, PVC))
        if progress:
            progress(1, 1)  # the provisioner fills the new PVC; it reads Bound when done
        return made

    def _exists(self, volume: str) -> bool:
        try:
            self.api.read(PVC, self.namespace, volume)
            return True
        except Missing:
            return False

    def _restore_size(self, snap: dict) -> tuple[str, str | None]:
        """Size and class of a restore: the snapshot's restoreSize, else what it recorded of its source."""
        annotations = snap["metadata"].get("annotations") or {}
        size = (snap.get("status") or {}).get("restoreSize") or annotations.get(ANN_SOURCE_SIZE)
        storage_class = annotations.get(ANN_SOURCE_CLASS)
        source = (snap.get("spec") or {}).get("source", {}).get("persistentVolumeClaimName")
        if (size is None or storage_class is None) and source and self._exists(source):
            spec = self.api.read(PVC, self.namespace, source).get("spec") or {}
            size = size or spec["resources"]["requests"]["storage"]
            storage_class = storage_class or spec.get("storageClassName")
        if size is None:
            raise BackendError(f"cannot tell the size of snapshot {snap['metadata']['name']!r}: it is not ready "
                               f"yet and its source volume is gone; retry when 'dtrain snapshot get' says Ready")
        return str(size), storage_class or self.config.storage_class

    def delete_snapshot(self, name: str) -> dict:
        snap = snapshot_dict(self._snapshot(name))
        self.api.delete(VOLUME_SNAPSHOT, self.namespace, name)
        return snap

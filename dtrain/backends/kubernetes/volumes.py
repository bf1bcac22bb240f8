"""Volumes (PVCs) and snapshots (VolumeSnapshots): the storage hooks of the Kubernetes backend.

Every hook works in the configured project's namespace and returns the interface's records:
a PVC becomes a VolumeInfo (status = its phase: Pending, Bound, Lost; extra: uid, namespace,
access_modes); a VolumeSnapshot a SnapshotInfo (ready = status.readyToUse, bytes =
status.restoreSize; extra: uid, namespace, snapshot_class). Deleting a snapshot frees space in
the storage system, on its own time: FreedInfo.bytes is None. storage_records.py reads the records.
"""

from __future__ import annotations

import dataclasses
import logging
import time
import uuid
from typing import TYPE_CHECKING

from dtrain.backends.base import FreedInfo, Listed, Notice, Progress, SnapshotInfo, StorageClassInfo, VolumeInfo
from dtrain.errors import BackendError, ConflictError, DtrainError, NotFoundError, SpecError
from dtrain.names import claim_refusal, is_claim_name, listed, near_name, with_near

from .client import EVENT, POD, PVC, Forbidden, Missing, Unanswered, Unauthenticated
from .objects import (ANN_DEFAULT_CLASS, ANN_REQUEST, ANN_SOURCE_CLASS, ANN_SOURCE_SIZE, LABEL_JOB, STORAGE_CLASS,
                      PVC_PROTECTION, VOLUME_ATTRIBUTES_CLASSES, VOLUME_SNAPSHOT, Resource)
from .render_storage import render_restore, render_snapshot, render_volume, render_volume_class_patch
from .status import job_status, spec_of
from .storage_records import _created, _job_spec, snapshot_info, volume_info

if TYPE_CHECKING:
    from collections.abc import Callable

    from dtrain.spec import JobSpec

    from .client import KubeApi
    from .config import KubernetesConfig


# How another tool's claim gets a class dtrain does not set on it (volume update --class)
_PATCH = "'kubectl edit pvc {name} -n {namespace}' (spec.volumeAttributesClassName)"


class VolumeVerbs:
    """Mixed into KubernetesBackend, which provides api, config and namespace."""

    api: KubeApi
    config: KubernetesConfig
    namespace: str

    def _ensure_namespace(self, namespace: str, project: str) -> None: ...

    def cmd(self, words: str) -> str: ...  # `dtrain WORDS` as a hint names it: with -p PROJECT where needed

    def _job_objects(self, namespace: str | None) -> list[tuple[Resource, dict]]: ...

    def _find(self, name: str) -> tuple[Resource, dict]: ...

    # ---------------------------------------------------------------- volumes

    def _render_volume(self, name: str, *, size: str, storage_class: str | None) -> list[dict]:
        return [render_volume(name, project=self.config.project, size=size, storage_class=storage_class,
                              config=self.config)]

    def _create_volume(self, name: str, *, size: str, storage_class: str | None) -> VolumeInfo:
        [pvc] = self._render_volume(name, size=size, storage_class=storage_class)
        self._check_storage_class(storage_class, name)
        self._ensure_namespace(self.namespace, self.config.project)
        try:
            return volume_info(self._create_new(pvc, PVC, "volume"))
        except ConflictError:
            raise ConflictError(f"volume {name!r} already exists in namespace {self.namespace}: "
                                f"pick another name or delete it first with '{self.cmd(f'volume delete {name}')}'") from None

    def _check_storage_class(self, storage_class: str | None, volume: str, *, dry: bool = False) -> None:
        """Refuse a StorageClass the cluster does not have: its PVC would stay Pending for good. A
        cluster with no StorageClass at all binds pre-provisioned PersistentVolumes by the name alone,
        so any name goes there; an account that may not list StorageClasses (cluster-scoped, granted
        apart) is warned, once, and goes on (`dry`: the refusal is raised, for a dry run's one warning)."""
        if storage_class is None:
            return
        try:
            names = [c["metadata"]["name"] for c in self.api.list(STORAGE_CLASS, None)]
        except Forbidden as err:
            if isinstance(err, Unauthenticated) or dry:
                raise
            logging.getLogger(__name__).warning(
                "dtrain: warning: StorageClass %r not checked, this account may not list StorageClasses (%s): if "
                "the cluster has no such class the volume stays Pending; see '%s'", storage_class, err,
                self.cmd(f"volume describe {volume}"))
            return
        if not names or storage_class in names:
            return
        message = (f"unknown StorageClass {storage_class!r} on this cluster: use one of "
                   f"{', '.join(sorted(names))} (see '{self.cmd('volume classes')}')")
        near = near_name(storage_class, names)
        raise NotFoundError(with_near(message, storage_class, near) if near else message)

    def _create_new(self, obj: dict, resource: Resource, noun: str) -> dict:
        """Create a PVC or VolumeSnapshot. A create that got no clear answer (a dropped connection,
        a timeout, a 5xx) may have been carried out all the same: the object is read back and
        returned if this request made it (its ANN_REQUEST token); if it is not there (yet), the
        error says that it may appear and where to look before a retry."""
        meta = obj["metadata"]
        token = uuid.uuid4().hex
        annotations = {**(meta.get("annotations") or {}), ANN_REQUEST: token}
        try:
            return self.api.create({**obj, "metadata": {**meta, "annotations": annotations}}, resource)
        except Unanswered as err:
            try:
                found: dict | None = self.api.read(resource, meta.get("namespace"), meta["name"])
            except DtrainError:  # not there (the create may still be on its way), or still no answer
                found = None
            if found is None:
                raise Unanswered(f"{err}; the {noun} {meta['name']!r} may have been created all the same: "
                                 f"see '{self.cmd(noun + ' list')}' before you retry") from None
            if (found["metadata"].get("annotations") or {}).get(ANN_REQUEST) != token:
                raise ConflictError(f"cannot create {resource.kind} {meta['name']!r}: it exists, "
                                    f"made by another request") from None
            return found

    def _list_volumes(self) -> list[VolumeInfo]:
        return [volume_info(p) for p in self.api.list(PVC, self.namespace)]

    def _own_pvc(self, name: str, verb: str, kubectl: str) -> dict:
        """The PVC of a verb that changes it or snapshots it: refused, in one line, for another tool's
        claim (a dotted name), whose life is that tool's; `kubectl`: the command that does it instead."""
        if is_claim_name(name):
            raise SpecError(claim_refusal(name, verb, kubectl.format(name=name, namespace=self.namespace),
                                          self.cmd))
        return self._pvc(name)

    def _pvc(self, name: str) -> dict:
        try:
            return self.api.read(PVC, self.namespace, name)
        except Missing:
            raise NotFoundError(f"volume {name!r} not found in namespace {self.namespace}: "
                                f"see '{self.cmd('volume list')}'") from None

    def _get_volume(self, name: str) -> VolumeInfo:
        pvc = self._pvc(name)
        info = volume_info(pvc)
        if info.status == "Pending":
            return dataclasses.replace(info, extra={**info.extra, "pending_reason": self._pending_reason(pvc)})
        if (info.extra["modify_volume_status"] or {}).get("status") == "Infeasible":
            # modifyVolumeStatus says no more than Infeasible; the driver's words are in the claim's
            # latest event (the external-resizer's VolumeModifyFailed)
            return dataclasses.replace(info, extra={**info.extra, "modify_reason": self._pending_reason(pvc)})
        return info

    def _pending_reason(self, pvc: dict) -> str | None:
        """Why a claim waits, as its latest event says (`kubectl describe pvc`): a StorageClass that
        does not exist, a provisioner that fails, WaitForFirstConsumer; or why its driver refused a
        VolumeAttributesClass (VolumeModifyFailed). Best effort: an account that
        may not read events gets none."""
        meta = pvc["metadata"]
        selector = (f"involvedObject.kind=PersistentVolumeClaim,involvedObject.name={meta['name']}"
                    + (f",involvedObject.uid={meta['uid']}" if meta.get("uid") else ""))
        try:
            events = self.api.list(EVENT, meta.get("namespace") or self.namespace, field_selector=selector)
        except DtrainError:
            return None
        if not events:
            return None
        last = max(events, key=lambda e: e.get("lastTimestamp") or e.get("eventTime")
                   or (e.get("metadata") or {}).get("creationTimestamp") or "")
        return f"{last.get('reason') or 'Event'}: {' '.join(str(last.get('message') or '').split())}"

    def _list_storage_classes(self) -> Listed:
        """The cluster's StorageClasses (what `volume create --class` and `--pvc CLASS:...` name) and
        VolumeAttributesClasses (what `volume update --class` names; none where the API server does not
        serve them), with how many of the project's PVCs use each. The default: the kubernetes settings'
        storage_class, else the StorageClass annotated as the cluster's default."""
        pvcs = [p.get("spec") or {} for p in self.api.list(PVC, self.namespace)]
        classes = self.api.list(STORAGE_CLASS, None)
        annotated = [c["metadata"]["name"] for c in classes
                     if any((c["metadata"].get("annotations") or {}).get(a) == "true" for a in ANN_DEFAULT_CLASS)]
        default = self.config.storage_class or (annotated[0] if annotated else None)
        out = []
        for c in classes:
            name = c["metadata"]["name"]
            out.append(StorageClassInfo(
                name=name, backend="kubernetes", default=name == default, provisioner=c.get("provisioner"),
                volumes=sum(p.get("storageClassName") == name for p in pvcs),
                extra={"parameters": dict(c.get("parameters") or {}), "reclaim_policy": c.get("reclaimPolicy", "Delete"),
                       "volume_binding_mode": c.get("volumeBindingMode", "Immediate"),
                       "allow_volume_expansion": bool(c.get("allowVolumeExpansion")),
                       "cluster_default": name in annotated, "namespace": self.namespace}))
        attributes, notices = self._volume_attributes_classes()
        for c in attributes:
            name = c["metadata"]["name"]
            out.append(StorageClassInfo(
                name=name, backend="kubernetes", kind="VolumeAttributesClass", provisioner=c.get("driverName"),
                volumes=sum(p.get("volumeAttributesClassName") == name for p in pvcs),
                extra={"parameters": dict(c.get("parameters") or {}), "api_version": c.get("apiVersion"),
                       "namespace": self.namespace}))
        return Listed(out, notices)

    def _volume_attributes_classes(self) -> tuple[list[dict], list[Notice]]:
        """The VolumeAttributesClasses at the newest version the API server serves; [] where it serves none
        (the VolumeAttributesClass feature gate off, the default before Kubernetes 1.34). An account that may
        read StorageClasses but not these (a cluster-scoped resource, granted apart) gets [] and a notice
        saying so: the StorageClasses are listed all the same."""
        for resource in VOLUME_ATTRIBUTES_CLASSES:
            try:
                return [{**c, "apiVersion": resource.api_version} for c in self.api.list(resource, None)], []
            except Missing as err:
                if not err.api_missing:
                    raise
            except Forbidden as err:
                return [], [Notice(code="classes-unlisted", message=(
                    f"VolumeAttributesClasses (what 'dtrain volume update --class' names) not listed, only "
                    f"StorageClasses: {err}"))]
        return [], []

    def _update_volume(self, name: str, *, storage_class: str) -> VolumeInfo:
        """Patch the PVC's volumeAttributesClassName (VolumeAttributesClass `storage_class`): the
        driver changes the tier without moving data; status.currentVolumeAttributesClassName
        follows when it is done."""
        self._own_pvc(name, "change", _PATCH)
        pvc = self.api.patch(PVC, self.namespace, name, render_volume_class_patch(storage_class))
        if (pvc.get("spec") or {}).get("volumeAttributesClassName") != storage_class:
            # An API server with the feature gate off (the default before 1.34 on most clusters)
            # drops the field and answers 200: the tier did not change.
            raise BackendError(f"the cluster ignored the VolumeAttributesClass of volume {name!r}: its API server "
                               f"dropped spec.volumeAttributesClassName (feature gate VolumeAttributesClass off; "
                               f"on by default from Kubernetes 1.34): ask the cluster's admin to enable it")
        return volume_info(pvc)

    def _class_change(self, info: VolumeInfo, say: Callable[[str], str]) -> str | None:
        """None once the CSI driver is done (the class in effect is the spec's, no modifyVolumeStatus);
        else where the change stands. Infeasible (the driver refused the class) is an error: it stays so
        until the claim names another class."""
        target, current = info.extra.get("volume_attributes_class"), info.extra.get("current_volume_attributes_class")
        modify = info.extra.get("modify_volume_status") or {}
        if not modify and current == target:
            return None
        target = modify.get("targetVolumeAttributesClassName") or target
        if modify.get("status") == "Infeasible":
            why = info.extra.get("modify_reason")
            back = (f", or put the class in effect back: '{say(f'volume update {info.name} --class {current}')}'"
                    if current else "")
            raise ConflictError(f"the storage system refused VolumeAttributesClass {target!r} for volume {info.name!r} "
                                f"(Infeasible{': ' + why if why else ''}): set a class its driver accepts "
                                f"('{say(f'volume update {info.name} --class CLASS')}'; '{say('volume classes')}' "
                                f"lists them){back}")
        return (f"VolumeAttributesClass {current or 'none'} in effect, {target!r} "
                f"{modify.get('status') or 'requested'}")

    def _render_volume_update(self, name: str, *, storage_class: str) -> list[dict]:
        if is_claim_name(name):
            self._own_pvc(name, "change", _PATCH)
        return render_volume_class_patch(storage_class)

    def _delete_volume(self, name: str, *, force: bool) -> str | None:
        self._own_pvc(name, "delete", "'kubectl delete pvc {name} -n {namespace}'")
        users = [p for p in self.api.list(POD, self.namespace)
                 if (p.get("status") or {}).get("phase") in ("Pending", "Running")
                 and any((v.get("persistentVolumeClaim") or {}).get("claimName") == name
                         for v in (p.get("spec") or {}).get("volumes") or [])]
        if users and not force:
            pod = users[0]["metadata"]
            job = (pod.get("labels") or {}).get(LABEL_JOB, "?")
            raise ConflictError(f"volume {name!r} is in use by job {job!r} (pod {pod['name']}): wait for it, "
                                f"delete the job ('{self.cmd(f'delete {job}')}'), or pass --force")
        job = None if force else self._job_mounting(name)
        if job is not None:
            raise ConflictError(f"volume {name!r} is mounted by job {job[0]!r}, which is {job[1]} and would "
                                f"start without it: wait for it to end, delete the job "
                                f"('{self.cmd(f'delete {job[0]}')}'), or pass --force")
        # With --force the claim is marked deleted now; Kubernetes keeps it while a pod uses it (the
        # pvc-protection finalizer the API server puts on every claim) and removes it when the last stops.
        pvc = self.api.delete(PVC, self.namespace, name)
        return _kept(pvc, [p["metadata"]["name"] for p in users])

    def _job_mounting(self, volume: str) -> tuple[str, str] | None:
        """(name, status) of a job not ended that mounts `volume`: a queued or suspended job has no
        pod yet, but its spec (the dtrain.io/spec annotation) names the volumes its pods will mount."""
        try:
            objects = self._job_objects(self.namespace)
        except Forbidden as err:
            raise Forbidden(f"{err}; without reading the jobs there is no telling whether a queued one will mount "
                            f"volume {volume!r}: pass --force to delete it anyway") from None
        for resource, obj in objects:
            status, _ = job_status(resource.kind, obj, None)
            if status.terminal:
                continue
            try:
                mounts = spec_of(obj).resolved_volumes()
            except (DtrainError, ValueError, TypeError, KeyError):
                continue  # not dtrain's spec: its pods are what the check above sees
            if any(m.volume == volume for m in mounts):
                return obj["metadata"]["name"], status.value.lower()
        return None

    # ---------------------------------------------------------------- snapshots

    def _render_snapshot(self, volume: str, *, name: str | None, job: str | None) -> list[dict]:
        """The VolumeSnapshot for `volume` (read, so that its size and class are recorded), with `job`'s
        spec as --snapshot-on-success's carries it, where that job can still be read."""
        pvc = self._own_pvc(volume, "snapshot", "a VolumeSnapshot of it made with kubectl apply -n {namespace}")
        if name is None:
            name = f"{volume[:37].rstrip('-')}-{time.strftime('%Y%m%d-%H%M%S', time.gmtime())}"
        spec = pvc.get("spec") or {}
        job_spec, job_uid = self._spec_if_found(job, name)
        return [render_snapshot(name, volume, project=self.config.project, config=self.config, job=job,
                                source_size=spec["resources"]["requests"]["storage"],
                                source_class=spec.get("storageClassName"), job_spec=job_spec, job_uid=job_uid)]

    def _spec_if_found(self, job: str | None, snapshot: str) -> tuple[JobSpec | None, str | None]:
        """`job`'s spec and uid: its object's, else the spec an earlier snapshot of it recorded (the
        cluster deletes a job ttl_seconds_after_finished after it ends; its --snapshot-on-success
        snapshot stays) and no uid (which run it was is then unknown). Without either, one warning
        says why and the snapshot is linked to it by name only."""
        if job is None:
            return None, None
        try:
            obj = self._find(job)[1]
            return spec_of(obj), obj["metadata"].get("uid")
        except (NotFoundError, Forbidden) as err:
            if isinstance(err, Unauthenticated):
                raise
            why = err
        recorded = self._recorded_spec(job)
        if recorded is not None:
            return recorded, None
        ttl = self.config.ttl_seconds_after_finished
        gone = (f"the cluster no longer has it{'' if ttl is None else f' (it deletes a job {ttl}s after it ends)'}"
                if isinstance(why, NotFoundError) else f"it cannot be read ({why})")
        logging.getLogger(__name__).warning(
            "dtrain: warning: snapshot %r records no spec of job %r: %s and no other snapshot of it records one; "
            "it is linked to the job by name only", snapshot, job, gone)
        return None, None

    def _recorded_spec(self, job: str) -> JobSpec | None:
        """The spec of `job` the newest snapshot linked to it records, if any does (and may be listed)."""
        from dtrain.spec import JobSpec

        try:
            snaps = self._snapshots()
        except DtrainError:
            return None
        linked = [s for s in snaps if (s["metadata"].get("labels") or {}).get(LABEL_JOB) == job]
        for snap in sorted(linked, key=lambda s: _created(s["metadata"]), reverse=True):
            recorded = _job_spec(snap["metadata"].get("annotations") or {})
            if recorded is not None and recorded.get("name") == job:
                try:
                    return JobSpec.from_stored(recorded)
                except (DtrainError, TypeError, ValueError):  # an annotation another hand changed: the next
                    continue
        return None

    def _create_snapshot(self, volume: str, *, name: str | None, job: str | None,
                         progress: Progress | None) -> SnapshotInfo:
        """Ask the CSI driver for a snapshot; it is taken asynchronously ('ready' turns True)."""
        [snap] = self._render_snapshot(volume, name=name, job=job)
        name = snap["metadata"]["name"]
        try:
            made = snapshot_info(self._create_new(snap, VOLUME_SNAPSHOT, "snapshot"))
        except Missing as err:
            raise (err.no_api() if err.api_missing else err) from None
        except ConflictError:
            raise ConflictError(f"snapshot {name!r} already exists in namespace {self.namespace}: "
                                f"pick another name or delete it first with '{self.cmd(f'snapshot delete {name}')}'"
                                ) from None
        if progress:
            progress(1, 1)  # the request is done; the copy is the storage system's
        return made

    def _snapshots(self) -> list[dict]:
        try:
            return self.api.list(VOLUME_SNAPSHOT, self.namespace)
        except Missing as err:
            raise (err.no_api() if err.api_missing else err) from None

    def _list_snapshots(self) -> list[SnapshotInfo]:
        return [snapshot_info(s) for s in self._snapshots()]

    def _snapshot(self, name: str) -> dict:
        try:
            return self.api.read(VOLUME_SNAPSHOT, self.namespace, name)
        except Missing as err:
            if err.api_missing:
                raise err.no_api() from None
            raise NotFoundError(f"snapshot {name!r} not found in namespace {self.namespace}: "
                                f"see '{self.cmd('snapshot list')}'") from None

    def _get_snapshot(self, name: str) -> SnapshotInfo:
        return snapshot_info(self._snapshot(name))

    def _render_restore(self, name: str, *, to: str | None, in_place: bool, storage_class: str | None) -> list[dict]:
        """A new PVC `to` provisioned from the snapshot, its storageClassName `storage_class` (None:
        the source volume's); Kubernetes cannot roll a PVC back in place."""
        if in_place:
            raise SpecError(f"in-place restore of {name!r} is not possible on Kubernetes (a PVC cannot be "
                            f"rolled back): restore into a new volume with --to NEW and mount that")
        snap = self._snapshot(name)
        status = snap.get("status") or {}
        error = (status.get("error") or {}).get("message")
        if error and not status.get("readyToUse"):  # a PVC made from it would stay Pending for good
            raise ConflictError(f"snapshot {name!r} is not ready and its snapshot controller reports an error "
                                f"({' '.join(str(error).split())}): restore it once "
                                f"'{self.cmd('snapshot describe ' + name)}' says Ready, or delete it and take a new one")
        if self._exists(to):
            raise self._taken(to)
        size, source_class = self._restore_size(snap)
        storage_class = storage_class or source_class
        return [render_restore(name, to, project=self.config.project, size=size, storage_class=storage_class,
                               config=self.config)]

    def _restore_snapshot(self, name: str, *, to: str | None, in_place: bool, storage_class: str | None,
                          progress: Progress | None) -> VolumeInfo:
        [pvc] = self._render_restore(name, to=to, in_place=in_place, storage_class=storage_class)
        self._check_storage_class(storage_class, pvc["metadata"]["name"])
        try:
            made = volume_info(self._create_new(pvc, PVC, "volume"))
        except ConflictError:  # made meanwhile, since _render_restore looked
            raise self._taken(to) from None
        if progress:
            progress(1, 1)  # the provisioner fills the new PVC; it reads Bound when done
        return made

    def _taken(self, to: str | None) -> ConflictError:
        return ConflictError(f"volume {to!r} already exists in namespace {self.namespace}: "
                             f"restore into a new name or delete it first with '{self.cmd(f'volume delete {to}')}'")

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
            name = snap["metadata"]["name"]
            raise BackendError(f"cannot tell the size of snapshot {name!r}: it is not ready yet and its source "
                               f"volume is gone; retry when '{self.cmd(f'snapshot describe {name}')}' says Ready")
        return str(size), storage_class or self.config.storage_class

    def _delete_snapshot(self, name: str) -> FreedInfo:
        snap = snapshot_info(self._snapshot(name))
        self.api.delete(VOLUME_SNAPSHOT, self.namespace, name)
        return FreedInfo(snapshot=name, backend="kubernetes", bytes=None, extra={"restore_size": snap.bytes})


def _kept(pvc: dict, pods: list[str]) -> str | None:
    """What still holds a claim the API server marked deleted (kubectl's 'Terminating'): the pods that
    mount it (the pvc-protection finalizer every claim gets keeps it until they stop), another
    finalizer; None where nothing does (the claim goes at once)."""
    meta = (pvc or {}).get("metadata") or {}
    others = [f for f in meta.get("finalizers") or [] if f != PVC_PROTECTION]
    if not meta.get("deletionTimestamp") or not (pods or others):
        return None
    until = [f"{listed(pods, 'pod')} {'stops' if len(pods) == 1 else 'stop'}"] if pods else []
    until += [f"{listed(others, 'finalizer')} {'is' if len(others) == 1 else 'are'} done"] if others else []
    return f"Terminating: Kubernetes keeps it until {' and '.join(until)}"

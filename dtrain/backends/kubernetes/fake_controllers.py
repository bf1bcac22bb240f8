"""The fake API server's controllers (see fake.py): the moves of the operators, kubelet, provisioner,
resizer and snapshot controller that a test replays step by step. A mixin of FakeCluster (fake_cluster.py),
which provides the store (lock, objects, logs, create, get, find_job, items, _protect_claims)."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from .fake_wire import rfc3339
from .objects import ANN_NOTEBOOK_STOPPED, JOB_COMPLETION_INDEX, KF_JOB_NAME, KF_REPLICA_INDEX, KF_REPLICA_TYPE

if TYPE_CHECKING:
    import threading

_KUBEFLOW_EXCLUSIVE = {"Running", "Restarting", "Succeeded", "Failed"}  # at most one is True


class FakeControllers:
    """The controllers' moves, mixed into FakeCluster."""

    if TYPE_CHECKING:
        lock: threading.RLock
        objects: dict[tuple[str, str, str, str], dict]
        logs: dict[tuple[str, str], list]

        def create(self, obj: dict) -> dict: ...

        def get(self, group: str, plural: str, namespace: str, name: str) -> dict: ...

        def find_job(self, namespace: str, name: str) -> dict: ...

        def items(self, group: str, plural: str, namespace: str | None = None) -> list[dict]: ...

        def _protect_claims(self) -> None: ...

        def _remove(self, key: tuple[str, str, str, str]) -> None: ...

    def _stop_suspended(self, job: dict) -> None:
        """The job controllers on a job suspended (a batch Job's or TrainJob's spec.suspend, the Training
        Operator's runPolicy.suspend) and Kubeflow's notebook controller on a stopped Notebook: the pods it
        owns that have not ended are deleted with their grace period (marked, deletionTimestamp set, until
        `finish_deletions`: the kubelet's SIGTERM, then their end), and a job gets a Suspended condition
        (status True; a Kubeflow job's Running goes False). A job resumed gets Suspended False."""
        spec, meta = job.get("spec") or {}, job["metadata"]
        suspended = {"Job": spec.get("suspend"), "TrainJob": spec.get("suspend"),
                     "PyTorchJob": (spec.get("runPolicy") or {}).get("suspend"),
                     "MPIJob": (spec.get("runPolicy") or {}).get("suspend"),
                     "Notebook": ANN_NOTEBOOK_STOPPED in (meta.get("annotations") or {})}.get(job["kind"])
        if job["kind"] != "Notebook":
            self._suspended_condition(job, bool(suspended))
        if not suspended:
            return
        for key, pod in list(self.objects.items()):
            if (key[:3] == ("", "pods", meta.get("namespace", "")) and key in self.objects
                    and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                    and any(o.get("uid") == meta["uid"] for o in pod["metadata"].get("ownerReferences") or [])):
                grace = (pod.get("spec") or {}).get("terminationGracePeriodSeconds", 30)
                pod["metadata"].setdefault("deletionTimestamp", rfc3339(time.time() + grace))
                pod["metadata"].setdefault("deletionGracePeriodSeconds", grace)
        self._protect_claims()

    @staticmethod
    def _suspended_condition(job: dict, suspended: bool) -> None:
        """The Suspended condition as the controllers write it (batch/v1: JobSuspended / JobResumed; the
        Training Operator: <Kind>Suspended / <Kind>Resumed, its Running False while suspended)."""
        conds = job.setdefault("status", {}).setdefault("conditions", [])
        old = next((c for c in conds if c["type"] == "Suspended"), None)
        if old is None and not suspended or old is not None and (old["status"] == "True") == suspended:
            return  # never suspended, or no change
        when, kind = rfc3339(time.time()), job["kind"]
        prefix = kind if kind in ("PyTorchJob", "MPIJob") else "Job"
        word = "Suspended" if suspended else "Resumed"
        conds[:] = [c for c in conds if c["type"] != "Suspended"]
        conds.append({"type": "Suspended", "status": str(suspended), "reason": prefix + word,
                      "message": f"{kind} {job['metadata']['name']} is {word.lower()}.",
                      "lastUpdateTime": when, "lastTransitionTime": when})
        if suspended and prefix != "Job":
            for c in conds:
                if c["type"] in ("Running", "Restarting") and c["status"] == "True":
                    c.update(status="False", lastTransitionTime=when)

    def _terminate(self, namespace: str) -> None:
        """The namespace controller on a namespace marked deleted: every object in it is deleted (one with
        finalizers is marked, and stays until they are removed); the namespace goes once it is empty."""
        for key in [k for k in self.objects if k[2] == namespace]:
            obj = self.objects.get(key)
            if obj is None:
                continue  # gone with its owner
            if obj["metadata"].get("finalizers"):
                obj["metadata"].setdefault("deletionTimestamp", rfc3339(time.time()))
            else:
                self._remove(key)
        self._protect_claims()  # its pods gone: its claims go too
        self._empty_namespaces()

    def _empty_namespaces(self) -> None:
        """Namespaces being terminated that hold nothing any more go."""
        for ns in [k[3] for k, o in self.objects.items() if k[:2] == ("", "namespaces")
                   and o["metadata"].get("deletionTimestamp")]:
            if not any(k[2] == ns for k in self.objects):
                self.objects.pop(("", "namespaces", "", ns))


    def add_node(self, name: str, *, gpus: int = 0, cpu: str = "16", memory: str = "64Gi") -> dict:
        allocatable = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            allocatable["nvidia.com/gpu"] = str(gpus)
        return self.create({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name},
                            "status": {"allocatable": allocatable, "capacity": dict(allocatable)}})

    def run_pods(self, namespace: str, job: str, *, phase: str = "Running",
                 nodes: tuple[str, ...] = ("node-1",)) -> list[dict]:
        """Create the replica pods an operator would create for `job`, labelled as it labels them."""
        with self.lock:
            obj = self.find_job(namespace, job)
            pods = []
            for i, (name, labels, template) in enumerate(_replicas(obj)):
                spec = json.loads(json.dumps(template.get("spec") or {}))
                spec["nodeName"] = nodes[i % len(nodes)]
                meta = {"name": name, "namespace": namespace,
                        "labels": {**((template.get("metadata") or {}).get("labels") or {}), **labels},
                        "ownerReferences": [{"apiVersion": obj["apiVersion"], "kind": obj["kind"],
                                             "name": job, "uid": obj["metadata"]["uid"], "controller": True}]}
                pods.append(self.create({"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec,
                                         "status": {"phase": "Pending"}}))
                self.set_pod_phase(namespace, name, phase)
            return pods

    def set_pod_phase(self, namespace: str, pod: str, phase: str, *, exit_code: int | None = None,
                      restart_count: int | None = None) -> None:
        with self.lock:
            obj = self.get("", "pods", namespace, pod)
            state: dict[str, Any] = {"waiting": {"reason": "ContainerCreating"}}
            if phase == "Running":
                state = {"running": {"startedAt": rfc3339(time.time())}}
            elif phase in ("Succeeded", "Failed"):
                state = {"terminated": {"exitCode": exit_code if exit_code is not None else int(phase == "Failed")}}
            old = (obj["status"].get("containerStatuses") or [{}])[0]
            restarts = old.get("restartCount", 0) if restart_count is None else restart_count
            obj["status"] = {"phase": phase, "startTime": rfc3339(time.time()), "containerStatuses": [
                {"name": c["name"], "restartCount": restarts, "state": state, "ready": phase == "Running"}
                for c in obj["spec"]["containers"]]}
            self._protect_claims()  # a pod that ended no longer holds its claims

    def transition(self, namespace: str, job: str, ctype: str, *, reason: str = "", message: str = "",
                   at: float | None = None) -> None:
        """Set condition `ctype` True as the job's controller would, with start/completion times."""
        with self.lock:
            obj = self.find_job(namespace, job)
            when = rfc3339(at if at is not None else time.time())
            status = obj.setdefault("status", {})
            conds = status.setdefault("conditions", [])
            if ctype in _KUBEFLOW_EXCLUSIVE:
                for c in conds:
                    if c["type"] in _KUBEFLOW_EXCLUSIVE and c["type"] != ctype and c["status"] == "True":
                        c.update(status="False", lastTransitionTime=when)
            conds[:] = [c for c in conds if c["type"] != ctype]
            conds.append({"type": ctype, "status": "True", "reason": reason or ctype, "message": message,
                          "lastUpdateTime": when, "lastTransitionTime": when})
            if ctype == "Running":
                status.setdefault("startTime", when)
            if ctype in ("Succeeded", "Complete", "Failed"):
                status["completionTime"] = when

    def append_log(self, namespace: str, pod: str, text: str, *, at: float | None = None, end: str = "\n") -> None:
        """A write of the pod's container: `text`, then `end` (end='' writes part of a line, as a
        progress bar does; the kubelet gives a stamp to the writes that start a line only)."""
        with self.lock:
            lines = self.logs.setdefault((namespace, pod), [])
            starts = not lines or lines[-1][2].endswith("\n")
            pod_obj = self.objects.get(("", "pods", namespace, pod))
            # which instance of the container wrote it (its restart count then): `previous=true` reads the one before
            lines.append((time.time() if at is None else at, text, end, starts, _restarts(pod_obj)))

    def bind_volumes(self) -> None:
        """The provisioner: every Pending PVC becomes Bound at its requested size."""
        with self.lock:
            for pvc in self.items("", "persistentvolumeclaims"):
                if pvc["status"].get("phase") == "Pending":
                    size = pvc["spec"]["resources"]["requests"]["storage"]
                    pvc["status"] = {"phase": "Bound", "capacity": {"storage": size},
                                     "accessModes": pvc["spec"]["accessModes"]}

    def modify_volumes(self) -> None:
        """The external-resizer with a CSI driver that implements ModifyVolume: every PVC's
        VolumeAttributesClass takes effect (status.currentVolumeAttributesClassName), its
        modifyVolumeStatus gone."""
        with self.lock:
            for pvc in self.items("", "persistentvolumeclaims"):
                status = pvc.setdefault("status", {})
                status.pop("modifyVolumeStatus", None)
                target = pvc["spec"].get("volumeAttributesClassName")
                if target is not None:
                    status["currentVolumeAttributesClassName"] = target

    def ready_snapshots(self) -> None:
        """The snapshot controller: every snapshot of an existing PVC becomes readyToUse."""
        with self.lock:
            for snap in self.items("snapshot.storage.k8s.io", "volumesnapshots"):
                ns, source = snap["metadata"]["namespace"], snap["spec"]["source"]["persistentVolumeClaimName"]
                pvc = self.objects.get(("", "persistentvolumeclaims", ns, source))
                if pvc is not None and not (snap.get("status") or {}).get("readyToUse"):
                    snap["status"] = {"readyToUse": True, "creationTime": rfc3339(time.time()),
                                      "restoreSize": pvc["spec"]["resources"]["requests"]["storage"],
                                      "boundVolumeSnapshotContentName": f"snapcontent-{snap['metadata']['uid']}"}


def _replicas(obj: dict) -> Iterator[tuple[str, dict[str, str], dict]]:
    """(pod name, controller labels, pod template) of each replica of a job object."""
    name, kind, spec = obj["metadata"]["name"], obj["kind"], obj["spec"]
    if kind == "Job":
        yield f"{name}-{uuid.uuid4().hex[:5]}", {"batch.kubernetes.io/job-name": name}, spec["template"]
    elif kind in ("PyTorchJob", "MPIJob"):
        replica_specs = spec.get("pytorchReplicaSpecs") or spec.get("mpiReplicaSpecs")
        for rtype in ("Master", "Launcher", "Worker"):
            rs = replica_specs.get(rtype)
            for i in range((rs or {}).get("replicas", 0)):
                pod = f"{name}-launcher" if rtype == "Launcher" else f"{name}-{rtype.lower()}-{i}"
                yield pod, {KF_JOB_NAME: name, KF_REPLICA_TYPE: rtype.lower(), KF_REPLICA_INDEX: str(i)}, rs["template"]
    elif kind == "TrainJob":
        yield from _trainjob_replicas(obj)
    elif kind == "Notebook":  # the controller's StatefulSet pod carries the Notebook's labels
        labels = dict(obj["metadata"].get("labels") or {})
        yield f"{name}-0", {"statefulset": name, "notebook-name": name}, {"metadata": {"labels": labels},
                                                                         "spec": spec["template"]["spec"]}


def _trainjob_replicas(obj: dict) -> Iterator[tuple[str, dict[str, str], dict]]:
    name, trainer = obj["metadata"]["name"], obj["spec"]["trainer"]
    patch = obj["spec"].get("runtimePatches", [{}])[0].get("trainingRuntimeSpec", {})
    job = patch.get("template", {}).get("spec", {}).get("replicatedJobs", [{}])[0]
    node = job.get("name", "node")
    template = json.loads(json.dumps(job.get("template", {}).get("spec", {}).get("template", {})))
    spec = template.setdefault("spec", {})
    mounts = (spec.get("containers") or [{}])[0].get("volumeMounts", [])
    spec["containers"] = [{"name": node, "image": trainer["image"], "command": trainer["command"],
                           "resources": trainer.get("resourcesPerNode", {}), "volumeMounts": mounts}]
    for i in range(trainer.get("numNodes", 1)):
        labels = {JOB_COMPLETION_INDEX: str(i), "jobset.sigs.k8s.io/replicatedjob-name": node}
        yield f"{name}-{node}-0-{i}-{uuid.uuid4().hex[:5]}", labels, template


def _restarts(pod: dict | None) -> int:
    statuses = ((pod or {}).get("status") or {}).get("containerStatuses") or []
    return sum(cs.get("restartCount", 0) for cs in statuses)

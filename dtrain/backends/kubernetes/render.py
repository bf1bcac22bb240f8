"""Pure translation of a JobSpec into Kubernetes manifests (dicts); no I/O, no client import.

    dtrain                          Kubernetes
    submit (one process)            batch/v1 Job
    submit-dist --launcher torchrun kubeflow.org/v1 PyTorchJob: Master + Workers
                                    (trainer='v2': trainer.kubeflow.org/v1alpha1 TrainJob)
    submit-mpi                      kubeflow.org/v1 MPIJob: Launcher (mpirun) + Workers
    process (rank)                  a replica pod, or one of k ranks a pod runs (packing below)
    --pvc CLASS:SIZE:MOUNT          PVC pvc-<job>-<i> (ReadWriteMany), created before the job
    --pvc NAME:MOUNT[:ro]           a mount of the existing claim NAME
    --large-shm                     emptyDir {medium: Memory} at /dev/shm
    --node-selector K=V, --node-type  every pod's nodeSelector (the MPI launcher's too); --node-type T
                                    is run.ai/type=T, the label Run:AI's node types use
    --toleration FIELDS             every pod's tolerations (the MPI launcher's too), as the nodeSelector
    notebook (spec.notebook)        kubeflow.org/v1 Notebook: one pod running the image's Jupyter

Packing rule: a GPU job packs k processes into one pod (nprocPerNode / slotsPerWorker = k)
when config.gpus_per_node is set; k is the largest divisor of --processes with k * --gpu <=
gpus_per_node, so every pod is alike. CPU jobs and clusters without gpus_per_node run one
process per pod.

This module picks the kind and writes what every kind shares (metadata, names, the spec annotation,
suspend and resume); render_kinds.py writes each kind's body, render_pods.py its pod templates, and
render_storage.py the volumes, snapshots, namespaces and quotas.
"""

from __future__ import annotations

import json
import re

from dtrain.errors import SpecError
from dtrain.names import MAX_NAME, counted, shown
from dtrain.spec import JobSpec

from . import render_storage
from .config import KubernetesConfig
from .objects import (
    ANN_NOTEBOOK_STOPPED,
    ANN_PROCS_PER_POD,
    ANN_SPEC,
    ANN_SUSPENDED,
    BATCH_JOB,
    MPI_JOB,
    NOTEBOOK,
    PYTORCH_JOB,
    TRAIN_JOB,
    Resource,
    job_labels,
    metadata,
)
# the job kinds' bodies and the pod templates live apart (render_kinds.py, render_pods.py); every name
# they had here is still importable from this module
from .render_kinds import (MAX_POD_NAME, MPI_CONTAINER, NOTEBOOK_RUNTIME_DIR, PYTORCH_CONTAINER,  # noqa: F401
                           TORCHRUN_PREFIX_ENV, TRAIN_CONTAINER, _batch_job, _check_jobset_pod_name, _check_pod_name,
                           _check_train_job, _mpi_job, _notebook, _pytorch_job, _restart_policy, _run_policy,
                           _torchrun, _torchrun_command, _train_job, mpi_master_name, render_mpi_master_service)
from .render_pods import (NO_GPU_ENV, NOTEBOOK_IMAGE, SHM_PATH, _env, _node_selector, _pull_secrets,  # noqa: F401
                          _tolerations, _volumes, cpu_quantity, image_of, pod_template, resources, scale_quantity)

MAX_ANNOTATIONS = 256 * 1024  # bytes of an object's annotations, keys and values, that the API server takes


def resource_for(spec: JobSpec, config: KubernetesConfig) -> Resource:
    """Which API object runs this spec."""
    if spec.notebook:
        if spec.idle_timeout is not None:
            raise SpecError(f"notebook {spec.name!r}: on Kubernetes, Kubeflow's notebook controller stops idle "
                            f"notebooks for the whole cluster (its culler: ENABLE_CULLING, CULL_IDLE_TIME), not "
                            f"one by one: drop --idle-timeout, or ask the cluster's admin to turn culling on")
        return NOTEBOOK
    if spec.launcher == "none":
        return BATCH_JOB
    if config.trainer == "v2":
        if spec.launcher == "mpi":
            raise SpecError(f"job {spec.name!r}: Trainer v2 rendering covers torchrun only; "
                            f"submit-mpi needs the v1 Training Operator (set the Kubernetes trainer to v1)")
        return TRAIN_JOB
    return PYTORCH_JOB if spec.launcher == "torchrun" else MPI_JOB


def packing(spec: JobSpec, config: KubernetesConfig) -> tuple[int, int]:
    """(replica pods, processes per pod) under the packing rule in the module docstring."""
    if spec.launcher == "none" or spec.gpu == 0 or not config.gpus_per_node:
        return spec.processes, 1
    if spec.gpu > config.gpus_per_node:
        raise SpecError(f"--gpu {shown(spec.typed('gpu'))} per process is more than a node's "
                        f"{counted(config.gpus_per_node, 'GPU')}: "
                        f"use --gpu <= {config.gpus_per_node}")
    capacity = config.gpus_per_node // spec.gpu
    per_pod = max(k for k in range(1, min(capacity, spec.processes) + 1) if spec.processes % k == 0)
    return spec.processes // per_pod, per_pod


def render_job(spec: JobSpec, config: KubernetesConfig, *, with_namespace: bool = False,
               snapshot_source: dict | None = None) -> list[dict]:
    """Every object `submit` creates, in creation order (what `--dry-run` prints). `snapshot_source`:
    the existing PVC that --snapshot-on-success names, read by the caller, whose size and class the
    snapshot records."""
    namespace = config.namespace_of(spec.project)
    objects: list[dict] = []
    if with_namespace:
        objects.append(render_storage.render_namespace(namespace, spec.project, config))
    objects += [render_storage.render_new_volume(spec, name, v, config) for name, v in spec.new_volumes()]
    workload = render_workload(spec, config)
    if spec.snapshot_volume and config.snapshot_watcher:
        objects += render_storage.render_snapshot_rbac(namespace, spec.project, config)
    objects.append(workload)
    if workload["kind"] == MPI_JOB.kind and spec.processes > 1:
        objects.append(render_mpi_master_service(spec, config))
    if spec.snapshot_volume and config.snapshot_watcher:
        objects.append(render_storage.render_snapshot_watcher(spec, config, resource_for(spec, config),
                                                              snapshot_source))
    return objects


def render_workload(spec: JobSpec, config: KubernetesConfig) -> dict:
    """The one job object (Job, PyTorchJob, MPIJob or TrainJob) of a spec."""
    resource = resource_for(spec, config)
    check_workload_name(spec, resource)
    replicas, per_pod = packing(spec, config)
    annotations = {ANN_SPEC: json.dumps(spec.to_dict(), sort_keys=True), ANN_PROCS_PER_POD: str(per_pod)}
    _check_annotations(spec, annotations)
    meta = metadata(spec.name, config.namespace_of(spec.project), job_labels(spec, config), annotations)
    build = {BATCH_JOB.kind: _batch_job, PYTORCH_JOB.kind: _pytorch_job,
             MPI_JOB.kind: _mpi_job, TRAIN_JOB.kind: _train_job, NOTEBOOK.kind: _notebook}[resource.kind]
    body = build(spec, config, replicas, per_pod)
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": meta, **body}


_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
# Kinds whose name becomes a Service's, which must be a DNS-1035 label (a letter first): the
# operator's per-replica Services of a PyTorchJob or MPIJob (and our <job>-mpi-master), the JobSet
# Services of a TrainJob, the Service the notebook controller names after its Notebook.
_SERVICE_NAMED = (PYTORCH_JOB.kind, MPI_JOB.kind, TRAIN_JOB.kind, NOTEBOOK.kind)


def _max_name(kind: str) -> int:
    """The longest name of a kind, so that what is named after it stays a 63-character label."""
    if kind == MPI_JOB.kind:
        return 63 - len(mpi_master_name(""))  # 52: the Service <job>-mpi-master
    if kind == NOTEBOOK.kind:
        return 52  # its StatefulSet's pods get the label controller-revision-hash=<name>-<10-char hash>
    return MAX_NAME


def check_workload_name(spec: JobSpec, resource: Resource) -> None:
    """Names that names.check_name takes but some kinds do not: a leading digit, or one too long."""
    what = "notebook" if spec.notebook else "job"
    most = _max_name(resource.kind)
    if resource.kind in _SERVICE_NAMED and not _DNS1035.match(spec.name):
        example = "j" + (spec.name if len(spec.name) < most else spec.name[1:])
        raise SpecError(f"invalid {what} name {spec.name!r}: on Kubernetes, {resource.kind} names must start "
                        f"with a letter (a Service is named after them), e.g. {example!r}")
    if len(spec.name) > most:
        raise SpecError(f"invalid {what} name {spec.name!r}: on Kubernetes, {resource.kind} names may have at "
                        f"most {most} characters (it has {len(spec.name)}); shorten it")


def _check_annotations(spec: JobSpec, annotations: dict[str, str]) -> None:
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS:
        raise SpecError(f"job {spec.name!r} is too large for Kubernetes: its spec, kept in annotation {ANN_SPEC}, "
                        f"takes {size} bytes, over the API's {MAX_ANNOTATIONS // 1024} KiB limit on annotations; "
                        f"move large -e values or arguments into a file on a volume (or a ConfigMap)")


# ------------------------------------------------------------------------- suspend, resume

# Where each kind keeps its suspend flag: the Training Operator's runPolicy.suspend, batch/v1 and
# Trainer v2's spec.suspend. A Notebook has none: Kubeflow stops it with an annotation.
SUSPEND_FLAG = {PYTORCH_JOB.kind: "/spec/runPolicy/suspend", MPI_JOB.kind: "/spec/runPolicy/suspend",
                BATCH_JOB.kind: "/spec/suspend", TRAIN_JOB.kind: "/spec/suspend"}


def _pointer(key: str) -> str:
    """An annotation key as a JSON Pointer token (RFC 6901: '~' -> '~0', '/' -> '~1')."""
    return key.replace("~", "~0").replace("/", "~1")


def render_suspend(kind: str, *, at: str) -> list[dict]:
    """The JSON Patch of `dtrain suspend` at RFC 3339 time `at`: the kind's suspend flag, which makes
    its controller delete the pods, and dtrain's annotation, which tells a user's suspension from a
    queue's (Kueue suspends jobs until it admits them). A Notebook: Kubeflow's stop annotation."""
    annotations = "/metadata/annotations/"
    if kind == NOTEBOOK.kind:
        return [{"op": "add", "path": annotations + ANN_NOTEBOOK_STOPPED, "value": at}]
    return [{"op": "add", "path": SUSPEND_FLAG[kind], "value": True},
            {"op": "add", "path": annotations + _pointer(ANN_SUSPENDED), "value": at}]


def render_resume(kind: str, annotations: dict[str, str]) -> list[dict]:
    """The JSON Patch of `dtrain resume`: the suspend flag off and the annotations of the stop removed
    (those the object has: `annotations`), so that the controller creates the pods again."""
    ops = [] if kind == NOTEBOOK.kind else [{"op": "add", "path": SUSPEND_FLAG[kind], "value": False}]
    return ops + [{"op": "remove", "path": "/metadata/annotations/" + _pointer(key)}
                  for key in (ANN_SUSPENDED, ANN_NOTEBOOK_STOPPED) if key in annotations]

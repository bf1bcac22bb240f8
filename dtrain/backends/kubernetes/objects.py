"""Names shared by rendering, status mapping and the backend: API resources, labels, annotations."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dtrain.names import LABEL_JOB  # noqa: F401  on everything dtrain creates for a job (and on its pods)
from dtrain.spec import JobSpec

from .config import KubernetesConfig

LABEL_PROJECT = "dtrain.io/project"
LABEL_ROLE = "dtrain.io/role"  # 'worker' on a job's own objects, 'snapshotter' on the watcher
LABEL_VOLUME = "dtrain.io/volume"  # on a snapshot: the PVC it was taken from
LABEL_SOURCE_SNAPSHOT = "dtrain.io/source-snapshot"  # on a restored PVC
LABEL_MANAGED = "app.kubernetes.io/managed-by"
ANN_SPEC = "dtrain.io/spec"  # the JobSpec as JSON: `get` rebuilds the spec from it
# on a VolumeSnapshot linked to a job: that job object's metadata.uid, which tells its results from
# those of a later job of the same name (JobInfo.uid, SnapshotInfo.job_uid)
ANN_JOB_UID = "dtrain.io/job-uid"
# on a job object: the name of its --snapshot-on-success snapshot once seen taken, so that a look after
# `snapshot delete` says it was deleted rather than taking another of what the volume holds now
ANN_SUCCESS_SNAPSHOT = "dtrain.io/success-snapshot"
ANN_PROCS_PER_POD = "dtrain.io/procs-per-pod"  # processes (ranks) each replica pod runs
ANN_SUSPENDED = "dtrain.io/suspended"  # the time of `dtrain suspend`: set with the job's suspend flag
ANN_NOTEBOOK_STOPPED = "kubeflow-resource-stopped"  # Kubeflow's stop of a Notebook (its UI, its culler)
ANN_SOURCE_SIZE = "dtrain.io/source-size"  # on a snapshot: size of the source PVC, for restores
ANN_SOURCE_CLASS = "dtrain.io/source-storage-class"
# On a volume or snapshot: a random token of the create request that made it, so that a create
# whose answer was lost can tell its own object from one of the same name made by someone else.
ANN_REQUEST = "dtrain.io/create-request"
ROLE_WORKER = "worker"
ROLE_SNAPSHOTTER = "snapshotter"
GPU_RESOURCE = "nvidia.com/gpu"
# the finalizer the API server puts on every PVC: deleted, a claim stays (Terminating) until no pod uses it
PVC_PROTECTION = "kubernetes.io/pvc-protection"

# Labels the Kubeflow Training Operator v1 puts on replica pods.
KF_REPLICA_TYPE = "training.kubeflow.org/replica-type"
KF_REPLICA_INDEX = "training.kubeflow.org/replica-index"
KF_JOB_NAME = "training.kubeflow.org/job-name"
# The Indexed Job under a Trainer v2 JobSet numbers its pods with this label.
JOB_COMPLETION_INDEX = "batch.kubernetes.io/job-completion-index"


@dataclass(frozen=True)
class Resource:
    group: str  # '' for the core API
    version: str
    plural: str
    kind: str
    success: str  # condition type that means the job succeeded
    install_hint: str = ""  # how to get the API onto a cluster that lacks it
    namespaced: bool = True  # False for cluster-wide kinds (Namespace, Node, VolumeSnapshotClass)

    @property
    def api_version(self) -> str:
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def full_name(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


TRAINING_OPERATOR_HINT = (
    "install the Kubeflow Training Operator v1: kubectl apply --server-side -k "
    "'github.com/kubeflow/training-operator.git/manifests/overlays/standalone?ref=v1.9.3' "
    "(see docs/kubernetes.md)")
TRAINER_V2_HINT = (
    "install Kubeflow Trainer v2 and its runtimes: kubectl apply --server-side -k "
    "'github.com/kubeflow/trainer.git/manifests/overlays/manager?ref=v2.2.0', then "
    "'.../manifests/overlays/runtimes?ref=v2.2.0' (or use the v1 Training Operator: trainer='v1')")
SNAPSHOT_HINT = (
    "install the CSI snapshot CRDs and controller from kubernetes-csi/external-snapshotter "
    "(client/config/crd and deploy/kubernetes/snapshot-controller) and a CSI driver with snapshot "
    "support (see docs/kubernetes.md)")

NOTEBOOK_HINT = (
    "install the Kubeflow Notebook controller (part of a Kubeflow platform install, "
    "github.com/kubeflow/kubeflow/components/notebook-controller; see docs/kubernetes.md)")

BATCH_JOB = Resource("batch", "v1", "jobs", "Job", "Complete")
PYTORCH_JOB = Resource("kubeflow.org", "v1", "pytorchjobs", "PyTorchJob", "Succeeded", TRAINING_OPERATOR_HINT)
MPI_JOB = Resource("kubeflow.org", "v1", "mpijobs", "MPIJob", "Succeeded", TRAINING_OPERATOR_HINT)
TRAIN_JOB = Resource("trainer.kubeflow.org", "v1alpha1", "trainjobs", "TrainJob", "Complete", TRAINER_V2_HINT)
VOLUME_SNAPSHOT = Resource("snapshot.storage.k8s.io", "v1", "volumesnapshots", "VolumeSnapshot", "", SNAPSHOT_HINT)
VOLUME_SNAPSHOT_CLASS = Resource("snapshot.storage.k8s.io", "v1", "volumesnapshotclasses",
                                 "VolumeSnapshotClass", "", SNAPSHOT_HINT, namespaced=False)
STORAGE_CLASS = Resource("storage.k8s.io", "v1", "storageclasses", "StorageClass", "", namespaced=False)
# VolumeAttributesClass: v1alpha1 in 1.29-1.30 (feature gate), v1beta1 from 1.31, v1 from 1.34; asked newest first
VOLUME_ATTRIBUTES_CLASSES = tuple(Resource("storage.k8s.io", v, "volumeattributesclasses", "VolumeAttributesClass",
                                           "", namespaced=False) for v in ("v1", "v1beta1", "v1alpha1"))
ANN_DEFAULT_CLASS = ("storageclass.kubernetes.io/is-default-class", "storageclass.beta.kubernetes.io/is-default-class")
NOTEBOOK = Resource("kubeflow.org", "v1", "notebooks", "Notebook", "", NOTEBOOK_HINT)  # never succeeds: runs until deleted
JOB_RESOURCES = {r.kind: r for r in (BATCH_JOB, PYTORCH_JOB, MPI_JOB, TRAIN_JOB, NOTEBOOK)}


def project_labels(project: str, config: KubernetesConfig) -> dict[str, str]:
    labels = {LABEL_PROJECT: project, LABEL_MANAGED: "dtrain"}
    if config.runai_labels:
        # What Run:AI puts on its workloads; only Run:AI's scheduler and UI read them.
        labels.update({"project": project, "runai/queue": project})
    return labels


def job_labels(spec: JobSpec, config: KubernetesConfig, role: str = ROLE_WORKER) -> dict[str, str]:
    """dtrain's labels, after the spec's own (which may not use dtrain's prefixes: JobSpec refuses them)."""
    return {**spec.labels, LABEL_JOB: spec.name, LABEL_ROLE: role, **project_labels(spec.project, config)}


def metadata(name: str, namespace: str | None, labels: dict[str, str],
             annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if namespace is not None:
        meta["namespace"] = namespace
    meta["labels"] = dict(labels)
    if annotations:
        meta["annotations"] = dict(annotations)
    return meta


def job_selector(name: str | None = None) -> str:
    """Label selector of a job's pods and objects (all dtrain jobs when name is None)."""
    who = f"{LABEL_JOB}={name}" if name else LABEL_JOB
    return f"{who},{LABEL_ROLE}={ROLE_WORKER}"


def success_snapshot_name(job: str, uid: str | None = None) -> str:
    """The one snapshot `--snapshot-on-success` takes, fixed so the backend and the watcher agree:
    `<job>-success`, or, where an earlier run of that name left one (the job was deleted and submitted
    again), `<job>-success-<uid>` with the first 8 characters of this run's metadata.uid."""
    return f"{job}-success-{uid[:8]}" if uid else f"{job}-success"


def watcher_name(job: str) -> str:
    return f"{job}-snap"


SNAPSHOTTER_ACCOUNT = "dtrain-snapshotter"  # ServiceAccount, Role and RoleBinding name


def escape_dollars(args: list[str]) -> list[str]:
    """Kubernetes expands $(VAR) in command, args and env values; '$$' keeps a '$(' literal."""
    return [re.sub(r"\$(?=[($])", "$$", a) for a in args]


def pod_reader_fix(namespace: str) -> str:
    """How an admin lets an account read a namespace's pods and their logs (describe's processes,
    `logs`, `wait`'s stuck pods): one Role and its RoleBinding."""
    return (f"ask an admin to run 'kubectl create role dtrain-pod-reader -n {namespace} --verb=get,list "
            f"--resource=pods,pods/log' and 'kubectl create rolebinding dtrain-pod-reader -n {namespace} "
            f"--role=dtrain-pod-reader --user=USER' (or --serviceaccount=NAMESPACE:NAME) for this account")


def node_reader_fix() -> str:
    """How an admin lets an account see which pods hold each node's GPUs (`dtrain nodes`, as `kubectl
    describe node` reads them): list on pods across the cluster, one ClusterRole and its binding."""
    return ("ask an admin to run 'kubectl create clusterrole dtrain-node-reader --verb=list --resource=pods' and "
            "'kubectl create clusterrolebinding dtrain-node-reader --clusterrole=dtrain-node-reader --user=USER' "
            "(or --serviceaccount=NAMESPACE:NAME) for this account")


def job_writer_fix(namespace: str) -> str:
    """How an admin lets an account run --snapshot-on-success's watcher, a batch Job, beside a kind it may
    run without batch rights (MPIJob, PyTorchJob, TrainJob): one Role and its RoleBinding (get: the submit's
    check that the name is free; delete: a failed submit's clean-up)."""
    return (f"ask an admin to run 'kubectl create role dtrain-job-writer -n {namespace} --verb=get,create,delete "
            f"--resource=jobs.batch' and 'kubectl create rolebinding dtrain-job-writer -n {namespace} "
            f"--role=dtrain-job-writer --user=USER' (or --serviceaccount=NAMESPACE:NAME) for this account")

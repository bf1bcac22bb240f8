"""How dtrain talks to one Kubernetes cluster: a frozen, keyword-only config, validated on creation."""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

from dtrain.errors import SpecError
from dtrain.names import CLASS_RE, MIN_VOLUME, check_storage_class, check_subdomain, parse_least_size, shown
from dtrain.spec import check_image, check_name

NAMESPACE_PREFIX = "dtrain-"  # project P lives in namespace dtrain-P (Run:AI: runai-P)
_NAMESPACE_RE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?\Z")
_ACCESS_MODES = ("ReadWriteMany", "ReadWriteOnce", "ReadOnlyMany", "ReadWriteOncePod")
INT32_MAX = 2**31 - 1  # the API server refuses a larger value in an int32 field (replicas, ttl)
MAX_REQUEST_TIMEOUT = 3600.0


def namespace_for(project: str) -> str:
    """The namespace of a dtrain project."""
    return NAMESPACE_PREFIX + check_name(project, "project")


@dataclass(frozen=True, kw_only=True)
class KubernetesConfig:
    """Everything the Kubernetes backend needs besides the job spec itself."""

    project: str = "default"  # project whose namespace get/list/logs/delete and volumes use
    namespace: str | None = None  # fixed namespace for every project (e.g. an existing runai-team)
    context: str | None = None  # kubeconfig context; None: the current one, or in-cluster config
    kubeconfig: str | None = None  # kubeconfig file; None: $KUBECONFIG or ~/.kube/config
    image: str | None = None  # image for jobs that give no --image
    # image for notebooks that give no --image: a notebook-server image that starts Jupyter itself
    # (a training image, `image`, starts none: the Notebook's pod would exit, never serve)
    notebook_image: str | None = None
    image_pull_policy: str | None = None  # pull policy for jobs that give none
    image_pull_secrets: tuple[str, ...] = ()  # pull secrets added to every job's
    storage_class: str | None = None  # StorageClass of `volume create` without one; None: cluster default
    access_modes: tuple[str, ...] = ("ReadWriteMany",)  # PVC modes: RWX so pods on any node share a volume
    snapshot_class: str = "dtrain-snapshots"  # VolumeSnapshotClass of every snapshot
    snapshot_driver: str = "csi.trident.netapp.io"  # CSI driver named when rendering that class
    snapshot_deletion_policy: str = "Delete"  # Delete or Retain the storage snapshot with the object
    ttl_seconds_after_finished: int | None = None  # delete finished jobs after this; None keeps them
    clean_pod_policy: str = "None"  # Kubeflow cleanPodPolicy; None keeps finished pods and their logs
    trainer: str = "v1"  # 'v1': PyTorchJob/MPIJob (Training Operator); 'v2': TrainJob (Trainer v2)
    trainer_runtime: str = "torch-distributed"  # ClusterTrainingRuntime that TrainJobs refer to
    trainer_node: str = "node"  # replicated job and container name inside that runtime
    gpus_per_node: int | None = None  # GPUs of one node; lets GPU jobs pack processes per pod
    elastic_min_replicas: int | None = None  # set to render a PyTorchJob elasticPolicy
    elastic_max_replicas: int | None = None  # upper bound of the elastic range; None: the replica count
    master_port: int = 29500  # MASTER_PORT handed to MPI ranks
    # Open MPI flags after `mpirun -np N`; --tag-output lets `logs --rank` split the launcher's log.
    mpirun_args: tuple[str, ...] = ("--tag-output", "--allow-run-as-root", "-bind-to", "none", "-map-by", "slot")
    scheduler_name: str | None = None  # pod schedulerName (e.g. runai-scheduler, volcano)
    shm_size: str | None = None  # sizeLimit of the in-memory /dev/shm; None: bounded by pod memory
    snapshot_watcher: bool = True  # also snapshot on success from inside the cluster (a small Job)
    watcher_image: str = "bitnami/kubectl:1.30"  # image with kubectl and sh for that Job
    create_namespace: bool = True  # create the project namespace on first submit
    # Kubeflow's gateway, where notebook N of namespace S is served at /notebook/S/N/ (e.g. after
    # kubectl port-forward svc/istio-ingressgateway -n istio-system 8080:80).
    notebook_gateway: str = "http://localhost:8080"
    runai_labels: bool = True  # add Run:AI's 'project' and 'runai/queue' labels (inert elsewhere)
    # Seconds to wait for one answer of the API server (it ends a request itself after 60 s).
    request_timeout: float = 90.0

    def __post_init__(self):
        self._check_types()
        check_name(self.project, "project")
        if self.namespace is not None and not _NAMESPACE_RE.match(self.namespace):
            raise SpecError(f"invalid namespace {self.namespace!r}: use 1-63 lower-case letters, digits or '-'")
        object.__setattr__(self, "image_pull_secrets", tuple(self.image_pull_secrets))
        object.__setattr__(self, "access_modes", tuple(self.access_modes))
        object.__setattr__(self, "mpirun_args", tuple(self.mpirun_args))
        self._check_choices()
        self._check_numbers()
        self._check_names()

    def _check_names(self):
        """Names that go verbatim into manifests, checked by the rule Kubernetes applies to each
        field: an API server (or the kubelet) refuses the job otherwise, or it waits for good."""
        for field, value, example in (("scheduler_name", self.scheduler_name, "runai-scheduler"),
                                      ("snapshot_class", self.snapshot_class, "dtrain-snapshots")):
            if value is not None:
                check_subdomain(value, f"Kubernetes {field}", example, term=" (a DNS-1123 subdomain)")
        # The CSI rule: at most 63 characters; Kubernetes checks it as a subdomain, any case.
        driver = self.snapshot_driver
        if len(driver) > 63 or not CLASS_RE.fullmatch(driver.lower()):
            raise SpecError(f"invalid Kubernetes snapshot_driver {shown(driver)}: use a CSI driver name of at most "
                            f"63 letters, digits, '-' or '.', each '.'-separated part starting and ending with a "
                            f"letter or digit, e.g. csi.trident.netapp.io")
        if self.storage_class is not None:
            try:
                check_storage_class(self.storage_class)
            except SpecError as err:
                raise SpecError(f"{err} (Kubernetes setting storage_class)") from None
        for secret in self.image_pull_secrets:
            check_name(secret, "Kubernetes image_pull_secrets secret")
        check_image(self.watcher_image, "Kubernetes watcher_image", required=True)
        if self.notebook_image is not None:
            check_image(self.notebook_image, "Kubernetes notebook_image", required=True)

    def _check_types(self):
        """config.yaml may hold any YAML type: a word where a list goes would be split into letters
        (image_pull_secrets: regcred became secrets r, e, g, c, d), and a quoted "false" is true."""
        for field in fields(self):
            value, kind = getattr(self, field.name), str(field.type)
            if kind == "bool" and not isinstance(value, bool):
                raise SpecError(f"invalid Kubernetes {field.name} {value!r}: use true or false")
            if kind in ("str", "str | None") and not (isinstance(value, str) or (value is None and "None" in kind)):
                raise SpecError(f"invalid Kubernetes {field.name} {value!r}: use a string")
            if kind == "tuple[str, ...]" and not (isinstance(value, (list, tuple))
                                                   and all(isinstance(v, str) for v in value)):
                example = ", ".join(value.split()) if isinstance(value, str) else "..."
                raise SpecError(f"invalid Kubernetes {field.name} {value!r}: use a list of strings, "
                                f"e.g. {field.name}: [{example}]")

    def _check_choices(self):
        choices = {
            "trainer": (self.trainer, ("v1", "v2")),
            "clean_pod_policy": (self.clean_pod_policy, ("None", "Running", "All")),
            "snapshot_deletion_policy": (self.snapshot_deletion_policy, ("Delete", "Retain")),
            "image_pull_policy": (self.image_pull_policy, (None, "Always", "IfNotPresent", "Never")),
        }
        for field, (value, allowed) in choices.items():
            if value not in allowed:
                shown = ", ".join(str(a) for a in allowed if a is not None)
                raise SpecError(f"invalid Kubernetes {field} {value!r}: use one of {shown}")
        bad = [m for m in self.access_modes if m not in _ACCESS_MODES]
        if not self.access_modes or bad:
            raise SpecError(f"invalid access_modes {self.access_modes!r}: use some of {', '.join(_ACCESS_MODES)}")

    def _check_numbers(self):
        bounded = {"gpus_per_node": (self.gpus_per_node, 1, INT32_MAX),
                   "elastic_min_replicas": (self.elastic_min_replicas, 1, INT32_MAX),
                   "elastic_max_replicas": (self.elastic_max_replicas, 1, INT32_MAX),
                   "master_port": (self.master_port, 1, 65535),
                   "ttl_seconds_after_finished": (self.ttl_seconds_after_finished, 0, INT32_MAX)}
        for field, (value, low, high) in bounded.items():
            whole = isinstance(value, int) and not isinstance(value, bool)
            if value is not None and not (whole and low <= value <= high):
                raise SpecError(f"invalid Kubernetes {field} {value!r}: use a whole number from {low} to {high}")
        timeout = self.request_timeout
        if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout <= MAX_REQUEST_TIMEOUT:
            raise SpecError(f"invalid Kubernetes request_timeout {timeout!r}: use seconds above 0 and at most "
                            f"{MAX_REQUEST_TIMEOUT:g}, e.g. 90")
        if self.elastic_max_replicas is not None and self.elastic_min_replicas is None:
            raise SpecError("elastic_max_replicas needs elastic_min_replicas: set both, e.g. 1 and 4")
        if (self.elastic_min_replicas and self.elastic_max_replicas
                and self.elastic_max_replicas < self.elastic_min_replicas):
            raise SpecError(f"elastic_max_replicas {self.elastic_max_replicas} is below "
                            f"elastic_min_replicas {self.elastic_min_replicas}")
        if self.shm_size is not None:
            # 'shm_size: 16' is a /dev/shm of 16 bytes, where a DataLoader worker's first batch dies of
            # a bus error: under 1Mi is a missing unit, refused as a volume's size is
            parse_least_size(self.shm_size, "shm_size", minimum=MIN_VOLUME, example="16Gi")

    def namespace_of(self, project: str | None = None) -> str:
        """Where a project's jobs, volumes and snapshots live."""
        return self.namespace or namespace_for(project or self.project)

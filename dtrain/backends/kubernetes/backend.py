"""KubernetesBackend: dtrain's verbs on a cluster, through the official `kubernetes` client.

    dtrain                  Kubernetes
    project P               namespace dtrain-P (config.namespace overrides); GPU quota: a ResourceQuota
    job                     batch/v1 Job, kubeflow.org/v1 PyTorchJob or MPIJob, or a Trainer v2 TrainJob
    process (rank)          a replica pod, or one of the k ranks a packed pod runs
    status                  job conditions + pods -> Pending/Running/Succeeded/Failed/Deleted
    suspend / resume        runPolicy.suspend (spec.suspend: Job, TrainJob) + dtrain.io/suspended;
                            a Notebook's kubeflow-resource-stopped annotation
    logs                    the pods' logs (timestamps=True; follow streams)
    volume                  PersistentVolumeClaim (ReadWriteMany)
    snapshot                snapshot.storage.k8s.io/v1 VolumeSnapshot of a PVC
    restore --to NEW        a new PVC whose dataSource is the VolumeSnapshot
    node GPUs               Node allocatable nvidia.com/gpu; allocated = requests of its pods not ended

Translation is pure (render.py, render_storage.py, status.py, logs.py); this module only moves
dicts through client.KubeApi and keeps the rules: volumes before the job, a name clash is a
ConflictError, a missing CRD names the operator to install, a deleted job reads Deleted while
its pods go. `wait` is the base class's. The verbs live in mixins of KubernetesBackend, one module
each: submit and its checks (submit.py), the snapshot watcher's account, Role and RoleBinding that
submit makes or repairs (watcher_rbac.py), reading and changing jobs (jobs.py), projects
(projects.py), nodes (nodes.py), the verbs that reach into pods, logs and exec (pod_verbs.py), and
those of volumes and snapshots (volumes.py).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable

from dtrain.backends.base import Backend
from dtrain.errors import BackendError

from .client import KubeApi
from .config import KubernetesConfig
from .jobs import JobVerbs
from .kubeconfig import client_from_config
from .nodes import NodeVerbs
from .pod_verbs import PodVerbs
from .projects import ProjectVerbs
from .submit import SubmitVerbs
from .volumes import VolumeVerbs
from .watcher_rbac import WatcherRbacVerbs


# The mixins of this package come before PodVerbs and VolumeVerbs, whose stubs (`...`) of the
# methods they use would otherwise shadow them.
class KubernetesBackend(SubmitVerbs, WatcherRbacVerbs, JobVerbs, ProjectVerbs, NodeVerbs, PodVerbs, VolumeVerbs,
                        Backend):
    """dtrain's backend for a Kubernetes cluster with the Kubeflow Training Operator."""

    name = "kubernetes"

    def __init__(self, config: KubernetesConfig | None = None, *, api_client: Any = None, exec_stream: Any = None,
                 command: Callable[[str], str] | None = None, projects: Iterable[str] = ()):
        """`api_client`: a kubernetes.client.ApiClient; None builds one from the kubeconfig on first use.
        `exec_stream(namespace, pod, command) -> exit code`: None uses the official client's stream API.
        `command(words)`: the `dtrain WORDS` a hint names for a job of this backend's project, so that
        it works as printed (the Client's adds `-p PROJECT` and `--backend` where they are needed).
        `projects`: the other projects config.yaml sends to this cluster; an account that may not list
        jobs (or namespaces) across the cluster gets theirs namespace by namespace."""
        self.config = config or KubernetesConfig()
        self.projects = tuple(dict.fromkeys([self.config.project, *projects]))
        self._api_client = api_client
        self._exec_stream = exec_stream
        self._api: KubeApi | None = None
        self._command = command

    def cmd(self, words: str) -> str:
        """`dtrain WORDS` as a hint names it (see `command`)."""
        return self._command(words) if self._command is not None else f"dtrain {words}"

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = KubeApi(self._api_client or client_from_config(self.config),
                                timeout=self.config.request_timeout)
        return self._api

    def _opened_problem(self) -> str | None:
        """The kubeconfig read (no request yet), as kubectl reads it before its first call: why no
        configuration is usable (none at KUBECONFIG and no in-cluster account, a broken file, a failed
        credential plugin); None once the client is made."""
        try:
            self.api
        except BackendError as err:
            return str(err)
        return None

    @property
    def namespace(self) -> str:
        return self.config.namespace_of()

    def _volume_project(self) -> str | None:
        """The PVCs are the namespace's: its project's jobs mount them, or every project's where a
        `namespace` setting puts them all in one."""
        return None if self.config.namespace else self.config.project

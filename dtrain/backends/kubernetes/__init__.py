"""The Kubernetes backend: Kubeflow PyTorchJob/MPIJob (or Trainer v2 TrainJob), PVCs, VolumeSnapshots.

Rendering (`render_job`) is pure and needs no client; `KubernetesBackend` imports the official
`kubernetes` client only when it first talks to a cluster.
"""

from .backend import KubernetesBackend
from .config import KubernetesConfig, namespace_for
from .render import render_job, render_workload
from .render_storage import render_restore, render_snapshot, render_snapshot_class

__all__ = ["KubernetesBackend", "KubernetesConfig", "namespace_for", "render_job", "render_workload",
           "render_restore", "render_snapshot", "render_snapshot_class"]

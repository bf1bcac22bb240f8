"""Nodes: each Node's allocatable GPUs (nvidia.com/gpu) and the pods holding them, dtrain's named
by job and project. A mixin of KubernetesBackend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dtrain.backends.base import GpuInfo, Listed, NodeInfo, Notice
from dtrain.spec import parse_size

from .client import NODE, POD, Forbidden
from .objects import GPU_RESOURCE, LABEL_JOB, LABEL_PROJECT
from .status import pod_gpus

if TYPE_CHECKING:
    from .client import KubeApi

# Pods that hold their node's GPUs: bound to a node and not ended (a Pending pod pulling its image
# holds them already; the scheduler counts it).
HOLDING_GPUS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


class NodeVerbs:
    """Mixed into KubernetesBackend, which provides api and the project namespaces."""

    if TYPE_CHECKING:
        api: KubeApi

        def _project_namespaces(self) -> list[tuple[str, str]]: ...

    def _nodes(self) -> Listed:
        nodes = self.api.list(NODE, None)
        pods, notices = self._pods_holding_gpus()
        held: dict[str, list[tuple[str | None, str | None]]] = {}  # node: (job, project) of each GPU held
        for pod in sorted(pods, key=_holder_order):
            node, labels = (pod.get("spec") or {}).get("nodeName"), pod["metadata"].get("labels") or {}
            if node:  # a pod not dtrain's holds its GPUs too, with no job of ours to name
                held.setdefault(node, []).extend([(labels.get(LABEL_JOB), labels.get(LABEL_PROJECT))] * pod_gpus(pod))
        out = []
        for node in nodes:
            meta, alloc = node["metadata"], (node.get("status") or {}).get("allocatable") or {}
            name = meta["name"]
            out.append(NodeInfo(name=name, gpus_allocatable=int(alloc.get(GPU_RESOURCE, 0)),
                                gpus_allocated=len(held.get(name, [])), cpus=_cpus(alloc.get("cpu")),
                                memory=parse_size(alloc["memory"]) if alloc.get("memory") else None,
                                gpus=_gpus(meta, int(alloc.get(GPU_RESOURCE, 0)), held.get(name, [])),
                                labels=dict(meta.get("labels") or {})))
        return Listed(sorted(out, key=lambda n: n.name), notices)

    def _pods_holding_gpus(self) -> tuple[list[dict], list[Notice]]:
        """The pods that hold a node's resources, cluster-wide; for an account that may not list
        pods across the cluster, those of the project namespaces it may read, and a notice saying so."""
        try:
            return self.api.list(POD, None, field_selector=HOLDING_GPUS), []
        except Forbidden as err:
            refused = err
        found, readable = [], []
        for _, namespace in self._project_namespaces():
            try:
                found += self.api.list(POD, namespace, field_selector=HOLDING_GPUS)
                readable.append(namespace)
            except Forbidden:
                continue
        said = (f"GPUs allocated count only the pods of namespace {', '.join(readable)}: {refused}" if readable
                else f"GPUs allocated unknown (shown as 0): {refused}")
        return found, [Notice(code="gpus-unknown", message=said)]



def _cpus(value: str | None) -> int | None:
    if not value:
        return None
    return int(value[:-1]) // 1000 if value.endswith("m") else int(float(value))


def _holder_order(pod: dict) -> tuple:
    """dtrain's pods first, by job and pod: which GPU index a job is shown on is stable across calls."""
    meta = pod["metadata"]
    job = (meta.get("labels") or {}).get(LABEL_JOB)
    return job is None, meta.get("namespace", ""), job or "", meta["name"]


def _gpus(meta: dict, count: int, held: list[tuple[str | None, str | None]]) -> tuple[GpuInfo, ...]:
    """The node's GPUs, the first len(held) given to the (job, project) holding them: the API counts a
    pod's nvidia.com/gpu requests, not which devices it got, so the indexes are dtrain's numbering."""
    # NVIDIA GPU feature discovery labels the product.
    product = (meta.get("labels") or {}).get("nvidia.com/gpu.product", "")
    held = held + [(None, None)] * (count - len(held))
    return tuple(GpuInfo(index=str(i), name=product, job=held[i][0], project=held[i][1]) for i in range(count))


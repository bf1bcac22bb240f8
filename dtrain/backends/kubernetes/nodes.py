"""Nodes: each Node's allocatable GPUs (nvidia.com/gpu) and the pods holding them, as `kubectl
describe node` counts them (the requests of its pods not ended): dtrain's named by job and project,
another workload's by its pod (NAMESPACE/NAME). Where this account may not list pods across the
cluster, a GPU none of the pods it read holds is unknown, never free. A mixin of KubernetesBackend.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dtrain.backends.base import GpuInfo, Listed, NodeInfo, Notice
from dtrain.spec import parse_size

from .client import NODE, POD, Forbidden
from .objects import GPU_RESOURCE, LABEL_JOB, LABEL_PROJECT, node_reader_fix
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
        held: dict[str, list[dict]] = {}  # node: who holds each GPU held (GpuInfo's job and project, or held_by)
        for pod in sorted(pods, key=_holder_order):
            node, meta = (pod.get("spec") or {}).get("nodeName"), pod["metadata"]
            labels = meta.get("labels") or {}
            if not node:
                continue
            holder = ({"job": labels[LABEL_JOB], "project": labels.get(LABEL_PROJECT)} if LABEL_JOB in labels
                      else {"held_by": f"{meta.get('namespace', '')}/{meta['name']}"})  # another workload's pod
            held.setdefault(node, []).extend([holder] * pod_gpus(pod))
        # Pods not all read (RBAC): a GPU no pod read holds may be another workload's, so it is not free.
        rest = {"unknown": True} if notices else {}
        out = []
        for node in nodes:
            meta, alloc = node["metadata"], (node.get("status") or {}).get("allocatable") or {}
            name = meta["name"]
            out.append(NodeInfo(name=name, gpus_allocatable=int(alloc.get(GPU_RESOURCE, 0)),
                                gpus_allocated=len(held.get(name, [])), cpus=_cpus(alloc.get("cpu")),
                                memory=parse_size(alloc["memory"]) if alloc.get("memory") else None,
                                gpus=_gpus(meta, int(alloc.get(GPU_RESOURCE, 0)), held.get(name, []), rest),
                                labels=dict(meta.get("labels") or {})))
        return Listed(sorted(out, key=lambda n: n.name), notices)

    def _pods_holding_gpus(self) -> tuple[list[dict], list[Notice]]:
        """The pods that hold a node's resources, cluster-wide, as `kubectl describe node` counts its
        allocated resources; for an account that may not list pods across the cluster, those of the
        project namespaces it may read, and one notice saying so and naming the right it lacks."""
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
        said = (f"GPUs allocated count only the pods of namespace {', '.join(readable)}: {refused}; the GPUs "
                f"none of them holds are shown unknown, not free" if readable
                else f"GPUs allocated unknown (shown as 0): {refused}; every GPU is shown unknown, not free")
        said += f"; to show them, {node_reader_fix()}"
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


def _gpus(meta: dict, count: int, held: list[dict], rest: dict) -> tuple[GpuInfo, ...]:
    """The node's GPUs, the first len(held) given to who holds them (a dtrain job and its project, or
    another workload's pod), the others `rest` (free, or unknown): the API counts a pod's nvidia.com/gpu
    requests, not which devices it got, so the indexes are dtrain's numbering."""
    # NVIDIA GPU feature discovery labels the product.
    product = (meta.get("labels") or {}).get("nvidia.com/gpu.product", "")
    held = held + [rest] * (count - len(held))
    return tuple(GpuInfo(index=str(i), name=product, **held[i]) for i in range(count))

"""The payloads of nodes and projects: GPUs and their samples, a project and its quota, a backend
forgotten, and the headers of their lists."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from dtrain.names import MAX_GPU_QUOTA
from dtrain.server.wire.common import NAME, MaybeCount, _In, _Out, _warning_header


class ProjectIn(_In):
    name: str = Field(pattern=NAME)
    gpu_quota: MaybeCount = Field(
        None, ge=0, le=MAX_GPU_QUOTA, description="set the GPU quota (null: leave it as it is)")
    no_gpu_quota: bool = Field(False, description="remove the GPU quota (with gpu_quota null)")


PROJECTS_WARNING = _warning_header("present when a backend could not be read and the list holds the "
                                   "other backends' projects, or a project's GPU quota or pods could not "
                                   "be read (Kubernetes RBAC: `gpu_quota` null, GPUs allocated counted from "
                                   "the running jobs' requests): `299 dtrain \"<why, and the fix>\"` "
                                   "(RFC 7234), one warning-value each, comma-separated")
PROJECT_MADE_WARNING = _warning_header("present when the project was created (or its quota set) but the projects "
                                       "could not be read back (Kubernetes RBAC: an account that may create "
                                       "namespaces and quotas but not list jobs): the record holds what was set, "
                                       "its jobs and GPUs not counted, `extra.unknown` saying why: "
                                       "`299 dtrain \"<why, and the fix>\"` (RFC 7234)")
NODES_WARNING = _warning_header("present when the pods that hold GPUs could not all be read (Kubernetes "
                                "RBAC: `gpus_allocated` counts only some namespaces' pods, or none): "
                                "`299 dtrain \"<why, and the fix>\"` (RFC 7234)")


class Gpu(BaseModel):
    index: str
    name: str
    memory_total: int | None
    memory_used: int | None
    utilization: float | None
    job: str | None
    project: str | None = Field(None, description="the project of the job holding it (its page's ?project=); "
                                                  "null when free, or when that job could not be read")
    held_by: str | None = Field(None, description="held by a workload not dtrain's: its pod, NAMESPACE/NAME "
                                                  "(Kubernetes); null when free or held by one of dtrain's jobs")
    unknown: bool = Field(False, description="whether it is held cannot be told (Kubernetes: pods this account "
                                             "may not list, as the Warning header says): not free")


class Node(BaseModel):
    name: str
    gpus_allocatable: int
    gpus_allocated: int
    cpus: int | None
    memory: int | None
    gpus: list[Gpu]
    labels: dict[str, str] = Field(default_factory=dict, description="the node's labels, what a job's "
                                   "node_selector matches")


class GpuSample(BaseModel):
    time: float
    node: str
    gpu: str
    backend: str | None = Field(None, description="the backend whose node it is (the default one): with `project` "
                                                  "and `job`, which job holds it")
    job: str | None
    project: str | None = Field(None, description="its job's project, as the backend knows it; null: held by none of "
                                                  "dtrain's jobs")
    held: bool | None = Field(None, description="held by one of dtrain's jobs or another workload; null where that "
                                                "cannot be told (Kubernetes: pods this account may not list)")
    utilization: float | None
    memory_used: int | None
    memory_total: int | None


class Project(BaseModel):
    model_config = ConfigDict(from_attributes=True)

    name: str
    backend: str
    gpu_quota: int | None
    gpus_allocated: int
    jobs: int
    running: int = Field(0, description="its jobs Running now")
    pending: int = Field(0, description="its jobs Pending (queued, or preempted and queued again)")
    terminating: bool = Field(False, description="Kubernetes: its namespace is being deleted (kubectl's "
                                                 "Terminating): nothing new may be made in it, and it goes once what "
                                                 "it holds is gone (extra.status says so too, for one release)")
    default: bool = Field(False, description="whether it is the default project (config.yaml's project, where a job "
                                             "given none goes): DELETE refuses it, as it refuses `default`")
    extra: dict[str, Any]


def project_out(p, default_project: str) -> Project:
    """ProjectInfo -> the wire, `default` said (the page marks it and offers no Delete the server refuses)."""
    return Project.model_validate(p).model_copy(update={"default": p.name == default_project})


def node_out(n) -> Node:
    """NodeInfo -> the wire (a GPU's `project`: its job's, as the backend knows it)."""
    return Node(name=n.name, gpus_allocatable=n.gpus_allocatable, gpus_allocated=n.gpus_allocated, cpus=n.cpus,
                memory=n.memory, gpus=[Gpu(index=g.index, name=g.name, memory_total=g.memory_total,
                                           memory_used=g.memory_used, utilization=g.utilization, job=g.job,
                                           project=g.project, held_by=g.held_by, unknown=g.unknown) for g in n.gpus],
                labels=dict(n.labels))


class ForgotBackend(_Out):
    """What POST /backends/{name}/forget did (`Client.forget_backend`, `dtrain config forget-backend`)."""
    backend: str
    still_asked: list[str] = Field(description="why a list of every project asks the backend still (config.yaml's "
                                               "settings for it, a project sent there, the default backend)")


class DeletedProject(_Out):
    """What DELETE /projects/{name} removed (`Client.delete_project`, `dtrain project delete`)."""
    name: str
    backend: str
    removed: list[str] = Field(description="what went, in words: its GPU quota; Kubernetes: its namespace, or "
                                           "dtrain's objects and labels in a namespace that stays")
    kept: str | None = Field(description="what stays and why (Kubernetes: a namespace another tool made, or one "
                                         "shared by projects); null: nothing")

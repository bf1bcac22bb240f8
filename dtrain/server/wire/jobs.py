"""The payloads of jobs: the submitted spec, the job record, its log lines, and the headers of
the job list."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, Field

from dtrain.server.wire.common import NAME, SIZE, STATUSES, Count, MaybeCount, Real, _In, _warning_header, total_count
from dtrain.spec import (MAX_CPU, MAX_GPU_PER_PROCESS, MAX_IDLE_TIMEOUT, MAX_PROCESSES, MAX_RESTARTS,
                         MAX_TOLERATION_SECONDS, MAX_TOLERATIONS, MIN_CPU, MIN_IDLE_TIMEOUT, TAINT_EFFECTS)


TaintEffect = Literal[("", *TAINT_EFFECTS)]  # type: ignore[valid-type]


class TolerationIn(_In):
    """A node taint the job's pods tolerate: a Kubernetes Toleration, `seconds` its tolerationSeconds
    (Run:AI's --toleration fields); checked by dtrain.spec.Toleration."""

    key: str = Field("", max_length=317, description="the taint's key ('' with operator Exists: every taint)")
    operator: Literal["Equal", "Exists"] = Field("Equal", description="Equal: the taint's value is `value`; "
                                                 "Exists: any value")
    value: str = Field("", max_length=63, description="the taint's value (operator Equal only)")
    effect: TaintEffect = Field("", description="the taint's effect ('': every effect)")
    seconds: MaybeCount = Field(None, ge=0, le=MAX_TOLERATION_SECONDS, description="effect NoExecute only: how "
                                "long a pod stays on a node once it is tainted (null: for ever)")


class SpecIn(_In):
    """A job, as `dtrain submit` takes it; the same fields as `dtrain.JobSpec`."""

    name: str = Field(pattern=NAME, description="job name: lower-case letters, digits, '-'")
    command: list[str] = Field(min_length=1, max_length=4096, description="the command and its arguments")
    processes: Count = Field(1, ge=1, le=MAX_PROCESSES, description="data-parallel processes")
    launcher: Literal["none", "torchrun", "mpi"] = "none"
    gpu: Count = Field(0, ge=0, le=MAX_GPU_PER_PROCESS, description="GPUs per process")
    cpu: Annotated[float | None, Real] = Field(None, ge=MIN_CPU, le=MAX_CPU, allow_inf_nan=False,
                              description="CPU threads per process")
    memory: str | None = Field(None, pattern=SIZE, max_length=32, description="memory per process, e.g. 8Gi")
    env: dict[str, str] = Field(default_factory=dict, description="environment variables")
    labels: dict[str, str] = Field(default_factory=dict, description="labels on the job's objects (Kubernetes labels, "
                                   "SageMaker tags), e.g. the pipeline run that submitted it")
    node_selector: dict[str, str] = Field(default_factory=dict, description="labels a node must have to run the "
                                          "job (Kubernetes nodeSelector; Run:AI's --node-type T: run.ai/type: T)")
    tolerations: list[TolerationIn] = Field(default_factory=list, max_length=MAX_TOLERATIONS,
                                            description="node taints the job's pods tolerate (Kubernetes "
                                            "tolerations; Run:AI's --toleration; local: accepted, no taints)")
    volumes: list[str] = Field(default_factory=list, max_length=64,
                               description="--pvc values: VOLUME:MOUNT[:ro|:rw] (an existing volume, read-write unless :ro) "
                               "or CLASS:SIZE:MOUNT[:rw] (a new one, read-write)")
    large_shm: bool = False
    working_dir: str | None = Field(None, max_length=4096)
    project: str | None = Field(None, pattern=NAME, description="default: the configured project")
    backend: Literal["local", "kubernetes", "sagemaker"] | None = None
    max_restarts: Count = Field(0, ge=0, le=MAX_RESTARTS)
    snapshot_on_success: str | None = Field(None, pattern=NAME)
    image: str | None = Field(None, max_length=1024)
    image_pull_policy: Literal["Always", "IfNotPresent", "Never"] | None = None
    image_pull_secrets: list[str] = Field(default_factory=list, max_length=64)
    notebook: bool = Field(False, description="an interactive Jupyter server (dtrain notebook): runs until deleted")
    idle_timeout: MaybeCount = Field(
        None, ge=MIN_IDLE_TIMEOUT, le=MAX_IDLE_TIMEOUT, description="notebook: seconds without kernel or terminal activity (requests do not count) before "
                          "it is stopped (null: never)")
    sagemaker: dict[str, Any] | None = Field(None, description="SageMaker options (docs/sagemaker.md): instance_type, "
                                             "channels, spot, hyperparameters (name: string, number or boolean, "
                                             "each kept as given and sent JSON-encoded, as the SageMaker SDK "
                                             "sends it), ...; checked by dtrain.spec_sagemaker.SageMakerOptions")


class Process(BaseModel):
    rank: int
    status: str
    exit_code: int | None
    devices: list[str]
    node: str | None
    pod: str | None = None


class Event(BaseModel):
    time: float
    status: str
    message: str


class DataSource(BaseModel):
    """`dtrain.backends.base.DataSource`: a snapshot a mounted volume held when the job started."""
    volume: str
    snapshot: str
    snapshot_deleted: bool = False
    volume_deleted: bool = False


class Job(BaseModel):
    name: str
    status: STATUSES
    backend: str
    project: str
    kind: str = Field(description="Train (one process), PyTorch (torchrun) or MPI")
    created: float
    uid: str | None = Field(None, description="unique per submit (Kubernetes metadata.uid, SageMaker "
                                              "TrainingJobArn@CreationTime): a name submitted again is a new job; "
                                              "null where unknown")
    started: float | None
    finished: float | None
    node: str | None
    gpus_requested: int
    gpus_allocated: int
    processes_running: int
    processes_pending: int
    restarts: int
    message: str
    snapshot: str | None
    snapshot_deleted: bool = Field(False, description="that snapshot was deleted since (Kubernetes: or another run "
                                   "of the name took it); `extra.snapshot_deleted` is a copy, kept for one release")
    source_snapshot: str | None
    data_sources: list[DataSource] = Field(description=(
        "the snapshots the job's data came from: one per mounted volume whose content was a snapshot's "
        "(restored from it, or its latest snapshot taken) when the job started"))
    spec: dict[str, Any]
    volumes: list[str] = Field(default_factory=list, description=(
        "the volumes it mounts (a new one by the name made for it), as `dtrain snapshot create` takes them"))
    processes: list[Process]
    events: list[Event]
    extra: dict[str, Any] = Field(default_factory=dict, description="backend-specific details, as `describe --json` "
                                                                    "shows them")


SUBMIT_WARNING = _warning_header("present when the job was submitted but a field of it is not used "
                                 "by its backend (an image on the local backend): "
                                 "`299 dtrain \"<what, and why>\"` (RFC 7234)")

# The job list's paging (GET /jobs?limit=&offset=)
TOTAL_COUNT = total_count("jobs")
JOBS_WARNING = _warning_header("present when a source of jobs could not be read and the list holds the "
                               "others only (SageMaker: AWS refused, the --local jobs are listed): "
                               "`299 dtrain \"<why, and the fix>\"` (RFC 7234)")


class LogLine(BaseModel):
    rank: int
    time: float | None
    text: str


class LogFailure(BaseModel):
    """The last item of a log read that failed part-way, after the lines that could be read (a pod
    that cannot start, after the other pods' lines): what `dtrain logs` prints after the lines."""

    error: str = Field(description="one line: what failed and how to fix it")
    kind: str = Field(description="the error class, as in every refusal")


LOG_ITEM = LogLine | LogFailure


def job_out(info) -> Job:
    """JobInfo -> the wire; `source_snapshot` comes from the backend's details when it has one."""
    spec = info.spec
    return Job(name=info.name, status=info.status.value, backend=info.backend, project=spec.project,
               kind=spec.kind, created=info.created, uid=info.uid, started=info.started, finished=info.finished,
               node=info.node, gpus_requested=spec.gpus_requested, gpus_allocated=info.gpus_allocated,
               processes_running=info.processes_running, processes_pending=info.processes_pending,
               restarts=info.restarts, message=info.message, snapshot=info.snapshot,
               snapshot_deleted=info.snapshot_deleted,
               source_snapshot=info.extra.get("source_snapshot"),
               data_sources=[DataSource(volume=d.volume, snapshot=d.snapshot, snapshot_deleted=d.snapshot_deleted,
                                        volume_deleted=d.volume_deleted) for d in info.data_sources],
               spec=spec.to_dict(), volumes=[m.volume for m in spec.resolved_volumes()],
               processes=[Process(rank=p.rank, status=p.status, exit_code=p.exit_code, devices=list(p.devices),
                                  node=p.node, pod=p.pod) for p in info.processes],
               events=[Event(time=e.time, status=e.status, message=e.message) for e in info.events],
               extra=info.extra)

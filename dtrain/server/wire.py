"""Every HTTP payload, in one module: pydantic lives here and nowhere else in dtrain.

Requests are checked twice on purpose: the models below reject wrong types and out-of-range
numbers with a 422 before anything runs, then the typed `JobSpec` (the same one the CLI and
the SDK build) applies dtrain's own rules and messages. Responses are built from the
client's frozen records by the `*_out` functions.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import Path, Query
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WrapValidator, create_model
from pydantic.fields import FieldInfo

from dtrain.names import (CLAIM_RE, CLASS_RE, MAX_GPU_QUOTA, MAX_OFFSET, MAX_PAGE, MAX_TIME, MIN_VOLUME, NAME_RE,  # noqa: F401
                          SIZE_RE, WrittenFloat, WrittenInt)
from dtrain.numbers import real_number, whole, whole_number
from dtrain.spec import (MAX_CPU, MAX_GPU_PER_PROCESS, MAX_IDLE_TIMEOUT, MAX_PROCESSES, MAX_RESTARTS,
                         MAX_TOLERATION_SECONDS, MAX_TOLERATIONS, MIN_CPU, MIN_IDLE_TIMEOUT, TAINT_EFFECTS)

STATUSES = Literal["Pending", "Running", "Succeeded", "Failed", "Deleted", "Suspended"]
NAME = NAME_RE.pattern  # names.py's rule, in the schema so that clients see it
SIZE = SIZE_RE.pattern
# A volume size as the API takes it: the part of the Kubernetes quantity grammar whose every value
# lies from 1Mi to 1Ei (names.parse_volume_size's range), so the schema promises no size the
# server then refuses: no leading zero, no milli or exponent forms, a whole part of at least the
# suffix's share of 1Mi (_LEAST: 1048576 bytes, 1049k, 2M) and no more digits than the suffix leaves
# room for (99999999999999999.9 bytes, 999.9Pi: each under 2**60).
_DIGITS = {"": 17, "k": 14, "K": 14, "Ki": 14, "M": 11, "Mi": 11, "G": 8, "Gi": 8, "T": 5, "Ti": 5, "P": 2, "Pi": 2}
_UNIT = {"": 1, "k": 10**3, "K": 10**3, "Ki": 2**10, "M": 10**6, "Mi": 2**20}  # the rest: 1Mi or more
_LEAST = {s: -(-MIN_VOLUME // _UNIT.get(s, MIN_VOLUME)) for s in _DIGITS}


def _at_least(least: int, digits: int) -> str:
    """A pattern of the whole numbers from `least` with at most `digits` digits, no leading zero."""
    text = str(least)
    forms = [text] + [f"{text[:i]}[{int(text[i]) + 1}-9][0-9]{{{len(text) - i - 1}}}"
                      for i in range(len(text)) if text[i] != "9"]
    if len(text) < digits:
        forms.append(f"[1-9][0-9]{{{len(text)},{digits - 1}}}")
    return "(?:" + "|".join(forms) + ")"


VOLUME_SIZE = "^(?:" + "|".join(f"{_at_least(_LEAST[s], n + 1)}(?:\\.[0-9]+)?{s}" for s, n in _DIGITS.items()) \
    + "|1Ei|1E)$"
CLASS = CLASS_RE.pattern
CLAIM = CLAIM_RE.pattern

JobName = Annotated[str, Path(pattern=NAME, description="a job name")]
NotebookName = Annotated[str, Path(pattern=NAME, description="a notebook name")]
VolumeName = Annotated[str, Path(pattern=NAME, description="a volume name")]
# what GET /volumes/{name} reads: also another tool's Kubernetes claim, by its full name ('data.v1')
ClaimName = Annotated[str, Path(pattern=CLAIM, max_length=253, description="a volume name, or on Kubernetes an "
                                "existing claim's full name (dots and all), as --pvc NAME:MOUNT takes it")]
SnapshotName = Annotated[str, Path(pattern=NAME, description="a snapshot name")]
# A route on one job: the job's project, as the CLI's -p on a job verb (`dtrain logs NAME -p team`)
SnapshotProject = Annotated[str | None, Query(pattern=NAME, description=(
    "list on that project's backend (config.yaml's project_backends; its namespace on Kubernetes), "
    "where its jobs keep their snapshots; with `job`, a job of another project is not found. Without "
    "it: the configured project's backend"))]
# A route on volumes or snapshots: the -p of `dtrain volume ...` and `dtrain snapshot ...`
StorageProject = Annotated[str | None, Query(pattern=NAME, description=(
    "on that project's backend (config.yaml's project_backends; its namespace on Kubernetes), where its "
    "volumes and its jobs' snapshots are, as `-p` on the CLI's volume and snapshot verbs. Without it: "
    "the configured project's backend"))]
# The lineage's: the volumes and snapshots of that backend (as StorageProject) and the jobs there that mount them
LineageProject = Annotated[str | None, Query(pattern=NAME, description=(
    "that project's lineage: the volumes and snapshots of its backend (config.yaml's project_backends; its "
    "namespace on Kubernetes), as `-p` on the CLI's volume and snapshot verbs, and its jobs there. Without "
    "it: the configured project's backend, with the jobs there that share its volumes (every project's "
    "locally, the namespace's on Kubernetes); a job of another backend is never joined to a volume here"))]
JobProject = Annotated[str | None, Query(pattern=NAME, description=(
    "the job's project, as `-p` on the CLI's job verbs: the job is looked for on that project's backend "
    "(config.yaml's project_backends; its namespace on Kubernetes), and a job of another project is not "
    "found. Without it: the configured project's backend, where a job of a project that config.yaml "
    "sends to another backend is not found"))]
JobBackend = Annotated[Literal["local", "kubernetes", "sagemaker"] | None, Query(description=(
    "the backend that holds the job, as `--backend` on the CLI's job verbs and `backend=` on the SDK's: local, "
    "kubernetes or sagemaker (422 for another name). Without it: "
    "the server's backend, else the job's project's, else the one backend a submit sent a job of that name to"))]
# what a name field names, for check_name's message when the pattern refuses it
NAMED = {"project": "project", "volume": "volume", "job": "job", "to": "volume", "snapshot_on_success": "volume",
         "jobs": "job", "notebooks": "notebook", "volumes": "volume", "snapshots": "snapshot", "projects": "project",
         "backends": "backend"}


def _as_typed(value, number):
    """`number` (the schema's reading of `value`) as `value` was typed where bodies.py kept its text
    (1e3, 1E3, 2.50): the spec's checks made across fields, and a backend's once the spec is built, name
    it so ("--processes 1e3 needs a launcher"); the stored spec holds the plain number."""
    return value if isinstance(value, (WrittenInt, WrittenFloat)) and value == number else number


def _count(value, handler):
    """JSON has one kind of number: 2.0 is the integer 2 (as JSON Schema's "integer" says, and as the
    flags read `--processes 2.0`: numbers.whole), 2.5 and 2.0000000000000001 are not."""
    value = whole(value)
    return _as_typed(value, handler(value))


Count = Annotated[int, WrapValidator(_count)]  # a count in a request body
MaybeCount = Annotated[int | None, WrapValidator(_count)]  # (its bounds reach the schema only so)
Real = WrapValidator(lambda value, handler: _as_typed(value, handler(value)))  # a body's cpu, kept as typed


def _query_whole(value):
    """A query's whole number read by the CLI flags' rule (numbers.whole_number): ?tail=1E3 is 1000, ?rank=1_0
    is 10, ?offset=5. is 5, as `--tail 1E3`, `--rank 1_0`, `--offset 5.`; what it refuses goes on as typed,
    for the check that names the parameter (app.py's _QUERY)."""
    return whole_number(value) if isinstance(value, str) else value


def _query_real(value):
    """A query's seconds read by the CLI flags' rule (numbers.real_number): float()'s, kept as typed."""
    return real_number(value) if isinstance(value, str) else value


def _query_typed(value, number):
    """A query's whole number that the schema took, as typed where it was typed otherwise (?rank=1E3): a
    refusal made once the job is read names it so, as it names `--rank 1E3`."""
    typed = _query_whole(value)
    return typed if isinstance(typed, int) and typed == number else number


QueryWhole = BeforeValidator(_query_whole)  # the metadata of every whole-number query parameter
QueryReal = BeforeValidator(_query_real)  # and of every one in seconds
QueryTyped = WrapValidator(lambda value, handler: _query_typed(value, handler(_query_whole(value))))  # ?rank=


class _In(BaseModel):
    """A request body: no unknown field, and no value converted from another type ("yes" is not a
    boolean, 1 not one either, "2" not a number), as a job file is read (dtrain.spec)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # but a Count takes 2.0 for 2


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
                               description="--pvc values: VOLUME:MOUNT[:ro] or CLASS:SIZE:MOUNT")
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


def _as_for_jobs(field: str, description: str | None = None) -> tuple[Any, FieldInfo]:
    """SpecIn's `field` (its type, bounds and default): a notebook takes it as a job does."""
    info = SpecIn.model_fields[field]
    return info.annotation, FieldInfo.merge_field_infos(info, description=description) if description else info


# `dtrain notebook NAME`: the fields its flags set, each checked as a job's (the route builds the spec
# with dtrain.spec.notebook_spec, as the CLI and Client.notebook do: one spec, its defaults there)
NotebookIn = create_model(
    "NotebookIn", __base__=_In,
    __doc__="A notebook, as `dtrain notebook start` takes it: JupyterLab as a job on the first volume.",
    name=_as_for_jobs("name", "notebook name: lower-case letters, digits, '-'"),
    volumes=_as_for_jobs("volumes", "--pvc values: VOLUME:MOUNT[:ro] or CLASS:SIZE:MOUNT; the first is Jupyter's "
                                    "root folder (e.g. data:/home/jovyan); none: a folder of the notebook's "
                                    "own (local backend)"),
    gpu=_as_for_jobs("gpu", "whole GPUs"), cpu=_as_for_jobs("cpu", "CPU threads"),
    memory=_as_for_jobs("memory", "memory, e.g. 8Gi"),
    image=_as_for_jobs("image", "notebook image (Kubernetes), e.g. a Kubeflow notebook-servers image"),
    idle_timeout=_as_for_jobs("idle_timeout", "seconds without kernel or terminal activity (requests do not "
                                              "count) before the notebook is suspended, its GPUs freed (null: "
                                              "never; local backend)"),
    node_selector=_as_for_jobs("node_selector"), tolerations=_as_for_jobs("tolerations"),
    project=_as_for_jobs("project"),
    backend=(Literal["local", "kubernetes"] | None, Field(None, description="default: the project's configured one")))


class NotebookUrl(BaseModel):
    name: str
    url: str = Field(description="where to open it, with its token where it has one (`dtrain notebook open`)")


class ProjectIn(_In):
    name: str = Field(pattern=NAME)
    gpu_quota: MaybeCount = Field(
        None, ge=0, le=MAX_GPU_QUOTA, description="set the GPU quota (null: leave it as it is)")
    no_gpu_quota: bool = Field(False, description="remove the GPU quota (with gpu_quota null)")


class Error(BaseModel):
    """Every refusal: the CLI's one-line message and the error class."""

    error: str
    kind: str


# The statuses any route may answer (app.STATUS and auth.Guard), in every route's schema: a client
# generated from the schema knows them all (a missing tool is a 503, a broken store a 507).
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Error, "description": "no token, or a wrong one (a server bound off loopback)"},
    421: {"model": Error, "description": "a Host header that is not a loopback name, on a loopback server"},
    404: {"model": Error}, 409: {"model": Error}, 422: {"model": Error},
    501: {"model": Error, "description": "the backend has no such verb"},
    502: {"model": Error, "description": "the backend (a cluster, AWS) failed"},
    503: {"model": Error, "description": "a tool missing here, too many open waits and streams, or the state "
                                         "database locked by another process for longer than its busy timeout"},
    507: {"model": Error, "description": "the volume store failed, or the disk refused a write (full, read-only)"}}
# ... and those of a route that changes something
CHANGES: dict[int | str, dict[str, Any]] = {
    **ERRORS, 403: {"model": Error, "description": "a --read-only server, or a change sent by a page of another site"},
    413: {"model": Error, "description": "a body over 8 MiB"}}


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


def _warning_header(description: str) -> dict:
    """The OpenAPI entry of a route's `Warning` response header (`wire.warn` sets it), present when
    `description` says."""
    return {"Warning": {"description": description, "schema": {"type": "string"}}}


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
SUBMIT_WARNING = _warning_header("present when the job was submitted but a field of it is not used "
                                 "by its backend (an image on the local backend): "
                                 "`299 dtrain \"<what, and why>\"` (RFC 7234)")

LOCATION = {"Location": {"description": "the new record's address, to GET: /api/v1/KIND/NAME?project=PROJECT "
                                        "(behind --root-path, under it)", "required": True, "schema": {"type": "string"}}}


def locate(request, response, kind: str, name: str, project: str | None) -> None:
    """A 201's Location: where the record made is read back (RFC 9110 15.3.2)."""
    query = f"?project={project}" if project else ""  # names and projects are URL-safe (the name rule)
    response.headers["location"] = f"{request.scope.get('root_path', '')}/api/v1/{kind}/{name}{query}"


# The job list's paging (GET /jobs?limit=&offset=)
TOTAL_COUNT = {"X-Total-Count": {"description": "the jobs that matched the filters, before `limit` and `offset`",
                                 "required": True, "schema": {"type": "integer", "minimum": 0}}}
JOBS_WARNING = _warning_header("present when a source of jobs could not be read and the list holds the "
                               "others only (SageMaker: AWS refused, the --local jobs are listed): "
                               "`299 dtrain \"<why, and the fix>\"` (RFC 7234)")


def warning_header(text: str) -> str:
    """An RFC 7234 Warning header value (code 299, persistent) carrying `text` on one line, in the
    ASCII a header can hold (the same words `dtrain list` prints as its warning)."""
    line = " ".join(text.split()).replace("\\", "\\\\").replace('"', '\\"')
    return '299 dtrain "' + line.encode("ascii", "replace").decode() + '"'


def warn(response, notices) -> None:
    """A call's notices (the warnings it returned with its result) in the response's Warning header,
    one warning-value each, comma-separated (RFC 7234); none: no header."""
    if notices:
        response.headers["warning"] = ", ".join(warning_header(n.message) for n in notices)


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
    job: str | None
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
    extra: dict[str, Any]


def job_out(info) -> Job:
    """JobInfo -> the wire; `source_snapshot` comes from the backend's details when it has one."""
    spec = info.spec
    return Job(name=info.name, status=info.status.value, backend=info.backend, project=spec.project,
               kind=spec.kind, created=info.created, uid=info.uid, started=info.started, finished=info.finished,
               node=info.node, gpus_requested=spec.gpus_requested, gpus_allocated=info.gpus_allocated,
               processes_running=info.processes_running, processes_pending=info.processes_pending,
               restarts=info.restarts, message=info.message, snapshot=info.snapshot,
               source_snapshot=info.extra.get("source_snapshot"),
               data_sources=[DataSource(volume=d.volume, snapshot=d.snapshot, snapshot_deleted=d.snapshot_deleted,
                                        volume_deleted=d.volume_deleted) for d in info.data_sources],
               spec=spec.to_dict(), volumes=[m.volume for m in spec.resolved_volumes()],
               processes=[Process(rank=p.rank, status=p.status, exit_code=p.exit_code, devices=list(p.devices),
                                  node=p.node, pod=p.pod) for p in info.processes],
               events=[Event(time=e.time, status=e.status, message=e.message) for e in info.events],
               extra=info.extra)


def node_out(n) -> Node:
    """NodeInfo -> the wire (a GPU's `project`: its job's, as the backend knows it)."""
    return Node(name=n.name, gpus_allocatable=n.gpus_allocatable, gpus_allocated=n.gpus_allocated, cpus=n.cpus,
                memory=n.memory, gpus=[Gpu(index=g.index, name=g.name, memory_total=g.memory_total,
                                           memory_used=g.memory_used, utilization=g.utilization, job=g.job,
                                           project=g.project, held_by=g.held_by, unknown=g.unknown) for g in n.gpus],
                labels=dict(n.labels))


# ---- volumes and snapshots ----------------------------------------------------------------------
class VolumeIn(_In):
    name: str = Field(pattern=NAME)
    size: str = Field("10Gi", pattern=VOLUME_SIZE, max_length=32,
                      description="a Kubernetes quantity from 1Mi to 1Ei, e.g. 100Gi")
    storage_class: str | None = Field(None, pattern=CLASS, max_length=253)


class VolumeUpdate(_In):
    """`dtrain volume update NAME --class C`: a volume moved to another storage class in place."""

    storage_class: str = Field(pattern=CLASS, max_length=253, description="local: a class of config.yaml's "
                               "storage_classes; Kubernetes: a VolumeAttributesClass")


class SnapshotIn(_In):
    volume: str = Field(pattern=NAME, description="the volume to snapshot")
    name: str | None = Field(None, pattern=NAME, description="default: <volume>-<time>")
    job: str | None = Field(None, pattern=NAME, description="link the snapshot to this job")


class RestoreTo(_In):
    """Restore into a new volume."""

    to: str = Field(pattern=NAME, description="the new volume to fill from the snapshot")
    in_place: Literal[False] = False
    storage_class: str | None = Field(None, pattern=CLASS, max_length=253, description="the new volume's storage "
                                      "class (`--class`); default: the class of the snapshot's volume")


class RestoreInPlace(_In):
    """Roll the snapshot's own volume back (refused while a job uses it)."""

    in_place: Literal[True]
    storage_class: None = Field(None, description="null or absent: an in-place restore keeps the volume's class "
                                "(change it with PATCH /volumes/{name}, or restore into a new volume)")


IN_PLACE_CLASS = ("invalid request: storage_class does not go with in_place: an in-place restore keeps the volume's "
                  "storage class; change it with PATCH /api/v1/volumes/NAME {\"storage_class\": CLASS}, or restore "
                  "into a new volume with {\"to\": NEW_VOLUME, \"storage_class\": CLASS}")
RESTORE_BODY = ('send {"to": "NEW_VOLUME"} to restore into a new volume, or {"in_place": true} to roll the '
                "snapshot's volume back (one of the two)")


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # built straight from the client's frozen records


class Volume(_Out):
    """`dtrain.VolumeInfo`; `extra` holds the backend's details (locally: path, uid, head_snapshot)."""

    name: str
    backend: str
    size: str
    size_bytes: int
    storage_class: str | None
    created: float
    status: str
    origin_snapshot: str | None
    job: str | None
    used_bytes: int | None = Field(None, description="allocated bytes of its files, as du counts them; null where "
                                   "the backend cannot tell (a PVC) or the verb did not measure (create, restore)")
    labels: dict[str, str]
    extra: dict[str, Any]


class StorageClass(_Out):
    """`dtrain.StorageClassInfo`: a performance tier volumes can use (`dtrain volume classes`)."""

    name: str
    backend: str
    kind: Literal["StorageClass", "VolumeAttributesClass"] = Field(
        description="Kubernetes: a VolumeAttributesClass is the tier `volume update --class` sets; local classes "
                    "are StorageClasses, for create and update alike")
    default: bool = Field(description="the class `volume create` without a class uses")
    root: str | None = Field(description="the folder its volumes live in (local)")
    provisioner: str | None = Field(description="Kubernetes: a StorageClass's provisioner, a "
                                                "VolumeAttributesClass's driverName")
    status: Literal["Ready", "NotMounted", "Unusable", "NotConfigured"] | None = Field(
        description="whether volumes can go there now (local: NotMounted, a folder used before that lost its mark; "
                    "Unusable, a folder that is a file, overlaps another or holds other files; NotConfigured, a "
                    "class volumes record that config.yaml no longer names); null where the backend cannot tell")
    message: str
    free_bytes: int | None
    total_bytes: int | None
    volumes: int = Field(description="volumes in it (Kubernetes: the project's PVCs)")
    extra: dict[str, Any]


class Snapshot(_Out):
    """`dtrain.SnapshotInfo`; `extra` locally: id, volume_uid, added_bytes, method."""

    name: str
    backend: str
    volume: str | None
    created: float
    ready: bool
    error: str | None
    job: str | None
    job_uid: str | None = Field(None, description="that job's uid when the snapshot was taken; null where unknown")
    earlier_run: bool = Field(False, description="the job now named `job` is a later submit of that name: this "
                                                 "snapshot holds an earlier run's results")
    job_spec: dict[str, Any] | None
    source_snapshot: str | None
    files: int | None
    bytes: int | None
    volume_size: str | None
    storage_class: str | None
    extra: dict[str, Any]


class ForgotBackend(_Out):
    """What POST /backends/{name}/forget did (`Client.forget_backend`, `dtrain config forget-backend`)."""
    backend: str
    still_asked: list[str] = Field(description="why a list of every project asks the backend still (config.yaml's "
                                               "settings for it, a project sent there, the default backend)")


class Freed(_Out):
    snapshot: str
    backend: str
    bytes: int | None
    pending: bool
    no_room: bool = Field(False, description="pending because the home disk is full: the next volume or snapshot "
                                             "list with room frees it")
    extra: dict[str, Any]


class Damage(BaseModel):
    object: str = Field(description="a content chunk's hash, or a snapshot's manifest id")
    problem: Literal["missing", "corrupt", "unreadable", "manifest"]
    hits: list[tuple[str, str]] = Field(description="(snapshot, path) pairs that need it; path '*': the whole snapshot")
    earlier: bool = Field(False, description="found so by an earlier verify, which took it out of the store; "
                                             "a snapshot of a volume still holding its content stores it again")


class VerifyReport(BaseModel):
    """`dtrain snapshot verify [NAME] --json`: the store re-hashed; `ok` false when anything is damaged."""

    snapshots: list[str]
    objects: int
    bytes: int
    damaged: list[Damage]
    garbage_objects: int = Field(description="leftovers of interrupted snapshots, removed first")
    garbage_bytes: int
    unlisted_manifests: int
    skipped: str | None = Field(None, description="what this verify left undone because the disk holding the home "
                                                  "folder is full or read-only (tidying; setting damaged objects "
                                                  "aside), and how to do it; null when nothing was")
    ok: bool


class Change(BaseModel):
    path: str = Field(description="relative to the volume; bytes of a name that are not UTF-8 written as \\xNN")
    kind: Literal["added", "removed", "modified"]
    fields: list[str] = []


class LineageNode(BaseModel):
    id: str = Field(description="kind:name; kind:name@OTHER for an earlier, deleted job or snapshot of a reused "
                                "name (the snapshot or volume that points at it)")
    kind: Literal["volume", "snapshot", "job", "jobs"] = Field(
        description="'jobs': the older jobs that only mounted a volume, folded into one node (jobs:VOLUME)")
    name: str
    status: str | None = Field(None, description="a job's status (none where the job was not read); 'gone' for a "
                                                 "deleted volume or snapshot")
    project: str | None = Field(None, description="a job's project (its page's ?project=), where its record or "
                                                  "its snapshot's says")
    count: int | None = Field(None, description="for kind 'jobs': how many jobs it stands for")


class LineageEdge(BaseModel):
    source: str
    target: str
    label: str


class Lineage(BaseModel):
    nodes: list[LineageNode]
    edges: list[LineageEdge]
    jobs_unread: int = Field(0, description="older jobs than the `jobs` newest read (not drawn, but a snapshot's "
                                            "job, without its status)")

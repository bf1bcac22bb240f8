"""The typed, frozen records every backend returns (see `dtrain.backends.base.Backend`), and the
rules of the job list's pages that every backend shares. `dtrain.backends.base` re-exports them all."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Iterable

from dtrain.names import status_refusal
from dtrain.spec import JobSpec

Progress = Callable[[int, int], None]  # (done, total) bytes or steps, as the CLI's progress bar takes it


class JobStatus(str, Enum):
    PENDING = "Pending"  # queued: waiting for devices, quota or its turn
    RUNNING = "Running"  # at least one process started
    SUCCEEDED = "Succeeded"  # every process exited 0
    FAILED = "Failed"  # a process failed and no restart is left, or the job was lost
    DELETED = "Deleted"  # stopped by the user
    SUSPENDED = "Suspended"  # stopped by the user (or an idle notebook's timeout) until resumed; holds no devices

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.DELETED)

    @property
    def suspendable(self) -> bool:
        """What `suspend` takes: a job that may run (queued or running)."""
        return self in (JobStatus.PENDING, JobStatus.RUNNING)

    @property
    def stopped(self) -> bool:
        """Nothing of the job runs, for now (Suspended) or for good (terminal): `logs -f` ends."""
        return self.terminal or self is JobStatus.SUSPENDED

    @property
    def listed_by(self) -> str:
        """The `dtrain` words that list a job in this status, for a hint: a Deleted one is not in a plain
        `dtrain list` (as the HTTP list, it shows deleted jobs only when asked)."""
        return "list --show-deleted" if self is JobStatus.DELETED else "list"

    def __str__(self) -> str:
        return self.value

    @classmethod
    def _missing_(cls, value):
        """`JobStatus('Done')`, `JobStatus(5)`: one SpecError line (a ValueError still) naming the statuses."""
        raise status_refusal(value, [s.value for s in cls])


def _plain(value):
    """`value` with every tuple a list, as JSON and the HTTP API give it (asdict keeps tuples)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class _Record:
    """A record whose `to_dict()` is its fields, tuples as lists: what `--json` and the HTTP API print."""

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))  # type: ignore[call-overload]


@dataclass(frozen=True, kw_only=True)
class ProcessInfo(_Record):
    """One rank (a replica pod on Kubernetes)."""

    rank: int  # global rank
    status: str  # Pending, Running, Succeeded, Failed; Stopped (deleted, suspended), Terminating (its job
    # stops it: preempted, suspended, deleted, and its process has not exited yet); Unknown (Kubernetes:
    # its pod may not be read)
    exit_code: int | None = None  # None while running
    devices: tuple[str, ...] = ()  # allocated GPU ids
    node: str | None = None  # host or node name
    pod: str | None = None  # the pod that runs it, as `--pod` names it (Kubernetes: ranks packed in one pod share
    # it; locally NAME-RANK); None while it has none, and on SageMaker


@dataclass(frozen=True, kw_only=True)
class DataSource(_Record):
    """A snapshot a job's data came from: one per volume the job mounts whose content was, when the
    job started, a snapshot's (restored from it, or the volume's latest snapshot taken), as a PVC's
    `dataSource` names the VolumeSnapshot it was made from. Recorded when the job starts, so a later
    change or delete does not rewrite it; whether the snapshot or volume was deleted since is told."""

    volume: str  # the mounted volume
    snapshot: str  # the snapshot its content was when the job started
    snapshot_deleted: bool = False  # that snapshot was deleted since (the lineage stays)
    volume_deleted: bool = False  # that volume was deleted since (or deleted and made again)


@dataclass(frozen=True, kw_only=True)
class Event(_Record):
    """One status change, with when and why."""

    time: float  # unix seconds
    status: str  # the status entered
    message: str = ""  # why


@dataclass(frozen=True, kw_only=True)
class JobInfo:
    """What every backend reports about a job."""

    name: str
    spec: JobSpec
    status: JobStatus
    backend: str
    created: float  # unix seconds
    # unique per submit (a Kubernetes object's metadata.uid, a SageMaker TrainingJobArn@CreationTime): a name
    # submitted again is a new job with a new uid; None where unknown (a local job of before uids)
    uid: str | None = None
    started: float | None = None
    finished: float | None = None
    node: str | None = None
    gpus_allocated: int = 0
    processes_running: int = 0
    processes_pending: int = 0
    processes: tuple[ProcessInfo, ...] = ()
    events: tuple[Event, ...] = ()
    restarts: int = 0
    message: str = ""
    snapshot: str | None = None  # snapshot taken on success
    # that snapshot was deleted since (Kubernetes: or another run of the name took it); `extra` keeps a copy
    # as 'snapshot_deleted' for one release (it was only there)
    snapshot_deleted: bool = False
    data_sources: tuple[DataSource, ...] = ()  # the snapshots its volumes' data came from, one per volume
    extra: dict[str, Any] = field(default_factory=dict)  # backend-specific details

    def __repr__(self) -> str:
        """Short, as a notebook cell shows it (the whole spec, events and details made it pages long): the
        name, status, backend and project, and each rank's status with its exit code once it has one;
        `to_dict()` holds the rest."""
        ranks = {p.rank: p.status + ("" if p.exit_code is None else f" ({p.exit_code})") for p in self.processes}
        return (f"JobInfo(name={self.name!r}, status={self.status.value!r}, backend={self.backend!r}, "
                f"project={self.spec.project!r}, processes={ranks!r})")

    def to_dict(self) -> dict[str, Any]:
        """The record as `--json` prints it: the same fields as the HTTP API's Job (server/wire/jobs.py)."""
        d = _plain(asdict(self))
        d["spec"] = self.spec.to_dict()
        d["status"] = self.status.value
        d.update(project=self.spec.project, kind=self.spec.kind, gpus_requested=self.spec.gpus_requested,
                 source_snapshot=self.extra.get("source_snapshot"),
                 volumes=[m.volume for m in self.spec.resolved_volumes()])
        return d


@dataclass(frozen=True, kw_only=True)
class Notice(_Record):
    """A warning of one call, returned with its result: the answer is usable but incomplete (a source
    of jobs or classes that could not be read, log lines that may be missing). The CLI prints each as
    one `dtrain: warning: MESSAGE` line on stderr, the HTTP API sends it in a `Warning` header."""

    code: str  # what kind: "jobs-unlisted", "projects-unlisted", "classes-unlisted", "logs-incomplete", "image-unused",
    # "quota-unknown" (a project's GPU quota not readable), "gpus-unknown" (GPUs allocated counted from part of the pods)
    # "role-updated", "binding-repaired", "shared-left" (a dry run's: the snapshot watcher's Role or changed
    # RoleBinding that submit would update or repair, or its ServiceAccount, Role or RoleBinding someone else made,
    # which submit leaves and the manifests leave out)
    # "gpus-injected" (`dtrain server` started with another DTRAIN_GPUS than some local GPU jobs were submitted with)
    # "pods-unread" (Kubernetes: a namespace's pods not readable, so its jobs' processes, GPUs and node unknown)
    message: str  # one line: what is missing, why, and how to fix it


class Listed(list):
    """A listing verb's records (a plain list to every caller) with the call's `notices`: the
    warnings of this call alone, never of another thread's."""

    __slots__ = ("notices",)

    def __init__(self, items: Iterable = (), notices: Iterable[Notice] = ()):
        super().__init__(items)
        self.notices: tuple[Notice, ...] = tuple(notices)


def notices_of(result) -> tuple[Notice, ...]:
    """The notices a hook returned with its records (none for a plain list)."""
    return result.notices if isinstance(result, (Listed, JobPage)) else ()


@dataclass(frozen=True, kw_only=True)
class JobPage:
    """One page of the job list, newest first: what the dashboard's Jobs table shows."""

    total: int  # the jobs that matched the filters, before paging
    jobs: tuple[JobInfo, ...]
    notices: tuple[Notice, ...] = ()  # the listing's warnings (a source of jobs not read)

    def to_dict(self) -> dict[str, Any]:
        """The page: each job as `JobInfo.to_dict` (the HTTP API's GET /jobs?limit=&offset= sends these jobs,
        `total` in its X-Total-Count header and the notices in Warning headers)."""
        return {"total": self.total, "jobs": [j.to_dict() for j in self.jobs],
                "notices": [n.to_dict() for n in self.notices]}


@dataclass(frozen=True, kw_only=True)
class Page:
    """One page of the notebooks, volumes or snapshots, newest first (`Client.page_volumes`, ...)."""

    total: int  # the records that matched the filters, before paging
    items: tuple  # JobInfo (notebooks), VolumeInfo or SnapshotInfo
    notices: tuple[Notice, ...] = ()  # the listing's warnings (a source of notebooks not read)

    def to_dict(self) -> dict[str, Any]:
        """The page: each record as its own `to_dict` gives it, as `JobPage.to_dict`."""
        return {"total": self.total, "items": [i.to_dict() for i in self.items],
                "notices": [n.to_dict() for n in self.notices]}


def page_of(records, limit: int | None, offset: int) -> Page:
    """`records` (each with `created` and `name`) as a page, in `newest_first`'s order and bounds."""
    page = newest_first(records, limit, offset)
    return Page(total=page.total, items=page.jobs, notices=page.notices)


@dataclass(frozen=True, kw_only=True)
class JobCount:
    """How many of a project's jobs are in one status (Prometheus' dtrain_jobs)."""

    project: str
    status: JobStatus
    jobs: int  # at least 1: a status no job is in is not listed

    def __repr__(self) -> str:
        """The status as its word, as a JobInfo shows it (not `<JobStatus.SUCCEEDED: 'Succeeded'>`)."""
        return f"JobCount(project={self.project!r}, status={self.status.value!r}, jobs={self.jobs!r})"

    def to_dict(self) -> dict[str, Any]:
        return {"project": self.project, "status": self.status.value, "jobs": self.jobs}


@dataclass(frozen=True, kw_only=True)
class JobSummary:
    """What a Prometheus scrape shows: how many jobs are in each status, and the records of the
    jobs that have not finished (Pending, Running, Suspended), not those of the whole history."""

    counts: tuple[JobCount, ...]  # by project, then status; Deleted too
    unfinished: tuple[JobInfo, ...]  # in the order they were submitted

    def to_dict(self) -> dict[str, Any]:
        """The counts (each status as its word) and each unfinished job as `JobInfo.to_dict`."""
        return {"counts": [c.to_dict() for c in self.counts], "unfinished": [j.to_dict() for j in self.unfinished]}


# SageMaker's TrainingJobStatus words, as a status filter reads them (sagemaker/status.py maps a job so): a
# Stopping job is still Running, a Stopped one Deleted; InProgress, one status, is Running (check_status), and as
# a filter (check_statuses) Pending too, as SageMaker's InProgress covers a job still Starting or Downloading
OTHER_STATUS_WORDS = {"inprogress": JobStatus.RUNNING, "completed": JobStatus.SUCCEEDED,
                      "stopping": JobStatus.RUNNING, "stopped": JobStatus.DELETED}


def check_status(status: JobStatus | str | None) -> JobStatus | None:
    """A status filter: a JobStatus, or its word in any case as the HTTP API, the CLI (Run:AI's `--status
    running`) or SageMaker (InProgress, Completed, Stopping, Stopped) give it; None: no filter."""
    if status is None or isinstance(status, JobStatus):
        return status
    if isinstance(status, str):
        word = status.lower()
        for known in JobStatus:
            if known.value.lower() == word:
                return known
        if word in OTHER_STATUS_WORDS:
            return OTHER_STATUS_WORDS[word]
    raise status_refusal(status, [s.value for s in JobStatus])


IN_PROGRESS = frozenset({JobStatus.PENDING, JobStatus.RUNNING})


def check_statuses(status: JobStatus | str | frozenset[JobStatus] | None) -> frozenset[JobStatus] | None:
    """A status filter as the statuses it keeps: `check_status`'s one, but SageMaker's InProgress (any case)
    keeps Pending and Running; a frozenset (one this returned) as it is; None: no filter."""
    if isinstance(status, frozenset) and status and all(isinstance(s, JobStatus) for s in status):
        return status
    if isinstance(status, str) and status.lower() == "inprogress":
        return IN_PROGRESS
    one = check_status(status)
    return None if one is None else frozenset({one})


def newest_first(jobs, limit: int | None, offset: int) -> JobPage:
    """`jobs` as a page: newest first (by creation time, then name, so that pages never overlap
    while nothing is submitted), `offset` skipped, at most `limit` kept; `total` counts them all;
    the notices of `jobs` (a `Listed`) kept."""
    notices = notices_of(jobs)
    jobs = sorted(jobs, key=lambda j: (j.created, j.name), reverse=True)
    return JobPage(total=len(jobs), jobs=tuple(jobs[offset:] if limit is None else jobs[offset:offset + limit]),
                   notices=notices)


@dataclass(frozen=True, kw_only=True)
class LogLine(_Record):
    rank: int  # which process wrote it
    time: float | None  # unix seconds when the line was captured
    text: str  # without the trailing newline


@dataclass(frozen=True, kw_only=True)
class GpuInfo(_Record):
    index: str  # device id as CUDA_VISIBLE_DEVICES takes it
    name: str = ""  # product name
    memory_total: int | None = None  # bytes
    memory_used: int | None = None  # bytes
    utilization: float | None = None  # percent, 0-100
    job: str | None = None  # job holding it, if any
    project: str | None = None  # that job's project (a link to it names it), where the backend knows it
    held_by: str | None = None  # held by a workload not dtrain's: its pod, NAMESPACE/NAME (Kubernetes)
    unknown: bool = False  # whether it is held cannot be told (Kubernetes: pods this account may not list): not free


@dataclass(frozen=True, kw_only=True)
class NodeInfo:
    name: str
    gpus_allocatable: int
    gpus_allocated: int
    cpus: int | None = None
    memory: int | None = None  # bytes
    gpus: tuple[GpuInfo, ...] = ()
    labels: Mapping[str, str] = field(default_factory=dict)  # what a job's node_selector matches

    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))


@dataclass(frozen=True, kw_only=True)
class ProjectInfo(_Record):
    """A project: a GPU quota and a queue (a row locally, a namespace on Kubernetes)."""

    name: str
    backend: str
    gpu_quota: int | None  # GPUs its jobs may hold together; None: no quota
    gpus_allocated: int  # GPUs its running jobs hold now
    jobs: int  # jobs recorded in it, any status
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the namespace
    running: int = 0  # its jobs Running now (Client.list_projects counts them)
    pending: int = 0  # its jobs Pending: queued, or preempted and queued again
    terminating: bool = False  # Kubernetes: its namespace is being deleted (kubectl's Terminating)


@dataclass(frozen=True, kw_only=True)
class DeletedProjectInfo(_Record):
    """What deleting a project did: what it removed, and what it left in place and why."""

    name: str  # the deleted project
    backend: str
    removed: tuple[str, ...]  # in words, e.g. ('GPU quota 2', 'namespace dtrain-team-a')
    kept: str | None = None  # what stays, and why (Kubernetes: a namespace dtrain did not make)


@dataclass(frozen=True, kw_only=True)
class VolumeInfo(_Record):
    """A volume: storage every process of a job mounts read-write (a folder locally, a PVC)."""

    name: str  # DNS-1123 name
    backend: str
    size: str  # requested capacity, a Kubernetes quantity ('10Gi'); the local backend does not enforce it
    size_bytes: int  # `size` in bytes
    storage_class: str | None  # 'local' locally; a StorageClass on Kubernetes (None: the cluster default)
    created: float  # unix seconds
    # Bound (usable), Pending (being provisioned), Lost, or Terminating (Kubernetes: deleted, kept until its pods stop)
    status: str = "Bound"
    origin_snapshot: str | None = None  # the snapshot it was restored from, if any
    # that snapshot was deleted since; `extra` keeps a copy for one release (it was only there)
    origin_snapshot_deleted: bool = False
    job: str | None = None  # the job it was made for (--pvc CLASS:SIZE:MOUNT), if known
    # what its files take on disk now (allocated blocks, as du); None where the backend cannot tell (a PVC)
    # or did not measure: the record a create, restore or move returns (get and list measure)
    used_bytes: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. the local folder, the namespace


@dataclass(frozen=True, kw_only=True)
class SnapshotInfo(_Record):
    """A point-in-time, read-only copy of a volume (a stored manifest, a VolumeSnapshot)."""

    name: str  # DNS-1123 name
    backend: str
    volume: str | None  # the volume it was taken of
    # that volume was deleted since (or deleted and made again); `extra` keeps a copy for one release
    volume_deleted: bool = False
    created: float  # unix seconds
    ready: bool = True  # False while the storage system is still taking it
    error: str | None = None  # why the storage system failed to take it
    job: str | None = None  # the job whose results it holds
    job_uid: str | None = None  # that job's uid (JobInfo.uid) when it was taken; None where unknown
    # True when the job named `job` now is another one (submitted again after a purge): the snapshot
    # holds an earlier run's results, not those of the job `describe job JOB` shows
    earlier_run: bool = False
    job_deleted: bool = False  # no job is named `job` now (deleted or purged, not submitted again)
    # that job's spec (JobSpec.to_dict()), where recorded; left out of the repr (a notebook cell showed
    # every field of it for each snapshot listed): to_dict() and the attribute hold it
    job_spec: Mapping[str, Any] | None = field(default=None, repr=False)
    source_snapshot: str | None = None  # the snapshot the job's data started from (lineage)
    # that snapshot was deleted since; `extra` keeps a copy for one release (it was only there)
    source_snapshot_deleted: bool = False
    files: int | None = None  # regular files it holds, where the backend can count them
    bytes: int | None = None  # bytes it holds (restoreSize on Kubernetes); None until known
    volume_size: str | None = None  # its volume's requested size then: the default size of a restore
    storage_class: str | None = None  # its volume's storage class then
    extra: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, kw_only=True)
class StorageClassInfo(_Record):
    """A storage class (a performance tier) volumes can be made in or moved to: a root folder
    locally; a StorageClass or a VolumeAttributesClass on Kubernetes (`kubectl get storageclass`)."""

    name: str
    backend: str
    kind: str = "StorageClass"  # Kubernetes: or VolumeAttributesClass (the tier `volume update --class` sets)
    default: bool = False  # the class `volume create` without --class uses
    root: str | None = None  # the folder its volumes live in (local)
    provisioner: str | None = None  # Kubernetes: the StorageClass's provisioner, a VolumeAttributesClass's driverName
    status: str | None = None  # Ready, NotMounted, Unusable, NotConfigured; None where the backend cannot tell
    message: str = ""  # why it is not Ready, or what first use does
    free_bytes: int | None = None  # free space on its disk, where the backend can tell
    total_bytes: int | None = None  # that disk's size
    volumes: int = 0  # volumes in it (Kubernetes: the project's PVCs)
    # local: `root` first, then every other folder its volumes live in (a class re-pointed since), each with how
    # many; empty where the backend has no folders (Kubernetes)
    folders: dict[str, int] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  # e.g. a StorageClass's parameters and reclaim policy


@dataclass(frozen=True, kw_only=True)
class FreedInfo(_Record):
    """What deleting a snapshot gave back."""

    snapshot: str  # the deleted snapshot
    backend: str
    bytes: int | None  # disk bytes freed now; None when the storage system frees them on its own
    pending: bool = False  # True when a running snapshot or restore delays the cleanup
    no_room: bool = False  # pending because the home disk is full: the next storage command with room frees it
    extra: dict[str, Any] = field(default_factory=dict)

"""The one backend interface and the typed records every backend returns.

Read `Backend`'s docstring first: it is the contract a new backend implements.
"""

from __future__ import annotations

import abc
import contextlib
import dataclasses
import logging
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from enum import Enum
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from dtrain.errors import (ConflictError, DtrainError, NotFoundError, NotReadyError, NotSupportedError, SpecError,  # noqa: F401
                           TimeoutError_, UnavailableError)  # (re-exported)
from dtrain.names import (EXEC_RUNNING_WAIT, MAX_TAIL, MAX_WAIT, check_gpu_quota, check_limit_bytes,  # noqa: F401
                          check_exec_rank, check_mounted_volume, check_name, check_page, check_rank, check_storage_class, check_tail, check_wait, near_name,
                          check_since, parse_volume_size, shown, since_refusal, status_refusal, with_near)
from dtrain.spec import JobSpec


# `cmd(words, project)`: `dtrain WORDS` as a printed hint names a follow-up command on a job of
# `project`, so that it works as printed (the Client's: `Client.command_for`, which adds -p PROJECT
# and --backend where config.yaml would send the bare command elsewhere).
HintCommand = Callable[[str, str], str]


def _plain_command(words: str, project: str) -> str:
    """A hint's command where no Client says how to name it: `dtrain WORDS` as typed."""
    return f"dtrain {words}"


if TYPE_CHECKING:  # the local store's own reports; only the local backend produces them
    from dtrain.storage.info import VerifyReport
    from dtrain.storage.manifest import Change

NOTEBOOK_POLL_S = 0.2  # how often notebook_url(wait=...) asks again while a notebook's Jupyter starts

Progress = Callable[[int, int], None]  # (done, total) bytes or steps, as the CLI's progress bar takes it
# Seconds in a row `wait` asks a backend again that does not answer: an API server's restart or a
# rollout of its load balancer takes a minute or two; a cluster down for longer is reported.
WAIT_OUTAGE = 300.0
EXEC_POLL_S = 0.2


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


@dataclass(frozen=True, kw_only=True)
class ProcessInfo:
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
class DataSource:
    """A snapshot a job's data came from: one per volume the job mounts whose content was, when the
    job started, a snapshot's (restored from it, or the volume's latest snapshot taken), as a PVC's
    `dataSource` names the VolumeSnapshot it was made from. Recorded when the job starts, so a later
    change or delete does not rewrite it; whether the snapshot or volume was deleted since is told."""

    volume: str  # the mounted volume
    snapshot: str  # the snapshot its content was when the job started
    snapshot_deleted: bool = False  # that snapshot was deleted since (the lineage stays)
    volume_deleted: bool = False  # that volume was deleted since (or deleted and made again)


@dataclass(frozen=True, kw_only=True)
class Event:
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
    data_sources: tuple[DataSource, ...] = ()  # the snapshots its volumes' data came from, one per volume
    extra: dict[str, Any] = field(default_factory=dict)  # backend-specific details

    def to_dict(self) -> dict[str, Any]:
        """The record as `--json` prints it: the same fields as the HTTP API's Job (server/wire.py)."""
        d = _plain(asdict(self))
        d["spec"] = self.spec.to_dict()
        d["status"] = self.status.value
        d.update(project=self.spec.project, kind=self.spec.kind, gpus_requested=self.spec.gpus_requested,
                 source_snapshot=self.extra.get("source_snapshot"),
                 volumes=[m.volume for m in self.spec.resolved_volumes()])
        return d


@dataclass(frozen=True, kw_only=True)
class Notice:
    """A warning of one call, returned with its result: the answer is usable but incomplete (a source
    of jobs or classes that could not be read, log lines that may be missing). The CLI prints each as
    one `dtrain: warning: MESSAGE` line on stderr, the HTTP API sends it in a `Warning` header."""

    code: str  # what kind: "jobs-unlisted", "projects-unlisted", "classes-unlisted", "logs-incomplete", "image-unused",
    # "quota-unknown" (a project's GPU quota not readable), "gpus-unknown" (GPUs allocated counted from part of the pods)
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


@dataclass(frozen=True, kw_only=True)
class JobCount:
    """How many of a project's jobs are in one status (Prometheus' dtrain_jobs)."""

    project: str
    status: JobStatus
    jobs: int  # at least 1: a status no job is in is not listed


@dataclass(frozen=True, kw_only=True)
class JobSummary:
    """What a Prometheus scrape shows: how many jobs are in each status, and the records of the
    jobs that have not finished (Pending, Running, Suspended), not those of the whole history."""

    counts: tuple[JobCount, ...]  # by project, then status; Deleted too
    unfinished: tuple[JobInfo, ...]  # in the order they were submitted


def check_status(status: JobStatus | str | None) -> JobStatus | None:
    """A status filter: a JobStatus, or its word as the HTTP API gives it; None: no filter."""
    if status is None or isinstance(status, JobStatus):
        return status
    try:
        return JobStatus(status)
    except (ValueError, TypeError):
        raise status_refusal(status, [s.value for s in JobStatus]) from None


def newest_first(jobs, limit: int | None, offset: int) -> JobPage:
    """`jobs` as a page: newest first (by creation time, then name, so that pages never overlap
    while nothing is submitted), `offset` skipped, at most `limit` kept; `total` counts them all;
    the notices of `jobs` (a `Listed`) kept."""
    notices = notices_of(jobs)
    jobs = sorted(jobs, key=lambda j: (j.created, j.name), reverse=True)
    return JobPage(total=len(jobs), jobs=tuple(jobs[offset:] if limit is None else jobs[offset:offset + limit]),
                   notices=notices)


def _plain(value):
    """`value` with every tuple a list, as JSON and the HTTP API give it (asdict keeps tuples)."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


class _Record:
    def to_dict(self) -> dict[str, Any]:
        return _plain(asdict(self))  # type: ignore[call-overload]


@dataclass(frozen=True, kw_only=True)
class LogLine(_Record):
    rank: int  # which process wrote it
    time: float | None  # unix seconds when the line was captured
    text: str  # without the trailing newline


@dataclass(frozen=True, kw_only=True)
class GpuInfo:
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


@dataclass(frozen=True, kw_only=True)
class VolumeInfo(_Record):
    """A volume: storage every process of a job mounts read-write (a folder locally, a PVC)."""

    name: str  # DNS-1123 name
    backend: str
    size: str  # requested capacity, a Kubernetes quantity ('10Gi'); the local backend does not enforce it
    size_bytes: int  # `size` in bytes
    storage_class: str | None  # 'local' locally; a StorageClass on Kubernetes (None: the cluster default)
    created: float  # unix seconds
    status: str = "Bound"  # Bound (usable), Pending (being provisioned) or Lost
    origin_snapshot: str | None = None  # the snapshot it was restored from, if any
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
    created: float  # unix seconds
    ready: bool = True  # False while the storage system is still taking it
    error: str | None = None  # why the storage system failed to take it
    job: str | None = None  # the job whose results it holds
    job_uid: str | None = None  # that job's uid (JobInfo.uid) when it was taken; None where unknown
    # True when the job named `job` now is another one (submitted again after a purge): the snapshot
    # holds an earlier run's results, not those of the job `describe job JOB` shows
    earlier_run: bool = False
    job_spec: Mapping[str, Any] | None = None  # that job's spec (JobSpec.to_dict()), where recorded
    source_snapshot: str | None = None  # the snapshot the job's data started from (lineage)
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


class Backend(abc.ABC):
    """What a backend is: the contract a new backend author reads first.

    * Public verbs are concrete here and are never overridden. Each one checks what every backend
      checks the same way (names, sizes, argument combinations) and calls one `_hook`. A backend
      subclasses :class:`Backend`, sets `name`, and fills in the hooks.
    * Required hooks (abstract): the job half, `_submit`, `_get`, `_list`, `_logs`, `_delete`,
      `_nodes`; the storage half, `_create_volume`, `_list_volumes`, `_get_volume`,
      `_delete_volume`, `_create_snapshot`, `_list_snapshots`, `_get_snapshot`,
      `_restore_snapshot`, `_delete_snapshot`.
    * Optional hooks: `_render` (dry run), `_suspend`/`_resume`, `_create_project`, `_list_projects`,
      `_verify_snapshot`, `_diff_snapshots`, `_exec`, `_render_volume`, `_render_snapshot`,
      `_render_restore`, `_list_storage_classes`. The default raises :class:`NotSupportedError`, which
      the CLI prints as one line naming the backend and the verb; callers never probe a backend
      with `getattr`/`hasattr`. `_purge` (forget a deleted job) defaults to
      doing nothing, `_page` (a page of the job list) to filtering `_list`, and `_names` (what a
      name that does not exist is matched against) to the names the listing hooks return.
    * Every hook returns the typed, frozen records of this module, never a dict: :class:`JobInfo`,
      :class:`JobPage`, :class:`LogLine`, :class:`NodeInfo`, :class:`ProjectInfo`,
      :class:`VolumeInfo`, :class:`SnapshotInfo`, :class:`FreedInfo`, :class:`StorageClassInfo`. Times are unix seconds
      (float) everywhere; sizes are bytes (int) next to the Kubernetes quantity the user typed.
      What only one backend knows goes in `extra` (a dict of plain values), printed by
      `describe` and `--json` as is.
    * Warnings travel with the call's result, never in attributes of the backend (threads share
      one): a listing hook (`_list`, `_list_projects`, `_nodes`, `_list_storage_classes`) returns a
      :class:`Listed` (a list with `notices`, :class:`Notice` records) where a source could not be
      read while others were; `page` keeps them in
      `JobPage.notices`; a `_logs` hook yields a `Notice` among its lines, which `logs` keeps in the
      :class:`LogStream` it returns.
    * Errors are :mod:`dtrain.errors` classes: NotFoundError for an unknown name, ConflictError
      for a clash, SpecError for a bad argument, BackendError for a refusing remote API. Each
      message names the bad value and how to fix it. A NotFoundError for a job, volume or snapshot
      that does not exist gets the near name (did you mean 'train-1'?) here, from `_names`.
    * `wait` exists once, here; `logs` checks the job exists before streaming.
    * The CLI, the SDK (`dtrain.Client`) and the HTTP API format these records once each; the
      backend's docstring maps our words (job, process, volume, snapshot, project) to its words.
    """

    name: str = "base"

    # ---- jobs ---------------------------------------------------------------------------
    def submit(self, spec: JobSpec) -> JobInfo:
        with self._volumes_named(spec):
            return self._submit(spec)

    def get(self, name: str) -> JobInfo:
        with self._named("job", name):
            return self._get(_existing(name, "job"))

    def list(self, *, project: str | None = None) -> Listed:
        """The jobs (of `project`; None: every project), with the listing's notices (a source of
        jobs it could not read while others were: `_list` returns a `Listed` carrying them)."""
        jobs = self._list_of(project)
        return Listed((j for j in jobs if project is None or j.spec.project == project), notices_of(jobs))

    def _list_of(self, project: str | None) -> list[JobInfo]:
        """`_list`, or less where a backend can read `project`'s jobs alone (Kubernetes: its namespace)."""
        return self._list()

    def page(self, *, project: str | None = None, status: JobStatus | str | None = None,
             limit: int | None = None, offset: int = 0) -> JobPage:
        """The jobs of `project` (None: every project) in `status` (None: every status but Deleted),
        newest first (by creation time, then name, so that pages never overlap while nothing is
        submitted), `offset` of them skipped and at most `limit` kept (None: the rest); `total`
        counts them all. The default filters `_list`; a backend that can page at its source (the
        local one's SQL) implements `_page` and builds only the page's records."""
        status = check_status(status)
        check_page(limit, offset)
        return self._page(project=project, status=status, limit=limit, offset=offset)

    def _page(self, *, project: str | None, status: JobStatus | None, limit: int | None, offset: int) -> JobPage:
        jobs = self.list(project=project)
        return newest_first(Listed((j for j in jobs if (j.status != JobStatus.DELETED if status is None
                                                        else j.status == status)), jobs.notices), limit, offset)

    def mounting_page(self, volumes: Iterable[str], *, project: str | None = None,
                      limit: int | None = None) -> JobPage | None:
        """The jobs of `project` (None: every project), not the Deleted ones, that mount one of `volumes` or
        recorded a snapshot as their data's source (the lineage's jobs), newest first, at most `limit`, with
        `total`; None where this backend cannot pick them at its source (the caller pages every job). The
        local backend asks its SQL, so that many jobs mounting nothing never hide one that mounts a volume."""
        check_page(limit, 0)
        return self._mounting_page(frozenset(volumes), project=project, limit=limit)

    def _mounting_page(self, volumes: frozenset[str], *, project: str | None, limit: int | None) -> JobPage | None:
        return None

    def summary(self, *, project: str | None = None) -> JobSummary:
        """The jobs of `project` (None: every project) counted by project and status, and the
        records of those not finished. The default reads `_list` once; the local backend counts in
        SQL and builds the unfinished jobs' records only."""
        counts, unfinished = self._summary(project=project)
        return JobSummary(counts=tuple(sorted(counts, key=lambda c: (c.project, c.status.value))),
                          unfinished=tuple(unfinished))

    def _summary(self, *, project: str | None) -> tuple[list[JobCount], list[JobInfo]]:
        jobs = self.list(project=project)
        counts = Counter((j.spec.project, j.status) for j in jobs)
        return ([JobCount(project=p, status=s, jobs=n) for (p, s), n in counts.items()],
                [j for j in jobs if not j.status.terminal])

    def logs(self, name: str, *, rank: int | None = None, tail: int | None = None,
             since: float | None = None, follow: bool = False, previous: bool = False,
             limit_bytes: int | None = None) -> LogStream:
        """Lines of one rank (or all), oldest first, of the job's current (latest) attempt, as
        kubectl shows the current container's; `previous`: of the attempt before it (kubectl logs
        --previous), an error when there was none; `since` is unix seconds; `follow` streams;
        `limit_bytes` (kubectl's --limit-bytes): the lines up to that many bytes, each counted as
        its UTF-8 text and a newline, the last one cut short to fit (a follower stops there). The
        returned :class:`LogStream`'s `notices`, as it is read, say why lines may be missing."""
        if limit_bytes is not None:
            check_limit_bytes(limit_bytes)
        typed = rank  # a refusal names it as typed (--rank 1E3); the backend is given the plain number
        if rank is not None:  # the job's own last rank is checked once it is read
            rank = check_rank(rank)
        if tail is not None:
            check_tail(tail)
        if since is not None:  # refused before the job is read, as the HTTP query is
            check_since(since)
        if not isinstance(previous, bool) or not isinstance(follow, bool):
            raise SpecError(f"invalid previous {previous!r} or follow {follow!r}: use true or false")
        if previous and follow:
            raise SpecError("--previous cannot be followed: the previous attempt has ended; drop -f to print its "
                            "lines, or drop --previous to follow the current attempt")
        with self._named("job", name):  # unknown job -> NotFoundError before any output
            info = self._get(_existing(name, "job"))
        if rank is not None and rank >= info.spec.processes:
            raise SpecError(f"invalid rank {shown(typed)}: job {name!r} has {info.spec.processes} process(es), "
                            f"ranks 0 to {info.spec.processes - 1}")
        return LogStream(self._logs(name, rank=rank, tail=tail, since=since, follow=follow, previous=previous),
                         limit_bytes)

    def wait(self, name: str, *, timeout: float | None = None, poll: float | None = None,
             command: Callable[[str], str] | None = None) -> JobInfo:
        """Block until the job is terminal. A timeout's message names where to look further: `dtrain
        describe job NAME` for a job still Pending (why it waits), `dtrain logs NAME` for a running
        one; `command` turns those words into the command to type (the Client's names the job's
        project and backend, so that it works as written). `poll`: seconds between statuses
        (default: the backend's `_wait_poll`)."""
        if timeout is not None:
            check_wait(timeout)
        with self._named("job", name):
            info = self._get(_existing(name, "job"))

        def late(info: JobInfo) -> DtrainError:
            words = f"describe job {name}" if info.status is JobStatus.PENDING else f"logs {name}"
            if info.status is JobStatus.SUSPENDED:  # it ends only once someone resumes it: say so, not its logs
                words = f"resume {name}"
                look = command(words) if command else f"dtrain {words}"
                return TimeoutError_(f"job {name!r} is still Suspended after {timeout:g}s: it ends only once "
                                     f"resumed ('{look}')", look)
            look = command(words) if command else f"dtrain {words}"
            return TimeoutError_(f"job {name!r} is still {info.status} after {timeout:g}s; "
                                 f"wait longer (--timeout) or check '{look}'", look)

        return _until(info, lambda: self._get(name), lambda i: i.status.terminal, late, timeout=timeout,
                      poll=lambda: self._wait_poll(name) if poll is None else poll)

    def wait_snapshot(self, name: str, *, timeout: float | None = None, poll: float = 1.0,
                      command: Callable[[str], str] | None = None) -> SnapshotInfo:
        """Block until the snapshot is ready to use, as `kubectl wait --for=jsonpath='{.status.readyToUse}'=true`
        does (a local snapshot is ready once taken). A snapshot the storage system reports it failed
        to take ends the wait (ConflictError with its error, as `restore` refuses it), not hours later."""
        def ready(info: SnapshotInfo, say: Callable[[str], str]) -> bool:
            if not info.ready and info.error:
                raise ConflictError(f"snapshot {name!r} is not ready: the storage system reports {info.error!r}; "
                                    f"once the cause is fixed wait again (its controller retries) or delete it "
                                    f"('{say(f'snapshot delete {name}')}') and take another")
            return info.ready

        return self._wait_storage("snapshot", name, self._get_snapshot, ready, lambda info, say, after: (
            f"not ready after {after}"), timeout=timeout, poll=poll, command=command)

    def _wait_storage(self, kind: str, name: str, get: Callable[[str], Any], done: Callable[[Any, Callable], bool],
                      still: Callable[[Any, Callable, str], str], *, timeout: float | None, poll: float,
                      command: Callable[[str], str] | None) -> Any:
        """wait_snapshot's and wait_volume's loop: `kind` NAME looked up as every verb does, then read
        with `get` until `done(info, say)`; a timeout says "KIND NAME is still `still(info, say, after)`"
        and names `describe`. `say` writes a command as the caller's hints do."""
        if timeout is not None:
            check_wait(timeout)
        with self._named(kind, name):
            info = get(_existing(name, kind))
        say = command or (lambda words: f"dtrain {words}")

        def late(info) -> DtrainError:
            look = say(f"{kind} describe {name}")
            return TimeoutError_(f"{kind} {name!r} is still {still(info, say, f'{timeout:g}s')}; wait longer "
                                 f"(--timeout) or check '{look}'", look)

        return _until(info, lambda: get(name), lambda i: done(i, say), late, timeout=timeout, poll=lambda: poll)

    def _wait_poll(self, name: str) -> float:
        """Seconds between the statuses `wait` reads: a backend whose status is a throttled API call
        (SageMaker's DescribeTrainingJob) asks less often."""
        return 0.5

    def delete(self, name: str, *, purge: bool = False) -> JobInfo:
        """Stop the job (it reads Deleted); `purge` also forgets it, so `get` then finds nothing."""
        _flag(purge, "purge")
        with self._named("job", name):
            info = self._delete(_existing(name, "job"))
        if purge:
            self._purge(name)
        return info

    def suspend(self, name: str) -> JobInfo:
        """Stop a Pending or Running job for now, as Run:AI's `runai suspend` and Kubeflow's
        runPolicy.suspend do: its processes get SIGTERM (the workloads checkpoint), its devices are
        freed, and it reads Suspended until `resume`."""
        with self._named("job", name):
            info = self._get(_existing(name, "job"))
        if not info.status.suspendable:
            raise ConflictError(f"job {name!r} is {info.status}: only a Pending or Running job can be suspended")
        return self._suspend(name)

    def resume(self, name: str, *, waiting: Callable[[float], None] | None = None) -> JobInfo:
        """Queue a Suspended job again: it waits for its devices, then starts anew and its workload
        goes on from its last checkpoint. Where its last processes are still stopping (locally: up to
        the grace period and a little) the call waits for them first, and calls `waiting` with that
        many seconds at once, so that a caller can say why it is held."""
        with self._named("job", name):
            info = self._get(_existing(name, "job"))
        if info.status != JobStatus.SUSPENDED:
            raise ConflictError(f"job {name!r} is {info.status}: only a Suspended job can be resumed")
        if waiting is not None and (seconds := self._stopping_wait(name)):
            waiting(seconds)
        return self._resume(name)

    def _stopping_wait(self, name: str) -> float:
        """The most seconds `_resume` may wait for the job's last processes to stop; 0: it will not
        wait (they are gone, or this backend never waits)."""
        return 0.0

    def nodes(self) -> Listed:
        """The nodes, with the call's notices (Kubernetes: pods it may not list, so GPUs allocated
        count only some of them or none)."""
        nodes = self._nodes()
        return Listed(nodes, notices_of(nodes))

    def exec(self, name: str, command: list[str] | tuple[str, ...], *, rank: int = 0,
             cmd: HintCommand | None = None, running_timeout: float = EXEC_RUNNING_WAIT) -> int:
        """Run `command` beside a Running job's rank (its mount namespace / pod and environment),
        with this process's stdin, stdout and stderr; returns the command's exit code. `cmd`: the
        commands a refusal names (see `HintCommand`). A job still Pending, or a rank still being
        launched (NotReadyError from `_exec`), is waited for up to `running_timeout` seconds, as
        `kubectl exec --pod-running-timeout` (1m) and `runai bash` wait for the pod to run; a job
        that ended or is suspended is refused at once."""
        cmd = cmd or _plain_command
        if isinstance(running_timeout, bool) or not isinstance(running_timeout, (int, float)) \
                or not 0 <= running_timeout <= MAX_WAIT:  # NaN compares false
            raise SpecError(f"invalid running_timeout {shown(running_timeout)}: use seconds from 0 to {MAX_WAIT} "
                            f"(366 days), e.g. 60 (the CLI's --pod-running-timeout 1m)")
        with self._named("job", name):
            first = self._get(_existing(name, "job"))
        check_exec_rank(rank, name, first.spec.processes)  # the CLI's --rank is checked here too: one line
        infos = iter([first])

        def attempt() -> int:
            info = next(infos, None) or self._get(name)
            if info.status not in (JobStatus.RUNNING, JobStatus.PENDING):
                raise ConflictError(f"job {name!r} is {info.status}: exec needs a Running job "
                                    f"(see '{cmd(info.status.listed_by, info.spec.project)}')")
            if isinstance(command, str) or not command or not all(isinstance(w, str) and "\0" not in w for w in command):
                raise SpecError("exec needs a command after '--', e.g. dtrain exec JOB -- ls /mnt")
            if info.status is JobStatus.PENDING:  # said as it stands once the time is out
                waited = f" after {running_timeout:g}s" if running_timeout else ""
                raise NotReadyError(f"job {name!r} is {info.status}{waited}: exec needs a Running job "
                                    f"(see '{cmd(f'describe job {name}', info.spec.project)}')")
            return self._exec(name, list(command), rank=rank)  # NotReadyError: its rank (pod) is being launched

        return _while_not_ready(attempt, wait=running_timeout, pause=EXEC_POLL_S)

    def render(self, spec: JobSpec) -> list[dict[str, Any]]:
        """What `submit` would send, without sending it (`dtrain submit --dry-run`)."""
        with self._volumes_named(spec):
            return self._render(spec)

    def planned_snapshot(self, spec: JobSpec) -> str | None:
        """The snapshot `spec`'s --snapshot-on-success would take were it submitted now, in words where
        only the run decides it (a dry run's note); None where it asks for none."""
        return self._planned_snapshot(spec) if spec.snapshot_volume else None

    def check_inputs(self, spec: JobSpec) -> None:
        """Refuse, as `submit` would, the data `spec` reads where only the backend's service can say
        (SageMaker: an S3 channel that holds nothing); makes nothing. A pipeline's pre-run check."""
        self._check_inputs(spec)

    def _check_inputs(self, spec: JobSpec) -> None:
        """Nothing to ask by default: the volumes a job mounts are looked up by `render`."""

    def notebook_url(self, name: str, *, cmd: HintCommand | None = None, wait: float = 0) -> str:
        """Where to open notebook `name` (a job with spec.notebook), with its token where it has one.
        `cmd`: the commands the refusals name (see `HintCommand`). `wait`: seconds to wait for a
        Running notebook's Jupyter to serve (NotReadyError after them); a notebook that is not
        Running is refused at once (a queued one may wait for hours)."""
        return _while_not_ready(lambda: self._open_notebook(name, cmd), wait=wait, pause=NOTEBOOK_POLL_S)

    def _open_notebook(self, name: str, cmd: HintCommand | None) -> str:
        with self._named("job", name, "notebook"):
            info = self._get(_existing(name, "notebook"))
        project = info.spec.project

        def said(words: str) -> str:
            return (cmd or _plain_command)(words, project)

        if not info.spec.notebook:
            raise SpecError(f"job {name!r} is not a notebook: start one with "
                            f"'{said('notebook NAME --pvc VOLUME:/home/jovyan')}'")
        if info.status == JobStatus.DELETED:
            raise ConflictError(f"notebook {name!r} is Deleted: start it again with '{said(f'notebook {name} ...')}'")
        if info.status.terminal:  # its name is still taken: delete first (its files are kept)
            raise ConflictError(f"notebook {name!r} is {info.status}: delete it ('{said(f'delete {name}')}', which "
                                f"keeps its files on its volume or in its own work folder), then start it again "
                                f"('{said(f'notebook {name} ...')}')")
        if info.status == JobStatus.SUSPENDED:
            raise ConflictError(f"notebook {name!r} is Suspended: start it again with '{said(f'resume {name}')}'")
        if info.status == JobStatus.PENDING:  # queued (for GPUs, a quota): a URL of an earlier start, or none
            raise ConflictError(f"notebook {name!r} is Pending ({info.message or 'queued'}): open it once it is "
                                f"Running (see '{said(f'describe job {name}')}')")
        return self._notebook_url(info)

    def artifacts(self, name: str, *, to: str | Path, output_data: bool = False) -> Path:
        """Put the job's model folder (SageMaker: its model.tar.gz, unpacked) into the new folder `to`;
        `output_data`: SageMaker's output data ($SM_OUTPUT_DATA_DIR: output.tar.gz, unpacked) instead."""
        if not isinstance(to, (str, Path)) or not str(to):
            raise SpecError(f"invalid to {shown(to)}: give the new folder to copy the model into, e.g. to='out/model'")
        _flag(output_data, "output_data")
        with self._named("job", name):
            if output_data:
                return self._output_data(_existing(name, "job"), to=Path(to))
            return self._artifacts(_existing(name, "job"), to=Path(to))

    # ---- projects -----------------------------------------------------------------------
    def create_project(self, name: str, *, gpu_quota: int | None = None, no_gpu_quota: bool = False) -> None:
        """Create a project, or change an existing one's GPU quota: `gpu_quota` sets it,
        `no_gpu_quota` removes it, neither leaves it as it is."""
        check_name(name, "project")
        _flag(no_gpu_quota, "no_gpu_quota")
        if gpu_quota is not None:
            check_gpu_quota(gpu_quota, "gpu_quota")  # the CLI checks its --gpu-quota first, in its words
        if no_gpu_quota and gpu_quota is not None:
            raise SpecError("gpu_quota and no_gpu_quota contradict each other: give one of them")
        self._create_project(name, gpu_quota=gpu_quota, no_gpu_quota=no_gpu_quota)

    def has_project(self, name: str) -> bool:
        """Whether project `name` exists here."""
        check_name(name, "project")
        return self._has_project(name)

    def _has_project(self, name: str) -> bool:
        """A backend that can tell without reading every project's jobs (Kubernetes: its namespace)
        overrides this."""
        return name in {p.name for p in self.list_projects()}

    def list_projects(self) -> Listed:
        """The projects by name, with the call's notices (Kubernetes: a project's GPU quota or the
        GPUs its pods hold that this account may not read)."""
        projects = self._list_projects()
        return Listed(sorted(projects, key=lambda p: p.name), notices_of(projects))

    # ---- volumes and snapshots ----------------------------------------------------------
    # Every backend offers the same verbs: a volume is a folder locally and a PVC on
    # Kubernetes; a snapshot is a stored manifest or a VolumeSnapshot.
    def create_volume(self, name: str, *, size: str = "10Gi", storage_class: str | None = None) -> VolumeInfo:
        """An empty volume; `storage_class` None picks the backend's default."""
        _check_new_volume(name, size, storage_class)
        return self._create_volume(name, size=size, storage_class=storage_class)

    def render_volume(self, name: str, *, size: str = "10Gi", storage_class: str | None = None) -> list[dict[str, Any]]:
        """What `create_volume` would send (`dtrain volume create --dry-run`)."""
        _check_new_volume(name, size, storage_class)
        return self._render_volume(name, size=size, storage_class=storage_class)

    def list_volumes(self) -> list[VolumeInfo]:
        return sorted(self._list_volumes(), key=lambda v: v.name)

    def volume_project(self) -> str | None:
        """The project whose jobs here can mount the volumes `list_volumes` lists: None where every
        project's can (one store for all, as locally); Kubernetes: its namespace's project. A job of
        another backend, or of another namespace, never mounts them, whatever the names say."""
        return self._volume_project()

    def _volume_project(self) -> str | None:
        return None

    def get_volume(self, name: str) -> VolumeInfo:
        with self._named("volume", name):
            return self._get_volume(_existing(name, "volume"))

    def delete_volume(self, name: str, *, force: bool = False) -> None:
        """Delete a volume (its snapshots stay); refused while a job uses it unless `force`."""
        _flag(force, "force")
        with self._named("volume", name):
            self._delete_volume(_existing(name, "volume"), force=force)

    def list_storage_classes(self) -> Listed:
        """The storage classes (performance tiers) volumes can use: the default first, then by kind and name;
        its notices name a kind of class that could not be read while the others were."""
        classes = self._list_storage_classes()
        return Listed(sorted(classes, key=lambda c: (not c.default, c.kind, c.name)), notices_of(classes))

    def update_volume(self, name: str, *, storage_class: str) -> VolumeInfo:
        """Change a volume's storage class (its performance tier), keeping its data and snapshots."""
        check_storage_class(storage_class)
        with self._named("volume", name):
            return self._update_volume(_existing(name, "volume"), storage_class=storage_class)

    def render_volume_update(self, name: str, *, storage_class: str) -> Any:
        """What update_volume would do, changing nothing (`volume update --dry-run`)."""
        check_storage_class(storage_class)
        with self._named("volume", name):
            return self._render_volume_update(_existing(name, "volume"), storage_class=storage_class)

    def wait_volume(self, name: str, *, timeout: float | None = None, poll: float = 1.0,
                    command: Callable[[str], str] | None = None) -> VolumeInfo:
        """Block until the storage class `update_volume` set is in effect (`volume update --wait`): on
        Kubernetes once the PVC's status.currentVolumeAttributesClassName is its spec's class and
        status.modifyVolumeStatus is gone (the CSI driver is done); locally at once, as the move is
        done when `update_volume` returns. A class the storage system refuses (Infeasible) ends the
        wait (ConflictError naming the fix), as `wait_snapshot` ends on a snapshot's error."""
        return self._wait_storage("volume", name, self._get_volume, lambda i, say: self._class_change(i, say) is None,
                                  lambda info, say, after: (f"changing storage class after {after} "
                                                            f"({self._class_change(info, say)})"),
                                  timeout=timeout, poll=poll, command=command)

    def create_snapshot(self, volume: str, *, name: str | None = None, job: str | None = None,
                        progress: Progress | None = None) -> SnapshotInfo:
        """Snapshot `volume` now, linked to `job` if given. Default name: <volume>-<UTC time>."""
        _check_new_snapshot(name, job)
        with self._named("volume", volume):
            return self._create_snapshot(_existing(volume, "volume"), name=name, job=job, progress=progress)

    def render_snapshot(self, volume: str, *, name: str | None = None, job: str | None = None) -> list[dict[str, Any]]:
        """What `create_snapshot` would send (`dtrain snapshot create --dry-run`)."""
        _check_new_snapshot(name, job)
        with self._named("volume", volume):
            return self._render_snapshot(_existing(volume, "volume"), name=name, job=job)

    def list_snapshots(self, *, volume: str | None = None, job: str | None = None) -> list[SnapshotInfo]:
        """Oldest first, filtered by volume and job."""
        for value, what in ((volume, "volume"), (job, "job")):
            if value is not None:
                _existing(value, what)
        snaps = [s for s in self._list_snapshots()
                 if (volume is None or s.volume == volume) and (job is None or s.job == job)]
        return sorted(self._mark_earlier_runs(snaps), key=lambda s: (s.created, s.name))

    def _mark_earlier_runs(self, snaps: list[SnapshotInfo]) -> list[SnapshotInfo]:
        """`snaps`, those an earlier job of their job's name left (their job_uid is not the uid of the
        job now so named: it was purged and submitted again) marked `earlier_run`. Only the jobs the
        snapshots name are read, each once (`_job_uids`), not every job. Where no job has the name now,
        or its uid is unknown, or a snapshot recorded none, which run it holds is unknown: as it is."""
        names = {s.job for s in snaps if s.job is not None and s.job_uid}
        current = self._job_uids(names) if names else {}
        return [dataclasses.replace(s, earlier_run=True) if current.get(s.job) not in (None, s.job_uid) else s
                for s in snaps]

    def _job_uids(self, names: set[str]) -> dict[str, str]:
        """The uids of the jobs now named `names`, by name; a name no job has, or one whose uid is
        unknown, is left out. Each read once with `_get`; a backend with a cheaper read overrides it."""
        uids = {}
        for name in names:
            with contextlib.suppress(NotFoundError):
                if (uid := self._get(name).uid) is not None:
                    uids[name] = uid
        return uids

    def get_snapshot(self, name: str) -> SnapshotInfo:
        with self._named("snapshot", name):
            return self._mark_earlier_runs([self._get_snapshot(_existing(name, "snapshot"))])[0]

    def restore_snapshot(self, name: str, *, to: str | None = None, in_place: bool = False,
                         storage_class: str | None = None, progress: Progress | None = None) -> VolumeInfo:
        """Into a new volume `to` (in `storage_class`; None: the class the snapshot's volume was
        in), or over the snapshot's own volume with `in_place` (which keeps its class)."""
        _check_restore(name, to, in_place, storage_class)
        with self._named("snapshot", name):
            return self._restore_snapshot(name, to=to, in_place=in_place, storage_class=storage_class,
                                          progress=progress)

    def render_restore(self, name: str, *, to: str | None = None, in_place: bool = False,
                       storage_class: str | None = None) -> list[dict[str, Any]]:
        """What `restore_snapshot` would send (`dtrain snapshot restore --dry-run`)."""
        _check_restore(name, to, in_place, storage_class)
        with self._named("snapshot", name):
            return self._render_restore(name, to=to, in_place=in_place, storage_class=storage_class)

    def delete_snapshot(self, name: str) -> FreedInfo:
        with self._named("snapshot", name):
            return self._delete_snapshot(_existing(name, "snapshot"))

    def verify_snapshot(self, name: str | None = None) -> VerifyReport:
        """Re-hash one snapshot's content, or the whole store's."""
        if name is None:
            return self._verify_snapshot(None)
        with self._named("snapshot", name):
            return self._verify_snapshot(_existing(name, "snapshot"))

    def diff_snapshots(self, a: str, b: str | None = None) -> list[Change]:
        """What changed from snapshot `a` to snapshot `b`, or to `a`'s volume as it is now (`b` None)."""
        if b is None:
            with self._named("snapshot", a):
                return self._diff_snapshots(_existing(a, "snapshot"), None)
        with self._named("snapshot", a), self._named("snapshot", b):
            return self._diff_snapshots(_existing(a, "snapshot"), _existing(b, "snapshot"))

    # ---- a name that does not exist: the near one ---------------------------------------
    @contextlib.contextmanager
    def _named(self, what: str, name: str, noun: str | None = None) -> Iterator[None]:
        """Around a hook given an existing job, volume or snapshot: a NotFoundError that quotes
        `name`, when the backend knows no such one, gets the near name it knows (did you mean
        'train-1'?), on one line as before and of the same class.

        A name no dtrain object can have ('Bad_Name!') is check_name's SpecError instead (`noun`
        the word it says, default `what`): the rule, as the HTTP API's path pattern says it, not
        "no job named". Only when nothing is found: a backend may list objects another tool named
        (a Kubernetes PVC 'data.v1')."""
        try:
            yield
        except NotFoundError as err:
            if isinstance(name, str):
                if what == "volume" and noun is None:  # a dotted claim's full name ('data.v1') is well formed
                    check_mounted_volume(name)
                else:
                    check_name(name, noun or what)  # malformed: this SpecError, raised from the lookup
            if len(err.args) == 1 and isinstance(err.args[0], str) and isinstance(name, str):
                err.args = (self._with_near(err.args[0], what, name),)
            raise

    @contextlib.contextmanager
    def _volumes_named(self, spec: JobSpec) -> Iterator[None]:
        """Around a hook given a job spec: a NotFoundError quoting a volume it mounts (--pvc) or
        snapshots (ENABLE_SNAPSHOT + PVC_NAME) gets the near name, as `volume describe` names it; a
        typo'd --pvc, where it is typed most, got "no volume named 'wrk'" alone."""
        try:
            yield
        except NotFoundError as err:
            names = {m.volume for m in spec.volumes if hasattr(m, "volume")} | {spec.snapshot_volume} - {None}
            if len(err.args) == 1 and isinstance(err.args[0], str):
                for name in sorted(names):
                    err.args = (self._with_near(err.args[0], "volume", name),)
            raise

    def _with_near(self, message: str, what: str, name: str) -> str:
        if repr(name) not in message:
            return message
        try:
            current, others = (list(group) for group in self._names(what))
        except (DtrainError, OSError):  # the names cannot be read (no access, no answer): the error stands as is
            return message
        if name in current or name in others:  # it exists: the error is about something else
            return message
        near = near_name(name, current, others)
        return message if near is None else with_near(message, name, near)

    # ---- required hooks -----------------------------------------------------------------
    @abc.abstractmethod
    def _submit(self, spec: JobSpec) -> JobInfo: ...

    @abc.abstractmethod
    def _get(self, name: str) -> JobInfo: ...

    @abc.abstractmethod
    def _list(self) -> list[JobInfo]: ...

    @abc.abstractmethod
    def _logs(self, name: str, *, rank: int | None, tail: int | None, since: float | None,
              follow: bool, previous: bool) -> Iterator[LogLine]: ...

    @abc.abstractmethod
    def _delete(self, name: str) -> JobInfo: ...

    @abc.abstractmethod
    def _nodes(self) -> list[NodeInfo]: ...

    @abc.abstractmethod
    def _create_volume(self, name: str, *, size: str, storage_class: str | None) -> VolumeInfo: ...

    @abc.abstractmethod
    def _list_volumes(self) -> list[VolumeInfo]: ...

    @abc.abstractmethod
    def _get_volume(self, name: str) -> VolumeInfo: ...

    @abc.abstractmethod
    def _delete_volume(self, name: str, *, force: bool) -> None: ...

    @abc.abstractmethod
    def _create_snapshot(self, volume: str, *, name: str | None, job: str | None,
                         progress: Progress | None) -> SnapshotInfo: ...

    @abc.abstractmethod
    def _list_snapshots(self) -> list[SnapshotInfo]: ...

    @abc.abstractmethod
    def _get_snapshot(self, name: str) -> SnapshotInfo: ...

    @abc.abstractmethod
    def _restore_snapshot(self, name: str, *, to: str | None, in_place: bool, storage_class: str | None,
                          progress: Progress | None) -> VolumeInfo: ...

    @abc.abstractmethod
    def _delete_snapshot(self, name: str) -> FreedInfo: ...

    # ---- optional hooks: a backend without the feature keeps these ----------------------
    def _exec(self, name: str, command: list[str], *, rank: int) -> int:
        raise self._not_supported("'dtrain exec'")

    def _suspend(self, name: str) -> JobInfo:
        raise self._not_supported("suspending a job")

    def _resume(self, name: str) -> JobInfo:
        raise self._not_supported("resuming a job")

    def _names(self, what: str) -> tuple[Iterable[str], Iterable[str]]:
        """The names of the backend's jobs (`what` 'job'), volumes or snapshots that a name which
        does not exist is matched against: those in use, then the others (Deleted jobs, which
        `describe` still reads). The default reads the listing hooks; a backend whose listing costs
        more than its names (pods, a du of each volume, one AWS call per job) reads names only."""
        if what == "job":
            jobs = self._list()
            return ([j.name for j in jobs if j.status != JobStatus.DELETED],
                    [j.name for j in jobs if j.status == JobStatus.DELETED])
        return [r.name for r in (self._list_volumes() if what == "volume" else self._list_snapshots())], []

    def _purge(self, name: str) -> None:
        """Forget a deleted job. Backends whose delete already removes the object keep this no-op."""

    def _render(self, spec: JobSpec) -> list[dict[str, Any]]:
        raise self._not_supported("a dry run (--dry-run)")

    def _planned_snapshot(self, spec: JobSpec) -> str | None:
        return None

    def _artifacts(self, name: str, *, to: Path) -> Path:
        raise self._not_supported("'artifacts'", "copy the model from the volume the job wrote it to")

    def _output_data(self, name: str, *, to: Path) -> Path:
        raise NotSupportedError(f"'artifacts --output-data' fetches SageMaker's output data ($SM_OUTPUT_DATA_DIR); "
                                f"the {self.name} backend has none apart from the model folder: drop --output-data")
    def _render_volume(self, name: str, *, size: str, storage_class: str | None) -> list[dict[str, Any]]:
        raise self._not_supported("a dry run of 'volume create'")

    def _render_snapshot(self, volume: str, *, name: str | None, job: str | None) -> list[dict[str, Any]]:
        raise self._not_supported("a dry run of 'snapshot create'")

    def _render_restore(self, name: str, *, to: str | None, in_place: bool,
                        storage_class: str | None) -> list[dict[str, Any]]:
        raise self._not_supported("a dry run of 'snapshot restore'")

    def _create_project(self, name: str, *, gpu_quota: int | None, no_gpu_quota: bool) -> None:
        raise self._not_supported("projects")

    def _list_projects(self) -> list[ProjectInfo]:
        raise self._not_supported("projects")

    def _notebook_url(self, info: JobInfo) -> str:
        raise self._not_supported("notebooks")

    def _list_storage_classes(self) -> list[StorageClassInfo]:
        raise self._not_supported("storage classes")

    def _update_volume(self, name: str, *, storage_class: str) -> VolumeInfo:
        raise self._not_supported("changing a volume's storage class")

    def _render_volume_update(self, name: str, *, storage_class: str) -> Any:
        raise self._not_supported("changing a volume's storage class")

    def _class_change(self, info: VolumeInfo, say: Callable[[str], str]) -> str | None:
        """Where the volume's storage-class change stands, in words; None once the class is in effect
        (the default: a backend whose `_update_volume` returns when the change is done). Raises
        ConflictError, naming the fix (`say(words)` is the command to type), when the storage system
        refused the class: the wait would never end."""
        return None

    def _verify_snapshot(self, name: str | None) -> VerifyReport:
        raise self._not_supported("'snapshot verify'", "it reads the local snapshot store")

    def _diff_snapshots(self, a: str, b: str | None) -> list[Change]:
        raise self._not_supported("'snapshot diff'", "it reads the local snapshot store")

    def _not_supported(self, what: str, why: str = "") -> NotSupportedError:
        return NotSupportedError(f"the {self.name} backend does not support {what}"
                                 + (f" ({why})" if why else "") + "; use --backend local or another backend")

    def opened_problem(self) -> str | None:
        """Why this backend cannot be used from here at all, found before any request (a cluster's
        kubeconfig missing or broken); None: usable. A job verb's backend= naming one that cannot be
        opened is refused quoting it (Client.check_backend), a 404 over HTTP, not the 502 of a failure."""
        return None


def _check_new_volume(name: str, size: str, storage_class: str | None) -> None:
    check_name(name, "volume")
    if not isinstance(size, str):  # size=10 from Python made a 10-byte volume, where a --pvc size must be a string
        raise SpecError(f"invalid volume size {shown(size)}: must be a string such as '100Gi' (a Kubernetes "
                        f"quantity from 1Mi to 1Ei, with its unit)")
    parse_volume_size(size)
    if storage_class is not None:
        check_storage_class(storage_class)


def _while_not_ready(attempt: Callable[[], Any], *, wait: float, pause: float):
    """`attempt()`, asked again every `pause` seconds while it raises NotReadyError (a notebook's
    Jupyter starting, a job's rank being launched), for up to `wait` seconds; then its last
    NotReadyError. `exec` and `notebook_url` use it; `_until` is the loop that polls a status."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return attempt()
        except NotReadyError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(max(0.0, min(pause, deadline - time.monotonic())))


def _until(info, read: Callable[[], Any], done: Callable[[Any], bool], late: Callable[[Any], DtrainError], *,
           timeout: float | None, poll: Callable[[], float]):
    """The one loop that waits for a status (`wait`, `wait_snapshot`): `read` until `done` says yes, `late`'s
    error once `timeout` seconds have passed. A read the backend does not answer (UnavailableError)
    is asked again, for up to WAIT_OUTAGE seconds in a row: an API server that sheds load (429),
    restarts (5xx) or drops a connection for a while must not end an hours-long wait (a pipeline
    step's). A pause never runs past the timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    outage: float | None = None  # since when the backend has not answered a read
    while True:
        if done(info):
            return info
        if deadline is not None and time.monotonic() >= deadline:
            raise late(info)
        pause = poll()
        time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
        try:
            info = read()
            outage = None
        except UnavailableError:
            outage = time.monotonic() if outage is None else outage
            if time.monotonic() - outage >= WAIT_OUTAGE:
                raise


def _check_new_snapshot(name: str | None, job: str | None) -> None:
    if name is not None:
        check_name(name, "snapshot")
    if job is not None:
        check_name(job, "job")


def _check_restore(name: str, to: str | None, in_place: bool, storage_class: str | None = None) -> None:
    _existing(name, "snapshot")
    _flag(in_place, "in_place")  # in_place='no' rolled the volume back
    if to is not None and in_place:
        raise SpecError(f"restore snapshot {name!r} into a new volume (--to NEW_VOLUME) or in place "
                        f"(--in-place), not both")
    if to is None and not in_place:
        raise SpecError(f"say where to restore snapshot {name!r}: --to NEW_VOLUME (a clone) or "
                        f"--in-place (roll the volume back)")
    if to is not None:
        check_name(to, "volume")
    if storage_class is not None:
        if in_place:
            raise SpecError(f"--class does not go with --in-place: an in-place restore of snapshot {name!r} keeps "
                            f"its volume's storage class; change that with `dtrain volume update VOLUME --class "
                            f"{storage_class}`, or restore into a new volume with --to NEW_VOLUME --class "
                            f"{storage_class}")
        check_storage_class(storage_class)


def _existing(name, what: str) -> str:
    """The name of an existing job, volume or snapshot as a verb takes it: a string. (A list reached
    the local store's query as a bare sqlite3 error.) Whether it names one is the backend's to say."""
    if not isinstance(name, str):
        example = {"volume": "data", "snapshot": "data-s1", "notebook": "lab"}.get(what, "train")
        raise SpecError(f"invalid {what} name {shown(name)}: give the {what}'s name as a string, e.g. '{example}'")
    return name


class LogStream:
    """The lines of one `logs` call, an iterator, with that call's `notices`, known while it is read:
    why lines may be missing (a restarted host not started yet, a resumed job followed before it runs
    again). A `_logs` hook yields a :class:`Notice` among its lines; it is kept here, and logged at once
    (`dtrain: warning: ...` on stderr, as a follower may wait long for the next line), not yielded."""

    def __init__(self, items: Iterator[LogLine | Notice], limit_bytes: int | None = None):
        self._items = items
        self._notices: list[Notice] = []
        lines = self._lines()
        self._out = lines if limit_bytes is None else _at_most(lines, limit_bytes)

    @property
    def notices(self) -> tuple[Notice, ...]:
        return tuple(self._notices)

    def _lines(self) -> Iterator[LogLine]:
        try:
            for item in self._items:
                if isinstance(item, Notice):
                    self._notices.append(item)
                    logging.getLogger(__name__).warning("dtrain: warning: %s", item.message)
                else:
                    yield item
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:  # a generator's files are closed now, not when it is collected
                close()

    def __iter__(self) -> LogStream:
        return self

    def __next__(self) -> LogLine:
        return next(self._out)

    def close(self) -> None:
        self._out.close()


def _at_most(lines: Iterator[LogLine], limit: int) -> Iterator[LogLine]:
    """`lines` up to `limit` bytes (text and newline, UTF-8); the line that passes it cut to fit, at a
    character's end; nothing is read past it (a follower is not left waiting for a line it drops)."""
    left = limit
    for line in lines:
        size = len(line.text.encode("utf-8", "surrogateescape")) + 1
        if size <= left:
            yield line
            left -= size
            if left:
                continue
        else:
            cut = line.text.encode("utf-8", "surrogateescape")[:left - 1].decode("utf-8", "ignore")
            if cut:
                yield dataclasses.replace(line, text=cut)
        close = getattr(lines, "close", None)
        if close is not None:  # a generator's files are closed now, not when it is collected
            close()
        return


def _flag(value, what: str) -> bool:
    """A yes/no argument of a verb: True or False, never a truthy string ('no' purged, restored in place)."""
    if not isinstance(value, bool):
        raise SpecError(f"invalid {what} {shown(value)}: use True or False")
    return value

"""The one backend interface. Public verbs are concrete here; each backend fills in `_hooks`.

Every backend returns the same :class:`JobStatus`, :class:`JobInfo` and :class:`LogLine`, so
the CLI, the SDK and (later) the HTTP API print the same thing whatever runs the job.
`wait` exists once, here.
"""

from __future__ import annotations

import abc
import time
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any, Iterator

from dtrain.errors import DtrainError
from dtrain.spec import JobSpec


class JobStatus(str, Enum):
    PENDING = "Pending"  # queued: waiting for devices, quota or its turn
    RUNNING = "Running"  # at least one process started
    SUCCEEDED = "Succeeded"  # every process exited 0
    FAILED = "Failed"  # a process failed and no restart is left, or the job was lost
    DELETED = "Deleted"  # stopped by the user

    @property
    def terminal(self) -> bool:
        return self in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.DELETED)

    def __str__(self) -> str:
        return self.value


@dataclass(frozen=True, kw_only=True)
class ProcessInfo:
    """One rank (a replica pod on Kubernetes)."""

    rank: int  # global rank
    status: str  # Pending, Running, Succeeded, Failed
    exit_code: int | None = None  # None while running
    devices: tuple[str, ...] = ()  # allocated GPU ids
    node: str | None = None  # host or node name


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
    extra: dict[str, Any] = field(default_factory=dict)  # backend-specific details

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["spec"] = self.spec.to_dict()
        d["status"] = self.status.value
        return d


@dataclass(frozen=True, kw_only=True)
class LogLine:
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


@dataclass(frozen=True, kw_only=True)
class NodeInfo:
    name: str
    gpus_allocatable: int
    gpus_allocated: int
    cpus: int | None = None
    memory: int | None = None  # bytes
    gpus: tuple[GpuInfo, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class Backend(abc.ABC):
    """Public verbs are concrete; subclasses implement the `_hooks`."""

    name: str = "base"

    # ---- public verbs -------------------------------------------------------------------
    def submit(self, spec: JobSpec) -> JobInfo:
        return self._submit(spec)

    def get(self, name: str) -> JobInfo:
        return self._get(name)

    def list(self, *, project: str | None = None) -> list[JobInfo]:
        jobs = self._list()
        return [j for j in jobs if project is None or j.spec.project == project]

    def logs(self, name: str, *, rank: int | None = None, tail: int | None = None,
             since: float | None = None, follow: bool = False) -> Iterator[LogLine]:
        """Lines of one rank (or all), oldest first; `since` is unix seconds; `follow` streams."""
        self._get(name)  # unknown job -> NotFoundError before any output
        return self._logs(name, rank=rank, tail=tail, since=since, follow=follow)

    def wait(self, name: str, *, timeout: float | None = None, poll: float = 0.5) -> JobInfo:
        """Block until the job is terminal; the only wait loop in dtrain."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            info = self._get(name)
            if info.status.terminal:
                return info
            if deadline is not None and time.monotonic() >= deadline:
                raise TimeoutError_(f"job {name!r} is still {info.status} after {timeout:g}s; "
                                    f"wait longer (--timeout) or check 'dtrain logs {name}'")
            time.sleep(poll)

    def delete(self, name: str) -> JobInfo:
        return self._delete(name)

    def nodes(self) -> list[NodeInfo]:
        return self._nodes()

    # ---- hooks --------------------------------------------------------------------------
    @abc.abstractmethod
    def _submit(self, spec: JobSpec) -> JobInfo: ...

    @abc.abstractmethod
    def _get(self, name: str) -> JobInfo: ...

    @abc.abstractmethod
    def _list(self) -> list[JobInfo]: ...

    @abc.abstractmethod
    def _logs(self, name: str, *, rank: int | None, tail: int | None, since: float | None,
              follow: bool) -> Iterator[LogLine]: ...

    @abc.abstractmethod
    def _delete(self, name: str) -> JobInfo: ...

    @abc.abstractmethod
    def _nodes(self) -> list[NodeInfo]: ...

    # Volumes and snapshots: every backend offers the same verbs (a volume is a directory
    # locally and a PVC on Kubernetes; a snapshot is a stored manifest or a VolumeSnapshot).
    @abc.abstractmethod
    def create_volume(self, name: str, *, size: str = "10Gi", storage_class: str | None = None) -> dict: ...

    @abc.abstractmethod
    def list_volumes(self) -> list[dict]: ...

    @abc.abstractmethod
    def get_volume(self, name: str) -> dict: ...

    @abc.abstractmethod
    def delete_volume(self, name: str, *, force: bool = False) -> None: ...

    @abc.abstractmethod
    def create_snapshot(self, volume: str, *, name: str | None = None, job: str | None = None) -> dict: ...

    @abc.abstractmethod
    def list_snapshots(self, *, volume: str | None = None, job: str | None = None) -> list[dict]: ...

    @abc.abstractmethod
    def get_snapshot(self, name: str) -> dict: ...

    @abc.abstractmethod
    def restore_snapshot(self, name: str, *, to: str | None = None, in_place: bool = False) -> dict: ...

    @abc.abstractmethod
    def delete_snapshot(self, name: str) -> dict: ...


class TimeoutError_(DtrainError, TimeoutError):
    """`wait` ran out of time; the job goes on."""

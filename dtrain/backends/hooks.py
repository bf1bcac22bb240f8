"""The hooks a backend fills in: `dtrain.backends.base.Backend`'s public verbs call them (its
docstring is the contract). The required ones are abstract; an optional one a backend lacks keeps
the default here, which raises NotSupportedError naming the backend and the verb."""

from __future__ import annotations

import abc
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator

from dtrain.backends.records import (DeletedProjectInfo, FreedInfo, JobInfo, JobStatus, Listed, LogLine, NodeInfo,
                                     Notice, ProjectInfo, Progress, SnapshotInfo, StorageClassInfo, VolumeInfo,
                                     notices_of)
from dtrain.errors import NotSupportedError
from dtrain.spec import JobSpec

if TYPE_CHECKING:  # the local store's own reports; only the local backend produces them
    from dtrain.storage.info import VerifyReport
    from dtrain.storage.manifest import Change


class BackendHooks(abc.ABC):
    """The `_hooks` of :class:`dtrain.backends.base.Backend`, which subclasses this: one per verb."""

    name: str  # set by Backend: the backend's word in messages

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
    def _delete_volume(self, name: str, *, force: bool) -> str | None:
        """None once it is gone; else what still keeps it (Kubernetes: 'Terminating: ...')."""

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

    def _holds_job_logs(self, snapshot: str, job: str) -> bool:
        """Whether snapshot `snapshot` holds job `job`'s logs (the local backend copies them into the volume
        before a job's snapshot: joblogs.py); a backend that copies none keeps False."""
        return False

    def _purge(self, name: str) -> None:
        """Forget a deleted job. Backends whose delete already removes the object keep this no-op."""

    def _render(self, spec: JobSpec) -> list[dict[str, Any]]:
        raise self._not_supported("a dry run (--dry-run)")

    def _planned_snapshot(self, spec: JobSpec) -> str | None:
        return None

    def _opened_problem(self) -> str | None:
        return None

    def _serving_notices(self) -> Iterable[Notice]:
        return ()

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

    def _delete_project(self, name: str) -> DeletedProjectInfo:
        raise self._not_supported("projects")

    def _one_project(self, name: str) -> Listed:
        """The default: the projects listed, `name`'s kept, with the list's notices."""
        projects = self._list_projects()
        return Listed([p for p in projects if p.name == name], notices_of(projects))

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


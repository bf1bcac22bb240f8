"""Volumes and snapshots through the Client: each verb on `project`'s backend (config.yaml's
project_backends; on Kubernetes its namespace), a project that does not exist said to be the
problem; the lineage's reads (`volume_jobs`, `volume_job`). A mixin of Client.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

from dtrain.backends.base import (Backend, FreedInfo, JobInfo, JobPage, Listed, Page, Progress, SnapshotInfo, VolumeInfo,
                                  check_page, page_of)
from dtrain.errors import NotFoundError
from dtrain.names import name_list
from dtrain.spec import check_name

if TYPE_CHECKING:
    from dtrain.storage.info import VerifyReport
    from dtrain.storage.manifest import Change


class StorageVerbs:
    """Mixed into Client, which provides the backends and the job verbs the lineage reads."""

    if TYPE_CHECKING:
        def backend(self, name: str | None = None, *, project: str | None = None) -> Backend: ...

        def check_project(self, project: str) -> None: ...

        def check_backend(self, name: str) -> None: ...

        def command_for(self, words: str, *, backend: str, project: str | None = None) -> str: ...

        def room_to_free(self): ...

        def get(self, name: str, *, project: str | None = None, backend: str | None = None) -> JobInfo: ...

        def _expired_forgotten(self, backend: Backend, project: str | None) -> Backend: ...

    # ---- volumes and snapshots ------------------------------------------------------------
    # Each verb takes `project` (the CLI's -p, the HTTP API's ?project=): that project's backend, as
    # config.yaml's project_backends gives it, and on Kubernetes its namespace, where its volumes and
    # its jobs' snapshots are (None: this client's backend, or the configured project's).
    def _storage(self, project: str | None) -> Backend:
        """The backend of `project`'s volumes and snapshots; a project that does not exist is said
        to be the problem (a typo in -p), as `snapshot list` says it, not the volume or snapshot."""
        if project is not None:
            check_name(project, "project")
            self.check_project(project)
        return self.backend(project=project)

    def create_volume(self, name: str, *, size: str = "10Gi", storage_class: str | None = None,
                      project: str | None = None) -> VolumeInfo:
        """Make an empty volume `name` of `size` (a Kubernetes quantity: '1Mi', '10Gi') in `storage_class`
        (None: the backend's default); its `VolumeInfo` (`dtrain volume create`)."""
        return self._storage(project).create_volume(name, size=size, storage_class=storage_class)

    def render_volume(self, name: str, *, size: str = "10Gi", storage_class: str | None = None,
                      project: str | None = None) -> list[dict]:
        """What create_volume would send (a dry run)."""
        return self._storage(project).render_volume(name, size=size, storage_class=storage_class)

    def render_snapshot(self, volume: str, *, name: str | None = None, job: str | None = None,
                        project: str | None = None) -> list[dict]:
        """What create_snapshot would send (a dry run: `dtrain snapshot create --dry-run`)."""
        return self._storage(project).render_snapshot(volume, name=name, job=job)

    def render_restore(self, name: str, *, to: str | None = None, in_place: bool = False,
                       storage_class: str | None = None, project: str | None = None) -> list[dict]:
        """What restore_snapshot would send (a dry run: `dtrain snapshot restore --dry-run`)."""
        return self._storage(project).render_restore(name, to=to, in_place=in_place, storage_class=storage_class)

    def list_volumes(self, *, project: str | None = None) -> list[VolumeInfo]:
        """The volumes, by name, as `VolumeInfo`s (`dtrain volume list`)."""
        return self._storage(project).list_volumes()

    def page_volumes(self, *, project: str | None = None, limit: int | None = None, offset: int = 0) -> Page:
        """A page of `list_volumes`' volumes, newest first (by creation time, then name): `offset`
        skipped, at most `limit` (1 to 1000; None: the rest), with `total`, how many there are."""
        check_page(limit, offset, "volumes")
        return page_of(self.list_volumes(project=project), limit, offset)

    def get_volume(self, name: str, *, project: str | None = None) -> VolumeInfo:
        """Volume `name`'s `VolumeInfo` (`dtrain describe volume NAME`); NotFoundError if there is none."""
        return self._storage(project).get_volume(name)

    def list_storage_classes(self, *, project: str | None = None) -> Listed:
        """The storage classes (performance tiers) volumes can use, the default first (`kubectl get storageclass`);
        its `notices` name a kind of class that could not be read (Kubernetes: VolumeAttributesClasses)."""
        return self._storage(project).list_storage_classes()

    def update_volume(self, name: str, *, storage_class: str, project: str | None = None) -> VolumeInfo:
        """Change a volume's storage class: a move between roots locally, a VolumeAttributesClass on Kubernetes."""
        return self._storage(project).update_volume(name, storage_class=storage_class)

    def wait_volume(self, name: str, *, timeout: float | None = None, project: str | None = None) -> VolumeInfo:
        """Block until the storage class `update_volume` set is in effect (Kubernetes: the CSI driver
        changes the tier asynchronously, status.currentVolumeAttributesClassName; locally at once);
        TimeoutError_ after `timeout` s, ConflictError if the storage system refused the class."""
        backend = self._storage(project)
        return backend.wait_volume(name, timeout=timeout, door=self.door,
                                   command=lambda words: self.command_for(words, backend=backend.name, project=project))

    def render_volume_update(self, name: str, *, storage_class: str, project: str | None = None) -> dict | list[dict]:
        """`volume update --dry-run`: the PVC patch on Kubernetes (a list of requests), the planned
        move locally (one mapping)."""
        return self._storage(project).render_volume_update(name, storage_class=storage_class)

    def delete_volume(self, name: str, *, force: bool = False, project: str | None = None) -> str | None:
        """Delete volume `name` (its snapshots stay, and restore it); a ConflictError while a job uses it,
        unless `force` (`dtrain volume delete`). None: it is gone; else what keeps it a while (Kubernetes
        keeps a claim still in use, 'Terminating', until its pods stop)."""
        with self.room_to_free():  # on a full home disk: the delete that frees it still commits
            return self._storage(project).delete_volume(name, force=force)

    def create_snapshot(self, volume: str, *, name: str | None = None, job: str | None = None,
                        progress: Progress | None = None, project: str | None = None) -> SnapshotInfo:
        """Snapshot `volume` now as `name` (None: VOLUME-UTC time), recording `job` as the job whose output
        it holds (the lineage); `progress(done, total)` is called as files are taken (`dtrain snapshot create`)."""
        return self._storage(project).create_snapshot(volume, name=name, job=job, progress=progress)

    def list_snapshots(self, *, volume: str | None = None, job: str | None = None,
                       project: str | None = None) -> list[SnapshotInfo]:
        """Oldest first, of `volume` and of `job` when given, on `project`'s backend (None: this
        client's or the configured one; a job of a project config.yaml sends to another backend keeps
        its snapshots there). A volume or job that never was is a NotFoundError, as `dtrain snapshot
        list --volume` and the HTTP list answer (an empty list read as a volume without snapshots where
        it was a typo); a volume without snapshots is an empty list, and a deleted volume's or job's
        snapshots, which remain, are listed."""
        backend = self._storage(project)
        snaps = backend.list_snapshots(volume=volume, job=job)
        if not snaps:
            if volume is not None:
                backend.get_volume(volume)
            if job is not None:
                self.get(job, project=project)
        return snaps

    def page_snapshots(self, *, volume: str | None = None, job: str | None = None, project: str | None = None,
                       limit: int | None = None, offset: int = 0) -> Page:
        """A page of `list_snapshots`' snapshots, newest first (by creation time, then name): `offset`
        skipped, at most `limit` (1 to 1000; None: the rest), with `total`, how many matched."""
        check_page(limit, offset, "snapshots")
        return page_of(self.list_snapshots(volume=volume, job=job, project=project), limit, offset)

    def get_snapshot(self, name: str, *, project: str | None = None) -> SnapshotInfo:
        """Snapshot `name`'s `SnapshotInfo` (`dtrain describe snapshot NAME`); NotFoundError if there is none."""
        return self._storage(project).get_snapshot(name)

    def wait_snapshot(self, name: str, *, timeout: float | None = None, project: str | None = None) -> SnapshotInfo:
        """Block until snapshot `name` is ready to use (Kubernetes takes one asynchronously: its
        VolumeSnapshot's readyToUse; a local one is ready once taken); TimeoutError_ after `timeout` s,
        ConflictError if the storage system reports it failed to take it."""
        backend = self._storage(project)
        return backend.wait_snapshot(name, timeout=timeout, door=self.door,
                                     command=lambda words: self.command_for(words, backend=backend.name, project=project))

    def volume_jobs(self, *, project: str | None = None, limit: int | None = None,
                    mounting: Iterable[str] | None = None) -> JobPage:
        """A page of the jobs that can mount the volumes `list_volumes(project=project)` lists, newest
        first (not the Deleted ones): `project`'s, on its backend; without it, those of the configured
        project's backend that share its volumes (every project's locally, its namespace's on Kubernetes).
        A job of another backend or namespace never mounted these volumes, whatever it names (the lineage).
        With `mounting` (volume names), only the jobs that mount one of them or recorded a snapshot as their
        data's source, where the backend can pick them at its source (Backend.mounting_page; the local
        one's SQL); elsewhere the newest jobs all the same, and `total` counts those not read."""
        if mounting is not None:  # a set, a list, or one name; not an int or bytes read deep inside
            mounting = name_list(mounting, "mounting", "mounting=['data']")
        backend = self._expired_forgotten(self._storage(project), project)
        scope = project or backend.volume_project()
        if mounting is not None and (page := backend.mounting_page(mounting, project=scope, limit=limit)) is not None:
            return page
        return backend.page(project=scope, limit=limit)

    def volume_job(self, name: str, *, project: str | None = None, backend: str | None = None) -> JobInfo:
        """Job `name`, of whatever project, where `project`'s volumes and snapshots are (None: the
        configured project's backend), or on `backend` when given, as every job verb takes it: a
        snapshot's job, as the lineage links it."""
        if project is not None:
            check_name(project, "project")
        if backend is not None:
            self.check_backend(backend)
        try:
            return self.backend(backend, project=project).get(name)
        except NotFoundError:
            if project is not None:
                self.check_project(project)  # a typo in the project: said, not the job
            raise

    def restore_snapshot(self, name: str, *, to: str | None = None, in_place: bool = False,
                         storage_class: str | None = None, progress: Progress | None = None,
                         project: str | None = None) -> VolumeInfo:
        """Into a new volume `to` in `storage_class` (None: the class the snapshot's volume was in;
        `snapshot restore --class`), or over the snapshot's own volume with `in_place`."""
        return self._storage(project).restore_snapshot(name, to=to, in_place=in_place, storage_class=storage_class,
                                                       progress=progress)

    def delete_snapshot(self, name: str, *, project: str | None = None) -> FreedInfo:
        """Delete snapshot `name`; a `FreedInfo` saying how many bytes that freed (content other
        snapshots share stays) (`dtrain snapshot delete`)."""
        with self.room_to_free():  # on a full home disk: the delete that frees it still commits
            return self._storage(project).delete_snapshot(name)

    def verify_snapshot(self, name: str | None = None, *, project: str | None = None) -> VerifyReport:
        """Re-hash snapshot `name`'s content (None: every snapshot's); a `VerifyReport` whose `ok` says
        whether all of it is intact and `damaged` names what is not (`dtrain snapshot verify`)."""
        return self._storage(project).verify_snapshot(name)

    def diff_snapshots(self, a: str, b: str | None = None, *, project: str | None = None) -> list[Change]:
        """What changed from snapshot `a` to snapshot `b`, or to `a`'s volume as it is now (`b` None)."""
        return self._storage(project).diff_snapshots(a, b)

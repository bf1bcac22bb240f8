"""The one backend interface and the typed records every backend returns.

Read `Backend`'s docstring first: it is the contract a new backend implements. Its hooks are declared
in hooks.py (the optional ones' defaults and the verbs' private helpers in defaults.py), the records in
records.py, the checks every verb shares in checks.py, the waiting loops in waiting.py, `logs`' answer in
logstream.py; every name is re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from dtrain.backends.checks import (HintCommand, _check_new_snapshot, _check_new_volume, _check_restore,  # noqa: F401
                                    _existing, _flag, _plain_command, check_notebook_open, gone_job_logs, named,
                                    project_in_use, volumes_named)
from dtrain.backends.defaults import BackendDefaults
from dtrain.backends.earlier_runs import job_uids_one_by_one, mark_earlier_runs
from dtrain.backends.hooks import BackendHooks  # noqa: F401 (re-exported)
from dtrain.backends.logstream import LogStream, check_logs_args
from dtrain.backends.records import (DataSource, DeletedProjectInfo, Event, FreedInfo, GpuInfo,  # noqa: F401
                                     JobCount, JobInfo, JobPage, JobStatus, JobSummary, Listed, LogLine, NodeInfo,
                                     Notice, ProcessInfo, Page, ProjectInfo, Progress, SnapshotInfo, StorageClassInfo,
                                     VolumeInfo, check_statuses, newest_first, notices_of, page_of)
from dtrain.backends.waiting import _until, _while_not_ready, late_wait
from dtrain.errors import (ConflictError, DtrainError, NotFoundError, NotReadyError, NotSupportedError, SpecError,  # noqa: F401
                           TimeoutError_, UnavailableError, WaitTimeoutError)  # (re-exported)
from dtrain.names import (EXEC_RUNNING_WAIT, MAX_TAIL, MAX_WAIT, check_gpu_quota, check_limit_bytes,  # noqa: F401
                          check_exec_rank, check_exec_rank_form, check_mounted_volume, check_name, check_page, check_rank, check_storage_class, check_tail, check_wait, near_name,
                          check_since, counted, its_ranks, parse_volume_size, shown, since_refusal, status_refusal, with_near)
from dtrain.spec import JobSpec

if TYPE_CHECKING:  # the local store's own reports; only the local backend produces them
    from dtrain.storage.info import VerifyReport
    from dtrain.storage.manifest import Change

NOTEBOOK_POLL_S = 0.2  # how often notebook_url(wait=...) asks again while a notebook's Jupyter starts
EXEC_POLL_S = 0.2


class Backend(BackendDefaults):
    """What a backend is: the contract a new backend author reads first.

    * Public verbs are concrete here and are never overridden. Each one checks what every backend
      checks the same way (names, sizes, argument combinations) and calls one `_hook`. A backend
      subclasses :class:`Backend`, sets `name`, and fills in the hooks.
    * Required hooks (abstract, declared in hooks.py): the job half, `_submit`, `_get`, `_list`, `_logs`, `_delete`,
      `_nodes`; the storage half, `_create_volume`, `_list_volumes`, `_get_volume`,
      `_delete_volume`, `_create_snapshot`, `_list_snapshots`, `_get_snapshot`,
      `_restore_snapshot`, `_delete_snapshot`.
    * Optional hooks: `_render` (dry run), `_suspend`/`_resume`, `_create_project`, `_list_projects`,
      `_delete_project`,
      `_verify_snapshot`, `_diff_snapshots`, `_exec`, `_render_volume`, `_render_snapshot`,
      `_render_restore`, `_list_storage_classes`. The default raises :class:`NotSupportedError`, which
      the CLI prints as one line naming the backend and the verb; callers never probe a backend
      with `getattr`/`hasattr`. `_purge` (forget a deleted job) defaults to
      doing nothing, `_page` (a page of the job list) to filtering `_list`, `_one_project` (one project,
      its jobs counted) to picking it from `_list_projects`, and `_names` (what a
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
    # Whether it keeps projects (SageMaker does not: a job's project is a tag): told with no read, so a
    # caller whose read of it was refused knows, without reading it again, whether to say so.
    keeps_projects: bool = True

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

    def page(self, *, project: str | None = None, status: JobStatus | str | None = None,
             limit: int | None = None, offset: int = 0) -> JobPage:
        """The jobs of `project` (None: every project) in `status` (None: every status but Deleted),
        newest first (by creation time, then name, so that pages never overlap while nothing is
        submitted), `offset` of them skipped and at most `limit` kept (None: the rest); `total`
        counts them all. The default filters `_list`; a backend that can page at its source (the
        local one's SQL) implements `_page` and builds only the page's records."""
        statuses = check_statuses(status)
        check_page(limit, offset)
        return self._page(project=project, statuses=statuses, limit=limit, offset=offset)

    def mounting_page(self, volumes: Iterable[str], *, project: str | None = None,
                      limit: int | None = None) -> JobPage | None:
        """The jobs of `project` (None: every project), not the Deleted ones, that mount one of `volumes` or
        recorded a snapshot as their data's source (the lineage's jobs), newest first, at most `limit`, with
        `total`; None where this backend cannot pick them at its source (the caller pages every job). The
        local backend asks its SQL, so that many jobs mounting nothing never hide one that mounts a volume."""
        check_page(limit, 0)
        return self._mounting_page(frozenset(volumes), project=project, limit=limit)

    def summary(self, *, project: str | None = None) -> JobSummary:
        """The jobs of `project` (None: every project) counted by project and status, and the
        records of those not finished. The default reads `_list` once; the local backend counts in
        SQL and builds the unfinished jobs' records only."""
        counts, unfinished = self._summary(project=project)
        return JobSummary(counts=tuple(sorted(counts, key=lambda c: (c.project, c.status.value))),
                          unfinished=tuple(unfinished))

    def logs(self, name: str, *, rank: int | None = None, tail: int | None = None,
             since: float | None = None, follow: bool = False, previous: bool = False,
             limit_bytes: int | None = None, door: str = "sdk") -> LogStream:
        """Lines of one rank (or all), oldest first, of the job's current (latest) attempt, as
        kubectl shows the current container's; `previous`: of the attempt before it (kubectl logs
        --previous), an error when there was none; `since` is unix seconds; `follow` streams;
        `limit_bytes` (kubectl's --limit-bytes): the lines up to that many bytes, each counted as
        its UTF-8 text and a newline, the last one cut short to fit (a follower stops there). The
        returned :class:`LogStream`'s `notices`, as it is read, say why lines may be missing. `door`:
        whose words name the arguments refused (the SDK's rank= and tail=, the CLI's --rank and -t)."""
        typed, rank = rank, check_logs_args(rank=rank, tail=tail, since=since, follow=follow, previous=previous,
                                            limit_bytes=limit_bytes, door=door)
        try:
            with self._named("job", name):  # unknown job -> NotFoundError before any output
                info = self._get(_existing(name, "job"))
        except NotFoundError as err:  # a deleted job's snapshot, not a near name, says where its logs went
            raise self.gone_job_logs(name) or err from None
        if rank is not None and rank >= info.spec.processes:
            raise SpecError(f"invalid rank {shown(typed)}: job {name!r} has {its_ranks(info.spec.processes)}")
        return LogStream(self._logs(name, rank=rank, tail=tail, since=since, follow=follow, previous=previous),
                         limit_bytes, job=name)

    def gone_job_logs(self, name: str, project: str | None = None) -> NotFoundError | None:
        """Why `logs NAME` finds no job NAME where a snapshot records it (a job deleted since, of `project`
        where given): the snapshot that kept its logs and how to read them (checks.gone_job_logs)."""
        return gone_job_logs(name, project, self._list_snapshots, self._holds_job_logs)

    def wait(self, name: str, *, timeout: float | None = None, poll: float | None = None,
             command: Callable[[str], str] | None = None, door: str = "sdk") -> JobInfo:
        """Block until the job is terminal. A timeout's message names where to look further: `dtrain
        describe job NAME` for a job still Pending (why it waits), `dtrain logs NAME` for a running
        one; `command` turns those words into the command to type (the Client's names the job's
        project and backend, so that it works as written). `poll`: seconds between statuses
        (default: the backend's `_wait_poll`). `door`: whose words name the timeout, refused or run
        out (the SDK's timeout=, the CLI's --timeout)."""
        if timeout is not None:
            check_wait(timeout, door)
        with self._named("job", name):
            info = self._get(_existing(name, "job"))
        return _until(info, lambda: self._get(name), lambda i: i.status.terminal,
                      lambda i: late_wait(name, i, timeout, command, door), timeout=timeout,
                      poll=lambda: self._wait_poll(name) if poll is None else poll)

    def wait_snapshot(self, name: str, *, timeout: float | None = None, poll: float = 1.0,
                      command: Callable[[str], str] | None = None, door: str = "sdk") -> SnapshotInfo:
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
            f"not ready after {after}"), timeout=timeout, poll=poll, command=command, door=door)

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

    def nodes(self) -> Listed:
        """The nodes, with the call's notices (Kubernetes: pods it may not list, so GPUs allocated
        count only some of them or none)."""
        nodes = self._nodes()
        return Listed(nodes, notices_of(nodes))

    def exec(self, name: str, command: list[str] | tuple[str, ...], *, rank: int = 0,
             cmd: HintCommand | None = None, running_timeout: float = EXEC_RUNNING_WAIT, door: str = "sdk") -> int:
        """Run `command` beside a Running job's rank (its mount namespace / pod and environment),
        with this process's stdin, stdout and stderr; returns the command's exit code. `cmd`: the
        commands a refusal names (see `HintCommand`); `door`: whose words name the rank and the command
        refused (the SDK's arguments, the CLI's --rank and '--'). A job still Pending, or a rank still being
        launched (NotReadyError from `_exec`), is waited for up to `running_timeout` seconds, as
        `kubectl exec --pod-running-timeout` (1m) and `runai bash` wait for the pod to run; a job
        that ended or is suspended is refused at once."""
        cmd = cmd or _plain_command
        if isinstance(running_timeout, bool) or not isinstance(running_timeout, (int, float)) \
                or not 0 <= running_timeout <= MAX_WAIT:  # NaN compares false
            raise SpecError(f"invalid running_timeout {shown(running_timeout)}: use seconds from 0 to {MAX_WAIT} "
                            f"(366 days), e.g. 60 (the CLI's --pod-running-timeout 1m)")
        check_exec_rank_form(rank, door)  # before the job is read, as logs checks its rank
        with self._named("job", name):
            first = self._get(_existing(name, "job"))
        check_exec_rank(rank, name, first.spec.processes, door=door)  # the CLI's --rank is checked here too: one line
        infos = iter([first])

        def attempt() -> int:
            info = next(infos, None) or self._get(name)
            if info.status not in (JobStatus.RUNNING, JobStatus.PENDING):
                raise ConflictError(f"job {name!r} is {info.status}: exec needs a Running job "
                                    f"(see '{cmd(info.status.listed_by, info.spec.project)}')")
            if not isinstance(command, (list, tuple)) or not command or not all(  # 5, a Path, a dict's keys: no
                    isinstance(w, str) and "\0" not in w for w in command):
                raise SpecError("exec needs a command after '--', e.g. dtrain exec JOB -- ls /mnt" if door == "cli" else
                                f"invalid command {shown(command)}: exec needs a command as a list of its words, "
                                f"e.g. exec({name!r}, ['ls', '/mnt'])")
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

    def notebook_url(self, name: str, *, cmd: HintCommand | None = None, wait: float = 0) -> str:
        """Where to open notebook `name` (a job with spec.notebook), with its token where it has one.
        `cmd`: the commands the refusals name (see `HintCommand`). `wait`: seconds to wait for a
        Running notebook's Jupyter to serve (NotReadyError after them); a notebook that is not
        Running is refused at once (a queued one may wait for hours)."""
        return _while_not_ready(lambda: self._open_notebook(name, cmd), wait=wait, pause=NOTEBOOK_POLL_S)

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

    def delete_project(self, name: str) -> DeletedProjectInfo:
        """Delete project `name`: what `create_project` made (its GPU quota; Kubernetes: its namespace, where
        dtrain made it, else only dtrain's objects and labels there). Refused in one line naming what to
        delete first while it holds jobs (any but Deleted), notebooks, volumes or snapshots, and for
        `default`, where every job given no project runs."""
        check_name(name, "project")
        if name == "default":
            raise ConflictError("project 'default' cannot be deleted: every job given no project runs in it; "
                                "to drop its GPU quota use 'dtrain project create default --no-gpu-quota'")
        return self._delete_project(name)

    def has_project(self, name: str) -> bool:
        """Whether project `name` exists here."""
        check_name(name, "project")
        return self._has_project(name)

    def list_projects(self) -> Listed:
        """The projects by name, with the call's notices (Kubernetes: a project's GPU quota or the
        GPUs its pods hold that this account may not read)."""
        projects = self._list_projects()
        return Listed(sorted(projects, key=lambda p: p.name), notices_of(projects))

    def read_project(self, name: str) -> Listed:
        """Project `name` alone, as `list_projects` lists it (an empty list: no such project here), with
        the notices that list gives of it; its jobs counted, the other projects' not read."""
        check_name(name, "project")
        found = self._one_project(name)
        return Listed(found, notices_of(found))

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

    def get_volume(self, name: str) -> VolumeInfo:
        with self._named("volume", name):
            return self._get_volume(_existing(name, "volume"))

    def delete_volume(self, name: str, *, force: bool = False) -> str | None:
        """Delete a volume (its snapshots stay); refused while a job uses it unless `force`. None: it is
        gone; else what keeps it a while (Kubernetes keeps a claim, 'Terminating', until its pods stop)."""
        _flag(force, "force")
        with self._named("volume", name):
            return self._delete_volume(_existing(name, "volume"), force=force)

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
                    command: Callable[[str], str] | None = None, door: str = "sdk") -> VolumeInfo:
        """Block until the storage class `update_volume` set is in effect (`volume update --wait`): on
        Kubernetes once the PVC's status.currentVolumeAttributesClassName is its spec's class and
        status.modifyVolumeStatus is gone (the CSI driver is done); locally at once, as the move is
        done when `update_volume` returns. A class the storage system refuses (Infeasible) ends the
        wait (ConflictError naming the fix), as `wait_snapshot` ends on a snapshot's error."""
        return self._wait_storage("volume", name, self._get_volume, lambda i, say: self._class_change(i, say) is None,
                                  lambda info, say, after: (f"changing storage class after {after} "
                                                            f"({self._class_change(info, say)})"),
                                  timeout=timeout, poll=poll, command=command, door=door)

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
        """`snaps`, an earlier job's marked `earlier_run`, a deleted job's `job_deleted` (earlier_runs.py)."""
        return mark_earlier_runs(snaps, self._job_uids)

    def _job_uids(self, names: set[str]) -> dict[str, str | None]:
        """The jobs now named `names` and not Deleted, each name to its uid (None where unknown; a name no
        job has left out): each read with `_get`; a backend with a cheaper read overrides it."""
        return job_uids_one_by_one(self._get, names)

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

    def opened_problem(self) -> str | None:
        """Why this backend cannot be used from here at all, found before any request (a cluster's
        kubeconfig missing or broken); None: usable. A job verb's backend= naming one that cannot be
        opened is refused quoting it (Client.check_backend), a 404 over HTTP, not the 502 of a failure."""
        return self._opened_problem()

    def serving_notices(self) -> tuple[Notice, ...]:
        """What a process that serves this backend for long (`dtrain server`) is warned of at its
        start: the local backend's queued or held GPU jobs submitted with another DTRAIN_GPUS, which
        it could not start; none elsewhere."""
        return tuple(self._serving_notices())

"""The Python client: the one door the CLI (and later the HTTP API) goes through.

    import dtrain
    client = dtrain.Client()
    spec = dtrain.JobSpec(name="train", command=("python", "train.py"), processes=2, launcher="torchrun")
    client.submit(spec)
    client.wait("train")

Backends are picked per job (`spec.backend`), per project (config) or by default, and can be
injected: `Client(backends={"kubernetes": KubernetesBackend(cfg, api_client=fake)})`.

A Client may be shared by threads (a notebook's ThreadPoolExecutor submitting and waiting on
several jobs): each thread gets its own backends (the local one holds SQLite connections, which
threads must not share mid-transaction); backends given in `backends=` are shared as given.

The verbs are grouped in mixins, one module each: where a job is (client_lookup.py), the reads of
every project across backends (client_reads.py), config.yaml's settings (client_settings.py), and
volumes and snapshots (client_storage.py); this module holds the backends and the job verbs.
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
from pathlib import Path
from collections.abc import Mapping
from dataclasses import replace
from typing import Callable

from dtrain import db
from dtrain.backends.base import (EXEC_RUNNING_WAIT, MAX_TAIL, Backend, DeletedProjectInfo, JobInfo, JobStatus, Listed,
                                  LogStream, Notice,
                                  Page, ProjectInfo, TimeoutError_, check_page, check_statuses, notices_of, page_of)
from dtrain.client_lookup import BACKEND_ARG, SAGEMAKER_LOCAL, JobLookup, no_notebook
from dtrain.client_reads import EveryBackend
from dtrain.client_settings import Settings
from dtrain.client_storage import StorageVerbs
from dtrain.config import BACKENDS, ClassesOverlapError, UserConfig, home_dir
from dtrain.errors import ConflictError, DtrainError, NotFoundError, SpecError, WordedQuota
from dtrain.names import check_name, near_name, shown
from dtrain.remotes import RemoteReads, SentTo
from dtrain.spec import JobSpec, notebook_spec

__all__ = ["Client", "TimeoutError_", "MAX_TAIL"]  # the CLI catches wait's timeout from here; MAX_TAIL bounds tail


class Client(JobLookup, EveryBackend, Settings, StorageVerbs):
    door = "sdk"  # whose spelling of the project a job verb's refusal names (PROJECT_ARG)

    def __init__(self, *, home: str | Path | None = None, backend: str | None = None,
                 backends: dict[str, Backend] | None = None, sagemaker: Mapping[str, object] | None = None):
        self.home = home_dir(home)
        if sagemaker is not None and not isinstance(sagemaker, Mapping):
            raise SpecError(f"invalid sagemaker {shown(sagemaker)}: give a mapping of SageMaker settings, e.g. "
                            f"sagemaker={{'role': 'arn:aws:iam::123456789012:role/SageMakerRole', 'bucket': 'my-bucket'}}")
        # SageMaker settings of this client over config.yaml's (never saved): a KFP step's parameters
        self._sagemaker = {k: v for k, v in (sagemaker or {}).items() if v not in (None, "")}
        if sagemaker:  # an unknown key at once; the values where the settings are read (Settings.sagemaker_config)
            from dtrain.backends.sagemaker.config import SageMakerConfig
            if unknown := SageMakerConfig.unknown_settings(sagemaker):
                key, near = next(iter(unknown.items()))
                raise SpecError(f"unknown SageMaker setting {shown(key)} in Client(sagemaker=...)"
                                f"{f' (did you mean {near!r}?)' if near else ''}: use one of "
                                f"{', '.join(SageMakerConfig.__dataclass_fields__)}")
        try:
            self.config = UserConfig.load(self.home)
            self.config_problem: ClassesOverlapError | None = None
        except ClassesOverlapError as err:  # loaded still, for the verbs that repair it; every other use refuses
            self.config = UserConfig.load(self.home, apart=False)
            self.config_problem = err
        self._backend_name = backend
        if backends is not None and not isinstance(backends, Mapping):
            raise SpecError(f"invalid backends {shown(backends)}: give a mapping of backend name to Backend, "
                            f"e.g. backends={{'kubernetes': KubernetesBackend(config)}}")
        for key, given in (backends or {}).items():  # at once, not an AttributeError from the first call
            if not isinstance(key, str) or given is None or isinstance(given, (type, str, bytes, int, float, Mapping,
                                                                            list, tuple)):
                raise SpecError(f"invalid backends[{shown(key)}] {shown(given)}: give a Backend object, "
                                f"e.g. backends={{'kubernetes': KubernetesBackend(config)}}")
        self._backends: dict[str, Backend] = dict(backends or {})  # injected: shared by every thread
        # made here: one set per thread, keyed by the thread (not a threading.local, which a fork
        # clears in the child, closing connections there: see dtrain/server/clients.py)
        # keyed by backend name, and for Kubernetes by project too: its namespace is the project's;
        # the local backend by project too: its volume and snapshot messages name `-p PROJECT`
        self._made: dict[threading.Thread, dict[tuple[str, str | None], Backend]] = {}
        self._made_lock = threading.Lock()
        # job name -> (backend, project) of the jobs this client submitted: verbs on a name reach them there
        self._submitted: dict[str, tuple[str, str]] = {}
        self._sent_to = SentTo(self.home)  # the backends any process of this home submitted to: list -A reads them
        self._remote_reads: RemoteReads | None = None  # set by share_remote_reads: summary's counts, shared a while
        if backend is not None and (not isinstance(backend, str) or backend not in {*BACKENDS, *self._backends}):
            raise SpecError(f"unknown backend {shown(backend)}; use one of {', '.join(BACKENDS)}")

    # ---- backends -------------------------------------------------------------------------
    def backend(self, name: str | None = None, *, project: str | None = None) -> Backend:
        """The backend `name` (None: this client's, else `project`'s configured one, else the
        default's). One made here for Kubernetes looks in `project`'s namespace (None: the
        configured project's); an injected one is used as given."""
        if self.config_problem is not None:
            raise self.config_problem.with_traceback(None)
        if name is not None and not isinstance(name, str):  # a list or a Path: not a TypeError from a dict lookup
            raise SpecError(f"unknown backend {shown(name)}; use one of {', '.join(dict.fromkeys([*BACKENDS, *self._backends]))}")
        if project is not None and not isinstance(project, str):  # every verb's project= comes through here
            check_name(project, "project")  # refuses it in the words of a bad name, not a TypeError or SQL's
        given, project = project, project or self.config.project
        name = name or self._backend_name or self.config.backend_for(project)
        if name in self._backends:
            return self._backends[name]
        key = (name, project if name in ("kubernetes", "local") else None)
        me = threading.current_thread()
        with self._made_lock:
            mine = self._made.get(me)
        if mine is None or key not in mine:
            made = self._make_backend(name, given)
            with self._made_lock:
                ended = [self._made.pop(t) for t in list(self._made) if not t.is_alive()]
                mine = self._made.setdefault(me, {})
                mine.setdefault(key, made)
            del ended  # their connections close here, outside the lock
        return mine[key]

    def _forget_made(self, name: str) -> None:
        """Drop every thread's `name` backends: the next use opens one with the settings just saved."""
        with self._made_lock:
            dropped = [made.pop(key) for made in self._made.values() for key in list(made) if key[0] == name]
        del dropped

    def _make_backend(self, name: str, project: str | None = None) -> Backend:
        if name == "local":
            from dtrain.backends.local.backend import LocalBackend
            return LocalBackend(self.home, command=lambda words, of: self.command_for(
                words, backend="local", project=of), project=project)
        if name == "kubernetes":
            from dtrain.backends.kubernetes.backend import KubernetesBackend
            config = self._kubernetes_config(project)
            mapped = [p for p in (self.config.project, *sorted(self.config.project_backends))
                      if self.config.backend_for(p) == "kubernetes"]
            return KubernetesBackend(config, command=lambda words: self.command_for(
                words, backend="kubernetes", project=config.project), projects=mapped)
        if name == "sagemaker":
            from dtrain.backends.sagemaker.backend import SageMakerBackend
            return SageMakerBackend(self.sagemaker_config(), home=self.home, command=lambda words: self.command_for(
                words, backend="sagemaker"))
        raise SpecError(f"unknown backend {name!r}; use one of {', '.join(BACKENDS)}")

    def __repr__(self) -> str:
        """As a notebook cell shows it: the home, the backend a job that names none goes to (this
        client's, else config.yaml's default) and the configured project; nothing is opened."""
        backend = self._backend_name or self.config.backend_for(self.config.project)
        return f"Client(home={str(self.home)!r}, backend={backend!r}, project={self.config.project!r})"

    @property
    def default_project(self) -> str:
        """The project of the jobs and verbs that name none: config.yaml's (`dtrain config project`)."""
        return self.config.project

    # ---- jobs -----------------------------------------------------------------------------
    def submit(self, spec: JobSpec) -> JobInfo:
        """Start the job `spec` describes; its record (Pending or Running). SpecError for a spec the
        backend refuses, NotFoundError for a missing project or volume, ConflictError for a name in use."""
        spec = self._configured(spec, "submit")
        self.check_aws_ready(spec)
        try:
            info = self.backend(spec.backend, project=spec.project).submit(spec)
        except WordedQuota as err:  # the machine's or the quota's refusal, naming the arguments as this door does
            raise err.in_words(self.door) from None
        self._submitted[info.name] = (info.backend, info.spec.project)
        if info.backend != "local" and info.backend not in self._backends:  # an injected one is this client's alone
            self._sent_to.record(info.backend, info.spec.project)
        for notice in self.submit_notices(info.spec):  # the job runs; the user learns what did not come into it
            logging.getLogger(__name__).warning("dtrain: warning: %s", notice.message)
        return info

    def submit_notices(self, spec: JobSpec) -> tuple[Notice, ...]:
        """What `submit` of `spec` (as stored: its backend set) warns about while it runs the job (the
        CLI and SDK log it, the HTTP API's POST /jobs sends it in its Warning header): an --image the
        local backend does not use (it runs this machine's Python), unless it is the configured
        Kubernetes image anyway (a notebook's: notebook_image); a Run:AI user expects the image they name to run."""
        configured = self.config.kubernetes.get("notebook_image" if spec.notebook else "image")
        if spec.backend != "local" or not spec.image or spec.image == configured:
            return ()
        return (Notice(code="image-unused", message=(
            f"--image {spec.image} is not used by the local backend: job {spec.name!r} runs on this machine's "
            f"Python and packages; the image is used on Kubernetes and SageMaker (--backend kubernetes)")),)

    def _configured(self, spec: JobSpec, verb: str) -> JobSpec:
        """`spec` with the project and backend it left unset filled in as `dtrain submit` fills them:
        the configured default project, then this client's backend or that project's configured one."""
        _check_spec(spec, verb)
        changes = {}
        if "project" in spec._unset:
            changes["project"] = self.default_project
        if "backend" in spec._unset:
            changes["backend"] = self._backend_name or self.config.backend_for(changes.get("project", spec.project))
        return spec.replace(**changes) if changes else spec

    def get(self, name: str, *, project: str | None = None, backend: str | None = None) -> JobInfo:
        """Job `name`'s record, from `backend` (default: `project`'s, else where this client
        submitted it, else this client's or the configured one). With `project`, a job of
        another project is not found, as with the CLI's -p."""
        found, info = self._located(name, project, backend)
        return self._found(found, name, project, info)

    def logs(self, name: str, *, rank: int | None = None, tail: int | None = None, since: float | None = None,
             follow: bool = False, previous: bool = False, limit_bytes: int | None = None,
             project: str | None = None, backend: str | None = None) -> LogStream:
        """The current attempt's lines (kubectl's current container's); `previous`: the attempt before's;
        `limit_bytes`: at most that many bytes of them (kubectl logs --limit-bytes), the last line cut.
        The stream's `notices`, as it is read, say why lines may be missing."""
        return self._job(name, project, backend).logs(name, rank=rank, tail=tail, since=since, follow=follow,
                                                      previous=previous, limit_bytes=limit_bytes, door=self.door)

    def gone_job_logs(self, name: str, *, project: str | None = None, backend: str | None = None
                      ) -> NotFoundError | None:
        """Where the logs of a job that is not found went, when a snapshot records it (deleted since):
        `Backend.gone_job_logs`; None when none does."""
        return self._located(name, project, backend)[0].gone_job_logs(name, project)

    def wait(self, name: str, *, timeout: float | None = None, project: str | None = None,
             backend: str | None = None) -> JobInfo:
        """Block until the job is Succeeded, Failed or Deleted; its record (TimeoutError_ after `timeout` s)."""
        on = self._job(name, project, backend)
        where = project or (self._submitted.get(name, (None, None))[1]  # None: found where a bare name looks
                            if isinstance(name, str) else None)  # a name that is no string: refused by wait
        return on.wait(name, timeout=timeout, door=self.door,
                       command=lambda words: self.command_for(words, backend=on.name, project=where))

    def delete(self, name: str, *, purge: bool = False, project: str | None = None,
               backend: str | None = None) -> JobInfo:
        """Stop the job; with `purge` also forget it (record, events, logs). A job already Deleted
        is a NotFoundError unless purged, as `dtrain delete`, the HTTP DELETE and kubectl have it."""
        with self.room_to_free() if purge else contextlib.nullcontext():  # a purge frees its logs
            on, info = self._located(name, project, backend)
            info = self._found(on, name, project, info)
            if not purge and info.status == JobStatus.DELETED:
                given = "".join(f", {k}={v!r}" for k, v in (("project", project), ("backend", backend)) if v is not None)
                raise NotFoundError(f"job {name!r} was already deleted; nothing was deleted "
                                    f"(delete({name!r}, purge=True{given}) also forgets it)")
            info = on.delete(name, purge=purge)
        if purge:
            self._submitted.pop(name, None)
        return info

    def purge_refused(self, err: BaseException, names: list[str], *, project: str | None = None) -> str | None:
        """One line for a `delete(purge=True)` of `names` (none: `--all`) that a full home disk refused (no
        reserve left to give up: a disk never 16 MiB free), naming what to delete first: the largest of their
        log folders, which the purge removes anyway; None for any other error."""
        if not db.no_room(err) or "readonly" in str(err):
            return None
        logs = [(_tree_bytes(self.home / "jobs" / n / "logs"), n) for n in names if isinstance(n, str)]
        size, name = max(logs, default=(0, None))
        again = self.command_for(f"delete {' '.join(names[:5]) or '--all'} --purge", project=project,
                                 backend=self._backend_name or self.config.backend_for(project or self.config.project))
        first = (f"delete the logs of job {name!r} first (rm -r {self.home / 'jobs' / name / 'logs'}: "
                 f"{size / 2**20:.1f} MiB, which the purge removes anyway) or free space elsewhere there (df -h)"
                 if size else "free space there first (df -h)")
        return (f"not purged: the disk holding the home folder ($DTRAIN_HOME) is full, with no room to record the "
                f"purge; {first}, then run '{again}' again; nothing stored was changed")

    def room_to_free(self):
        """A context around calls that free space in the home folder (`delete(purge=True)`, a snapshot or
        volume delete): on a full home disk the reserve kept there is given up first, so that the state
        database opens and the delete commits (`db.room_to_free`). The CLI opens it around a purge's
        checks too, which read the database before anything is deleted."""
        return db.room_to_free(self.home)

    def suspend(self, name: str, *, project: str | None = None, backend: str | None = None) -> JobInfo:
        """Stop a Pending or Running job until `resume`: it checkpoints, frees its devices, reads Suspended."""
        return self._job(name, project, backend).suspend(name)

    def resume(self, name: str, *, project: str | None = None, backend: str | None = None,
               waiting: Callable[[float], None] | None = None) -> JobInfo:
        """Queue a Suspended job again; it goes on from its last checkpoint. A job whose processes
        are still stopping is waited for first (locally up to the grace period and 5 s), and
        `waiting` is called at once with that many seconds."""
        try:
            return self._job(name, project, backend).resume(name, waiting=waiting)
        except WordedQuota as err:
            raise err.in_words(self.door) from None

    def render(self, spec: JobSpec) -> Listed:
        """What `submit` would send to the job's backend (a dry run), a list of documents whose `notices`
        say what the documents alone do not (Kubernetes: an existing Role that submit would update)."""
        spec = self._configured(spec, "render")
        self.check_aws_ready(spec)
        try:
            requests = self.backend(spec.backend, project=spec.project).render(spec)
        except WordedQuota as err:
            raise err.in_words(self.door) from None
        return Listed(requests, notices_of(requests))

    def planned_snapshot(self, spec: JobSpec) -> str | None:
        """The snapshot `spec`'s --snapshot-on-success would take were it submitted now (a dry run's note)."""
        spec = self._configured(spec, "render")
        return self.backend(spec.backend, project=spec.project).planned_snapshot(spec)

    def check_aws_ready(self, spec: JobSpec, *, options: tuple[str, ...] = ()) -> None:
        """Refuse a SageMaker job bound for AWS where no role or bucket is configured, in this client's
        door's words (the SDK's sagemaker={'local': True}, the HTTP body's field), before the backend
        would in the CLI's. `options`: the SageMaker options that chose the backend for a job that named
        none (an HTTP body's `sagemaker`): the refusal says so, as `dtrain submit --instance-type` does.
        An injected SageMaker backend carries its own settings: it decides."""
        if spec.backend != "sagemaker" or "sagemaker" in self._backends or (
                spec.sagemaker is not None and spec.sagemaker.local):
            return
        try:
            self.sagemaker_config().require_aws(local=SAGEMAKER_LOCAL[self.door])
        except SpecError as err:
            own = self.config.backend_for(spec.project)
            if not options or own == "sagemaker":
                raise
            raise SpecError(f"the SageMaker options ({', '.join(options)}) need {BACKEND_ARG[self.door].format('sagemaker')} "
                            f"(this project's backend is {own}), and {err} (or leave them out to run on backend "
                            f"{own})") from None

    def check_inputs(self, spec: JobSpec) -> None:
        """Refuse what `submit` would refuse of the data the job reads, asking its backend's service
        (SageMaker: each S3 channel holds an object); nothing is made."""
        spec = self._configured(spec, "render")
        self.backend(spec.backend, project=spec.project).check_inputs(spec)

    def exec(self, name: str, command: list[str], *, rank: int = 0, project: str | None = None,
             running_timeout: float = EXEC_RUNNING_WAIT, backend: str | None = None) -> int:
        """Run a command beside a Running job's rank; its exit code. A job still Pending or a rank being
        launched is waited for up to `running_timeout` seconds (kubectl exec's --pod-running-timeout)."""
        on = self._job(name, project, backend)
        return on.exec(name, command, rank=rank, cmd=self._hint_command(on), running_timeout=running_timeout,
                       door=self.door)

    def nodes(self) -> Listed:
        """The default backend's nodes; its `notices` say what could not be read (Kubernetes: pods this
        account may not list, so GPUs allocated count only some of them or none)."""
        return self.backend().nodes()

    # ---- notebooks: interactive jobs (spec.notebook) ----------------------------------------
    def notebook(self, name: str, *, volumes=(), **fields) -> JobInfo:
        """Start Jupyter as a job on `volumes` (e.g. ['data:/home/jovyan']); it runs until deleted."""
        fields.setdefault("project", self.default_project)
        return self.submit(notebook_spec(name, volumes=volumes, door=self.door, **fields))

    def list_notebooks(self, *, project: str | None = None, show_deleted: bool = True,
                       status: JobStatus | str | None = None) -> Listed:
        """The notebooks among `list`'s jobs (of `project`; None: every project's; `status` and `show_deleted`
        as `list`'s), with its notices but that of pods not read ('pods-unread': processes, GPUs in use and
        node, which no notebook listing shows; Kubernetes tells a notebook's status from its Notebook object then)."""
        jobs = self.list(project=project, show_deleted=show_deleted, status=status)
        return Listed((j for j in jobs if j.spec.notebook), [n for n in jobs.notices if n.code != "pods-unread"])

    def page_notebooks(self, *, project: str | None = None, status: JobStatus | str | None = None,
                       limit: int | None = None, offset: int = 0) -> Page:
        """A page of `list_notebooks`' notebooks in `status` (None: all but Deleted), newest first (by
        creation time, then name): `offset` skipped, at most `limit` (1 to 1000; None: the rest), with
        `total`, how many matched, and `notices`, as `page`'s for jobs."""
        statuses = check_statuses(status)
        check_page(limit, offset, "notebooks")
        books = self.list_notebooks(project=project, show_deleted=statuses is not None and JobStatus.DELETED in statuses)
        return page_of(Listed((b for b in books if statuses is None or b.status in statuses), books.notices),
                       limit, offset)

    def notebook_url(self, name: str, *, project: str | None = None, wait: float = 0, backend: str | None = None) -> str:
        """`wait`: seconds to wait for a Running notebook's Jupyter to serve (a NotReadyError until then)."""
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 3600:
            raise SpecError(f"invalid wait {shown(wait)}: use seconds from 0 to 3600, e.g. wait=60")
        try:
            on = self._job(name, project, backend)
            return on.notebook_url(name, cmd=self._hint_command(on), wait=wait)
        except NotFoundError as err:  # no such job: the notebook named, and where notebooks are listed
            raise NotFoundError(no_notebook(str(err), name)) from None

    def _hint_command(self, backend: Backend) -> Callable[[str, str], str]:
        """How a refusal of `backend` names a command on a job of a project (base.HintCommand)."""
        return lambda words, project: self.command_for(words, backend=backend.name, project=project)

    def dtrain_for(self, backend: str, project: str | None = None) -> str:
        """The command a printed hint names: with --backend where `backend` is not the configured
        default, so the command works as printed."""
        return self.config.dtrain_for(backend, project)

    def command_for(self, words: str, *, backend: str, project: str | None = None) -> str:
        """`dtrain WORDS` as a printed hint names a follow-up command on a job of `project` on
        `backend`, so that it works as written (UserConfig.command_for: --backend and -p where the
        default would look elsewhere)."""
        return self.config.command_for(words, backend=backend, project=project)

    def artifacts(self, name: str, *, to: str | Path, project: str | None = None, output_data: bool = False,
                  backend: str | None = None) -> Path:
        """The job's model folder, copied (SageMaker: model.tar.gz downloaded and unpacked) into `to`;
        `output_data`: SageMaker's output.tar.gz ($SM_OUTPUT_DATA_DIR) instead."""
        return self._job(name, project, backend).artifacts(name, to=to, output_data=output_data)

    # ---- projects -------------------------------------------------------------------------
    def create_project(self, name: str, *, gpu_quota: int | None = None, no_gpu_quota: bool = False) -> ProjectInfo:
        """Create project NAME, or change its GPU quota (`no_gpu_quota` removes it): `dtrain project create`.
        Returns its record read back alone, as `list_projects` gives it; where that read is refused (an account
        that may create a project but not read its jobs: Kubernetes RBAC), what was set, with
        `extra['unknown']` saying why."""
        return self.made_project(name, gpu_quota=gpu_quota, no_gpu_quota=no_gpu_quota)[0]

    def made_project(self, name: str, *, gpu_quota: int | None = None, no_gpu_quota: bool = False
                     ) -> tuple[ProjectInfo, bool, str | None]:
        """`create_project`, with whether the project existed before and, where its record could not be
        read back, the line saying so (the HTTP API's POST /projects answers 200 or 201, and that Warning)."""
        on = self.backend(project=name)
        existed = on.has_project(name)
        on.create_project(name, gpu_quota=gpu_quota, no_gpu_quota=no_gpu_quota)
        try:  # the project is made: what follows only reads, and a refusal of it must not read as a failure
            made, why = next(iter(self.read_project(name)), None), None
        except DtrainError as err:
            made, why = None, " ".join(str(err).split())
        if made is not None:
            return made, existed, None
        why = why or "it is not among the projects this account can list"
        kept = existed and gpu_quota is None and not no_gpu_quota  # its quota unchanged, so not known here
        done = "it already exists, unchanged" if kept else "its GPU quota was set" if existed else "it was created"
        unknown = (f"project {name}: {done}, but its jobs{' and GPU quota' * kept} could not be read, so "
                   f"{'neither is shown' if kept else 'none are counted'} here: {why}")
        return ProjectInfo(name=name, backend=on.name, gpu_quota=None if no_gpu_quota else gpu_quota, gpus_allocated=0,
                           jobs=0, extra={"unknown": unknown}), existed, unknown

    def delete_project(self, name: str) -> DeletedProjectInfo:
        """Delete project NAME (`dtrain project delete`) on the backend config.yaml sends it to: what
        `create_project` made goes (locally its GPU quota; on Kubernetes its namespace where dtrain made it, else
        dtrain's objects and labels there, `kept` saying why); its config.yaml project_backends entry goes too
        (where config.yaml is a symbolic link, never written through, it stays and `kept` says so). Refused
        (ConflictError, one line naming what to delete first) while it holds jobs not Deleted, notebooks, volumes
        or snapshots, and for `default` and the configured default project."""
        check_name(name, "project")
        if name == self.default_project and name != "default":
            raise ConflictError(f"project {name!r} is the default project (config.yaml's project): make another the "
                                f"default first ('dtrain project set default'), then delete it")
        gone = self.backend(project=name).delete_project(name)
        sent = self.config.project_backends.get(name)
        if sent is None:
            return gone
        entry = f"config.yaml's project_backends entry {name}: {sent}"  # it would send a new project of the name there
        try:
            self.config = UserConfig.update(self.home, lambda cfg: cfg.project_backends.pop(name, None))
        except (DtrainError, OSError) as err:  # a link (never written through), a read-only home
            why = err.strerror if isinstance(err, OSError) else str(err)
            return replace(gone, kept="; ".join(filter(None, (gone.kept, f"{entry} stays: {why}"))))
        return replace(gone, removed=(*gone.removed, entry))

    def has_project(self, name: str) -> bool:
        """Whether project `name` exists on the backend config.yaml sends it to (its namespace on
        Kubernetes, read alone: an account that may create it need not list its jobs)."""
        return self.backend(project=name).has_project(name)

    def check_project(self, project: str) -> None:
        """NotFoundError for a project the local backend does not know: an empty list of its jobs
        would read as a project without jobs where it is a typo (in -p, ?project=, config.yaml).
        A Kubernetes project is a namespace that may lack dtrain's label, and SageMaker has none:
        an empty list there is just empty."""
        backend = self.backend(project=project)
        if backend.name != "local" or project == "default":
            return
        known = [p.name for p in backend.list_projects()]
        if project not in known:
            some = ", ".join(known[:10]) + (", ..." if len(known) > 10 else "")
            near = near_name(project, ["default", *known])  # a typo ('defualt') named first
            raise NotFoundError(f"no project named {project!r} ({'' if near is None else f'did you mean {near!r}? '}"
                                f"projects: {some}); see 'dtrain project list', or 'dtrain list -A' for the jobs "
                                f"of every project")


def _tree_bytes(folder: Path) -> int:
    """The bytes of the regular files under `folder` (0: none, or no such folder); links are not followed."""
    total = 0
    for root, _dirs, files in os.walk(folder):
        for f in files:
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(root, f))
                total += st.st_blocks * 512 if stat.S_ISREG(st.st_mode) else 0
    return total


def _check_spec(spec, verb: str) -> None:
    """A JobSpec, not the mapping a job file holds (that failed deep inside, an AttributeError)."""
    if not isinstance(spec, JobSpec):
        raise SpecError(f"{verb} takes a JobSpec, not {shown(spec)} ({type(spec).__name__}): build one with "
                        f"dtrain.JobSpec(name=..., command=[...]), or dtrain.JobSpec.from_dict(mapping) "
                        f"from a job file's fields")

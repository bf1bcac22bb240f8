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
"""

from __future__ import annotations

import contextlib
import logging
import os
import stat
import threading
import time
from dataclasses import replace
from pathlib import Path
from collections.abc import Iterable, Mapping
from collections import Counter
from typing import TYPE_CHECKING, Any, Callable, TypeVar

from dtrain import db
from dtrain.backends.base import (EXEC_RUNNING_WAIT, MAX_TAIL, Backend, FreedInfo, JobCount, JobInfo, JobPage, JobStatus, JobSummary, Listed, Notice,
                                  LogStream, Progress, ProjectInfo, SnapshotInfo, TimeoutError_,
                                  VolumeInfo, check_page, check_status, newest_first, notices_of)
from dtrain.config import BACKENDS, ClassesOverlapError, UserConfig, home_dir
from dtrain.errors import BackendError, ConflictError, DtrainError, NotFoundError, NotSupportedError, SpecError
from dtrain.names import MAX_PAGE, near_name, shown
from dtrain.remotes import RemoteReads, SentTo
from dtrain.spec import JobSpec, check_name, notebook_spec, parse_selector, selects

__all__ = ["Client", "TimeoutError_", "MAX_TAIL"]  # the CLI catches wait's timeout from here; MAX_TAIL bounds tail

if TYPE_CHECKING:
    from dtrain.backends.sagemaker.config import SageMakerConfig
    from dtrain.storage.info import VerifyReport
    from dtrain.storage.manifest import Change


# How a message names a job verb's project, in the words of the door a client serves (`Client.door`):
# the SDK's argument, the CLI's -p (dtrain.cli sets "cli"), the HTTP API's query parameter ("http").
PROJECT_ARG = {"sdk": ("project={!r}", "no project"), "cli": ("-p {}", "no -p"),
               "http": ("?project={}", "no ?project=")}
# How a message names the jobs of another backend, in the words of each door.
BACKEND_LIST = {"sdk": "dtrain.Client(backend={!r}).list()", "cli": "dtrain --backend {} list",
                "http": "GET /api/v1/jobs of `dtrain --backend {} server`"}
# How a message names forgetting a backend that `submit --backend` sent jobs to (state.db's sent_to), in
# the words of each door.
FORGET_BACKEND = {"sdk": "dtrain.Client().forget_backend({!r})", "cli": "dtrain config forget-backend {}",
                  "http": "POST /api/v1/backends/{}/forget"}
# How a message names a SageMaker job run on this machine (no AWS), and the backend a job goes to,
# in the words of each door.
SAGEMAKER_LOCAL = {"sdk": "sagemaker={'local': True}", "cli": "--local", "http": '"sagemaker": {"local": true}'}
BACKEND_ARG = {"sdk": "backend={!r}", "cli": "--backend {}", "http": '"backend": "{}"'}
# How a message names reaching a job on one backend with any job verb, in the words of each door: the SDK's
# job verbs' argument, the CLI's option, the HTTP API's job routes' query parameter.
JOB_BACKEND = {"sdk": "backend={!r}", "cli": "--backend {}", "http": "?backend={}"}
AWS_REGION_VARS = ("AWS_REGION", "AWS_DEFAULT_REGION")  # the SageMaker region when config.yaml sets none
T = TypeVar("T")


def _aws_region(var: str) -> str:
    from dtrain.spec_sagemaker import REGION_RE
    value = os.environ[var]
    if not REGION_RE.match(value):
        raise SpecError(f"invalid ${var} {shown(value)}: use an AWS region such as us-east-1, or unset it "
                        f"(dtrain config sagemaker --region REGION sets dtrain's own)")
    return value


class Client:
    door = "sdk"  # whose spelling of the project a job verb's refusal names (PROJECT_ARG)

    def __init__(self, *, home: str | Path | None = None, backend: str | None = None,
                 backends: dict[str, Backend] | None = None, sagemaker: Mapping[str, object] | None = None):
        self.home = home_dir(home)
        if sagemaker is not None and not isinstance(sagemaker, Mapping):
            raise SpecError(f"invalid sagemaker {shown(sagemaker)}: give a mapping of SageMaker settings, e.g. "
                            f"sagemaker={{'role': 'arn:aws:iam::123456789012:role/SageMakerRole', 'bucket': 'my-bucket'}}")
        # SageMaker settings of this client over config.yaml's (never saved): a KFP step's parameters
        self._sagemaker = {k: v for k, v in (sagemaker or {}).items() if v not in (None, "")}
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
        if backend is not None and backend not in BACKENDS and backend not in self._backends:
            raise SpecError(f"unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")

    # ---- backends -------------------------------------------------------------------------
    def backend(self, name: str | None = None, *, project: str | None = None) -> Backend:
        """The backend `name` (None: this client's, else `project`'s configured one, else the
        default's). One made here for Kubernetes looks in `project`'s namespace (None: the
        configured project's); an injected one is used as given."""
        if self.config_problem is not None:
            raise self.config_problem.with_traceback(None)
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

    def kubernetes_config(self, project: str | None = None):
        """The Kubernetes settings in use for `project` (None: the configured one), as the backend reads
        them from config.yaml: a typo'd key or a bad value is one SpecError line naming the file."""
        return self._kubernetes_config(project)

    def _kubernetes_config(self, project: str | None = None, *, kubernetes: Mapping[str, Any] | None = None):
        """The `kubernetes:` settings of config.yaml as a KubernetesConfig for `project` (None: the
        configured one); a key it does not know (a typo) or a bad value is one line naming
        config.yaml and the key."""
        import difflib
        from dataclasses import fields

        from dtrain.backends.kubernetes.config import KubernetesConfig
        where = self.home / "config.yaml"
        settings = self.config.kubernetes if kubernetes is None else kubernetes  # settings about to be saved
        known = [f.name for f in fields(KubernetesConfig)]
        for key in sorted(map(str, settings)):
            if key not in known:
                near = difflib.get_close_matches(key, known, n=1)
                hint = f"did you mean '{near[0]}'?" if near else "dtrain/backends/kubernetes/config.py lists them"
                raise SpecError(f"{where}: unknown kubernetes setting {key!r} ({hint}); fix or remove it")
        try:
            return KubernetesConfig(**{"project": self.config.project, **settings,
                                       **({"project": project} if project else {})})
        except (SpecError, TypeError) as err:
            raise SpecError(f"{where}: {err}") from None

    def sagemaker_config(self) -> SageMakerConfig:
        """The SageMaker settings in use, each from the first place that has it: the `sagemaker=`
        settings this client was made with (a pipeline step's parameters), config.yaml's `sagemaker:`,
        and for the region $AWS_REGION, then $AWS_DEFAULT_REGION (as the AWS CLI reads them; on EKS
        IRSA sets both), then us-east-1. An unknown key or a bad value is one line naming where it
        came from."""
        from dtrain.backends.sagemaker.config import SageMakerConfig
        where = str(self.home / "config.yaml")
        try:
            saved = SageMakerConfig.from_dict(self.config.sagemaker, where=where)
        except SpecError as err:
            raise SpecError(str(err) if str(err).startswith(where) else f"{where}: {err}") from None
        settings = dict(self.config.sagemaker)
        if settings.get("region") is None:
            settings.pop("region", None)
            for var in AWS_REGION_VARS:
                if os.environ.get(var):
                    settings["region"] = _aws_region(var)
                    break
        if not self._sagemaker and settings == self.config.sagemaker:
            return saved
        try:
            return SageMakerConfig.from_dict({**settings, **self._sagemaker}, where="Client(sagemaker=...)")
        except SpecError as err:
            raise SpecError(f"SageMaker settings given to this client: {err}") from None

    @property
    def default_project(self) -> str:
        return self.config.project

    # ---- jobs -----------------------------------------------------------------------------
    def submit(self, spec: JobSpec) -> JobInfo:
        """Start the job `spec` describes; its record (Pending or Running). SpecError for a spec the
        backend refuses, NotFoundError for a missing project or volume, ConflictError for a name in use."""
        spec = self._configured(spec, "submit")
        self.check_aws_ready(spec)
        info = self.backend(spec.backend, project=spec.project).submit(spec)
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

    def _job_backend(self, name: str, project: str | None, backend: str | None = None) -> Backend:
        """The backend that holds job `name`: `backend` when given; else `project`'s (the CLI's -p:
        its configured backend, its namespace on Kubernetes); else the one this client submitted
        the job to; else this client's, or the configured project's."""
        return self._located(name, project, backend)[0]

    def _located(self, name: str, project: str | None, backend: str | None = None
                 ) -> tuple[Backend, JobInfo | None]:
        """`_job_backend`, with the job's record when looking for it there read it (None: not read):
        `_found` uses it, so that a verb reads a remote job once, not once to find it and again."""
        if backend is not None:
            self.check_backend(backend)
        if project is not None:
            check_name(project, "project")
        elif isinstance(name, str) and backend in (None, self._submitted.get(name, ("",))[0]):
            backend, project = self._submitted.get(name, (backend, None))
        found = self.backend(backend, project=project)
        if backend is None and self._backend_name is None and isinstance(name, str):
            return self._holder(found, name, project)
        return found, None

    def _holder(self, first: Backend, name: str, project: str | None) -> tuple[Backend, JobInfo | None]:
        """`first` (where a bare name looks) when it has job `name`; else the one backend that any
        `submit --backend` of this home sent jobs to (state.db's sent_to) and that has it, in `project`
        (`list -A` shows it there). Several that have it: a ConflictError naming each to give. With the
        record read where it was found (None: not found, or not read)."""
        sent = [b for b, _ in self._sent_to.read() if b != first.name]
        if not sent:
            return first, None
        try:
            return first, first.get(name)
        except NotFoundError:
            pass
        holders = []
        for other in sent:
            try:
                backend = self.backend(other, project=project)
                holders.append((backend, backend.get(name)))
            except DtrainError:  # not there, or not answering: the miss's hint names it still
                continue
        if len(holders) > 1:
            give = " or ".join(JOB_BACKEND[self.door].format(b.name) for b, _ in holders)
            raise ConflictError(f"job {name!r} is on {len(holders)} backends this home sent jobs to: give "
                                f"{give}; nothing was changed")
        return holders[0] if holders else (first, None)

    def check_backend(self, name: str) -> None:
        """Refuse a job verb's `backend` that names no backend (SpecError), or one that cannot be opened from this
        home (NotFoundError: no kubeconfig, the refusal quotes why). One without settings here is used all the same: a cluster
        behind the default kubeconfig needs none, and SageMaker's --local jobs none."""
        known = list(dict.fromkeys([*BACKENDS, *self._backends]))
        if not isinstance(name, str) or name not in known:
            raise SpecError(f"unknown backend {shown(name)}; use one of {', '.join(known)}")
        try:
            made = self.backend(name)  # made once per thread and kept: the verb's own lookup uses it
            if name == "kubernetes" and name not in self._backends:
                made.api  # reads the kubeconfig (no request yet), as kubectl would before its first call
        except BackendError as err:  # not here to be found (an HTTP 404, not the server's own failure's 502)
            raise NotFoundError(f"backend {name!r} cannot be used from this home: {err}") from None

    def _job(self, name: str, project: str | None, backend: str | None = None) -> Backend:
        """`_job_backend`, once the job is found there and, with `project`, found to be of that project."""
        backend, info = self._located(name, project, backend)
        if project is not None or self._elsewhere(backend):  # a job it does not find: where else to look
            self._found(backend, name, project, info)
        return backend

    def _elsewhere(self, backend: Backend) -> list[tuple[str, str]]:
        """(project, backend) of the projects config.yaml's `project_backends` sends to a backend
        other than `backend`: their jobs are not there."""
        return sorted((p, b) for p, b in self.config.project_backends.items() if b != backend.name)

    def _found(self, backend: Backend, name: str, project: str | None, info: JobInfo | None = None) -> JobInfo:
        """Job `name`'s record from `backend` (`info`: already read there by `_located`); with `project`,
        only if it is of that project, and a project that does not exist is said to be the problem (a
        typo in -p), not the job."""
        try:
            info = info or backend.get(name)
        except NotFoundError as err:
            if project is not None:
                self.check_project(project)
            elif elsewhere := self._elsewhere(backend):  # the job may be one of theirs: how to look there
                give = PROJECT_ARG[self.door][0]
                some = " or ".join(f"{give.format(p)} ({b})" for p, b in elsewhere[:3])
                raise NotFoundError(f"{err}; a job of a project that config.yaml sends to another backend is "
                                    f"found with its project: {some}" + (" or ..." if len(elsewhere) > 3 else "")
                                    ) from None
            elif others := self._other_backends(backend):  # submitted with --backend, which is not kept
                raise NotFoundError(f"{err}; a job submitted to another backend is listed there: " + " or ".join(
                    BACKEND_LIST[self.door].format(b) for b in others)) from None
            raise
        return info if project is None else self._of_project(info, project)

    def share_submitted(self, other: "Client") -> None:
        """Find the jobs `other` submitted as it finds them, and it this client's: the HTTP API's
        clients (one per thread) agree on where a job POSTed to another backend is."""
        self._submitted = other._submitted

    def share_remote_reads(self, reads: RemoteReads) -> None:
        """Count the jobs of remote backends in `summary()` through `reads`, shared by the HTTP API's
        clients: a Prometheus scrape reads the cluster or AWS once per `reads.ttl`, not at each scrape."""
        self._remote_reads = reads

    def _other_backends(self, backend: Backend) -> list[str]:
        """The backends config.yaml has settings for, other than `backend`, when this client was given
        none: a job submitted there (`dtrain submit --backend kubernetes`) is not found here."""
        if self._backend_name is not None:
            return []
        sent = [name for name, _ in self._sent_to.read()]
        return [name for name in dict.fromkeys([*self._configured_backends(), *sent]) if name != backend.name]

    def forget_backend(self, name: str) -> list[str]:
        """Stop `list()` of every project asking backend `name` where only a `submit` to it (state.db's
        sent_to) made it ask (a cluster that is gone warned at each list); its jobs are not touched, and
        `backend=name` still reaches them. The reasons it is asked still (config.yaml's settings for it,
        a project sent there), as lines; NotFoundError for a backend not among those remembered."""
        sent = [b for b, _ in self._sent_to.read()]
        if name not in sent:
            some = ", ".join(sent) or "none"
            raise NotFoundError(f"backend {shown(name)} is not one this home's submit --backend sent jobs to "
                                f"(those remembered: {some}); nothing was forgotten")
        self._sent_to.forget(name)
        for job in [j for j, (b, _) in list(self._submitted.items()) if b == name]:  # shared by the server's clients
            self._submitted.pop(job, None)
        still = [f"config.yaml's {name}: settings" for b in self._configured_backends() if b == name]
        still += [f"project {p}'s backend (config.yaml's project_backends)"
                  for p, b in sorted(self.config.project_backends.items()) if b == name]
        if self.config.backend_for(self.default_project) == name:
            still.append("the default backend")
        return still

    def _configured_backends(self) -> list[str]:
        """The backends other than the local one that config.yaml (or this client's `sagemaker=`) has
        settings for: a job may have been sent there with `--backend` by any process."""
        configured = {"kubernetes": self.config.kubernetes, "sagemaker": self.config.sagemaker or self._sagemaker}
        return [name for name, settings in configured.items() if settings]

    def _of_project(self, info: JobInfo, project: str) -> JobInfo:
        """`info`, when its job is of `project` (a job verb's `project=`, the CLI's -p)."""
        if info.spec.project != project:
            give, none = PROJECT_ARG[self.door]
            raise NotFoundError(f"no job named {info.name!r} in project {project!r}: it is in project "
                                f"{info.spec.project!r} (give {give.format(info.spec.project)}, or {none})")
        return info

    def get(self, name: str, *, project: str | None = None, backend: str | None = None) -> JobInfo:
        """Job `name`'s record, from `backend` (default: `project`'s, else where this client
        submitted it, else this client's or the configured one). With `project`, a job of
        another project is not found, as with the CLI's -p."""
        found, info = self._located(name, project, backend)
        return self._found(found, name, project, info)

    def list(self, *, project: str | None = None, show_deleted: bool = True, selector: str | None = None,
             status: JobStatus | str | None = None) -> Listed:
        """Jobs of `project` (None: every project), in the order they were submitted; without
        `show_deleted`, not the Deleted ones (what `dtrain list jobs` and the HTTP list show unless
        asked); with `selector`, those whose labels match it (kubectl's `-l`:
        `KEY=VALUE,KEY!=VALUE,KEY,!KEY`); with `status` (a JobStatus or its word), only those in it
        (`status="Deleted"` shows them whatever `show_deleted` says). A project the local backend
        does not know is a NotFoundError, not an empty list (`check_project`). Its `notices` say what
        could not be read while the rest was (SageMaker: AWS failed, the --local jobs are listed)."""
        if not isinstance(show_deleted, bool):
            raise SpecError(f"invalid show_deleted {shown(show_deleted)}: use True or False")
        status = check_status(status)
        terms = None if selector is None else parse_selector(selector)  # a bad one: refused before any read
        def unexpired(backend: Backend, project: str | None = None) -> Listed:
            jobs = backend.list() if project is None else backend.list(project=project)
            expired = self._forget_expired(backend, jobs)
            return Listed([j for j in jobs if j.name not in expired], jobs.notices) if expired else jobs
        if project is None:  # every project: each backend config.yaml names, merged in submission order
            listed, notices = self._across(unexpired, cached="list")
        else:
            backend = self.backend(project=project)
            listed, notices = [(backend, unexpired(backend, project))], []
            if not listed[0][1]:
                self.check_project(project)
        out = []
        if project is None:  # a backend `submit --backend` sent jobs to, which lists none now: walked no more
            sent = {name for name, _ in self._sent_to.read()}
            for backend, jobs in listed:
                if not jobs and not jobs.notices and backend.name in sent:
                    self._sent_to.forget(backend.name)
        for backend, jobs in listed:
            notices += jobs.notices
            out += [j for j in jobs
                    if (j.status == status if status is not None else show_deleted or j.status != JobStatus.DELETED)
                    and (terms is None or selects(terms, j.spec.labels))]
        return Listed(out if len(listed) == 1 else sorted(out, key=lambda j: (j.created, j.name)), notices)

    def page(self, *, project: str | None = None, status: JobStatus | str | None = None, limit: int | None = None,
             offset: int = 0, selector: str | None = None) -> JobPage:
        """A page of the jobs of `project` (None: every project) in `status` (None: all but
        Deleted), newest first: `offset` skipped, at most `limit` (1 to 1000; None: the rest),
        with `total`, how many matched (the dashboard's Jobs table), and `notices`, as `list`'s.
        `selector` keeps the jobs whose labels match it (as `list`'s) before the count and the page."""
        if selector is not None:  # labels are matched on the records: the list, filtered, then paged
            status = check_status(status)
            check_page(limit, offset)
            jobs = self.list(project=project, selector=selector, status=status, show_deleted=False)
            return newest_first(jobs, limit, offset)
        if project is None and len(self._every_backend()) > 1:
            # every backend's first offset + limit jobs (past a page's bound: all), merged, then the page of them
            status = check_status(status)
            check_page(limit, offset)
            first = None if limit is None or offset + limit > MAX_PAGE else offset + limit
            pages, notices = self._across(lambda backend: self._expired_forgotten(backend, None).page(
                status=status, limit=first), cached=f"page {status and status.value} {first}")
            merged = newest_first([j for _, p in pages for j in p.jobs], limit, offset)
            return JobPage(total=sum(p.total for _, p in pages), jobs=merged.jobs,
                           notices=(*notices, *(n for _, p in pages for n in p.notices)))
        page = self._expired_forgotten(self.backend(project=project), project).page(
            project=project, status=status, limit=limit, offset=offset)
        if not page.total and project is not None:
            self.check_project(project)
        return page

    def summary(self, *, project: str | None = None) -> JobSummary:
        """The jobs of `project` (None: every project, on each backend config.yaml names) counted by
        project and status, and the records of those not finished (Prometheus' /metrics): the history
        is counted where it is kept, not read."""
        if project is not None:
            return self._expired_forgotten(self.backend(project=project), project).summary(project=project)
        def count(backend: Backend) -> JobSummary:
            read = lambda: self._expired_forgotten(backend, None).summary()  # noqa: E731
            if self._remote_reads is None or backend.name == "local":
                return read()
            return self._remote_reads.get(backend.name, read)
        parts, _ = self._across(count)
        if len(parts) == 1:
            return parts[0][1]
        counts = Counter()
        for _, part in parts:
            for count in part.counts:
                counts[(count.project, count.status)] += count.jobs
        unfinished = sorted((j for _, part in parts for j in part.unfinished), key=lambda j: (j.created, j.name))
        return JobSummary(counts=tuple(JobCount(project=p, status=s, jobs=n)
                                       for (p, s), n in sorted(counts.items(), key=lambda c: (c[0][0], c[0][1].value))),
                          unfinished=tuple(unfinished))

    def _expired_forgotten(self, backend: Backend, project: str | None) -> Backend:
        """`backend`, once the Deleted jobs of `project` past `deleted_job_ttl` are forgotten (read
        through a page of the Deleted ones: the others are not read)."""
        if self.config.deleted_job_ttl_seconds() is not None:
            self._forget_expired(backend, backend.page(project=project, status=JobStatus.DELETED).jobs)
        return backend

    # ---- every project: each backend config.yaml names, read once --------------------------
    def _every_backend(self) -> list[tuple[str, str]]:
        """(backend, project to open it for) of each backend a read of every project walks, once
        each: this client's when it was given one (`dtrain --backend B list -A`), else the default
        backend, then each other one that config.yaml's `project_backends` sends a project to (one
        Kubernetes backend lists every dtrain namespace its account may list), then each one config.yaml
        has settings for: a job sent there with `submit --backend` by another process is listed too
        (a Run:AI user's `list -A` shows every job they can reach)."""
        if self._backend_name is not None:
            return [(self._backend_name, self.default_project)]
        walk = {self.config.backend_for(self.default_project): self.default_project}
        walk.setdefault(self.config.backend, self.default_project)
        for project, name in sorted(self.config.project_backends.items()):
            walk.setdefault(name, project)
        for name in self._configured_backends():
            walk.setdefault(name, self.default_project)
        for name, project in self._sent_to.read():  # `submit --backend` of any process of this home
            walk.setdefault(name, project)
        for name, project in list(self._submitted.values()):  # `submit --backend`: its jobs are listed too
            walk.setdefault(name, project)
        return list(walk.items())

    def _across(self, read: Callable[[Backend], T], what: str = "jobs", skip: tuple[type[DtrainError], ...] = (),
                cached: str | None = None) -> tuple[list[tuple[Backend, T]], list[Notice]]:
        """`read` of each backend `_every_backend` names, with a notice for each one that could not be
        read (a cluster that does not answer, AWS without credentials): the others are read still; when
        none can be, the first one's error is the answer (an empty list would read as "no jobs").
        `what` names what was read in the notice; a `skip` error leaves a backend out without one.
        `cached`: the read's key in the server's RemoteReads (share_remote_reads), where a remote
        backend's answer or error is used again a while, with a notice of its age."""
        if self.config_problem is not None:
            raise self.config_problem.with_traceback(None)
        walk = self._every_backend()
        done, missed, first = [], [], None
        for name, project in walk:
            try:
                backend = self.backend(name, project=project)
                done.append((backend, self._kept_read(backend, read, cached, missed, what)))
            except DtrainError as err:
                if len(walk) == 1:
                    raise
                if isinstance(err, skip):
                    continue
                first = first or err
                theirs = sorted(p for p, b in self.config.project_backends.items() if b == name)
                whose = (f"projects {', '.join(theirs)}" if len(theirs) > 1 else f"project {theirs[0]}" if theirs
                         else "the default backend" if name == self.config.backend_for(self.default_project)
                         else f"config.yaml's {name}: settings" if name in self._configured_backends()
                         else f"where this home's submit --backend {name} sent jobs")
                said = " ".join(str(err).split())
                if whose.startswith("where"):  # asked at each list until it answers: how to stop that
                    said += f"; to stop asking it (a cluster that is gone): {FORGET_BACKEND[self.door].format(name)}"
                missed.append(Notice(code=f"{what}-unlisted",
                                     message=f"{what} on the {name} backend ({whose}) not listed, the others are: {said}"))
        if not done and first is not None:
            raise first.with_traceback(None)
        return done, missed

    def _kept_read(self, backend: Backend, read: Callable[[Backend], T], key: str | None, notices: list[Notice],
                   what: str) -> T:
        """`read(backend)`; a remote backend's through the server's RemoteReads under `key`, with a notice
        in `notices` when its answer is one read before (the dashboard refreshes every few seconds)."""
        reads = self._remote_reads
        if key is None or reads is None or backend.name == "local":
            return read(backend)
        value, age = reads.aged(f"{backend.name} {key}", lambda: read(backend), log=False)
        if age >= 1:
            notices.append(Notice(code=f"{what}-cached", message=(
                f"{what} on the {backend.name} backend as read {age:.0f} s ago (the server reads a remote "
                f"backend at most once each {reads.ttl:g} s)")))
        return value

    def _forget_expired(self, backend: Backend, jobs) -> set[str]:
        """Config `deleted_job_ttl`: deleted jobs are forgotten after a while; the names forgotten."""
        ttl = self.config.deleted_job_ttl_seconds()
        if ttl is None:
            return set()
        now = time.time()
        expired = {j.name for j in jobs if j.status == JobStatus.DELETED and now - (j.finished or j.created) > ttl}
        for name in expired:
            backend.delete(name, purge=True)
        return expired

    def logs(self, name: str, *, rank: int | None = None, tail: int | None = None, since: float | None = None,
             follow: bool = False, previous: bool = False, limit_bytes: int | None = None,
             project: str | None = None, backend: str | None = None) -> LogStream:
        """The current attempt's lines (kubectl's current container's); `previous`: the attempt before's;
        `limit_bytes`: at most that many bytes of them (kubectl logs --limit-bytes), the last line cut.
        The stream's `notices`, as it is read, say why lines may be missing."""
        return self._job(name, project, backend).logs(name, rank=rank, tail=tail, since=since, follow=follow,
                                             previous=previous, limit_bytes=limit_bytes)

    def wait(self, name: str, *, timeout: float | None = None, project: str | None = None,
             backend: str | None = None) -> JobInfo:
        """Block until the job is Succeeded, Failed or Deleted; its record (TimeoutError_ after `timeout` s)."""
        on = self._job(name, project, backend)
        where = project or (self._submitted.get(name, (None, None))[1]  # None: found where a bare name looks
                            if isinstance(name, str) else None)  # a name that is no string: refused by wait
        return on.wait(name, timeout=timeout, command=lambda words: self.command_for(words, backend=on.name, project=where))

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
        return self._job(name, project, backend).resume(name, waiting=waiting)

    def render(self, spec: JobSpec) -> list[dict]:
        """What `submit` would send to the job's backend (a dry run)."""
        spec = self._configured(spec, "render")
        self.check_aws_ready(spec)
        return self.backend(spec.backend, project=spec.project).render(spec)

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
        return on.exec(name, command, rank=rank, cmd=self._hint_command(on), running_timeout=running_timeout)

    def nodes(self) -> Listed:
        """The default backend's nodes; its `notices` say what could not be read (Kubernetes: pods this
        account may not list, so GPUs allocated count only some of them or none)."""
        return self.backend().nodes()

    # ---- notebooks: interactive jobs (spec.notebook) ----------------------------------------
    def notebook(self, name: str, *, volumes=(), **fields) -> JobInfo:
        """Start Jupyter as a job on `volumes` (e.g. ['data:/home/jovyan']); it runs until deleted."""
        fields.setdefault("project", self.default_project)
        return self.submit(notebook_spec(name, volumes=volumes, **fields))

    def list_notebooks(self, *, project: str | None = None, show_deleted: bool = True) -> Listed:
        """The notebooks among `list`'s jobs (of `project`; None: every project's), with its notices."""
        jobs = self.list(project=project, show_deleted=show_deleted)
        return Listed((j for j in jobs if j.spec.notebook), jobs.notices)

    def notebook_url(self, name: str, *, project: str | None = None, wait: float = 0, backend: str | None = None) -> str:
        """`wait`: seconds to wait for a Running notebook's Jupyter to serve (a NotReadyError until then)."""
        if isinstance(wait, bool) or not isinstance(wait, (int, float)) or not 0 <= wait <= 3600:
            raise SpecError(f"invalid wait {shown(wait)}: use seconds from 0 to 3600, e.g. wait=60")
        on = self._job(name, project, backend)
        return on.notebook_url(name, cmd=self._hint_command(on), wait=wait)

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

    def configure_sagemaker(self, *, unset: tuple[str, ...] | list[str] = (), **settings) -> dict:
        """Merge settings (role, bucket, region, subnets, ...) into config.yaml, after removing the
        keys in `unset` (a VPC or an image no longer wanted); all checked before saving."""
        from dtrain.backends.sagemaker.config import SageMakerConfig
        if isinstance(unset, str):  # 'vpc' read a character at a time, and nothing was unset
            unset = (unset,)
        given = {k: v for k, v in settings.items() if v is not None}
        if both := sorted(set(given) & set(unset)):
            raise SpecError(f"{both[0]} is both set and unset: give one of them; nothing was changed")
        where = str(self.home / "config.yaml")

        def merged(current: dict) -> dict:
            return {**{k: v for k, v in current.items() if k not in unset}, **given}

        SageMakerConfig.from_dict(merged(self.config.sagemaker), where=where)  # a SpecError writes nothing
        if settings.get("instance_type") is not None:  # a typo would refuse every later submit
            from dtrain.backends.sagemaker.validate import check_enum
            check_enum("sagemaker", "TrainingInstanceType", "ResourceConfig", settings["instance_type"],
                       "--instance-type")
        self.config = UserConfig.update(self.home, lambda cfg: setattr(
            cfg, "sagemaker", SageMakerConfig.from_dict(merged(cfg.sagemaker), where=where).to_dict()))
        merged = self.config.sagemaker
        self._forget_made("sagemaker")
        return merged

    @staticmethod
    def kubernetes_settings() -> tuple[str, ...]:
        """The settings config.yaml's `kubernetes:` takes (KubernetesConfig's fields; the project is
        each command's own), which configure_kubernetes sets and unsets."""
        from dataclasses import fields

        from dtrain.backends.kubernetes.config import KubernetesConfig
        return tuple(f.name for f in fields(KubernetesConfig) if f.name != "project")

    def configure_kubernetes(self, *, unset: tuple[str, ...] | list[str] = (), **settings) -> dict:
        """Merge settings (namespace, context, kubeconfig, image, ...: KubernetesConfig's fields) into
        config.yaml's `kubernetes:`, after removing the keys in `unset`; checked as the backend checks
        them when it reads config.yaml, before anything is saved. A kubeconfig is saved absolute (a
        relative one would be read from wherever a later command runs)."""
        if isinstance(unset, str):
            unset = (unset,)
        given = {k: v for k, v in settings.items() if v is not None}
        if both := sorted(set(given) & set(unset)):
            raise SpecError(f"{both[0]} is both set and unset: give one of them; nothing was changed")
        if empty := next((k for k, v in given.items() if isinstance(v, str) and not v.strip()), None):
            raise SpecError(f"an empty Kubernetes {empty}: give one, or remove the saved one with "
                            f"dtrain config kubernetes --unset {empty.replace('_', '-')}; nothing was changed")
        if isinstance(given.get("kubeconfig"), str):
            given["kubeconfig"] = os.path.abspath(os.path.expanduser(given["kubeconfig"]))
        known = self.kubernetes_settings()
        for key in [*given, *unset]:
            if key not in known:
                import difflib

                near = difflib.get_close_matches(key, known, n=1)
                raise SpecError(f"unknown Kubernetes setting {key!r}{f' (did you mean {near[0]!r}?)' if near else ''}: "
                                f"use one of {', '.join(known)}; nothing was changed")

        def change(cfg: UserConfig) -> None:
            cfg.kubernetes = {**{k: v for k, v in cfg.kubernetes.items() if k not in unset}, **given}
            self._kubernetes_config(kubernetes=cfg.kubernetes)  # a SpecError writes nothing

        from dtrain.backends.kubernetes.config import KubernetesConfig
        try:  # the values given, alone: their own line names the setting, not config.yaml
            KubernetesConfig(**{k: v for k, v in given.items() if k != "project"})
        except TypeError as err:
            raise SpecError(f"not a Kubernetes setting: {err}") from None
        except SpecError as err:
            raise SpecError(f"{err}; nothing was changed") from None
        self._kubernetes_config(kubernetes={**{k: v for k, v in self.config.kubernetes.items() if k not in unset},
                                            **given})
        self.config = UserConfig.update(self.home, change)
        self._forget_made("kubernetes")
        return dict(self.config.kubernetes)

    # ---- this machine's node labels (config.yaml's node_labels) ----------------------------
    def configure_node_labels(self, labels: Mapping[str, str] | None = None, *,
                              unset: tuple[str, ...] | list[str] = ()) -> dict[str, str]:
        """Give this machine node labels (what a local job's node_selector may ask for, as `kubectl label
        node` gives a node one), after removing those in `unset`, in config.yaml's `node_labels:`;
        checked before anything is saved. Returns the labels saved."""
        from dtrain.backends.local.node import WELL_KNOWN
        from dtrain.spec import node_labels

        given, unset = dict(labels or {}), [unset] if isinstance(unset, str) else list(unset)
        if both := sorted(set(given) & set(unset), key=str):
            raise SpecError(f"node label {both[0]} is both set and unset: give one of them; nothing was changed")
        if own := next((k for k in [*given, *unset] if k in WELL_KNOWN), None):
            raise SpecError(f"{own} is this machine's own label (the kubelet's, as 'dtrain nodes --json' shows it): "
                            f"it cannot be set or removed; nothing was changed")
        where = self.home / "config.yaml"

        def change(cfg: UserConfig) -> None:
            if missing := [k for k in unset if k not in cfg.node_labels]:
                raise NotFoundError(f"no node label {shown(missing[0])} in {where} (its node labels: "
                                    f"{', '.join(cfg.node_labels) or 'none'}); nothing was changed")
            cfg.node_labels = {**{k: v for k, v in cfg.node_labels.items() if k not in unset}, **given}
            try:
                node_labels(cfg.node_labels, "node label")
            except SpecError as err:
                raise SpecError(f"{err}; nothing was changed") from None

        self.config = UserConfig.update(self.home, change)
        return dict(self.config.node_labels)

    # ---- storage classes (config.yaml's storage_classes) -----------------------------------
    def set_storage_class(self, name: str, folder: str | Path) -> str:
        """Define (or re-point) local storage class `name` as `folder` (made absolute), checked as
        loading config.yaml checks it; every other setting stays. Returns the folder saved."""
        if not isinstance(folder, (str, Path)) or not str(folder):
            raise SpecError(f"storage class {name!r}: give its folder, e.g. /nvme/dtrain")
        root = str(Path(os.path.abspath(os.path.expanduser(folder))))
        where = self.home / "config.yaml"

        def change(cfg: UserConfig) -> None:
            cfg.storage_classes = {**cfg.storage_classes, name: root}
            try:
                cfg.validate(where)  # a SpecError writes nothing
            except ClassesOverlapError as err:
                if name not in err.classes:  # two other classes overlap still: how to repair them
                    raise
                raise SpecError(f"{err.problem}; nothing was changed") from None

        self.config = UserConfig.update(self.home, change, repair=True)  # a file this change repairs is read too
        self.config_problem = None
        self._forget_made("local")  # its store knows the classes it was opened with
        return root

    def unset_storage_classes(self, names: list[str] | tuple[str, ...]) -> dict[str, int]:
        """Remove local storage classes from config.yaml (their volumes stay where they are, listed
        NotConfigured by `volume classes`). Returns how many volumes each still held."""
        if isinstance(names, str):  # one name, not its characters
            names = [names]
        def change(cfg: UserConfig) -> None:
            missing = [n for n in names if n not in cfg.storage_classes]
            if missing:
                known = ", ".join(cfg.storage_classes) or "none"
                raise NotFoundError(f"no storage class {missing[0]!r} in {self.home / 'config.yaml'} (its classes: "
                                    f"{known}); nothing was changed")
            cfg.storage_classes = {n: r for n, r in cfg.storage_classes.items() if n not in names}

        self.config = UserConfig.update(self.home, change, repair=True)  # a file this change repairs is read too
        self.config_problem = None
        self._forget_made("local")
        # counted after: the volumes table, not config.yaml, says which volumes a class holds
        held = {c.name: c.volumes for c in self.backend("local").list_storage_classes()}
        return {name: held.get(name, 0) for name in names}

    # ---- projects -------------------------------------------------------------------------
    def set_default_project(self, name: str) -> None:
        check_name(name, "project")
        self.config = UserConfig.update(self.home, lambda cfg: setattr(cfg, "project", name))

    def set_default_backend(self, name: str, *, project: str | None = None) -> None:
        if name not in BACKENDS:
            raise SpecError(f"unknown backend {shown(name)}; use one of {', '.join(BACKENDS)}")
        if name == "kubernetes":  # its settings checked now, not by the first command that uses it
            self._kubernetes_config()
        elif name == "sagemaker":
            self.sagemaker_config()
        if project:
            check_name(project, "project")
            self.config = UserConfig.update(self.home, lambda cfg: cfg.project_backends.__setitem__(project, name))
        else:
            self.config = UserConfig.update(self.home, lambda cfg: setattr(cfg, "backend", name))

    def create_project(self, name: str, *, gpu_quota: int | None = None, no_gpu_quota: bool = False) -> None:
        """Create project NAME, or change its GPU quota (`no_gpu_quota` removes it)."""
        self.backend(project=name).create_project(name, gpu_quota=gpu_quota, no_gpu_quota=no_gpu_quota)

    def has_project(self, name: str) -> bool:
        """Whether project `name` exists on the backend config.yaml sends it to (its namespace on
        Kubernetes, read alone: an account that may create it need not list its jobs)."""
        return self.backend(project=name).has_project(name)

    def list_projects(self) -> Listed:
        """Each project, of every backend config.yaml names (as `list` without a project: a project
        config.yaml sends to Kubernetes is a namespace there), by name, with its Running and Pending
        jobs counted (as Run:AI lists running and pending workloads per project) where the jobs are
        kept. A name on two backends is the one of the backend config.yaml sends that project to; a
        backend without projects (SageMaker) adds none; one that does not answer is a notice, and so
        is what a backend could not read of its projects (Kubernetes: a GPU quota, the pods)."""
        def read(backend: Backend) -> tuple[Listed | None, JobSummary | None]:
            """The backend's projects (None: it has none) and its jobs counted, in one visit; a
            backend without projects whose jobs cannot be counted (SageMaker without AWS) adds nothing."""
            try:
                projects = backend.list_projects()
            except NotSupportedError:
                if alone:  # the only backend walked: its refusal is the answer, as before
                    raise
                try:
                    return None, self._expired_forgotten(backend, None).summary()
                except DtrainError:
                    return None, None
            return projects, self._expired_forgotten(backend, None).summary()

        alone = len(self._every_backend()) == 1
        parts, notices = self._across(read, what="projects")
        found: dict[str, ProjectInfo] = {}
        counts: Counter = Counter()
        for backend, (projects, summary) in parts:
            for count in summary.counts if summary is not None else ():  # counted wherever the jobs are kept
                counts[(count.project, count.status.value)] += count.jobs
            if projects is None:
                continue
            notices += notices_of(projects)
            for p in projects:
                if p.name not in found or (backend.name == self.config.backend_for(p.name)
                                           and found[p.name].backend != backend.name):
                    found[p.name] = p
        return Listed((replace(p, running=counts.get((p.name, "Running"), 0),
                               pending=counts.get((p.name, "Pending"), 0))
                       for p in sorted(found.values(), key=lambda p: p.name)), notices)

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
        return self._storage(project).create_volume(name, size=size, storage_class=storage_class)

    def render_volume(self, name: str, *, size: str = "10Gi", storage_class: str | None = None,
                      project: str | None = None) -> list[dict]:
        """What create_volume would send (a dry run)."""
        return self._storage(project).render_volume(name, size=size, storage_class=storage_class)

    def render_snapshot(self, volume: str, *, name: str | None = None, job: str | None = None,
                        project: str | None = None) -> list[dict]:
        return self._storage(project).render_snapshot(volume, name=name, job=job)

    def render_restore(self, name: str, *, to: str | None = None, in_place: bool = False,
                       storage_class: str | None = None, project: str | None = None) -> list[dict]:
        return self._storage(project).render_restore(name, to=to, in_place=in_place, storage_class=storage_class)

    def list_volumes(self, *, project: str | None = None) -> list[VolumeInfo]:
        return self._storage(project).list_volumes()

    def get_volume(self, name: str, *, project: str | None = None) -> VolumeInfo:
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
        return backend.wait_volume(name, timeout=timeout,
                                   command=lambda words: self.command_for(words, backend=backend.name, project=project))

    def render_volume_update(self, name: str, *, storage_class: str, project: str | None = None) -> dict | list[dict]:
        """`volume update --dry-run`: the PVC patch on Kubernetes (a list of requests), the planned
        move locally (one mapping)."""
        return self._storage(project).render_volume_update(name, storage_class=storage_class)

    def delete_volume(self, name: str, *, force: bool = False, project: str | None = None) -> None:
        with self.room_to_free():  # on a full home disk: the delete that frees it still commits
            self._storage(project).delete_volume(name, force=force)

    def create_snapshot(self, volume: str, *, name: str | None = None, job: str | None = None,
                        progress: Progress | None = None, project: str | None = None) -> SnapshotInfo:
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

    def get_snapshot(self, name: str, *, project: str | None = None) -> SnapshotInfo:
        return self._storage(project).get_snapshot(name)

    def wait_snapshot(self, name: str, *, timeout: float | None = None, project: str | None = None) -> SnapshotInfo:
        """Block until snapshot `name` is ready to use (Kubernetes takes one asynchronously: its
        VolumeSnapshot's readyToUse; a local one is ready once taken); TimeoutError_ after `timeout` s,
        ConflictError if the storage system reports it failed to take it."""
        backend = self._storage(project)
        return backend.wait_snapshot(name, timeout=timeout,
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
        backend = self._expired_forgotten(self._storage(project), project)
        scope = project or backend.volume_project()
        if mounting is not None and (page := backend.mounting_page(mounting, project=scope, limit=limit)) is not None:
            return page
        return backend.page(project=scope, limit=limit)

    def volume_job(self, name: str, *, project: str | None = None) -> JobInfo:
        """Job `name`, of whatever project, where `project`'s volumes and snapshots are (None: the
        configured project's backend): a snapshot's job, as the lineage links it."""
        if project is not None:
            check_name(project, "project")
        try:
            return self.backend(project=project).get(name)
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
        with self.room_to_free():  # on a full home disk: the delete that frees it still commits
            return self._storage(project).delete_snapshot(name)

    def verify_snapshot(self, name: str | None = None, *, project: str | None = None) -> VerifyReport:
        return self._storage(project).verify_snapshot(name)

    def diff_snapshots(self, a: str, b: str | None = None, *, project: str | None = None) -> list[Change]:
        """What changed from snapshot `a` to snapshot `b`, or to `a`'s volume as it is now (`b` None)."""
        return self._storage(project).diff_snapshots(a, b)


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

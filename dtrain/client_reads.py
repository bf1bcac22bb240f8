"""Reads of every project: `list`, `page`, `summary` and `list_projects` walk each backend
config.yaml names (and each one this home's `submit --backend` sent jobs to), with a notice for
one that does not answer; the HTTP API's clients keep a remote backend's answer a while
(RemoteReads). Deleted jobs past config.yaml's `deleted_job_ttl` are forgotten as they are read.
A mixin of Client.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import replace
from typing import TYPE_CHECKING, Callable, TypeVar

from dtrain.backends.base import (Backend, JobCount, JobPage, JobStatus, JobSummary, Listed, Notice, ProjectInfo,
                                  check_page, check_statuses, newest_first, notices_of)
from dtrain.client_lookup import FORGET_BACKEND
from dtrain.errors import DtrainError, NotSupportedError, SpecError
from dtrain.names import MAX_PAGE, check_name, shown
from dtrain.remotes import RemoteReads
from dtrain.spec import parse_selector, selects

if TYPE_CHECKING:
    from dtrain.config import ClassesOverlapError, UserConfig
    from dtrain.remotes import SentTo

T = TypeVar("T")


def _read_ago(age: float, ttl: float) -> str:
    """How a notice says a remote backend's answer, or its error, is one the server read before."""
    return f"as read {age:.0f} s ago (the server reads a remote backend at most once each {ttl:g} s)"


class EveryBackend:
    """Mixed into Client, which provides the backends, config.yaml and what this client submitted."""

    if TYPE_CHECKING:
        door: str
        config: UserConfig
        config_problem: ClassesOverlapError | None
        _backend_name: str | None
        _submitted: dict[str, tuple[str, str]]
        _sent_to: SentTo
        _remote_reads: RemoteReads | None

        @property
        def default_project(self) -> str: ...

        def backend(self, name: str | None = None, *, project: str | None = None) -> Backend: ...

        def check_project(self, project: str) -> None: ...

        def _configured_backends(self) -> list[str]: ...

    def share_remote_reads(self, reads: RemoteReads) -> None:
        """Count the jobs of remote backends in `summary()` through `reads`, shared by the HTTP API's
        clients: a Prometheus scrape reads the cluster or AWS once per `reads.ttl`, not at each scrape."""
        self._remote_reads = reads

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
        statuses = check_statuses(status)
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
                    if (j.status in statuses if statuses is not None else show_deleted or j.status != JobStatus.DELETED)
                    and (terms is None or selects(terms, j.spec.labels))]
        return Listed(out if len(listed) == 1 else sorted(out, key=lambda j: (j.created, j.name)), notices)

    def page(self, *, project: str | None = None, status: JobStatus | str | None = None, limit: int | None = None,
             offset: int = 0, selector: str | None = None) -> JobPage:
        """A page of the jobs of `project` (None: every project) in `status` (None: all but
        Deleted), newest first: `offset` skipped, at most `limit` (1 to 1000; None: the rest),
        with `total`, how many matched (the dashboard's Jobs table), and `notices`, as `list`'s.
        `selector` keeps the jobs whose labels match it (as `list`'s) before the count and the page."""
        if selector is not None:  # labels are matched on the records: the list, filtered, then paged
            status = check_statuses(status)
            check_page(limit, offset)
            jobs = self.list(project=project, selector=selector, status=status, show_deleted=False)
            return newest_first(jobs, limit, offset)
        if project is None and len(self._every_backend()) > 1:
            # every backend's first offset + limit jobs (past a page's bound: all), merged, then the page of them
            status = check_statuses(status)
            check_page(limit, offset)
            first = None if limit is None or offset + limit > MAX_PAGE else offset + limit
            key = status and "+".join(sorted(s.value for s in status))
            pages, notices = self._across(lambda backend: self._expired_forgotten(backend, None).page(
                status=status, limit=first), cached=f"page {key} {first}")
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
            backend = None
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
                # a remote backend's kept error (RemoteReads) is of an earlier read, as a kept answer is: its age
                age = self._kept_age(backend, cached) if backend is not None else None
                aged = f" {_read_ago(age, self._remote_reads.ttl)}" if age is not None and age >= 1 else ""
                missed.append(Notice(code=f"{what}-unlisted",
                                     message=f"{what} on the {name} backend ({whose}) not listed{aged}, the others "
                                             f"are: {said}"))
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
                f"{what} on the {backend.name} backend {_read_ago(age, reads.ttl)}")))
        return value

    def _kept_age(self, backend: Backend, key: str | None) -> float | None:
        """How old the answer or error `_kept_read` gave for `backend` under `key` is (None: read live)."""
        reads = self._remote_reads
        if key is None or reads is None or backend.name == "local":
            return None
        return reads.age(f"{backend.name} {key}")

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

    def read_project(self, name: str) -> Listed:
        """Project `name` as `list_projects` lists it (an empty list: no project by that name), with the
        notices of it: read alone on the backend config.yaml sends it to, and its Running and Pending
        jobs counted on each backend, the other projects not read. A project that backend does not
        have (one another backend keeps) is looked for in the whole list, as before."""
        check_name(name, "project")
        home = self.backend(project=name)
        try:
            mine = home.read_project(name)
        except NotSupportedError:  # a backend without projects (SageMaker): the list says what it says
            mine = Listed([])
        if not mine:
            listed = self.list_projects()
            return Listed([p for p in listed if p.name == name], listed.notices)

        def count(backend: Backend) -> JobSummary | None:
            """`name`'s jobs on `backend`; None where that backend keeps no projects and cannot count them
            (SageMaker without AWS), as the list leaves it out."""
            try:
                return self._expired_forgotten(backend, name).summary(project=name)
            except DtrainError:
                if backend.name == home.name or backend.keeps_projects:  # not read again to ask
                    raise
                return None

        parts, notices = self._across(count, what="projects")
        counts: Counter = Counter()
        for _, summary in parts:
            for c in summary.counts if summary is not None else ():  # a shared namespace holds others' jobs
                counts[c.status.value] += c.jobs if c.project == name else 0
        made = replace(mine[0], running=counts.get("Running", 0), pending=counts.get("Pending", 0))
        return Listed([made], (*notices, *mine.notices))

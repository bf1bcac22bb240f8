"""Reading and changing jobs: the Kubernetes backend's get, list, delete, suspend and resume.

A job is found by name among every job kind the cluster serves (a kind this account may not
read is named rather than said to be missing); its status is its object and its pods together
(status.py's, pure); an account that may not read pods gets the job's own status and the Role
that would show the rest. A mixin of KubernetesBackend.
"""

from __future__ import annotations

import contextlib
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from dtrain.backends.base import DataSource, JobInfo, JobStatus, Listed, Notice
from dtrain.errors import ConflictError, DtrainError, NotFoundError
from dtrain.names import listed

from .client import PVC, Forbidden, Missing, Unauthenticated
from .objects import (ANN_JOB_UID, ANN_SUCCESS_SNAPSHOT, JOB_RESOURCES, LABEL_JOB, LABEL_PROJECT, LABEL_ROLE,
                      ROLE_SNAPSHOTTER,
                      VOLUME_SNAPSHOT, Resource, job_selector, pod_reader_fix, success_snapshot_name)
from .render import render_resume, render_suspend
from .render_storage import render_success_snapshot
from .status import job_info, parse_time

if TYPE_CHECKING:
    from .client import KubeApi
    from .config import KubernetesConfig

JOB_ORDER = tuple(JOB_RESOURCES.values())  # where `get NAME` looks, in this order
# What an account needs to list every project's jobs at once (`dtrain list -A`)
_JOB_KINDS = "jobs.batch, pytorchjobs/mpijobs/notebooks.kubeflow.org and trainjobs.trainer.kubeflow.org"


class JobVerbs:
    """Mixed into KubernetesBackend, which provides api, config, namespace, projects and cmd."""

    if TYPE_CHECKING:
        api: KubeApi
        config: KubernetesConfig
        namespace: str
        projects: tuple[str, ...]

        def cmd(self, words: str) -> str: ...

    def _try_read(self, resource: Resource, namespace: str, name: str) -> dict | None:
        try:
            return self.api.read(resource, namespace, name)
        except Missing:
            return None

    def _jobs_named(self, namespace: str, name: str) -> tuple[list[tuple[Resource, dict]],
                                                              list[tuple[Resource, Forbidden]]]:
        """Objects of every job kind with this name, and the kinds this account may not read."""
        found, refused = [], []
        for resource in JOB_ORDER:
            try:
                obj = self._try_read(resource, namespace, name)
            except Forbidden as err:
                refused.append((resource, err))  # e.g. no RBAC for a kind this project does not use
                continue
            if obj is not None:
                found.append((resource, obj))
        return found, refused

    def _find(self, name: str) -> tuple[Resource, dict]:
        found, refused = self._jobs_named(self.namespace, name)
        for resource, obj in found:
            labels = obj["metadata"].get("labels") or {}
            if LABEL_JOB in labels and labels.get(LABEL_ROLE) != ROLE_SNAPSHOTTER:
                return resource, obj
        if refused:  # it may be of a kind we may not read: say so rather than 'not found'
            raise self._refused(name, refused)
        ttl = self.config.ttl_seconds_after_finished
        gone = "" if ttl is None else (f"; the cluster deletes a job {ttl}s after it ends (kubernetes setting "
                                       f"ttl_seconds_after_finished), and its pods and logs with it")
        raise NotFoundError(f"job {name!r} not found in namespace {self.namespace}: see '{self.cmd('list')}'{gone}")

    def _refused(self, name: str, refused: list[tuple[Resource, Forbidden]]) -> Forbidden:
        """Why a job not found among the kinds this account may read may still be there, naming its
        kind as Kubernetes does: the one its pods say they are owned by (a refused MPIJob is named
        MPIJob, not Job), else every refused kind."""
        if isinstance(refused[0][1], Unauthenticated) or len(refused) == 1:
            return refused[0][1]
        try:
            owners = {ref.get("kind") for pod in self._pods(name)
                      for ref in pod["metadata"].get("ownerReferences") or []}
        except DtrainError:
            owners = set()  # no pods to tell by: every refused kind is named
        mine = [(resource, err) for resource, err in refused if resource.kind in owners]
        if mine:
            return mine[0][1]
        kinds = ", ".join(f"{r.kind} ({r.full_name})" for r, _ in refused)
        can_i = "; ".join(f"kubectl auth can-i get {r.full_name} -n {self.namespace}" for r, _ in refused)
        return Forbidden(f"job {name!r} is none of the kinds this account may read in namespace {self.namespace}, "
                         f"and it may not read {kinds} there: check the name with '{self.cmd('list')}', or "
                         f"your RBAC ({can_i})")

    def _pods(self, name: str) -> list[dict]:
        return self.api.pods(self.namespace, job_selector(name))

    def _job_info(self, resource: Resource, obj: dict, name: str) -> JobInfo:
        """A job as its object and pods tell it. An account that may read the job but not pods gets
        the job's own status, its message saying what is unknown and the Role that would show it."""
        try:
            return job_info(resource.kind, obj, self._pods(name))
        except Forbidden as err:
            if isinstance(err, Unauthenticated):
                raise
            info = job_info(resource.kind, obj, None)
            return replace(info, message="; ".join(x for x in (info.message, _pods_unknown(err, self.namespace)) if x))

    def _get(self, name: str) -> JobInfo:
        resource, obj = self._find(name)
        return self._data_sources(self._snapshot_on_success(self._job_info(resource, obj, name)))

    def _job_uids(self, names: set[str]) -> dict[str, str | None]:
        """Each job's object read once, its metadata.uid (`_get` would read its pods and PVCs too); a job
        not there is left out. A job this account may not read is there with its uid unknown (None): its
        snapshots are listed as they are, neither an earlier run's nor a deleted job's."""
        uids = {}
        for name in names:
            with contextlib.suppress(NotFoundError):
                try:
                    uids[name] = self._find(name)[1]["metadata"].get("uid") or None
                except Forbidden:
                    uids[name] = None
        return uids

    def _data_sources(self, info: JobInfo) -> JobInfo:
        """The job's PVCs made from a VolumeSnapshot (`spec.dataSource`, fixed for the PVC's life),
        each marked where that snapshot was deleted since (absent, or a newer one took its name).
        Read when described: a PVC deleted since names nothing. Best effort, as lineage is: what
        this account may not read is left out."""
        namespace, sources = info.extra.get("namespace") or self.namespace, []
        for volume in dict.fromkeys(m.volume for m in info.spec.resolved_volumes()):
            try:
                pvc = self._try_read(PVC, namespace, volume)
                source = ((pvc or {}).get("spec") or {}).get("dataSource") or {}
                if source.get("kind") != "VolumeSnapshot" or not source.get("name"):
                    continue
                try:
                    snap = self.api.read(VOLUME_SNAPSHOT, namespace, source["name"])
                    born = parse_time((snap.get("metadata") or {}).get("creationTimestamp"))
                    made = parse_time((pvc.get("metadata") or {}).get("creationTimestamp"))
                    deleted = born is not None and made is not None and born > made
                except Missing as err:
                    deleted = not err.api_missing
            except DtrainError:  # refused or unanswered: described without it
                continue
            sources.append(DataSource(volume=volume, snapshot=source["name"], snapshot_deleted=deleted))
        if not sources:
            return info
        own = next((s.snapshot for s in sources if s.volume == info.spec.snapshot_volume), sources[0].snapshot)
        return replace(info, data_sources=tuple(sources), extra={**info.extra, "source_snapshot": own})

    def _list_of(self, project: str | None) -> Listed:
        """The jobs of `project`'s namespace (None: every project's, see `_list`)."""
        return self._list(None if project is None else self.config.namespace_of(project))

    def _list(self, namespace: str | None = None) -> Listed:
        """Jobs of `namespace` (None: every project's). An account that may not list jobs across the
        cluster gets those of each project config.yaml sends here (`projects`), namespace by namespace,
        with a notice naming each namespace it may not read either."""
        scope = namespace or (self.namespace if self.config.namespace else None)
        notices: list[Notice] = []
        try:
            objects, across = self._job_objects(scope), scope is None
        except Forbidden as err:
            if scope is not None or isinstance(err, Unauthenticated):
                raise
            (objects, notices), across = self._job_objects_each(), False
        if not objects:
            return Listed([], notices)
        found, refused = self._job_pods(across, {_key(obj)[0] for _, obj in objects})
        pods: dict[tuple[str, str], list[dict]] = {}
        for pod in found:
            meta = pod["metadata"]
            pods.setdefault((meta["namespace"], meta["labels"][LABEL_JOB]), []).append(pod)
        infos = []
        for resource, obj in objects:
            namespace = _key(obj)[0]
            if namespace in refused:  # what pods tell (processes, GPUs, node, a stuck pull) is unknown
                info = job_info(resource.kind, obj, None)
                info = replace(info, message="; ".join(x for x in (info.message, refused[namespace]) if x))
            else:
                info = job_info(resource.kind, obj, pods.get(_key(obj), []))
            infos.append(self._snapshot_on_success(info))
        # said once a namespace, as `list` says its other notices: its table shows those counts as unknown
        notices += [Notice(code="pods-unread", message=f"jobs of {_projects_in(namespace, objects)}: {said}")
                    for namespace, said in sorted(refused.items())]
        return Listed(sorted(infos, key=lambda i: (i.created, i.name)), notices)

    def _job_objects_each(self) -> tuple[list[tuple[Resource, dict]], list[Notice]]:
        """The job objects of each known project's namespace (`projects`), for an account refused the
        list across the cluster, and a notice for each namespace refused too; none readable: its error."""
        objects, notices, first = [], [], None
        spaces: dict[str, str] = {}
        for project in self.projects:
            spaces.setdefault(self.config.namespace_of(project), project)
        for namespace, project in spaces.items():
            try:
                objects += self._job_objects(namespace)
            except Forbidden as err:
                first = first or err
                notices.append(Notice(code="jobs-unlisted", message=(
                    f"jobs of project {project} (namespace {namespace}) not listed, the others are: {err}; or "
                    f"let this account list "
                    f"them across the cluster (a ClusterRole with list on {_JOB_KINDS} and a ClusterRoleBinding)")))
        if first is not None and len(notices) == len(spaces):
            raise first
        return objects, notices

    def _names(self, what: str) -> tuple[list[str], list[str]]:
        """The project's jobs by their objects alone (`_list` also reads every pod and each namespace)."""
        if what != "job":
            return super()._names(what)  # one list of PVCs or VolumeSnapshots
        return [obj["metadata"]["name"] for _, obj in self._job_objects(self.namespace)], []

    def _job_pods(self, across: bool, namespaces: set[str]) -> tuple[list[dict], dict[str, str]]:
        """dtrain's pods (`across`: of every namespace, else of `namespaces`), and why the pods of some
        namespaces are unknown. An account may list jobs across the cluster but pods only in some
        namespaces (RBAC grants each resource apart): it gets them namespace by namespace."""
        if across:
            try:
                return self.api.pods(None, job_selector()), {}
            except Forbidden:
                pass
        found, refused = [], {}
        for namespace in sorted(namespaces):
            try:
                found += self.api.pods(namespace, job_selector())
            except Forbidden as err:
                refused[namespace] = _pods_unknown(err, namespace)
        return found, refused

    def _job_objects(self, namespace: str | None) -> list[tuple[Resource, dict]]:
        """Every dtrain job object in a namespace (None: all), of every kind this cluster serves."""
        found, refused = [], []
        for resource in JOB_ORDER:
            try:
                items = self.api.list(resource, namespace, label_selector=job_selector())
            except Missing:
                continue  # that kind's CRD is not installed, so no job is of it
            except Forbidden as err:
                refused.append(err)  # no RBAC for a kind: list the others, unless none is allowed
                continue
            found += [(resource, obj) for obj in items]
        if len(refused) == len(JOB_ORDER):
            raise refused[0]
        return found

    def _snapshot_on_success(self, info: JobInfo) -> JobInfo:
        """Mechanism 1 of --snapshot-on-success (render_storage.py): snapshot once seen Succeeded."""
        volume = info.spec.snapshot_volume
        if info.status is not JobStatus.SUCCEEDED or not volume:
            return info
        namespace = info.extra["namespace"]
        if recorded := info.extra.get("success_snapshot"):  # taken once: never again (a delete is said)
            return self._recorded_snapshot(info, namespace, recorded)
        # What goes wrong here is said in the job's message: `describe`, `list` and `wait` read a
        # job that did succeed, whatever this account may do with snapshots.
        try:
            name, taken = self._success_snapshot(info, namespace)
        except Missing as err:
            if err.api_missing:
                return replace(info, message=f"snapshot-on-success not taken: {err.no_api()}")
            return replace(info, message=f"snapshot-on-success not checked: {err}")
        except DtrainError as err:
            return replace(info, message=f"snapshot-on-success not checked: {err}")
        if not taken:
            try:
                pvc = self._try_read(PVC, namespace, volume)
                if pvc is None:
                    return replace(info, message=f"snapshot-on-success not taken: volume {volume!r} is gone")
                self.api.create(render_success_snapshot(info.spec, self.config, pvc, job_uid=info.uid, name=name),
                                VOLUME_SNAPSHOT)
            except ConflictError:
                pass  # the in-cluster watcher took it first
            except DtrainError as failed:  # no RBAC to create snapshots, no answer: the next look retries
                return replace(info, message=f"snapshot-on-success not taken yet: {failed}")
        with contextlib.suppress(DtrainError):  # unrecorded (no patch right): the next look records it
            self.api.patch(JOB_RESOURCES[info.extra["kind"]], namespace, info.name, [
                {"op": "add", "path": "/metadata/annotations/" + ANN_SUCCESS_SNAPSHOT.replace("/", "~1"),
                 "value": name}])
        return _with_snapshot(replace(info, extra={**info.extra, "success_snapshot": name}), name, False)

    def _recorded_snapshot(self, info: JobInfo, namespace: str, name: str) -> JobInfo:
        """The job's snapshot as its object recorded it, said deleted where it is gone or another
        job's took its name: told by the job uid it records, by age only where it records none (an
        older watcher's). Unread (refused, no answer): named, its state unsaid."""
        try:
            meta = self.api.read(VOLUME_SNAPSHOT, namespace, name).get("metadata") or {}
        except Missing as err:
            if err.api_missing:
                return replace(info, snapshot=name, message=f"snapshot-on-success not checked: {err.no_api()}")
            return _with_snapshot(info, name, True)
        except DtrainError as err:
            return replace(info, snapshot=name, message=f"snapshot-on-success not checked: {err}")
        return _with_snapshot(info, name, _earlier_run(meta, info))

    def _success_snapshot(self, info: JobInfo, namespace: str) -> tuple[str, bool]:
        """This run's --snapshot-on-success snapshot name (success_snapshot_name) and whether it is
        taken: `<job>-success`, unless an earlier run of the name left that one (its job-uid is
        another's, or, where it records none, it is older than this job), then `<job>-success-<uid8>`.
        A read that fails raises (Missing with api_missing where the cluster has no snapshot API)."""
        def read(name: str) -> dict | None:
            try:
                return self.api.read(VOLUME_SNAPSHOT, namespace, name)
            except Missing as err:
                if err.api_missing:
                    raise
                return None

        base = success_snapshot_name(info.name)
        if not info.uid:  # which run a snapshot holds is unknown: the one name, as before uids
            return base, read(base) is not None
        own = success_snapshot_name(info.name, info.uid)
        if read(own) is not None:
            return own, True
        snap = read(base)
        if snap is None:
            return base, False
        return (own, False) if _earlier_run(snap.get("metadata") or {}, info) else (base, True)

    def _notebook_url(self, info: JobInfo) -> str:
        """Kubeflow serves a notebook behind its gateway, which authenticates the user itself."""
        namespace = info.extra.get("namespace") or self.namespace
        return f"{self.config.notebook_gateway.rstrip('/')}/notebook/{namespace}/{info.name}/"

    def _delete(self, name: str) -> JobInfo:
        resource, obj = self._find(name)
        info = self._job_info(resource, obj, name)
        # Foreground: the object stays (reading Deleted) until its pods, Service and watcher are gone.
        self.api.delete(resource, self.namespace, name, propagation="Foreground")
        return replace(info, status=JobStatus.DELETED, finished=info.finished or time.time(),
                       message=f"deleted {resource.kind} {name} from namespace {self.namespace}")

    def _suspend(self, name: str) -> JobInfo:
        """The kind's suspend flag (its controller deletes the pods, which get SIGTERM and the pod's
        grace period to checkpoint) with dtrain's annotation; a Notebook, Kubeflow's stop annotation."""
        resource, _ = self._find(name)
        at = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        obj = self.api.patch(resource, self.namespace, name, render_suspend(resource.kind, at=at))
        return self._job_info(resource, obj, name)

    def _resume(self, name: str) -> JobInfo:
        """The suspend flag off, the stop's annotations gone: the controller creates the pods again."""
        resource, obj = self._find(name)
        annotations = (obj.get("metadata") or {}).get("annotations") or {}
        obj = self.api.patch(resource, self.namespace, name, render_resume(resource.kind, annotations))
        return self._job_info(resource, obj, name)


def _with_snapshot(info: JobInfo, name: str, deleted: bool) -> JobInfo:
    """`info` naming its success snapshot `name`, said `deleted` or not (extra keeps a copy of the mark, as
    'snapshot_deleted', for one release: docs/kubernetes.md named it there)."""
    return replace(info, snapshot=name, snapshot_deleted=deleted, extra={**info.extra, "snapshot_deleted": deleted})


def _earlier_run(meta: dict, info: JobInfo) -> bool:
    """Whether the snapshot of metadata `meta` is not job `info`'s: it records another job uid, or,
    recording none (an older watcher's), it is older than the job."""
    recorded = (meta.get("annotations") or {}).get(ANN_JOB_UID)
    if recorded and info.uid:
        return recorded != info.uid
    return (parse_time(meta.get("creationTimestamp")) or 0.0) < int(info.created)


def _pods_unknown(err: Forbidden, namespace: str) -> str:
    return f"pods not shown (processes, GPUs and node unknown): {err}; to show them, {pod_reader_fix(namespace)}"


def _projects_in(namespace: str, objects: list[tuple[Resource, dict]]) -> str:
    """'project P (namespace N)': the projects of the jobs listed there, as a user names them (one
    fixed namespace may hold several); the namespace alone where none says its project."""
    projects = sorted({(obj["metadata"].get("labels") or {}).get(LABEL_PROJECT) for _, obj in objects
                       if _key(obj)[0] == namespace} - {None, ""})
    return f"{listed(projects, 'project')} (namespace {namespace})" if projects else f"namespace {namespace}"


def _key(obj: dict) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]



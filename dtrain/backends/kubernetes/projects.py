"""Projects: a project is a namespace (dtrain-NAME), its GPU quota a ResourceQuota on GPU
requests. An account that may not list namespaces sees the projects config.yaml sends to this
cluster. A mixin of KubernetesBackend.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any, Callable

from dtrain.backends.base import DeletedProjectInfo, JobStatus, Listed, Notice, ProjectInfo, project_in_use
from dtrain.errors import ConflictError, DtrainError, NotFoundError

from .client import (NAMESPACE, POD, PVC, RESOURCE_QUOTA, ROLE, ROLE_BINDING, SERVICE_ACCOUNT, Forbidden, Missing,
                     Unanswered, Unauthenticated)
from .nodes import HOLDING_GPUS
from .objects import GPU_RESOURCE, LABEL_MANAGED, LABEL_PROJECT, NOTEBOOK, SNAPSHOTTER_ACCOUNT, VOLUME_SNAPSHOT
from .render_storage import QUOTA_NAME, render_gpu_quota, render_namespace
from .status import job_info, pod_gpus

if TYPE_CHECKING:
    from .client import KubeApi
    from .config import KubernetesConfig
    from .objects import Resource


class ProjectVerbs:
    """Mixed into KubernetesBackend, which provides api, config, projects and the job look-ups."""

    if TYPE_CHECKING:
        api: KubeApi
        config: KubernetesConfig
        projects: tuple[str, ...]
        name: str

        def _try_read(self, resource: Resource, namespace: str, name: str) -> dict | None: ...

        def _job_objects(self, namespace: str | None) -> list[tuple[Resource, dict]]: ...

        def cmd(self, words: str) -> str: ...

        def _namespace_going(self, namespace: str, project: str) -> ConflictError: ...

    def _create_project(self, name: str, *, gpu_quota: int | None, no_gpu_quota: bool) -> None:
        """A project is a namespace (dtrain-NAME); its GPU quota a ResourceQuota on GPU requests
        (removed with `no_gpu_quota`)."""
        namespace = self.config.namespace_of(name)
        existing = None
        if gpu_quota is not None or no_gpu_quota:
            existing = self._try_read(RESOURCE_QUOTA, namespace, QUOTA_NAME)
            owner = ((existing or {}).get("metadata", {}).get("labels") or {}).get(LABEL_PROJECT)
            if self.config.namespace and owner not in (None, name):
                raise ConflictError(f"namespace {namespace} (kubernetes setting namespace) holds the GPU quota of "
                                    f"project {owner!r}, shared by every project there: change it with 'dtrain "
                                    f"project create {owner} --gpu-quota N', or give each project its own "
                                    f"namespace (unset namespace)")
        try:
            self.api.create(render_namespace(namespace, name, self.config), NAMESPACE)
        except ConflictError:  # an existing project: only its quota changes; one being deleted is refused
            found = None
            with contextlib.suppress(DtrainError):  # not readable: as before (a quota's create then says why)
                found = self._try_read(NAMESPACE, None, namespace)
            if ((found or {}).get("metadata") or {}).get("deletionTimestamp"):
                raise self._namespace_going(namespace, name) from None
        if no_gpu_quota:
            with contextlib.suppress(NotFoundError):  # none to remove
                self.api.delete(RESOURCE_QUOTA, namespace, QUOTA_NAME)
            return
        if gpu_quota is None:
            return
        quota = render_gpu_quota(name, gpu_quota, self.config)
        if existing is None:
            self.api.create(quota, RESOURCE_QUOTA)
        else:
            self.api.replace(quota, RESOURCE_QUOTA)

    def _delete_project(self, name: str) -> DeletedProjectInfo:
        """The project's namespace goes where dtrain made it for the project alone (labelled managed-by
        dtrain, owned by nothing such as a Kubeflow Profile, not the shared `namespace` setting's);
        otherwise the namespace stays and only dtrain's objects there (the GPU quota, the snapshot
        watcher's account) and dtrain's labels of this project on it go. Refused while it holds jobs not
        being deleted or notebooks, and, where the namespace would go, volumes or snapshots (in a shared
        namespace: those labelled with this project)."""
        namespace = self.config.namespace_of(name)
        found = self._try_read(NAMESPACE, None, namespace)
        meta = (found or {}).get("metadata") or {}
        labels = meta.get("labels") or {}
        if found is None or labels.get(LABEL_PROJECT, namespace) != name:
            raise NotFoundError(f"no project named {name!r} here (namespace {namespace} "
                                f"{'does not exist' if found is None else 'is not its'}); see 'dtrain project list'")
        shared = bool(self.config.namespace)
        owners = [f"{o.get('kind')} {o.get('name')}" for o in meta.get("ownerReferences") or []]
        ours = labels.get(LABEL_MANAGED) == "dtrain" and not shared and not owners

        def of_project(obj: dict) -> bool:
            return not shared or (obj["metadata"].get("labels") or {}).get(LABEL_PROJECT) == name
        held: dict[str, list[str]] = {"job": [], "notebook": [], "volume": [], "snapshot": []}
        for resource, obj in self._job_objects(namespace):
            if of_project(obj) and not obj["metadata"].get("deletionTimestamp"):
                held["notebook" if resource.kind == NOTEBOOK.kind else "job"].append(obj["metadata"]["name"])
        for kind, resource in (("volume", PVC), ("snapshot", VOLUME_SNAPSHOT)):
            try:
                items = self.api.list(resource, namespace)
            except Missing as err:
                if not err.api_missing:
                    raise
                items = []  # no snapshot API: no snapshot
            held[kind] = [o["metadata"]["name"] for o in items if of_project(o)
                          and not o["metadata"].get("deletionTimestamp")]
        refusal = project_in_use(name, held, self.cmd)
        if refusal is not None:
            raise refusal
        if ours:
            self._project_steps(name, [(f"namespace {namespace}", f"delete namespace {namespace}",
                                        lambda: self.api.delete(NAMESPACE, None, namespace))])
            return DeletedProjectInfo(name=name, backend=self.name, removed=(f"namespace {namespace}",))
        removed = self._project_steps(name, self._project_leftovers(name, namespace, labels, shared))
        why = ("the kubernetes setting namespace shares it among projects" if shared else
               f"it is owned by {', '.join(owners)}" if owners else "another tool made it (it has no label "
               f"{LABEL_MANAGED}=dtrain)")
        return DeletedProjectInfo(name=name, backend=self.name, removed=tuple(removed),
                                  kept=f"namespace {namespace} stays, with what else it holds: {why}")

    def _project_leftovers(self, name: str, namespace: str, labels: dict[str, str], shared: bool
                           ) -> list[tuple[str, str, Callable[[], object]]]:
        """The steps of a project delete that leaves its namespace, each (what goes, the verb and object, the call), in
        the order that leaves the project as listed until the last: the snapshot watcher's account (which the
        next submit makes again), then the GPU quota, then dtrain's labels, which make the namespace the
        project's; so a step refused leaves what a re-run of the same delete finishes. Everything is read
        first: a read refused changes nothing."""
        steps: list[tuple[str, str, Callable[[], object]]] = []

        def delete(resource: Resource, obj_name: str) -> Callable[[], object]:
            def call() -> None:
                with contextlib.suppress(NotFoundError):  # gone meanwhile
                    self.api.delete(resource, namespace, obj_name)
            return call
        reads = [] if shared else [ROLE_BINDING, ROLE, SERVICE_ACCOUNT]  # in a shared namespace every project's
        for resource in reads:
            found = self._project_step_read(name, f"{resource.kind} {SNAPSHOTTER_ACCOUNT} in namespace {namespace}",
                                            lambda r=resource: self._try_read(r, namespace, SNAPSHOTTER_ACCOUNT))
            if found is not None and (found["metadata"].get("labels") or {}).get(LABEL_MANAGED) == "dtrain":
                # (one another tool made, as submit leaves it, is not dtrain's to delete)
                what = f"{resource.kind} {SNAPSHOTTER_ACCOUNT}"
                steps.append((what, f"delete {what}", delete(resource, SNAPSHOTTER_ACCOUNT)))
        quota = self._project_step_read(name, f"ResourceQuota {QUOTA_NAME} in namespace {namespace}",
                                        lambda: self._try_read(RESOURCE_QUOTA, namespace, QUOTA_NAME))
        if quota is not None and (quota["metadata"].get("labels") or {}).get(LABEL_PROJECT) == name:
            steps.append((f"ResourceQuota {QUOTA_NAME}", f"delete ResourceQuota {QUOTA_NAME}",
                          delete(RESOURCE_QUOTA, QUOTA_NAME)))
        mine = [k for k in labels if k.startswith("dtrain.io/") or (k == LABEL_MANAGED and labels[k] == "dtrain")]
        if mine and labels.get(LABEL_PROJECT) == name:
            ops = [{"op": "remove", "path": "/metadata/labels/" + k.replace("~", "~0").replace("/", "~1")}
                   for k in mine]
            steps.append((f"labels {', '.join(sorted(mine))} of namespace {namespace}", f"patch namespace {namespace}",
                          lambda: self.api.patch(NAMESPACE, None, namespace, ops)))
        return steps

    def _project_step_read(self, name: str, what: str, read: Callable[[], dict | None]) -> dict | None:
        try:
            return read()
        except DtrainError as err:
            raise _partly(name, [], [], err, f"get {what}") from None

    def _project_steps(self, name: str, steps: list[tuple[str, str, Callable[[], object]]]) -> list[str]:
        """Each step in order; one that fails is one line saying what went, what failed and what stays,
        and that the same `project delete` run again finishes it."""
        done: list[str] = []
        for i, (what, step, call) in enumerate(steps):
            try:
                call()
            except DtrainError as err:
                raise _partly(name, done, [w for w, _, _ in steps[i + 1:]], err, step) from None
            done.append(what)
        return done

    def _list_projects(self) -> Listed:
        """Projects with their GPU quota, GPUs held by their pods and job count. An account that may
        read the jobs but not pods or quotas still gets its projects: GPUs counted from the running
        jobs' requests, the quota unknown, `extra['unknown']` saying so, and a notice for each
        ("quota-unknown", "gpus-unknown") that the CLI prints and the HTTP API sends as a Warning."""
        out, notices, first = [], [], None
        spaces = self._project_spaces()
        for project, namespace, going in spaces:
            try:
                objects = self._job_objects(namespace)
            except Forbidden as err:  # a namespace this account may not read: the others are listed
                if len(spaces) == 1:
                    raise
                first = first or err
                notices.append(Notice(code="projects-unlisted",
                                      message=f"project {project} (namespace {namespace}) not listed: {err}"))
                continue
            info, said = self._project_read(project, namespace, objects, going=going)
            out.append(info)
            notices += said
        if first is not None and not out:
            raise first
        return Listed(out, notices)

    def _one_project(self, name: str) -> Listed:
        """Project `name` alone, as `_list_projects` lists it: its namespace read, then its jobs, quota
        and pods; the other namespaces are not read. An empty list where the list would not show it
        as this namespace's (none, another project's, not dtrain's) or where its jobs may not be read
        (the list leaves it out, with a notice)."""
        namespace = self.config.namespace_of(name)
        try:
            found = self._try_read(NAMESPACE, None, namespace)
        except Forbidden:  # an account that may not read namespaces: those it may list or is set up for
            found = None if (name, namespace) not in self._project_namespaces() else {}
        else:
            labels = (found or {}).get("metadata", {}).get("labels") or {}
            found = found if labels.get(LABEL_PROJECT) == name else None
        if found is None:
            return Listed([])
        try:
            objects = self._job_objects(namespace)
        except Forbidden:
            return Listed([])
        going = bool((found.get("metadata") or {}).get("deletionTimestamp"))
        info, notices = self._project_read(name, namespace, objects, going=going)
        return Listed([info], notices)

    def _project_read(self, project: str, namespace: str, objects: list[tuple[Resource, dict]], *, going: bool = False
                      ) -> tuple[ProjectInfo, list[Notice]]:
        """The record of `project` from its job `objects`, its quota and its pods, and the notices of
        what this account may not read of them. `going`: its namespace is being deleted, `terminating`
        (and `extra['status']` 'Terminating', kubectl's word, for one release), until it is gone."""
        unknown: list[tuple[str, str]] = []
        try:
            quota = self._try_read(RESOURCE_QUOTA, namespace, QUOTA_NAME) or {}
        except Forbidden as err:
            quota = {}
            unknown.append(("quota-unknown", f"GPU quota unknown: {err}"))
        hard = (quota.get("spec") or {}).get("hard", {}).get(f"requests.{GPU_RESOURCE}")
        try:
            gpus = sum(pod_gpus(p) for p in self.api.list(POD, namespace, field_selector=HOLDING_GPUS))
        except Forbidden as err:
            infos = [job_info(resource.kind, obj, None) for resource, obj in objects]
            gpus = sum(i.spec.gpus_requested for i in infos if i.status is JobStatus.RUNNING)
            unknown.append(("gpus-unknown", f"GPUs allocated counted from the running jobs' requests: {err}"))
        extra: dict[str, Any] = {"namespace": namespace, **({"status": "Terminating"} if going else {})}
        # a job being deleted is no longer the project's (`list` hides it too), as locally
        jobs = sum(not obj["metadata"].get("deletionTimestamp") for _, obj in objects)
        if unknown:
            extra["unknown"] = "; ".join(said for _, said in unknown)
        return (ProjectInfo(name=project, backend=self.name, gpu_quota=int(hard) if hard is not None else None,
                            gpus_allocated=gpus, jobs=jobs, extra=extra, terminating=going),
                [Notice(code=code, message=f"project {project}: {said}") for code, said in unknown])

    def _has_project(self, name: str) -> bool:
        """Whether the project's namespace exists, and is this project's (a shared `namespace` setting
        holds the project that made it): that namespace read alone, its jobs not listed, so an account
        that may create projects but not list their jobs can run `project create`."""
        namespace = self.config.namespace_of(name)
        try:
            found = self._try_read(NAMESPACE, None, namespace)
        except Forbidden:  # an account that may not read namespaces: those it may list or is set up for
            return name in {project for project, _ in self._project_namespaces()}
        if found is None or found["metadata"].get("deletionTimestamp"):  # being deleted: create refuses it
            return False
        return ((found["metadata"].get("labels") or {}).get(LABEL_PROJECT, found["metadata"]["name"])) == name

    def _project_namespaces(self) -> list[tuple[str, str]]:
        """(project, namespace) of every project this account may see (_project_spaces)."""
        return [(project, namespace) for project, namespace, _ in self._project_spaces()]

    def _project_spaces(self) -> list[tuple[str, str, bool]]:
        """(project, namespace, whether it is being deleted) of every project this account may see; for an
        account that may not list namespaces, each project config.yaml sends here (`projects`) whose
        namespace it does not know to be missing."""
        try:
            namespaces = self.api.list(NAMESPACE, None, label_selector=LABEL_PROJECT)
        except Forbidden:  # a namespace-scoped account sees the projects it is set up for
            out = {}
            for project in self.projects:
                namespace = self.config.namespace_of(project)
                try:
                    found = self._try_read(NAMESPACE, None, namespace)
                except Forbidden:  # nor may it read the namespace: the one it is set up for
                    found = {"metadata": {"name": namespace, "labels": {LABEL_PROJECT: project}}}
                if found is not None:
                    out.setdefault(namespace, found)
            namespaces = list(out.values())
        return [((ns["metadata"].get("labels") or {}).get(LABEL_PROJECT, ns["metadata"]["name"]),
                 ns["metadata"]["name"], bool(ns["metadata"].get("deletionTimestamp"))) for ns in namespaces]



def _partly(name: str, done: list[str], left: list[str], err: DtrainError, step: str) -> DtrainError:
    """The one line of a project delete that stopped at `step` ('delete Role x'): what went, the error, what
    stays, and the fix: the same command again once the step may be done (it finishes what is left)."""
    went = f"partly deleted ({_and(done)} went{'; ' + _and(left) + ' stay' if left else ''})" if done else "not deleted"
    if isinstance(err, Forbidden) and not isinstance(err, Unauthenticated):
        when = f"once you may {step}"
    elif isinstance(err, Unanswered):
        when = "once the cluster answers (the step may have been done; the re-run looks again)"
    else:
        when = "once that is fixed"
    said = f"project {name!r} is {went}: {err}; re-run 'dtrain project delete {name}' {when}"
    return NotFoundError(said) if isinstance(err, Missing) else type(err)(said)


def _and(words: list[str]) -> str:
    return " and ".join(filter(None, (", ".join(words[:-1]), words[-1])))

"""Submit and its checks: what the Kubernetes backend looks up before it creates a job's objects
(a name or volume taken, a namespace or volume missing, Trainer too old), the creates in order
with the job as the owner of what goes with it, and the roll-back of a submit that fails part-way.
`--dry-run` (`_render`) makes the same lookups, never a create. A mixin of KubernetesBackend; the
snapshot watcher's ServiceAccount, Role and RoleBinding are watcher_rbac.py's.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, Callable

from dtrain.backends.base import JobInfo, Listed, Notice
from dtrain.errors import BackendError, ConflictError, DtrainError, NotFoundError
from dtrain.spec import JobSpec, VolumeMount

from .client import (CRD, NAMESPACE, PVC, RESOURCE_QUOTA, ROLE, ROLE_BINDING, SERVICE, SERVICE_ACCOUNT, Forbidden,
                     Missing, Unanswered, Unauthenticated)
from .jobs import JOB_ORDER
from .objects import (LABEL_JOB, LABEL_ROLE, ROLE_SNAPSHOTTER, TRAIN_JOB, VOLUME_SNAPSHOT, Resource, job_writer_fix,
                      success_snapshot_name)
from .render import render_job, resource_for
from .render_storage import render_namespace, render_snapshot_watcher
from .status import job_info
from .watcher_rbac import _SHARED

if TYPE_CHECKING:
    from .client import KubeApi
    from .config import KubernetesConfig

_BY_KIND = {r.kind: r for r in (NAMESPACE, PVC, RESOURCE_QUOTA, SERVICE, SERVICE_ACCOUNT, ROLE, ROLE_BINDING,
                                VOLUME_SNAPSHOT, *JOB_ORDER)}


class SubmitVerbs:
    """Mixed into KubernetesBackend, which provides api, config, cmd and the job and volume look-ups."""

    if TYPE_CHECKING:
        api: KubeApi
        config: KubernetesConfig

        def cmd(self, words: str) -> str: ...

        def _try_read(self, resource: Resource, namespace: str, name: str) -> dict | None: ...

        def _jobs_named(self, namespace: str, name: str) -> tuple[list[tuple[Resource, dict]],
                                                                  list[tuple[Resource, Forbidden]]]: ...

        def _check_storage_class(self, storage_class: str | None, volume: str, *, dry: bool = False) -> None: ...

        def _create_shared(self, obj: dict) -> None: ...

        def _shared_dry_run(self, want: dict) -> tuple[dict | None, Notice | None]: ...

    def _render(self, spec: JobSpec) -> list[dict]:
        """What `submit` would create, for `--dry-run`, after submit's own lookups (GET only, never a
        create, as `kubectl apply --dry-run=server` catches what the server would refuse): a missing
        namespace, a name or new volume taken, a volume or StorageClass missing are submit's one-line
        refusals. What cannot be looked up (no cluster, no RBAC to read it) is one warning naming it,
        and the manifests are returned all the same. The translation stays render_job's, pure."""
        objects = render_job(spec, self.config, with_namespace=self.config.create_namespace)  # a bad spec: no call
        namespace = self.config.namespace_of(spec.project)
        exists, sized = f"namespace {namespace} exists", f"the size and class of volume {spec.snapshot_volume!r}"
        checks: list[tuple[str, Callable[[], Any]]] = [
            (exists, lambda: self._namespace_missing(namespace, spec.project)),
            *self._free_checks(spec, namespace, objects, dry=True)]
        if spec.snapshot_volume and self.config.snapshot_watcher and \
                spec.snapshot_volume not in {name for name, _ in spec.new_volumes()}:
            checks.append((sized, lambda: self._try_read(PVC, namespace, spec.snapshot_volume)))
        answers: dict[str, Any] = {}  # each check's answer, by what it checks
        unchecked: list[str] = []
        reason, answered = None, True
        for i, (what, check) in enumerate(checks):
            try:
                answers[what] = check()
            except (NotFoundError, ConflictError):
                raise  # what submit would refuse, in its words
            except DtrainError as err:  # refused by RBAC: the rest goes on; no answer at all: nothing more is asked
                unchecked.append(what)
                reason = reason or err
                if not isinstance(err, Forbidden) or isinstance(err, Unauthenticated):
                    unchecked += [w for w, _ in checks[i + 1:]]
                    answered = False
                    break
        if unchecked:
            logging.getLogger(__name__).warning(
                "dtrain: warning: dry run not checked on the cluster: %s (%s); the manifests are shown all the "
                "same, and submit checks them", ", ".join(unchecked), reason)
        if answered and resource_for(spec, self.config) is TRAIN_JOB:
            self._check_trainer_version()
        # the volume --snapshot-on-success names, whose size and class its watcher records, as submit renders it
        if (source := answers.get(sized)) is not None:
            objects = render_job(spec, self.config, with_namespace=self.config.create_namespace,
                                 snapshot_source=source)
        # the namespace made, as submit reads it, unless the cluster said it is there already (a Kubeflow
        # profile's, an admin's): submit creates none
        if not answers.get(exists, self.config.create_namespace):
            objects = [obj for obj in objects if obj["kind"] != NAMESPACE.kind]
        notices: list[Notice] = []
        if answered:  # the watcher's account, Role and binding, made by an earlier job or by someone else
            shown = []
            for obj in objects:
                if obj["kind"] in _SHARED:
                    obj, notice = self._shared_dry_run(obj)
                    notices += [notice] if notice else []
                shown += [obj] if obj is not None else []
            objects = shown
        return Listed(objects, notices)

    def _submit(self, spec: JobSpec) -> JobInfo:
        resource = resource_for(spec, self.config)
        namespace = self.config.namespace_of(spec.project)
        source = None  # an existing volume that --snapshot-on-success names: the watcher records its size and class
        if spec.snapshot_volume and self.config.snapshot_watcher and \
                spec.snapshot_volume not in {name for name, _ in spec.new_volumes()}:
            source = self._try_read(PVC, namespace, spec.snapshot_volume)
        objects = render_job(spec, self.config, snapshot_source=source)
        if resource is TRAIN_JOB:
            self._check_trainer_version()
        self._ensure_namespace(namespace, spec.project)
        self._check_free(spec, namespace, objects)
        created: list[tuple[Resource, dict]] = []
        job: dict | None = None
        try:
            for obj in objects:
                if obj["kind"] in _SHARED:
                    self._create_shared(obj)
                    continue
                if job is not None:  # the MPI master Service and the snapshot watcher go with the job
                    if (obj["metadata"].get("labels") or {}).get(LABEL_ROLE) == ROLE_SNAPSHOTTER:
                        obj = self._watcher_for(spec, resource, source, job)
                    obj = _owned_by(obj, job)
                made = self._create(obj)
                created.append((_BY_KIND[obj["kind"]], made))
                if obj["kind"] == resource.kind and obj["metadata"]["name"] == spec.name:
                    job = made
        except DtrainError as err:
            if isinstance(err, Unanswered) and obj["kind"] not in _SHARED:
                created += self._made_anyway(obj, spec.name)
            failed = self._roll_back(created)
            if failed:
                raise BackendError(f"{err}; cleaning up also failed for {', '.join(failed)}: "
                                   f"delete them with kubectl -n {namespace}") from err
            refusal = self._watcher_refused(spec, obj, err)
            if refusal is not err:
                raise refusal from None
            raise
        assert job is not None
        return job_info(resource.kind, job, [])

    def _watcher_for(self, spec: JobSpec, resource: Resource, source: dict | None, job: dict) -> dict:
        """The snapshot watcher of the job just created: it records the job's uid on the snapshot, and
        names it `<job>-success-<uid8>` where an earlier run of the name left `<job>-success` (a job
        deleted and submitted again), as the backend's own look does (success_snapshot_name)."""
        uid = job["metadata"].get("uid")
        name = success_snapshot_name(spec.name)
        try:
            if uid and self.api.read(VOLUME_SNAPSHOT, self.config.namespace_of(spec.project), name):
                name = success_snapshot_name(spec.name, uid)
        except DtrainError:
            pass  # none, or unreadable: the one name, and the backend's look tells runs apart
        return render_snapshot_watcher(spec, self.config, resource, source, job_uid=uid, snapshot_name=name)

    def _planned_snapshot(self, spec: JobSpec) -> str:
        """The name _watcher_for would give, looked up now: `<job>-success`, or `<job>-success-<uid8>`
        where that one exists (an earlier run's); the uid is the job object's, known once it is made.
        A cluster that does not answer or refuses the look is said, with both names."""
        base, namespace = success_snapshot_name(spec.name), self.config.namespace_of(spec.project)
        try:
            taken = bool(self.api.read(VOLUME_SNAPSHOT, namespace, base))
        except Missing as err:
            if err.api_missing:
                return f"{base}, once the cluster serves VolumeSnapshots ({err.no_api()})"
            taken = False
        except DtrainError as err:
            return (f"{base}, or {base}-<first 8 characters of the job's uid> where a snapshot {base} exists "
                    f"when it is taken (not looked up: {err})")
        if taken:
            return (f"{base}-<first 8 characters of the job's uid> (an earlier run of {spec.name} left {base} "
                    f"in namespace {namespace})")
        return f"{base} (none of that name in namespace {namespace} now)"

    def _watcher_refused(self, spec: JobSpec, obj: dict, err: DtrainError) -> DtrainError:
        """RBAC's refusal of --snapshot-on-success's watcher (a batch Job beside an MPIJob, PyTorchJob or
        TrainJob, which an account may run without batch Job rights) as one line: the rule to grant, or
        the watcher off. Any other error, or another object's refusal, is `err` as is."""
        labels = obj["metadata"].get("labels") or {}
        if not isinstance(err, Forbidden) or isinstance(err, Unauthenticated) or obj["kind"] != "Job" \
                or labels.get(LABEL_ROLE) != ROLE_SNAPSHOTTER:
            return err
        namespace = obj["metadata"]["namespace"]
        return Forbidden(f"job {spec.name!r} not submitted and no snapshot of volume {spec.snapshot_volume!r} taken: "
                         f"--snapshot-on-success runs a watcher, batch Job {obj['metadata']['name']!r}, and this "
                         f"account may not read or create batch Jobs in namespace {namespace}; "
                         f"{job_writer_fix(namespace)}; or turn the watcher off (snapshot_watcher: false under "
                         f"kubernetes: in config.yaml), and the snapshot is taken once the job is seen to succeed "
                         f"('{self.cmd(f'wait {spec.name}')}')")

    def _check_trainer_version(self) -> None:
        """Trainer before v2.2.0 has no spec.runtimePatches: its API server would drop the field, and
        the job run without its volumes, pull secrets and pod label. Checked where the served CRD
        is readable (many accounts may not read CRDs: then nothing is said)."""
        try:
            crd = self.api.read(CRD, None, TRAIN_JOB.full_name)
        except DtrainError:
            return
        for version in (crd.get("spec") or {}).get("versions") or []:
            if version.get("name") != TRAIN_JOB.version:
                continue
            spec = ((version.get("schema") or {}).get("openAPIV3Schema") or {}).get("properties", {}).get("spec")
            fields = (spec or {}).get("properties")
            if isinstance(fields, dict) and "runtimePatches" not in fields:
                raise BackendError("the cluster's TrainJob CRD has no spec.runtimePatches (Kubeflow Trainer "
                                   "before v2.2.0), so the job would lose its volumes, pull secrets and labels: "
                                   "upgrade Trainer to v2.2.0 or later (see docs/kubernetes.md) or set "
                                   "trainer: v1")

    def _namespace_missing(self, namespace: str, project: str) -> bool:
        """Whether submit must make the namespace (a read only); refused where it may not, and where it
        is being deleted (the API server would refuse each create with a 403)."""
        try:
            if (self.api.read(NAMESPACE, None, namespace).get("metadata") or {}).get("deletionTimestamp"):
                raise self._namespace_going(namespace, project)
            return False
        except Missing:
            if not self.config.create_namespace:
                raise NotFoundError(f"namespace {namespace} does not exist and the kubernetes setting "
                                    f"create_namespace is false: {self._namespace_fix(namespace, project)}") from None
            return True
        except Forbidden:
            return False  # a namespace-scoped account cannot read namespaces; an admin made its own

    def _ensure_namespace(self, namespace: str, project: str) -> None:
        if not self._namespace_missing(namespace, project):
            return
        try:
            self.api.create(render_namespace(namespace, project, self.config), NAMESPACE)
        except ConflictError:
            pass  # created meanwhile
        except Forbidden as err:
            raise Forbidden(f"namespace {namespace} is missing and this account may not create it: ask an "
                            f"admin to run 'kubectl create namespace {namespace}' ({err})") from None

    def _check_free(self, spec: JobSpec, namespace: str, objects: list[dict]) -> None:
        """Refuse before creating anything: a taken name, a taken new volume, a missing volume."""
        for _, check in self._free_checks(spec, namespace, objects):
            check()

    def _free_checks(self, spec: JobSpec, namespace: str, objects: list[dict], *,
                     dry: bool = False) -> list[tuple[str, Callable[[], None]]]:
        """_check_free's lookups, each (what it checks, the check), so that a dry run goes on past one
        this account may not read. `dry`: a lookup refused is raised, for the dry run to name it."""
        def name_free() -> None:
            found, refused = self._jobs_named(namespace, spec.name)
            for resource, _ in found:  # a Notebook there: `dtrain notebook NAME` run again means to reach it
                again = (f", or open it with '{self.cmd(f'notebook open {spec.name}')}'"
                         if resource.kind == "Notebook" else "")
                raise ConflictError(f"job {spec.name!r} already exists in namespace {namespace} ({resource.kind}): "
                                    f"delete it with '{self.cmd(f'delete {spec.name}')}' or choose another name{again}")
            own = [err for resource, err in refused if resource is resource_for(spec, self.config)]
            if dry and own:  # submit's create is refused (or let through) by RBAC itself
                raise own[0]

        def object_free(obj: dict) -> None:  # left by an old job
            name, kind = obj["metadata"]["name"], obj["kind"]
            try:
                taken = self._try_read(_BY_KIND[kind], namespace, name)
            except Forbidden as err:  # the snapshot watcher's Job: the rule to grant, or the watcher off
                raise self._watcher_refused(spec, obj, err) from None
            if taken:
                how = self.cmd(f"volume delete {name}") if kind == "PersistentVolumeClaim" else \
                    f"kubectl delete {kind.lower()} {name} -n {namespace}"
                raise ConflictError(f"{kind} {name!r} already exists in namespace {namespace}: delete it "
                                    f"({how}) or rename job {spec.name!r}")

        def claim_exists(claim: str) -> None:
            if self._try_read(PVC, namespace, claim) is None:
                raise NotFoundError(f"volume {claim!r} not found in namespace {namespace}: create it with "
                                    f"'{self.cmd(f'volume create {claim}')}' or use --pvc CLASS:SIZE:MOUNT")

        checks = [(f"job name {spec.name!r} free", name_free)]
        for obj in objects:  # a new volume, the snapshot watcher, the MPI master Service (a batch Job: name_free's)
            name, kind = obj["metadata"]["name"], obj["kind"]
            if kind in ("PersistentVolumeClaim", "Job", "Service") and (kind, name) != ("Job", spec.name):
                checks.append((f"{kind} {name!r} free", lambda obj=obj: object_free(obj)))
        claims = {v.volume for v in spec.volumes if isinstance(v, VolumeMount)}
        mine = {v.volume for v in spec.resolved_volumes()}
        if spec.snapshot_volume and spec.snapshot_volume not in mine:
            claims.add(spec.snapshot_volume)
        checks += [(f"volume {claim!r} exists", lambda claim=claim: claim_exists(claim)) for claim in sorted(claims)]
        for volume, new in spec.new_volumes():  # --pvc CLASS:SIZE:MOUNT
            if new.storage_class is not None:
                checks.append((f"StorageClass {new.storage_class!r} exists",
                               lambda new=new, volume=volume: self._check_storage_class(new.storage_class, volume,
                                                                                        dry=dry)))
        return checks

    def _create(self, obj: dict) -> dict:
        resource = _BY_KIND[obj["kind"]]
        try:
            return self.api.create(obj, resource)
        except Missing as err:
            if err.api_missing:
                raise err.no_api() from None
            namespace = obj["metadata"].get("namespace")
            raise NotFoundError(f"{err}: {self._namespace_fix(namespace, self.config.project)}") from None
        except ConflictError as err:  # made by another request since _check_free looked
            name, namespace = obj["metadata"]["name"], obj["metadata"].get("namespace")
            how = (f"'{self.cmd(f'delete {name}')}'" if resource in JOB_ORDER else
                   f"kubectl delete {resource.full_name} {name} -n {namespace}")
            raise ConflictError(f"{err} (made meanwhile by another request): delete it with {how} or choose "
                                f"another name") from None
        except Forbidden as err:  # RBAC refuses a kind the cluster does not serve too (it decides first)
            if resource.install_hint and not isinstance(err, Unauthenticated):
                raise Forbidden(f"{err}; if {resource.full_name} is not installed: {resource.install_hint}") from None
            raise

    def _namespace_going(self, namespace: str, project: str) -> ConflictError:
        """The refusal of a namespace being deleted (Terminating), whose API server refuses new content."""
        return ConflictError(f"namespace {namespace} is being deleted (Terminating: Kubernetes deletes what it holds, "
                             f"then the namespace, and refuses anything new in it meanwhile): wait until it is gone "
                             f"('dtrain project list' no longer shows project {project}), then "
                             f"{self._namespace_fix(namespace, project)}; or use another project")

    def _namespace_fix(self, namespace: str, project: str) -> str:
        if self.config.namespace:  # every project's: an admin's to make
            return f"ask an admin to create it (kubectl create namespace {namespace})"
        # (no self.cmd: `project create` takes its project as its argument, not -p)
        return f"create it with 'dtrain project create {project}' (or kubectl create namespace {namespace})"

    def _made_anyway(self, obj: dict, job: str) -> list[tuple[Resource, dict]]:
        """A create that got no clear answer (a dropped connection, a timeout, a 5xx) may have been
        carried out all the same: the object, if it is there and this job's, is rolled back too."""
        resource, meta = _BY_KIND[obj["kind"]], obj["metadata"]
        try:
            found = self._try_read(resource, meta["namespace"], meta["name"])
        except DtrainError:
            return [(resource, obj)]  # cannot tell: try to delete it, and say so if that fails too
        if found is not None and (found["metadata"].get("labels") or {}).get(LABEL_JOB) == job:
            return [(resource, found)]
        return []

    def _roll_back(self, created: list[tuple[Resource, dict]]) -> list[str]:
        failed = []
        for resource, obj in reversed(created):
            meta = obj["metadata"]
            try:
                self.api.delete(resource, meta.get("namespace"), meta["name"])
            except Missing:
                pass  # already gone
            except DtrainError:
                failed.append(f"{resource.kind} {meta['name']}")
        return failed


def _owned_by(obj: dict, owner: dict) -> dict:
    meta = owner["metadata"]
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
           "blockOwnerDeletion": True}
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [ref]}}

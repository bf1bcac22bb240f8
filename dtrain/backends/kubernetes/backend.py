"""KubernetesBackend: dtrain's verbs on a cluster, through the official `kubernetes` client.

    dtrain                  Kubernetes
    project P               namespace dtrain-P (config.namespace overrides); GPU quota: a ResourceQuota
    job                     batch/v1 Job, kubeflow.org/v1 PyTorchJob or MPIJob, or a Trainer v2 TrainJob
    process (rank)          a replica pod, or one of the k ranks a packed pod runs
    status                  job conditions + pods -> Pending/Running/Succeeded/Failed/Deleted
    suspend / resume        runPolicy.suspend (spec.suspend: Job, TrainJob) + dtrain.io/suspended;
                            a Notebook's kubeflow-resource-stopped annotation
    logs                    the pods' logs (timestamps=True; follow streams)
    volume                  PersistentVolumeClaim (ReadWriteMany)
    snapshot                snapshot.storage.k8s.io/v1 VolumeSnapshot of a PVC
    restore --to NEW        a new PVC whose dataSource is the VolumeSnapshot
    node GPUs               Node allocatable nvidia.com/gpu; allocated = requests of its pods not ended

Translation is pure (render.py, render_storage.py, status.py, logs.py); this module only moves
dicts through client.KubeApi and keeps the rules: volumes before the job, a name clash is a
ConflictError, a missing CRD names the operator to install, a deleted job reads Deleted while
its pods go. `wait` is the base class's. The verbs that reach into pods (logs, exec) are
pod_verbs.py's, those of volumes and snapshots volumes.py's: mixins of KubernetesBackend.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import replace
from datetime import datetime, timezone
from typing import Any, Callable, Iterable

from dtrain.backends.base import (Backend, DataSource, GpuInfo, JobInfo, JobStatus, Listed, NodeInfo, Notice,
                                   ProjectInfo)
from dtrain.errors import BackendError, ConflictError, DtrainError, NotFoundError
from dtrain.spec import JobSpec, VolumeMount, parse_size

from .client import (CRD, NAMESPACE, NODE, POD, PVC, RESOURCE_QUOTA, ROLE, ROLE_BINDING, SERVICE, SERVICE_ACCOUNT,
                     Forbidden, KubeApi, Missing, Unanswered, Unauthenticated, client_from_config)
from .config import KubernetesConfig
from .objects import (GPU_RESOURCE, JOB_RESOURCES, LABEL_JOB, LABEL_PROJECT, LABEL_ROLE, ROLE_SNAPSHOTTER,
                      TRAIN_JOB, VOLUME_SNAPSHOT, Resource, job_selector, job_writer_fix, pod_reader_fix,
                      success_snapshot_name)
from .pod_verbs import PodVerbs
from .render import render_job, render_resume, render_suspend, resource_for
from .render_storage import QUOTA_NAME, render_gpu_quota, render_namespace, render_success_snapshot
from .status import job_info, parse_time, pod_gpus
from .volumes import VolumeVerbs

JOB_ORDER = tuple(JOB_RESOURCES.values())  # where `get NAME` looks, in this order
_BY_KIND = {r.kind: r for r in (NAMESPACE, PVC, RESOURCE_QUOTA, SERVICE, SERVICE_ACCOUNT, ROLE, ROLE_BINDING,
                                VOLUME_SNAPSHOT, *JOB_ORDER)}
_SHARED = ("ServiceAccount", "Role", "RoleBinding")  # one per namespace, kept across jobs
# Pods that hold their node's GPUs: bound to a node and not ended (a Pending pod pulling its image
# holds them already; the scheduler counts it).
# What an account needs to list every project's jobs at once (`dtrain list -A`)
_JOB_KINDS = "jobs.batch, pytorchjobs/mpijobs/notebooks.kubeflow.org and trainjobs.trainer.kubeflow.org"
HOLDING_GPUS = "spec.nodeName!=,status.phase!=Succeeded,status.phase!=Failed"


class KubernetesBackend(PodVerbs, VolumeVerbs, Backend):
    """dtrain's backend for a Kubernetes cluster with the Kubeflow Training Operator."""

    name = "kubernetes"

    def __init__(self, config: KubernetesConfig | None = None, *, api_client: Any = None, exec_stream: Any = None,
                 command: Callable[[str], str] | None = None, projects: Iterable[str] = ()):
        """`api_client`: a kubernetes.client.ApiClient; None builds one from the kubeconfig on first use.
        `exec_stream(namespace, pod, command) -> exit code`: None uses the official client's stream API.
        `command(words)`: the `dtrain WORDS` a hint names for a job of this backend's project, so that
        it works as printed (the Client's adds `-p PROJECT` and `--backend` where they are needed).
        `projects`: the other projects config.yaml sends to this cluster; an account that may not list
        jobs (or namespaces) across the cluster gets theirs namespace by namespace."""
        self.config = config or KubernetesConfig()
        self.projects = tuple(dict.fromkeys([self.config.project, *projects]))
        self._api_client = api_client
        self._exec_stream = exec_stream
        self._api: KubeApi | None = None
        self._command = command

    def cmd(self, words: str) -> str:
        """`dtrain WORDS` as a hint names it (see `command`)."""
        return self._command(words) if self._command is not None else f"dtrain {words}"

    @property
    def api(self) -> KubeApi:
        if self._api is None:
            self._api = KubeApi(self._api_client or client_from_config(self.config),
                                timeout=self.config.request_timeout)
        return self._api

    @property
    def namespace(self) -> str:
        return self.config.namespace_of()

    def _volume_project(self) -> str | None:
        """The PVCs are the namespace's: its project's jobs mount them, or every project's where a
        `namespace` setting puts them all in one."""
        return None if self.config.namespace else self.config.project

    def _render(self, spec: JobSpec) -> list[dict]:
        """What `submit` would create, for `--dry-run`, after submit's own lookups (GET only, never a
        create, as `kubectl apply --dry-run=server` catches what the server would refuse): a missing
        namespace, a name or new volume taken, a volume or StorageClass missing are submit's one-line
        refusals. What cannot be looked up (no cluster, no RBAC to read it) is one warning naming it,
        and the manifests are returned all the same. The translation stays render_job's, pure."""
        objects = render_job(spec, self.config, with_namespace=self.config.create_namespace)  # a bad spec: no call
        namespace = self.config.namespace_of(spec.project)
        checks = [(f"namespace {namespace} exists", lambda: self._namespace_missing(namespace, spec.project)),
                  *self._free_checks(spec, namespace, objects, dry=True)]
        source = None  # the volume --snapshot-on-success names, whose size and class its watcher records

        def read_source() -> None:
            nonlocal source
            source = self._try_read(PVC, namespace, spec.snapshot_volume)

        if spec.snapshot_volume and self.config.snapshot_watcher and \
                spec.snapshot_volume not in {name for name, _ in spec.new_volumes()}:
            checks.append((f"the size and class of volume {spec.snapshot_volume!r}", read_source))
        unchecked: list[str] = []
        reason, answered = None, True
        for i, (what, check) in enumerate(checks):
            try:
                check()
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
        if source is not None:  # as submit renders it
            objects = render_job(spec, self.config, with_namespace=self.config.create_namespace,
                                 snapshot_source=source)
        return objects

    # ---------------------------------------------------------------- submit

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
        """Whether submit must make the namespace (a read only); refused where it may not."""
        try:
            self.api.read(NAMESPACE, None, namespace)
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
            for resource, _ in found:
                raise ConflictError(f"job {spec.name!r} already exists in namespace {namespace} ({resource.kind}): "
                                    f"delete it with '{self.cmd(f'delete {spec.name}')}' or choose another name")
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

    def _namespace_fix(self, namespace: str, project: str) -> str:
        if self.config.namespace:  # every project's: an admin's to make
            return f"ask an admin to create it (kubectl create namespace {namespace})"
        # (no self.cmd: `project create` takes its project as its argument, not -p)
        return f"create it with 'dtrain project create {project}' (or kubectl create namespace {namespace})"

    def _create_shared(self, obj: dict) -> None:
        try:
            self._create(obj)
        except ConflictError:
            pass  # made for an earlier job in this namespace

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

    # ---------------------------------------------------------------- get, list, delete

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

    # ---------------------------------------------------------------- projects

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
        except ConflictError:
            pass  # an existing project: only its quota changes
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

    def _list_projects(self) -> Listed:
        """Projects with their GPU quota, GPUs held by their pods and job count. An account that may
        read the jobs but not pods or quotas still gets its projects: GPUs counted from the running
        jobs' requests, the quota unknown, `extra['unknown']` saying so, and a notice for each
        ("quota-unknown", "gpus-unknown") that the CLI prints and the HTTP API sends as a Warning."""
        out, notices, first = [], [], None
        spaces = self._project_namespaces()
        for project, namespace in spaces:
            try:
                objects, unknown = self._job_objects(namespace), []
            except Forbidden as err:  # a namespace this account may not read: the others are listed
                if len(spaces) == 1:
                    raise
                first = first or err
                notices.append(Notice(code="projects-unlisted",
                                      message=f"project {project} (namespace {namespace}) not listed: {err}"))
                continue
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
            extra: dict[str, Any] = {"namespace": namespace}
            if unknown:
                extra["unknown"] = "; ".join(said for _, said in unknown)
                notices += [Notice(code=code, message=f"project {project}: {said}") for code, said in unknown]
            out.append(ProjectInfo(name=project, backend=self.name, gpu_quota=int(hard) if hard is not None else None,
                                   gpus_allocated=gpus, jobs=len(objects), extra=extra))
        if first is not None and not out:
            raise first
        return Listed(out, notices)

    def _has_project(self, name: str) -> bool:
        """Whether the project's namespace exists, and is this project's (a shared `namespace` setting
        holds the project that made it): that namespace read alone, its jobs not listed, so an account
        that may create projects but not list their jobs can run `project create`."""
        namespace = self.config.namespace_of(name)
        try:
            found = self._try_read(NAMESPACE, None, namespace)
        except Forbidden:  # an account that may not read namespaces: those it may list or is set up for
            return name in {project for project, _ in self._project_namespaces()}
        if found is None:
            return False
        return ((found["metadata"].get("labels") or {}).get(LABEL_PROJECT, found["metadata"]["name"])) == name

    def _project_namespaces(self) -> list[tuple[str, str]]:
        """(project, namespace) of every project this account may see; for an account that may not list
        namespaces, each project config.yaml sends here (`projects`) whose namespace it does not know
        to be missing."""
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
                 ns["metadata"]["name"]) for ns in namespaces]

    def _snapshot_on_success(self, info: JobInfo) -> JobInfo:
        """Mechanism 1 of --snapshot-on-success (render_storage.py): snapshot once seen Succeeded."""
        volume = info.spec.snapshot_volume
        if info.status is not JobStatus.SUCCEEDED or not volume:
            return info
        name, namespace = success_snapshot_name(info.name), info.extra["namespace"]
        # What goes wrong here is said in the job's message: `describe`, `list` and `wait` read a
        # job that did succeed, whatever this account may do with snapshots.
        try:
            self.api.read(VOLUME_SNAPSHOT, namespace, name)
        except Missing as err:
            if err.api_missing:
                return replace(info, message=f"snapshot-on-success not taken: {err.no_api()}")
            try:
                pvc = self._try_read(PVC, namespace, volume)
                if pvc is None:
                    return replace(info, message=f"snapshot-on-success not taken: volume {volume!r} is gone")
                self.api.create(render_success_snapshot(info.spec, self.config, pvc), VOLUME_SNAPSHOT)
            except ConflictError:
                pass  # the in-cluster watcher took it first
            except DtrainError as failed:  # no RBAC to create snapshots, no answer: the next look retries
                return replace(info, message=f"snapshot-on-success not taken yet: {failed}")
        except DtrainError as err:
            return replace(info, message=f"snapshot-on-success not checked: {err}")
        return replace(info, snapshot=name)

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

    # ---------------------------------------------------------------- nodes

    def _nodes(self) -> Listed:
        nodes = self.api.list(NODE, None)
        pods, notices = self._pods_holding_gpus()
        held: dict[str, list[tuple[str | None, str | None]]] = {}  # node: (job, project) of each GPU held
        for pod in sorted(pods, key=_holder_order):
            node, labels = (pod.get("spec") or {}).get("nodeName"), pod["metadata"].get("labels") or {}
            if node:  # a pod not dtrain's holds its GPUs too, with no job of ours to name
                held.setdefault(node, []).extend([(labels.get(LABEL_JOB), labels.get(LABEL_PROJECT))] * pod_gpus(pod))
        out = []
        for node in nodes:
            meta, alloc = node["metadata"], (node.get("status") or {}).get("allocatable") or {}
            name = meta["name"]
            out.append(NodeInfo(name=name, gpus_allocatable=int(alloc.get(GPU_RESOURCE, 0)),
                                gpus_allocated=len(held.get(name, [])), cpus=_cpus(alloc.get("cpu")),
                                memory=parse_size(alloc["memory"]) if alloc.get("memory") else None,
                                gpus=_gpus(meta, int(alloc.get(GPU_RESOURCE, 0)), held.get(name, [])),
                                labels=dict(meta.get("labels") or {})))
        return Listed(sorted(out, key=lambda n: n.name), notices)

    def _pods_holding_gpus(self) -> tuple[list[dict], list[Notice]]:
        """The pods that hold a node's resources, cluster-wide; for an account that may not list
        pods across the cluster, those of the project namespaces it may read, and a notice saying so."""
        try:
            return self.api.list(POD, None, field_selector=HOLDING_GPUS), []
        except Forbidden as err:
            refused = err
        found, readable = [], []
        for _, namespace in self._project_namespaces():
            try:
                found += self.api.list(POD, namespace, field_selector=HOLDING_GPUS)
                readable.append(namespace)
            except Forbidden:
                continue
        said = (f"GPUs allocated count only the pods of namespace {', '.join(readable)}: {refused}" if readable
                else f"GPUs allocated unknown (shown as 0): {refused}")
        return found, [Notice(code="gpus-unknown", message=said)]


def _pods_unknown(err: Forbidden, namespace: str) -> str:
    return f"pods not shown (processes, GPUs and node unknown): {err}; to show them, {pod_reader_fix(namespace)}"


def _key(obj: dict) -> tuple[str, str]:
    return obj["metadata"].get("namespace", ""), obj["metadata"]["name"]


def _owned_by(obj: dict, owner: dict) -> dict:
    meta = owner["metadata"]
    ref = {"apiVersion": owner["apiVersion"], "kind": owner["kind"], "name": meta["name"], "uid": meta["uid"],
           "blockOwnerDeletion": True}
    return {**obj, "metadata": {**obj["metadata"], "ownerReferences": [ref]}}


def _cpus(value: str | None) -> int | None:
    if not value:
        return None
    return int(value[:-1]) // 1000 if value.endswith("m") else int(float(value))


def _holder_order(pod: dict) -> tuple:
    """dtrain's pods first, by job and pod: which GPU index a job is shown on is stable across calls."""
    meta = pod["metadata"]
    job = (meta.get("labels") or {}).get(LABEL_JOB)
    return job is None, meta.get("namespace", ""), job or "", meta["name"]


def _gpus(meta: dict, count: int, held: list[tuple[str | None, str | None]]) -> tuple[GpuInfo, ...]:
    """The node's GPUs, the first len(held) given to the (job, project) holding them: the API counts a
    pod's nvidia.com/gpu requests, not which devices it got, so the indexes are dtrain's numbering."""
    # NVIDIA GPU feature discovery labels the product.
    product = (meta.get("labels") or {}).get("nvidia.com/gpu.product", "")
    held = held + [(None, None)] * (count - len(held))
    return tuple(GpuInfo(index=str(i), name=product, job=held[i][0], project=held[i][1]) for i in range(count))


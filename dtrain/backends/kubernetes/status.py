"""Pure mapping from what the cluster reports (job conditions, pods) to dtrain's JobInfo.

    object                 condition (status True)         dtrain status
    any                    metadata.deletionTimestamp set  Deleted
    PyTorchJob, MPIJob     Succeeded / Failed              Succeeded / Failed
    any job                annotation dtrain.io/suspended  Suspended (`dtrain suspend`)
    Notebook               annotation kubeflow-resource-stopped  Suspended
    PyTorchJob, MPIJob     Running, Restarting             Running
                           Created, Suspended, none        Pending (Suspended alone: a queue's hold)
    batch Job              Complete (SuccessCriteriaMet)   Succeeded
                           Failed (FailureTarget)          Failed
    TrainJob               Complete / Failed               Succeeded / Failed
    batch Job, TrainJob    otherwise: a pod Running        Running, else Pending
    batch Job              (its pods unread) status.ready  Running
    Notebook               (its pods unread) readyReplicas  Running
    Notebook               (never ends) its pod Running    Running, else Pending

The message is the condition's reason and message; a Failed job's adds what a pod says of its
end (OOMKilled, Evicted), a Running job's a replica that waits (ImagePullBackOff, CrashLoopBackOff).
"""

from __future__ import annotations

import json
import shlex
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from dtrain.backends.base import Event, JobInfo, JobStatus, ProcessInfo
from dtrain.errors import BackendError
from dtrain.spec import JobSpec

from .objects import (
    ANN_NOTEBOOK_STOPPED,
    ANN_PROCS_PER_POD,
    ANN_SPEC,
    ANN_SUCCESS_SNAPSHOT,
    ANN_SUSPENDED,
    BATCH_JOB,
    GPU_RESOURCE,
    JOB_COMPLETION_INDEX,
    KF_REPLICA_INDEX,
    KF_REPLICA_TYPE,
    MPI_JOB,
    NOTEBOOK,
    PYTORCH_JOB,
    TRAIN_JOB,
)

_SUCCESS = {"Succeeded", "Complete", "SuccessCriteriaMet"}
_FAILURE = {"Failed", "FailureTarget"}
_EVENT_STATUS = {"Restarting": JobStatus.RUNNING, "Succeeded": JobStatus.SUCCEEDED, "Complete": JobStatus.SUCCEEDED,
                 "Failed": JobStatus.FAILED, "Suspended": JobStatus.PENDING}
_PHASES = ("Pending", "Running", "Succeeded", "Failed")
UNKNOWN = "Unknown"  # a rank whose pod this account may not read


def parse_time(text: str | None) -> float | None:
    """RFC 3339 as the API writes it ('2024-05-01T10:00:00Z', with up to nanoseconds) -> unix seconds."""
    if not text:
        return None
    text = text.strip().replace("Z", "+00:00")
    if "." in text:  # Python takes at most microseconds
        head, _, rest = text.partition(".")
        digits = "".join(c for c in rest if c.isdigit())
        text = f"{head}.{digits[:6].ljust(6, '0')}{rest[len(digits):]}"
    stamp = datetime.fromisoformat(text)
    if stamp.tzinfo is None:
        stamp = stamp.replace(tzinfo=timezone.utc)
    return stamp.timestamp()


def _conditions(obj: dict) -> list[dict]:
    return list((obj.get("status") or {}).get("conditions") or [])


def _true(obj: dict) -> dict[str, dict]:
    return {c.get("type"): c for c in _conditions(obj) if c.get("status") == "True"}


def _any_running(pods: list[dict]) -> bool:
    return any((p.get("status") or {}).get("phase") == "Running" for p in pods)


def job_status(kind: str, obj: dict, pods: list[dict] | None) -> tuple[JobStatus, str]:
    """The one status of a job object and its pods (None: they could not be read), with the reason
    the cluster gives."""
    unread, pods = pods is None, pods or []
    if (obj.get("metadata") or {}).get("deletionTimestamp"):
        return JobStatus.DELETED, "being deleted"
    true = _true(obj)
    why = lambda c: ": ".join(x for x in (c.get("reason"), c.get("message")) if x)  # noqa: E731
    for types, status in ((_SUCCESS, JobStatus.SUCCEEDED), (_FAILURE, JobStatus.FAILED)):
        hit = [true[t] for t in types if t in true]
        if hit:
            # The operator says that a replica failed; the pod says why (OOMKilled, Evicted).
            return status, _joined(why(hit[0]), _failure_reason(pods) if status is JobStatus.FAILED else "")
    annotations = (obj.get("metadata") or {}).get("annotations") or {}
    if kind == NOTEBOOK.kind and ANN_NOTEBOOK_STOPPED in annotations:
        return JobStatus.SUSPENDED, f"stopped at {annotations[ANN_NOTEBOOK_STOPPED]} ({ANN_NOTEBOOK_STOPPED})"
    if ANN_SUSPENDED in annotations:
        return JobStatus.SUSPENDED, _joined(f"suspended at {annotations[ANN_SUSPENDED]}",
                                            why(true["Suspended"]) if "Suspended" in true else "")
    if "Suspended" in true:  # not by dtrain: a queue (Kueue) holds it until admitted
        return JobStatus.PENDING, why(true["Suspended"])
    if kind in (PYTORCH_JOB.kind, MPI_JOB.kind):
        for t in ("Restarting", "Running"):
            if t in true:  # running, but a pod may be stuck (a worker's image pull, a crash loop)
                return JobStatus.RUNNING, _joined(why(true[t]), _pending_reason(pods))
        return JobStatus.PENDING, _pending_reason(pods)
    # A batch Job counts its ready pods itself, a Notebook's controller its StatefulSet's: the one sign of
    # a running pod when pods cannot be read.
    ready = (obj.get("status") or {}).get({BATCH_JOB.kind: "ready", NOTEBOOK.kind: "readyReplicas"}.get(kind, ""))
    if _any_running(pods) or (unread and ready):
        return JobStatus.RUNNING, _pending_reason(pods)
    return JobStatus.PENDING, _pending_reason(pods)


def _joined(message: str, detail: str) -> str:
    return "; ".join(x for x in (message, detail) if x)


def _failure_reason(pods: list[dict]) -> str:
    """Why a failed job's pod failed, when the pod says more than its exit code: the kubelet's
    eviction (reason Evicted, with the resource that ran short), or a container's end that was
    not its own (OOMKilled, ContainerCannotRun, StartError), now or before its last restart in
    place (restartPolicy OnFailure keeps the pod and restarts the container)."""
    for pod in sorted(pods, key=lambda p: (p.get("metadata") or {}).get("creationTimestamp") or "", reverse=True):
        status = pod.get("status") or {}
        name = (pod.get("metadata") or {}).get("name", "?")
        if status.get("phase") == "Failed" and status.get("reason"):
            return f"pod {name}: " + ": ".join(x for x in (status["reason"], status.get("message")) if x)
        for cs in status.get("containerStatuses") or []:
            for state in (cs.get("state"), cs.get("lastState")):
                done = (state or {}).get("terminated") or {}
                if done.get("reason") not in (None, "", "Error", "Completed"):
                    return f"pod {name}: {done['reason']} (exit code {done.get('exitCode')})"
    return ""


def _pending_reason(pods: list[dict]) -> str:
    """Why pods wait: unschedulable, image pull errors; '' when nothing is said."""
    for pod in pods:
        status = pod.get("status") or {}
        for c in status.get("conditions") or []:
            if c.get("type") == "PodScheduled" and c.get("status") == "False" and c.get("message"):
                return f"{c.get('reason', 'Unschedulable')}: {c['message']}"
        why = _waiting(pod, lambda reason: reason != "ContainerCreating")
        if why:
            return why
    return ""


# Container waiting reasons that the kubelet retries for good, but only a change of the job cures.
STUCK = frozenset({"ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull",
                   "CreateContainerConfigError", "CreateContainerError"})


def stuck_reason(pod: dict) -> str:
    """Why a pod's container cannot start for a reason that needs the user (a wrong image, a
    missing secret), or '' while it is only on its way."""
    return _waiting(pod, STUCK.__contains__)


def _waiting(pod: dict, counts: Callable[[str], bool]) -> str:
    """'REASON: message' of the pod's first waiting container whose reason `counts`, or ''. Init
    containers come first and are named: one stuck there (the Training Operator's init-pytorch
    on a cluster that cannot pull its image) holds the pod's own containers at PodInitializing."""
    status = pod.get("status") or {}
    for init in (True, False):
        for cs in status.get("initContainerStatuses" if init else "containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") and counts(waiting["reason"]):
                text = ": ".join(x for x in (waiting["reason"], waiting.get("message")) if x)
                return f"init container {cs.get('name')}: {text}" if init else text
    return ""


def events(obj: dict) -> tuple[Event, ...]:
    """Pending at creation, Running at start, then each condition that holds."""
    meta, status = obj.get("metadata") or {}, obj.get("status") or {}
    out = []
    created = parse_time(meta.get("creationTimestamp"))
    if created is not None:
        out.append(Event(time=created, status=JobStatus.PENDING.value, message="created"))
    started = parse_time(status.get("startTime"))
    if started is not None:
        out.append(Event(time=started, status=JobStatus.RUNNING.value, message="started"))
    by_user = ANN_SUSPENDED in (meta.get("annotations") or {})  # a Suspended condition of dtrain's suspend
    for ctype, c in _true(obj).items():
        when = parse_time(c.get("lastTransitionTime") or c.get("lastUpdateTime"))
        if ctype in _EVENT_STATUS and when is not None:
            message = ": ".join(dict.fromkeys(x for x in (ctype, c.get("reason"), c.get("message")) if x))
            event = JobStatus.SUSPENDED if ctype == "Suspended" and by_user else _EVENT_STATUS[ctype]
            out.append(Event(time=when, status=event.value, message=message))
    return tuple(sorted(out, key=lambda e: e.time))


def pod_index(kind: str, obj: dict, pod: dict) -> int | None:
    """Which replica (node rank) a pod is; None for pods that run no rank (the MPI launcher)."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if kind in (BATCH_JOB.kind, NOTEBOOK.kind):
        return 0
    if kind == TRAIN_JOB.kind:
        return int(labels.get(JOB_COMPLETION_INDEX, 0))
    rtype = labels.get(KF_REPLICA_TYPE, "").lower()
    index = int(labels.get(KF_REPLICA_INDEX, 0))
    if kind == MPI_JOB.kind:
        return None if rtype == "launcher" else index
    has_master = "Master" in ((obj.get("spec") or {}).get("pytorchReplicaSpecs") or {})
    if rtype == "master":
        return 0
    return index + 1 if has_master else index


def spec_of(obj: dict) -> JobSpec:
    meta = obj.get("metadata") or {}
    raw = (meta.get("annotations") or {}).get(ANN_SPEC)
    if not raw:
        raise BackendError(f"{obj.get('kind')} {meta.get('name')!r} has no {ANN_SPEC} annotation: "
                           f"it was not submitted by dtrain; manage it with kubectl")
    return JobSpec.from_stored(json.loads(raw))


def _main_container(kind: str, obj: dict) -> dict:
    """The container whose command is the job's: a Notebook's or Job's one pod, a PyTorchJob's Master
    (an elastic job's Workers), an MPIJob's Launcher (mpirun; its Workers run the operator's sleep until
    mpirun starts the ranks in them), a TrainJob's trainer."""
    spec = obj.get("spec") or {}
    if kind == TRAIN_JOB.kind:
        return spec.get("trainer") or {}
    if kind == PYTORCH_JOB.kind:
        replicas = spec.get("pytorchReplicaSpecs") or {}
        spec = replicas.get("Master") or replicas.get("Worker") or {}
    elif kind == MPI_JOB.kind:
        spec = (spec.get("mpiReplicaSpecs") or {}).get("Launcher") or {}
    template = (spec.get("template") or {}).get("spec") or {}
    return (template.get("containers") or [{}])[0]


def pod_command(kind: str, obj: dict) -> str:
    """What the job's pod runs, as `kubectl describe` shows its container: the rendered command and
    args, which wrap the spec's command (torchrun where a pod runs several ranks or the job is elastic,
    mpirun on an MPIJob's launcher, a TrainJob's torchrun and its `cd` to --working-dir). Neither set,
    the image's own entrypoint: a Notebook's starts Jupyter under NB_PREFIX (the spec's command is the
    local backend's jupyter-lab line, which that pod does not run)."""
    container = _main_container(kind, obj)
    words = [*(container.get("command") or []), *(container.get("args") or [])]
    if words:
        return shlex.join(map(str, words))
    runs = " starts Jupyter" if kind == NOTEBOOK.kind else ""
    return f"(none set: the entrypoint of image {container.get('image') or '?'}{runs})"


def procs_per_pod(obj: dict) -> int:
    return int(((obj.get("metadata") or {}).get("annotations") or {}).get(ANN_PROCS_PER_POD, "1"))


def pod_ranks(kind: str, obj: dict, pod: dict) -> range:
    """The ranks a pod runs: its replica's (gpus_per_node packs several in one); none for the MPI
    launcher. The one rule both ways: a rank's pod (describe, `logs --rank`, `exec --rank`) is a
    pod whose ranks hold it, and `--pod NAME` is answered with the ranks of the pod so named."""
    index, per_pod = pod_index(kind, obj, pod), procs_per_pod(obj)
    return range(0) if index is None else range(index * per_pod, (index + 1) * per_pod)


def rank_pods(kind: str, obj: dict, pods: list[dict], rank: int) -> list[dict]:
    """The pods that run `rank` (more than one while a replaced pod is still there)."""
    return [p for p in pods if rank in pod_ranks(kind, obj, p)]


def newest_pod(pods: list[dict]) -> dict:
    """The replacement among pods of one replica."""
    return max(pods, key=pod_age)


def pod_age(pod: dict) -> tuple:
    """A key that orders pods of one replica oldest first: creation times have whole seconds, so a
    pod still alive is the later of a tie, then the later resourceVersion."""
    meta = pod.get("metadata") or {}
    version = str(meta.get("resourceVersion", ""))
    return (parse_time(meta.get("creationTimestamp")) or 0.0, _phase(pod) in ("Pending", "Running"),
            int(version) if version.isdigit() else 0)


def _exit_code(pod: dict) -> int | None:
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        done = (cs.get("state") or {}).get("terminated")
        if done is not None:
            return done.get("exitCode")
    return None


def _phase(pod: dict) -> str:
    phase = (pod.get("status") or {}).get("phase", "Pending")
    return phase if phase in _PHASES else "Pending"


def pod_gpus(pod: dict) -> int:
    """The GPUs a pod holds, as the scheduler and `kubectl describe node` count them: its containers'
    together, or more while an init container needs more (init containers run one at a time, before
    the others); a restartable init container (a sidecar) runs beside all that follow it."""
    spec = pod.get("spec") or {}
    sidecars = before = 0  # the sidecars started so far; the most any init step holds
    for c in spec.get("initContainers") or []:
        if c.get("restartPolicy") == "Always":
            sidecars += _container_gpus(c)
            before = max(before, sidecars)
        else:
            before = max(before, sidecars + _container_gpus(c))
    return max(before, sidecars + sum(_container_gpus(c) for c in spec.get("containers") or []))


def _container_gpus(container: dict) -> int:
    res = container.get("resources") or {}
    return int((res.get("requests") or {}).get(GPU_RESOURCE) or (res.get("limits") or {}).get(GPU_RESOURCE) or 0)


def processes(kind: str, obj: dict, spec: JobSpec, pods: list[dict]) -> tuple[ProcessInfo, ...]:
    """One ProcessInfo per rank; a pod running k ranks reports each of them."""
    launcher = None
    by_rank: dict[int, list[dict]] = {}
    for pod in pods:
        ranks = pod_ranks(kind, obj, pod)
        if not ranks:
            launcher = pod
        for rank in ranks:  # each pod once: a job of many ranks is read in one pass
            by_rank.setdefault(rank, []).append(pod)
    out = []
    for rank in range(spec.processes):
        group = by_rank.get(rank)
        if not group:
            out.append(ProcessInfo(rank=rank, status="Pending"))
            continue
        pod = newest_pod(group)
        status, code = _phase(pod), _exit_code(pod)
        if launcher is not None and _phase(launcher) in ("Succeeded", "Failed"):
            status, code = _phase(launcher), _exit_code(launcher)  # mpirun's exit is every rank's
        elif status in ("Pending", "Running") and (pod.get("metadata") or {}).get("deletionTimestamp"):
            status = "Terminating"  # being deleted (its job suspended or deleted): kubectl's word, as the local ranks'
        out.append(ProcessInfo(rank=rank, status=status, exit_code=code,
                               node=(pod.get("spec") or {}).get("nodeName"), pod=pod["metadata"].get("name")))
    return tuple(out)


def restarts(pods: list[dict], kind: str, obj: dict) -> int:
    """Container restarts in place plus pods replaced by a new one of the same replica."""
    statuses = [cs for p in pods for cs in (p.get("status") or {}).get("containerStatuses") or []]
    count = sum(cs.get("restartCount", 0) for cs in statuses)
    seen: dict[Any, int] = {}
    for pod in pods:
        key = pod_index(kind, obj, pod)
        seen[key] = seen.get(key, 0) + 1
    return count + sum(n - 1 for n in seen.values())


def job_info(kind: str, obj: dict, pods: list[dict] | None, *, backend: str = "kubernetes") -> JobInfo:
    """None for pods: they could not be read, and the status comes from the job object alone (each
    rank Unknown, kubectl's word for a pod whose state cannot be told, not Pending)."""
    spec = spec_of(obj)
    status, message = job_status(kind, obj, pods)
    unread, pods = pods is None, pods or []
    meta, state = obj.get("metadata") or {}, obj.get("status") or {}
    procs = tuple(ProcessInfo(rank=rank, status=UNKNOWN) for rank in range(spec.processes)) if unread \
        else processes(kind, obj, spec, pods)
    finished = parse_time(state.get("completionTime"))
    if finished is None and status in (JobStatus.SUCCEEDED, JobStatus.FAILED):
        finished = max((e.time for e in events(obj) if e.status == status.value), default=None)
    # GPUs are held by running pods and by pending pods already bound to a node.
    live = [p for p in pods if _phase(p) == "Running"
            or (_phase(p) == "Pending" and (p.get("spec") or {}).get("nodeName"))]
    nodes = sorted({p.node for p in procs if p.node})
    return JobInfo(
        name=meta.get("name", spec.name), spec=spec, status=status, backend=backend,
        created=parse_time(meta.get("creationTimestamp")) or 0.0, uid=meta.get("uid"),
        started=parse_time(state.get("startTime")),
        finished=finished, node=",".join(nodes) or None, gpus_allocated=sum(pod_gpus(p) for p in live),
        processes_running=sum(p.status == "Running" for p in procs),
        processes_pending=sum(p.status == "Pending" for p in procs),
        processes=procs, events=events(obj), restarts=restarts(pods, kind, obj), message=message,
        extra={"namespace": meta.get("namespace"), "kind": kind, "uid": meta.get("uid"),
               "success_snapshot": (meta.get("annotations") or {}).get(ANN_SUCCESS_SNAPSHOT),
               "procs_per_pod": procs_per_pod(obj),
               "pod_command": pod_command(kind, obj),
               "pods": sorted((p.get("metadata") or {}).get("name", "") for p in pods)})

"""Pure translation of a JobSpec into Kubernetes manifests (dicts); no I/O, no client import.

    dtrain                          Kubernetes
    submit (one process)            batch/v1 Job
    submit-dist --launcher torchrun kubeflow.org/v1 PyTorchJob: Master + Workers
                                    (trainer='v2': trainer.kubeflow.org/v1alpha1 TrainJob)
    submit-mpi                      kubeflow.org/v1 MPIJob: Launcher (mpirun) + Workers
    process (rank)                  a replica pod, or one of k ranks a pod runs (packing below)
    --pvc CLASS:SIZE:MOUNT          PVC pvc-<job>-<i> (ReadWriteMany), created before the job
    --pvc NAME:MOUNT[:ro]           a mount of the existing claim NAME
    --large-shm                     emptyDir {medium: Memory} at /dev/shm
    --node-selector K=V, --node-type  every pod's nodeSelector (the MPI launcher's too); --node-type T
                                    is run.ai/type=T, the label Run:AI's node types use
    --toleration FIELDS             every pod's tolerations (the MPI launcher's too), as the nodeSelector
    notebook (spec.notebook)        kubeflow.org/v1 Notebook: one pod running the image's Jupyter

Packing rule: a GPU job packs k processes into one pod (nprocPerNode / slotsPerWorker = k)
when config.gpus_per_node is set; k is the largest divisor of --processes with k * --gpu <=
gpus_per_node, so every pod is alike. CPU jobs and clusters without gpus_per_node run one
process per pod.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dtrain.errors import SpecError
from dtrain.names import MAX_NAME, counted, kubernetes_quantity, shown
from dtrain.spec import WORKSPACES_ENV, JobSpec, check_image, notebook_home, workspaces_dir

from . import render_storage
from .config import KubernetesConfig
from .objects import (
    ANN_NOTEBOOK_STOPPED,
    ANN_PROCS_PER_POD,
    ANN_SPEC,
    ANN_SUSPENDED,
    BATCH_JOB,
    GPU_RESOURCE,
    KF_JOB_NAME,
    KF_REPLICA_INDEX,
    KF_REPLICA_TYPE,
    MPI_JOB,
    NOTEBOOK,
    PYTORCH_JOB,
    TRAIN_JOB,
    Resource,
    job_labels,
    metadata,
)
from .objects import escape_dollars as _escape

PYTORCH_CONTAINER = "pytorch"  # the Training Operator finds the master port on this container
MPI_CONTAINER = "mpi"
TRAIN_CONTAINER = "train"
# torchrun prefixes each line of a packed pod with the global rank, so `logs --rank` can split it.
TORCHRUN_PREFIX_ENV = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${rank}]:"}
SHM_PATH = "/dev/shm"
NO_GPU_ENV = "NVIDIA_VISIBLE_DEVICES"  # 'void' in a container that requests no GPU (see _env)
MAX_ANNOTATIONS = 256 * 1024  # bytes of an object's annotations, keys and values, that the API server takes


def resource_for(spec: JobSpec, config: KubernetesConfig) -> Resource:
    """Which API object runs this spec."""
    if spec.notebook:
        if spec.idle_timeout is not None:
            raise SpecError(f"notebook {spec.name!r}: on Kubernetes, Kubeflow's notebook controller stops idle "
                            f"notebooks for the whole cluster (its culler: ENABLE_CULLING, CULL_IDLE_TIME), not "
                            f"one by one: drop --idle-timeout, or ask the cluster's admin to turn culling on")
        return NOTEBOOK
    if spec.launcher == "none":
        return BATCH_JOB
    if config.trainer == "v2":
        if spec.launcher == "mpi":
            raise SpecError(f"job {spec.name!r}: Trainer v2 rendering covers torchrun only; "
                            f"submit-mpi needs the v1 Training Operator (set the Kubernetes trainer to v1)")
        return TRAIN_JOB
    return PYTORCH_JOB if spec.launcher == "torchrun" else MPI_JOB


def packing(spec: JobSpec, config: KubernetesConfig) -> tuple[int, int]:
    """(replica pods, processes per pod) under the packing rule in the module docstring."""
    if spec.launcher == "none" or spec.gpu == 0 or not config.gpus_per_node:
        return spec.processes, 1
    if spec.gpu > config.gpus_per_node:
        raise SpecError(f"--gpu {shown(spec.typed('gpu'))} per process is more than a node's "
                        f"{counted(config.gpus_per_node, 'GPU')}: "
                        f"use --gpu <= {config.gpus_per_node}")
    capacity = config.gpus_per_node // spec.gpu
    per_pod = max(k for k in range(1, min(capacity, spec.processes) + 1) if spec.processes % k == 0)
    return spec.processes // per_pod, per_pod


NOTEBOOK_IMAGE = "kubeflownotebookswg/jupyter-pytorch-full:v1.9.2"  # docs/kubernetes.md's, a notebook-servers image
NOTEBOOK_RUNTIME_DIR = "/tmp/jupyter-runtime"  # a notebook pod's own, off the volume its home may share


def image_of(spec: JobSpec, config: KubernetesConfig) -> str:
    # A notebook never falls back to the jobs' image: a training image starts no Jupyter, so the pod
    # would exit, never serve. It has a default of its own (notebook_image).
    image = spec.image or (config.notebook_image if spec.notebook else config.image)
    if not image and spec.notebook:
        raise SpecError(f"notebook {spec.name!r} needs a container image on Kubernetes: pass a Kubeflow "
                        f"notebook-server image, which starts Jupyter itself, e.g. --image {NOTEBOOK_IMAGE}, or set "
                        f"one for every notebook: dtrain config kubernetes --notebook-image {NOTEBOOK_IMAGE} (a "
                        f"training image such as pytorch/pytorch, or the jobs' image, starts none)")
    if not image:
        raise SpecError(f"job {spec.name!r} needs a container image on Kubernetes: pass --image "
                        f"(e.g. --image pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime) or set a default image in "
                        f"config.yaml (kubernetes: {{image: ...}}): dtrain config kubernetes --image IMAGE")
    if any(c.isspace() for c in image):  # the API refuses spaces around it, the kubelet inside it
        raise SpecError(f"invalid image {shown(image)}: remove the spaces (an image reference such as "
                        f"registry.example.com/dtrain:0.1 has none)")
    return check_image(image, "image", required=True)  # a job's --image was checked by its spec; a default here


def render_job(spec: JobSpec, config: KubernetesConfig, *, with_namespace: bool = False,
               snapshot_source: dict | None = None) -> list[dict]:
    """Every object `submit` creates, in creation order (what `--dry-run` prints). `snapshot_source`:
    the existing PVC that --snapshot-on-success names, read by the caller, whose size and class the
    snapshot records."""
    namespace = config.namespace_of(spec.project)
    objects: list[dict] = []
    if with_namespace:
        objects.append(render_storage.render_namespace(namespace, spec.project, config))
    objects += [render_storage.render_new_volume(spec, name, v, config) for name, v in spec.new_volumes()]
    workload = render_workload(spec, config)
    if spec.snapshot_volume and config.snapshot_watcher:
        objects += render_storage.render_snapshot_rbac(namespace, spec.project, config)
    objects.append(workload)
    if workload["kind"] == MPI_JOB.kind and spec.processes > 1:
        objects.append(render_mpi_master_service(spec, config))
    if spec.snapshot_volume and config.snapshot_watcher:
        objects.append(render_storage.render_snapshot_watcher(spec, config, resource_for(spec, config),
                                                              snapshot_source))
    return objects


def render_workload(spec: JobSpec, config: KubernetesConfig) -> dict:
    """The one job object (Job, PyTorchJob, MPIJob or TrainJob) of a spec."""
    resource = resource_for(spec, config)
    check_workload_name(spec, resource)
    replicas, per_pod = packing(spec, config)
    annotations = {ANN_SPEC: json.dumps(spec.to_dict(), sort_keys=True), ANN_PROCS_PER_POD: str(per_pod)}
    _check_annotations(spec, annotations)
    meta = metadata(spec.name, config.namespace_of(spec.project), job_labels(spec, config), annotations)
    build = {BATCH_JOB.kind: _batch_job, PYTORCH_JOB.kind: _pytorch_job,
             MPI_JOB.kind: _mpi_job, TRAIN_JOB.kind: _train_job, NOTEBOOK.kind: _notebook}[resource.kind]
    body = build(spec, config, replicas, per_pod)
    return {"apiVersion": resource.api_version, "kind": resource.kind, "metadata": meta, **body}


_DNS1035 = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?\Z")
# Kinds whose name becomes a Service's, which must be a DNS-1035 label (a letter first): the
# operator's per-replica Services of a PyTorchJob or MPIJob (and our <job>-mpi-master), the JobSet
# Services of a TrainJob, the Service the notebook controller names after its Notebook.
_SERVICE_NAMED = (PYTORCH_JOB.kind, MPI_JOB.kind, TRAIN_JOB.kind, NOTEBOOK.kind)


def _max_name(kind: str) -> int:
    """The longest name of a kind, so that what is named after it stays a 63-character label."""
    if kind == MPI_JOB.kind:
        return 63 - len(mpi_master_name(""))  # 52: the Service <job>-mpi-master
    if kind == NOTEBOOK.kind:
        return 52  # its StatefulSet's pods get the label controller-revision-hash=<name>-<10-char hash>
    return MAX_NAME


def check_workload_name(spec: JobSpec, resource: Resource) -> None:
    """Names that names.check_name takes but some kinds do not: a leading digit, or one too long."""
    what = "notebook" if spec.notebook else "job"
    most = _max_name(resource.kind)
    if resource.kind in _SERVICE_NAMED and not _DNS1035.match(spec.name):
        example = "j" + (spec.name if len(spec.name) < most else spec.name[1:])
        raise SpecError(f"invalid {what} name {spec.name!r}: on Kubernetes, {resource.kind} names must start "
                        f"with a letter (a Service is named after them), e.g. {example!r}")
    if len(spec.name) > most:
        raise SpecError(f"invalid {what} name {spec.name!r}: on Kubernetes, {resource.kind} names may have at "
                        f"most {most} characters (it has {len(spec.name)}); shorten it")


def _check_annotations(spec: JobSpec, annotations: dict[str, str]) -> None:
    size = sum(len(k.encode()) + len(v.encode()) for k, v in annotations.items())
    if size > MAX_ANNOTATIONS:
        raise SpecError(f"job {spec.name!r} is too large for Kubernetes: its spec, kept in annotation {ANN_SPEC}, "
                        f"takes {size} bytes, over the API's {MAX_ANNOTATIONS // 1024} KiB limit on annotations; "
                        f"move large -e values or arguments into a file on a volume (or a ConfigMap)")


# ------------------------------------------------------------------------- job kinds


def _restart_policy(spec: JobSpec) -> str:
    return "OnFailure" if spec.max_restarts > 0 else "Never"


def _batch_job(spec: JobSpec, config: KubernetesConfig, replicas: int, per_pod: int) -> dict:
    template = pod_template(spec, config, list(spec.command), name=TRAIN_CONTAINER, per_pod=1)
    template["spec"]["restartPolicy"] = "Never"  # a failed pod is replaced, up to backoffLimit times
    job_spec: dict[str, Any] = {"backoffLimit": spec.max_restarts, "template": template}
    if config.ttl_seconds_after_finished is not None:
        job_spec["ttlSecondsAfterFinished"] = config.ttl_seconds_after_finished
    return {"spec": job_spec}


def _run_policy(spec: JobSpec, config: KubernetesConfig) -> dict:
    policy: dict[str, Any] = {"cleanPodPolicy": config.clean_pod_policy, "backoffLimit": spec.max_restarts}
    if config.ttl_seconds_after_finished is not None:
        policy["ttlSecondsAfterFinished"] = config.ttl_seconds_after_finished
    return policy


def _torchrun_command(command: list[str]) -> list[str]:
    """The user's command as torchrun's arguments in a pod: torchrun reads each one as a
    string.Template (${local_rank}, and $$ for $), so every $ is doubled for it, then the result is
    escaped for Kubernetes' $(VAR) expansion. The command gets its arguments as given, as in an
    unpacked pod, under mpirun, or on the local backend."""
    return _escape([arg.replace("$", "$$") for arg in command])


def _torchrun(replicas: int, per_pod: int, elastic: bool) -> list[str]:
    """torchrun inside a pod; the operator's RANK/MASTER_* (or PET_* when elastic) place it."""
    if elastic:
        return ["torchrun", f"--nproc-per-node={per_pod}", "--tee=3", "--no-python"]
    return ["torchrun", f"--nnodes={replicas}", f"--nproc-per-node={per_pod}", "--node-rank=$(RANK)",
            "--master-addr=$(MASTER_ADDR)", "--master-port=$(MASTER_PORT)", "--tee=3", "--no-python"]


MAX_POD_NAME = 63  # a DNS-1123 label: the operator names a Service (and the pod's hostname) after each pod


def _check_pod_name(job: str, suffix: str, pods: int) -> None:
    """The Training Operator names pod i of a replica type `<job>-worker-<i>` and a Service after it;
    a name over 63 characters makes the API server refuse that Service, and the job never runs."""
    name = f"{job}-{suffix}"
    if len(name) > MAX_POD_NAME:
        most = MAX_POD_NAME - len(name) + len(job)
        raise SpecError(f"job name {job!r} is {len(job)} characters: with {pods} workers its last pod "
                        f"{name!r} is {len(name)}, over Kubernetes' {MAX_POD_NAME}; shorten the name to at most "
                        f"{most} characters or run fewer pods")


def _pytorch_job(spec: JobSpec, config: KubernetesConfig, replicas: int, per_pod: int) -> dict:
    elastic = config.elastic_min_replicas is not None
    command = list(spec.command)
    env: dict[str, str] = {}
    if per_pod > 1 or elastic:
        command = _torchrun(replicas, per_pod, elastic) + _torchrun_command(command)
        env = dict(TORCHRUN_PREFIX_ENV)
    template = pod_template(spec, config, command, name=PYTORCH_CONTAINER, per_pod=per_pod, extra_env=env,
                            escaped=per_pod > 1 or elastic)
    policy = _restart_policy(spec)
    replica_specs: dict[str, Any] = {}
    if not elastic:  # an elastic job is Workers only; the rendezvous replaces the Master
        replica_specs["Master"] = {"replicas": 1, "restartPolicy": policy, "template": template}
    workers = replicas if elastic else replicas - 1
    if workers:
        most = max(workers, config.elastic_max_replicas or 0) if elastic else workers
        _check_pod_name(spec.name, f"worker-{most - 1}", most)
        replica_specs["Worker"] = {"replicas": workers, "restartPolicy": policy, "template": template}
    body: dict[str, Any] = {"runPolicy": _run_policy(spec, config), "nprocPerNode": str(per_pod),
                            "pytorchReplicaSpecs": replica_specs}
    if elastic:
        low, high = config.elastic_min_replicas, config.elastic_max_replicas or replicas
        if not low <= replicas <= high:
            raise SpecError(f"job {spec.name!r} runs {replicas} pods, outside the elastic range {low}..{high}: "
                            f"change --processes or the elastic replica bounds")
        body["elasticPolicy"] = {"minReplicas": low, "maxReplicas": high, "rdzvBackend": "c10d",
                                 "maxRestarts": spec.max_restarts}
    return {"spec": body}


def _notebook(spec: JobSpec, config: KubernetesConfig, replicas: int, per_pod: int) -> dict:
    """A Kubeflow Notebook: the notebook-server image starts Jupyter itself (under NB_PREFIX, the
    path the Kubeflow gateway routes), so the spec's local jupyter-server command is not used. The
    CRD's pod template has no metadata: the controller copies the Notebook's labels to its pod,
    which is how `dtrain logs` and `list` find it. The container is named after the notebook, as
    Kubeflow's notebook web app names it. HOME is the workspace volume's mount path: Kubeflow mounts
    that volume at the image's home (/home/jovyan), where the image's Jupyter is rooted, so ~/ files
    persist; mounted elsewhere (/home/jovyan/work) it is still the notebook's home, as locally.
    A home on a volume may be a teammate's notebook's home too: the JupyterLab layout goes to a folder
    of this notebook's (spec/notebook.py), and Jupyter's runtime files stay in the pod (their names,
    jpserver-PID.json, repeat from pod to pod: PID 7 in one is PID 7 in the next)."""
    home = notebook_home(spec)
    extra = {"HOME": home, WORKSPACES_ENV: workspaces_dir(spec.name, home),
             "JUPYTER_RUNTIME_DIR": NOTEBOOK_RUNTIME_DIR} if home else None
    template = pod_template(spec, config, None, name=spec.name, per_pod=1, extra_env=extra)
    return {"spec": {"template": {"spec": template["spec"]}}}


def mpi_master_name(job: str) -> str:
    return f"{job}-mpi-master"


def _mpi_job(spec: JobSpec, config: KubernetesConfig, replicas: int, per_pod: int) -> dict:
    policy = _restart_policy(spec)
    worker = pod_template(spec, config, None, name=MPI_CONTAINER, per_pod=per_pod)
    # The operator runs `sleep 365d` in workers whose command is empty; mpirun on the launcher
    # starts the ranks in them through kubectl exec and its generated hostfile (worker-0 first).
    mpirun = ["mpirun", "-np", str(spec.processes), *config.mpirun_args,
              "-x", "MASTER_ADDR", "-x", "MASTER_PORT"]
    if spec.working_dir:
        mpirun += ["-wdir", *_escape([spec.working_dir])]  # kept literal, as a pod's workingDir is
    master = {"MASTER_ADDR": mpi_master_name(spec.name), "MASTER_PORT": str(config.master_port)}
    launcher = pod_template(spec, config, mpirun + _escape(list(spec.command)), name=MPI_CONTAINER,
                            per_pod=per_pod, extra_env=master, launcher=True, escaped=True)
    return {"spec": {
        "slotsPerWorker": per_pod,
        "runPolicy": _run_policy(spec, config),
        "mpiReplicaSpecs": {
            "Launcher": {"replicas": 1, "restartPolicy": policy, "template": launcher},
            "Worker": {"replicas": replicas, "restartPolicy": policy, "template": worker},
        }}}


def render_mpi_master_service(spec: JobSpec, config: KubernetesConfig) -> dict:
    """A headless Service naming worker 0 (where mpirun puts rank 0): the ranks' MASTER_ADDR."""
    selector = {KF_JOB_NAME: spec.name, KF_REPLICA_TYPE: "worker", KF_REPLICA_INDEX: "0"}
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": metadata(mpi_master_name(spec.name), config.namespace_of(spec.project),
                                 job_labels(spec, config)),
            "spec": {"clusterIP": "None", "publishNotReadyAddresses": True, "selector": selector,
                     "ports": [{"name": "rendezvous", "port": config.master_port,
                                "targetPort": config.master_port}]}}


def _check_train_job(spec: JobSpec, config: KubernetesConfig) -> None:
    """What a TrainJob has no field for (its ClusterTrainingRuntime decides it) is refused, not dropped."""
    if spec.image_pull_policy:
        raise SpecError("--image-pull-policy cannot be set on a Trainer v2 TrainJob (its runtime sets it): "
                        "drop the flag or use the v1 Training Operator")
    if spec.max_restarts:
        raise SpecError(f"--max-restarts cannot be set on a Trainer v2 TrainJob (its TrainingRuntime owns "
                        f"restarts): drop the flag, set them in ClusterTrainingRuntime {config.trainer_runtime!r}, "
                        f"or use the v1 Training Operator")
    for field in ("ttl_seconds_after_finished", "scheduler_name"):
        if getattr(config, field) is not None:
            raise SpecError(f"the Kubernetes config's {field} cannot apply to a Trainer v2 TrainJob (it has no "
                            f"such field): set it in ClusterTrainingRuntime {config.trainer_runtime!r} and remove "
                            f"it from the config, or use the v1 Training Operator (trainer: v1)")


def _check_jobset_pod_name(spec: JobSpec, config: KubernetesConfig, replicas: int) -> None:
    """Trainer v2 runs a TrainJob as a JobSet of the same name, whose webhook refuses one whose last
    pod, `<job>-<node>-0-<replicas - 1>-<5 random>`, would exceed a 63-character DNS label: the
    TrainJob is accepted, but its JobSet is never made and the job never runs."""
    pod = f"{spec.name}-{config.trainer_node}-0-{replicas - 1}-xxxxx"
    if len(pod) > MAX_POD_NAME:
        most = MAX_POD_NAME - len(pod) + len(spec.name)
        raise SpecError(f"job name {spec.name!r} is {len(spec.name)} characters: Trainer v2 names the last of its "
                        f"{replicas} pods {spec.name}-{config.trainer_node}-0-{replicas - 1}-<5 letters>, "
                        f"{len(pod)} characters, over Kubernetes' {MAX_POD_NAME}, and its JobSet would be refused; "
                        f"shorten the name to at most {max(most, 1)} characters")


def _train_job(spec: JobSpec, config: KubernetesConfig, replicas: int, per_pod: int) -> dict:
    _check_train_job(spec, config)
    _check_jobset_pod_name(spec, config, replicas)
    command = ["torchrun", "--tee=3", "--no-python", *_torchrun_command(list(spec.command))]
    if spec.working_dir:  # TrainJob has no workingDir field: change directory in a shell
        command = ["sh", "-c", 'cd "$0" && exec "$@"', *_escape([spec.working_dir]), *command]
    trainer: dict[str, Any] = {
        "image": image_of(spec, config), "command": command, "numNodes": replicas, "numProcPerNode": per_pod}
    env = _env(spec, TORCHRUN_PREFIX_ENV, gpus=spec.gpu > 0)
    if env:
        trainer["env"] = env
    res = resources(spec, per_pod)
    if res:
        trainer["resourcesPerNode"] = res
    pod: dict[str, Any] = {}
    volumes, mounts = _volumes(spec, config)
    if volumes:
        pod["volumes"] = volumes
        pod["containers"] = [{"name": config.trainer_node, "volumeMounts": mounts}]
    secrets = _pull_secrets(spec, config)
    if secrets:
        pod["imagePullSecrets"] = secrets
    if spec.node_selector:
        pod["nodeSelector"] = _node_selector(spec)
    if spec.tolerations:
        pod["tolerations"] = _tolerations(spec)
    pod_meta = {"labels": job_labels(spec, config)}
    patch = {"manager": "dtrain.io/backend", "trainingRuntimeSpec": {"template": {"spec": {"replicatedJobs": [
        {"name": config.trainer_node, "template": {"spec": {"template": {"metadata": pod_meta, "spec": pod}}}}]}}}}
    return {"spec": {
        "runtimeRef": {"apiGroup": TRAIN_JOB.group, "kind": "ClusterTrainingRuntime", "name": config.trainer_runtime},
        "trainer": trainer, "runtimePatches": [patch]}}


# ------------------------------------------------------------------------- suspend, resume

# Where each kind keeps its suspend flag: the Training Operator's runPolicy.suspend, batch/v1 and
# Trainer v2's spec.suspend. A Notebook has none: Kubeflow stops it with an annotation.
SUSPEND_FLAG = {PYTORCH_JOB.kind: "/spec/runPolicy/suspend", MPI_JOB.kind: "/spec/runPolicy/suspend",
                BATCH_JOB.kind: "/spec/suspend", TRAIN_JOB.kind: "/spec/suspend"}


def _pointer(key: str) -> str:
    """An annotation key as a JSON Pointer token (RFC 6901: '~' -> '~0', '/' -> '~1')."""
    return key.replace("~", "~0").replace("/", "~1")


def render_suspend(kind: str, *, at: str) -> list[dict]:
    """The JSON Patch of `dtrain suspend` at RFC 3339 time `at`: the kind's suspend flag, which makes
    its controller delete the pods, and dtrain's annotation, which tells a user's suspension from a
    queue's (Kueue suspends jobs until it admits them). A Notebook: Kubeflow's stop annotation."""
    annotations = "/metadata/annotations/"
    if kind == NOTEBOOK.kind:
        return [{"op": "add", "path": annotations + ANN_NOTEBOOK_STOPPED, "value": at}]
    return [{"op": "add", "path": SUSPEND_FLAG[kind], "value": True},
            {"op": "add", "path": annotations + _pointer(ANN_SUSPENDED), "value": at}]


def render_resume(kind: str, annotations: dict[str, str]) -> list[dict]:
    """The JSON Patch of `dtrain resume`: the suspend flag off and the annotations of the stop removed
    (those the object has: `annotations`), so that the controller creates the pods again."""
    ops = [] if kind == NOTEBOOK.kind else [{"op": "add", "path": SUSPEND_FLAG[kind], "value": False}]
    return ops + [{"op": "remove", "path": "/metadata/annotations/" + _pointer(key)}
                  for key in (ANN_SUSPENDED, ANN_NOTEBOOK_STOPPED) if key in annotations]


# ------------------------------------------------------------------------- pods


def pod_template(spec: JobSpec, config: KubernetesConfig, command: list[str] | None, *, name: str,
                 per_pod: int, extra_env: dict[str, str] | None = None, launcher: bool = False,
                 escaped: bool = False) -> dict:
    """A PodTemplateSpec running `command` (None: the image's, or the operator's default)."""
    container: dict[str, Any] = {"name": name, "image": image_of(spec, config)}
    if command is not None:
        container["command"] = command if escaped else _escape(command)
    policy = spec.image_pull_policy or config.image_pull_policy
    if policy:
        container["imagePullPolicy"] = policy
    if spec.working_dir and not launcher:
        container["workingDir"] = spec.working_dir
    # The MPI operator hides GPUs from a launcher itself (NVIDIA_VISIBLE_DEVICES=''), after our env.
    env = _env(spec, extra_env or {}, gpus=spec.gpu > 0 or launcher)
    if env:
        container["env"] = env
    pod: dict[str, Any] = {"containers": [container]}
    if not launcher:  # the MPI launcher only runs mpirun: no GPUs, volumes or shm
        res = resources(spec, per_pod)
        if res:
            container["resources"] = res
        volumes, mounts = _volumes(spec, config)
        if volumes:
            pod["volumes"] = volumes
            container["volumeMounts"] = mounts
    secrets = _pull_secrets(spec, config)
    if secrets:
        pod["imagePullSecrets"] = secrets
    if config.scheduler_name:
        pod["schedulerName"] = config.scheduler_name
    if spec.node_selector:  # every replica, the MPI launcher too: see _node_selector
        pod["nodeSelector"] = _node_selector(spec)
    if spec.tolerations:  # the MPI launcher too: its nodeSelector sends it to the same (tainted) nodes
        pod["tolerations"] = _tolerations(spec)
    return {"metadata": {"labels": job_labels(spec, config)}, "spec": pod}


def _node_selector(spec: JobSpec) -> dict[str, str]:
    """The pods' nodeSelector. The MPI launcher gets it as the workers do: Run:AI's --node-type
    places every pod of a workload, and the launcher runs the same image (a kubernetes.io/arch
    selector is its architecture too) and often may run only on the team's nodes (a pool's label)."""
    return dict(spec.node_selector)


def _tolerations(spec: JobSpec) -> list[dict[str, Any]]:
    """The pods' tolerations (core/v1 Toleration): the fields given, `seconds` as tolerationSeconds."""
    out = []
    for t in spec.tolerations:
        item: dict[str, Any] = {"key": t.key, "operator": t.operator, "value": t.value, "effect": t.effect}
        item = {k: v for k, v in item.items() if v}  # '' is the API's default of each
        if t.seconds is not None:
            item["tolerationSeconds"] = t.seconds
        out.append(item)
    return out


def _env(spec: JobSpec, extra: dict[str, str], *, gpus: bool) -> list[dict[str, str]]:
    """A container's variables; `gpus`: whether its pod requests GPUs."""
    env = {"PYTHONUNBUFFERED": "1"}  # lines reach `dtrain logs` as they are printed
    if not gpus:
        # A container that requests no GPU still gets every GPU of its node where the NVIDIA runtime is
        # the default (the GPU Operator's setting) and the image sets NVIDIA_VISIBLE_DEVICES=all (CUDA
        # and PyTorch images do): it would run on GPUs other jobs were given. 'void' hides them, as
        # the local backend hides GPUs from a job without --gpu (-e NVIDIA_VISIBLE_DEVICES=... overrides).
        env[NO_GPU_ENV] = "void"
    if spec.cpu is not None:
        env["OMP_NUM_THREADS"] = str(max(1, int(spec.cpu)))  # as the local backend sets it
    env.update(extra)
    env.update({k: _escape([v])[0] for k, v in spec.env.items()})  # the user's -e wins, literally
    return [{"name": k, "value": v} for k, v in env.items()]


def resources(spec: JobSpec, per_pod: int) -> dict[str, dict[str, str]]:
    """Requests and limits of a pod running `per_pod` processes of the spec."""
    limits: dict[str, str] = {}
    requests: dict[str, str] = {}
    if spec.gpu:
        limits[GPU_RESOURCE] = str(spec.gpu * per_pod)
    if spec.cpu is not None:
        requests["cpu"] = limits["cpu"] = cpu_quantity(spec.cpu * per_pod)
    if spec.memory is not None:
        requests["memory"] = limits["memory"] = scale_quantity(spec.memory, per_pod)
    out = {}
    if limits:
        out["limits"] = limits
    if requests:
        out["requests"] = requests
    return out


def cpu_quantity(cpus: float) -> str:
    """2 -> '2', 0.5 -> '500m'."""
    millis = round(cpus * 1000)
    return str(millis // 1000) if millis % 1000 == 0 else f"{millis}m"


def scale_quantity(quantity: str, factor: int) -> str:
    """The memory of a pod of `factor` processes: '4Gi' * 2 -> '8Gi', exactly (names.kubernetes_quantity)."""
    return kubernetes_quantity(quantity, factor, "--memory")


def _volumes(spec: JobSpec, config: KubernetesConfig) -> tuple[list[dict], list[dict]]:
    volumes: list[dict] = []
    mounts: list[dict] = []
    for i, v in enumerate(spec.resolved_volumes()):
        claim: dict[str, Any] = {"claimName": v.volume}
        mount: dict[str, Any] = {"name": f"vol-{i}", "mountPath": v.mount_path}
        if v.read_only:
            claim["readOnly"] = mount["readOnly"] = True
        volumes.append({"name": f"vol-{i}", "persistentVolumeClaim": claim})
        mounts.append(mount)
    if spec.large_shm:
        if any(m["mountPath"] == SHM_PATH for m in mounts):  # the API wants each mountPath once
            raise SpecError(f"--large-shm mounts its in-memory volume at {SHM_PATH}, where a --pvc is mounted: "
                            f"mount that volume elsewhere or drop --large-shm")
        shm: dict[str, Any] = {"medium": "Memory"}
        if config.shm_size:
            shm["sizeLimit"] = kubernetes_quantity(config.shm_size, what="shm_size")
        volumes.append({"name": "dshm", "emptyDir": shm})
        mounts.append({"name": "dshm", "mountPath": SHM_PATH})
    return volumes, mounts


def _pull_secrets(spec: JobSpec, config: KubernetesConfig) -> list[dict[str, str]]:
    names = list(dict.fromkeys([*config.image_pull_secrets, *spec.image_pull_secrets]))
    return [{"name": n} for n in names]

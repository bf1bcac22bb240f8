"""The body of each job kind (Job, PyTorchJob, MPIJob, TrainJob, Notebook) for render.py, which
picks the kind and writes the metadata; pure, no I/O. The pod templates are render_pods.py's."""

from __future__ import annotations

from typing import Any

from dtrain.errors import SpecError
from dtrain.spec import WORKSPACES_ENV, JobSpec, notebook_home, workspaces_dir

from .config import KubernetesConfig
from .objects import KF_JOB_NAME, KF_REPLICA_INDEX, KF_REPLICA_TYPE, TRAIN_JOB, job_labels, metadata
from .objects import escape_dollars as _escape
from .render_pods import _env, _node_selector, _pull_secrets, _tolerations, _volumes, image_of, pod_template, resources

PYTORCH_CONTAINER = "pytorch"  # the Training Operator finds the master port on this container
MPI_CONTAINER = "mpi"
TRAIN_CONTAINER = "train"
# torchrun prefixes each line of a packed pod with the global rank, so `logs --rank` can split it.
TORCHRUN_PREFIX_ENV = {"TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE": "[${rank}]:"}
NOTEBOOK_RUNTIME_DIR = "/tmp/jupyter-runtime"  # a notebook pod's own, off the volume its home may share


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

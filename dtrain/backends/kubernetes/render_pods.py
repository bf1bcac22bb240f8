"""Pod templates of every job kind: the container (image, command, env), its resources, volumes,
pull secrets, nodeSelector and tolerations; pure, no I/O. render_kinds.py places them in each kind."""

from __future__ import annotations

from typing import Any

from dtrain.errors import SpecError
from dtrain.names import kubernetes_quantity, shown
from dtrain.spec import JobSpec, check_image

from .config import KubernetesConfig
from .objects import GPU_RESOURCE, job_labels
from .objects import escape_dollars as _escape

SHM_PATH = "/dev/shm"
NO_GPU_ENV = "NVIDIA_VISIBLE_DEVICES"  # 'void' in a container that requests no GPU (see _env)
NOTEBOOK_IMAGE = "kubeflownotebookswg/jupyter-pytorch-full:v1.9.2"  # docs/kubernetes.md's, a notebook-servers image


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

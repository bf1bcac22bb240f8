"""The one typed job spec, and the parsers that CLI flags, YAML files and the SDK share.

Everything here is pure: no I/O, no backend knowledge. A spec is a frozen, keyword-only
dataclass validated in ``__post_init__``; a bad value raises :class:`SpecError` naming the
value and the fix.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from dtrain.errors import SpecError
from dtrain.names import NAME_RE, SIZE_RE, check_name, check_storage_class, job_volume_name, parse_size  # noqa: F401
from dtrain.spec_sagemaker import SageMakerOptions

LAUNCHERS = ("none", "torchrun", "mpi")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
TRUE_WORDS = ("1", "true", "yes", "on")
# The Run:AI seed's `-e ENABLE_SNAPSHOT=true -e PVC_NAME=VOL` is owned here, by the platform: it is
# the same request as --snapshot-on-success VOL, and `JobSpec.snapshot_volume` is the one place
# that reads it; backends act on snapshot_volume alone. Workloads may only record the variables.
SNAPSHOT_ENV, SNAPSHOT_VOLUME_ENV = "ENABLE_SNAPSHOT", "PVC_NAME"
MAX_PROCESSES = 10_000  # any backend; the local backend also checks what the machine can run
MAX_RESTARTS = 1_000


@dataclass(frozen=True, kw_only=True)
class VolumeMount:
    """An existing volume mounted into every process (``--pvc NAME:MOUNT[:ro]``)."""

    volume: str  # name of a volume that already exists
    mount_path: str  # absolute path inside the job, e.g. /mnt
    read_only: bool = False  # refuse writes when true

    def __post_init__(self):
        check_name(self.volume, "volume")
        _check_mount_path(self.mount_path)

    def to_flag(self) -> str:
        return f"{self.volume}:{self.mount_path}" + (":ro" if self.read_only else "")


@dataclass(frozen=True, kw_only=True)
class NewVolume:
    """A volume created for the job and named after it (``--pvc CLASS:SIZE:MOUNT``)."""

    storage_class: str  # storage class (local backend: 'local'; Kubernetes: a StorageClass)
    size: str  # Kubernetes quantity, e.g. 100Gi
    mount_path: str  # absolute path inside the job

    def __post_init__(self):
        check_storage_class(self.storage_class)
        parse_size(self.size, "volume size")
        _check_mount_path(self.mount_path)

    def to_flag(self) -> str:
        return f"{self.storage_class}:{self.size}:{self.mount_path}"



Volume = VolumeMount | NewVolume


def _check_mount_path(path: str) -> None:
    if not isinstance(path, str) or not path.startswith("/") or path.rstrip("/") == "" or ".." in path.split("/"):
        raise SpecError(f"invalid mount path {path!r}: use an absolute path other than '/', e.g. /mnt")


def parse_pvc(text: str) -> Volume:
    """Parse a Run:AI ``--pvc`` value: ``NAME:MOUNT[:ro]`` or ``CLASS:SIZE:MOUNT``."""
    parts = str(text).split(":")
    hint = ("use --pvc VOLUME:MOUNT[:ro] for an existing volume (e.g. tusimple:/mnt:ro) "
            "or --pvc CLASS:SIZE:MOUNT for a new one (e.g. local:100Gi:/mnt)")
    try:
        if len(parts) == 2:
            return VolumeMount(volume=parts[0], mount_path=parts[1])
        if len(parts) == 3 and parts[2] in ("ro", "rw"):
            return VolumeMount(volume=parts[0], mount_path=parts[1], read_only=parts[2] == "ro")
        if len(parts) == 3:
            return NewVolume(storage_class=parts[0], size=parts[1], mount_path=parts[2])
    except SpecError as err:
        raise SpecError(f"invalid --pvc {text!r}: {err}; {hint}") from None
    raise SpecError(f"invalid --pvc {text!r}: {hint}")


def parse_env(items) -> dict[str, str]:
    """Parse repeated ``-e KEY=VALUE`` into a dict; the last value of a key wins."""
    env: dict[str, str] = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not ENV_KEY_RE.match(key):
            raise SpecError(f"invalid -e {item!r}: use KEY=VALUE with KEY made of letters, digits "
                            f"and '_' (e.g. -e BATCH_SIZE=33)")
        env[key] = value
    return env


@dataclass(frozen=True, kw_only=True)
class JobSpec:
    """What to run, how many processes, on what resources: the same for every backend."""

    name: str  # job name, unique per backend; DNS-1123 label
    command: tuple[str, ...]  # the user's command and its arguments
    processes: int = 1  # data-parallel processes (replicas)
    launcher: str = "none"  # 'none' (one process), 'torchrun' or 'mpi'
    gpu: int = 0  # GPUs per process
    cpu: float | None = None  # CPU threads per process; sets OMP_NUM_THREADS
    memory: str | None = None  # memory per process, a Kubernetes quantity
    env: Mapping[str, str] = field(default_factory=dict)  # extra environment variables
    volumes: tuple[Volume, ...] = ()  # --pvc mounts, in flag order
    large_shm: bool = False  # a large in-memory /dev/shm
    working_dir: str | None = None  # working directory of the command
    project: str = "default"  # project: quota and FIFO queue (namespace on Kubernetes)
    backend: str = "local"  # 'local' or 'kubernetes'
    max_restarts: int = 0  # restarts of the whole job after a failure
    snapshot_on_success: str | None = None  # volume to snapshot when the job succeeds
    image: str | None = None  # container image (Kubernetes)
    image_pull_policy: str | None = None  # Always, IfNotPresent or Never (Kubernetes)
    image_pull_secrets: tuple[str, ...] = ()  # secret names (Kubernetes)
    notebook: bool = False  # an interactive Jupyter server (dtrain notebook): runs until deleted
    sagemaker: SageMakerOptions | None = None  # instances, channels, spot, limits (SageMaker)

    def __post_init__(self):
        check_name(self.name, "job")
        check_name(self.project, "project")
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  normalise containers
        if isinstance(self.command, str) or not self.command or not all(isinstance(c, str) for c in self.command):
            raise SpecError(f"job {self.name!r} has no command: put it after '--', "
                            f"e.g. dtrain submit {self.name} -- python train.py")
        set_("command", tuple(self.command))
        set_("env", dict(parse_env(f"{k}={v}" for k, v in dict(self.env).items())))
        set_("volumes", tuple(self.volumes))
        set_("image_pull_secrets", tuple(self.image_pull_secrets))
        if isinstance(self.sagemaker, Mapping):
            set_("sagemaker", SageMakerOptions.from_dict(self.sagemaker))
        elif self.sagemaker is not None and not isinstance(self.sagemaker, SageMakerOptions):
            raise SpecError(f"invalid sagemaker options {self.sagemaker!r}: use SageMakerOptions or a mapping")
        _check_int(self.processes, "--processes", 1)
        _check_int(self.gpu, "--gpu", 0)
        _check_int(self.max_restarts, "--max-restarts", 0)
        if self.processes > MAX_PROCESSES or self.max_restarts > MAX_RESTARTS:
            flag, value, top = (("--processes", self.processes, MAX_PROCESSES) if self.processes > MAX_PROCESSES
                                else ("--max-restarts", self.max_restarts, MAX_RESTARTS))
            raise SpecError(f"invalid {flag} {value}: at most {top}")
        if self.launcher not in LAUNCHERS:
            raise SpecError(f"unknown launcher {self.launcher!r}: use torchrun or mpi")
        if self.processes > 1 and self.launcher == "none":
            raise SpecError(f"--processes {self.processes} needs a launcher: use dtrain submit-dist "
                            f"--launcher torchrun or dtrain submit-mpi")
        if self.cpu is not None and (not isinstance(self.cpu, (int, float)) or self.cpu <= 0):
            raise SpecError(f"invalid --cpu {self.cpu!r}: use a positive number of threads, e.g. --cpu 2")
        if self.memory is not None:
            parse_size(self.memory, "--memory")
        if self.working_dir is not None and not str(self.working_dir).startswith("/"):
            raise SpecError(f"invalid --working-dir {self.working_dir!r}: use an absolute path")
        if self.image_pull_policy not in (None, "Always", "IfNotPresent", "Never"):
            raise SpecError(f"invalid --image-pull-policy {self.image_pull_policy!r}: "
                            f"use Always, IfNotPresent or Never")
        if self.notebook and (self.launcher != "none" or self.max_restarts or self.snapshot_volume):
            raise SpecError(f"notebook {self.name!r} is one interactive process: drop --processes, "
                            f"--launcher, --max-restarts and --snapshot-on-success")
        self._check_volumes()

    def _check_volumes(self):
        mounts = [v.mount_path.rstrip("/") for v in self.volumes]
        for v in self.volumes:
            if not isinstance(v, (VolumeMount, NewVolume)):
                raise SpecError(f"invalid volume {v!r}: use VolumeMount or NewVolume (or a --pvc string)")
            if mounts.count(v.mount_path.rstrip("/")) > 1:
                raise SpecError(f"two volumes are mounted at {v.mount_path}: give each --pvc its own path")
        if self.snapshot_on_success is not None:
            check_name(self.snapshot_on_success, "volume")

    # ---- derived views (pure) ----
    @property
    def distributed(self) -> bool:
        return self.launcher != "none"

    @property
    def kind(self) -> str:
        """The TYPE column: Train (one process), PyTorch (torchrun), MPI or Notebook."""
        if self.notebook:
            return "Notebook"
        return {"none": "Train", "torchrun": "PyTorch", "mpi": "MPI"}[self.launcher]

    @property
    def gpus_requested(self) -> int:
        return self.processes * self.gpu

    @property
    def snapshot_volume(self) -> str | None:
        """The volume to snapshot on success: the flag, or the seed's ENABLE_SNAPSHOT + PVC_NAME."""
        if self.snapshot_on_success:
            return self.snapshot_on_success
        if str(self.env.get(SNAPSHOT_ENV, "")).lower() in TRUE_WORDS and self.env.get(SNAPSHOT_VOLUME_ENV):
            return self.env[SNAPSHOT_VOLUME_ENV]
        return None

    def new_volumes(self) -> list[tuple[str, NewVolume]]:
        """The volumes this job creates, each with its name (names.job_volume_name)."""
        new = [v for v in self.volumes if isinstance(v, NewVolume)]
        return [(job_volume_name(self.name, i), v) for i, v in enumerate(new)]

    def resolved_volumes(self) -> list[VolumeMount]:
        """Every mount as an existing-volume mount; new volumes get their Run:AI names."""
        out = [VolumeMount(volume=name, mount_path=v.mount_path) for name, v in self.new_volumes()]
        out += [v for v in self.volumes if isinstance(v, VolumeMount)]
        order = {v.mount_path: i for i, v in enumerate(self.volumes)}
        return sorted(out, key=lambda m: order[m.mount_path])

    def replace(self, **changes) -> "JobSpec":
        return dataclasses.replace(self, **changes)

    # ---- wire form ----
    def to_dict(self) -> dict[str, Any]:
        """A JSON/YAML-ready dict; ``JobSpec.from_dict(spec.to_dict()) == spec``."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        d["command"] = list(self.command)
        d["env"] = dict(self.env)
        d["volumes"] = [v.to_flag() for v in self.volumes]
        d["image_pull_secrets"] = list(self.image_pull_secrets)
        d["sagemaker"] = None if self.sagemaker is None else self.sagemaker.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JobSpec":
        """Build from a YAML/JSON mapping. ``pvc`` is accepted as an alias of ``volumes``."""
        if not isinstance(data, Mapping):
            raise SpecError("a job file must hold a mapping of fields, e.g. 'name: train' and 'command: [...]'")
        known = {f.name for f in dataclasses.fields(cls)}
        data = dict(data)
        if "pvc" in data:
            data["volumes"] = list(data.pop("pvc") or []) + list(data.get("volumes") or [])
        unknown = sorted(set(data) - known)
        if unknown:
            raise SpecError(f"unknown job field(s) {', '.join(unknown)}: known fields are {', '.join(sorted(known))}")
        for required in ("name", "command"):
            if not data.get(required):
                raise SpecError(f"the job has no {required}: use dtrain submit NAME [options] -- COMMAND, "
                                f"or set '{required}:' in the job file")
        if isinstance(data.get("command"), str):
            raise SpecError("'command' must be a list of strings, e.g. [python, train.py, --epochs, '2']")
        vols = []
        for v in data.get("volumes") or []:
            vols.append(parse_pvc(v) if isinstance(v, str) else _volume_from_dict(v))
        data["volumes"] = tuple(vols)
        if "env" in data:
            data["env"] = {str(k): str(v) for k, v in (data["env"] or {}).items()}
        for key in ("command", "image_pull_secrets"):
            if key in data:
                data[key] = tuple(str(x) for x in (data[key] or ()))
        return cls(**data)


def _volume_from_dict(d: Mapping[str, Any]) -> Volume:
    if isinstance(d, Mapping) and "volume" in d:
        return VolumeMount(**d)
    if isinstance(d, Mapping) and "storage_class" in d:
        return NewVolume(**d)
    raise SpecError(f"invalid volume entry {d!r}: use 'NAME:MOUNT[:ro]', 'CLASS:SIZE:MOUNT', "
                    f"{{volume, mount_path, read_only}} or {{storage_class, size, mount_path}}")


def _check_int(value, flag: str, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise SpecError(f"invalid {flag} {value!r}: use a whole number >= {minimum}")


NOTEBOOK_SERVER = ("jupyter-server", "--ServerApp.ip=127.0.0.1", "--ServerApp.open_browser=False",
                   "--ServerApp.allow_root=True")  # port and token come from the launcher, per run


def notebook_spec(name: str, *, volumes=(), **fields: Any) -> JobSpec:
    """`dtrain notebook NAME --pvc VOLUME:/home/jovyan/work`: a one-process job running Jupyter,
    rooted at the first volume's mount path (the Kubeflow notebook images' /home/jovyan)."""
    volumes = tuple(parse_pvc(v) if isinstance(v, str) else v for v in volumes)
    root = (f"--ServerApp.root_dir={volumes[0].mount_path}",) if volumes else ()
    return JobSpec(name=name, command=NOTEBOOK_SERVER + root, volumes=volumes, notebook=True, **fields)

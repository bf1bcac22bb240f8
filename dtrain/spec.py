"""The one typed job spec, and the parsers that CLI flags, YAML files and the SDK share.

Everything here is pure: no I/O, no backend knowledge. A spec is a frozen, keyword-only
dataclass validated in ``__post_init__``; a bad value raises :class:`SpecError` naming the
value and the fix.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import posixpath
import re
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, Mapping

from dtrain.errors import SpecError
from dtrain.names import (MAX_PROCESSES, NAME_RE, SIZE_RE, check_mounted_volume, check_name, check_storage_class,  # noqa: F401 (re-exported)
                          MIN_VOLUME, STORED, WrittenFloat, WrittenInt, cut, job_volume_name, parse_least_size,
                          parse_size, parse_volume_size, plain, shown, written)
from dtrain.numbers import (NUMBER_WORD_RE, NumberWord, Typed, exact, plain_numbers, real_number, whole,  # noqa: F401 (plain_numbers re-exported: dtrain.config)
                            whole_number, yaml11_form)
from dtrain.spec_sagemaker import NUMBER_FIELDS as SAGEMAKER_NUMBERS, SageMakerOptions

LAUNCHERS = ("none", "torchrun", "mpi")
ENV_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*\Z")
TRUE_WORDS = ("1", "true", "yes", "on")
FALSE_WORDS = ("0", "false", "no", "off", "")  # as the workloads read them: empty is false
# The Run:AI seed's `-e ENABLE_SNAPSHOT=true -e PVC_NAME=VOL` is owned here, by the platform: it is
# the same request as --snapshot-on-success VOL, and `JobSpec.snapshot_volume` is the one place
# that reads it; backends act on snapshot_volume alone. Workloads may only record the variables.
SNAPSHOT_ENV, SNAPSHOT_VOLUME_ENV = "ENABLE_SNAPSHOT", "PVC_NAME"
# Bounds on what a user can ask for: above any real node or job, low enough that nothing
# downstream (a rank table, a loop over processes, a restart loop) can be made to run away.
# MAX_PROCESSES (names.py's) is the one bound on a job's processes.
MAX_GPU_PER_PROCESS = 16
MIN_CPU, MAX_CPU = 0.01, 1024  # 0.01: the smallest share a cgroup quota (1 ms per 100 ms) enforces
MIN_MEMORY = 4 * 2**20  # 4Mi: less than a process (an interpreter, a shell) needs to start
MEMORY_EXAMPLE = "8Gi"  # the --memory every refusal of one suggests (the flag's help says it too)
MAX_RESTARTS = 100
# A notebook's --idle-timeout, in seconds: Jupyter looks for activity once a minute, and a month is
# beyond any session that is still someone's.
MIN_IDLE_TIMEOUT, MAX_IDLE_TIMEOUT = 60, 30 * 86400
# The fields that take a number: a number written otherwise than Python writes it (a job file's 0x10,
# a flag's 1e9: names.WrittenInt) reaches their checks as written, so that a refusal quotes it.
NUMBER_FIELDS = ("processes", "gpu", "cpu", "max_restarts", "idle_timeout")
WHOLE_FIELDS = ("processes", "gpu", "max_restarts", "idle_timeout")  # of them, those whole numbers only
MAX_TEXT = 65536  # one command word, env value or path
# The command's words and the environment together: the kernel refuses to start a program whose
# arguments and environment pass ARG_MAX (2 MiB with the usual 8 MiB stack), and the launcher and
# the host add their own; a Kubernetes object must fit etcd's 1.5 MiB.
MAX_ARGS_ENV = 1 << 20


def _text(value, what: str, *, fix: str = "") -> str:
    """A string without NUL bytes (the kernel cuts argv, env and paths at the first NUL)."""
    if not isinstance(value, str):
        raise SpecError(f"invalid {what} {shown(value)}: must be a string{fix}")
    if "\0" in value or len(value) > MAX_TEXT:
        raise SpecError(f"invalid {what} {shown(value)}: must hold no NUL byte and at most {MAX_TEXT} characters")
    try:  # what is stored, shown and sent (the API, Kubernetes, SageMaker) is UTF-8
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise SpecError(f"invalid {what} {shown(value)}: it is not valid UTF-8 text (a raw byte or a lone "
                        f"surrogate); write it in UTF-8") from None
    return value


# An image reference as the kubelet and container runtimes parse it (the distribution/reference
# grammar): [HOST[:PORT]/]PATH[:TAG][@DIGEST], PATH lower-case, the name (HOST and PATH) at most 255
# characters. Kubernetes stores any string without outer spaces and its kubelet then refuses the
# pod (InvalidImageName: the job waits for good); SageMaker takes any 255 characters and fails the
# job minutes later; the local backend never reads it.
_IMAGE_HOST = r"(?:[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*" \
              r"|\[[a-fA-F0-9:]+\])(?::[0-9]+)?"
_IMAGE_PATH = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
IMAGE_RE = re.compile(rf"(?P<name>(?:{_IMAGE_HOST}/)?{_IMAGE_PATH}(?:/{_IMAGE_PATH})*)(?::\w[\w.-]{{0,127}})?"
                      rf"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{{32,}})?", re.ASCII)
MAX_IMAGE_NAME = 255


def check_image(value, param: str, *, required: bool = False) -> str:
    """An image reference ('' too where not `required`: the backend's configured image stands in),
    refused up front rather than by a pod or a job that never starts."""
    if value == "" and not required:
        return value
    match = IMAGE_RE.fullmatch(value) if isinstance(value, str) else None
    if match is None or len(match["name"]) > MAX_IMAGE_NAME:
        empty = "" if required else ", or '' for the backend's configured image"
        raise SpecError(f"invalid {param} {shown(value)}: use an image reference such as "
                        f"registry.example.com/team/image:1.0 ([HOST/]PATH[:TAG][@sha256:DIGEST], PATH lower-case, "
                        f"HOST/PATH at most {MAX_IMAGE_NAME} characters){empty}")
    return value


def idle_timeout_refusal(typed) -> SpecError:
    """The refusal of a notebook's idle timeout (`typed`: as the user wrote it: the SDK's and the HTTP
    API's seconds, the CLI's duration), in the same words from every door."""
    unit = "" if isinstance(typed, str) else " (seconds)"
    return SpecError(f"invalid --idle-timeout {shown(typed)}{unit}: give 1m to 30d, i.e. a whole number of seconds "
                     f"from {MIN_IDLE_TIMEOUT} to {MAX_IDLE_TIMEOUT}, e.g. 3600 (1h)")


def check_idle_timeout(value, typed=None) -> int:
    """A notebook's idle timeout: whole seconds from MIN_IDLE_TIMEOUT to MAX_IDLE_TIMEOUT (`value`: a
    Fraction for the CLI's exact duration, '1.5h'; None, a duration the CLI could not read). The CLI's
    plain seconds ('10') are named as the number, as the SDK and the HTTP API name theirs."""
    whole = not isinstance(value, bool) and isinstance(value, (int, Fraction)) and value == int(value)
    if not whole or not MIN_IDLE_TIMEOUT <= value <= MAX_IDLE_TIMEOUT:
        if isinstance(typed, str) and re.fullmatch(r"[0-9]{1,20}", typed.strip(), re.ASCII):
            typed = written(int(typed), typed.strip())
        raise idle_timeout_refusal(value if typed is None else typed)
    return int(value)


def _bool(value, what: str) -> bool:
    if not isinstance(value, bool):
        raise SpecError(f"invalid {what} {shown(value)}: must be true or false (unquoted in YAML), "
                        f"not a string or number")
    return value


@dataclass(frozen=True, kw_only=True)
class VolumeMount:
    """An existing volume mounted into every process (``--pvc NAME:MOUNT[:ro]``)."""

    volume: str  # name of a volume that already exists
    mount_path: str  # absolute path inside the job, e.g. /mnt
    read_only: bool = False  # refuse writes when true

    def __post_init__(self):
        check_mounted_volume(self.volume)  # on Kubernetes also an existing claim's full name, dots and all
        object.__setattr__(self, "mount_path", _check_mount_path(self.mount_path))
        _bool(self.read_only, "read_only")

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
        _text(self.size, "volume size", fix=" such as 100Gi")
        parse_volume_size(self.size, minimum=1 if _STORED.get() else MIN_VOLUME)
        object.__setattr__(self, "size", self.size.strip())  # parse_volume_size strips: store what it read
        object.__setattr__(self, "mount_path", _check_mount_path(self.mount_path))

    def to_flag(self) -> str:
        return f"{self.storage_class}:{self.size}:{self.mount_path}"



Volume = VolumeMount | NewVolume

# Names a Kubernetes or Kubeflow user gives a mount's fields (V1VolumeMount, a PVC volume source)
_VOLUME_ALIASES = {"name": "volume", "claim_name": "volume", "claimname": "volume", "pvc": "volume",
                   "path": "mount_path", "mountpath": "mount_path", "readonly": "read_only",
                   "class": "storage_class", "storageclass": "storage_class", "storage_class_name": "storage_class",
                   "storageclassname": "storage_class"}


def _volume_init(cls, example: str):
    """A mount's __init__ taking its fields by position too, in the order of its --pvc string
    (VolumeMount('data', '/mnt')), with a wrong or missing field the SpecError every other bad
    value is, naming the field meant, not a TypeError from the generated __init__."""
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        import difflib

        names = [f.name for f in dataclasses.fields(cls)]
        if len(args) > len(names):
            raise SpecError(f"{cls.__name__} takes at most {len(names)} values ({', '.join(names)}), not "
                            f"{len(args)}: {example}")
        given = dict(zip(names, args))
        twice = sorted(set(given) & set(kwargs))
        if twice:
            raise SpecError(f"{cls.__name__} got {twice[0]} twice, by position and by name: {example}")
        unknown = sorted(set(kwargs) - set(names), key=str)
        if unknown:
            key = unknown[0]
            folded = key.lower().replace("-", "_") if isinstance(key, str) else ""
            near = _VOLUME_ALIASES.get(folded) or _VOLUME_ALIASES.get(folded.replace("_", ""))
            near = near if near in names else next(iter(difflib.get_close_matches(folded, names, n=1)), None)
            hint = f" (did you mean '{near}'?)" if near else ""
            raise SpecError(f"{cls.__name__} got unknown field(s) {_keys(unknown)}{hint}: its fields are "
                            f"{', '.join(names)}, e.g. {example}")
        given.update(kwargs)
        missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.name not in given]
        if missing:
            raise SpecError(f"{cls.__name__} needs {missing[0]}=...: {example}")
        init(self, **given)
    return __init__


VolumeMount.__init__ = _volume_init(VolumeMount, "VolumeMount(volume='data', mount_path='/mnt')")  # type: ignore[method-assign]
NewVolume.__init__ = _volume_init(  # type: ignore[method-assign]
    NewVolume, "NewVolume(storage_class='local', size='10Gi', mount_path='/mnt/scratch')")


# Where a container runtime puts the kernel's own file systems: a volume there would hide them
# (Kubernetes runtimes refuse /proc and /sys; bubblewrap fails inside them). /dev/shm is a volume's
# usual place in /dev (--large-shm is one).
RESERVED_MOUNTS = ("/proc", "/sys", "/dev")
MAX_MOUNT_PATH = 4095  # PATH_MAX, less the terminating NUL
MAX_PATH_PART = 255  # NAME_MAX: bytes of one folder name


def _check_mount_path(path: str) -> str:
    """The normalised mount path (/mnt/./x/ -> /mnt/x); '/', '..', the kernel's folders and names
    longer than a file system takes are refused."""
    _text(path, "mount path", fix=", an absolute path such as /mnt")
    if any(c < " " or c == "\x7f" for c in path) and not _STORED.get():
        raise SpecError(f"invalid mount path {shown(path)}: it holds a control character (a newline, a tab, ...); "
                        f"use a plain path, e.g. /mnt")
    norm = posixpath.normpath(path) if path.startswith("/") else ""
    if norm in ("", "/", "//"):
        raise SpecError(f"invalid mount path {shown(path)}: use an absolute path other than '/', e.g. /mnt")
    if ".." in path.split("/"):
        raise SpecError(f"invalid mount path {shown(path)}: '..' is not allowed in it; write the folder it "
                        f"means, e.g. /mnt")
    norm = "/" + norm.lstrip("/")
    reserved = next((r for r in RESERVED_MOUNTS if norm == r or norm.startswith(r + "/")), None)
    if reserved and not (norm == "/dev/shm" or norm.startswith("/dev/shm/")):
        raise SpecError(f"invalid mount path {shown(path)}: {reserved} is the kernel's, and a volume there would "
                        f"hide it; use another folder, e.g. /mnt")
    encoded = norm.encode("utf-8", "surrogateescape")
    if len(encoded) > MAX_MOUNT_PATH or any(len(p) > MAX_PATH_PART for p in encoded.split(b"/")):
        raise SpecError(f"invalid mount path {shown(path)}: at most {MAX_PATH_PART} bytes a folder name and "
                        f"{MAX_MOUNT_PATH} in all")
    return norm


def parse_pvc(text: str) -> Volume:
    """Parse a Run:AI ``--pvc`` value: ``NAME:MOUNT[:ro]`` or ``CLASS:SIZE:MOUNT``."""
    parts = str(text).split(":")
    hint = ("use --pvc VOLUME:MOUNT[:ro] for an existing volume (e.g. tusimple:/mnt:ro) "
            "or --pvc CLASS:SIZE:MOUNT for a new one (e.g. local:100Gi:/mnt)")
    if len(parts) == 3 and parts[1].startswith("/") and parts[2] not in ("ro", "rw"):  # VOLUME:MOUNT:MODE
        raise SpecError(f"invalid --pvc {shown(text)}: after the mount path comes ro or rw, not {shown(parts[2])}; "
                        f"{hint}")
    if len(parts) == 4 and parts[2].startswith("/") and parts[3] in ("ro", "rw"):  # CLASS:SIZE:MOUNT:MODE
        raise SpecError(f"invalid --pvc {shown(text)}: a new volume (CLASS:SIZE:MOUNT) starts empty and is mounted "
                        f"read-write; drop ':{parts[3]}', or create the volume first (dtrain volume create) and "
                        f"mount it with VOLUME:MOUNT:ro")
    try:
        if len(parts) == 2:
            return VolumeMount(volume=parts[0], mount_path=parts[1])
        if len(parts) == 3 and parts[2] in ("ro", "rw"):
            return VolumeMount(volume=parts[0], mount_path=parts[1], read_only=parts[2] == "ro")
        if len(parts) == 3:
            return NewVolume(storage_class=parts[0], size=parts[1], mount_path=parts[2])
    except SpecError as err:
        raise SpecError(f"invalid --pvc {shown(text)}: {err}; {hint}") from None
    raise SpecError(f"invalid --pvc {shown(text)}: {hint}")


def parse_env(items) -> dict[str, str]:
    """Parse repeated ``-e KEY=VALUE`` into a dict; the last value of a key wins."""
    env: dict[str, str] = {}
    if isinstance(items, (str, bytes)):  # its characters would each be read as one -e
        raise SpecError(f"invalid -e list {shown(items)}: give a list of KEY=VALUE strings, e.g. ['BATCH_SIZE=33']")
    for item in items or ():
        key, sep, value = _text(item, "-e").partition("=")
        if not sep or not ENV_KEY_RE.match(key):
            raise SpecError(f"invalid -e {shown(item)}: use KEY=VALUE with KEY made of letters, digits "
                            f"and '_', not starting with a digit (e.g. -e BATCH_SIZE=33)")
        env[key] = value
    return env


# Set while a spec is read back from where a backend kept it (JobSpec.from_stored): names.STORED.
_STORED = STORED


# Variables dtrain sets in every process from the job's own fields: what it was granted (the local
# runtime enforces --memory and pins --cpu and --gpu from them: `-e DTRAIN_MEMORY=1Ei` lifted a 64Mi
# limit, `-e DTRAIN_RANK_DEVICES=0,1` handed a job without --gpu two GPUs the scheduler gave others;
# `-e CUDA_VISIBLE_DEVICES=1` was replaced by the rank's own GPUs locally, and kept in a pod),
# who it is, and the rank contract the launchers (torchrun, mpirun, the Kubeflow operators) set. A
# user's value would win on one backend and lose on another, so none is taken from env.
OWNED_ENV = {"DTRAIN_MEMORY": "--memory", "DTRAIN_CPU": "--cpu", "DTRAIN_RANK_CPUS": "--cpu",
             "DTRAIN_RANK_DEVICES": "--gpu", "CUDA_VISIBLE_DEVICES": "--gpu (each process sees its own GPUs)",
             "DTRAIN_ATTEMPT": "the restart count", "DTRAIN_JOB_NAME": "the job name",
             "DTRAIN_PROJECT": "the project (-p)", **dict.fromkeys(
                 ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"),
                 "the launcher and --processes")}


def _bytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _env(env) -> dict[str, str]:
    """The spec's env: NAME -> value, each NAME as `-e` takes it (so `{"A=B": "x"}` is refused,
    not set as A="B=x"), each value a string."""
    if not isinstance(env, Mapping):
        raise SpecError(f"invalid env {shown(env)}: must be a mapping of NAME: value, e.g. {{SEED: '1'}}")
    out = {}
    for key, value in dict(env).items():
        if not isinstance(key, str) or not (ENV_KEY_RE.match(key) or _STORED.get() and key):
            raise SpecError(f"invalid env name {shown(key)}: use letters, digits and '_', not starting with a "
                            f"digit (e.g. BATCH_SIZE), as -e BATCH_SIZE=33 takes it")
        if key in OWNED_ENV and not _STORED.get():
            raise SpecError(f"invalid env name {key}: every process gets it from {OWNED_ENV[key]}; "
                            f"drop it from -e / env:")
        out[key] = _text(value, f"env {_keys([key])}", fix=" (quote it in YAML)")
    return out


# Kubernetes label rules (SageMaker's tag rules take them too): a name of 63 characters at most,
# alphanumeric at both ends, '-', '_' and '.' between, with an optional DNS-subdomain prefix and '/';
# a value of 63 at most, the same characters, or empty.
_LABEL_PART = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_KEY_RE = re.compile(rf"^([a-z0-9]([-a-z0-9.]{{0,251}}[a-z0-9])?/)?{_LABEL_PART}\Z")
LABEL_VALUE_RE = re.compile(rf"^({_LABEL_PART})?\Z")
MAX_LABELS = 40  # SageMaker takes 50 tags a job, two of them dtrain's
OWNED_LABEL_PREFIXES = ("dtrain.io/", "app.kubernetes.io/", "aws:", "dtrain:")  # dtrain's own, and AWS's


def _labels(labels) -> dict[str, str]:
    """The spec's labels: KEY -> value as Kubernetes takes them on an object (and SageMaker as tags)."""
    if not isinstance(labels, Mapping):
        raise SpecError(f"invalid labels {shown(labels)}: must be a mapping of KEY: value, e.g. {{team: vision}}")
    if len(labels) > MAX_LABELS:
        raise SpecError(f"{len(labels)} labels: a job takes {MAX_LABELS} at most (SageMaker's tag limit)")
    out = {}
    for key, value in dict(labels).items():
        _label(key, value, "label", example="team, example.com/team")
        if key.startswith(OWNED_LABEL_PREFIXES) and not _STORED.get():
            raise SpecError(f"invalid label key {key}: the prefix is dtrain's or the platform's own; use another")
        out[key] = value
    return out


def _label(key, value, what: str, *, example: str) -> None:
    """One KEY: value pair under Kubernetes' label rules, `what` ('label', 'node selector') naming it."""
    if not isinstance(key, str) or len(key) > 253 + 1 + 63 or not LABEL_KEY_RE.match(key):
        raise SpecError(f"invalid {what} key {shown(key)}: use a name of 63 letters, digits, '-', '_' or '.' at "
                        f"most, alphanumeric at both ends, with an optional prefix and '/' (e.g. {example})")
    if not isinstance(value, str) or not LABEL_VALUE_RE.match(value):
        raise SpecError(f"invalid value {shown(value)} of {what} {_keys([key])}: use 63 letters, digits, '-', '_' "
                        f"or '.' at most, alphanumeric at both ends (quote it in YAML)")


# Node selection, as a pod's nodeSelector: every KEY=VALUE must be a label of the node. Run:AI's
# `--node-type T` is the node label run.ai/type=T (its "group nodes" guide: kubectl label node N run.ai/type=T).
NODE_TYPE_LABEL = "run.ai/type"
MAX_NODE_SELECTOR = 16  # terms of a node selector: a node has few labels, and each one narrows the nodes


def node_labels(labels, what: str = "node selector") -> dict[str, str]:
    """A node's labels, or a node_selector naming them: KEY -> value, each a Kubernetes label; unlike
    `labels`, any prefix (kubernetes.io/hostname, node.kubernetes.io/instance-type, run.ai/type)."""
    if not isinstance(labels, Mapping):
        raise SpecError(f"invalid {what} {shown(labels)}: must be a mapping of KEY: value, "
                        f"e.g. {{{NODE_TYPE_LABEL}: dgx-a100}}")
    if len(labels) > MAX_NODE_SELECTOR:
        raise SpecError(f"{what}: {len(labels)} labels, {MAX_NODE_SELECTOR} at most; keep the ones that tell "
                        f"the nodes apart")
    for key, value in dict(labels).items():
        _label(key, value, what, example=f"{NODE_TYPE_LABEL}, kubernetes.io/hostname")
    return dict(labels)


def parse_node_selector(items, node_type: str | None = None) -> dict[str, str]:
    """Repeated ``--node-selector KEY=VALUE`` (kubectl's nodeSelector) and Run:AI's ``--node-type T``
    (``run.ai/type=T``) as one mapping; the last value of a key wins. The rules are the spec's."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = _text(item, "--node-selector").partition("=")
        if not sep:
            raise SpecError(f"invalid --node-selector {shown(item)}: use KEY=VALUE, e.g. "
                            f"--node-selector kubernetes.io/hostname=gpu-node-1")
        out[key] = value
    if node_type is not None:
        given = out.get(NODE_TYPE_LABEL)
        if given is not None and given != node_type:
            raise SpecError(f"--node-type {node_type} is --node-selector {NODE_TYPE_LABEL}={node_type}, but "
                            f"--node-selector {NODE_TYPE_LABEL}={given} was given too: keep one")
        out[NODE_TYPE_LABEL] = _text(node_type, "--node-type")
    return out


# A pod's tolerations: a taint (`kubectl taint nodes N KEY[=VALUE]:EFFECT`, e.g. on GPU nodes) keeps
# every pod off its node but those that tolerate it. The rules are the API server's (ValidateTolerations).
TAINT_EFFECTS = ("NoSchedule", "PreferNoSchedule", "NoExecute")
TOLERATION_FIELDS = ("operator", "key", "value", "effect", "seconds")  # Run:AI's --toleration, in its order
MAX_TOLERATIONS = 16  # a node has few taints; as many as the terms of a node selector
MAX_TOLERATION_SECONDS = 365 * 24 * 3600  # a year; for ever is no `seconds` at all
TOLERATION_EXAMPLE = "--toleration operator=Exists,key=nvidia.com/gpu,effect=NoSchedule"


@dataclass(frozen=True, kw_only=True)
class Toleration:
    """A node taint the job's pods tolerate (a pod's `tolerations` entry; Run:AI's ``--toleration``)."""

    key: str = ""  # the taint's key; '' (with operator Exists): every taint
    operator: str = "Equal"  # Equal: the taint's value is `value`; Exists: any value (Kubernetes' default: Equal)
    value: str = ""  # the taint's value (Equal only)
    effect: str = ""  # NoSchedule, PreferNoSchedule or NoExecute; '': every effect
    seconds: int | None = None  # NoExecute only: how long a pod stays once its node is tainted; None: for ever

    def __post_init__(self):
        key, value = self.key, self.value
        if self.operator in ("Lt", "Gt"):  # KEP-5471; a cluster without the gate creates the job but not its pods
            raise SpecError(f"toleration operator {self.operator} (a numeric comparison) is alpha in Kubernetes 1.35 "
                            f"(feature gate TaintTolerationComparisonOperators, off by default), so it is not taken here:"
                            f" use operator=Equal with the taint's exact value, or operator=Exists")
        if self.operator not in ("Equal", "Exists"):
            raise SpecError(f"invalid toleration operator {shown(self.operator)}: use Equal (the taint's value is "
                            f"value=...) or Exists (any value)")
        if key != "":  # a taint's key and value follow the label rules (which refuse a number, a NUL)
            _label(key, value, "toleration", example="nvidia.com/gpu, dedicated")
        elif self.operator != "Exists":
            raise SpecError(f"a toleration without a key must have operator=Exists (it then tolerates every "
                            f"taint): give key=KEY, e.g. {TOLERATION_EXAMPLE}")
        if self.operator == "Exists" and value != "":
            raise SpecError(f"toleration {key or '(every key)'} has operator=Exists, which matches any value: "
                            f"drop value={shown(value)}, or use operator=Equal")
        if self.effect not in ("", *TAINT_EFFECTS):
            raise SpecError(f"invalid toleration effect {shown(self.effect)}: use {', '.join(TAINT_EFFECTS[:-1])} "
                            f"or {TAINT_EFFECTS[-1]} (or leave it out: every effect)")
        if self.seconds is not None:
            if isinstance(self.seconds, bool) or not isinstance(self.seconds, int) \
                    or not 0 <= self.seconds <= MAX_TOLERATION_SECONDS:
                raise SpecError(f"invalid toleration seconds {shown(self.seconds)}: use a whole number from 0 to "
                                f"{MAX_TOLERATION_SECONDS} (a year), or leave it out to tolerate the taint for ever")
            object.__setattr__(self, "seconds", int(self.seconds))  # as typed on the command line: a plain int
            if self.effect != "NoExecute":
                raise SpecError(f"toleration seconds={self.seconds} needs effect=NoExecute (only a NoExecute taint "
                                f"evicts a running pod): add effect=NoExecute, or drop seconds")

    def to_dict(self) -> dict[str, Any]:
        """The fields given (operator always), as a job file and the HTTP API write them."""
        d = {"key": self.key, "operator": self.operator, "value": self.value, "effect": self.effect,
             "seconds": self.seconds}
        return {k: v for k, v in d.items() if k == "operator" or v not in ("", None)}

    def to_flag(self) -> str:
        given = self.to_dict()
        return ",".join(f"{k}={given[k]}" for k in TOLERATION_FIELDS if k in given)


Toleration.__init__ = _volume_init(  # type: ignore[method-assign]  # a wrong field: a SpecError naming the one meant
    Toleration, "Toleration(key='nvidia.com/gpu', operator='Exists', effect='NoSchedule')")


def parse_toleration(text) -> Toleration:
    """``--toleration operator=Equal|Exists,key=KEY[,value=VALUE][,effect=EFFECT][,seconds=N]`` (Run:AI's
    flag; fields in any order, operator Equal where it is left out, as Kubernetes has it)."""
    text = _text(text, "--toleration")
    fields: dict[str, Any] = {}
    for part in text.split(","):
        name, sep, value = part.partition("=")
        name = name.strip()
        if not sep or name not in TOLERATION_FIELDS:
            raise SpecError(f"invalid --toleration {shown(text)}: {shown(part)} is not one of "
                            f"{', '.join(f + '=...' for f in TOLERATION_FIELDS)}; e.g. {TOLERATION_EXAMPLE}")
        if name in fields:
            raise SpecError(f"invalid --toleration {shown(text)}: {name}= is given twice; give it once")
        fields[name] = value.strip()
    if "seconds" in fields:
        fields["seconds"] = whole_number(fields["seconds"])
    return Toleration(**fields)


def check_tolerations(items) -> tuple[Toleration, ...]:
    """A job's tolerations: each a Toleration, a mapping of its fields (a job file, JSON) or a
    --toleration string; at most MAX_TOLERATIONS."""
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, (list, tuple)):
        raise SpecError(f"invalid tolerations {shown(items)}: must be a list, e.g. tolerations: "
                        f"[{{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}}]")
    if len(items) > MAX_TOLERATIONS:
        raise SpecError(f"{len(items)} tolerations: a job takes {MAX_TOLERATIONS} at most; tolerate a key's every "
                        f"value and effect with one (operator=Exists and no effect)")
    out = []
    for item in items:
        if isinstance(item, str):
            item = parse_toleration(item)
        elif isinstance(item, Mapping):
            if bad := sorted((k for k in item if k not in TOLERATION_FIELDS), key=str):
                near = "seconds" if str(bad[0]).lower().replace("_", "") == "tolerationseconds" else None
                hint = f" (did you mean '{near}'?)" if near else ""
                raise SpecError(f"unknown toleration field {_keys(bad)}{hint}: its fields are "
                                f"{', '.join(TOLERATION_FIELDS)}")
            item = Toleration(**item)
        elif not isinstance(item, Toleration):
            raise SpecError(f"invalid toleration {shown(item)}: give a mapping of {', '.join(TOLERATION_FIELDS)}, "
                            f"or a --toleration string")
        out.append(item)
    return tuple(out)


def parse_labels(items) -> dict[str, str]:
    """Repeated ``--label KEY=VALUE`` (Run:AI's flag) as a mapping; the last value of a key wins.
    The rules are the spec's (`labels`), checked when the spec is made."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = _text(item, "--label").partition("=")
        if not sep:
            raise SpecError(f"invalid --label {shown(item)}: use KEY=VALUE, e.g. --label team=vision")
        out[key] = value
    return out


MAX_SELECTOR = 1024  # characters of a label selector
# What parse_selector takes, as one regular expression (the HTTP schema's pattern: no lookahead)
_SEL_KEY = r"([a-z0-9]([-a-z0-9.]{0,251}[a-z0-9])?/)?" + _LABEL_PART
_SEL_TERM = rf" *(! *{_SEL_KEY}|{_SEL_KEY}( *(==|!=|=) *({_LABEL_PART})?)?) *"
SELECTOR_PATTERN = rf"^{_SEL_TERM}(,{_SEL_TERM})*$"


def parse_selector(text: str) -> tuple[tuple[str, str, str], ...]:
    """A label selector as kubectl's `-l` takes it, equality-based: comma-separated `KEY=VALUE` (or
    `==`), `KEY!=VALUE`, `KEY` (has the label) and `!KEY` (has not); all must hold. Each term is
    (key, op, value), op one of '=', '!=', 'exists', '!exists'."""
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_SELECTOR:
        raise SpecError(f"invalid label selector {shown(text)}: use KEY=VALUE, KEY!=VALUE, KEY or !KEY, "
                        f"comma-separated, at most {MAX_SELECTOR} characters (e.g. -l pipeline/run-name=nightly)")
    terms = []
    for raw in text.split(","):
        term = raw.strip()
        if "!=" in term:
            key, _, value = term.partition("!=")
            op = "!="
        elif "=" in term:
            key, _, value = term.partition("==") if "==" in term else term.partition("=")
            op = "="
        elif term.startswith("!"):
            key, op, value = term[1:], "!exists", ""
        else:
            key, op, value = term, "exists", ""
        key, value = key.strip(), value.strip()
        if not LABEL_KEY_RE.match(key) or not LABEL_VALUE_RE.match(value) or "=" in value:
            raise SpecError(f"invalid label selector term {shown(term)}: use KEY=VALUE, KEY!=VALUE, KEY or !KEY "
                            f"with label keys and values (e.g. -l team=vision,pipeline/runid)")
        terms.append((key, op, value))
    return tuple(terms)


def selects(terms: tuple[tuple[str, str, str], ...], labels: Mapping[str, str]) -> bool:
    """Whether `labels` satisfy every term of a parsed selector (`parse_selector`)."""
    for key, op, value in terms:
        if op == "=" and labels.get(key) != value:
            return False
        if op == "!=" and labels.get(key) == value:  # kubectl: a job without the label matches KEY!=VALUE
            return False
        if op == "exists" and key not in labels:
            return False
        if op == "!exists" and key in labels:
            return False
    return True


def sagemaker_backend(data: dict) -> None:
    """SageMaker options say where a job runs: a job mapping (flags, a job file, an HTTP body) that
    has them and names no backend gets backend sagemaker; one that names another is refused."""
    if data.get("sagemaker") is None:
        return
    if data.get("backend") is not None and data["backend"] != "sagemaker":
        options = data["sagemaker"]
        raise SpecError(_elsewhere(data["backend"], options if isinstance(options, Mapping) else {}))
    data["backend"] = "sagemaker"


def _elsewhere(backend, options: Mapping) -> str:
    given = ", ".join(sorted(k for k, v in options.items() if v not in (None, False, (), [], {})))
    return (f"SageMaker options{f' ({given})' if given else ''} need backend sagemaker, not {shown(backend)}: "
            f"use --backend sagemaker (backend: sagemaker), or leave them out")


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
    # labels on the job's objects (Kubernetes labels, SageMaker tags), e.g. the pipeline run that made it
    labels: Mapping[str, str] = field(default_factory=dict)
    # labels a node must have to run the job (a pod's nodeSelector; Run:AI's --node-type is run.ai/type)
    node_selector: Mapping[str, str] = field(default_factory=dict)
    # node taints the job's pods tolerate (a pod's tolerations; Run:AI's --toleration): Kubernetes only
    tolerations: tuple[Toleration, ...] = ()
    volumes: tuple[Volume, ...] = ()  # --pvc mounts, in flag order
    large_shm: bool = False  # a large in-memory /dev/shm
    working_dir: str | None = None  # working directory of the command
    # project: quota and FIFO queue (namespace on Kubernetes); None (unset): the configured default
    # project where a Client submits it (`dtrain config project`), 'default' elsewhere
    project: str = None  # type: ignore[assignment]  # a str once built
    # 'local', 'kubernetes' or 'sagemaker'; None (unset): the Client's backend (Client(backend=...)) or
    # the project's configured one where a Client submits it, 'local' elsewhere
    backend: str = None  # type: ignore[assignment]  # a str once built
    max_restarts: int = 0  # restarts of the whole job after a failure
    snapshot_on_success: str | None = None  # volume to snapshot when the job succeeds
    image: str | None = None  # container image (Kubernetes)
    image_pull_policy: str | None = None  # Always, IfNotPresent or Never (Kubernetes)
    image_pull_secrets: tuple[str, ...] = ()  # secret names (Kubernetes)
    notebook: bool = False  # an interactive Jupyter server (dtrain notebook): runs until deleted
    # notebook only: seconds without kernel or terminal activity (requests do not count) after which
    # the supervisor suspends the notebook, freeing its GPUs (`dtrain resume` starts it again); None: never
    idle_timeout: int | None = None
    sagemaker: SageMakerOptions | None = None  # instances, channels, spot, limits (SageMaker)

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731  normalise containers
        # Which of project and backend were left unset: a Client fills them in from its config, as
        # `dtrain submit` and the HTTP API do (Client.submit), and `replace` keeps them unset.
        set_("_unset", frozenset(k for k in ("project", "backend") if getattr(self, k) is None))
        if self.project is None:
            set_("project", "default")
        if self.backend is None:
            set_("backend", "local")
        check_name(self.name, "job")
        check_name(self.project, "project")
        if isinstance(self.command, (str, bytes)) and self.command:  # a shell line: which words are which?
            raise SpecError(f"invalid command {shown(self.command)} of job {self.name!r}: must be a list of "
                            f"strings, one per word, e.g. command=['python', 'train.py', '--epochs', '2']")
        if isinstance(self.command, (str, bytes)) or not isinstance(self.command, (list, tuple)) or not self.command:
            raise SpecError(f"job {self.name!r} has no command (a list of strings): put it after '--', "
                            f"e.g. dtrain submit {self.name} -- python train.py")
        set_("command", tuple(_text(c, "command word", fix=" (quote it in YAML)") for c in self.command))
        set_("env", _env(self.env))
        set_("labels", _labels(self.labels))
        set_("node_selector", node_labels(self.node_selector))
        set_("tolerations", check_tolerations(self.tolerations))
        if not _STORED.get():
            self._check_snapshot_env()
        used = sum(_bytes(w) + 1 for w in self.command) + sum(_bytes(k) + _bytes(v) + 2 for k, v in self.env.items())
        if used > MAX_ARGS_ENV and not _STORED.get():
            raise SpecError(f"the command and environment of job {self.name!r} take {used} bytes, more than the 1 MiB "
                            f"a job may pass to its processes (the system refuses to start one past about 2 MiB): "
                            f"put large values in a file, on a volume, and pass its path")
        set_("volumes", _volumes(self.volumes))
        if isinstance(self.image_pull_secrets, str) or not isinstance(self.image_pull_secrets, (list, tuple)):
            raise SpecError(f"invalid image_pull_secrets {shown(self.image_pull_secrets)}: must be a list of names")
        set_("image_pull_secrets", tuple(check_name(x, "image pull secret") for x in self.image_pull_secrets))
        if isinstance(self.sagemaker, Mapping):
            set_("sagemaker", SageMakerOptions.from_dict(check_sagemaker_mapping(self.sagemaker)))
        elif self.sagemaker is not None and not isinstance(self.sagemaker, SageMakerOptions):
            raise SpecError(f"invalid sagemaker {shown(self.sagemaker)}: must be a mapping of SageMaker options "
                            f"(or SageMakerOptions), e.g. sagemaker: {{instance_type: ml.m5.xlarge, spot: true}}")
        for key in WHOLE_FIELDS:  # a job file's or a JSON body's 2.0 and 1e3 are 2 and 1000, as --processes 2.0
            set_(key, whole(getattr(self, key)))
        _check_int(self.processes, "--processes", 1, MAX_PROCESSES)
        _check_gpu(self.gpu)
        _check_int(self.max_restarts, "--max-restarts", 0, MAX_RESTARTS)
        _bool(self.large_shm, "large_shm")
        _bool(self.notebook, "notebook")
        if self.launcher not in LAUNCHERS:
            raise SpecError(f"unknown launcher {shown(self.launcher)}: use torchrun or mpi")
        if self.processes > 1 and self.launcher == "none":
            raise SpecError(f"--processes {shown(self.processes)} needs a launcher: use dtrain submit-dist "
                            f"--launcher torchrun or dtrain submit-mpi")
        if type(self.cpu) is float and self.cpu.is_integer() and abs(self.cpu) <= 2 ** 53:
            set_("cpu", int(self.cpu))  # 2, however it came (JSON's 2.0, the SDK's float): as typed
        if self.cpu is not None and (isinstance(self.cpu, bool) or not isinstance(self.cpu, (int, float))
                                     or not exact(0 if _STORED.get() else MIN_CPU) <= exact(self.cpu) <= MAX_CPU
                                     or self.cpu == 0):  # as typed: 1024.0000000000001 is over; NaN compares false
            raise SpecError(f"invalid --cpu {shown(self.cpu)}: use a number of CPU threads from {MIN_CPU} to "
                            f"{MAX_CPU}, e.g. --cpu 2 or --cpu 0.5")
        if self.memory is not None:
            parse_least_size(_text(self.memory, "--memory", fix=" such as 512Mi"), "--memory",
                             minimum=1 if _STORED.get() else MIN_MEMORY, example=MEMORY_EXAMPLE)
        self._check_texts()
        self._check_volumes()
        # as typed for a refusal made once the spec is built (a backend's: `typed`), where the stored spec is plain
        set_("_typed", {k: getattr(self, k) for k in NUMBER_FIELDS if isinstance(getattr(self, k), Typed)})
        for key in NUMBER_FIELDS:  # checked as written (a refusal quotes '1e9', not 1000000000); stored plain
            set_(key, plain(getattr(self, key)))
        if isinstance(self.cpu, float) and self.cpu.is_integer():
            set_("cpu", int(self.cpu))  # a flag's or a job file's 2.0, as the SDK's and JSON's above

    def _check_texts(self):
        if self.working_dir is not None:
            _text(self.working_dir, "--working-dir")
            if not self.working_dir.startswith("/"):
                raise SpecError(f"invalid --working-dir {shown(self.working_dir)}: use an absolute path")
        if not NAME_RE.fullmatch(_text(self.backend, "backend", fix=" such as local or kubernetes")):
            raise SpecError(f"invalid backend {shown(self.backend)}: use local, kubernetes or sagemaker")
        if self.sagemaker is not None and self.backend != "sagemaker" and not _STORED.get():
            raise SpecError(_elsewhere(self.backend, self.sagemaker.to_dict()))
        if self.image is not None:
            check_image(_text(self.image, "--image"), "--image", required=True)
        if self.image_pull_policy not in (None, "Always", "IfNotPresent", "Never"):
            raise SpecError(f"invalid --image-pull-policy {shown(self.image_pull_policy)}: "
                            f"use Always, IfNotPresent or Never")
        if self.notebook and (self.launcher != "none" or self.max_restarts or self.snapshot_volume):
            raise SpecError(f"notebook {self.name!r} is one interactive process: drop --processes, "
                            f"--launcher, --max-restarts and --snapshot-on-success")
        if self.idle_timeout is not None:
            check_idle_timeout(self.idle_timeout)
            if not self.notebook:
                raise SpecError(f"job {self.name!r}: --idle-timeout stops an idle notebook; a training job ends "
                                "by itself: drop it (or start a notebook: dtrain notebook NAME --idle-timeout 1h)")

    def _check_snapshot_env(self):
        """The seed's ENABLE_SNAPSHOT is a request to the platform: one it cannot read, or one naming
        no volume, took no snapshot and said nothing (the lanes workload then failed on a typo)."""
        value = self.env.get(SNAPSHOT_ENV)
        if value is None:
            return
        if value.strip().lower() not in TRUE_WORDS + FALSE_WORDS:
            raise SpecError(f"invalid -e {SNAPSHOT_ENV}={shown(value)}: use true or false (with -e "
                            f"{SNAPSHOT_VOLUME_ENV}=VOLUME, the volume snapshotted when the job succeeds)")
        if (value.strip().lower() in TRUE_WORDS and not self.env.get(SNAPSHOT_VOLUME_ENV)
                and not self.snapshot_on_success):
            raise SpecError(f"-e {SNAPSHOT_ENV}={value} names no volume to snapshot: add -e "
                            f"{SNAPSHOT_VOLUME_ENV}=VOLUME (or give --snapshot-on-success VOLUME)")

    def _check_volumes(self):
        mounts = [v.mount_path for v in self.volumes]  # normalised by VolumeMount / NewVolume
        for v in self.volumes:
            if mounts.count(v.mount_path) > 1:
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
        if str(self.env.get(SNAPSHOT_ENV, "")).strip().lower() in TRUE_WORDS and self.env.get(SNAPSHOT_VOLUME_ENV):
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

    def typed(self, key: str):
        """Number field `key` as the user typed it where that differs from how Python writes it (a
        flag's `--processes 1E3`, a job file's 2.0: a Typed number, which `shown` quotes so), else its
        value. A refusal made once the spec is built (a backend's) names it so; what stores or sends
        the number takes the field itself, which is plain. A spec read back has no text to give."""
        return self._typed.get(key, getattr(self, key))

    def replace(self, **changes) -> "JobSpec":
        """A copy with `changes`; project and backend left unset stay unset unless changed, and the
        numbers left as they were keep what was typed (`typed`)."""
        new = dataclasses.replace(self, **{**dict.fromkeys(self._unset - set(changes)), **changes})
        object.__setattr__(new, "_typed", {**{k: v for k, v in self._typed.items() if k not in changes}, **new._typed})
        return new

    # ---- wire form ----
    def to_dict(self) -> dict[str, Any]:
        """A JSON/YAML-ready dict; ``JobSpec.from_dict(spec.to_dict()) == spec``. A project or
        backend left unset is left out, so that the spec read back leaves it unset too, and a Client
        (or `dtrain submit -f`) fills in the configured one, as it would have for `spec`."""
        d = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name not in self._unset}
        d["command"] = list(self.command)
        d["env"] = dict(self.env)
        d["labels"] = dict(self.labels)
        d["node_selector"] = dict(self.node_selector)
        d["tolerations"] = [t.to_dict() for t in self.tolerations]
        d["volumes"] = [v.to_flag() for v in self.volumes]
        d["image_pull_secrets"] = list(self.image_pull_secrets)
        d["sagemaker"] = None if self.sagemaker is None else self.sagemaker.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "JobSpec":
        """Build from a YAML/JSON mapping. ``pvc`` is accepted as an alias of ``volumes``.

        Types are checked, never coerced: a string is not a boolean, a number is not a list.
        """
        data = {k: _number_word(k, v) for k, v in cls.check_fields(data).items()}
        for key in ("project", "backend"):  # None builds a spec that leaves them unset: a file names one
            if key in data and data[key] is None:
                raise SpecError(f"invalid {key} None: give a {key} name, or leave '{key}:' out")
        vols = [*_list(data.pop("pvc", None), "pvc"), *_list(data.get("volumes"), "volumes")]
        for required in ("name", "command"):
            if data.get(required) in (None, "", [], ()):
                raise SpecError(f"the job has no {required}: use dtrain submit NAME [options] -- COMMAND, "
                                f"or set '{required}:' in the job file")
        if not isinstance(data["command"], (list, tuple)):
            raise SpecError(f"invalid command {shown(data['command'])}: must be a list of strings, "
                            f"e.g. [python, train.py, --epochs, '2']")
        data["command"] = tuple(_word(c, "command") for c in data["command"])
        data["volumes"] = tuple(parse_pvc(v) if isinstance(v, str) else _volume_from_dict(v) for v in vols)
        for key in ("env", "labels", "node_selector", "tolerations", "image_pull_secrets"):  # `env:` left empty: none
            if key in data and data[key] is None:
                del data[key]
        if "env" in data:
            if not isinstance(data["env"], Mapping):
                raise SpecError(f"invalid env {shown(data['env'])}: must be a mapping of NAME: value, "
                                f"e.g. env: {{SEED: '1'}}")
            data["env"] = {k: _word(v, f"env {_keys([k])}") for k, v in data["env"].items()}
        if "image_pull_secrets" in data:
            data["image_pull_secrets"] = tuple(_list(data["image_pull_secrets"], "image_pull_secrets",
                                                     example="[regcred]"))
        if isinstance(data.get("sagemaker"), Mapping):  # its hyperparameters keep their JSON types
            data["sagemaker"] = check_sagemaker_mapping(data["sagemaker"])
        # numbers reach their checks as written (a refusal quotes them so); `sagemaker` was made plain but for its
        # own, and a Toleration makes its seconds plain itself
        return cls(**{k: v if k in (*NUMBER_FIELDS, "sagemaker", "tolerations") else plain_numbers(v)
                      for k, v in data.items()})

    @classmethod
    def from_stored(cls, data: Mapping[str, Any]) -> "JobSpec":
        """A spec read back from a backend's record (the job table, an annotation, S3): as
        from_dict, except for the rules made stricter since it may have been stored (_STORED)."""
        token = _STORED.set(True)
        try:
            return cls.from_dict(data)
        finally:
            _STORED.reset(token)

    @classmethod
    def check_fields(cls, data: Mapping[str, Any]) -> Mapping[str, Any]:
        """`data` if it is a mapping whose keys are all job fields (``pvc`` too), else the SpecError
        naming the first wrong one: what a job file gets wrong first, before any value is read.
        A job record as `dtrain describe job NAME --json` prints it (JobInfo.to_dict: the spec under
        'spec', beside its status) gives its spec, so that it can be submitted again, as
        `kubectl get -o yaml` output can be applied again."""
        if not isinstance(data, Mapping):
            raise SpecError("a job file must hold a mapping of fields, e.g. 'name: train' and 'command: [...]'")
        if isinstance(data.get("spec"), Mapping) and "status" in data and "command" not in data:
            data = data["spec"]
        known = {f.name for f in dataclasses.fields(cls)}
        bad_key = next((k for k in data if not isinstance(k, str)), None)
        if bad_key is not None:
            raise SpecError(f"invalid job field name {shown(bad_key)}: field names are words such as name or command")
        unknown = sorted(set(data) - known - {"pvc"})
        if unknown:
            raise SpecError(f"unknown job field(s) {_keys(unknown)}{_did_you_mean(unknown[0], known)}: known "
                            f"fields are {', '.join(sorted(known | {'pvc'}))}")
        return data


# What a Kubeflow, Run:AI or SageMaker user writes for a job field (a PyTorchJob's replicas, a
# SageMaker estimator's instance_count, a pod's args and workingDir): the field it is here.
FIELD_ALIASES = {"gpus": "gpu", "replicas": "processes", "workers": "processes", "nproc": "processes",
                 "nproc_per_node": "processes", "instance_count": "processes (or sagemaker.instance_count)",
                 "args": "command", "cmd": "command", "entrypoint": "command", "environment": "env",
                 "envs": "env", "pvcs": "volumes", "namespace": "project", "workdir": "working_dir",
                 "workingdir": "working_dir", "cpus": "cpu", "mem": "memory", "backoff_limit": "max_restarts",
                 "backofflimit": "max_restarts", "instance_type": "sagemaker.instance_type",
                 "nodeselector": "node_selector", "nodetype": "node_selector"}


def _number_word(key: str, value):
    """A job file's field with its unquoted 1e3s (NumberWord) read as the flags read them: a number
    where the field (a toleration's seconds too) takes one, the string as typed anywhere else."""
    if isinstance(value, NumberWord) and key in NUMBER_FIELDS:
        return (whole_number if key in WHOLE_FIELDS else real_number)(str(value))  # --processes', --cpu's rule
    if key == "tolerations" and isinstance(value, (list, tuple)):  # parse_toleration's seconds=1e3
        value = [{k: whole_number(str(v)) if k == "seconds" and isinstance(v, NumberWord) else v for k, v in t.items()}
                 if isinstance(t, Mapping) else t for t in value]
    return value if key == "sagemaker" else _words(value)  # check_sagemaker_mapping reads its own


def _words(value):
    """`value` with each NumberWord (a key too) the plain string it is, through mappings and lists."""
    if isinstance(value, Mapping):
        return {_words(k): _words(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_words(v) for v in value] if isinstance(value, list) else tuple(_words(v) for v in value)
    return str(value) if isinstance(value, NumberWord) else value


def _did_you_mean(key, known) -> str:
    """' (did you mean 'gpu'?)' for a field name a user wrote for one of `known`, or ''."""
    import difflib

    if not isinstance(key, str):
        return ""
    folded = key.lower().replace("-", "_")
    near = FIELD_ALIASES.get(folded.replace("_", "")) or FIELD_ALIASES.get(folded)
    if near is None:
        near = next(iter(difflib.get_close_matches(folded, sorted(known), n=1)), None)
    return f" (did you mean '{near}'?)" if near else ""


def _checked_init(init):
    """JobSpec's __init__ behind a check of its arguments: a field it lacks (`gpus=2`), a value given
    by position or a missing name or command is the SpecError every other bad value is, naming the
    field meant, not a TypeError from the generated __init__."""
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if args:
            raise SpecError(f"JobSpec takes its fields by name, not {len(args)} value(s) by position: "
                            f"JobSpec(name='train', command=['python', 'train.py'], ...)")
        known = {f.name for f in dataclasses.fields(JobSpec)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise SpecError(f"JobSpec got unknown field(s) {_keys(unknown)}{_did_you_mean(unknown[0], known)}: "
                            f"its fields are {', '.join(sorted(known))}")
        for required in ("name", "command"):
            if required not in kwargs:
                raise SpecError(f"JobSpec needs {required}=...: JobSpec(name='train', command=['python', "
                                f"'train.py'], ...)")
        init(self, **kwargs)
    return __init__


JobSpec.__init__ = _checked_init(JobSpec.__init__)  # type: ignore[method-assign]


def _keys(keys: list) -> str:
    """Mapping keys for a message: short words as they are, anything else as shown(); five at most."""
    words = [k if isinstance(k, str) and len(k) <= 40 and k.isprintable() else shown(k) for k in keys[:5]]
    return ", ".join(words) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")


def check_sagemaker_mapping(data: Mapping[str, Any]) -> Mapping[str, Any]:
    """`sagemaker:` as YAML or JSON gives it: names as keys, `channels` a list and `hyperparameters`
    a mapping (SageMakerOptions would stop on anything else with a TypeError)."""
    bad_key = next((k for k in data if not isinstance(k, str)), None)
    if bad_key is not None:
        raise SpecError(f"invalid sagemaker field name {shown(bad_key)}: field names are words such as "
                        f"instance_type or spot")
    channels, hps = data.get("channels"), data.get("hyperparameters")
    if channels is not None and (isinstance(channels, str) or not isinstance(channels, (list, tuple))):
        raise SpecError(f"invalid sagemaker channels {shown(channels)}: must be a list of NAME=URI, "
                        f"e.g. channels: [training=s3://bucket/cifar10]")
    if hps is not None and not isinstance(hps, Mapping):
        raise SpecError(f"invalid sagemaker hyperparameters {shown(hps)}: must be a mapping of name: value, "
                        f"e.g. hyperparameters: {{epochs: 2}}")
    out = {k: (whole_number(str(v)) if isinstance(v, NumberWord) else v) if k in SAGEMAKER_NUMBERS  # --max-wait 36e2's rule
           else plain_numbers(v) for k, v in data.items() if not (k in ("channels", "hyperparameters") and v is None)}
    if hps is not None:  # values keep the type YAML or JSON gave them (`epochs: 2` an int, `amp: true` a
        # bool), as the SageMaker SDK's dict keeps it; SageMakerOptions refuses what JSON cannot carry
        out["hyperparameters"] = {plain_numbers(k): plain_numbers(v) for k, v in hps.items()}
    return out


def _list(value, what: str, *, example: str = "[data:/mnt]") -> list:
    if value is None:
        return []
    if not isinstance(value, (list, tuple)):
        raise SpecError(f"invalid {what} {shown(value)}: must be a list, e.g. {what}: {example}")
    return list(value)


def _word(value, what: str) -> str:
    """A YAML scalar meant as a string: numbers are written as given (a job file's `0.10` stays
    '0.10', not '0.1'), booleans and nulls refused (YAML reads `yes` as true: quote it)."""
    if isinstance(value, bool) or value is None or not isinstance(value, (str, int, float)):
        raise SpecError(f"invalid {what} value {shown(value)}: must be a string (quote it in YAML, e.g. 'yes')")
    if isinstance(value, Typed):
        return value.text
    return value if isinstance(value, str) else str(value)


_VOLUME_KEYS = {VolumeMount: {"volume", "mount_path", "read_only"},
                NewVolume: {"storage_class", "size", "mount_path"}}


def _volume_from_dict(d: Mapping[str, Any]) -> Volume:
    kind = None
    if isinstance(d, Mapping):
        kind = VolumeMount if "volume" in d else NewVolume if "storage_class" in d else None
    if kind is None:
        raise SpecError(f"invalid volume entry {shown(d)}: use 'NAME:MOUNT[:ro]', 'CLASS:SIZE:MOUNT', "
                        f"{{volume, mount_path, read_only}} or {{storage_class, size, mount_path}}")
    extra = set(d) - _VOLUME_KEYS[kind]
    unknown = sorted(k for k in extra if isinstance(k, str)) + [k for k in extra if not isinstance(k, str)]
    missing = sorted(k for k in _VOLUME_KEYS[kind] - set(d) if k != "read_only")
    if unknown or missing:
        raise SpecError(f"invalid volume entry {shown(dict(d))}: " + (f"unknown key(s) {_keys(unknown)}" if unknown
                        else f"missing {', '.join(missing)}") + f"; its keys are {', '.join(sorted(_VOLUME_KEYS[kind]))}")
    return kind(**d)


def _volumes(value) -> tuple[Volume, ...]:
    """The SDK's volumes: VolumeMount / NewVolume objects, or --pvc strings."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise SpecError(f"invalid volumes {shown(value)}: must be a list, e.g. volumes=['data:/mnt'] or "
                        f"[VolumeMount(volume='data', mount_path='/mnt')]")
    out = []
    for v in value:
        if isinstance(v, str):
            v = parse_pvc(v)
        if not isinstance(v, (VolumeMount, NewVolume)):
            raise SpecError(f"invalid volume {shown(v)}: use VolumeMount, NewVolume or a --pvc string "
                            f"such as 'data:/mnt'")
        out.append(v)
    return tuple(out)


def _check_gpu(value) -> None:
    """--gpu: whole GPUs per process. Run:AI also takes a fraction of one (--gpu 0.5), which is not
    shared out here: named as such wherever it comes from (a flag, a job file, the SDK, the HTTP API)."""
    if (isinstance(value, float) and math.isfinite(value) and 0 < value < MAX_GPU_PER_PROCESS
            and exact(value).denominator != 1):  # as typed: 1.0000000000000001 is a fraction though float() says 1.0
        raise SpecError(f"--gpu {shown(value)} is a fraction of a GPU, and GPUs are not shared between jobs here: "
                        f"give whole GPUs per process (--gpu 1), or leave --gpu out to run on CPUs")
    _check_int(value, "--gpu", 0, MAX_GPU_PER_PROCESS)


_EXAMPLES = {"--processes": 4, "--gpu": 1, "--max-restarts": 3}


def _check_int(value, flag: str, minimum: int, maximum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= maximum:
        raise SpecError(f"invalid {flag} {shown(value)}: use a whole number from {minimum} to {maximum}, "
                        f"e.g. {flag} {_EXAMPLES[flag]}")


MAX_YAML_BYTES = 1 << 20  # a job file or config.yaml is a few hundred bytes; refuse a stray big file
# What a YAML file may hold once its aliases (*name) are expanded, counted as the characters of
# its strings plus one per other value: a file without aliases stays below its own size, while
# nine aliases of nine aliases of ... (a "billion laughs") would hold gigabytes.
MAX_YAML_EXPANDED = 2 * MAX_YAML_BYTES


@functools.lru_cache(maxsize=1)
def _loader():
    """PyYAML's safe loader, except that a mapping may not give a key twice (PyYAML keeps the last
    silently: a second `gpu:` would win unseen; YAML 1.2 requires unique keys) and that a number
    keeps the text it was written as where Python would write it back otherwise."""
    import yaml

    class Loader(yaml.SafeLoader):
        def construct_mapping(self, node, deep=False):
            if isinstance(node, yaml.MappingNode):
                seen: dict = {}
                for key_node, _ in node.value:
                    if key_node.tag == "tag:yaml.org,2002:merge":  # `<<: *base` then own keys: a merge overrides
                        continue
                    key = self.construct_object(key_node, deep=True)
                    try:
                        first = seen.setdefault(key, key_node)
                    except TypeError:  # unhashable: the base class names it
                        continue
                    if first is not key_node:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"the key {cut(shown(key), 60)} is given twice (keep one): at line "
                            f"{first.start_mark.line + 1} and", key_node.start_mark)
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node):
            value = super().construct_yaml_int(node)
            # str() refuses past 4300 digits, which a hex number reaches in a few kilobytes
            as_python = value.bit_length() <= 4096 and str(value) == node.value
            return value if as_python else WrittenInt(value, node.value)

        def construct_yaml_float(self, node):
            value = super().construct_yaml_float(node)
            return value if str(value) == node.value else WrittenFloat(value, node.value)

        def construct_yaml_str(self, node):
            # JSON writes a character past U+FFFF as two escapes ("\ud83c\udf89", as `describe --json`
            # prints an emoji); YAML, a superset of JSON, means the one character, but PyYAML keeps
            # two lone surrogates, which the spec then refused as "not valid UTF-8 text".
            value = super().construct_yaml_str(node)
            if node.style is None and NUMBER_WORD_RE.fullmatch(value):  # unquoted 1e3: a number to YAML 1.2
                return NumberWord(value)
            if any("\ud800" <= c <= "\udfff" for c in value):
                try:
                    value = value.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
                except UnicodeDecodeError:  # a lone one stays, and is refused where the value is read
                    pass
            return value

    Loader.add_constructor("tag:yaml.org,2002:int", Loader.construct_yaml_int)
    Loader.add_constructor("tag:yaml.org,2002:float", Loader.construct_yaml_float)
    Loader.add_constructor("tag:yaml.org,2002:str", Loader.construct_yaml_str)
    return Loader


_YAML11_FORMS = {"hexadecimal": "hexadecimal number (base 16)", "binary": "binary number (base 2)",
                 "octal": "octal number (a leading zero: base 8)", "sexagesimal": "sexagesimal number (base 60)",
                 "with _": "number with '_' between digits"}


def check_yaml_numbers(value: Any, source: str, key: str = "", leaf: str = "", *, fix_as: str = "{}: {}") -> None:
    """Every number in `value` (a YAML file's mapping, or its part at `key`) written in decimal:
    YAML 1.1's other forms (numbers.yaml11_form: 0x7000, 017, 0b1, 1:30, 1_000), which PyYAML takes and
    YAML 1.2 does not (it reads 017 as 17, has no 0b1 nor 1:30), are one SpecError line naming the
    key and the decimal. Only where a number is meant: command and env keep such text as typed."""
    if isinstance(value, Mapping):
        for k, v in value.items():
            check_yaml_numbers(v, source, f"{key}.{k}" if key else str(k), str(k), fix_as=fix_as)
    elif isinstance(value, list):
        for i, v in enumerate(value):
            check_yaml_numbers(v, source, f"{key}[{i}]", leaf, fix_as=fix_as)
    elif (form := yaml11_form(value)) is not None:
        decimal, leaf = plain(value), cut(leaf, 60)
        fix = f"write {fix_as.format(leaf, decimal)}"
        if form == "octal":  # YAML 1.2 reads 017 as 17: which one was meant is not known
            fix = (f"write {fix_as.format(leaf, int(value.text.replace('_', ''), 10))} (without the leading zero), "
                   f"or {decimal} for the octal")
        raise SpecError(f"{source}: {cut(key, 80)}: {cut(value.text, 40)} is a YAML 1.1 {_YAML11_FORMS[form]}, read "
                        f"as {decimal}; numbers are taken in decimal digits only: {fix}")


def yaml_value(text: str, key: str, source: str, *, fix_as: str = "{}: {}") -> Any:
    """One value as a YAML file's `KEY: TEXT` reads it (a number, true, [a, b], None for nothing), checked
    as yaml_mapping and check_yaml_numbers check a file's; numbers plain. `source` names it in a refusal,
    `fix_as` how a key and its value are written there ('--set {}={}')."""
    if "\n" in text or "\r" in text:
        raise SpecError(f"{source}: give the value on one line (a list as [a, b])")
    data = yaml_mapping(f"{key}: {text}".encode(), source, f"{key}: VALUE")
    if list(data) != [key]:  # `x=1, y: 2` written in one value
        raise SpecError(f"{source}: {cut(shown(text), 60)} is not one value: quote it, e.g. {key}='\"...\"'")
    check_yaml_numbers(data, source, fix_as=fix_as)
    return plain_numbers(data[key])


def yaml_mapping(data: bytes, source: str, example: str) -> dict:
    """The top-level mapping of a YAML file's bytes; any problem is one SpecError line naming `source`.
    A number written otherwise than Python writes it (0.10, 017) is a WrittenInt or WrittenFloat:
    JobSpec.from_dict keeps its text where a field takes a string."""
    import yaml  # only the YAML doors need it

    if len(data) > MAX_YAML_BYTES:
        raise SpecError(f"{source} is larger than {MAX_YAML_BYTES} bytes, not a YAML file of a few fields; "
                        f"check the path")
    try:
        text = data.decode("utf-8")
        if "\0" in text:
            raise UnicodeDecodeError("utf-8", data, data.index(b"\0"), data.index(b"\0") + 1, "NUL byte")
    except UnicodeDecodeError as err:
        raise SpecError(f"{source} is not a text file (byte {err.start} is not UTF-8 text): give a YAML "
                        f"file such as '{example}'") from None
    try:
        loaded = yaml.load(text, Loader=_loader())  # noqa: S506 (a SafeLoader)
    except yaml.MarkedYAMLError as err:
        mark = err.problem_mark or err.context_mark
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        raise SpecError(f"{source} is not valid YAML: {cut(err.problem or err.context)}{where}") from None
    except yaml.YAMLError as err:
        raise SpecError(f"{source} is not valid YAML: {cut(str(err).splitlines()[0])}") from None
    except RecursionError:
        raise SpecError(f"{source} nests its values too deeply to read: a job file is a few flat fields "
                        f"such as '{example}'") from None
    except (ValueError, TypeError, OverflowError) as err:  # YAML's own types refuse it: 2024-13-45, 5000 digits
        raise SpecError(f"{source} holds a value YAML cannot read ({cut(str(err))}): quote it "
                        f"to make it a string") from None
    if loaded is None:
        return {}
    if not isinstance(loaded, dict):
        raise SpecError(f"{source} must hold a mapping of fields such as '{example}', not a {type(loaded).__name__}")
    sizes: dict[int, int] = {}
    for key in loaded:  # field by field, to name the one that contains itself
        if _expanded_size(loaded[key], sizes) is None:
            raise SpecError(f"{source}: the value of {_keys([key])} contains itself (a YAML alias *name inside "
                            f"its own &name): write the value out")
    if _expanded_size(loaded, sizes) > MAX_YAML_EXPANDED:
        raise SpecError(f"{source} holds more than {MAX_YAML_EXPANDED} characters of values once its aliases "
                        f"(*name) are expanded: write the values out instead of repeating aliases")
    return loaded


def _expanded_size(root, sizes: dict[int, int]) -> int | None:
    """The size of what YAML loaded with its aliases expanded (strings: their length, any other
    value: 1), or None when a list or mapping contains itself. A shared value (an alias) is sized
    once (`sizes`: id of a sized list or mapping -> its size, kept across calls), so this takes
    the time of the file, not of the expansion."""
    if not isinstance(root, (dict, list, set)):
        return _scalar_size(root)
    open_: set[int] = set()  # the lists and mappings around the one being sized
    stack: list[tuple[Any, bool]] = [(root, False)]
    while stack:
        node, done = stack.pop()
        items = [*node.keys(), *node.values()] if isinstance(node, dict) else node
        if done:
            open_.discard(id(node))
            sizes[id(node)] = 1 + sum(sizes[id(x)] if id(x) in sizes else _scalar_size(x) for x in items)
        elif id(node) in open_:
            return None
        elif id(node) not in sizes:
            open_.add(id(node))
            stack.append((node, True))
            stack.extend((x, False) for x in items if isinstance(x, (dict, list, set)))
    return sizes[id(root)]


def _scalar_size(value) -> int:
    return len(value) if isinstance(value, str) else 1


# JupyterLab (its server, jupyter-server, with the Lab front end; Python kernels from ipykernel), as
# Kubeflow's jupyter notebook images run it: `pip install 'dtrain[notebook]'`.
NOTEBOOK_SERVER = ("jupyter-lab", "--ServerApp.ip=127.0.0.1", "--ServerApp.open_browser=False",
                   "--ServerApp.allow_root=True",  # port and token come from the launcher, per run
                   # saves replace files, never write through a link (dtrain/backends/local/notebook.py)
                   "--ServerApp.contents_manager_class=dtrain.backends.local.notebook.VolumeContentsManager")


def notebook_spec(name: str, *, volumes=(), **fields: Any) -> JobSpec:
    """`dtrain notebook NAME --pvc VOLUME:/home/jovyan`: a one-process job running Jupyter, rooted
    at the first volume's mount path (Kubeflow mounts a notebook's workspace volume at its image's
    home, /home/jovyan)."""
    check_name(name, "notebook")  # its own word in the message; the job's rule
    volumes = _volumes(volumes)  # a list; 'data:/mnt' alone would be read a character at a time
    root = (f"--ServerApp.root_dir={volumes[0].mount_path}",) if volumes else ()
    if volumes:  # the server and its terminals work in the workspace volume, as a Kubeflow notebook's
        fields.setdefault("working_dir", volumes[0].mount_path)
    return JobSpec(name=name, command=NOTEBOOK_SERVER + root, volumes=volumes, notebook=True, **fields)


# The HOME a notebook's own HOME (its workspace) replaced: what the jobs started from its terminal get back.
OUTER_HOME = "DTRAIN_OUTER_HOME"
# The notebook's own HOME, as its terminal starts: a HOME other than it there was the user's doing
# (`HOME=/x dtrain submit`, `export HOME=/x`) and is kept, as it is outside a notebook.
NOTEBOOK_HOME = "DTRAIN_NOTEBOOK_HOME"


def outer_home(environ: Mapping[str, str]) -> str | None:
    """Pure: the HOME a job submitted with `environ` gets: the submitter's, or, in a notebook's terminal
    whose HOME is still the notebook's own (its workspace), the HOME of whoever started the notebook."""
    home = environ.get("HOME")
    if environ.get(OUTER_HOME) and home == environ.get(NOTEBOOK_HOME, home):  # no NOTEBOOK_HOME: an older notebook
        return environ[OUTER_HOME]
    return home


def notebook_home(spec: JobSpec) -> str | None:
    """A notebook's HOME: its workspace, the first volume's mount path, as a Kubeflow notebook's home
    (/home/jovyan) is its workspace volume: what Jupyter, pip --user, IPython and the user keep in
    ~/ is on the volume, there again after a suspend or a restart, and seen by the jobs that mount
    it. None without a volume (the local backend's notebook then works in a folder of its own)."""
    return spec.volumes[0].mount_path if spec.notebook and spec.volumes else None

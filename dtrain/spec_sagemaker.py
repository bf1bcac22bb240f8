"""The SageMaker part of a job spec: instances, data channels, spot, limits (pure).

It rides in `JobSpec.sagemaker`; the other backends ignore it. Kept apart from spec.py so that
the one job spec stays readable and the SageMaker words stay in one place.
"""

from __future__ import annotations

import json
import math
import posixpath
import re
from dataclasses import dataclass, field
from typing import Any, Mapping

from dtrain.errors import SpecError, Worded
from dtrain.names import STORED, door_words, given_as, given_repr, listed, named, plain, shown, switched
from dtrain.numbers import whole

CHANNEL_RE = re.compile(r"^[A-Za-z0-9\.\-_]{1,64}\Z")  # SageMaker's ChannelName pattern
HP_KEY_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-\.]{0,255}\Z")
INSTANCE_RE = re.compile(r"^ml\.[a-z0-9\-]+\.[a-z0-9]+\Z")
TOOLKIT_PREFIX = "sagemaker_"  # hyperparameters the training toolkit keeps for itself
FSX_MOUNT_RE = re.compile(r"^[A-Za-z0-9_\-]{1,8}\Z")  # an FSx for Lustre file system's MountName
URI_SCHEMES = ("s3://", "efs://", "fsx://", "file://")
S3_BUCKET_RE = re.compile(r"^[a-z0-9][a-z0-9.\-]{1,61}[a-z0-9]\Z")  # S3's bucket naming rules
# ASCII: \d and \w take other scripts' digits and letters ('us-east-١', 'role/Rölé'), which AWS refuses
ROLE_RE = re.compile(r"^arn:aws[a-z\-]*:iam::\d{12}:role/[\w+=,.@\-/]{1,512}\Z", re.ASCII)  # an IAM role's ARN
REGION_RE = re.compile(r"^[a-z]{2}(-[a-z]+)+-\d\Z", re.ASCII)  # an AWS region's code, e.g. us-east-1
MAX_RUNTIME_S = 28 * 24 * 3600  # SageMaker's upper bound on MaxRuntimeInSeconds
MAX_S3_URI = 1024  # CheckpointConfig.S3Uri and OutputDataConfig.S3OutputPath, as botocore's model bounds them
MAX_DIRECTORY_PATH = 4096  # FileSystemDataSource.DirectoryPath, as botocore's model bounds it
MAX_VOLUME_GB = 16384  # the largest ML storage volume SageMaker attaches
MAX_INSTANCES = 1000  # instances of one job: dtrain's bound (an account's quota is usually far lower)
# CreateTrainingJob's HyperParameters map, as botocore's model bounds it: at most 100 entries, keys
# of up to 256 characters, values of up to 2500 (the value as the request carries it, JSON-encoded).
MAX_HYPERPARAMETERS = 100
MAX_HP_VALUE = 2500
MAX_LOCAL_PATH = 4096  # CheckpointConfig.LocalPath, as botocore's model bounds it
OPT_ML = "/opt/ml"
RESERVED = ("code", "input", "model", "output")  # /opt/ml/<these>: the toolkit's own folders, each mounted or written
SYSTEM = ("/proc", "/dev", "/sys", "/etc/hosts")  # what a container's system (the --local sandbox) mounts itself
LOCAL_PATH_FIX = "use an absolute folder of its own, e.g. /opt/ml/checkpoints (the default) or /mnt/checkpoints"
HyperparameterValue = str | int | float | bool  # the JSON scalars the SageMaker SDK sends and the toolkit decodes


@dataclass(frozen=True, kw_only=True)
class Channel:
    """An input channel: /opt/ml/input/data/<name> and $SM_CHANNEL_<NAME> inside the job."""

    name: str  # channel name, e.g. training
    uri: str  # s3://BUCKET/PREFIX, efs://FS-ID/PATH, fsx://FS-ID/MOUNTNAME/PATH, file:///PATH (--local)

    def __post_init__(self):
        if not isinstance(self.name, str) or not CHANNEL_RE.match(self.name):
            raise Worded(lambda door: f"invalid channel name {shown(self.name)}: use 1-64 letters, digits, '.', '-' "
                                      f"or '_', e.g. " + door_words(door, cli="--channel training=s3://bucket/cifar10",
                                                                   sdk="'training' (channels=['training=s3://bucket/cifar10'])"))
        if not isinstance(self.uri, str) or not self.uri.startswith(URI_SCHEMES) or len(self.uri.split("://", 1)[1]) < 1:
            raise Worded(lambda door: f"invalid channel {shown(self.name)}={shown(self.uri)}: use s3://BUCKET/PREFIX, "
                                      f"efs://FS-ID/PATH, fsx://FS-ID/MOUNTNAME/PATH or (with "
                                      f"{switched('local', door)}) file:///PATH")
        if self.uri.startswith("s3://") and not S3_BUCKET_RE.match(self.uri[5:].split("/")[0]):
            raise SpecError(f"invalid channel {shown(self.name)}={shown(self.uri)}: the S3 URI's bucket name must be "
                            f"3-63 lower-case letters, digits, '.' or '-', e.g. s3://my-bucket/cifar10")
        if self.uri.startswith(("efs://", "fsx://")) and not re.match(r"^fs-[0-9a-f]{8,18}\Z", self.uri[6:].split("/")[0]):
            raise SpecError(f"invalid channel {shown(self.name)}={shown(self.uri)}: name the file system by its id, "
                            f"e.g. efs://fs-0123456789abcdef0/data")
        if self.uri.startswith(("efs://", "fsx://")) and not STORED.get():  # a record is read as it was sent
            object.__setattr__(self, "uri", self._file_system_uri())
        if self.uri.startswith("fsx://") and not FSX_MOUNT_RE.match(self.uri[6:].partition("/")[2].split("/")[0]):
            # SageMaker's DirectoryPath on FSx for Lustre is /MOUNTNAME/PATH (aws fsx describe-file-systems
            # names it, LustreConfiguration.MountName); "/" alone is refused.
            raise SpecError(f"invalid channel {shown(self.name)}={shown(self.uri)}: an FSx for Lustre path starts "
                            f"with the file system's mount name (aws fsx describe-file-systems: MountName), "
                            f"e.g. fsx://fs-0123456789abcdef0/abcdefgh/cifar10")
        if self.uri.startswith("file://") and not self.uri[7:].startswith("/"):
            raise SpecError(f"invalid channel {shown(self.name)}={shown(self.uri)}: use an absolute path, file:///data/cifar")

    def _file_system_uri(self) -> str:
        """An EFS or FSx URI with its path as SageMaker mounts it (DirectoryPath: at most
        MAX_DIRECTORY_PATH characters). A mount reads 'a//b' and 'a/./b' as 'a/b', so they are
        written so; '..' is refused, not resolved: on FSx it steps out of the mount name that the
        path must start with, and on EFS it names a directory the user did not write."""
        scheme, rest = self.uri.split("://", 1)
        fs_id, _, path = rest.partition("/")
        example = f"{scheme}://{fs_id}/" + ("data" if scheme == "efs" else "abcdefgh/data")  # FSx: MOUNTNAME/PATH
        bad = next((c for c in path if ord(c) < 32 or ord(c) == 127), None)
        if bad is not None:
            raise SpecError(f"invalid channel {shown(self.name)}={shown(self.uri)}: the path has a control "
                            f"character ({bad!r}); name the directory in printable characters, "
                            f"e.g. {example}")
        parts = [p for p in path.split("/") if p not in ("", ".")]
        if ".." in parts:
            raise SpecError(f"invalid channel {shown(self.name)}={shown(self.uri)}: '..' is not resolved in a "
                            f"file system path; name the directory from the file system's root, "
                            f"e.g. {example}")
        directory = "/" + "/".join(parts)
        if len(directory) > MAX_DIRECTORY_PATH:
            raise SpecError(f"invalid channel {shown(self.name)}={shown(self.uri)}: the directory path is "
                            f"{len(directory)} characters; SageMaker takes at most {MAX_DIRECTORY_PATH} "
                            f"(DirectoryPath), e.g. {example}")
        return f"{scheme}://{fs_id}{directory if parts else ''}"

    @property
    def kind(self) -> str:
        """'s3', 'efs', 'fsx' or 'file'."""
        return self.uri.split("://", 1)[0]

    def to_flag(self) -> str:
        return f"{self.name}={self.uri}"


def local_path_problem(path: object) -> str | None:
    """What is wrong with a CheckpointConfig.LocalPath (where the job's container sees its checkpoints), said after
    the value ('is not an absolute path'), or None: it must be a normalized absolute path (no '.', '..' nor '//':
    the folder the user wrote, unresolved), of at most MAX_LOCAL_PATH printable characters, clear of /opt/ml itself
    and what holds it, of the toolkit's folders in it (RESERVED) and of what the container's system mounts."""
    if not isinstance(path, str) or not path.startswith("/"):
        return "is not an absolute path"
    if len(path) > MAX_LOCAL_PATH:
        return f"has {len(path)} characters, at most {MAX_LOCAL_PATH}"
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "has a control character"
    trimmed = path.rstrip("/") or "/"
    if posixpath.normpath(trimmed) != trimmed or trimmed.startswith("//"):
        return "has '.', '..' or '//' in it, which are not resolved"
    if trimmed == OPT_ML or OPT_ML.startswith(trimmed.rstrip("/") + "/"):
        return "holds /opt/ml, the container's own folder"
    for name in RESERVED:
        if trimmed == f"{OPT_ML}/{name}" or trimmed.startswith(f"{OPT_ML}/{name}/"):
            return f"is in /opt/ml/{name}, the toolkit's own folder"
    for place in SYSTEM:
        if trimmed == place or trimmed.startswith(place + "/"):
            return f"is in {place}, which the container's system mounts"
    return None


def said_path(path: object) -> str:
    """A path as a refusal quotes it: repr, cut after 80 characters."""
    return repr(path[:80] + "...") if isinstance(path, str) and len(path) > 80 else shown(path)


def gpu_type(instance_type: str) -> bool:
    """Whether an instance type has NVIDIA GPUs: the g and p families, as the SageMaker SDK reads
    them (ml.g5.xlarge, ml.p4d.24xlarge); the others are CPU, Trainium or Inferentia types."""
    return instance_family(instance_type)[:1] in ("g", "p")


def instance_family(instance_type: str) -> str:
    """'ml.p4d.24xlarge' -> 'p4d' ('' for what is not ml.FAMILY.SIZE)."""
    parts = instance_type.split(".")
    return parts[1] if len(parts) == 3 else ""


def parse_channel(text: str, door: str = "sdk") -> Channel:
    """'NAME=URI' as a channel; a refusal names it as `door` takes it (errors.Worded): the SDK's string of
    channels=[...], the CLI's --channel (the HTTP API's body answers as the CLI)."""
    name, sep, uri = str(text).partition("=")
    try:
        if not sep:
            raise Worded(lambda door: door_words(
                door, cli=f"invalid --channel {shown(text)}: use NAME=URI, e.g. --channel training=s3://bucket/cifar10",
                sdk=f"invalid channel {shown(text)}: use 'NAME=URI', e.g. channels=['training=s3://bucket/cifar10'] "
                    f"(or Channel(name='training', uri='s3://bucket/cifar10'))"))
        return Channel(name=name, uri=uri)
    except Worded as err:
        raise err.in_words(door) from None


def parse_hyperparameters(items) -> dict[str, HyperparameterValue]:
    """Repeated `--hp key=value` -> {key: value}; the last value of a key wins. VALUE is read as the
    training toolkit reads a hyperparameter typed into the SageMaker console or `aws sagemaker
    create-training-job`: a JSON number, true/false or "quoted string" keeps its type (`epochs=2` is
    the int 2, `amp=true` the bool, `tag='"2"'` the string "2"); any other text is a string."""
    out: dict[str, HyperparameterValue] = {}
    for item in items or ():
        key, sep, value = str(item).partition("=")
        if not sep or not HP_KEY_RE.match(key):
            raise SpecError(f"invalid --hp {shown(item)}: use KEY=VALUE, e.g. --hp epochs=2")
        check_hyperparameter_name(key, flag="--hp")
        out[key] = _cli_value(key, value)
    return out


def _cli_value(key: str, text: str) -> HyperparameterValue:
    try:
        value = json.loads(text, parse_constant=_not_json)  # NaN and Infinity are not JSON: text
    except ValueError:
        return text
    if value is None or isinstance(value, (list, dict)):
        raise SpecError(f"invalid --hp {shown(f'{key}={text}')}: a hyperparameter is a string, a number or "
                        f"true/false; to pass this text as a string, quote it as JSON: --hp '{key}={json.dumps(text)}'")
    return value


def hp_text(value: HyperparameterValue) -> str:
    """A hyperparameter as --hp takes it back: `2`, `true`, `abc`, and `"2"` for the string '2'."""
    if isinstance(value, str):
        try:
            json.loads(value, parse_constant=_not_json)
        except ValueError:
            return value
    return json.dumps(value)


def _not_json(constant: str):
    raise ValueError(constant)


def check_hyperparameter_name(key: str, *, flag: str = "sagemaker hyperparameter") -> None:
    if key.startswith(TOOLKIT_PREFIX):
        # The toolkit reads these names itself (one turns on torchrun, another names the program)
        # and never passes them to the script.
        raise SpecError(f"invalid {flag} {shown(key)}: names starting with {TOOLKIT_PREFIX} belong to the "
                        f"SageMaker training toolkit, which never passes them to the script; rename it")


def check_hyperparameters(hps: Mapping[Any, Any]) -> dict[str, HyperparameterValue]:
    """The hyperparameters of a spec: names as --hp takes them, each value a JSON scalar (kept as
    given: the request carries it JSON-encoded, as the SageMaker SDK sends it), within SageMaker's
    bounds. A stored spec's strings stay strings."""
    if len(hps) > MAX_HYPERPARAMETERS:
        raise SpecError(f"{len(hps)} sagemaker hyperparameters are more than SageMaker's {MAX_HYPERPARAMETERS}: "
                        f"pass fewer (put the rest in a config file with the code)")
    out: dict[str, HyperparameterValue] = {}
    for key, value in hps.items():
        if not isinstance(key, str) or not HP_KEY_RE.match(key):
            raise SpecError(f"invalid sagemaker hyperparameter name {shown(key)}: use 1-256 letters, digits, "
                            f"'_', '-' or '.', starting with a letter or '_', e.g. epochs")
        check_hyperparameter_name(key)
        if isinstance(value, bool) or type(value) in (str, int, float):
            pass
        elif isinstance(value, (str, int, float)):  # a subclass (a YAML number that kept its text, an enum)
            value = str.__str__(value) if isinstance(value, str) else int(value) if isinstance(value, int) \
                else float(value)
        elif value is None:
            raise SpecError(f"invalid sagemaker hyperparameter {key} value None: use a string, a number or "
                            f"true/false; leave {key} out for the script's default (in YAML, quote 'null' for the text)")
        else:
            raise SpecError(f"invalid sagemaker hyperparameter {key} value {shown(value)}: use a string, a number "
                            f"or true/false (SageMaker sends each as JSON); anything else travels as a string the "
                            f"script parses (in YAML, quote it)")
        if isinstance(value, float) and not math.isfinite(value):
            raise SpecError(f"invalid sagemaker hyperparameter {key} value {value}: JSON has no {value}; "
                            f"pass it as a string, e.g. {{{key}: '{value}'}}")
        # an int of more digits than fit is too long before Python would even write it out
        huge = isinstance(value, int) and value.bit_length() > 4 * MAX_HP_VALUE
        encoded = MAX_HP_VALUE + 1 if huge else len(json.dumps(value))
        if encoded > MAX_HP_VALUE:
            size = f"over {MAX_HP_VALUE}" if huge else str(encoded)
            raise SpecError(f"sagemaker hyperparameter {key} is {size} characters as the request carries it "
                            f"(JSON-encoded), more than SageMaker's {MAX_HP_VALUE}: shorten it, or put it in a "
                            f"file with the code")
        out[key] = value
    return out


DEFAULT_MAX_RUNTIME = 86400  # a day: MaxRuntimeInSeconds when --max-runtime is not given


def option_named(key: str, door: str = "sdk") -> str:
    """A SageMaker option as a refusal names it in a door's words: the SDK's field of sagemaker={...}
    (SageMakerOptions'), the CLI's flag (the HTTP API's body answers as the CLI); wording.FLAGS holds the
    flags not named as the fields (--checkpoint-s3-uri, --channel)."""
    return named(key, door)


NUMBER_FIELDS = ("instance_count", "max_runtime", "max_wait", "volume_size")  # as spec.NUMBER_FIELDS


@dataclass(frozen=True, kw_only=True)
class SageMakerOptions:
    """How a job runs as a SageMaker training job; every field has a working default."""

    instance_type: str | None = None  # ml.* type; None: the configured one (ml.m5.xlarge by default)
    instance_count: int | None = None  # None: one instance per process, or per GPUs of the type
    channels: tuple[Channel, ...] = ()  # input channels
    hyperparameters: Mapping[str, HyperparameterValue] = field(default_factory=dict)  # --hp, added to the command's flags
    source_dir: str | None = None  # folder packed as sourcedir.tar.gz; None: the working folder
    spot: bool = False  # managed spot training, with checkpoints in S3
    max_runtime: int = DEFAULT_MAX_RUNTIME  # MaxRuntimeInSeconds
    max_wait: int | None = None  # MaxWaitTimeInSeconds (spot); None: 2 x max_runtime
    volume_size: int = 30  # GB of the ML storage volume per instance
    network_isolation: bool = False  # EnableNetworkIsolation: no outbound calls from the container
    encrypt_inter_container: bool = False  # EnableInterContainerTrafficEncryption
    checkpoint_uri: str | None = None  # CheckpointConfig.S3Uri; None: s3://BUCKET/PREFIX/JOB/checkpoints
    checkpoint_local_path: str | None = None  # CheckpointConfig.LocalPath; None: /opt/ml/checkpoints
    output_path: str | None = None  # OutputDataConfig.S3OutputPath (the model: S3OutputPath/JOB/output/); None: s3://BUCKET/PREFIX
    local: bool = False  # run on this machine inside the SageMaker contract (no Docker, no AWS)

    def __post_init__(self):
        set_ = lambda k, v: object.__setattr__(self, k, v)  # noqa: E731
        set_("channels", tuple(c if isinstance(c, Channel) else _channel(c) for c in self.channels))
        if not isinstance(self.hyperparameters, Mapping):
            raise SpecError(f"invalid sagemaker hyperparameters {shown(self.hyperparameters)}: must be a mapping "
                            f"of name: value, e.g. hyperparameters: {{epochs: 2}}")
        set_("hyperparameters", check_hyperparameters(self.hyperparameters))
        names = [c.name for c in self.channels]
        if len(set(names)) != len(names):
            raise Worded(lambda door: f"channel names repeat ({', '.join(names)}): give each "
                                      f"{named('channel', door)} its own name")  # --channel, unlisted
        if self.instance_type is not None and not INSTANCE_RE.match(str(self.instance_type)):
            raise Worded(lambda door: f"invalid {option_named('instance_type', door)} {shown(self.instance_type)}: "
                                      f"SageMaker training types start with 'ml.', e.g. ml.m5.xlarge or ml.g5.12xlarge")
        for flag in ("spot", "local", "network_isolation", "encrypt_inter_container"):
            if not isinstance(getattr(self, flag), bool):  # 'no' is a string, and a true one
                raise SpecError(f"invalid sagemaker {flag} {shown(getattr(self, flag))}: use true or false")
        for key in NUMBER_FIELDS:  # a job file's or a JSON body's 2.0 is 2, as --instance-count 2.0
            set_(key, whole(getattr(self, key)))
        _bounded(self.instance_count, "instance_count", 1, MAX_INSTANCES, optional=True)
        _bounded(self.max_runtime, "max_runtime", 1, MAX_RUNTIME_S)
        _bounded(self.max_wait, "max_wait", 1, MAX_RUNTIME_S, optional=True)
        _bounded(self.volume_size, "volume_size", 1, MAX_VOLUME_GB)
        _s3_uri(self.checkpoint_uri, "checkpoint_uri", "s3://my-bucket/checkpoints")
        _s3_uri(self.output_path, "output_path", "s3://my-bucket/models")
        if self.checkpoint_local_path is not None and (why := local_path_problem(self.checkpoint_local_path)):
            value = said_path(self.checkpoint_local_path)
            raise Worded(lambda door: f"invalid {option_named('checkpoint_local_path', door)} {value}: it {why}; "
                                      f"{LOCAL_PATH_FIX}")
        if self.max_wait is not None and not self.spot:
            raise Worded(lambda door: f"{option_named('max_wait', door)} applies to spot training only: add "
                                      f"{switched('spot', door)} or drop {option_named('max_wait', door)}")
        if self.spot and self.max_wait is not None and self.max_wait < self.max_runtime:
            # `--spot --max-wait 7200` alone met the default --max-runtime (a day), which the user never typed
            default = " (the default)" if self.max_runtime == DEFAULT_MAX_RUNTIME else ""
            wait, runtime = shown(self.max_wait), shown(self.max_runtime)
            raise Worded(lambda door: (
                f"{option_named('max_wait', door)} {wait} is below {option_named('max_runtime', door)} {runtime}"
                f"{default}: SageMaker needs the spot wait to cover the run; raise {option_named('max_wait', door)} "
                f"to at least {self.max_runtime}, or " + door_words(door, cli="pass", sdk="give")
                + f" {given_as('max_runtime', self.max_wait, door)} or less"))
        for key in NUMBER_FIELDS:  # checked as written (a refusal quotes '1e5'); stored plain
            set_(key, plain(getattr(self, key)))

    def __repr__(self) -> str:
        """The options given a value other than their default, as JobSpec shows itself; `to_dict()` holds all."""
        return given_repr(self)

    @property
    def spot_max_wait(self) -> int:
        return self.max_wait if self.max_wait is not None else min(2 * self.max_runtime, MAX_RUNTIME_S)

    def to_dict(self) -> dict[str, Any]:
        return {"instance_type": self.instance_type, "instance_count": self.instance_count,
                "channels": [c.to_flag() for c in self.channels], "hyperparameters": dict(self.hyperparameters),
                "source_dir": self.source_dir, "spot": self.spot, "max_runtime": self.max_runtime,
                "max_wait": self.max_wait, "volume_size": self.volume_size,
                "network_isolation": self.network_isolation, "encrypt_inter_container": self.encrypt_inter_container,
                "checkpoint_uri": self.checkpoint_uri, "checkpoint_local_path": self.checkpoint_local_path,
                "output_path": self.output_path, "local": self.local}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> "SageMakerOptions":
        if not isinstance(data, Mapping):
            raise SpecError("'sagemaker' must be a mapping, e.g. {instance_type: ml.m5.xlarge, spot: true}")
        known = set(cls.__dataclass_fields__)
        unknown = sorted(map(shown, set(data) - known))
        if unknown:
            raise SpecError(f"unknown sagemaker {listed(unknown, 'field')}: known are {', '.join(sorted(known))}")
        return cls(**data)


def _channel(value: Any) -> Channel:
    if isinstance(value, str):
        return parse_channel(value)
    if isinstance(value, Mapping) and set(value) == {"name", "uri"}:
        return Channel(**value)
    raise SpecError(f"invalid channel {shown(value)}: use 'NAME=URI' or {{name, uri}}")


def _s3_uri(value: Any, key: str, example: str) -> None:
    """An S3 URI as SageMaker takes one for checkpoints and output: s3://BUCKET[/PREFIX], at most MAX_S3_URI;
    `key`: the option, named in each door's words (option_named)."""
    if value is None:
        return
    found = re.match(r"^s3://([^/\s]+)(/\S*)?\Z", str(value))
    if not isinstance(value, str) or not found:
        raise Worded(lambda door: f"invalid {option_named(key, door)} {shown(value)}: use s3://BUCKET/PREFIX, "
                                  f"e.g. {given_as(key, example, door, quoted=True)}")
    if not S3_BUCKET_RE.match(found.group(1)):
        raise Worded(lambda door: f"invalid {option_named(key, door)} {shown(value)}: the S3 URI's bucket name "
                                  f"must be 3-63 lower-case letters, digits, '.' or '-', e.g. {example}")
    if len(value) > MAX_S3_URI:
        raise Worded(lambda door: f"invalid {option_named(key, door)}: the S3 URI is {len(value)} characters; "
                                  f"SageMaker takes at most {MAX_S3_URI}: use a shorter prefix, e.g. {example}")


_EXAMPLES = {"instance_count": 2, "max_runtime": 86400, "max_wait": 172800, "volume_size": 30}


def _bounded(value: Any, key: str, low: int, high: int, *, optional: bool = False) -> None:
    """A whole number from `low` to `high`; `key`: the option, named in each door's words (option_named)."""
    if optional and value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise Worded(lambda door: f"invalid {option_named(key, door)} {shown(value)}: use a whole number from "
                                  f"{low} to {high}, e.g. {given_as(key, str(_EXAMPLES[key]), door)}")

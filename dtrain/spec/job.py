"""JobSpec: the one typed job spec that CLI flags, YAML files, the SDK and the HTTP API build (pure),
its wire form (to_dict, from_dict, from_stored) and the SageMaker options' place in it."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Mapping

from dtrain.errors import SpecError, Worded
from dtrain.names import (MAX_PROCESSES, NAME_RE, check_name, counted, door_words, given_as, given_fields, given_repr,
                          job_volume_name, named, noun, plain, shown)
from dtrain.numbers import NumberWord, Typed, plain_numbers, real_number, whole, whole_number
from dtrain.spec.aliases import FIELD_ALIASES, _did_you_mean, _other_tools  # noqa: F401  (re-exported)
from dtrain.spec.env import FALSE_WORDS, SNAPSHOT_ENV, SNAPSHOT_VOLUME_ENV, TRUE_WORDS, _bytes, _env
from dtrain.spec.fields import (MAX_ARGS_ENV, MAX_RESTARTS, _STORED, _bool, _check_gpu, _check_int, _keys,
                                _python_text, _text, at_door, check_cpu, check_idle_timeout, check_image,
                                check_memory, named_at_door)
from dtrain.spec.labels import _labels, node_labels
from dtrain.spec.tolerations import Toleration, check_tolerations
from dtrain.spec.volumes import NewVolume, Volume, VolumeMount, _volume_from_dict, _volumes, parse_pvc
from dtrain.spec_sagemaker import NUMBER_FIELDS as SAGEMAKER_NUMBERS, SageMakerOptions


LAUNCHERS = ("none", "torchrun", "mpi")


# The fields that take a number: a number written otherwise than Python writes it (a job file's 0x10,
# a flag's 1e9: names.WrittenInt) reaches their checks as written, so that a refusal quotes it.
NUMBER_FIELDS = ("processes", "gpu", "cpu", "max_restarts", "idle_timeout")
WHOLE_FIELDS = ("processes", "gpu", "max_restarts", "idle_timeout")  # of them, those whole numbers only


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
            empty = self.command is None or isinstance(self.command, (str, bytes, list, tuple))
            raise Worded(lambda door, name=self.name, given=self.command: door_words(
                door, cli=f"job {name!r} has no command (a list of strings): put it after '--', e.g. dtrain submit "
                          f"{name} -- python train.py",
                sdk=f"job {name!r} has no command: give command=['python', 'train.py'], a list of strings, one per "
                    f"word" if empty else f"invalid command {shown(given)} of job {name!r}: must be a list of "
                                          f"strings, one per word, e.g. command=['python', 'train.py']"))
        set_("command", tuple(_python_text(c, "command word", lambda text: f"{text}, as in command=['python', "
                                           f"'train.py', '--epochs', '2']", yaml=" (quote it in YAML)")
                              for c in self.command))
        set_("env", _env(self.env))
        set_("labels", _labels(self.labels))
        set_("node_selector", node_labels(self.node_selector, arg="node_selector"))
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
        _check_int(self.processes, "processes", 1, MAX_PROCESSES)
        _check_gpu(self.gpu)
        _check_int(self.max_restarts, "max_restarts", 0, MAX_RESTARTS)
        _bool(self.large_shm, "large_shm")
        _bool(self.notebook, "notebook")
        if self.launcher not in LAUNCHERS:
            raise SpecError(f"unknown launcher {shown(self.launcher)}: use torchrun or mpi")
        if self.processes > 1 and self.launcher == "none":
            raise Worded(lambda door, n=shown(self.processes): f"{given_as('processes', n, door)} needs a launcher: "
                         + door_words(door, cli="use dtrain submit-dist --launcher torchrun or dtrain submit-mpi",
                                      sdk="give launcher='torchrun' (or 'mpi') as well",
                                      file="give launcher: torchrun (or launcher: mpi) as well", of="processes"))
        if type(self.cpu) is float and self.cpu.is_integer() and abs(self.cpu) <= 2 ** 53:
            set_("cpu", int(self.cpu))  # 2, however it came (JSON's 2.0, the SDK's float): as typed
        check_cpu(self.cpu, stored=_STORED.get())
        check_memory(self.memory, stored=_STORED.get())
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
            named_at_door(self._check_working_dir, "working_dir")
        if not NAME_RE.fullmatch(_text(self.backend, "backend", fix=" such as local or kubernetes")):
            raise SpecError(f"invalid backend {shown(self.backend)}: use local, kubernetes or sagemaker")
        if self.sagemaker is not None and self.backend != "sagemaker" and not _STORED.get():
            given = given_fields(self.sagemaker)  # not its defaults (max_runtime, volume_size), which to_dict() has
            said = f" ({', '.join(sorted(given))})" if given else ""
            default = " (the default)" if "backend" in self._unset else ""
            raise Worded(lambda door: door_words(
                door, cli=_elsewhere(self.backend, dict.fromkeys(given, True)),
                sdk=f"SageMaker options{said} need backend sagemaker, not {shown(self.backend)}{default}: give "
                    f"backend='sagemaker' as well, or leave them out"))
        if self.image is not None:
            named_at_door(lambda name: check_image(_text(self.image, name), name, required=True), "image")
        if self.image_pull_policy not in (None, "Always", "IfNotPresent", "Never"):
            raise Worded(lambda door, given=shown(self.image_pull_policy): (
                f"invalid {named('image_pull_policy', door)} {given}: use "
                + door_words(door, cli="Always, IfNotPresent or Never", sdk="'Always', 'IfNotPresent' or 'Never'")))
        if self.notebook and (self.launcher != "none" or self.max_restarts or self.snapshot_volume):
            raise Worded(lambda door, given=self._one_process_fields(): (  # the CLI's: each flag; the SDK's: those given
                f"notebook {self.name!r} is one interactive process: drop " + door_words(
                    door, cli=f"{', '.join(named(a, door) for a in ('processes', 'launcher', 'max_restarts'))} and "
                              f"{named('snapshot_on_success', door)}", sdk=given)))
        if self.idle_timeout is not None:
            at_door(lambda door: check_idle_timeout(self.idle_timeout, door=door))
            if not self.notebook:
                raise Worded(lambda door, name=self.name: (
                    f"job {name!r}: {named('idle_timeout', door)} stops an idle notebook; a training job ends by "
                    f"itself: drop it (or start a notebook: " + door_words(
                        door, cli="dtrain notebook NAME --idle-timeout 1h)", sdk="Client.notebook(NAME, idle_timeout=3600))")))

    def _check_working_dir(self, name: str) -> None:
        if not _text(self.working_dir, name).startswith("/"):
            raise SpecError(f"invalid {name} {shown(self.working_dir)}: use an absolute path")

    def _one_process_fields(self) -> str:
        """What a notebook was given that makes it more than one process, as the SDK's arguments."""
        given = [f"launcher={self.launcher!r}"] if self.launcher != "none" else []
        given += [f"processes={shown(self.processes)}"] if self.processes != 1 else []
        given += [f"max_restarts={shown(self.max_restarts)}"] if self.max_restarts else []
        if self.snapshot_on_success:
            given.append(f"snapshot_on_success={self.snapshot_on_success!r}")
        elif self.snapshot_volume:  # the seed's env request
            given.append(f"env's {SNAPSHOT_ENV} and {SNAPSHOT_VOLUME_ENV}")
        return " and ".join([", ".join(given[:-1]), given[-1]] if len(given) > 2 else given)

    def _check_snapshot_env(self):
        """The seed's ENABLE_SNAPSHOT is a request to the platform: one it cannot read, or one naming
        no volume, took no snapshot and said nothing (the lanes workload then failed on a typo)."""
        value = self.env.get(SNAPSHOT_ENV)
        if value is None:
            return
        if value.strip().lower() not in TRUE_WORDS + FALSE_WORDS:
            raise Worded(lambda door: door_words(
                door, cli=f"invalid -e {SNAPSHOT_ENV}={shown(value)}: use true or false (with -e "
                          f"{SNAPSHOT_VOLUME_ENV}=VOLUME, the volume snapshotted when the job succeeds)",
                sdk=f"invalid env {SNAPSHOT_ENV} {shown(value)}: use 'true' or 'false', with {SNAPSHOT_VOLUME_ENV} the "
                    f"volume snapshotted when the job succeeds, e.g. env={{{SNAPSHOT_ENV!r}: 'true', "
                    f"{SNAPSHOT_VOLUME_ENV!r}: 'data'}}"))
        if (value.strip().lower() in TRUE_WORDS and not self.env.get(SNAPSHOT_VOLUME_ENV)
                and not self.snapshot_on_success):
            raise Worded(lambda door: door_words(
                door, cli=f"-e {SNAPSHOT_ENV}={value} names no volume to snapshot: add -e {SNAPSHOT_VOLUME_ENV}=VOLUME",
                sdk=f"env {SNAPSHOT_ENV}={value!r} names no volume to snapshot: add {SNAPSHOT_VOLUME_ENV!r}: 'VOLUME' "
                    f"to env") + f" (or give {given_as('snapshot_on_success', 'VOLUME', door, quoted=True)})")

    def _check_volumes(self):
        mounts = [v.mount_path for v in self.volumes]  # normalised by VolumeMount / NewVolume
        for v in self.volumes:
            if mounts.count(v.mount_path) > 1:
                raise SpecError(f"two volumes are mounted at {v.mount_path}: give each volume its own mount path")
        if self.snapshot_on_success is not None:
            check_name(self.snapshot_on_success, "volume")

    def __repr__(self) -> str:
        """The fields given a value other than their default, as a notebook cell shows a spec (every field made
        it some twenty-five long): JobSpec(name='train', command=('python', 'train.py'), gpu=1); `to_dict()`
        holds them all."""
        return given_repr(self, unset=self._unset)

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
    def from_dict(cls, data: Mapping[str, Any], *, door: str = "sdk") -> "JobSpec":
        """Build from a YAML/JSON mapping. ``pvc`` is accepted as an alias of ``volumes``.

        Types are checked, never coerced: a string is not a boolean, a number is not a list. `door`:
        whose words a refusal told apart by door uses (errors.Worded): "sdk", "cli" or "http".
        """
        data = {k: _number_word(k, v) for k, v in cls.check_fields(data).items()}
        for key in ("project", "backend"):  # None builds a spec that leaves them unset: a file names one
            if key in data and data[key] is None:
                raise SpecError(f"invalid {key} None: give a {key} name, or leave '{key}:' out")
        vols = [*(("pvc", v) for v in _list(data.pop("pvc", None), "pvc")),  # each refusal names its own key
                *(("volumes", v) for v in _list(data.get("volumes"), "volumes"))]
        for required in ("name", "command"):
            if data.get(required) in (None, "", [], ()):
                raise SpecError(f"the job has no {required}: use dtrain submit NAME [options] -- COMMAND, "
                                f"or set '{required}:' in the job file")
        if not isinstance(data["command"], (list, tuple)):
            raise SpecError(f"invalid command {shown(data['command'])}: must be a list of strings, "
                            f"e.g. [python, train.py, --epochs, '2']")
        data["command"] = tuple(_word(c, "command") for c in data["command"])
        data["volumes"] = tuple(parse_pvc(v, key=key) if isinstance(v, str) else _volume_from_dict(v) for key, v in vols)
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
        try:
            return cls(**{k: v if k in (*NUMBER_FIELDS, "sagemaker", "tolerations") else plain_numbers(v)
                          for k, v in data.items()})
        except Worded as err:  # said in the SDK's words: in the door's
            raise err.in_words(door) from None

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
        if unknown and (other := _other_tools(data)):  # they said "unknown job fields apiVersion, kind, ..."
            raise SpecError(f"{other}: a job file holds dtrain's fields (name, command, processes, gpu, ...; known "
                            f"fields are {', '.join(sorted(known | {'pvc'}))})")
        if unknown:
            raise SpecError(f"unknown job {noun(len(unknown), 'field')} {_keys(unknown)}"
                            f"{_did_you_mean(unknown[0], known)}: known "
                            f"fields are {', '.join(sorted(known | {'pvc'}))}")
        return data


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


def _checked_init(init):
    """JobSpec's __init__ behind a check of its arguments: a field it lacks (`gpus=2`), a value given
    by position or a missing name or command is the SpecError every other bad value is, naming the
    field meant, not a TypeError from the generated __init__."""
    @functools.wraps(init)
    def __init__(self, *args, **kwargs):
        if args:
            raise SpecError(f"JobSpec takes its fields by name, not {counted(len(args), 'value')} by position: "
                            f"JobSpec(name='train', command=['python', 'train.py'], ...)")
        known = {f.name for f in dataclasses.fields(JobSpec)}
        unknown = sorted(set(kwargs) - known)
        if unknown:
            raise SpecError(f"JobSpec got unknown {noun(len(unknown), 'field')} {_keys(unknown)}"
                            f"{_did_you_mean(unknown[0], known)}: "
                            f"its fields are {', '.join(sorted(known))}")
        for required in ("name", "command"):
            if required not in kwargs:
                raise SpecError(f"JobSpec needs {required}=...: JobSpec(name='train', command=['python', "
                                f"'train.py'], ...)")
        init(self, **kwargs)
    return __init__


JobSpec.__init__ = _checked_init(JobSpec.__init__)  # type: ignore[method-assign]


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

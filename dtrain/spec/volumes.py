"""A job's volumes (pure): VolumeMount (an existing volume), NewVolume (one made for the job), their
mount paths, and the `--pvc` strings and job-file entries that name them."""

from __future__ import annotations

import dataclasses
import functools
import posixpath
import shlex
from dataclasses import dataclass
from typing import Any, Callable, Mapping

from dtrain.errors import SpecError
from dtrain.names import MIN_VOLUME, check_mounted_volume, check_storage_class, noun, parse_volume_size, shown
from dtrain.spec.fields import _STORED, _bool, _keys, _text


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
    """A volume created for the job and named after it (``--pvc CLASS:SIZE:MOUNT[:rw]``)."""

    storage_class: str  # storage class (local backend: 'local'; Kubernetes: a StorageClass)
    size: str  # Kubernetes quantity, e.g. 100Gi
    mount_path: str  # absolute path inside the job
    read_only: bool = False  # False only: a new volume starts empty, so it is mounted read-write (as --pvc's :rw)

    def __post_init__(self):
        check_storage_class(self.storage_class)
        _text(self.size, "volume size", fix=" such as 100Gi")
        parse_volume_size(self.size, minimum=1 if _STORED.get() else MIN_VOLUME)
        object.__setattr__(self, "size", self.size.strip())  # parse_volume_size strips: store what it read
        object.__setattr__(self, "mount_path", _check_mount_path(self.mount_path))
        if _bool(self.read_only, "read_only"):  # the SDK's words; --pvc's ':ro' and a file's entry say theirs first
            raise SpecError(f"invalid NewVolume read_only=True: a new volume starts empty and is mounted read-write; "
                            f"drop read_only, or create the volume first (Client.create_volume) and mount it with "
                            f"VolumeMount(volume='data', mount_path={self.mount_path!r}, read_only=True)")

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
            raise SpecError(f"{cls.__name__} got unknown {noun(len(unknown), 'field')} {_keys(unknown)}{hint}: "
                            f"its fields are "
                            f"{', '.join(names)}, e.g. {example}")
        given.update(kwargs)
        missing = [f.name for f in dataclasses.fields(cls) if f.default is dataclasses.MISSING and f.name not in given]
        if missing:
            raise SpecError(f"{cls.__name__} needs {missing[0]}=...: {example}")
        init(self, **given)
    return __init__


VolumeMount.__init__ = _volume_init(VolumeMount, "VolumeMount(volume='data', mount_path='/mnt')")  # type: ignore[method-assign]
NewVolume.__init__ = _volume_init(  # type: ignore[method-assign]
    NewVolume, "NewVolume(storage_class='local', size='10Gi', mount_path='/mnt/scratch')")  # read_only=False too


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


def _shell_path(path: str) -> str:
    """`path` as typed into a shell, with a leading ~/ left for the shell to expand."""
    return "~/" + shlex.quote(path[2:]) if path.startswith("~/") else shlex.quote(path)


def parse_pvc(text: str, *, cmd: Callable[[str], str] | None = None, key: str | None = None,
              source: str | None = None) -> Volume:
    """Parse a Run:AI ``--pvc`` value: ``NAME:MOUNT[:ro]`` or ``CLASS:SIZE:MOUNT``. `cmd`: `dtrain WORDS`
    as a hint prints it (the CLI's command_for, carrying the -p and --backend the user gave). `key` and
    `source`: an entry of a job file's `volumes:` (or `pvc:`) list, named so (and that file), not --pvc."""
    parts = str(text).split(":")
    flag = "--pvc " if key is None else ""
    said = (f"--pvc {shown(text)}" if key is None else
            f"{key}: entry {shown(text)}" + (f" in {source}" if source else ""))
    hint = (f"use {flag}VOLUME:MOUNT[:ro] for an existing volume (e.g. tusimple:/mnt:ro) "
            f"or {flag}CLASS:SIZE:MOUNT for a new one (e.g. local:100Gi:/mnt)")
    if len(parts) in (3, 4) and parts[-2].startswith("/") and parts[-1] not in ("ro", "rw") and (
            len(parts) == 3 or not parts[-1].startswith("/")):  # VOLUME:MOUNT:MODE or CLASS:SIZE:MOUNT:MODE
        raise SpecError(f"invalid {said}: after the mount path comes ro or rw, not {shown(parts[-1])}; "
                        f"{hint}")
    if len(parts) == 4 and parts[2].startswith("/") and parts[3] == "ro":  # CLASS:SIZE:MOUNT:ro
        raise SpecError(f"invalid {said}: a new volume (CLASS:SIZE:MOUNT) starts empty and is mounted "
                        f"read-write; drop ':ro', or create the volume first with 'dtrain volume create' and "
                        f"mount it with VOLUME:MOUNT:ro")
    if len(parts) in (2, 3) and ("/" in parts[0] or parts[0] in (".", "..") or parts[0].startswith("~")):  # docker -v
        copy_in = f"submit copy-in --pvc local:10Gi:/mnt -- cp -r {_shell_path(parts[0])} /mnt/"
        mounts = "--pvc" if key is None else f"a {key}: entry"
        raise SpecError(f"invalid {said}: {shown(parts[0])} is a folder, and {mounts} mounts a volume; "
                        f"a local job sees this machine's folders as they are (give the folder to the command), "
                        f"or copy it into a new volume: {cmd(copy_in) if cmd else f'dtrain {copy_in}'}")
    try:
        if len(parts) == 2:
            return VolumeMount(volume=parts[0], mount_path=parts[1])
        if len(parts) == 3 and parts[2] in ("ro", "rw"):
            return VolumeMount(volume=parts[0], mount_path=parts[1], read_only=parts[2] == "ro")
        if len(parts) == 3 or (len(parts) == 4 and parts[3] == "rw"):  # ':rw' is what a new volume is anyway
            return NewVolume(storage_class=parts[0], size=parts[1], mount_path=parts[2], read_only=False)
    except SpecError as err:
        raise SpecError(f"invalid {said}: {err}; {hint}") from None
    raise SpecError(f"invalid {said}: {hint}")


_VOLUME_KEYS = {VolumeMount: {"volume", "mount_path", "read_only"},
                NewVolume: {"storage_class", "size", "mount_path", "read_only"}}


def _volume_from_dict(d: Mapping[str, Any]) -> Volume:
    kind = None
    if isinstance(d, Mapping):
        kind = VolumeMount if "volume" in d else NewVolume if "storage_class" in d else None
    if kind is None:
        raise SpecError(f"invalid volume entry {shown(d)}: use 'NAME:MOUNT[:ro]', 'CLASS:SIZE:MOUNT', "
                        f"{{volume, mount_path, read_only}} or {{storage_class, size, mount_path}}")
    if kind is NewVolume and "read_only" in d:  # as --pvc CLASS:SIZE:MOUNT:rw, which a new volume is anyway
        if _bool(d["read_only"], "read_only"):
            raise SpecError(f"invalid volume entry {shown(dict(d))}: a new volume (storage_class, size, mount_path) "
                            f"starts empty and is mounted read-write; drop read_only, or create the volume first "
                            f"with 'dtrain volume create' and mount it with {{volume, mount_path, read_only: true}}")
    extra = set(d) - _VOLUME_KEYS[kind]
    unknown = sorted(k for k in extra if isinstance(k, str)) + [k for k in extra if not isinstance(k, str)]
    missing = sorted(k for k in _VOLUME_KEYS[kind] - set(d) if k != "read_only")
    if unknown or missing:
        unknown_keys = f"unknown {noun(len(unknown), 'key')} {_keys(unknown)}"
        raise SpecError(f"invalid volume entry {shown(dict(d))}: " + (unknown_keys if unknown
                        else f"missing {', '.join(missing)}") + f"; its keys are {', '.join(sorted(_VOLUME_KEYS[kind]))}")
    return kind(**d)


def _volumes(value) -> tuple[Volume, ...]:
    """The SDK's volumes: VolumeMount / NewVolume objects, or --pvc strings (a refusal names the field)."""
    if isinstance(value, str) or not isinstance(value, (list, tuple)):
        raise SpecError(f"invalid volumes {shown(value)}: must be a list, e.g. volumes=['data:/mnt'] or "
                        f"[VolumeMount(volume='data', mount_path='/mnt')]")
    out = []
    for v in value:
        if isinstance(v, str):
            v = parse_pvc(v, key="volumes")
        if not isinstance(v, (VolumeMount, NewVolume)):
            raise SpecError(f"invalid volume {shown(v)}: use VolumeMount, NewVolume or a string such as "
                            f"'data:/mnt' (VOLUME:MOUNT[:ro]) or 'local:10Gi:/mnt' (CLASS:SIZE:MOUNT)")
        out.append(v)
    return tuple(out)

"""Where dtrain keeps its state, and the small user config file (default project, backends).

`$DTRAIN_HOME` (default ~/.dtrain) holds `state.db` (SQLite), `config.yaml`, `jobs/<name>/`
(logs and process records) and `volumes/` plus the snapshot store.
"""

from __future__ import annotations

import errno
import fcntl
import itertools
import os
import re
import stat
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

from dtrain.errors import SpecError, StorageError, Worded
from dtrain.names import CLASS_RE, MAX_CLASS, listed, near_name
from dtrain.numbers import NumberWord, plain, real_number, whole_number
from dtrain.replace import replace_file
from dtrain.spec import MAX_YAML_BYTES, check_name, check_yaml_numbers, node_labels, plain_numbers, yaml_mapping

BACKENDS = ("local", "kubernetes", "sagemaker")
KEYS = ("project", "backend", "project_backends", "kubernetes", "storage_classes", "sagemaker", "deleted_job_ttl",
        "node_labels")
TTL_RE = re.compile(r"^(\d{1,6})(s|m|h|d)\Z", re.ASCII)  # not '١d', which int() reads as 1
DEFAULTS = {"project": "default", "backend": "local", "project_backends": {}, "kubernetes": {},
            "storage_classes": {}, "sagemaker": {}, "deleted_job_ttl": None,
            "node_labels": {}}  # a key config.yaml leaves out
# A mapping entry's first line, as safe_dump and people write it: `key:` then a value, a comment or nothing.
_ENTRY_RE = re.compile(r"^([A-Za-z0-9_][A-Za-z0-9_.\-/]*)[ \t]*:(?=[ \t]|\r?\n|\Z)")


class ClassesOverlapError(SpecError):
    """Two storage classes of config.yaml on one folder, or one inside the other. The config verbs that
    repair that (`config storage-class NAME FOLDER`, `--unset NAME`) still load such a file."""

    def __init__(self, problem: str, classes: tuple[str, str]):
        fix = f"dtrain config storage-class {classes[1]} FOLDER, or remove one: dtrain config storage-class --unset {classes[1]}"
        super().__init__(f"{problem}: {fix}")
        self.problem, self.classes = problem, classes


def home_dir(home: str | Path | None = None) -> Path:
    if home is not None and not isinstance(home, (str, os.PathLike)):  # Client(home=3)
        raise SpecError(f"invalid home {home!r}: give a folder's path as a string or a Path, e.g. "
                        f"Client(home='~/.dtrain')")
    path = Path(home or os.environ.get("DTRAIN_HOME") or Path.home() / ".dtrain").expanduser()
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        if path.is_symlink() and not path.exists():  # not made through the link: dtrain did not make it
            raise SpecError(f"the home folder {path} is a symbolic link to {os.readlink(path)}, which does not "
                            f"exist: make that folder, or give --home (or $DTRAIN_HOME) another") from None
        raise SpecError(f"the home folder {path} is a file, not a folder: give --home (or $DTRAIN_HOME) "
                        f"a folder, or move the file away") from None
    except OSError as err:
        fix = ("free space on that disk (df -h, df -i) or give --home (or $DTRAIN_HOME) a folder on another"
               if err.errno in (errno.ENOSPC, errno.EDQUOT) else "give --home (or $DTRAIN_HOME) a folder you can write")
        raise StorageError(f"cannot make the home folder {path}: {err.strerror}; {fix}") from None
    return path.resolve()


def read_small_file(path: str | Path, where: str, example: str, *, missing_ok: bool = False) -> bytes | None:
    """A YAML file's bytes (a job file, config.yaml): a regular file of at most MAX_YAML_BYTES (one
    more is read, to say it is too big). A fifo, a device or a folder is refused before anything is
    read from it (and before it is opened, where it can be told then), so `-f /dev/zero` cannot fill
    memory and a fifo cannot wait forever for a writer. None for a missing file with `missing_ok`."""
    try:
        _check_regular(os.stat(path).st_mode, where, example)
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY)
    except OSError as err:
        if missing_ok and isinstance(err, FileNotFoundError):
            return None
        raise SpecError(f"cannot read {where}: {err.strerror}; check the path and its permissions") from None
    try:
        _check_regular(os.fstat(fd).st_mode, where, example)  # what was opened, if the path changed meanwhile
        chunks, left = [], MAX_YAML_BYTES + 1
        while left > 0:
            chunk = os.read(fd, left)
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)
    except OSError as err:
        raise SpecError(f"cannot read {where}: {err.strerror}; check the path and its permissions") from None
    finally:
        os.close(fd)


def _check_regular(mode: int, where: str, example: str) -> None:
    if not stat.S_ISREG(mode):
        kind = ("a folder" if stat.S_ISDIR(mode) else "a named pipe" if stat.S_ISFIFO(mode)
                else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a special file")
        raise SpecError(f"{where} is {kind}, not a file: give a YAML file such as {example}")


def class_name_problem(name: Any) -> str | None:
    """What is wrong with `name` as a storage class of config.yaml's, said whole; None when nothing is: the
    check named a folder and an absolute path too, whichever was wrong (`storage class 'fast_x':
    '/disk': use a lower-case name other than 'local' ... and an absolute folder`)."""
    if name == "local":
        return "storage class 'local' is the dtrain home's own (its volumes/ folder): use a name other than 'local'"
    if not isinstance(name, str) or len(name) > MAX_CLASS or not CLASS_RE.fullmatch(name):
        return (f"storage class {name!r}: invalid name: use a lower-case name of letters, digits, '-' and '.', "
                f"starting and ending with a letter or digit, at most {MAX_CLASS} characters")
    return None


@dataclass(kw_only=True)
class UserConfig:
    """The contents of `$DTRAIN_HOME/config.yaml`."""

    project: str = "default"  # default project for new jobs
    backend: str = "local"  # default backend
    project_backends: dict[str, str] = field(default_factory=dict)  # project -> backend
    kubernetes: dict[str, Any] = field(default_factory=dict)  # KubernetesConfig fields
    deleted_job_ttl: str | None = None  # forget deleted jobs this long after deletion, e.g. 7d
    storage_classes: dict[str, str] = field(default_factory=dict)  # local class -> root folder
    sagemaker: dict[str, Any] = field(default_factory=dict)  # SageMakerConfig fields
    # this machine's own node labels, beside kubernetes.io/hostname, os and arch: what a local job's
    # --node-selector (--node-type: run.ai/type) may ask for, as `kubectl label node` adds a node's
    node_labels: dict[str, str] = field(default_factory=dict)

    @classmethod
    def load(cls, home: Path, *, apart: bool = True) -> "UserConfig":
        """`apart` False: storage classes that overlap are let through (ClassesOverlapError otherwise),
        for the verbs that repair that; anything else wrong is still refused."""
        path = home / "config.yaml"
        raw = read_small_file(path, str(path), "config.yaml", missing_ok=True)
        if raw is None:
            return cls()
        data = yaml_mapping(raw, str(path), "project: default")
        check_yaml_numbers(data, str(path))  # master_port: 0x7000 is refused, not read as 28672
        for key in ("kubernetes", "sagemaker"):
            if isinstance(data.get(key), dict):
                data[key] = section_numbers(key, data[key])
        data = plain_numbers(data)  # save() dumps plain numbers
        unknown = sorted(map(str, set(data) - set(KEYS)))
        if unknown:  # each with the key one slip away, as the sagemaker section's settings are said
            said = [f"{key}{f' (did you mean {near!r}?)' if (near := near_name(key, KEYS)) else ''}" for key in unknown]
            raise SpecError(f"{path}: unknown {listed(said, 'key')}; known: {', '.join(KEYS)}")
        # storage_classes: validate() says more
        for key in ("project_backends", "kubernetes", "sagemaker", "node_labels"):
            if data.get(key) is None:
                data.pop(key, None)
            elif not isinstance(data[key], dict):
                raise SpecError(f"{path}: '{key}' must be a mapping, not {data[key]!r}; fix or remove the file")
        cfg = cls(**data)
        cfg.validate(path, apart=apart)
        return cfg

    def validate(self, where: Any = "config", *, apart: bool = True) -> None:
        try:
            check_name(self.project, "project")
            for project in self.project_backends:
                check_name(project, "project")
        except SpecError as err:
            raise SpecError(f"{where}: {err}") from None
        for backend in [self.backend, *self.project_backends.values()]:
            if not isinstance(backend, str) or backend not in BACKENDS:
                raise SpecError(f"{where}: unknown backend {backend!r}; use one of {', '.join(BACKENDS)}")
        if not isinstance(self.storage_classes, dict):
            raise SpecError(f"{where}: storage_classes must map class names to folders, e.g. fast: /nvme/dtrain")
        for name, root in self.storage_classes.items():
            if problem := class_name_problem(name):
                raise SpecError(f"{where}: {problem}, e.g. fast: /nvme/dtrain")
            if not str(root).startswith("/"):
                raise SpecError(f"{where}: storage class {name!r}: folder {root!r} is not absolute: give an absolute "
                                f"folder, e.g. fast: /nvme/dtrain")
        # resolved (read only: realpath follows links, writes nothing): two spellings of one folder, or a
        # link into another class's folder, are found here, not only at the first use of either class
        folders = {name: Path(os.path.realpath(root)) for name, root in self.storage_classes.items()} if apart else {}
        for a, b in itertools.combinations(folders, 2):
            if folders[a].is_relative_to(folders[b]) or folders[b].is_relative_to(folders[a]):
                given = (os.path.normpath(self.storage_classes[a]), os.path.normpath(self.storage_classes[b]))
                linked = given != (str(folders[a]), str(folders[b]))
                if folders[a] == folders[b]:
                    how = f"share the folder {folders[a]}" + (
                        f" ({given[0]} and {given[1]} are one folder through a symbolic link)" if linked else "")
                else:
                    how = (f"nest their folders ({given[0]}, {given[1]}"
                           + (f"; through a symbolic link they are {folders[a]}, {folders[b]})" if linked else ")"))
                raise ClassesOverlapError(
                    f"{where}: storage classes {a!r} and {b!r} {how}: give each class a folder of its own, apart from the "
                    f"other's (a volume's folder in one would be inside the other's)", (a, b))

        try:
            node_labels(self.node_labels, "node_labels")
        except Worded as err:  # a YAML file's words: quote it ('None={...}' was the SDK's, with no argument to name)
            raise SpecError(f"{where}: {err.in_words('file')}") from None
        except SpecError as err:
            raise SpecError(f"{where}: {err}") from None
        if self.deleted_job_ttl is not None and not TTL_RE.match(str(self.deleted_job_ttl)):
            raise SpecError(f"{where}: invalid deleted_job_ttl {self.deleted_job_ttl!r}; use a duration "
                            f"such as 30m, 12h or 7d")

    def deleted_job_ttl_seconds(self) -> float | None:
        if self.deleted_job_ttl is None:
            return None
        m = TTL_RE.match(self.deleted_job_ttl)
        return int(m.group(1)) * {"s": 1, "m": 60, "h": 3600, "d": 86400}[m.group(2)]

    def save(self, home: Path) -> None:
        self.validate()
        path = home / "config.yaml"
        data = {"project": self.project, "backend": self.backend, "project_backends": self.project_backends,
                "kubernetes": self.kubernetes, "storage_classes": self.storage_classes, "sagemaker": self.sagemaker}
        if self.deleted_job_ttl is not None:
            data["deleted_job_ttl"] = self.deleted_job_ttl
        if self.node_labels:  # written by hand; kept through every `dtrain config` change
            data["node_labels"] = self.node_labels
        import yaml  # here: ~25 ms that every other command would pay at start-up

        if path.is_symlink():  # replacing it would cut the user's link (a dotfiles copy) without a word
            raise SpecError(f"{path} is a symbolic link (to {os.readlink(path)[:200]}), and links are never written "
                            f"through: make the change in that file by hand, or put a copy of it in the link's place")
        text = _kept_edit(path, data) or yaml.safe_dump(data, sort_keys=False)
        replace_file(path, text, durable=True)  # atomic, never through a planted link

    @classmethod
    def update(cls, home: Path, change: Callable[["UserConfig"], None], *, repair: bool = False) -> "UserConfig":
        """config.yaml read afresh, changed by `change` and saved, under an exclusive lock on the home
        folder: two `dtrain config` commands at once each keep the other's change (each saved the
        file it had read at start, so the later one undid the earlier one's). `repair`: a file whose
        storage classes overlap is read too (the change must leave them apart: save checks it)."""
        fd = os.open(home, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            cfg = cls.load(home, apart=not repair)
            change(cfg)
            cfg.save(home)
            return cfg
        finally:
            os.close(fd)

    def class_roots(self) -> dict[str, Path]:
        return {name: Path(root) for name, root in self.storage_classes.items()}

    def backend_for(self, project: str) -> str:
        return self.project_backends.get(project, self.backend)

    def command_for(self, words: str, *, backend: str, project: str | None = None) -> str:
        """`dtrain WORDS` as a printed hint names a follow-up command on a job (volume, snapshot) of
        `project` on `backend`, so that it works as written: with --backend where `backend` is not the
        one this config gives the project, and with -p where the project is not the default one (its
        backend, its namespace on Kubernetes: without it the command looks in the default project's),
        before a ' -- COMMAND' the words end with (after it, -p would be the job's own argument)."""
        where = f" -p {project}" if project is not None and project != self.project else ""
        head, sep, command = words.partition(" -- ")
        return self.dtrain_for(backend, project) + head + where + sep + command

    def dtrain_for(self, backend: str, project: str | None = None) -> str:
        """`dtrain ` with --backend where `backend` is not the one this config gives `project`."""
        return "dtrain " if backend == self.backend_for(project or self.project) else f"dtrain --backend {backend} "


def section_numbers(section: str, settings: dict) -> dict:
    """`settings` of config.yaml's `section` ('kubernetes', 'sagemaker') with each unquoted 1e3 (a
    NumberWord: YAML 1.1 reads it as text) in a number field read as a job file's number fields and the
    flags read it: whole_number (master_port: 1e3 is 1000), real_number for seconds (request_timeout);
    a quoted '1e3' and any other field keep the text. The numbers come back plain (save() dumps them)."""
    read = number_fields(section)
    return {k: plain(read[k](str(v))) if isinstance(v, NumberWord) and k in read else v
            for k, v in settings.items()}


def number_fields(section: str) -> dict:
    """config.yaml's `section` ('kubernetes', 'sagemaker'): each number field and the reader its flag
    reads it with (whole_number, real_number for seconds)."""
    if section == "kubernetes":
        from dtrain.backends.kubernetes.config import KubernetesConfig as settings_of
    else:
        from dtrain.backends.sagemaker.config import SageMakerConfig as settings_of
    read = {"int": whole_number, "float": real_number}
    kinds = {f.name: str(f.type).split(" |")[0] for f in fields(settings_of)}
    return {k: read[kind] for k, kind in kinds.items() if kind in read}


# ---- config.yaml rewritten in place: the user's comments and key order kept ------------------------------
def _kept_edit(path: Path, data: dict[str, Any]) -> str | None:
    """config.yaml's text with only the entries whose value changed rewritten (a nested mapping's
    changed entries alone: `config kubernetes --context X` rewrites the `context:` line), so the
    comments and the order of the rest stay. None (a full rewrite) where the file is missing, or
    holds a form this line-level edit does not read (a flow mapping, a quoted key, anchors); the
    result is read back and must mean `data`, else None too."""
    try:
        raw = read_small_file(path, str(path), "config.yaml", missing_ok=True)
        if raw is None:
            return None
        old = plain_numbers(yaml_mapping(raw, str(path), "project: default"))
        lines = raw.decode("utf-8").splitlines(keepends=True)
        edited = _edit_entries(lines, 0, len(lines), 0, {**DEFAULTS, **old}, data)
        if edited is None:
            return None
        text = "".join(edited)
        again = plain_numbers(yaml_mapping(text.encode("utf-8"), str(path), "project: default"))
    except (SpecError, UnicodeDecodeError):
        return None
    meant = {**DEFAULTS, **data}
    return text if _same({**DEFAULTS, **again}, meant) else None


def _same(a: Any, b: Any) -> bool:
    """Equal and of one type all the way down (1 and true, 1 and 1.0 are not the same setting)."""
    if type(a) is not type(b):
        return False
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list):
        return len(a) == len(b) and all(map(_same, a, b))
    return a == b


def _entries(lines: list[str], start: int, end: int, indent: int) -> list[list] | None:
    """[key, first, last) of each entry of the block mapping written in lines[start:end] at `indent`
    spaces; comments and blank lines after an entry's last content line are not part of it."""
    out: list[list] = []
    for i in range(start, end):
        line = lines[i]
        if not line.strip() or line.lstrip(" ").startswith("#"):
            continue
        lead = len(line) - len(line.lstrip(" "))
        if lead > indent or (lead == indent and out and line[lead] == "-" and line[lead:lead + 2].strip() == "-"):
            if not out:
                return None
            out[-1][2] = i + 1  # its value's lines (a list safe_dump writes at the key's indent too)
            continue
        m = _ENTRY_RE.match(line[indent:]) if lead == indent else None
        if m is None:  # `---`, a quoted or complex key, a tab: not read here
            return None
        out.append([m.group(1), i, i + 1])
    keys = [e[0] for e in out]
    return out if len(set(keys)) == len(keys) else None


def _edit_entries(lines: list[str], start: int, end: int, indent: int, old: dict, new: dict) -> list[str] | None:
    """lines[start:end] with the entries of `old` changed to `new`: those alike kept as written."""
    import yaml

    entries = _entries(lines, start, end, indent)
    if entries is None or not all(isinstance(k, str) for k in new):
        return None
    out, pos, after = [], start, None
    for key, first, last in entries:
        out += lines[pos:first]
        pos = last
        if key not in new:  # removed
            continue
        value, head = new[key], lines[first]
        if key in old and _same(old[key], value):
            out += lines[first:last]
        elif isinstance(value, dict) and value and isinstance(old.get(key), dict) and last > first + 1 \
                and not head[len(key) + indent:].split(":", 1)[1].split("#", 1)[0].strip():
            body = next(ln for ln in lines[first + 1:last] if ln.strip() and not ln.lstrip(" ").startswith("#"))
            inner = _edit_entries(lines, first + 1, last, len(body) - len(body.lstrip(" ")), old[key], value)
            if inner is None:
                return None
            out += [head, *inner]
        else:
            dumped = yaml.safe_dump({key: value}, sort_keys=False).splitlines(keepends=True)
            note = re.search(r"[ \t]+#.*$", head.rstrip("\r\n")) if last == first + 1 else None
            if note and len(dumped) == 1:  # `project: a  # ours`: the comment stays with the new value
                dumped = [dumped[0].rstrip("\n") + note.group(0) + "\n"]
            out += [" " * indent + ln for ln in dumped]
        after = len(out)
    tail = lines[pos:end]
    found = {e[0] for e in entries}
    added = [" " * indent + ln for k, v in new.items() if k not in found and not (k in old and _same(old[k], v))
             for ln in yaml.safe_dump({k: v}, sort_keys=False).splitlines(keepends=True)]
    if added and after is None and indent:
        return None
    if after is None:  # a file of comments only: the new entries after them
        out, after = out + tail, len(out) + len(tail)
        tail = []
    if added and after and not out[after - 1].endswith("\n"):
        out[after - 1] += "\n"
    return out[:after] + added + out[after:] + tail

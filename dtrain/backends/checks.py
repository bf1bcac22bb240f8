"""What every verb of `dtrain.backends.base.Backend` checks the same way before a hook sees it: names
of existing and new objects, a restore's where, yes/no arguments; and how a hint names a command."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterable, Iterator

from dtrain.backends.records import JobInfo, JobStatus, SnapshotInfo
from dtrain.errors import ConflictError, DtrainError, NotFoundError, SpecError
from dtrain.names import (check_mounted_volume, check_name, check_storage_class, near_name, parse_volume_size, shown,
                          with_near)
from dtrain.spec import JobSpec

# `names(what)`: the names of a backend's jobs (`what` 'job'), volumes or snapshots, those in use
# then the others (Backend._names), that a name which does not exist is matched against.
Names = Callable[[str], tuple[Iterable[str], Iterable[str]]]

# `cmd(words, project)`: `dtrain WORDS` as a printed hint names a follow-up command on a job of
# `project`, so that it works as printed (the Client's: `Client.command_for`, which adds -p PROJECT
# and --backend where config.yaml would send the bare command elsewhere).
HintCommand = Callable[[str, str], str]


def _plain_command(words: str, project: str) -> str:
    """A hint's command where no Client says how to name it: `dtrain WORDS` as typed."""
    return f"dtrain {words}"


def _check_new_volume(name: str, size: str, storage_class: str | None) -> None:
    check_name(name, "volume")
    if not isinstance(size, str):  # size=10 from Python made a 10-byte volume, where a --pvc size must be a string
        raise SpecError(f"invalid volume size {shown(size)}: must be a string such as '100Gi' (a Kubernetes "
                        f"quantity from 1Mi to 1Ei, with its unit)")
    parse_volume_size(size)
    if storage_class is not None:
        check_storage_class(storage_class)


def _check_new_snapshot(name: str | None, job: str | None) -> None:
    if name is not None:
        check_name(name, "snapshot")
    if job is not None:
        check_name(job, "job")


def _check_restore(name: str, to: str | None, in_place: bool, storage_class: str | None = None) -> None:
    _existing(name, "snapshot")
    _flag(in_place, "in_place")  # in_place='no' rolled the volume back
    if to is not None and in_place:
        raise SpecError(f"restore snapshot {name!r} into a new volume (--to NEW_VOLUME) or in place "
                        f"(--in-place), not both")
    if to is None and not in_place:
        raise SpecError(f"say where to restore snapshot {name!r}: --to NEW_VOLUME (a clone) or "
                        f"--in-place (roll the volume back)")
    if to is not None:
        check_name(to, "volume")
    if storage_class is not None:
        if in_place:
            raise SpecError(f"--class does not go with --in-place: an in-place restore of snapshot {name!r} keeps "
                            f"its volume's storage class; change that with 'dtrain volume update VOLUME --class "
                            f"{storage_class}', or restore into a new volume with --to NEW_VOLUME --class "
                            f"{storage_class}")
        check_storage_class(storage_class)


def _existing(name, what: str) -> str:
    """The name of an existing job, volume or snapshot as a verb takes it: a string. (A list reached
    the local store's query as a bare sqlite3 error.) Whether it names one is the backend's to say."""
    if not isinstance(name, str):
        example = {"volume": "data", "snapshot": "data-s1", "notebook": "lab"}.get(what, "train")
        raise SpecError(f"invalid {what} name {shown(name)}: give the {what}'s name as a string, e.g. '{example}'")
    return name


def _flag(value, what: str) -> bool:
    """A yes/no argument of a verb: True or False, never a truthy string ('no' purged, restored in place)."""
    if not isinstance(value, bool):
        raise SpecError(f"invalid {what} {shown(value)}: use True or False")
    return value


@contextlib.contextmanager
def named(what: str, name: str, names: Names, noun: str | None = None) -> Iterator[None]:
    """Around a hook given an existing job, volume or snapshot: a NotFoundError that quotes
    `name`, when the backend knows no such one, gets the near name it knows (did you mean
    'train-1'?), on one line as before and of the same class.

    A name no dtrain object can have ('Bad_Name!') is check_name's SpecError instead (`noun`
    the word it says, default `what`): the rule, as the HTTP API's path pattern says it, not
    "no job named". Only when nothing is found: a backend may list objects another tool named
    (a Kubernetes PVC 'data.v1')."""
    try:
        yield
    except NotFoundError as err:
        if isinstance(name, str):
            if what == "volume" and noun is None:  # a dotted claim's full name ('data.v1') is well formed
                check_mounted_volume(name)
            else:
                check_name(name, noun or what)  # malformed: this SpecError, raised from the lookup
        if len(err.args) == 1 and isinstance(err.args[0], str) and isinstance(name, str):
            err.args = (_with_near(err.args[0], what, name, names),)
        raise


@contextlib.contextmanager
def volumes_named(spec: JobSpec, names: Names) -> Iterator[None]:
    """Around a hook given a job spec: a NotFoundError quoting a volume it mounts (--pvc) or
    snapshots (ENABLE_SNAPSHOT + PVC_NAME) gets the near name, as `volume describe` names it; a
    typo'd --pvc, where it is typed most, got "no volume named 'wrk'" alone."""
    try:
        yield
    except NotFoundError as err:
        volumes = {m.volume for m in spec.volumes if hasattr(m, "volume")} | {spec.snapshot_volume} - {None}
        if len(err.args) == 1 and isinstance(err.args[0], str):
            for name in sorted(volumes):
                err.args = (_with_near(err.args[0], "volume", name, names),)
        raise


def _with_near(message: str, what: str, name: str, names: Names) -> str:
    if repr(name) not in message:
        return message
    try:
        current, others = (list(group) for group in names(what))
    except (DtrainError, OSError):  # the names cannot be read (no access, no answer): the error stands as is
        return message
    if name in current or name in others:  # it exists: the error is about something else
        return message
    near = near_name(name, current, others)
    return message if near is None else with_near(message, name, near)


def gone_job_logs(name, project: str | None, snapshots: Callable[[], Iterable[SnapshotInfo]],
                  holds: Callable[[str, str], bool]) -> NotFoundError | None:
    """Why `dtrain logs NAME` finds no job NAME where a snapshot still records it (a job deleted, or
    purged, after its snapshot was taken): the newest such snapshot that holds its logs (at
    .dtrain/logs/NAME/ in it: `holds(snapshot, job)`) and how to read them, or that none holds them;
    None where no snapshot of `snapshots()` names NAME, of `project` where given (the lookup's own
    error, with its near name, stands)."""
    if not isinstance(name, str):
        return None
    try:
        taken = sorted((s for s in snapshots() if s.job == name
                        and project in (None, (s.job_spec or {}).get("project", project))),
                       key=lambda s: (s.created, s.name), reverse=True)
        kept = next((s.name for s in taken if holds(s.name, name)), None)
    except (DtrainError, OSError):  # the snapshots cannot be read: the lookup's error stands
        return None
    if not taken:
        return None
    if kept is None:
        one = len(taken) == 1
        return NotFoundError(f"no job named {name!r}: it was deleted with its logs ({'snapshot' if one else 'snapshots'} "
                             f"{', '.join(repr(s.name) for s in taken[:3])}{'' if len(taken) <= 3 else ', ...'} of "
                             f"its volume {'holds' if one else 'hold'} its results, not its logs)")
    return NotFoundError(f"no job named {name!r}: it was deleted, and its logs were kept in snapshot {kept!r} at "
                         f".dtrain/logs/{name}/; read them by restoring it ('dtrain snapshot restore {kept} --to "
                         f"NEW_VOLUME') and opening that folder in the volume's path ('dtrain volume describe "
                         f"NEW_VOLUME')")


def check_notebook_open(name: str, info: JobInfo, cmd: HintCommand) -> None:
    """Refuse to open `info`, the job `name`, where it is not a Running notebook, naming the command that
    starts (or resumes) it; `cmd` writes those commands (see `HintCommand`)."""
    project = info.spec.project

    def said(words: str) -> str:
        return cmd(words, project)

    if not info.spec.notebook:
        raise SpecError(f"job {name!r} is not a notebook: see '{said('notebook list')}' for the notebooks there are, "
                        f"or start one with '{said('notebook NAME --pvc VOLUME:/home/jovyan')}'")
    if info.status == JobStatus.DELETED:
        raise ConflictError(f"notebook {name!r} is Deleted: start it again with '{said(f'notebook {name} ...')}'")
    if info.status.terminal:  # its name is still taken: delete first (its files are kept)
        raise ConflictError(f"notebook {name!r} is {info.status}: delete it ('{said(f'delete {name}')}', which "
                            f"keeps its files on its volume or in its own work folder), then start it again "
                            f"('{said(f'notebook {name} ...')}')")
    if info.status == JobStatus.SUSPENDED:
        raise ConflictError(f"notebook {name!r} is Suspended: start it again with '{said(f'resume {name}')}'")
    if info.status == JobStatus.PENDING:  # queued (for GPUs, a quota): a URL of an earlier start, or none
        raise ConflictError(f"notebook {name!r} is Pending ({info.message or 'queued'}): open it once it is "
                            f"Running (see '{said(f'describe job {name}')}')")


def project_in_use(name: str, held: dict[str, list[str]], cmd: Callable[[str], str]) -> ConflictError | None:
    """The one line refusing to delete project `name` while it holds something: `held` maps 'job',
    'notebook', 'volume' and 'snapshot' to the names of those it holds; `cmd(words)` is the `dtrain
    WORDS` to type (with the project's -p where needed). None: it holds nothing."""
    held = {kind: sorted(names) for kind, names in held.items() if names}
    if not held:
        return None
    def shown(names: list[str]) -> str:  # the summary's; the commands name every one, to be pasted as they are
        return " ".join(names[:MAX_NAMED]) + (f" and {len(names) - MAX_NAMED} more" if len(names) > MAX_NAMED else "")
    said = ", ".join(f"{len(names)} {kind}{'s' if len(names) > 1 else ''} ({shown(names)})"
                     for kind, names in held.items())
    jobs = held.get("job", []) + held.get("notebook", [])  # a notebook is a job: `dtrain delete` takes it
    fixes = ([f"'{cmd('delete ' + ' '.join(jobs))}'"] if jobs else []) + [
        f"'{cmd(f'{kind} delete ' + ' '.join(held[kind]))}'" for kind in ("volume", "snapshot") if kind in held]
    them = "it" if sum(map(len, held.values())) == 1 else "them"
    return ConflictError(f"project {name!r} still has {said}: delete {them} first ({', then '.join(fixes)}), "
                         f"then the project")


MAX_NAMED = 5  # names a refusal's summary lists of each kind before 'and N more' (its commands name all)

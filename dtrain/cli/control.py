"""Stopping and starting jobs: `delete` (--purge forgets them), `suspend` and `resume`, each by name or
--all, every name checked before any job is changed."""

from __future__ import annotations

import shlex
import sys

from dtrain import JobStatus
from dtrain.cli.lookup import _get, _in_project, _job_names
from dtrain.client import Client
from dtrain.errors import ConflictError, NotFoundError, SpecError, StorageError
from dtrain.names import shown


def cmd_delete(args, client: Client) -> int:
    if not args.purge:
        return _delete(args, client)
    with client.room_to_free():  # on a full home disk: room for the checks' reads and the purge's commit
        try:
            return _delete(args, client)
        except Exception as err:  # no reserve to give up (a small disk): what to delete first
            names = args.names[1:] if args.names[:1] in (["job"], ["jobs"], ["notebook"], ["notebooks"]) else args.names
            if (line := client.purge_refused(err, names, project=args.project)) is None:
                raise
            raise StorageError(line) from None


def _delete(args, client: Client) -> int:
    words = [] if args.all and args.names in (["job"], ["jobs"]) else args.names  # `runai delete job --all`
    names = list(dict.fromkeys(_job_names(words, "delete")))
    if args.all == bool(names):  # `runai delete job --all`: every job of the project, or the names given
        raise SpecError(("'dtrain delete' takes job names or --all, not both" if names else
                         "'dtrain delete' needs job names, or --all for every job of the project")
                        + ": dtrain delete NAME [NAME...] or dtrain delete --all [-p PROJECT]; nothing was deleted")
    _in_project(args)
    if args.all:
        project = args.project or client.default_project
        names = [j.name for j in client.list(project=project, show_deleted=args.purge)]
        if not names:
            print(f"No jobs to delete in project '{project}'")
            return 0
    missing, gone, found = [], [], None
    for name in names:  # every name is checked before anything is deleted
        try:
            info = found = _get(args, client, name)
        except NotFoundError as err:
            if len(names) == 1:  # the backend's own line: its project, a near name
                raise NotFoundError(f"{err}; nothing was deleted") from None
            missing.append(name)
            continue
        if info.status.value == "Deleted" and not args.purge:  # as kubectl: not found, not "deleted" twice
            gone.append(name)
    # the hints name -p as given: a name without it is looked for where a bare name is (another project's
    # job of that name, on its own backend, is not the one meant)
    backend = found.backend if found is not None else client.backend(project=args.project).name
    if missing:
        raise NotFoundError(f"no job named {', '.join(map(shown, missing[:5]))}; nothing was deleted (see "
                            f"'{client.command_for('list jobs --show-deleted', backend=backend, project=args.project)}')")
    if gone:
        purge = client.command_for(f"delete {' '.join(gone[:5])} --purge", backend=backend, project=args.project)
        raise NotFoundError(f"job {', '.join(map(shown, gone[:5]))} "
                            f"{'was' if len(gone) == 1 else 'were'} already deleted; nothing was deleted "
                            f"('{purge}' also forgets {'it' if len(gone) == 1 else 'them'})")
    for name in names:
        info = client.delete(name, purge=args.purge, project=args.project)
        # A job still ending after the stop request (SageMaker's Stopping: its programs get SIGTERM and time to
        # save) reads Running until it has: say Stopping, not Running, and how to see the end.
        waited = client.command_for(f"wait {name}", backend=info.backend, project=info.spec.project)
        if info.status.terminal and info.status is not JobStatus.DELETED and not args.purge:
            # SageMaker keeps an ended job as it ended (StopTrainingJob has nothing to stop): it is still
            # listed, so 'deleted' would be untrue; --purge (DeleteTrainingJob) is what removes it
            purge = client.command_for(f"delete {name} --purge", backend=info.backend, project=info.spec.project)
            print(f"The job '{name}' had already ended ({info.status.value}): nothing to stop, and it stays "
                  f"listed; '{purge}' forgets it")
            continue
        state = info.status.value if info.status.terminal else f"Stopping: '{waited}' returns once it has stopped"
        print(f"The job '{name}' has been " + ("purged" if args.purge else f"deleted ({state})"))
    return 0


# `dtrain suspend` / `dtrain resume` (Run:AI's verbs): the jobs each takes, and the word said.
_PAUSES = {"suspend": ("a Pending or Running job", "suspended"), "resume": ("a Suspended job", "resumed")}


def _pausable(verb: str, status: JobStatus) -> bool:
    return status.suspendable if verb == "suspend" else status is JobStatus.SUSPENDED


def cmd_suspend_resume(args, client: Client) -> int:
    """Every name is checked first: one that is missing or in another state stops them all. `--all`
    (Run:AI's `runai suspend --all`): every job of the project that the verb takes, the others left."""
    verb = args.verb
    which, done = _PAUSES[verb]
    words = [] if args.all and args.names in (["job"], ["jobs"]) else args.names  # `runai suspend job --all`
    names = list(dict.fromkeys(_job_names(words, verb)))
    if args.all == bool(names):
        raise SpecError((f"'dtrain {verb}' takes job names or --all, not both" if names else
                         f"'dtrain {verb}' needs job names, or --all for every job of the project")
                        + f": dtrain {verb} NAME [NAME...] or dtrain {verb} --all [-p PROJECT]; nothing was {done}")
    _in_project(args)
    if args.all:
        project = args.project or client.default_project
        names = [j.name for j in client.list(project=project) if _pausable(verb, j.status)]
        if not names:
            print(f"No jobs to {verb} in project '{project}' (it has no {which.removeprefix('a ')})")
            return 0
    for name in names:
        try:
            info = _get(args, client, name)
        except NotFoundError as err:
            raise NotFoundError(f"{err}; nothing was {done}") from None
        if not _pausable(verb, info.status):
            listed = client.command_for(info.status.listed_by, backend=info.backend, project=info.spec.project)
            raise ConflictError(f"job {name!r} is {info.status.value}: 'dtrain {verb}' takes {which}; nothing "
                                f"was {done} (see '{listed}')" + _run_again(client, verb, info))
    def waiting(seconds: float, name: str) -> None:  # said at once: else the resume is held with no word
        print(f"waiting for the processes of job '{name}' to stop (up to {seconds:.0f} s)", file=sys.stderr, flush=True)

    for name in names:
        if verb == "suspend":
            info = client.suspend(name, project=args.project)
        else:
            info = client.resume(name, project=args.project, waiting=lambda s, name=name: waiting(s, name))
        print(f"The job '{name}' has been {done} ({info.status.value})" + _notebook_next(client, verb, info))
    return 0


def _run_again(client: Client, verb: str, info) -> str:
    """What `dtrain resume` of an ended job was for: running it again (Run:AI's habit: delete, then submit
    the same job), here from the spec `describe --json` keeps, which `submit -f` reads as it is."""
    if verb != "resume" or not info.status.terminal:
        return ""
    def said(words: str) -> str:
        return f"'{client.command_for(words, backend=info.backend, project=info.spec.project)}'"
    saved = shlex.quote(f"{info.name}.json")
    steps = [said(f"describe job {info.name} --json") + f" > {saved}",
             *([] if info.status is JobStatus.DELETED else [said(f"delete {info.name}")]),
             said(f"submit -f {saved}")]
    return "; to run it again: " + ", then ".join(steps)


def _notebook_next(client: Client, verb: str, info) -> str:
    """What a suspended or resumed notebook is for next, as `dtrain notebook NAME` says when it starts one:
    its URL (`notebook open`, which waits for a Running one's Jupyter), or the resume that starts it again."""
    if not info.spec.notebook:
        return ""
    def command(words: str) -> str:  # with -p / --backend where the defaults would look elsewhere
        return client.command_for(words, backend=info.backend, project=info.spec.project)

    if verb == "suspend":
        return f"; start it again with '{command(f'resume {info.name}')}'"
    return (f"; open it with '{command(f'notebook open {info.name}')}'"
            + ("" if info.status == JobStatus.RUNNING else " once it is Running"))

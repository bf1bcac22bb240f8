"""Notebook verbs: dtrain notebook NAME --pvc VOLUME:/home/jovyan, notebook list, notebook open NAME.

A notebook is a job (spec.notebook): `dtrain suspend NAME` stops it (Kubeflow's Stop), `dtrain delete NAME`
removes it, `dtrain list` shows it.
"""

from __future__ import annotations

import argparse
import difflib
import time

from dtrain.cli import format as fmt
from dtrain.cli.jobs import add_node_options, gpu_count, real
from dtrain.cli.listing import none_listed
from dtrain.cli.submit import dry_run, node_selector_of
from dtrain import JobStatus
from dtrain.client import Client
from dtrain.errors import SpecError
from dtrain.names import check_name, shown
from dtrain.spec import check_idle_timeout, notebook_spec, parse_pvc


class _AnyWord:
    """The actions' names, where any word passes argparse's choice check (it is a notebook name)."""

    def __init__(self, names: dict):
        self.names = names

    def __contains__(self, word) -> bool:
        return isinstance(word, str)

    def __iter__(self):
        return iter(self.names)

    def __getitem__(self, word: str):
        return self.names.get(word) or self.names["start"]


class _StartByDefault(argparse._SubParsersAction):
    """`dtrain notebook NAME ...` means `dtrain notebook start NAME ...`: a first word that names no
    action is a notebook name (a notebook called 'list' is started with 'notebook start list')."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.choices = _AnyWord(self._name_parser_map)

    def __call__(self, parser, namespace, values, option_string=None):
        if values and values[0] not in self._name_parser_map:
            refused = _not_a_name(values, list(self._name_parser_map))
            if refused:
                parser.error(refused)
            values = ["start", *values]
        super().__call__(parser, namespace, values, option_string)


# First words that name something to do, not a notebook: job verbs (a notebook is a job) and `ls`;
# `stop` is Kubeflow's Stop, which keeps the notebook: `dtrain suspend`.
_VERBS = {"delete": "delete", "stop": "suspend", "rm": "delete", "logs": "logs", "describe": "describe job",
          "ls": "notebook list"}


def _not_a_name(words: list[str], actions: list[str]) -> str | None:
    """Why `dtrain notebook WORD ...` does not start a notebook named WORD, or None when it does.

    A job verb, or a slip of an action or a verb (difflib: a ratio of 0.75 or more, a length within
    one: `lst`, `opne`, `delet`), is refused; a name only sharing letters with one (`mnist`,
    `opencv`) is not. Any name still starts with `dtrain notebook start NAME`."""
    word = words[0]
    name = words[1] if len(words) > 1 and not words[1].startswith("-") else "NAME"
    start = f"to start a notebook named {word}, use 'dtrain notebook start {word} ...'"
    if word in _VERBS:
        fix = _VERBS[word]
    else:
        close = (difflib.get_close_matches(word, actions, n=1, cutoff=0.75)
                 or difflib.get_close_matches(word, [v for v in _VERBS if len(v) > 2], n=1, cutoff=0.75))
        if not close or abs(len(close[0]) - len(word)) > 1:
            return None
        fix = f"notebook {close[0]}" if close[0] in actions else _VERBS[close[0]]
    if fix.startswith("notebook"):
        return f"did you mean 'dtrain {fix}'? ({start})"
    return f"a notebook is a job: did you mean 'dtrain {fix} {name}'? ({start})"


_START_FLAGS = (("--pvc",), ("-g", "--gpu"), ("--cpu",), ("--memory",), ("-i", "--image"), ("-p", "--project"),
                ("--backend",), ("--idle-timeout",), ("--node-selector",), ("--node-type",),
                ("--toleration",), ("--json",), ("--dry-run",))


class _AfterTheName(argparse.Action):
    """`dtrain notebook --pvc V:/M NAME`: argparse gave the flag to no action, then called the name
    an unrecognized argument; the flag goes after the name (or the action)."""

    def __call__(self, parser, namespace, values, option_string=None):
        parser.error(f"put {option_string} after the notebook's name (or the action): "
                     f"dtrain notebook NAME {option_string} ...")


def cmd_start(args, client: Client) -> int:
    fields = {k: getattr(args, k) for k in ("gpu", "cpu", "memory", "image", "project", "backend")
              if getattr(args, k) is not None}
    node_selector_of(args, fields)
    if args.idle_timeout is not None:
        fields["idle_timeout"] = check_idle_timeout(fmt.parse_duration(args.idle_timeout), args.idle_timeout)
    if "backend" not in fields:  # `dtrain --backend B notebook`, else the configured one, as `dtrain submit` does
        project = fields.get("project", client.default_project)
        fields["backend"] = getattr(args, "default_backend", None) or client.config.backend_for(project)
    hint = {"backend": fields["backend"], "project": fields.get("project")}  # a --pvc ./folder's copy-in hint
    volumes = [parse_pvc(v, cmd=lambda words: client.command_for(words, **hint))  # the first is where Jupyter
               for v in args.pvc or ()]  # works (notebook_spec)
    if args.dry_run:  # as `dtrain submit --dry-run`: the Notebook's YAML on Kubernetes, the stored spec locally
        return dry_run(notebook_spec(args.name, volumes=volumes, door="cli",
                                     **{"project": client.default_project, **fields}),
                       client, as_json=args.json)
    info = _judged(client, client.notebook(args.name, volumes=volumes, **fields))
    if args.json:  # as `dtrain submit --json`: the record once placed (Running) or queued
        print(fmt.record_text(info.to_dict(), args.json, indent=None))
        return 0
    name = info.name

    def hint(words: str) -> str:  # with -p for a notebook of another project: each works as written
        return "'" + client.command_for(words, backend=info.backend, project=info.spec.project) + "'"

    after = f"stop it with {hint(f'suspend {name}')}, delete it with {hint(f'delete {name}')}"
    if info.status == JobStatus.RUNNING:
        print(f"notebook '{name}' started (backend {info.backend}); open it with {hint(f'notebook open {name}')}, "
              f"{after}")
    else:  # queued (GPUs busy, a quota, older jobs first): it starts once they free, as `dtrain describe` says
        state = "queued, not started yet (Pending" if info.status == JobStatus.PENDING else f"{info.status.value} ("
        print(f"notebook '{name}' is {state}: {info.message or 'waiting to be scheduled'}; backend {info.backend}); follow "
              f"it with {hint(f'describe job {name}')} or {hint('notebook list')}, open it once Running with "
              f"{hint(f'notebook open {name}')}; {after}")
    return 0


VERDICT_S = 5.0  # how long `notebook start` waits for the local scheduler's first word on the new notebook


def _judged(client: Client, info):
    """The local notebook's record once its scheduler has placed it (Running) or said why it waits:
    the supervisor the submit started does that within a moment, after submit returned Pending
    ("queued: waiting for the scheduler"); after VERDICT_S the record as it is then. Elsewhere (a
    cluster's scheduler) the record submit returned."""
    first, deadline = info.message, time.monotonic() + VERDICT_S
    while (info.backend == "local" and info.status == JobStatus.PENDING and info.message == first
           and time.monotonic() < deadline):
        time.sleep(0.05)
        info = client.get(info.name, backend=info.backend)
    return info


def cmd_list(args, client: Client) -> int:
    """The notebooks `dtrain list` shows (the configured project's; -p one; -A all), Deleted ones hidden."""
    if args.project is not None:  # `-p "$PROJECT"` with the variable unset is a mistake, not the default
        check_name(args.project, "project")
    project = None if args.all_projects else (args.project or client.default_project)
    listed = client.list_notebooks(project=project)  # a typo in -p: NotFoundError
    fmt.warn(listed.notices)  # SageMaker: AWS failed, the --local notebooks are shown
    books = [b for b in listed if args.show_deleted or b.status.value != "Deleted"]
    if args.json:
        print(fmt.record_text([b.to_dict() for b in books], args.json))
        return 0
    if not books:  # a header alone reads as a failed listing: say so, and how to make one
        print(none_listed(args, client, project, what="notebooks", hidden=len(listed) - len(books),  # the dashboard's words
                          make="start", command="notebook start NAME --pvc VOLUME:/home/jovyan"))
        return 0
    # A volume the notebook created (--pvc CLASS:SIZE:MOUNT) by its name, the one a training job mounts
    # What it holds as started (--gpu, --cpu, --memory): "-" where it asked for no bound
    rows = [[b.name, b.status.value, fmt.age(b.created), b.spec.project,
             ", ".join(v.to_flag() for v in b.spec.resolved_volumes()) or "-", b.spec.gpu,
             "-" if b.spec.cpu is None else f"{b.spec.cpu:g}", b.spec.memory or "-"] for b in books]
    print(fmt.table(["NAME", "STATUS", "AGE", "PROJECT", "VOLUMES", "GPUs", "CPUs", "MEMORY"], rows))
    return 0


def cmd_open(args, client: Client) -> int:
    if args.project is not None:  # `-p "$PROJECT"` with the variable unset is a mistake, not the default
        check_name(args.project, "project")
    # Right after `notebook start` (Running) its Jupyter takes seconds to listen: wait for it, not refuse
    wait = fmt.parse_duration(args.wait)
    if wait is None or not 0 <= wait <= 3600:  # None: no duration (a number is refused as typed)
        raise SpecError(f"invalid --wait {shown(args.wait)}: use seconds from 0 to 3600 or a duration up to 1h, "
                        f"e.g. --wait 60 (or run 'dtrain notebook open' again)")
    print(client.notebook_url(args.name, project=args.project, wait=float(wait)))
    return 0


def register(sub) -> None:
    where = ("Jupyter's root folder, its working folder (where its terminals start) and its HOME are the first "
             "--pvc volume's mount path (Kubeflow's is /home/jovyan); without --pvc (local backend) it is a folder of the job's own (jobs/NAME/work "
             "in the dtrain home, kept by 'dtrain delete NAME' for the next notebook of that name); never the folder you start it from. A notebook is a job: stop it with "
             "'dtrain suspend NAME' (Kubeflow's Stop; 'dtrain resume NAME' starts it again), remove it with "
             "'dtrain delete NAME', read its log with 'dtrain logs NAME'. A notebook named like an action (list, "
             "open) is started with 'dtrain notebook start NAME'.")
    p = sub.add_parser("notebook", help="Jupyter on a volume, as an interactive job: start, list, open",
                       usage="dtrain notebook NAME --pvc VOLUME:/home/jovyan [--gpu N] [--cpu C] | "
                             "dtrain notebook {list,open} ...", description=where)
    for flags in _START_FLAGS:  # given before the name, they reached no action: say where they go
        p.add_argument(*flags, nargs="?", action=_AfterTheName, help=argparse.SUPPRESS)
    ns = p.add_subparsers(dest="action", required=True, metavar="{NAME,list,open}", action=_StartByDefault)
    c = ns.add_parser("start", prog="dtrain notebook start",
                      help="start a notebook (the default: 'dtrain notebook NAME ...')")
    c.add_argument("name", help="notebook name (lower-case letters, digits, '-')")
    c.add_argument("--pvc", action="append", metavar="VOLUME:MOUNT[:ro]",
                   help="volume to work on; the first one is Jupyter's root folder and HOME (repeat); without it, "
                        "a new empty folder of the job's own")
    c.add_argument("-g", "--gpu", type=gpu_count, help="whole GPUs (default 0)")
    c.add_argument("--cpu", type=real, help="CPU threads")
    c.add_argument("--memory", help="memory, e.g. 8Gi")
    c.add_argument("-i", "--image", help="notebook image (Kubernetes), e.g. a Kubeflow notebook-servers image")
    add_node_options(c)
    c.add_argument("--idle-timeout", metavar="DURATION",
                   help="stop the notebook (freeing its GPUs) when no kernel or terminal ran this long, "
                        "e.g. 1h (1m to 30d; default: never; local backend)")
    c.add_argument("-p", "--project", help="project (default: 'dtrain config project')")
    c.add_argument("--backend", choices=["local", "kubernetes"], help="where to run (default from config)")
    c.add_argument("--json", action="store_true", help="print the started notebook as one JSON object")
    c.add_argument("--dry-run", action="store_true",
                   help="print what would run and stop (local: the spec as stored; Kubernetes: the Notebook's YAML; "
                        "with --json, one JSON object a line)")
    c.set_defaults(handler=cmd_start)
    c = ns.add_parser("list", prog="dtrain notebook list", help="list notebooks")
    which = c.add_mutually_exclusive_group()  # as `dtrain list`: -A or -p, not both
    which.add_argument("-p", "--project", help="this project's notebooks (default: the configured project)")
    which.add_argument("-A", "--all-projects", action="store_true", help="notebooks of every project")
    c.add_argument("--show-deleted", action="store_true", help="also list deleted notebooks")
    c.add_argument("--json", action="store_true", help="print a JSON list")
    c.set_defaults(handler=cmd_list)
    c = ns.add_parser("open", prog="dtrain notebook open",
                      help="print the URL (with its token) to open in a browser")
    c.add_argument("name", help="the notebook")
    c.add_argument("-p", "--project", help="the notebook's project: its backend (config.yaml's project_backends), "
                                           "its namespace on Kubernetes (default: 'dtrain config project')")
    c.add_argument("--backend", dest="storage_backend", choices=["local", "kubernetes"],
                   help="the backend the notebook runs on (default from config)")
    c.add_argument("--wait", metavar="DURATION", default="60",
                   help="how long a Running notebook's Jupyter may take to serve before this gives up "
                        "(default 60s; 0: ask once); a queued or stopped notebook is refused at once")
    c.set_defaults(handler=cmd_open)

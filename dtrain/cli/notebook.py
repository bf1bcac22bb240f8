"""Notebook verbs: dtrain notebook NAME --pvc VOLUME:/home/jovyan/work, notebook list, notebook open NAME.

A notebook is a job (spec.notebook): `dtrain delete NAME` stops it, `dtrain list` shows it.
"""

from __future__ import annotations

import argparse
import json

from dtrain.cli import format as fmt
from dtrain.client import Client
from dtrain.spec import parse_pvc


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
            values = ["start", *values]
        super().__call__(parser, namespace, values, option_string)


def cmd_start(args, client: Client) -> int:
    fields = {k: getattr(args, k) for k in ("gpu", "cpu", "memory", "image", "project", "backend")
              if getattr(args, k) is not None}
    if isinstance(fields.get("cpu"), float) and fields["cpu"].is_integer():
        fields["cpu"] = int(fields["cpu"])
    info = client.notebook(args.name, volumes=[parse_pvc(v) for v in args.pvc or ()], **fields)
    print(f"notebook '{info.name}' started (backend {info.backend}); "
          f"open it with `dtrain notebook open {info.name}`, stop it with `dtrain delete {info.name}`")
    return 0


def cmd_list(args, client: Client) -> int:
    books = client.list_notebooks(project=args.project)
    if args.json:
        print(json.dumps([b.to_dict() for b in books], indent=2))
        return 0
    rows = [[b.name, b.status.value, fmt.age(b.created), b.spec.project,
             ", ".join(v.to_flag() for v in b.spec.volumes) or "-", b.spec.gpu] for b in books]
    print(fmt.table(["NAME", "STATUS", "AGE", "PROJECT", "VOLUMES", "GPUs"], rows))
    return 0


def cmd_open(args, client: Client) -> int:
    print(client.notebook_url(args.name))
    return 0


def register(sub) -> None:
    p = sub.add_parser("notebook", help="Jupyter on a volume, as an interactive job: start, list, open",
                       usage="dtrain notebook NAME --pvc VOLUME:/home/jovyan/work [--gpu N] [--cpu C] | "
                             "dtrain notebook {list,open} ...")
    ns = p.add_subparsers(dest="action", required=True, metavar="{NAME,list,open}", action=_StartByDefault)
    c = ns.add_parser("start", help="start a notebook (the default: 'dtrain notebook NAME ...')")
    c.add_argument("name", help="notebook name (lower-case letters, digits, '-')")
    c.add_argument("--pvc", action="append", metavar="VOLUME:MOUNT[:ro]",
                   help="volume to work on; the first one is Jupyter's root folder (repeat)")
    c.add_argument("-g", "--gpu", type=int, help="GPUs (0 allowed)")
    c.add_argument("--cpu", type=float, help="CPU threads")
    c.add_argument("--memory", help="memory, e.g. 8Gi")
    c.add_argument("-i", "--image", help="notebook image (Kubernetes), e.g. a Kubeflow notebook-servers image")
    c.add_argument("-p", "--project", help="project (default: 'dtrain config project')")
    c.add_argument("--backend", choices=["local", "kubernetes"], help="where to run (default from config)")
    c.set_defaults(handler=cmd_start)
    c = ns.add_parser("list", help="list notebooks")
    c.add_argument("-p", "--project", help="this project's notebooks")
    c.add_argument("--json", action="store_true", help="print a JSON list")
    c.set_defaults(handler=cmd_list)
    c = ns.add_parser("open", help="print the URL (with its token) to open in a browser")
    c.add_argument("name", help="the notebook")
    c.set_defaults(handler=cmd_open)

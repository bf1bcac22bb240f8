"""`dtrain pipeline list | compile | run`: the shipped Kubeflow pipelines (and a user's own)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dtrain.cli import format as fmt
from dtrain.client import Client
from dtrain.errors import JobFailedError, SpecError


def cmd_list(args, client: Client) -> int:
    from dtrain.pipelines import runner  # only pipeline commands need it (and KFP, lazily)

    infos = runner.list_pipelines()
    if args.json:
        print(fmt.record_text([{"name": i.name, "description": i.description,
                                "params": [vars(p) for p in i.params]} for i in infos], args.json))
        return 0
    for info in infos:
        print(f"{info.name}: {info.description}")
        print(fmt.table(["PARAMETER", "TYPE", "DEFAULT", "DESCRIPTION"],
                        [[p.name, p.type, "(required)" if p.required else repr(p.default), p.description]
                         for p in info.params]))
        print()
    return 0


def cmd_compile(args, client: Client) -> int:
    from dtrain.pipelines import runner  # only pipeline commands need it (and KFP, lazily)

    pipeline = runner.load(args.name, module=args.module)
    out = runner.compile_to(pipeline, args.output)
    form = "JSON" if out.suffix.lower() == ".json" else "YAML"  # KFP's compiler picks it by the suffix
    print(f"compiled pipeline '{pipeline.info.name}' to {out} (KFP IR {form}; submit it with kfp.Client)")
    return 0


def cmd_run(args, client: Client) -> int:
    from dtrain.pipelines import runner  # only pipeline commands need it (and KFP, lazily)

    pipeline = runner.load(args.name, module=args.module)
    params = _params(pipeline, args, client)
    root = Path(args.root) if args.root else client.home / "pipelines"
    try:
        result = runner.run(pipeline, params, home=client.home, root=root)
    except JobFailedError as err:
        print(f"dtrain: error: {err}", file=sys.stderr)
        return 1
    except runner.RunInterrupted as err:  # Ctrl-C or SIGTERM: the jobs the steps submitted go on
        print(f"dtrain: {err}", file=sys.stderr)
        return 130
    print(f"\npipeline '{result.pipeline}' succeeded; outputs in {result.run_dir}")
    print(fmt.table(["STEP", "OUTPUTS"], [[t.name, json.dumps(t.outputs, sort_keys=True)] for t in result.tasks]))
    print(f"each step's log: {result.run_dir}/STEP/{runner.STEP_LOG}")
    return 0


def _params(pipeline, args, client: Client) -> dict:
    """The run's arguments: --param's, with the backend the steps use from `dtrain --backend`, else from
    the default backend saved for the project their jobs go to ('dtrain config backend'), as submit takes
    it. A saved backend the pipeline cannot use is refused naming where it came from."""
    from dtrain.pipelines import runner

    saved, how = runner.saved_backend(client.config)
    saved = None if args.default_backend else saved
    items = runner.with_backend(pipeline, args.param or [], args.default_backend, saved=saved)
    try:
        return runner.parse_params(pipeline, items)
    except SpecError as err:
        # a shipped pipeline's refusal of the backend the saved default set (not one of its other refusals)
        refused = None if saved is None or items == (args.param or []) else \
            runner.saved_backend_refused(err, pipeline, saved, how, f"give --param {pipeline.backend_param}=BACKEND")
        if refused is None:
            raise
        raise refused from None


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("pipeline", help="Kubeflow pipelines: list, compile to KFP YAML, run here")
    verbs = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = verbs.add_parser("list", help="the shipped pipelines and their parameters")
    c.add_argument("--json", action="store_true", help="print a JSON list")
    c.set_defaults(handler=cmd_list)
    for verb, handler, help_ in (("compile", cmd_compile, "write the KFP IR YAML a KFP 2 server accepts"),
                                 ("run", cmd_run, "run on this machine with KFP's local runner")):
        c = verbs.add_parser(verb, help=help_)
        c.add_argument("name", nargs="?", help="a shipped pipeline (see 'dtrain pipeline list')")
        c.add_argument("--module", metavar="FILE.py:FUNC", help="your own @dsl.pipeline function instead")
        c.set_defaults(handler=handler)
        if verb == "compile":
            c.add_argument("-o", "--output", required=True, metavar="FILE.yaml",
                           help="where to write the compiled pipeline (KFP IR YAML; JSON for a .json file)")
        else:
            c.add_argument("--param", action="append", metavar="KEY=VALUE", help="a pipeline parameter (repeat)")
            c.add_argument("--root", help="where step outputs go (default $DTRAIN_HOME/pipelines)")

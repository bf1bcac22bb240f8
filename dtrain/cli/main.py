"""`dtrain`: the command line. Every verb calls the Python client; errors print one line, exit 2."""

from __future__ import annotations

import argparse
import contextlib
import importlib
import sys

from dtrain import __version__, db
from dtrain.cli import completion, jobs, notebook, pipeline, server, storage
from dtrain.cli.cluster import _add_nodes, _add_project, _labels_cell  # noqa: F401  (tests import _labels_cell here)
from dtrain.cli.config import _add_config
from dtrain.cli.usage import OTHER_VERBS, Parser, _past_job_noun, _top_abbreviation, unrecognized
from dtrain.client import Client
from dtrain.config import BACKENDS
from dtrain.errors import DtrainError, SpecError

# Workload commands: (group, verb) -> (module, function, help). The function is the module's
# own `main(argv)`, so the same code runs under plain torchrun as `python -m dtrain.workloads.<w>`
# without the platform. Their flags are parsed by that function's parser, imported only when the
# verb runs: importing every workload (torch) to build `dtrain`'s parser would slow every command.
WORKLOADS = {
    ("lanes", "prepare"): ("dtrain.workloads.lanes.prepare", "main", "download, check and preprocess TuSimple"),
    ("lanes", "synth"): ("dtrain.workloads.lanes.synth", "main", "write a synthetic TuSimple-format dataset"),
    ("lanes", "train"): ("dtrain.workloads.lanes.train", "main", "train SCNN (data parallel under torchrun)"),
    ("lanes", "predict"): ("dtrain.workloads.lanes.predict", "main", "predict lanes of a split, draw overlays"),
    ("lanes", "evaluate"): ("dtrain.workloads.lanes.metric", "main", "the official TuSimple metric of a submission"),
    ("cifar10", "train"): ("dtrain.workloads.cifar10.train", "main", "train the CIFAR10 reference CNN (DDP)"),
    ("cifar10", "synth"): ("dtrain.workloads.cifar10.data", "synth_main", "write a synthetic CIFAR10 dataset"),
    ("cifar10", "download"): ("dtrain.workloads.cifar10.download", "download_main",
                              "download, check and unpack the real CIFAR10 batches"),
    ("bench", "scaling"): ("dtrain.bench.scaling", "main", "the same training at 1..N processes, timed"),
}
GROUP_HELP = {"lanes": "SCNN lane detection on TuSimple", "cifar10": "the CIFAR10 DDP reference workload",
              "bench": "benchmarks run through the platform"}


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The `dtrain` parser; with a known `verb`, only that verb's section of it (argparse builds
    every sub-parser it is given, ~20 ms for all of them: a command pays only for its own)."""
    parser = Parser(prog="dtrain", description="Distributed training on one machine or a cluster.")
    parser.add_argument("--home", help="state folder (default $DTRAIN_HOME or ~/.dtrain)")
    parser.add_argument("--backend", dest="default_backend", choices=list(BACKENDS),
                        help="backend for this command (default from config), e.g. dtrain --backend sagemaker list")
    parser.add_argument("--version", action="version", version=f"dtrain {__version__}",
                        help="print dtrain's version and exit")
    sub = parser.add_subparsers(dest="verb", required=True, metavar="VERB")
    sections = [add for verbs, add in SECTIONS if verb in verbs] or [add for _, add in SECTIONS]
    for add in sections:
        add(sub)
    return parser


def verb_of(head: list[str]) -> str | None:
    """The verb of a command line, past the top-level options; None when a top-level flag
    (--help, --version, an abbreviation, a mistake) comes first: the whole parser answers."""
    i = 0
    while i < len(head):
        if head[i] in ("--home", "--backend"):
            i += 2
        elif head[i].startswith(("--home=", "--backend=")):
            i += 1
        else:
            return None if head[i].startswith("-") else head[i]
    return None


def _add_workloads(sub) -> None:
    groups = {}
    for (group, verb), (module, func, text) in WORKLOADS.items():
        if group not in groups:
            g = sub.add_parser(group, help=GROUP_HELP[group], description=GROUP_HELP[group])
            groups[group] = g.add_subparsers(dest="workload_verb", required=True, metavar="COMMAND")
        # No option of its own (prefix_chars that no flag uses): every word, --help included, goes
        # to the workload's parser, which prints its own help and errors.
        leaf = groups[group].add_parser(verb, help=text, add_help=False, prefix_chars="\0")
        leaf.add_argument("workload_argv", nargs=argparse.REMAINDER)
        leaf.set_defaults(handler=None, workload=(module, func))


def _completion(args, client) -> int:
    return completion.show(build_parser(), args.shell)  # every verb's parser: what the script completes


# The parser's sections in `dtrain --help` order: (the verbs it adds, the function adding them).
SECTIONS = (
    (("submit", "submit-dist", "submit-mpi", "list", "describe", "logs", "delete", "suspend", "resume", "artifacts",
      "exec", "bash", "wait"),
     jobs.register),
    (("volume", "snapshot"), storage.register),
    (("pipeline",), pipeline.register),
    (("server",), server.register),
    (("notebook",), notebook.register),
    (("config",), _add_config),
    (("project",), _add_project),
    (("nodes", "top"), _add_nodes),
    (tuple(GROUP_HELP), _add_workloads),
    (("completion",), lambda sub: completion.register(sub, _completion)),
)


def split_command(argv: list[str]) -> tuple[list[str], list[str]]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, []


def _reads_once(args) -> bool:
    """A command that only reads the state, once, and ends: it may read a database on a full disk
    (so `dtrain list` still shows which job filled it). Not `logs -f` or `wait`: they watch for changes.
    `snapshot verify` tidies leftovers first where it can write; on a full disk it only checks."""
    if args.verb in ("volume", "snapshot"):
        return getattr(args, "action", None) in ("list", "describe") + (("verify",) if args.verb == "snapshot" else ())
    return args.verb in ("list", "describe", "nodes", "top") or (args.verb == "logs" and not args.follow)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        head, command = split_command(argv)
        if verb_of(head) in ("volume", "snapshot"):  # no command to run: '--' ends the options, as argparse
            head, command = argv, []                  # reads it, so that a name '-x' meets its naming rule
        if said := _top_abbreviation(head):  # else `--back local list` read 'local' as the verb
            print(f"dtrain: error: unrecognized arguments: {said} (see 'dtrain --help')", file=sys.stderr)
            return 2
        if verb_of(head) in OTHER_VERBS:
            print(f"dtrain: error: no verb '{verb_of(head)}' here: {OTHER_VERBS[verb_of(head)]} "
                  f"(see 'dtrain --help')", file=sys.stderr)
            return 2
        args, extra = build_parser(verb_of(head)).parse_known_args(head)
        extra = _past_job_noun(args, extra)
        if extra:  # argparse would name the top parser's help and say nothing of '--'
            print(unrecognized(args, extra, head), file=sys.stderr)
            return 2
        if getattr(args, "workload", None):
            module, func = args.workload
            rest = args.workload_argv + (["--", *command] if "--" in argv else [])
            from dtrain.workloads.inputs import run_by_cli  # light; a hint names `dtrain cifar10 synth`

            with run_by_cli():
                return getattr(importlib.import_module(module), func)(rest) or 0
        with db.reads_only() if _reads_once(args) else contextlib.nullcontext():
            client = Client(home=args.home, backend=getattr(args, "storage_backend", None) or args.default_backend)
            client.door = "cli"  # a refusal names -p, not the SDK's project=
            if getattr(args, "takes_command", False):
                return args.handler(args, command, client, args.launcher_for)
            if command:
                fix = ": run a command with 'dtrain exec NAME -- COMMAND'" if args.verb == "bash" else ""
                raise SpecError(f"'dtrain {args.verb}' takes no command after '--'{fix}")
            return args.handler(args, client)
    except DtrainError as err:
        print(f"dtrain: error: {err}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        return 0
    except Exception as err:
        refused = db.machine_refused(err)
        if refused is None:
            raise
        print(f"dtrain: error: {refused}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

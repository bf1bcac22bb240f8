"""`dtrain`: the command line. Every verb calls the Python client; errors print one line, exit 2."""

from __future__ import annotations

import argparse
import difflib
import contextlib
import importlib
import json
import os
import re
import shlex
import sys

from dtrain import JobStatus, __version__, db
from dtrain.cli import format as fmt
from dtrain.cli import completion, jobs, notebook, pipeline, server, storage
from dtrain.client import Client
from dtrain.config import BACKENDS, section_numbers
from dtrain.errors import DtrainError, NotFoundError, SpecError
from dtrain.names import NAME_RULE, abbreviated, check_gpu_quota, counted, near_choice, require_project, shown
from dtrain.numbers import NUMBER_WORD_RE, NumberWord
from dtrain.spec import check_name, yaml_value

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


def cmd_config(args, client: Client) -> int:
    given = [k for k in (*dict.fromkeys(_SAGEMAKER_KEYS + _KUBERNETES_KEYS), "set", "unset") if getattr(args, k) is not None]
    flags = [f"--{k.replace('_', '-')}" for k in given]
    if args.what == "storage-class":
        return _config_storage_class(args, client, [g for g in flags if g != "--unset"])
    if args.what == "node-labels":
        return _config_node_labels(args, client, [g for g in flags if g not in ("--set", "--unset")])
    if args.what == "forget-backend":
        return _config_forget_backend(args, client, flags)
    if args.folder is not None:
        raise SpecError(f"'dtrain config {args.what}' takes one value, not {args.value!r} and {args.folder!r}; "
                        f"nothing was changed")
    sections = {"sagemaker": _SAGEMAKER_KEYS, "kubernetes": (*_KUBERNETES_KEYS, "set")}
    keys = sections.get(args.what, ())
    stray = [k for k in given if k not in keys and not (k == "unset" and keys)]
    if stray:  # else silently dropped: the user believes them saved
        owners = [w for w, ks in sections.items() if all(k in ks or k == "unset" for k in stray)] or list(sections)
        said = [f"--{k.replace('_', '-')}" for k in stray]
        raise SpecError(f"{', '.join(said)} {'is' if len(said) == 1 else 'are'} for "
                        f"{' or '.join(f'{chr(39)}dtrain config {w}{chr(39)}' for w in owners)}, "
                        f"not 'dtrain config {args.what}'; nothing was changed")
    # config.yaml's every Kubernetes setting, not only those with a flag (--set sets the others)
    unsettable = tuple(k.replace("_", "-") for k in (client.kubernetes_settings() if args.what == "kubernetes"
                                                     else keys or _SAGEMAKER_KEYS))
    if args.unset == []:  # `--unset` alone (nargs="*": a storage class's name may come before it)
        raise SpecError(f"--unset needs the settings to remove, e.g. --unset image (one of {', '.join(unsettable)})"
                        f"; nothing was changed")
    if args.unset is not None and (bad := [k for k in args.unset if k.replace("_", "-") not in unsettable]):
        what = "a Kubernetes" if args.what == "kubernetes" else "a SageMaker"
        raise SpecError(f"--unset {bad[0]!r}: not {what} setting; use one of {', '.join(unsettable)}")
    if args.project is not None and args.what != "backend":
        raise SpecError(f"-p/--project is for 'dtrain config backend' (a project's own backend), not 'dtrain config "
                        f"{args.what}'; nothing was changed")
    if args.what in ("sagemaker", "kubernetes"):
        return _config_settings(args, client, shown_only=not given)
    if args.value is None:  # as `git config KEY` and `gcloud config get project`: the current value, alone
        if args.what == "project":
            print(client.default_project)
        else:
            print(client.config.backend_for(args.project) if args.project else client.config.backend)
        return 0
    if args.what == "project":
        _set_default_project(client, args.value)
    else:
        client.set_default_backend(args.value, project=args.project)
        print(f"Backend '{args.value}' is now the default" + (f" for project '{args.project}'" if args.project else ""))
    return 0


def _config_settings(args, client: Client, *, shown_only: bool) -> int:
    """`config sagemaker` / `config kubernetes`: flags set settings, `--unset` removes them; without
    either, what is set (config.yaml left as it was)."""
    if args.value is not None:
        example = "--role ARN --bucket NAME --region R" if args.what == "sagemaker" else "--context NAME --namespace NS"
        raise SpecError(f"'dtrain config {args.what}' takes flags only, e.g. {example}")
    unset = [k.replace("-", "_") for k in args.unset or ()]
    if args.what == "sagemaker":
        if shown_only:
            client.sagemaker_config()  # a typo'd or bad setting is named, not shown as if it were in use
            settings = client.config.sagemaker
            print("SageMaker settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()) if settings else
                  "SageMaker is not configured: dtrain config sagemaker --role ARN --bucket NAME [--region R]")
            return 0
        settings = client.configure_sagemaker(unset=unset, **{k: getattr(args, k) for k in _SAGEMAKER_KEYS})
        print("SageMaker settings saved: " + ", ".join(f"{k}={v}" for k, v in settings.items()))
        return 0
    if shown_only:
        client.kubernetes_config()  # as for SageMaker: a bad setting is named, not shown as if in use
        settings = client.config.kubernetes
        print("Kubernetes settings: " + ", ".join(f"{k}={v}" for k, v in settings.items()) if settings else
              "Kubernetes settings: none (the kubeconfig's current context, namespace dtrain-PROJECT): "
              "dtrain config kubernetes --context NAME [--namespace NS]")
        return 0
    flagged = {k: getattr(args, k) for k in _KUBERNETES_KEYS if getattr(args, k) is not None}
    pairs = section_numbers("kubernetes", _set_pairs(args.set or ()))
    if twice := next((k for k in pairs if k in flagged), None):
        raise SpecError(f"{twice} is given both as --{twice.replace('_', '-')} and with --set: give one; "
                        f"nothing was changed")
    settings = client.configure_kubernetes(unset=unset, **flagged, **pairs)
    print("Kubernetes settings saved: " + (", ".join(f"{k}={v}" for k, v in settings.items()) or "none"))
    return 0


def _set_pairs(pairs) -> dict:
    """`--set KEY=VALUE ...`: VALUE read as config.yaml's `kubernetes: {KEY: VALUE}` reads it (29501 a
    number, false, [ReadWriteOnce] a list, a quoted '0' a string), then checked as the flags' values are."""
    out: dict = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        key = key.strip().replace("-", "_")
        if not sep or not key:
            raise SpecError(f"--set {pair!r}: give KEY=VALUE, e.g. --set master_port=29501; nothing was changed")
        if key in out:
            raise SpecError(f"--set {key} is given twice: give it once; nothing was changed")
        out[key] = yaml_value(value, key, "--set", fix_as="--set {}={}")
        if out[key] == value.strip() and NUMBER_WORD_RE.fullmatch(out[key]):  # unquoted 1e3: config.yaml's NumberWord
            out[key] = NumberWord(out[key])
        if out[key] is None:  # `--set context=`: nothing to save, which configure_kubernetes would drop unsaid
            raise SpecError(f"--set {key}= gives no value: give one, or remove the saved one with "
                            f"--unset {key.replace('_', '-')}; nothing was changed")
    return out


_SAGEMAKER_KEYS = ("role", "bucket", "region", "prefix", "image", "instance_type", "subnets", "security_groups")
# The Kubernetes settings a flag sets (config.yaml's `kubernetes:` takes every KubernetesConfig field)
_KUBERNETES_KEYS = ("namespace", "context", "kubeconfig", "image", "notebook_image", "scheduler_name", "gpus_per_node",
                    "trainer")


def _config_forget_backend(args, client: Client, flags: list[str]) -> int:
    """`config forget-backend NAME`: `list -A` no longer asks a backend that only a `submit --backend`
    made it ask (state.db's sent_to); its jobs stay, `dtrain --backend NAME list` reaches them."""
    if stray := flags + (["-p"] if args.project is not None else []):
        raise SpecError(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} not for 'dtrain config "
                        f"forget-backend', which takes a backend, e.g. dtrain config forget-backend kubernetes")
    if args.value is None or args.folder is not None:
        raise SpecError("give one backend to forget, e.g. dtrain config forget-backend kubernetes")
    still = client.forget_backend(args.value)
    print(f"Forgot backend {args.value}: 'dtrain list -A' no longer asks it for the jobs sent there; its jobs are "
          f"not touched ('dtrain --backend {args.value} list' lists them)")
    if still:
        print(f"It is still asked as {' and as '.join(still)}")
    return 0


def _config_node_labels(args, client: Client, flags: list[str]) -> int:
    """`config node-labels [--set KEY=VALUE ...] [--unset KEY ...]`: config.yaml's node_labels, this
    machine's labels beside the kubelet's own (what a local job's --node-selector / --node-type match)."""
    if flags or args.project is not None or args.value is not None:
        stray = flags + ["-p/--project"] * (args.project is not None) + [repr(args.value)] * (args.value is not None)
        raise SpecError(f"{', '.join(stray)} {'is' if len(stray) == 1 else 'are'} not for 'dtrain config node-labels', "
                        f"which takes --set KEY=VALUE and --unset KEY, e.g. dtrain config node-labels --set "
                        f"run.ai/type=dgx-a100; nothing was changed")
    if args.unset == []:
        raise SpecError("--unset needs the labels to remove, e.g. dtrain config node-labels --unset run.ai/type; "
                        "nothing was changed")
    if args.set is None and args.unset is None:
        labels = client.config.node_labels
        print("node labels: " + ", ".join(f"{k}={v}" for k, v in labels.items()) if labels else
              "no node labels besides this machine's own ('dtrain nodes --json'): dtrain config node-labels --set "
              "KEY=VALUE, e.g. --set run.ai/type=dgx-a100")
        return 0
    given: dict[str, str] = {}
    for pair in args.set or ():
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise SpecError(f"--set {shown(pair)}: give KEY=VALUE, e.g. --set run.ai/type=dgx-a100; "
                            f"nothing was changed")
        if key in given:
            raise SpecError(f"--set {key} is given twice: give it once; nothing was changed")
        given[key] = value
    labels = client.configure_node_labels(given, unset=args.unset or ())
    print("node labels saved: " + (", ".join(f"{k}={v}" for k, v in labels.items()) or "none"))
    return 0


def _config_storage_class(args, client: Client, flags: list[str]) -> int:
    """`config storage-class [NAME [FOLDER]]`, `--unset NAME...`: config.yaml's storage_classes, as
    `config project` shows and sets the default project."""
    if flags or args.project is not None:
        flags += ["-p/--project"] if args.project is not None else []
        raise SpecError(f"{', '.join(flags)} {'is' if len(flags) == 1 else 'are'} not for 'dtrain config "
                        f"storage-class'; nothing was changed")
    if args.unset is not None:  # `--unset fast` or, as git's flags go anywhere, `fast --unset`
        names = [n for n in (args.value, args.folder) if n is not None] + args.unset
        if not names:
            raise SpecError("'dtrain config storage-class --unset' needs the classes to remove, e.g. "
                            "dtrain config storage-class --unset fast; nothing was changed")
        folders = dict(client.config.storage_classes)
        held = client.unset_storage_classes(names)
        for name in dict.fromkeys(names):
            print(f"storage class '{name}' removed")
            if held.get(name):  # as kubectl warns: what the removal leaves behind, and how to undo it
                print(f"dtrain: warning: storage class '{name}' still holds {counted(held[name], 'volume')}: they stay in "
                      f"{folders[name]} and keep working (jobs mount them; snapshots and in-place restores work; "
                      f"'dtrain volume update VOLUME --class local' moves one out), but no new volume can go there "
                      f"until the class is named again: dtrain config storage-class {name} {folders[name]}",
                      file=sys.stderr)
        return 0
    classes = client.config.storage_classes
    if client.config_problem is not None and args.folder is None:  # shown as it is, to repair: what is wrong, how
        print(f"dtrain: warning: {client.config_problem}", file=sys.stderr)
    if args.value is None:
        print("\n".join(f"{n}: {r}" for n, r in classes.items()) if classes else
              "no storage classes besides 'local': dtrain config storage-class NAME FOLDER")
        return 0
    if args.folder is None:  # as `config project`: the value alone
        if args.value not in classes:
            raise NotFoundError(f"no storage class {args.value!r} in {client.home / 'config.yaml'}"
                                + (f" (it has {', '.join(classes)})" if classes else "")
                                + f": dtrain config storage-class {args.value} FOLDER")
        print(classes[args.value])
        return 0
    old = classes.get(args.value)
    held = 0 if old is None or client.config_problem is not None else \
        next((c.volumes for c in client.backend("local").list_storage_classes() if c.name == args.value), 0)
    root = client.set_storage_class(args.value, args.folder)
    print(f"storage class '{args.value}' is {root} (dtrain volume classes shows whether volumes can go there)")
    if held and os.path.realpath(old) != os.path.realpath(root):  # the same folder spelled anew moves nothing
        they = ("stays", "keeps") if held == 1 else ("stay", "keep")
        print(f"dtrain: warning: the {counted(held, 'volume')} of storage class '{args.value}' {they[0]} in {old} and "
              f"{they[1]} working; "
              f"new ones go to {root}, and 'dtrain volume update VOLUME --class {args.value}' moves one there",
              file=sys.stderr)
    return 0


def _set_default_project(client: Client, name: str) -> None:
    if name:  # a name no project can have: its rule (with the value cut short), not "create it first"
        check_name(name, "project")
    require_project(name, [p.name for p in client.list_projects()])
    client.set_default_project(name)
    print(f"Project '{name}' has been set as the default project")


def cmd_project(args, client: Client) -> int:
    if args.action == "set":  # Run:AI's newer spelling of `config project`
        _set_default_project(client, args.name)
        return 0
    if args.action == "create":
        existed = client.has_project(args.name)
        if existed and args.gpu_quota is None and not args.no_gpu_quota:
            print(f"project '{args.name}' already exists (unchanged)")
            return 0
        if args.gpu_quota is not None:
            check_gpu_quota(args.gpu_quota)  # named as the flag (the SDK names its argument)
        client.create_project(args.name, gpu_quota=args.gpu_quota, no_gpu_quota=args.no_gpu_quota)
        quota = f" with a GPU quota of {args.gpu_quota}" if args.gpu_quota is not None else ""
        now = "no GPU quota now" if args.no_gpu_quota else f"a GPU quota of {args.gpu_quota} now"
        print(f"project '{args.name}' " + (f"already exists; it has {now}" if existed else f"created{quota}")
              + _quota_notes(client, args.name, args.gpu_quota, existed))
        return 0
    projects = client.list_projects()
    fmt.warn(projects.notices)  # a backend that did not answer, a GPU quota or pods Kubernetes did not let us read
    if args.json:
        print(json.dumps([p.to_dict() for p in projects], indent=2))
        return 0
    default = client.default_project
    rows = [[p.name + (" (default)" if p.name == default else ""),
             "-" if p.gpu_quota is None else p.gpu_quota, p.gpus_allocated, p.jobs] for p in projects]
    print(fmt.table(["PROJECT", "GPU QUOTA", "GPUs ALLOCATED", "JOBS"], rows))
    return 0


def cmd_nodes(args, client: Client) -> int:
    if args.what in ("job", "jobs"):  # `runai top job`: the configured project's jobs, as `dtrain list` shows them
        return jobs.cmd_list(argparse.Namespace(what="jobs", project=None, all_projects=False, show_deleted=False,
                                                selector=None, json=args.json,
                                                default_backend=args.default_backend), client)
    nodes = client.nodes()
    fmt.warn(nodes.notices)  # Kubernetes: pods this account may not list (GPUs allocated count some or none)
    if args.json:
        print(json.dumps([n.to_dict() for n in nodes], indent=2))
        return 0
    print(fmt.table(["NODE", "GPUs Allocatable", "GPUs Allocated", "CPUs", "MEMORY", "LABELS"],
                    [[n.name, n.gpus_allocatable, n.gpus_allocated, n.cpus or "-", fmt.size(n.memory),
                      _labels_cell(n.labels)] for n in nodes]))
    gpus = [(n.name, g) for n in nodes for g in n.gpus]
    if gpus:
        print()
        print(fmt.table(["NODE", "GPU", "NAME", "JOB", "UTILIZATION", "MEMORY USED / TOTAL"],
                        [[n, g.index, g.name or "-", _holder(g),
                          "-" if g.utilization is None else f"{g.utilization:.0f}%",
                          f"{fmt.size(g.memory_used)} / {fmt.size(g.memory_total)}"] for n, g in gpus]))
    return 0


SHOWN_LABELS = 3  # a node's labels in the table; `nodes --json` has them all


def _labels_cell(labels) -> str:
    """A node's labels that tell it apart, as --node-selector takes them: those a person or a tool gave it
    (run.ai/type, nvidia.com/gpu.product), not the kubelet's own (kubernetes.io/hostname, arch, os,
    node.kubernetes.io/instance-type: every node has them); SHOWN_LABELS at most, then how many more."""
    def kubelets(key: str) -> bool:
        prefix = key.partition("/")[0] if "/" in key else ""
        return any(prefix == d or prefix.endswith("." + d) for d in ("kubernetes.io", "k8s.io"))
    own = sorted(f"{k}={v}" for k, v in labels.items() if not kubelets(k))
    more = f" (+{len(own) - SHOWN_LABELS} more)" if len(own) > SHOWN_LABELS else ""
    return ",".join(own[:SHOWN_LABELS]) + more if own else "-"


def _holder(gpu) -> str:
    """A GPU's JOB column: the dtrain job holding it, another workload (its pod), unknown, or '-' (free)."""
    if gpu.job:
        return gpu.job
    if gpu.held_by:
        return f"another workload ({gpu.held_by})"
    return "unknown" if gpu.unknown else "-"


MAX_USAGE_ERROR = 400  # characters of an argparse message shown


class Parser(argparse.ArgumentParser):
    """argparse, with usage errors on one line like every other dtrain error (exit 2), and a word
    starting with '-' and a digit read as a value in every verb (see `jobs.NEGATIVE_VALUE`)."""

    def __init__(self, *args, **kwargs):
        # No abbreviations, as kubectl's and runai's flags (pflag): `volume update x --ti` was refused as
        # ambiguous (--timeout, --tier), and a flag added later would turn a working one ambiguous too
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)
        self._negative_number_matcher = jobs.NEGATIVE_VALUE  # sub-parsers are made of this class too

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)  # this (sub-)parser's words, for error()
        parsed, extra = super().parse_known_args(args, namespace)
        stray = self._stray_among(parsed, extra)
        if stray is not None:  # `delete -x`: optional names, so argparse left '-x' over as unrecognized
            self.error(self._not_a_name(stray))
        if not hasattr(parsed, "options_known"):  # the innermost (sub-)parser's, the one that read the flags
            parsed.options_known = self._long_options()
        return parsed, extra

    def error(self, message: str):
        stray = self._stray_name(message)
        if stray is not None:  # `volume create -x`: argparse said only that the name was missing
            message = self._not_a_name(stray)
        elif message.startswith("the following arguments are required: ") and (unknown := self._unknown_given()):
            # `volume update work --tier fast`, `artifacts JOB --dest d`: the flag typed in place of the
            # required one went unsaid, as if nothing had been given
            hint = abbreviated(unknown, self._long_options())
            near = difflib.get_close_matches(unknown.split("=", 1)[0], self._long_options(), n=1, cutoff=0.75)
            hint = hint or (f"did you mean {near[0]}?" if near else "")
            message = f"unrecognized arguments: {unknown}{f' ({hint})' if hint else ''}; {message}"
        elif near := near_choice(message):  # `dtrain sumbit`: the word meant, not a list of 25 verbs
            message = near
        elif message.endswith(": expected one argument") and (dashed := self._dashed_value(message)):
            option, word = dashed  # `--name -x`: argparse took '-x' for an option and the value as missing
            message += f" ({shown(word)} begins with '-', so it was read as an option: give it as {option}={word})"
        if len(message) > MAX_USAGE_ERROR:  # argparse repeats what it did not take, whatever its size
            message = message[:MAX_USAGE_ERROR] + "..."
        self.exit(2, f"{self.prog}: error: {message} (see '{self.prog} --help')\n")

    def _dashed_value(self, message: str) -> tuple[str, str] | None:
        """The option and the word after it that argparse read as an option, for "argument --to:
        expected one argument": a value beginning with '-' is given as --to=-x."""
        names = message.removeprefix("argument ").removesuffix(": expected one argument").split("/")
        given = getattr(self, "_given", [])
        for option, word in zip(given, given[1:]):
            if option in names and self._unknown_option(word):
                return option, word
        return None

    def _stray_name(self, message: str) -> str | None:
        """The word given for a missing name positional (one without choices: every verb's job, volume or
        snapshot; `notebook`'s NAME-or-action, whose choices take any word) that argparse read as an
        unknown option: '-x' before any '--'."""
        head, _, missing = message.partition("the following arguments are required: ")
        names = {a.metavar or a.dest for a in self._actions
                 if not a.option_strings and (a.choices is None or "\0" in a.choices)}  # no list holds "\0"
        if head or not names & set(missing.split(", ")):
            return None
        return self._unknown_given()

    def _not_a_name(self, word: str) -> str:
        return f"{shown(word)} is neither an option of '{self.prog}' nor a name: names are {NAME_RULE}"

    def _stray_among(self, parsed, extra: list[str]) -> str | None:
        """A word left over that was meant as a name, for verbs whose names are optional or several
        (`delete`, `suspend`, `wait`, `snapshot verify`): '-x' with one '-' before any '--', where a
        name could still go (a name list, or an optional name not given). A '--word' is left to the
        'unrecognized arguments' line: it is an option's spelling, and that line has the verb's hints."""
        takes = any(not a.option_strings and a.choices is None and a.dest != "what"  # `list jobs`: no name
                    and (a.nargs in ("*", "+") or (a.nargs == "?" and getattr(parsed, a.dest, None) is None))
                    for a in self._actions)
        given = self._head()
        return next((w for w in extra if takes and w in given and not w.startswith("--")
                     and self._unknown_option(w)), None)

    def _unknown_given(self) -> str | None:
        """The first word before any '--' that argparse would read as an option and that is none of this parser's."""
        return next((w for w in self._head() if self._unknown_option(w)), None)

    def _head(self) -> list[str]:
        """This (sub-)parser's words before any '--' (after it: the command's own)."""
        given = getattr(self, "_given", [])
        return given[:given.index("--")] if "--" in given else given

    def _long_options(self) -> list[str]:
        return sorted(o for o in self._option_string_actions if o.startswith("--"))

    def _unknown_option(self, word: str) -> bool:
        """A word argparse reads as an option (it begins with '-') that is none of this parser's."""
        option = word.split("=", 1)[0]
        return (word.startswith("-") and word not in ("-", "--") and not self._negative_number_matcher.match(word)
                and option not in self._option_string_actions)


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


def _add_config(sub) -> None:
    p = sub.add_parser("config", help="show or set the default project or backend; SageMaker and Kubernetes settings")
    p.add_argument("what", choices=["project", "backend", "sagemaker", "kubernetes", "storage-class", "node-labels",
                                    "forget-backend"],
                   help="what to show or set; 'forget-backend NAME': 'list -A' stops asking a backend that a "
                        "submit --backend sent jobs to (a cluster that is gone)")
    p.add_argument("value", nargs="?",
                   help="a project that exists ('dtrain project list'), or local / kubernetes / sagemaker, or a "
                        "storage class's name; without it, the current one is printed")
    p.add_argument("folder", nargs="?",
                   help="with 'storage-class NAME': the class's root folder (made absolute), e.g. /nvme/dtrain")
    p.add_argument("-p", "--project", help="with 'backend': only for this project")
    g = p.add_argument_group("with 'sagemaker' (credentials come from boto3's chain and are never stored)")
    g.add_argument("--role", help="IAM role ARN SageMaker assumes")
    g.add_argument("--bucket", help="S3 bucket for code, checkpoints and models")
    g.add_argument("--region", help="AWS region, e.g. us-east-1")
    g.add_argument("--prefix", help="S3 key prefix (default dtrain)")
    g.add_argument("--image", help="training image URI (default: the AWS PyTorch training image); with "
                                   "'kubernetes': the image of jobs that give no --image")
    g.add_argument("--instance-type", help="default instance type, e.g. ml.m5.xlarge")
    g.add_argument("--subnets", nargs="+", metavar="SUBNET", help="VPC subnets (EFS/FSx channels need a VPC)")
    g.add_argument("--security-groups", nargs="+", metavar="SG", help="VPC security groups")
    k = p.add_argument_group("with 'kubernetes' (config.yaml's kubernetes: holds the others; --image as above)")
    k.add_argument("--namespace", help="one namespace for every project (default: dtrain-PROJECT)")
    k.add_argument("--context", help="kubeconfig context (default: the current one, or in-cluster config)")
    k.add_argument("--kubeconfig", metavar="FILE", help="kubeconfig file (default: $KUBECONFIG or ~/.kube/config)")
    k.add_argument("--notebook-image", metavar="IMAGE",
                   help="the image of notebooks that give no --image (--image is the jobs'), a Kubeflow "
                        "notebook-server image, e.g. kubeflownotebookswg/jupyter-pytorch-full:v1.9.2")
    k.add_argument("--scheduler-name", help="pods' schedulerName, e.g. runai-scheduler")
    k.add_argument("--gpus-per-node", type=int, metavar="N", help="GPUs of one node: GPU jobs pack processes per pod")
    k.add_argument("--trainer", help="v1: PyTorchJob/MPIJob (Training Operator), v2: TrainJob (Trainer v2)")
    k.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="any other setting of config.yaml's kubernetes:, VALUE as YAML reads it, e.g. --set "
                        "master_port=29501 --set access_modes=[ReadWriteOnce] (repeat it for several); with "
                        "'node-labels': a label of this machine, e.g. --set run.ai/type=dgx-a100")
    g.add_argument("--unset", nargs="*", metavar="SETTING",
                   help="remove saved settings, e.g. --unset subnets security-groups (no VPC) or --unset image; "
                        "with 'kubernetes': e.g. --unset namespace; with 'storage-class': remove classes, e.g. "
                        "--unset fast; with 'node-labels': remove labels, e.g. --unset run.ai/type")
    p.set_defaults(handler=cmd_config)


def _quota_notes(client: Client, name: str, quota: int | None, existed: bool) -> str:
    """What a quota just set means, from one read of the projects after it."""
    if not quota and not (existed and quota is not None):
        return ""
    try:
        projects = client.list_projects()
    except DtrainError:  # the quota is set; an account that may not read the projects' jobs misses only the notes
        return ""
    return ((_over_new_quota(client, projects, name, quota) if existed else "")
            + (_quotas_past_the_gpus(client, projects) if quota else ""))


def _over_new_quota(client: Client, projects, name: str, quota: int) -> str:
    """What a quota lowered below the project's use means, said when it is set (else the user
    learns it from a job that never starts): nothing running is stopped, and a queued job that
    needs more than the new quota waits until it is raised."""
    this = next((p for p in projects if p.name == name), None)
    held = this.gpus_allocated if this is not None else 0
    # the local scheduler preempts jobs of a project over its quota (scheduler.py); a cluster does not
    preempted = (", or until an in-quota job of another project needs their GPUs: the most recently "
                 "started over the quota are preempted then" if this is not None and this.backend == "local" else "")
    note = (f"; its running jobs hold {counted(held, 'GPU')}, more than that: they keep them until they end{preempted} "
            f"(nothing is stopped now), and its queued jobs wait until fewer are in use") if held > quota else ""
    never = [j.name for j in client.list(project=name, show_deleted=False)
             if j.status == JobStatus.PENDING and j.spec.gpus_requested > quota]
    if never:
        note += (f"; queued {'job' if len(never) == 1 else 'jobs'} {', '.join(never)} "
                 f"need{'s' if len(never) == 1 else ''} more than {counted(quota, 'GPU')} and start only once it "
                 f"is raised, or once deleted and submitted with fewer")
    return note


def _quotas_past_the_gpus(client: Client, projects) -> str:
    """Quotas that add up to more GPUs than this machine has promise what it cannot keep: each
    project may wait for GPUs within its quota while another's jobs hold them (the scheduler orders
    in-quota jobs before over-quota ones, not one quota project before another). Said when a quota
    is set, as Run:AI asks before over-subscribing; the local backend only (a cluster's quotas
    count its nodes, which it may add)."""
    if client.backend().name != "local":
        return ""
    total = sum(p.gpu_quota or 0 for p in projects)
    gpus = sum(n.gpus_allocatable for n in client.nodes())
    return (f"; the projects' GPU quotas now add up to {total}, more than this machine's {gpus} GPUs: a project "
            f"may wait for GPUs within its quota while another's jobs hold them (lower a quota with "
            f"'dtrain project create NAME --gpu-quota N')") if total > gpus else ""


def _add_project(sub) -> None:
    p = sub.add_parser("project", help="create, list and set projects (GPU quotas, the default one)")
    ps = p.add_subparsers(dest="action", required=True, metavar="ACTION")
    c = ps.add_parser("create", help="create a project, or change its GPU quota")
    c.add_argument("name", help="project name (lower-case letters, digits, '-')")
    quota = c.add_mutually_exclusive_group()
    quota.add_argument("--gpu-quota", type=jobs.whole_number, help="GPUs the project's running jobs may hold together")
    quota.add_argument("--no-gpu-quota", action="store_true", help="remove the project's GPU quota")
    c = ps.add_parser("set", help="make a project the default (as 'dtrain config project NAME')")
    c.add_argument("name", help="a project that exists")
    c = ps.add_parser("list", help="projects, quotas, GPUs in use, jobs")
    c.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(handler=cmd_project)


def _add_nodes(sub) -> None:
    for verb, text in (("nodes", "nodes and their GPUs: allocation, utilization, memory"),
                       ("top", "alias of 'nodes': the GPU dashboard")):
        p = sub.add_parser(verb, help=text)
        # Run:AI's `runai top node` (and kubectl's `top node`) name the kind: taken, as `list jobs` is;
        # `runai top job` lists the jobs with the GPUs they hold: `dtrain list`'s table
        jobs_too = verb == "top"
        p.add_argument("what", nargs="?", choices=("node", "nodes", *(("job", "jobs") if jobs_too else ())),
                       metavar="node|job" if jobs_too else "node",
                       help="optional, as in Run:AI's 'runai top node'" + (
                           "; job: the jobs with their GPUs Allocated (Requested), as 'dtrain list' "
                           "(which takes -p, -A, -l)" if jobs_too else ""))
        p.add_argument("--json", action="store_true", help="print a JSON list")
        p.set_defaults(handler=cmd_nodes)


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


# Where a verb's command goes, for the words argparse did not take.
_COMMAND_FORMS = {"submit": "dtrain submit NAME [options] -- COMMAND",
                  "submit-dist": "dtrain submit-dist NAME --processes N [options] -- COMMAND",
                  "submit-mpi": "dtrain submit-mpi NAME --processes N [options] -- COMMAND",
                  "exec": "dtrain exec NAME [--rank R] -- COMMAND"}


_JOB_VERBS = ("logs", "artifacts", "bash", *_COMMAND_FORMS)  # verbs taking one job's name
# Those of them that take Run:AI's noun before it (`logs job X`, as `describe job X`); not the submit
# verbs, whose name is a new job's (Run:AI's `submit` takes no noun)
_NOUN_VERBS = ("logs", "artifacts", "exec", "bash")


def _past_job_noun(args, extra: list[str]) -> list[str]:
    """`dtrain logs job X` (Run:AI's `runai describe job X` habit, which describe, delete, wait, suspend
    and resume take): argparse read 'job' as the name and left X over; X is the name. `logs job` alone
    is the job named 'job', as `describe job` is."""
    if (args.verb in _NOUN_VERBS and getattr(args, "name", None) in jobs.JOB_NOUNS and extra
            and not extra[0].startswith("-")):
        args.name = extra[0]
        return extra[1:]
    return extra


def _flag_hint(args, extra: list[str]) -> str:
    """'; <what to type>' for the first unknown flag that is Run:AI's or close to one of the verb's own
    (`--proceses 2`, whose '2' made the hint say that the command goes after '--'), else ''."""
    for word in extra:
        flag = word.split("=", 1)[0]
        if not flag.startswith("-") or jobs.NEGATIVE_VALUE.match(word) or flag in ("-", "--"):
            continue
        if args.verb in _COMMAND_FORMS and args.verb != "exec" and flag in jobs.RUNAI_FLAGS:
            return f"; {flag} is Run:AI's: {jobs.RUNAI_FLAGS[flag].format(verb=args.verb)}"
        if args.verb in _COMMAND_FORMS and args.verb != "exec" and flag in jobs.LAUNCHER_FLAGS:
            form = _COMMAND_FORMS["submit-mpi" if args.verb == "submit-mpi" else "submit-dist"]
            return f"; {flag} is {jobs.LAUNCHER_FLAGS[flag]}'s: give --processes N and it is started for you ({form})"
        if whole := abbreviated(word, getattr(args, "options_known", [])):
            return f"; {whole}"
        near = difflib.get_close_matches(flag, getattr(args, "options_known", []), n=1, cutoff=0.75)
        if near:
            return f"; did you mean {near[0]}?"
    return ""


def _top_abbreviation(head: list[str]) -> str | None:
    """'--back (flags are not abbreviated: ...)' for a start of a top-level flag before the verb."""
    i = 0
    while i < len(head) and head[i].startswith("--"):
        if head[i] in ("--home", "--backend"):
            i += 2
            continue
        if hint := abbreviated(head[i], ["--backend", "--help", "--home", "--version"]):
            return f"{head[i]} ({hint})"
        i += 1
    return None


def _backend_first(head: list[str], extra: list[str]) -> str | None:
    """`head` (a command line's words before '--') with the --backend that the verb did not take
    (`extra` holds it) moved before the verb, where the top parser takes it; None without one."""
    for i, word in enumerate(head):
        if word.split("=", 1)[0] == "--backend" and word in extra:
            taken = 1 if "=" in word or i + 1 == len(head) else 2
            given = head[i:i + taken] if taken == 2 or "=" in word else [word, "BACKEND"]
            moved = given + head[:i] + head[i + taken:]
            return " ".join(shlex.quote(w) for w in moved)[:MAX_USAGE_ERROR]
    return None


def unrecognized(args, extra: list[str], head: list[str] | None = None) -> str:
    """The one line for words no option of the verb takes, naming the verb's own help; a word
    that is not an option on a verb that runs a command is most likely that command, given
    without '--' (`dtrain submit train python train.py`)."""
    prog = " ".join(["dtrain", args.verb, *([args.action] if isinstance(getattr(args, "action", None), str) else [])])
    words = " ".join(extra)
    if len(words) > MAX_USAGE_ERROR:
        words = words[:MAX_USAGE_ERROR] + "..."
    hint = ""
    if moved := _backend_first(head or [], extra):  # submit, volume and snapshot take it after the verb
        hint = f"; '{prog}' takes --backend before the verb: dtrain {moved}"
    elif args.verb in _JOB_VERBS and getattr(args, "name", None) in ("job", "jobs") and not extra[0].startswith("-"):
        hint = f"; '{prog}' takes the job's name alone: {prog} {extra[0][:60]}"  # Run:AI's `describe job X`
    elif args.verb == "submit" and {"--processes", "--launcher"} & {w.split("=", 1)[0] for w in extra}:
        hint = f"; a job of several processes is submitted with {_COMMAND_FORMS['submit-dist']}"
    elif args.verb == "exec" and {"-i", "-t", "-it", "-ti", "--stdin", "--tty"} & set(extra):
        hint = ("; 'dtrain exec' takes no -i/-t (kubectl's, Run:AI's): locally the command always reads this terminal, "
                "so drop them: dtrain exec NAME -- bash")
    elif flag_hint := _flag_hint(args, extra):
        hint = flag_hint
    elif args.verb in _COMMAND_FORMS and any(not w.startswith("-") for w in extra):
        hint = f"; the command goes after '--': {_COMMAND_FORMS[args.verb]}"
    return f"{prog}: error: unrecognized arguments: {words}{hint} (see '{prog} --help')"


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


# Verbs of Run:AI's and kubectl's CLIs that dtrain spells otherwise: named in one line, not argparse's list
OTHER_VERBS = {
    "attach": "follow a job's output with 'dtrain logs JOB -f', or open a shell with 'dtrain bash JOB'",
    "get": "list with 'dtrain list' (jobs), 'dtrain volume list' or 'dtrain snapshot list'",
    "status": "see a job's status with 'dtrain describe job JOB' or 'dtrain list'",
    "stop": "stop a job for now with 'dtrain suspend JOB' (it goes on with 'dtrain resume JOB'), or for good with "
            "'dtrain delete JOB'",
    "kill": "stop a job with 'dtrain delete JOB'",
    "rm": "delete a job with 'dtrain delete JOB'",
    "run": "submit a job with 'dtrain submit JOB -- COMMAND'",
    "apply": "submit a job file with 'dtrain submit -f FILE'",
    "create": "submit a job with 'dtrain submit', make a volume with 'dtrain volume create' or a project with "
              "'dtrain project create'",
    "cp": "copy a job's model folder with 'dtrain artifacts JOB --to DIR'",
    "version": "print the version with 'dtrain --version'",
}


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

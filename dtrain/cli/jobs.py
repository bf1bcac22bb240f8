"""Job verbs, Run:AI style: submit, submit-dist, submit-mpi, list, describe, logs, delete, suspend,
resume, wait."""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shlex
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

from dtrain import JobStatus
from dtrain.cli import format as fmt
from dtrain.client import Client, TimeoutError_
from dtrain.config import read_small_file
from dtrain.errors import ConflictError, NotFoundError, SpecError, StorageError
from dtrain.names import (EXEC_RUNNING_WAIT, MAX_WAIT, as_typed_number, check_limit_bytes, check_name, check_rank, check_tail, counted, shown,
                          wait_refusal, written)
from dtrain.numbers import exact, plain, real_number, whole_number  # whole_number: every whole-number flag's type=
from dtrain.spec import (NUMBER_FIELDS, JobSpec, check_sagemaker_mapping, check_yaml_numbers, parse_env, parse_labels,
                         SNAPSHOT_ENV, SNAPSHOT_VOLUME_ENV, parse_node_selector, parse_pvc, parse_toleration, sagemaker_backend, yaml_mapping)
from dtrain.spec_sagemaker import parse_channel, parse_hyperparameters

# flag dest -> spec field, for flags that map one to one
_FIELDS = ("processes", "launcher", "gpu", "cpu", "memory", "large_shm", "working_dir", "project", "backend",
           "max_restarts", "snapshot_on_success", "image", "image_pull_policy")


# argparse takes a word starting with '-' for an option unless it is a plain negative number, so
# `--memory -5Gi`, `--cpu -1e3` or `volume create --size -5x10` stopped at "expected one argument";
# in dtrain's parser (cli.main.Parser) any word starting with '-' and a digit is a value (no option
# of any verb looks like that), and the spec or the size parser says why it is refused.
NEGATIVE_VALUE = re.compile(r"^-\.?[0-9]")


# Run:AI's submit flags that dtrain spells otherwise (or answers otherwise): named with ours, where
# argparse said only "unrecognized" (and, for a flag's value, that the command goes after '--').
RUNAI_FLAGS = {
    "--name": "the job's name is the first word: dtrain {verb} NAME [options] -- COMMAND",
    "--backoff-limit": "restarts after a failure are --max-restarts N",
    "--memory-limit": "the memory limit per process is --memory (e.g. --memory 8Gi)",
    "--cpu-limit": "the CPU limit per process is --cpu (e.g. --cpu 2)",
    "--existing-pvc": "an existing volume is mounted with --pvc VOLUME:MOUNT[:ro] (claimname=data,path=/mnt: "
                      "--pvc data:/mnt)",
    "--volume": "a folder is shared with a job as a volume: --pvc VOLUME:MOUNT[:ro] ('dtrain volume create')",
    "-v": "a folder is shared with a job as a volume: --pvc VOLUME:MOUNT[:ro] ('dtrain volume create')",
    "--interactive": "an interactive job is a notebook: dtrain notebook NAME --pvc VOLUME:/home/jovyan",
    "--attach": "follow the job once submitted with 'dtrain logs NAME -f', or open a shell with 'dtrain bash NAME'",
    "--command": "drop it: the words after '--' are always the command (dtrain {verb} NAME [options] -- COMMAND)",
    "--gpu-memory": "GPUs are whole here: --gpu N per process",
    "--preemptible": "jobs of a project without a GPU quota are the preemptible ones (dtrain project list)",
    "--pod": "a job's processes are its ranks here: --rank R ('dtrain describe job NAME' lists them)",
}


# The process-count flags of the launchers a user has typed before (torchrun's, mpirun's): argparse's
# nearest flag named --project for --nproc and SageMaker's --hp for --np, or said the command goes after '--'.
LAUNCHER_FLAGS = {"--nproc-per-node": "torchrun", "--nproc_per_node": "torchrun", "--nproc": "torchrun",
                  "-np": "mpirun", "--np": "mpirun", "-n": "mpirun"}


class RunaiOnly(argparse.Action):
    """A Run:AI flag that is the start of one of ours, refused naming ours: argparse took `--volume
    /data:/mnt` for SageMaker's --volume-size ("use a whole number") and `exec --pod` for
    --pod-running-timeout ("use seconds")."""

    def __init__(self, option_strings, dest, **kwargs):
        super().__init__(option_strings, dest, nargs="?", help=argparse.SUPPRESS)

    def __call__(self, parser, namespace, values, option_string=None):
        verb = parser.prog.removeprefix("dtrain ")
        parser.error(f"{option_string} is Run:AI's: {RUNAI_FLAGS[option_string].format(verb=verb)}")


def real(text: str) -> int | float | str:
    """The `type=` of a flag that takes fractions (--cpu): the number typed (an int for whole digits,
    a float for a decimal, an exponent, inf or nan), or the text itself when it is none; the flag's
    own check (the SDK's and the HTTP API's) then refuses it in its words, naming the flag, its bounds
    and an example, where float gave argparse's "invalid float value"."""
    value = as_typed_number(text)
    if isinstance(value, str) and len(value) <= 64:  # a float's spelling is short; a longer text stays text
        try:
            value = float(value)
        except ValueError:
            pass
    return written(value, text.strip())  # refused as typed: '--cpu 1e9', not 1000000000


def gpu_count(text: str) -> int | float | str:
    """--gpu: whole GPUs per process. Run:AI also takes a fraction of one (--gpu 0.5), which is not
    shared out here: a fraction goes to the spec, which names it as such (as for a job file or the
    HTTP API), where int() said only "invalid int value"."""
    try:
        return written(int(text), text.strip())
    except ValueError:
        pass
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if math.isfinite(value) and exact(written(value, text.strip())).denominator == 1:
        return written(int(value), text.strip())  # 2.0, 1e1; not 1.0000000000000001, a fraction as typed
    if math.isfinite(value) and value > 0:
        return written(value, text.strip())  # the spec's one message for a fraction
    return real(text)  # the spec names it: "invalid --gpu 'x': use a whole number from 0 to 16"


def add_job_options(p: argparse.ArgumentParser, *, dist: bool, mpi: bool = False) -> None:
    p.add_argument("name", nargs="?", help="job name (lower-case letters, digits, '-')")
    p.add_argument("-f", "--file", help="a YAML job spec; flags given too override its fields")
    p.add_argument("--volume", action=RunaiOnly)
    if dist:
        p.add_argument("--processes", type=whole_number, help="number of data-parallel processes (default 1)")
        if not mpi:
            p.add_argument("--launcher", choices=["torchrun", "mpi"],
                           help="what starts the processes: torchrun (the default) or mpi (mpirun, as submit-mpi)")
    p.add_argument("-g", "--gpu", type=gpu_count, help="whole GPUs per process (default 0: CPU only; no fractions)")
    p.add_argument("--cpu", type=real, help="CPU threads per process (sets OMP_NUM_THREADS, by default the machine's "
                                             "CPUs shared out among the processes; each local process is pinned to its "
                                             "own cores when they go round)")
    p.add_argument("--memory", help="memory per process, e.g. 8Gi")
    p.add_argument("-e", "--environment", action="append", metavar="KEY=VALUE", help="environment variable (repeat; a name given twice keeps the last value, with a warning)")
    p.add_argument("--label", action="append", metavar="KEY=VALUE",
                   help="a label on the job (Kubernetes label, SageMaker tag; repeat); 'dtrain list -l' selects by it")
    p.add_argument("--pvc", action="append", metavar="SPEC",
                   help="VOLUME:MOUNT[:ro] for an existing volume, CLASS:SIZE:MOUNT for a new one (repeat)")
    add_node_options(p)
    p.add_argument("--large-shm", action="store_const", const=True,
                   help="a large in-memory /dev/shm (local: half the machine's memory, or the host's /dev/shm if larger; Kubernetes: the "
                        "pod's memory, or config.yaml's kubernetes shm_size)")
    p.add_argument("--json", action="store_true", help="print the submitted job as one JSON object")
    p.add_argument("--working-dir", help="working directory of the command (default: local, the folder submit "
                                         "is run in; Kubernetes, the image's)")
    p.add_argument("-p", "--project", help="project (default: 'dtrain config project')")
    p.add_argument("--backend", choices=["local", "kubernetes", "sagemaker"], help="where to run (default from config)")
    p.add_argument("--max-restarts", type=whole_number, help="restarts of the job after a failure (default 0)")
    p.add_argument("--snapshot-on-success", metavar="VOLUME", help="snapshot VOLUME when the job succeeds")
    p.add_argument("-i", "--image", help="container image (Kubernetes)")
    p.add_argument("--image-pull-policy", choices=["Always", "IfNotPresent", "Never"],
                   help="when the node pulls the image (Kubernetes)")
    p.add_argument("--image-pull-secret", action="append", help="image pull secret (repeat)")
    p.add_argument("--dry-run", action="store_true",
                   help="print what would run and stop (local: the spec as submit stores it, refused as submit "
                        "would but for volumes; Kubernetes: the YAML; SageMaker: the requests as JSON)")
    add_sagemaker_options(p)


def add_node_options(p: argparse.ArgumentParser) -> None:
    """Where the job may run: a pod's nodeSelector (submit and notebook start alike)."""
    p.add_argument("--node-selector", action="append", metavar="KEY=VALUE",
                   help="run only on nodes with this label (Kubernetes nodeSelector; repeat: all must match; "
                        "local: this machine's labels, see 'dtrain nodes --json')")
    p.add_argument("--node-type", metavar="TYPE", help="Run:AI's node type: --node-selector run.ai/type=TYPE")
    p.add_argument("--toleration", action="append", metavar="FIELDS",
                   help="tolerate a node taint (Kubernetes tolerations; Run:AI's flag; repeat), e.g. "
                        "operator=Exists,key=nvidia.com/gpu,effect=NoSchedule; fields operator=Equal|Exists, key, "
                        "value, effect=NoSchedule|PreferNoSchedule|NoExecute, seconds (NoExecute only); local: "
                        "accepted, its node has no taints")


def node_selector_of(args: argparse.Namespace, data: dict) -> None:
    """--node-selector and --node-type merged into `data`'s node_selector (flags win over the file's),
    and --toleration added to its tolerations (after the file's; one it has already is not repeated)."""
    items, node_type = getattr(args, "node_selector", None), getattr(args, "node_type", None)
    if items or node_type is not None:
        data["node_selector"] = {**(data.get("node_selector") or {}), **parse_node_selector(items, node_type)}
    if getattr(args, "toleration", None):
        out = list(data.get("tolerations") or [])
        for given in (parse_toleration(x).to_dict() for x in args.toleration):
            if given not in out:
                out.append(given)
        data["tolerations"] = out


def add_sagemaker_options(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("SageMaker (--backend sagemaker)")
    g.add_argument("--local", action="store_const", const=True,
                   help="run here inside the SageMaker contract (no Docker, no AWS)")
    g.add_argument("--instance-type", help="ml.* instance type (default from 'dtrain config sagemaker')")
    g.add_argument("--instance-count", type=whole_number, help="instances (default: one per process, or per GPUs of the type)")
    g.add_argument("--channel", action="append", metavar="NAME=URI",
                   help="input channel: s3://BUCKET/PREFIX, efs://FS-ID/PATH, fsx://FS-ID/MOUNT/PATH, "
                        "file:///PATH with --local (repeat)")
    g.add_argument("--hp", action="append", metavar="KEY=VALUE", help="hyperparameter (repeat)")
    g.add_argument("--source-dir", help="folder packed as sourcedir.tar.gz (default: the working folder)")
    g.add_argument("--spot", action="store_const", const=True, help="managed spot training, checkpoints in S3")
    g.add_argument("--max-runtime", type=whole_number, metavar="SECONDS", help="MaxRuntimeInSeconds (default 86400)")
    g.add_argument("--max-wait", type=whole_number, metavar="SECONDS", help="spot: MaxWaitTimeInSeconds (default 2 x runtime)")
    g.add_argument("--volume-size", type=whole_number, metavar="GB", help="ML storage volume per instance (default 30)")
    g.add_argument("--network-isolation", action="store_const", const=True, help="EnableNetworkIsolation")
    g.add_argument("--encrypt-inter-container", action="store_const", const=True,
                   help="EnableInterContainerTrafficEncryption")
    g.add_argument("--checkpoint-s3-uri", dest="checkpoint_uri", metavar="S3URI",
                   help="CheckpointConfig.S3Uri (default s3://BUCKET/PREFIX/JOB/checkpoints)")
    g.add_argument("--output-path", metavar="S3URI",
                   help="OutputDataConfig.S3OutputPath: the model goes to S3URI/JOB/output/ (default s3://BUCKET/PREFIX)")


_SM_FLAGS = ("local", "instance_type", "instance_count", "source_dir", "spot", "max_runtime", "max_wait",
             "volume_size", "network_isolation", "encrypt_inter_container", "checkpoint_uri",
             "output_path")


def _channel(text: str):
    """--channel NAME=file://REL is relative to the working folder (the CLI knows it; the spec must not)."""
    name, sep, uri = text.partition("=")
    if sep and uri.startswith("file://") and not uri.startswith("file:///"):
        uri = "file://" + str(Path(uri[len("file://"):]).resolve())
    return parse_channel(f"{name}={uri}" if sep else text)


def _sagemaker_fields(args: argparse.Namespace, data: dict) -> None:
    """SageMaker flags -> the spec's `sagemaker` mapping (flags win over the file's)."""
    sm = dict(check_sagemaker_mapping(data.get("sagemaker") or {}))
    sm.update({k: getattr(args, k) for k in _SM_FLAGS if getattr(args, k, None) is not None})
    if args.source_dir:
        sm["source_dir"] = str(Path(args.source_dir).resolve())
    if args.channel:
        sm["channels"] = [*(sm.get("channels") or []), *(c.to_flag() for c in map(_channel, args.channel))]
    if args.hp:
        sm["hyperparameters"] = {**(sm.get("hyperparameters") or {}), **parse_hyperparameters(args.hp)}
    if sm:
        data["sagemaker"] = sm
    sagemaker_backend(data)


# The job file's nested blocks and what each must be: the flags merge into them.
_BLOCKS = {"env": (Mapping, "a mapping of NAME: value, e.g. env: {SEED: '1'}"),
           "labels": (Mapping, "a mapping of KEY: value, e.g. labels: {team: vision}"),
           "node_selector": (Mapping, "a mapping of KEY: value, e.g. node_selector: {run.ai/type: dgx-a100}"),
           "tolerations": ((list, tuple), "a list, e.g. tolerations: [{key: nvidia.com/gpu, operator: Exists}]"),
           "sagemaker": (Mapping, "a mapping of SageMaker options, e.g. sagemaker: {instance_type: ml.m5.xlarge}"),
           "volumes": ((list, tuple), "a list, e.g. volumes: [data:/mnt]"),
           "pvc": ((list, tuple), "a list, e.g. pvc: [data:/mnt]"),
           "image_pull_secrets": ((list, tuple), "a list of names, e.g. image_pull_secrets: [regcred]")}


def _check_blocks(data: Mapping) -> None:
    for key, (kind, what) in _BLOCKS.items():
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise SpecError(f"invalid {key} {shown(data[key])} in the job file: must be {what}")


def spec_from_args(args: argparse.Namespace, command: list[str], client: Client, *, launcher: str | None) -> JobSpec:
    """Flags, a YAML file, or both -> the one JobSpec. Flags win over the file."""
    data: dict = {}
    data_file: dict = {}
    if args.file is not None:  # `-f "$SPEC"` with SPEC unset names the file, not a missing job name
        raw = read_small_file(args.file, f"job file {shown(args.file)}", "job.yaml")
        data = dict(JobSpec.check_fields(yaml_mapping(raw, f"job file {shown(args.file)}", "name: train")))
        data_file = dict(data)
        # the fields that take numbers (processes: 0x10 was 16); command and env keep the text as typed
        check_yaml_numbers({k: data[k] for k in (*NUMBER_FIELDS, "sagemaker") if k in data}, f"job file {shown(args.file)}")
        _check_blocks(data)
    if args.name:
        data["name"] = args.name
    if "name" not in data:
        raise SpecError("a job needs a name: dtrain submit NAME [options] -- COMMAND (or name: in the -f file)")
    for key in _FIELDS:
        value = getattr(args, key, None)
        if value is not None:
            data[key] = value
    if args.backend is None and getattr(args, "default_backend", None):  # `dtrain --backend B submit ...`
        data["backend"] = args.default_backend
    if launcher == "mpi":
        data["launcher"] = "mpi"
    elif launcher == "dist" and data.get("launcher") in (None, "none"):  # the verb says distributed,
        data["launcher"] = "torchrun"  # as submit-mpi's does (a file's launcher: mpi is kept)
    if args.environment:
        given = parse_env(args.environment)
        _warn_env_twice(args.environment, data.get("env"), args.file)
        data["env"] = {**(data.get("env") or {}), **given}
    if args.label:
        data["labels"] = {**(data.get("labels") or {}), **parse_labels(args.label)}
    node_selector_of(args, data)
    if args.pvc:  # as -e overrides the file's variable of the same name, --pvc its mount at the same path
        given = [parse_pvc(v) for v in args.pvc]
        taken = {v.mount_path for v in given}
        kept = [v for v in (data.get("volumes") or []) if _mount_of(v) not in taken]
        data["volumes"] = [*kept, *(v.to_flag() for v in given)]
    if args.image_pull_secret:
        data["image_pull_secrets"] = args.image_pull_secret
    chosen = data.get("backend")
    _sagemaker_fields(args, data)
    if command:
        data["command"] = command
    data.setdefault("project", client.default_project)
    if isinstance(data["project"], str):  # the configured backend of the project, as `list` uses
        data.setdefault("backend", client.config.backend_for(data["project"]))
    spec = JobSpec.from_dict(data)  # the options' own refusals first (--max-wait 1e9), as on any backend
    if chosen is None and spec.backend == "sagemaker":
        _configured_for(spec, client, given=sorted(data.get("sagemaker") or {}), from_file="sagemaker" in data_file)
    return spec


def _warn_env_twice(items: list[str], from_file, file: str | None) -> None:
    """One warning line per variable given two values: by -e twice, or by -e and the job file. The last
    -e wins, as in a pod (Kubernetes keeps the last of a name, and warns that it "hides" the first) and in
    `docker run -e`; a flag wins over the file, as every flag does. The same value twice says nothing."""
    seen: dict[str, str] = {}
    for item in items:
        key, _, value = item.partition("=")
        if key in seen and seen[key] != value:
            print(f"dtrain: warning: -e {key} given twice ({shown(seen[key])}, then {shown(value)}): the last, "
                  f"{shown(value)}, is used", file=sys.stderr)
        seen[key] = value
    if isinstance(from_file, Mapping):
        for key, value in seen.items():
            if key in from_file and str(from_file[key]) != value:
                print(f"dtrain: warning: -e {key}={shown(value)} overrides env {key}: {shown(str(from_file[key]))} "
                      f"of the job file {shown(file)} (a flag wins over the file)", file=sys.stderr)


def _configured_for(spec: JobSpec, client: Client, *, given: list[str], from_file: bool) -> None:
    """SageMaker options with no backend named send a job to SageMaker (spec.sagemaker_backend): where
    that is not configured, say that it was the options that chose it, not the configured backend (a
    --local job needs no AWS)."""
    backend = client.config.backend_for(spec.project)
    if spec.sagemaker is None or spec.sagemaker.local or backend == "sagemaker":
        return
    config = client.sagemaker_config()
    try:
        config.require_aws()
    except SpecError as err:
        where = "the job file's sagemaker:" if from_file else "the SageMaker"
        raise SpecError(f"{where} options ({', '.join(given)}) need --backend sagemaker (this project's "
                        f"backend is {backend}), and {err} (or leave them out to run on backend {backend})") from None


def _mount_of(entry) -> str | None:
    """The normalised mount path of a file's volume entry ('VOL:/mnt[:ro]', 'CLASS:SIZE:/mnt', or a
    mapping's mount_path); None for one that does not parse (the spec then names the problem)."""
    if isinstance(entry, dict):
        entry = entry.get("mount_path")
        entry = f"v:{entry}" if isinstance(entry, str) else None
    elif isinstance(entry, str) and ":" not in entry:  # a bare path
        entry = f"v:{entry}"
    try:
        return parse_pvc(entry).mount_path if isinstance(entry, str) else None
    except SpecError:
        return None


def cmd_submit(args, command: list[str], client: Client, launcher: str | None = None) -> int:
    spec = spec_from_args(args, command, client, launcher=launcher)
    if args.dry_run:
        return dry_run(spec, client)
    info = client.submit(spec)
    if args.json:
        print(json.dumps(info.to_dict()))
        return 0
    print(f"The job '{info.name}' has been submitted successfully ({info.spec.kind}, "
          f"{info.spec.processes} process{'es' if info.spec.processes > 1 else ''}, backend {info.backend})")
    # `describe` asks the configured project's backend (on Kubernetes, its namespace): a job of another
    # project is named with -p (its backend, its namespace), one sent elsewhere (--backend) with that too
    print(f"You can run `{client.command_for(f'describe job {info.name}', backend=info.backend, project=info.spec.project)}` "
          f"to check the job status")
    return 0


def dry_run(spec: JobSpec, client: Client) -> int:
    requests = client.render(spec)
    if spec.backend == "sagemaker":
        print(json.dumps(requests, indent=2))  # the requests exactly as boto3 would send them
    else:
        print(fmt.plain_yaml(*requests), end="")
    return 0


def cmd_list(args, client: Client) -> int:
    if args.what in ("notebook", "notebooks"):
        raise SpecError("'dtrain list' is for jobs: use 'dtrain notebook list' (or 'dtrain list', where "
                        "notebooks are jobs of type Notebook)")
    if args.what in _OTHER_KINDS:
        raise SpecError(_elsewhere(args.what, "list"))
    if args.what not in ("job", "jobs"):
        raise SpecError(f"'dtrain list' lists jobs, not {shown(args.what)}: use 'dtrain list' or 'dtrain list jobs' "
                        f"(volumes: 'dtrain volume list', snapshots: 'dtrain snapshot list')")
    if args.project is not None:  # `-p "$PROJECT"` with the variable unset is a mistake, not the default project
        check_name(args.project, "project")
    project = None if args.all_projects else (args.project or client.default_project)
    jobs = client.list(project=project, show_deleted=args.show_deleted,  # a typo in -p: NotFoundError
                       selector=args.selector)
    fmt.warn(jobs.notices)  # SageMaker: AWS failed, the --local jobs are shown
    if args.json:
        print(json.dumps([j.to_dict() for j in jobs], indent=2))
        return 0
    # -A reads every configured backend (kubectl -A adds NAMESPACE): BACKEND says where each job runs
    every = args.all_projects
    rows = [[j.name, fmt.status_word(j), fmt.age(j.created), j.node or "-", j.spec.kind, j.spec.project,
             *([j.backend] if every else []),
             f"{j.gpus_allocated} ({j.spec.gpus_requested})", f"{j.processes_running} ({j.processes_pending})"]
            for j in jobs]
    if not rows:  # a header alone reads as a failed listing (kubectl: "No resources found in NS namespace.")
        print(_no_jobs(args, client, project))
        return 0
    print(fmt.table(["NAME", "STATUS", "AGE", "NODE", "TYPE", "PROJECT", *(["BACKEND"] if every else []),
                     "GPUs Allocated (Requested)", "PROCESSES Running (Pending)"], rows))
    return 0


def _no_jobs(args, client: Client, project: str | None) -> str:
    """The line `dtrain list` prints when it has no job to show (none_listed), or none matching -l."""
    if args.selector:
        return f"No jobs {_where(project)} match -l {args.selector}"
    hidden = 0 if args.show_deleted else len(client.list(project=project, show_deleted=True))
    return none_listed(args, client, project, what="jobs", hidden=hidden, make="submit",
                       command="submit NAME -- COMMAND")


def none_listed(args, client: Client, project: str | None, *, what: str, hidden: int, make: str, command: str) -> str:
    """The line a list of jobs or notebooks prints when it has none to show: where it looked (None: every
    project), the deleted ones it hid (--show-deleted), and `dtrain COMMAND`, which makes one, with the
    -p and --backend it needs."""
    backend = getattr(args, "default_backend", None) or client.config.backend_for(project or client.default_project)
    deleted = f" ({hidden} deleted: --show-deleted lists them)" if hidden else ""
    return (f"No {what}{'' if hidden else ' yet'} {_where(project)}{deleted}: {make} one with "
            f"'{client.command_for(command, backend=backend, project=project)}'")


def _where(project: str | None) -> str:
    return "in any project" if project is None else f"in project '{project}'"


# Other kinds a Run:AI or kubectl user names to a job verb (`describe volume X`, `list nodes`):
# the kind, in the words of the verb that handles it.
_OTHER_KINDS = {"volume": "volume", "volumes": "volume", "snapshot": "snapshot", "snapshots": "snapshot",
                "project": "project", "projects": "project", "node": "nodes", "nodes": "nodes"}


def _elsewhere(kind: str, verb: str) -> str:
    """The one line sending `dtrain VERB KIND ...` to where that kind is handled."""
    kind = _OTHER_KINDS[kind]
    if kind in ("volume", "snapshot"):
        fix = f"use 'dtrain {kind} {verb}" + ("'" if verb == "list" else " NAME'")
    elif kind == "project":
        fix = "projects are not deleted (see 'dtrain project list')" if verb == "delete" else "use 'dtrain project list'"
    else:
        fix = "use 'dtrain nodes'"
    return f"'dtrain {verb}' is for jobs: {fix}"


# The nouns Run:AI writes before a job's name (`delete job X`); a notebook is a job
JOB_NOUNS = ("job", "jobs", "notebook", "notebooks")


def _job_names(words: list[str], verb: str) -> list[str]:
    """Run:AI writes the noun (`delete job X`); kubectl-style bare names work too. A notebook
    is a job, so `delete notebook X` is `delete job X`."""
    if len(words) > 1 and words[0] in JOB_NOUNS:
        return words[1:]
    if words and words[0] in _OTHER_KINDS:
        raise SpecError(_elsewhere(words[0], verb))
    return words


def _in_project(args) -> str | None:
    """Run:AI's -p on a job verb (`runai logs train -p team`), checked: the project each call of
    this command passes on (`project=`), which looks at that project's backend and (Kubernetes) its
    namespace, and finds only that project's jobs; None without -p. config.yaml is not read for it."""
    return None if args.project is None else check_name(args.project, "project")


def _get(args, client: Client, name: str):
    """The job `name`; with -p, only if it is that project's. Run:AI's noun alone (`describe job`, the name
    forgotten) is a job's name, as it may be one; when none is, the refusal says where the name goes."""
    try:
        return client.get(name, project=args.project)
    except NotFoundError as err:
        if name not in JOB_NOUNS:
            raise
        raise NotFoundError(f"{err}; '{name}' alone is read as a job's name: give the job's name after it "
                            f"(dtrain {args.verb} {name} NAME{f' -p {args.project}' if args.project else ''})") from None


def cmd_describe(args, client: Client) -> int:
    names = _job_names(args.names, "describe")
    if len(names) != 1:
        raise SpecError("describe one job: dtrain describe job NAME")
    _in_project(args)
    info = _get(args, client, names[0])
    if args.json:
        print(json.dumps(info.to_dict(), indent=2))
        return 0
    head = {"Name": info.name, "Status": fmt.status_word(info), "Message": info.message or "-",
            "Type": info.spec.kind, "Project": info.spec.project, "Backend": info.backend, "Node": info.node,
            "UID": info.uid or "-", "Created": fmt.when(info.created), "Started": fmt.when(info.started),
            "Finished": fmt.when(info.finished), "Restarts": info.restarts,
            "GPUs Allocated (Requested)": f"{info.gpus_allocated} ({info.spec.gpus_requested})",
            "Snapshot": (info.snapshot or "-") + (" (deleted)" if info.extra.get("snapshot_deleted") else "")}
    if info.extra.get("limits"):
        head["Limits"] = info.extra["limits"]
    if info.data_sources:  # one per mounted volume whose content was a snapshot's when the job started
        head["Started from snapshot"] = ", ".join(
            f"{d.snapshot}{' (deleted)' * d.snapshot_deleted} on volume {d.volume}{' (deleted)' * d.volume_deleted}"
            for d in info.data_sources)
    elif info.extra.get("source_snapshot"):  # a job of before, or a backend that records only its snapshot's source
        head["Started from snapshot"] = info.extra["source_snapshot"]
    if info.extra.get("model_artifacts"):  # SageMaker
        head["Model"] = info.extra["model_artifacts"]
    if info.extra.get("output_data"):  # SageMaker: what the job wrote to $SM_OUTPUT_DATA_DIR
        head["Output data"] = f"{info.extra['output_data']} ($SM_OUTPUT_DATA_DIR)"
    if info.extra.get("training_seconds") is not None:
        head["Billable / training seconds"] = f"{info.extra.get('billable_seconds')} / {info.extra['training_seconds']}"
    if info.extra.get("spot_saving_percent") is not None:
        head["Spot saving"] = f"{info.extra['spot_saving_percent']:.1f}%"
    spec = {**info.spec.to_dict(), "command": shlex.join(info.spec.command)}
    if info.spec.env:  # as -e flags: `KEY: VALUE` left an empty value, spaces or a '=' ambiguous
        spec["env"] = fmt.env_flags(info.spec.env)
    if info.spec.snapshot_on_success is None and info.spec.snapshot_volume:  # the seed's form: the same request
        spec["snapshot_on_success"] = f"{info.spec.snapshot_volume} (from -e {SNAPSHOT_ENV} + {SNAPSHOT_VOLUME_ENV})"
    print(fmt.described(head, {"Spec": spec}))
    print("Processes:")
    print(_indent(process_table(info)))
    print("Events:")
    print(_indent(fmt.table(["TIME", "STATUS", "MESSAGE"],
                            [[fmt.when(e.time), e.status, e.message] for e in info.events])))
    return 0


def process_table(info) -> str:
    """`describe job`'s processes; a POD column where the backend runs them in pods of its own
    naming (Kubernetes: `--pod` takes them, `kubectl logs` too). The local backend's pod names are
    Run:AI's short form of the rank (NAME-R), so its table stays as it was."""
    pods = info.backend != "local" and any(p.pod for p in info.processes)
    return fmt.table(["RANK", *(["POD"] if pods else []), "STATUS", "EXIT CODE", "DEVICES", "NODE"],
                     [[p.rank, *([p.pod or "-"] if pods else []), p.status, "-" if p.exit_code is None else p.exit_code,
                       ",".join(p.devices) or "-", p.node or "-"] for p in info.processes])


def _indent(text: str) -> str:
    return "\n".join("  " + line for line in text.splitlines())


def cmd_logs(args, client: Client) -> int:
    if args.container is not None or args.all_containers not in (None, "false", "False"):  # kubectl's: a dtrain job's processes are its ranks
        raise SpecError(f"{'-c/--container' if args.container is not None else '--all-containers'} is kubectl's: a "
                        f"job's processes here are ranks, not containers; every rank's lines are "
                        f"shown by default, or one rank's with --rank R (e.g. dtrain logs {shown(args.name)[1:-1]} "
                        f"--rank 0)")
    rank = None if args.rank in (None, "all") else _rank(args.rank)
    since = (fmt.parse_since(args.since) if args.since is not None else
             fmt.parse_time(args.since_time) if args.since_time is not None else None)
    since = None if since is None else max(since, 0.0)  # a time before 1970: every line, as kubectl has it
    tail = None if args.tail in (None, -1) else check_tail(args.tail, "cli")  # kubectl's --tail=-1 (its default): all
    if args.limit_bytes is not None:  # refused before the job is read, as by HTTP
        check_limit_bytes(args.limit_bytes)
    _in_project(args)
    info = _get(args, client, args.name)
    refuse_pod(args, client, info)
    many = rank is None and info.spec.processes > 1
    printed = False
    lines = client.logs(args.name, rank=rank, tail=tail, since=since, follow=args.follow,
                        previous=args.previous, limit_bytes=args.limit_bytes, project=args.project)
    try:
        for line in lines:
            printed = True
            if args.json:
                sys.stdout.write(json.dumps(line.to_dict()) + "\n")
            else:
                prefix = (fmt.when(line.time) + " " if args.timestamps else "") + (f"[rank {line.rank}] " if many else "")
                sys.stdout.write(prefix + line.text + "\n")
            if args.follow:  # a line shows when it is written; otherwise a flush a line cost a write(2) a line
                sys.stdout.flush()
    except KeyboardInterrupt:
        if not args.follow:
            raise
        return _left(client, info, "following the logs of")
    # as kubectl: why nothing came (unless the backend said it: a restarted SageMaker host not started again)
    if (not printed and not args.follow and info.status.value == "Pending"
            and not lines.notices):
        follow = client.command_for(f"logs {info.name} -f", backend=info.backend, project=info.spec.project)
        print(f"dtrain: job '{info.name}' is Pending ({info.message or 'not started'}): no process has "
              f"started, so there are no logs yet; '{follow}' waits for them", file=sys.stderr)
    return 0


def pod_ranks(pod: str, info) -> list[int]:
    """The ranks that pod `pod` of job `info` runs, as its backend maps ranks to pods (the mapping
    `logs --rank` and `exec --rank` use): several for a pod of packed ranks (gpus_per_node); none
    for a pod that is not the job's or runs no rank (an MPIJob's launcher)."""
    return [p.rank for p in info.processes if p.pod == pod]


def refuse_pod(args, client: Client, info) -> None:
    """`--pod NAME` (Run:AI's and kubectl's): a job's processes are its ranks here; the one line names
    the exact `--rank N` for a pod of the job's (its first where it runs several), else its pods."""
    if args.pod is None:
        return
    ranks = pod_ranks(args.pod, info)
    tail = " -- COMMAND" if args.verb == "exec" else ""
    if not ranks:
        pods = list(dict.fromkeys(p.pod for p in info.processes if p.pod))
        look = client.command_for(f"describe job {info.name}", backend=info.backend, project=args.project)
        fix = client.command_for(f"{args.verb} {info.name} --rank R{tail}", backend=info.backend, project=args.project)
        n = info.spec.processes
        known = f"its pods: {', '.join(pods)}" if pods else f"its {counted(n, 'rank')} {'has' if n == 1 else 'have'} no pod now"
        raise SpecError(f"--pod is Run:AI's: a job's processes are its ranks here: {fix}; {shown(args.pod)} is "
                        f"no pod of job {info.name!r} ({known}; '{look}' lists its ranks)")
    fix = client.command_for(f"{args.verb} {info.name} --rank {ranks[0]}{tail}", backend=info.backend,
                             project=args.project)
    if len(ranks) == 1:
        raise SpecError(f"--pod is Run:AI's: a job's processes are its ranks here, and pod {shown(args.pod)} runs "
                        f"rank {ranks[0]}: {fix}")
    others = f"--rank {ranks[1]}" + (f" to {ranks[-1]}" if len(ranks) > 2 else "")
    raise SpecError(f"--pod is Run:AI's: a job's processes are its ranks here, and pod {shown(args.pod)} runs "
                    f"ranks {ranks[0]}-{ranks[-1]} (gpus_per_node packs {len(ranks)} in a pod): {fix} for the "
                    f"first, {others} for the others")


def _rank(text: str) -> int:
    """--rank R: names.py's check (the SDK's and the HTTP API's) says why one is refused, naming it as typed."""
    value = whole_number(text)  # as every whole-number flag reads it ('1_0', '2.')
    check_rank(value, "cli", text)
    return value  # as typed: the job's own refusal names it so ('invalid rank 1E3: job 'x' has 2 process(es)')


def _exec_rank(text: str) -> int | str:
    """exec's --rank as the SDK would be given it: a whole number (-1 too) as that number, anything
    else as typed; the backend's check (names.check_exec_rank) refuses it in the SDK's words."""
    value = whole_number(text)  # as every whole-number flag reads it ('1_0', '2.')
    return value if isinstance(value, int) else text


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
        return f"`{client.command_for(words, backend=info.backend, project=info.spec.project)}`"
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


def cmd_artifacts(args, client: Client) -> int:
    _in_project(args)
    _get(args, client, args.name)
    out = client.artifacts(args.name, to=args.to, project=args.project, output_data=args.output_data)
    print(f"The {'output data' if args.output_data else 'model'} of job '{args.name}' is in {out}")
    return 0
def cmd_exec(args, command: list[str], client: Client, _launcher=None) -> int:
    waits = running_timeout(args.pod_running_timeout)  # a bad number before any look-up
    _in_project(args)
    refuse_pod(args, client, _get(args, client, args.name))
    code = client.exec(args.name, command, rank=0 if args.rank is None else _exec_rank(args.rank),
                       project=args.project, running_timeout=waits)
    return 128 - code if code < 0 else code  # killed by signal N: 128 + N, as a shell and kubectl exec say


def cmd_bash(args, client: Client) -> int:
    """Run:AI's `runai bash JOB`: `dtrain exec JOB -- bash`."""
    return cmd_exec(args, ["bash"], client)


EXIT_TIMEOUT = 124  # `wait --timeout` ran out: the job goes on (the code GNU timeout uses)
MAX_WAIT_TIMEOUT = MAX_WAIT  # a year and a day: past any training run, and every number is bounded


def wait_timeout(text: str) -> float:
    """--timeout in seconds (600, 1.5) or as kubectl wait's Go duration (10m, 1h30m), bounded; a
    refused value is named as typed (1e400 was 'invalid --timeout inf', 5m 'invalid float value')."""
    return _seconds(text, lambda: wait_refusal(text, "cli"))


def _seconds(text: str, refusal: Callable[[], Exception]) -> float:
    """A duration flag's seconds, up to MAX_WAIT_TIMEOUT: a Go duration or a number, the bound checked
    as typed (a year and 1e-10 s is over); `refusal()` is raised for anything else."""
    seconds = fmt.go_duration(text)
    if seconds is None:
        seconds = real_number(text)  # as the HTTP API's ?timeout= reads it
        seconds = math.nan if isinstance(seconds, str) else seconds
    if not 0 <= exact(seconds) <= MAX_WAIT_TIMEOUT:  # NaN compares false
        raise refusal()
    return plain(seconds)


EXIT_INTERRUPTED = 130  # Ctrl-C: 128 + SIGINT, as a shell says


def _left(client: Client, info, doing: str) -> int:
    """Ctrl-C in `logs -f` or `wait`: the job is in its own session, so it goes on; said, since a new
    user cannot tell that from a bare prompt (and Ctrl-C in a foreground `docker run` would stop it)."""
    stop = client.command_for(f"delete {info.name}", backend=info.backend, project=info.spec.project)
    print(f"\ndtrain: stopped {doing} job '{info.name}'; the job goes on (stop it with '{stop}')",
          file=sys.stderr, flush=True)
    return EXIT_INTERRUPTED


def cmd_wait(args, client: Client) -> int:
    """As kubectl wait: one job or several, in turn, under one --timeout; exit 0 if every one
    Succeeded, 1 if any did not, EXIT_TIMEOUT if the time ran out first."""
    names = _job_names(args.names, "wait")
    if not names:
        raise SpecError("name the job to wait for: dtrain wait NAME")
    timeout = None if args.timeout is None else wait_timeout(args.timeout)
    _in_project(args)
    names = list(dict.fromkeys(names))
    infos = {name: _get(args, client, name) for name in names}  # an unknown name is an error before any waiting
    deadline = None if timeout is None else time.monotonic() + timeout
    failed = False
    ended = 0  # counted before its line is printed: Ctrl-C after the line names the next job
    try:
        for name in names:
            if infos[name].status is JobStatus.SUSPENDED:  # a script's wait would hang without a word
                resume = client.command_for(f"resume {name}", backend=infos[name].backend, project=infos[name].spec.project)
                print(f"dtrain: job {name!r} is Suspended: waiting until it is resumed ('{resume}') and ends",
                      file=sys.stderr, flush=True)
            try:
                info = client.wait(name, timeout=timeout if deadline is None or len(names) == 1
                                   else max(0.0, deadline - time.monotonic()), project=args.project)
            except TimeoutError_ as err:
                print(f"dtrain: {err}" if len(names) == 1 else
                      f"dtrain: --timeout {args.timeout} ran out waiting for job {name!r} ({names.index(name)} of "
                      f"{len(names)} jobs ended); wait longer (--timeout) or check '{err.look}'", file=sys.stderr)
                return EXIT_TIMEOUT
            ended += 1
            if args.json:
                print(json.dumps(info.to_dict()))
            else:
                print(f"{info.name}: {info.status.value}" + (f" ({info.message})" if info.message else ""))
            failed |= info.status.value != "Succeeded"
    except KeyboardInterrupt:
        if ended == len(names):
            raise
        return _left(client, infos[names[ended]], "waiting for")
    return 1 if failed else 0


# What `--help` ends with, as kubectl's and runai's help do: commands to copy (a test parses each one)
EXAMPLES = {
    "submit": ["dtrain submit prep --pvc local:10Gi:/mnt -- python prepare.py --out /mnt/data",
               "dtrain submit train -p team-a --gpu 1 -e BATCH_SIZE=32 -- python train.py",
               "dtrain submit -f job.yaml"],
    "submit-dist": ["dtrain submit-dist cifar --processes 2 --cpu 1 -- python -m dtrain.workloads.cifar10 train "
                    "--data-dir data",
                    "dtrain submit-dist train --processes 4 --gpu 1 --large-shm --pvc data:/mnt -- python train.py"],
    "submit-mpi": ["dtrain submit-mpi train --processes 3 --gpu 1 --large-shm -e BATCH_SIZE=33 --pvc data:/mnt -- "
                   "python train.py"],
    "logs": ["dtrain logs train -f                  # until the job ends; Ctrl-C stops following, not the job",
             "dtrain logs train -t 10 --rank 0",
             "dtrain logs train --since 10m --timestamps"],
    "wait": ["dtrain wait train --timeout 1h",
             "dtrain wait prep train && dtrain artifacts train --to out"],
}


class WithExamples(argparse.HelpFormatter):
    """argparse's help, with an `examples:` epilog kept line by line (argparse reflows every text)."""

    def _fill_text(self, text, width, indent):
        if text.startswith("examples:"):
            return "".join(indent + line for line in text.splitlines(keepends=True))
        return super()._fill_text(text, width, indent)


def _examples(verb: str) -> dict:
    return {"formatter_class": WithExamples,
            "epilog": "examples:\n" + "\n".join(f"  {line}" for line in EXAMPLES[verb])}


def register(sub) -> None:
    for verb, dist, mpi in (("submit", False, False), ("submit-dist", True, False), ("submit-mpi", True, True)):
        p = sub.add_parser(verb, help={"submit": "submit a one-process job",
                                       "submit-dist": "submit a data-parallel job (torchrun or mpi)",
                                       "submit-mpi": "submit an MPI data-parallel job"}[verb],
                           usage=f"dtrain {verb} NAME [options] -- COMMAND [ARGS...]", **_examples(verb))
        add_job_options(p, dist=dist, mpi=mpi)
        p.set_defaults(handler=cmd_submit, takes_command=True,
                       launcher_for="mpi" if mpi else ("dist" if dist else None))
    p = sub.add_parser("list", help="list jobs")
    p.add_argument("what", nargs="?", default="jobs", metavar="jobs",
                   help="what to list: jobs (volumes: 'dtrain volume list', snapshots: 'dtrain snapshot list')")
    which = p.add_mutually_exclusive_group()  # -A with -p named a project it then did not look at
    which.add_argument("-p", "--project", help="this project's jobs (default: the configured project)")
    which.add_argument("-A", "--all-projects", action="store_true", help="jobs of every project")
    p.add_argument("--show-deleted", action="store_true", help="also list deleted jobs")
    p.add_argument("-l", "--selector", metavar="SELECTOR",
                   help="only jobs whose labels match, as kubectl's -l: KEY=VALUE, KEY!=VALUE, KEY, !KEY, comma-separated")
    p.add_argument("--json", action="store_true", help="print a JSON list")
    p.set_defaults(handler=cmd_list)
    p = sub.add_parser("describe", help="describe a job: spec, status history, processes",
                       usage="dtrain describe [job] NAME [-p PROJECT] [--json]")
    p.add_argument("names", nargs="+", metavar="[job] NAME", help="the job (the word 'job' is optional)")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    _project_flag(p)
    p.set_defaults(handler=cmd_describe)
    p = sub.add_parser("logs", help="print a job's logs", **_examples("logs"))
    p.add_argument("name", help="the job (the word 'job' before it is optional)")
    p.add_argument("-f", "--follow", action="store_true",
                   help="keep printing new lines until the job ends or is suspended")
    p.add_argument("--previous", action="store_true",
                   help="the lines of the attempt before the current one, after a restart (--max-restarts); "
                        "without it, the current attempt's")
    p.add_argument("-t", "--tail", type=whole_number, metavar="N",
                   help="only the last N lines; -1 (as kubectl's): all of them, the default")
    p.add_argument("--rank", help="a process rank, or 'all' (default: all)")
    p.add_argument("--pod", help=argparse.SUPPRESS)  # Run:AI's and kubectl's: answered with --rank
    p.add_argument("--limit-bytes", type=whole_number, metavar="N",
                   help="at most N bytes of the log (as kubectl's), the last line cut short")
    p.add_argument("-c", "--container", help=argparse.SUPPRESS)  # kubectl's: answered with --rank
    p.add_argument("--all-containers", nargs="?", const="true", help=argparse.SUPPRESS)
    when = p.add_mutually_exclusive_group()  # as Run:AI's: one or the other
    when.add_argument("--since", help="only lines newer than a duration (10m) or a time")
    when.add_argument("--since-time", metavar="TIME", help="only lines newer than a time, e.g. 2026-11-30T12:00:00Z")
    p.add_argument("--timestamps", action="store_true", help="prefix each line with its time")
    p.add_argument("--json", action="store_true", help="one JSON object per line: rank, time, text")
    _project_flag(p)
    p.set_defaults(handler=cmd_logs)
    p = sub.add_parser("delete", help="stop and delete jobs",
                       usage="dtrain delete [job] NAME [NAME...] [-p PROJECT] [--purge]\n"
                             "       dtrain delete [job] --all [-p PROJECT] [--purge]")
    p.add_argument("names", nargs="*", metavar="[job] NAME", help="the jobs (the word 'job' is optional)")
    p.add_argument("-A", "--all", action="store_true",
                   help="every job of the project (-p, default: the configured one), as Run:AI's --all; with "
                        "--purge, the deleted ones too")
    p.add_argument("--purge", action="store_true",
                   help="also forget the job: its record, events and logs (and a local notebook's own work folder)")
    _project_flag(p)
    p.set_defaults(handler=cmd_delete)
    for verb, what in (("suspend", "stop jobs for now: they checkpoint and free their GPUs until resumed"),
                       ("resume", "queue suspended jobs again; they go on from their last checkpoint")):
        p = sub.add_parser(verb, help=what, usage=f"dtrain {verb} [job] NAME [NAME...] [-p PROJECT]\n"
                                                  f"       dtrain {verb} [job] --all [-p PROJECT]")
        p.add_argument("names", nargs="*", metavar="[job] NAME", help="the jobs (the word 'job' is optional)")
        p.add_argument("-A", "--all", action="store_true",
                       help=f"every {_PAUSES[verb][0].removeprefix('a ')} of the project (-p, default: the "
                            f"configured one), as Run:AI's --all")
        _project_flag(p)
        p.set_defaults(handler=cmd_suspend_resume)
    p = sub.add_parser("artifacts", help="copy a job's model folder (SageMaker: model.tar.gz, unpacked) to a folder")
    p.add_argument("name", help="the job (the word 'job' before it is optional)")
    p.add_argument("--to", required=True, metavar="DIR", help="a new (or empty) folder")
    p.add_argument("--output-data", action="store_true",
                   help="SageMaker: the job's output data ($SM_OUTPUT_DATA_DIR, output.tar.gz) instead of its model")
    _project_flag(p)
    p.set_defaults(handler=cmd_artifacts)
    p = sub.add_parser("exec", help="run a command beside a running job's process (its volumes, environment)",
                       usage="dtrain exec NAME [--rank R] [--pod-running-timeout T] [-p PROJECT] -- COMMAND [ARGS...]")
    p.add_argument("name", help="the job, Running (the word 'job' before it is optional)")
    p.add_argument("--rank", help="which process (default 0)")
    p.add_argument("--pod", help=argparse.SUPPRESS)  # Run:AI's and kubectl's: answered with --rank
    _running_timeout_flag(p)
    _project_flag(p)
    p.set_defaults(handler=cmd_exec, takes_command=True, launcher_for=None)
    p = sub.add_parser("bash", help="a shell beside a running job's process (Run:AI's 'runai bash'): exec NAME -- bash",
                       usage="dtrain bash NAME [--rank R] [-p PROJECT]")
    p.add_argument("name", help="the job, Running (the word 'job' before it is optional)")
    p.add_argument("--rank", help="which process (default 0)")
    p.add_argument("--pod", help=argparse.SUPPRESS)  # Run:AI's and kubectl's: answered with --rank
    _running_timeout_flag(p)
    _project_flag(p)
    p.set_defaults(handler=cmd_bash)
    p = sub.add_parser("wait", help=f"wait until jobs end; exit 0 if all succeeded, 1 if any did not, "
                                    f"{EXIT_TIMEOUT} if --timeout ran out",
                       usage="dtrain wait [job] NAME [NAME...] [--timeout T] [-p PROJECT] [--json]",
                       description=f"Wait until the jobs end, one after another, as kubectl wait: exit 0 if all "
                                   f"succeeded, 1 if any did not, {EXIT_TIMEOUT} if --timeout ran out first.",
                       **_examples("wait"))
    p.add_argument("names", nargs="+", metavar="[job] NAME",
                   help="the jobs, waited for in turn (the word 'job' is optional)")
    p.add_argument("--timeout",
                   help="give up after this many seconds, or a duration such as 10m, for all the jobs together "
                        "(exit code 124; default: never)")
    p.add_argument("--json", action="store_true", help="print each finished job as one JSON object (a line each)")
    _project_flag(p)
    p.set_defaults(handler=cmd_wait)


def _running_timeout_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--pod-running-timeout", metavar="T",
                   help="wait this long for a Pending job or a process still being launched to run, in seconds or "
                        "a duration such as 5m, as kubectl exec (default 1m; 0: refuse at once)")


def running_timeout(text: str | None) -> float:
    """--pod-running-timeout as `wait --timeout` reads its number: seconds or a Go duration, bounded."""
    if text is None:
        return EXEC_RUNNING_WAIT
    return _seconds(text, lambda: SpecError(f"invalid --pod-running-timeout {shown(text.strip() or text)}: use seconds "
                                            f"from 0 to {MAX_WAIT_TIMEOUT} (366 days) or a duration, e.g. "
                                            f"--pod-running-timeout 5m"))


def _project_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("-p", "--project", help="the job's project, as Run:AI's -p: given, a job of another project "
                                           "is not found (without it, any project's: job names are unique "
                                           "across projects)")

"""Submitting a job (submit, submit-dist, submit-mpi): its flags and a YAML job file (-f) merged into
the one JobSpec, flags winning; then the job submitted, or with --dry-run what would run printed."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Mapping
from pathlib import Path

from dtrain.cli import format as fmt
from dtrain.client import Client
from dtrain.config import read_small_file
from dtrain.errors import SpecError
from dtrain.names import shown
from dtrain.wording import FileDoor
from dtrain.spec import (NUMBER_FIELDS, JobSpec, check_sagemaker_mapping, check_yaml_numbers, parse_env, parse_labels,
                         parse_node_selector, parse_pvc, parse_toleration, sagemaker_backend, yaml_mapping)
from dtrain.spec_sagemaker import parse_channel, parse_hyperparameters


# flag dest -> spec field, for flags that map one to one
_FIELDS = ("processes", "launcher", "gpu", "cpu", "memory", "large_shm", "working_dir", "project", "backend",
           "max_restarts", "snapshot_on_success", "image", "image_pull_policy")


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


_SM_FLAGS = ("local", "instance_type", "instance_count", "source_dir", "spot", "max_runtime", "max_wait",
             "volume_size", "network_isolation", "encrypt_inter_container", "checkpoint_uri",
             "checkpoint_local_path", "output_path")


def _channel(text: str):
    """--channel NAME=file://REL is relative to the working folder (the CLI knows it; the spec must not)."""
    name, sep, uri = text.partition("=")
    if sep and uri.startswith("file://") and not uri.startswith("file:///"):
        uri = "file://" + str(Path(uri[len("file://"):]).resolve())
    return parse_channel(f"{name}={uri}" if sep else text, door="cli")


def _sagemaker_fields(args: argparse.Namespace, data: dict) -> set[str]:
    """SageMaker flags -> the spec's `sagemaker` mapping (flags win over the file's); the options the
    flags gave (the others the file gave are named as written there)."""
    sm = dict(check_sagemaker_mapping(data.get("sagemaker") or {}))
    flagged = {k for k in _SM_FLAGS if getattr(args, k, None) is not None}
    flagged |= {k for k, given in (("source_dir", args.source_dir), ("channels", args.channel),
                                   ("hyperparameters", args.hp)) if given}
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
    return flagged


# The job file's nested blocks and what each must be: the flags merge into them.
_BLOCKS = {"env": (Mapping, "a mapping of NAME: value, e.g. env: {SEED: '1'}"),
           "labels": (Mapping, "a mapping of KEY: value, e.g. labels: {team: vision}"),
           "node_selector": (Mapping, "a mapping of KEY: value, e.g. node_selector: {run.ai/type: dgx-a100}"),
           "tolerations": ((list, tuple), "a list, e.g. tolerations: [{key: nvidia.com/gpu, operator: Exists}]"),
           "sagemaker": (Mapping, "a mapping of SageMaker options, e.g. sagemaker: {instance_type: ml.m5.xlarge}"),
           "volumes": ((list, tuple), "a list, e.g. volumes: [data:/mnt]"),
           "pvc": ((list, tuple), "a list, e.g. pvc: [data:/mnt]"),
           "image_pull_secrets": ((list, tuple), "a list of names, e.g. image_pull_secrets: [regcred]")}


def _check_blocks(data: Mapping, source: str) -> None:
    """Each nested block of job file `source` of its kind, refused naming the field as written there."""
    for key, (kind, what) in _BLOCKS.items():
        if data.get(key) is not None and not isinstance(data[key], kind):
            raise SpecError(f"{source}: invalid {key}: {shown(data[key])}: must be {what}")


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
        _check_blocks(data, f"job file {shown(args.file)}")
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
    hint = _hint_command(data, client)
    for key in ("pvc", "volumes"):  # the file's `volumes: [./data:/mnt]`, named as written there, not as --pvc
        for entry in data_file.get(key) or ():  # hinted as --pvc ./data is: with the -p and --backend given
            if isinstance(entry, str):
                parse_pvc(entry, cmd=hint, key=key, source=f"job file {shown(args.file)}")
    if args.pvc:  # as -e overrides the file's variable of the same name, --pvc its mount at the same path
        given = [parse_pvc(v, cmd=hint) for v in args.pvc]
        taken = {v.mount_path for v in given}
        kept = [v for v in (data.get("volumes") or []) if _mount_of(v) not in taken]
        data["volumes"] = [*kept, *(v.to_flag() for v in given)]
    if args.image_pull_secret:
        data["image_pull_secrets"] = args.image_pull_secret
    chosen = data.get("backend")
    flagged = _sagemaker_fields(args, data)
    if command:
        data["command"] = command
    data.setdefault("project", client.default_project)
    if isinstance(data["project"], str):  # the configured backend of the project, as `list` uses
        data.setdefault("backend", client.config.backend_for(data["project"]))
    # the options' own refusals first (--max-wait 1e9), as on any backend; a field the file gave named as written
    file_sm = data_file.get("sagemaker") if isinstance(data_file.get("sagemaker"), Mapping) else {}
    door = FileDoor(f"job file {shown(args.file)}", (k for k, v in data_file.items() if data.get(k) is v),
                    {k: "sagemaker" for k in file_sm if isinstance(k, str) and k not in flagged})
    spec = JobSpec.from_dict(data, door=door)
    if chosen is None and spec.backend == "sagemaker":
        _configured_for(spec, client, given=sorted(data.get("sagemaker") or {}), from_file="sagemaker" in data_file)
    return spec


def _hint_command(data: Mapping, client: Client) -> Callable[[str], str]:
    """`dtrain WORDS` as a hint names it for the job being read: with the -p and --backend the flags
    or the job file gave (the spec layer, which words the hint, knows neither)."""
    project = data.get("project") if isinstance(data.get("project"), str) else None
    backend = data.get("backend") if isinstance(data.get("backend"), str) else None
    backend = backend or client.config.backend_for(project or client.default_project)
    return lambda words: client.command_for(words, backend=backend, project=project)


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
        return dry_run(spec, client, as_json=args.json)
    info = client.submit(spec)
    if args.json:
        print(fmt.record_text(info.to_dict(), args.json, indent=None))
        return 0
    print(f"The job '{info.name}' has been submitted successfully ({info.spec.kind}, "
          f"{info.spec.processes} process{'es' if info.spec.processes > 1 else ''}, backend {info.backend})")
    # `describe` asks the configured project's backend (on Kubernetes, its namespace): a job of another
    # project is named with -p (its backend, its namespace), one sent elsewhere (--backend) with that too
    print(f"You can run '{client.command_for(f'describe job {info.name}', backend=info.backend, project=info.spec.project)}' "
          f"to check the job status")
    return 0


def dry_run(spec: JobSpec, client: Client, as_json: bool | str = False) -> int:
    requests = client.render(spec)
    if spec.backend == "sagemaker":
        print(fmt.record_text(requests, as_json))  # the requests exactly as boto3 would send them
    else:  # a comment keeps the output a job file, or manifests for kubectl apply; JSON takes no comment
        notes = sys.stderr if as_json else sys.stdout
        if (snapshot := client.planned_snapshot(spec)) is not None:
            print(f"# --snapshot-on-success takes snapshot {snapshot}", file=notes)
        for notice in requests.notices:  # Kubernetes: the watcher's Role that submit would update, or leave
            print(f"# {notice.message}", file=notes)
        print(fmt.dry_run_text(requests, as_json), end="")
    return 0

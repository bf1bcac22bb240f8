"""Pure translation: job spec -> CreateTrainingJob request and the S3 upload plan.

Names follow the SageMaker Python SDK, so the training toolkit in the image reads the request
as it reads an SDK job: `sagemaker_program` / `sagemaker_submit_directory` name the code,
`sagemaker_torch_distributed_enabled` asks for torchrun on every host (PyTorch estimator,
distribution={"torch_distributed": {"enabled": True}}), `sagemaker_mpi_enabled` +
`sagemaker_mpi_num_of_processes_per_host` for mpirun (distribution={"mpi": ...}). Every
hyperparameter value is JSON-encoded, as the SDK does (`epochs: 2` is "2", a string "abc" is
'"abc"', a command's `--epochs 2` the string "2"); the toolkit decodes it.
"""

from __future__ import annotations

import json
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass, field

from dtrain.backends.sagemaker.config import SageMakerConfig
from dtrain.errors import SpecError
from dtrain.names import counted, shown
from dtrain.spec import JobSpec
from dtrain.spec_sagemaker import (MAX_HYPERPARAMETERS, MAX_INSTANCES, TOOLKIT_PREFIX, Channel, SageMakerOptions,
                                    gpu_type, hp_text)

ENTRY = "dtrain_entry.py"  # written into the source archive when the command is not `python X.py`
SOURCE_ARCHIVE = "sourcedir.tar.gz"
SPEC_FILE = "dtrain-spec.json"  # the job spec, stored beside the code so `describe` can show it
CHECKPOINT_DIR = "/opt/ml/checkpoints"
PYTHONS = ("python", "python3")
MAX_RETRY_ATTEMPTS = 30  # RetryStrategy.MaximumRetryAttempts: 1-30
# GPUs of the training instance types that have them: a GPU job fills whole instances, one process
# per --gpu G GPUs. The g and p families are GPU types (as the SageMaker SDK reads them); a newer
# one missing here needs --instance-count for a --gpu job. The others are CPU (or Trainium) types:
# one process per instance, unless --instance-count says otherwise, and no --gpu.
GPUS_PER_INSTANCE = {
    **{f"ml.{family}.{size}": 1 for family in ("g4dn", "g5", "g6", "g6e")
       for size in ("xlarge", "2xlarge", "4xlarge", "8xlarge", "16xlarge")},
    **{f"ml.{family}.12xlarge": 4 for family in ("g4dn", "g5", "g6", "g6e")},
    **{f"ml.{family}.24xlarge": 4 for family in ("g5", "g6", "g6e")},
    **{f"ml.{family}.48xlarge": 8 for family in ("g5", "g6", "g6e", "p5", "p5e", "p5en")},
    "ml.p3.2xlarge": 1, "ml.p3.8xlarge": 4, "ml.p3.16xlarge": 8, "ml.p3dn.24xlarge": 8,
    "ml.p4d.24xlarge": 8, "ml.p4de.24xlarge": 8, "ml.p5.4xlarge": 1,
    "ml.p2.xlarge": 1, "ml.p2.8xlarge": 8, "ml.p2.16xlarge": 16,
    "ml.p6-b200.48xlarge": 8, "ml.p6-b300.48xlarge": 8, "ml.p6e-gb200.36xlarge": 4,
}


def instance_gpus(itype: str) -> int | None:
    """The GPUs of an instance type: 0 for a CPU or Trainium type, None for a GPU type whose
    count dtrain does not know."""
    if itype in GPUS_PER_INSTANCE:
        return GPUS_PER_INSTANCE[itype]
    return None if gpu_type(itype) else 0


@dataclass(frozen=True, kw_only=True)
class Program:
    """What SageMaker runs: the entry file, its fixed arguments and the hyperparameters."""

    program: str  # file at the archive's root (sagemaker_program)
    entry_argv: tuple[str, ...] = ()  # for the generated entry: the command it runs (hps appended)
    hyperparameters: dict[str, str] = field(default_factory=dict)  # --key value flags of the command (text)


@dataclass(frozen=True, kw_only=True)
class UploadPlan:
    """The objects `submit` puts in S3 before CreateTrainingJob."""

    source_dir: str  # local folder packed as sourcedir.tar.gz
    bucket: str
    source_key: str  # PREFIX/JOB/source/sourcedir.tar.gz
    spec_key: str  # PREFIX/JOB/dtrain-spec.json
    entry: str | None = None  # contents of dtrain_entry.py, when generated

    def requests(self) -> list[dict]:
        """The PutObject requests (without bodies), as --dry-run prints them."""
        return [{"Bucket": self.bucket, "Key": self.source_key, "ContentType": "application/gzip"},
                {"Bucket": self.bucket, "Key": self.spec_key, "ContentType": "application/json"}]


def options(spec: JobSpec) -> SageMakerOptions:
    return spec.sagemaker or SageMakerOptions()


def split_command(command: tuple[str, ...]) -> Program:
    """`python train.py --lr 0.1` -> program train.py with hyperparameter lr; anything else runs
    through a generated entry file that execs the command with SageMaker's arguments appended."""
    if len(command) >= 2 and posixpath.basename(command[0]) in PYTHONS and command[1].endswith(".py") \
            and "/" not in command[1]:
        fixed, hps = _flags(list(command[2:]))
        if not fixed:
            return Program(program=command[1], hyperparameters=hps)
    fixed, hps = _flags(list(command))
    return Program(program=ENTRY, entry_argv=tuple(fixed), hyperparameters=hps)


def script_of(command: tuple[str, ...]) -> str | None:
    """The Python file a `python [FLAGS] FILE.py ...` command runs, as a path inside the code
    folder; None for any other command (a module, a program, an absolute path)."""
    if len(command) < 2 or posixpath.basename(command[0]) not in PYTHONS:
        return None
    args = list(command[1:])
    while args and args[0].startswith("-") and args[0] not in ("-m", "-c", "-"):
        args.pop(0)  # python's own flags: -u, -O, -X dev would take a value, and is rare
    if not args or not args[0].endswith(".py") or posixpath.isabs(args[0]):
        return None
    return posixpath.normpath(args[0])


def _flags(args: list[str]) -> tuple[list[str], dict[str, str]]:
    """Split trailing `--key value` / `--key=value` pairs off the arguments; keep the rest fixed."""
    start = next((i for i, a in enumerate(args) if a.startswith("--")), len(args))
    fixed, rest, hps = args[:start], args[start:], {}
    i = 0
    while i < len(rest):
        key, eq, value = rest[i][2:].partition("=")
        if not rest[i].startswith("--") or not key:
            return args, {}
        if not eq:
            if i + 1 >= len(rest) or rest[i + 1].startswith("--"):
                return args, {}  # a bare flag cannot travel as a hyperparameter
            value, i = rest[i + 1], i + 1
        if key in hps or key.startswith(TOOLKIT_PREFIX):
            return args, {}  # a repeated flag (hyperparameters hold one value a name) or a toolkit name
        if len(key) == 1:  # the training toolkit passes a one-letter hyperparameter back as `-k`, not `--k`
            return args, {}
        hps[key] = value
        i += 1
    return fixed, hps


def entry_script(argv: tuple[str, ...]) -> str:
    """The generated entry point: run the job's command with the hyperparameter flags appended."""
    return (
        '"""Written by dtrain: runs the job\'s command with the arguments SageMaker passes."""\n'
        "import os, sys\n"
        f"argv = {list(argv)!r}\n"
        f"if argv[0] in {PYTHONS!r}:\n"
        "    argv[0] = sys.executable\n"
        "os.execvp(argv[0], argv + sys.argv[1:])\n"
    )


def instances(spec: JobSpec, cfg: SageMakerConfig) -> tuple[int, int]:
    """(InstanceCount, processes per instance) for the spec's --processes and --gpu: on a GPU type,
    as many processes per instance as its GPUs hold (--gpu each); elsewhere one per instance."""
    opts, itype = options(spec), options(spec).instance_type or cfg.instance_type
    gpus = instance_gpus(itype)
    processes, gpu = shown(spec.typed("processes")), shown(spec.typed("gpu"))  # as typed: --processes 1E3
    if spec.gpu > 0 and gpus == 0:
        raise SpecError(f"{itype} has no GPUs, and the job asks for --gpu {gpu}: pick a GPU type "
                        f"(--instance-type ml.g5.xlarge, ml.p4d.24xlarge) or drop --gpu")
    if spec.gpu > 0 and gpus is None and opts.instance_count is None and spec.launcher != "none":
        raise SpecError(f"the number of GPUs of an {itype} is not known here: set --instance-count (the "
                        f"--processes split evenly over the instances)")
    if opts.instance_count is not None:
        count = opts.instance_count
    elif spec.gpu > 0 and spec.launcher != "none" and gpus:
        count = -(-spec.processes // max(1, gpus // spec.gpu))
    else:
        count = spec.processes
    if count > MAX_INSTANCES:
        raise SpecError(f"--processes {processes} would take {count} instances, more than {MAX_INSTANCES}: "
                        f"pick a type with more GPUs, or fewer processes")
    if spec.launcher == "none" and count > 1:
        raise SpecError("a one-process job runs on one instance: drop --instance-count or use submit-dist")
    if spec.processes % count and opts.instance_count is not None:  # the count the user typed: name what divides
        fits = [n for n in range(1, min(spec.processes, MAX_INSTANCES) + 1) if spec.processes % n == 0]
        fitting = count * (spec.processes // count) or count  # the nearest multiple at or below, else the count
        raise SpecError(f"--processes {processes} does not split evenly over --instance-count "
                        f"{shown(opts.instance_count)}: use --processes {fitting} (a multiple of {count}) or an "
                        f"--instance-count that divides {spec.processes} "
                        f"({', '.join(map(str, fits[:8]))}{', ...' if len(fits) > 8 else ''})")
    if spec.processes % count:
        raise SpecError(f"--processes {processes} does not split evenly over {count} instances: "
                        f"use a multiple of {count} or set --instance-count")
    per_host = spec.processes // count
    if spec.gpu > 0 and gpus is not None and per_host * spec.gpu > gpus:
        raise SpecError(f"{counted(per_host, 'process', 'processes')} x --gpu {gpu} exceed the {counted(gpus, 'GPU')} of {itype}: "
                        f"raise --instance-count or pick a larger type")
    return count, per_host


def s3_uri(cfg: SageMakerConfig, job: str, *parts: str) -> str:
    return "s3://" + posixpath.join(cfg.bucket, cfg.prefix, job, *parts)


def _key(cfg: SageMakerConfig, job: str, *parts: str) -> str:
    return posixpath.join(cfg.prefix, job, *parts)


def upload_plan(spec: JobSpec, cfg: SageMakerConfig, *, cwd: str) -> UploadPlan:
    prog = split_command(spec.command)
    return UploadPlan(source_dir=options(spec).source_dir or spec.working_dir or cwd, bucket=cfg.bucket,
                      source_key=_key(cfg, spec.name, "source", SOURCE_ARCHIVE),
                      spec_key=_key(cfg, spec.name, SPEC_FILE),
                      entry=entry_script(prog.entry_argv) if prog.entry_argv else None)


def hyperparameters(spec: JobSpec, cfg: SageMakerConfig) -> dict[str, str]:
    prog, opts = split_command(spec.command), options(spec)
    _, per_host = instances(spec, cfg)
    twice = sorted(k for k in set(prog.hyperparameters) & set(opts.hyperparameters)
                   if not _same(prog.hyperparameters[k], opts.hyperparameters[k]))
    if twice:
        k = twice[0]
        raise SpecError(f"hyperparameter {k} is given twice, as --{k} {prog.hyperparameters[k]} in the command and "
                        f"as --hp {k}={hp_text(opts.hyperparameters[k])}: give it once")
    hps: dict[str, object] = {**prog.hyperparameters, **opts.hyperparameters}
    _check_spellings(prog.hyperparameters, opts.hyperparameters)
    _check_nccl(hps, prog.entry_argv, opts.instance_type or cfg.instance_type)
    hps.update(sagemaker_program=prog.program,
               sagemaker_submit_directory=s3_uri(cfg, spec.name, "source", SOURCE_ARCHIVE),
               sagemaker_container_log_level=20, sagemaker_job_name=spec.name, sagemaker_region=cfg.region)
    if spec.launcher == "torchrun":
        # The toolkit's torchrun runs sagemaker_mpi_num_of_processes_per_host processes on each host
        # (its runner reads that parameter for every launcher), else one per GPU: sent always, so
        # the job has --processes ranks whatever the type's GPU count.
        hps.update(sagemaker_torch_distributed_enabled=True,
                   sagemaker_instance_type=opts.instance_type or cfg.instance_type,
                   sagemaker_mpi_num_of_processes_per_host=per_host)
    elif spec.launcher == "mpi":
        hps.update(sagemaker_mpi_enabled=True, sagemaker_mpi_num_of_processes_per_host=per_host)
    if len(hps) > MAX_HYPERPARAMETERS:  # SageMaker's limit counts the toolkit's own entries too
        given = {**prog.hyperparameters, **opts.hyperparameters}
        raise SpecError(f"{len(given)} hyperparameters (the command's --name value pairs and --hp) and the "
                        f"{len(hps) - len(given)} sagemaker_* ones the training toolkit needs make {len(hps)}, "
                        f"more than SageMaker's {MAX_HYPERPARAMETERS}: pass at most "
                        f"{MAX_HYPERPARAMETERS - len(hps) + len(given)} (put the rest in a config file with the code)")
    return {k: json.dumps(v) for k, v in hps.items()}  # as the SDK: 2 -> '2', True -> 'true', 'abc' -> '"abc"'


def _check_spellings(command: dict[str, str], given: Mapping[str, object]) -> None:
    """Refuse one name in two spellings (batch-size and batch_size) with two values: argparse reads
    both as one option (the CIFAR10 workload declares both), the toolkit passes hyperparameters
    sorted by name, and the later one ('_' sorts after '-') won without a word."""
    seen: dict[str, tuple[str, str]] = {}  # batch-size -> (the name as given, where)
    values = {**command, **given}  # a name in both places has one value here (refused above when not)
    for key in sorted(values):
        said = f"--hp {key}={hp_text(given[key])}" if key in given else f"--{key} {command[key]} in the command"
        first, where = seen.setdefault(key.replace("_", "-"), (key, said))
        if first != key and str(values[first]) != str(values[key]):  # the toolkit passes str(value)
            raise SpecError(f"hyperparameter {key} is given twice, as {where} and as {said}: a script reads "
                            f"--{first} and --{key} as one option and would get only --{key} (the later, as "
                            f"SageMaker passes them); give it once")


def _check_nccl(hps: dict[str, object], argv: tuple[str, ...], itype: str) -> None:
    """`--backend nccl` (the torch.distributed backend, a hyperparameter in the SageMaker SDK's PyTorch
    examples and the CIFAR10 workload's flag) needs a GPU per process: on a CPU or Trainium type the job
    would fail in its first collective after SageMaker launched (and billed) its instances."""
    given = [hps.get("backend")]  # a hyperparameter, or a flag of the command's fixed part
    for i, arg in enumerate(argv):
        if arg.startswith("--backend="):
            given.append(arg[len("--backend="):])
        elif arg == "--backend" and i + 1 < len(argv):
            given.append(argv[i + 1])
    if "nccl" in given and instance_gpus(itype) == 0:
        raise SpecError(f"--backend nccl needs a GPU per process, and {itype} has no GPUs: use --backend gloo, or "
                        f"a GPU instance type (--instance-type ml.g5.xlarge)")


def _same(text: str, value: object) -> bool:
    """Whether a command's `--key text` and a typed hyperparameter say the same: the script gets
    the same argument (`--epochs 2` for 2) or the text is that value's JSON (`--amp true`)."""
    if isinstance(value, str):
        return text == value
    return text == str(value) or text == json.dumps(value)


def channel(ch: Channel, *, local: bool) -> dict:
    if ch.kind == "s3" or (ch.kind == "file" and local):
        source = {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": ch.uri,
                                   "S3DataDistributionType": "FullyReplicated"}}
    elif ch.kind in ("efs", "fsx"):
        fs_id, _, path = ch.uri.split("://", 1)[1].partition("/")
        source = {"FileSystemDataSource": {"FileSystemId": fs_id, "FileSystemAccessMode": "ro",
                                           "FileSystemType": "EFS" if ch.kind == "efs" else "FSxLustre",
                                           "DirectoryPath": "/" + path}}
    else:
        raise SpecError(f"channel {ch.to_flag()} is a local folder, which only --local jobs can read: "
                        f"upload it (aws s3 sync) and use --channel {ch.name}=s3://BUCKET/PREFIX")
    return {"ChannelName": ch.name, "DataSource": source, "InputMode": "File"}


def training_job_request(spec: JobSpec, cfg: SageMakerConfig) -> dict:
    """The CreateTrainingJob request for a spec; pure, so --dry-run prints exactly what is sent."""
    opts = options(spec)
    if spec.volumes:
        raise SpecError("SageMaker jobs read data from channels, not volumes: replace --pvc with "
                        "--channel NAME=s3://BUCKET/PREFIX (or efs://FS-ID/PATH)")
    if spec.node_selector:  # SageMaker starts instances of one type for the job: there are no nodes to pick
        asked = ", ".join(f"{k}={v}" for k, v in spec.node_selector.items())
        raise SpecError(f"SageMaker has no node selection ({asked}): the machine is the instance type; drop "
                        f"--node-selector/--node-type and give --instance-type (e.g. ml.p4d.24xlarge)")
    if spec.tolerations:  # nor taints to tolerate: the instances are the job's alone
        raise SpecError(f"SageMaker has no node taints to tolerate ({spec.tolerations[0].to_flag()}): the machine is "
                        f"the instance type; drop --toleration and give --instance-type (e.g. ml.p4d.24xlarge)")
    if any(c.kind in ("efs", "fsx") for c in opts.channels) and cfg.vpc is None and not opts.local:
        raise SpecError("EFS and FSx channels are reached through a VPC, and none is configured: run "
                        "dtrain config sagemaker --subnets subnet-... --security-groups sg-...")
    if spec.snapshot_volume:
        raise SpecError(f"SageMaker jobs have no volumes to snapshot ({spec.snapshot_volume!r}): drop "
                        f"--snapshot-on-success (or ENABLE_SNAPSHOT); the model folder is saved to S3")
    if spec.max_restarts > MAX_RETRY_ATTEMPTS:
        raise SpecError(f"--max-restarts {shown(spec.typed('max_restarts'))}: SageMaker retries a job at most "
                        f"{MAX_RETRY_ATTEMPTS} times; use 0-{MAX_RETRY_ATTEMPTS}")
    count, _ = instances(spec, cfg)
    req = {
        "TrainingJobName": spec.name,
        "HyperParameters": hyperparameters(spec, cfg),
        "AlgorithmSpecification": {"TrainingImage": spec.image or cfg.image_uri(opts.instance_type or cfg.instance_type), "TrainingInputMode": "File"},
        "RoleArn": cfg.role,
        "OutputDataConfig": {"S3OutputPath": opts.output_path or "s3://" + posixpath.join(cfg.bucket, cfg.prefix)},
        "ResourceConfig": {"InstanceType": opts.instance_type or cfg.instance_type, "InstanceCount": count,
                           "VolumeSizeInGB": opts.volume_size},
        "StoppingCondition": {"MaxRuntimeInSeconds": opts.max_runtime},
        "Environment": {"DTRAIN_JOB_NAME": spec.name, "DTRAIN_PROJECT": spec.project, **spec.env},
        "EnableNetworkIsolation": opts.network_isolation,
        "EnableInterContainerTrafficEncryption": opts.encrypt_inter_container,
        "EnableManagedSpotTraining": opts.spot,
        "CheckpointConfig": {"S3Uri": opts.checkpoint_uri or s3_uri(cfg, spec.name, "checkpoints"),
                             "LocalPath": opts.checkpoint_local_path or CHECKPOINT_DIR},
        "Tags": [{"Key": "dtrain:project", "Value": spec.project}, {"Key": "dtrain:kind", "Value": spec.kind},
                 *({"Key": k, "Value": v} for k, v in spec.labels.items())],
    }
    if opts.channels:
        req["InputDataConfig"] = [channel(c, local=opts.local) for c in opts.channels]
    if opts.spot:
        req["StoppingCondition"]["MaxWaitTimeInSeconds"] = opts.spot_max_wait
    if cfg.vpc is not None:
        req["VpcConfig"] = cfg.vpc
    if spec.max_restarts:
        req["RetryStrategy"] = {"MaximumRetryAttempts": spec.max_restarts}
    return req

"""The SageMaker training contract, as pure functions of a CreateTrainingJob request.

What a training container sees on host `algo-i` (the SageMaker training toolkit's view):

    /opt/ml/input/config/hyperparameters.json   the request's HyperParameters (JSON-encoded strings)
    /opt/ml/input/config/resourceconfig.json    current_host, hosts, instance groups
    /opt/ml/input/config/inputdataconfig.json   one entry per channel
    /opt/ml/input/config/checkpointconfig.json  the request's CheckpointConfig (LocalPath, S3Uri), if any
    /opt/ml/input/data/<channel>/               the channel's files
    /opt/ml/code/                                sourcedir.tar.gz unpacked (cwd, on PYTHONPATH)
    /opt/ml/model/  /opt/ml/output/  /opt/ml/checkpoints/
    SM_HOSTS SM_CURRENT_HOST SM_NUM_GPUS SM_NUM_CPUS SM_CHANNELS SM_CHANNEL_<NAME> SM_MODEL_DIR
    SM_OUTPUT_DIR SM_OUTPUT_DATA_DIR SM_HPS SM_HP_<NAME> SM_USER_ARGS SM_USER_ENTRY_POINT
    SM_RESOURCE_CONFIG SM_INPUT_DATA_CONFIG SM_TRAINING_ENV ... (every SM_* the toolkit exports),
    SageMaker's TRAINING_JOB_NAME and TRAINING_JOB_ARN, and the request's Environment

The launch follows the toolkit: torch_distributed -> torchrun on every host (nnodes = hosts,
node rank = host index, rendezvous at algo-1); mpi -> mpirun from algo-1; otherwise the program.
Code with a setup.py is a Python package to the toolkit: it is pip-installed (with requirements.txt)
and its entry point runs as a module, `python -m train` for train.py.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from typing import Any

from dtrain import spec_sagemaker

OPT_ML = "/opt/ml"
MAX_REASON = 1024  # SageMaker's FailureReason: the first 1024 characters of /opt/ml/output/failure
MODEL_DIR, CODE_DIR, CHECKPOINTS = f"{OPT_ML}/model", f"{OPT_ML}/code", f"{OPT_ML}/checkpoints"


def decode(value: str) -> Any:
    """The toolkit's reading of a hyperparameter: JSON when it parses, the raw string otherwise."""
    try:
        return json.loads(value)
    except (TypeError, ValueError):
        return value


def user_hyperparameters(req: dict) -> dict[str, Any]:
    return {k: decode(v) for k, v in (req.get("HyperParameters") or {}).items() if not k.startswith("sagemaker_")}


def hosts(req: dict) -> list[str]:
    return [f"algo-{i + 1}" for i in range(int(req["ResourceConfig"]["InstanceCount"]))]


def resource_config(req: dict, host: str) -> dict:
    names = hosts(req)
    group = {"instance_group_name": "homogeneousCluster", "instance_type": req["ResourceConfig"]["InstanceType"],
             "hosts": names}
    return {"current_host": host, "current_instance_type": group["instance_type"],
            "current_group_name": group["instance_group_name"], "hosts": names, "instance_groups": [group],
            "network_interface_name": "lo"}


def input_data_config(req: dict) -> dict:
    """inputdataconfig.json: per channel, its ContentType where the request gives one (as SageMaker writes it,
    first), its input mode and distribution."""
    return {c["ChannelName"]: {**({"ContentType": c["ContentType"]} if c.get("ContentType") else {}),
                               "TrainingInputMode": c.get("InputMode", "File"),
                               "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}
            for c in req.get("InputDataConfig") or []}


CHECKPOINT_DEFAULT = "/opt/ml/checkpoints/"  # CheckpointConfig.LocalPath when a request gives none (API reference)


LOCAL_PATH_FIX = spec_sagemaker.LOCAL_PATH_FIX


def checkpoint_path(req: dict) -> str:
    """Where the job's container sees its checkpoints: CheckpointConfig.LocalPath, the default where none is
    given, without a trailing '/'."""
    given = (req.get("CheckpointConfig") or {}).get("LocalPath") or CHECKPOINT_DEFAULT
    return given.rstrip("/") or "/"


def local_path_problem(path: object) -> str | None:
    """The one line refusing a request's CheckpointConfig.LocalPath (spec_sagemaker.local_path_problem), or None."""
    why = spec_sagemaker.local_path_problem(path)
    return f"CheckpointConfig LocalPath {spec_sagemaker.said_path(path)} {why}: {LOCAL_PATH_FIX}" if why else None


def checkpoint_config(req: dict) -> dict | None:
    """checkpointconfig.json, which SageMaker writes into the container of a job with a CheckpointConfig:
    that config's LocalPath (its documented default where the request gives none) and S3Uri, the keys
    the request names them by (SageMaker Debugger reads LocalPath from it); None for a job without one."""
    given = req.get("CheckpointConfig")
    if not given:
        return None
    return {"LocalPath": given.get("LocalPath") or CHECKPOINT_DEFAULT, "S3Uri": given["S3Uri"]}


def user_args(req: dict) -> list[str]:
    """Hyperparameters as the toolkit passes them (its mapping.to_cmd_args): sorted by name, `--name`
    (`-n` for a one-letter name), the value as Python's str (True -> 'True', None -> ''), an object as
    'k=v,k2=v2'. A script parsing them sees here what it sees on SageMaker."""
    out: list[str] = []
    hps = user_hyperparameters(req)
    for key in sorted(hps):
        value = hps[key]
        text = ",".join(f"{k}={v}" for k, v in sorted(value.items())) if isinstance(value, dict) else _text(value)
        out += [f"--{key}" if len(key) > 1 else f"-{key}", text]
    return out


def _text(value: Any) -> str:
    return "" if value is None else str(value)


def env_value(value: Any) -> str:
    """A hyperparameter as the toolkit puts it in SM_HP_<NAME> (its mapping.to_env_vars)."""
    if value is None or isinstance(value, str):
        return _text(value)
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


# The sagemaker_* hyperparameters the toolkit keeps to itself; the others are its framework parameters.
TOOLKIT_OWN = ("sagemaker_program", "sagemaker_submit_directory", "sagemaker_enable_cloudwatch_metrics",
               "sagemaker_region", "sagemaker_container_log_level", "sagemaker_job_name", "sagemaker_module_name",
               "sagemaker_tuning_objective_metric", "sagemaker_s3_output")
DISTRIBUTED = ("sagemaker_mpi_enabled", "sagemaker_torch_distributed_enabled")  # of those dtrain sends


LOCAL_ACCOUNT = "000000000000"


def job_arn(name: str) -> str:
    """The ARN a --local job is known by (SageMaker's shape, a local region and account)."""
    return f"arn:aws:sagemaker:local:{LOCAL_ACCOUNT}:training-job/{name}"


def training_env(req: dict, host: str, *, num_cpus: int) -> dict[str, Any]:
    """The toolkit's Environment as a mapping (SM_TRAINING_ENV; SM_<KEY> each): every property it has,
    for a homogeneous cluster without GPUs, Neuron cores or SageMaker's data-parallel libraries."""
    sm = {k: decode(v) for k, v in (req.get("HyperParameters") or {}).items() if k.startswith("sagemaker_")}
    framework = {k: v for k, v in sm.items() if k not in TOOLKIT_OWN}
    names, channels = hosts(req), sorted(input_data_config(req))
    resources = resource_config(req, host)
    group = resources["current_group_name"]
    distributed = [group] if any(framework.get(k) for k in DISTRIBUTED) else []
    program = str(sm.get("sagemaker_program"))
    return {
        "additional_framework_parameters": framework,
        "channel_input_dirs": {c: f"{OPT_ML}/input/data/{c}" for c in channels},
        "current_host": host, "current_instance_group": group, "current_instance_group_hosts": names,
        "current_instance_type": resources["current_instance_type"],
        "distribution_hosts": names if distributed else [], "distribution_instance_groups": distributed,
        "framework_module": None, "hosts": names, "hyperparameters": user_hyperparameters(req),
        "input_config_dir": f"{OPT_ML}/input/config", "input_data_config": input_data_config(req),
        "input_dir": f"{OPT_ML}/input", "instance_groups": [group],
        "instance_groups_dict": {group: resources["instance_groups"][0]}, "is_hetero": False,
        "is_master": host == names[0], "is_modelparallel_enabled": None, "is_smddpmprun_installed": False,
        "is_smddprun_installed": False, "job_name": req.get("TrainingJobName", ""),
        "log_level": sm.get("sagemaker_container_log_level", 20), "master_hostname": names[0], "model_dir": MODEL_DIR,
        "module_dir": str(sm.get("sagemaker_submit_directory", CODE_DIR)),
        "module_name": program[:-3] if program.endswith(".py") else program, "network_interface_name": "lo",
        "num_cpus": num_cpus, "num_gpus": 0, "num_neurons": 0, "output_data_dir": f"{OPT_ML}/output/data",
        "output_dir": f"{OPT_ML}/output", "output_intermediate_dir": f"{OPT_ML}/output/intermediate",
        "resource_config": resources, "topology": [], "user_entry_point": sm.get("sagemaker_program"),
    }


# The Environment properties the toolkit exports as SM_<NAME> (its to_env_vars), besides those below.
EXPORTED = ("hosts", "network_interface_name", "user_entry_point", "resource_config", "input_data_config",
            "output_data_dir", "current_host", "current_instance_type", "current_instance_group",
            "current_instance_group_hosts", "instance_groups", "instance_groups_dict", "distribution_instance_groups",
            "is_hetero", "module_name", "log_level", "framework_module", "input_dir", "input_config_dir",
            "output_dir", "num_cpus", "num_gpus", "num_neurons", "model_dir", "module_dir", "output_intermediate_dir")


def environment(req: dict, host: str, *, num_cpus: int) -> dict[str, str]:
    """What the job's processes find in their environment: SageMaker's own variables (TRAINING_JOB_NAME,
    TRAINING_JOB_ARN), those the toolkit sets for itself (CURRENT_HOST, SAGEMAKER_JOB_NAME,
    SAGEMAKER_REGION), its SM_* variables (Environment.to_env_vars) and the request's Environment."""
    env = training_env(req, host, num_cpus=num_cpus)
    hps, dirs = env["hyperparameters"], env["channel_input_dirs"]
    exported = {**{k: env[k] for k in EXPORTED}, "hps": hps, "channels": sorted(dirs), "training_env": env,
                "framework_params": env["additional_framework_parameters"], "user_args": user_args(req),
                **{f"channel_{c}": d for c, d in dirs.items()}, **{f"hp_{k}": v for k, v in hps.items()}}
    sm = {k: decode(v) for k, v in (req.get("HyperParameters") or {}).items() if k.startswith("sagemaker_")}
    name = req.get("TrainingJobName", "")
    return {"TRAINING_JOB_NAME": name, "TRAINING_JOB_ARN": job_arn(name), "CURRENT_HOST": host,
            "SAGEMAKER_JOB_NAME": str(sm.get("sagemaker_job_name", "")),
            "SAGEMAKER_REGION": str(sm.get("sagemaker_region", "")),
            **{f"SM_{k.upper()}": env_value(v) for k, v in exported.items()}, **(req.get("Environment") or {})}


class ClientError(ValueError):
    """A request the toolkit refuses once the container runs (its ClientError): the job fails with it."""


def is_package(code_files: list[str]) -> bool:
    """The toolkit's test for a Python package entry point: a setup.py at the top of the code."""
    return "setup.py" in code_files


def install_command(code_files: list[str]) -> tuple[str, list[str]] | None:
    """What the toolkit runs in /opt/ml/code before the entry point, and the error it raises when that
    fails: a package is installed with its requirements (`pip install . -r requirements.txt`); a
    script's requirements.txt alone; nothing for a command, or without either file."""
    if is_package(code_files):
        reqs = ["-r", "requirements.txt"] if "requirements.txt" in code_files else []
        return "InstallModuleError", ["-m", "pip", "install", ".", *reqs]
    if "requirements.txt" in code_files:
        return "InstallRequirementsError", ["-m", "pip", "install", "-r", "requirements.txt"]
    return None


@dataclass(frozen=True, kw_only=True)
class HostLaunch:
    argv: list[str]  # the command run in /opt/ml/code (empty: this host waits, as MPI workers do)


def launch(req: dict, host: str, *, master_port: int, python: str = sys.executable, mpirun: str = "mpirun",
           package: bool = False) -> HostLaunch:
    """Host `host`'s command; `package`: the code has a setup.py (is_package). ClientError where the
    toolkit refuses the combination (a package under torch_distributed)."""
    sm = {k: decode(v) for k, v in (req.get("HyperParameters") or {}).items() if k.startswith("sagemaker_")}
    program = sm.get("sagemaker_program", "train.py")
    if package:  # the toolkit's runner: the entry point's name without ".py" as a module
        run = [python, "-m", program.replace(".py", "")]
    else:
        run = [python, program] if program.endswith(".py") else [f"./{program}"]
    names, args = hosts(req), user_args(req)
    # As the toolkit's runner: this parameter, else one process per GPU (none here: one).
    per_host = int(sm.get("sagemaker_mpi_num_of_processes_per_host") or 1)
    if sm.get("sagemaker_torch_distributed_enabled"):
        if package:  # the toolkit's words
            raise ClientError("Python packages are not supported for torch_distributed. "
                              "Please use a python script as the entry-point")
        script = [program] if program.endswith(".py") else ["--no-python", f"./{program}"]
        return HostLaunch(argv=[python, "-m", "torch.distributed.run", f"--nnodes={len(names)}",
                                f"--node_rank={names.index(host)}", f"--nproc_per_node={per_host}",
                                f"--master_addr={names[0]}", f"--master_port={master_port}", *script, *args])
    if sm.get("sagemaker_mpi_enabled"):
        if host != names[0]:
            return HostLaunch(argv=[])
        return HostLaunch(argv=[mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                                # As the toolkit's mpirun: no MASTER_ADDR (the ranks take the first of
                                # SM_HOSTS); the port is this machine's free one, not the toolkit's 7777
                                "-np", str(per_host * len(names)), "-x", f"MASTER_PORT={master_port}",
                                "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS",
                                *run, *args])
    return HostLaunch(argv=[*run, *args])


def etc_hosts(req: dict, hostname: str) -> str:
    """Every host name resolves to this machine's loopback (the hosts share it here), and so does the
    machine's own `hostname`, as a container's does in the /etc/hosts its runtime writes: Gloo looks its
    hostname up, and without it every rank logged 'Unable to resolve hostname' and fell back to loopback."""
    names = [*hosts(req), *([hostname] if hostname and hostname not in hosts(req) else [])]
    return "127.0.0.1 localhost " + " ".join(names) + "\n::1 localhost ip6-localhost\n"


def local_path(uri: str, s3_root: str) -> str:
    """Where a channel's data is on this machine: file:///P -> P; s3://B/K -> <s3_root>/B/K."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("s3://"):
        return os.path.join(s3_root, *[p for p in uri[5:].split("/") if p])
    raise ValueError(uri)

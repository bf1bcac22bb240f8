"""The SageMaker training contract, as pure functions of a CreateTrainingJob request.

What a training container sees on host `algo-i` (the SageMaker training toolkit's view):

    /opt/ml/input/config/hyperparameters.json   the request's HyperParameters (JSON-encoded strings)
    /opt/ml/input/config/resourceconfig.json    current_host, hosts, instance groups
    /opt/ml/input/config/inputdataconfig.json   one entry per channel
    /opt/ml/input/data/<channel>/               the channel's files
    /opt/ml/code/                                sourcedir.tar.gz unpacked (cwd, on PYTHONPATH)
    /opt/ml/model/  /opt/ml/output/  /opt/ml/checkpoints/
    SM_HOSTS SM_CURRENT_HOST SM_NUM_GPUS SM_NUM_CPUS SM_CHANNELS SM_CHANNEL_<NAME> SM_MODEL_DIR
    SM_OUTPUT_DIR SM_OUTPUT_DATA_DIR SM_HPS SM_HP_<NAME> SM_USER_ARGS SM_USER_ENTRY_POINT
    SM_RESOURCE_CONFIG SM_INPUT_DATA_CONFIG SM_TRAINING_ENV ... and the request's Environment

The launch follows the toolkit: torch_distributed -> torchrun on every host (nnodes = hosts,
node rank = host index, rendezvous at algo-1); mpi -> mpirun from algo-1; otherwise the program.
"""

from __future__ import annotations

import json
import os
import posixpath
import sys
from dataclasses import dataclass
from typing import Any

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
    return {c["ChannelName"]: {"TrainingInputMode": c.get("InputMode", "File"),
                               "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"}
            for c in req.get("InputDataConfig") or []}


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


def environment(req: dict, host: str, *, num_cpus: int) -> dict[str, str]:
    hps = user_hyperparameters(req)
    channels = sorted(input_data_config(req))
    sm_hps = req.get("HyperParameters") or {}
    env = {
        "SM_HOSTS": json.dumps(hosts(req)), "SM_CURRENT_HOST": host, "SM_NUM_GPUS": "0", "SM_NUM_CPUS": str(num_cpus),
        "SM_CURRENT_INSTANCE_TYPE": req["ResourceConfig"]["InstanceType"], "SM_NETWORK_INTERFACE_NAME": "lo",
        "SM_MODEL_DIR": MODEL_DIR, "SM_OUTPUT_DIR": f"{OPT_ML}/output", "SM_OUTPUT_DATA_DIR": f"{OPT_ML}/output/data",
        "SM_INPUT_DIR": f"{OPT_ML}/input", "SM_INPUT_CONFIG_DIR": f"{OPT_ML}/input/config",
        "SM_CHANNELS": json.dumps(channels), "SM_HPS": env_value(hps), "SM_USER_ARGS": env_value(user_args(req)),
        "SM_USER_ENTRY_POINT": decode(sm_hps.get("sagemaker_program", '""')),
        "SM_MODULE_DIR": decode(sm_hps.get("sagemaker_submit_directory", '""')),
        "SM_LOG_LEVEL": str(decode(sm_hps.get("sagemaker_container_log_level", "20"))),
        "SM_RESOURCE_CONFIG": json.dumps(resource_config(req, host)),
        "SM_INPUT_DATA_CONFIG": json.dumps(input_data_config(req)),
    }
    env["SM_MODULE_NAME"] = posixpath.splitext(env["SM_USER_ENTRY_POINT"])[0]
    env.update({f"SM_CHANNEL_{c.upper()}": f"{OPT_ML}/input/data/{c}" for c in channels})
    env.update({f"SM_HP_{k.upper()}": env_value(v) for k, v in hps.items()})
    env["SM_TRAINING_ENV"] = json.dumps({"hosts": hosts(req), "current_host": host, "hyperparameters": hps,
                                         "channel_input_dirs": {c: env[f"SM_CHANNEL_{c.upper()}"] for c in channels},
                                         "model_dir": MODEL_DIR, "user_entry_point": env["SM_USER_ENTRY_POINT"]})
    env.update(req.get("Environment") or {})
    return env


@dataclass(frozen=True, kw_only=True)
class HostLaunch:
    argv: list[str]  # the command run in /opt/ml/code (empty: this host waits, as MPI workers do)


def launch(req: dict, host: str, *, master_port: int, python: str = sys.executable, mpirun: str = "mpirun") -> HostLaunch:
    sm = {k: decode(v) for k, v in (req.get("HyperParameters") or {}).items() if k.startswith("sagemaker_")}
    program = sm.get("sagemaker_program", "train.py")
    run = [python, program] if program.endswith(".py") else [f"./{program}"]
    names, args = hosts(req), user_args(req)
    # As the toolkit's runner: this parameter, else one process per GPU (none here: one).
    per_host = int(sm.get("sagemaker_mpi_num_of_processes_per_host") or 1)
    if sm.get("sagemaker_torch_distributed_enabled"):
        script = [program] if program.endswith(".py") else ["--no-python", f"./{program}"]
        return HostLaunch(argv=[python, "-m", "torch.distributed.run", f"--nnodes={len(names)}",
                                f"--node_rank={names.index(host)}", f"--nproc_per_node={per_host}",
                                f"--master_addr={names[0]}", f"--master_port={master_port}", *script, *args])
    if sm.get("sagemaker_mpi_enabled"):
        if host != names[0]:
            return HostLaunch(argv=[])
        return HostLaunch(argv=[mpirun, "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
                                "-np", str(per_host * len(names)), "-x", "MASTER_ADDR=" + names[0],
                                "-x", f"MASTER_PORT={master_port}", "-x", "PYTHONPATH", "-x", "OMP_NUM_THREADS",
                                *run, *args])
    return HostLaunch(argv=[*run, *args])


def etc_hosts(req: dict) -> str:
    """Every host name resolves to this machine's loopback (the hosts share it here)."""
    return "127.0.0.1 localhost " + " ".join(hosts(req)) + "\n::1 localhost ip6-localhost\n"


def local_path(uri: str, s3_root: str) -> str:
    """Where a channel's data is on this machine: file:///P -> P; s3://B/K -> <s3_root>/B/K."""
    if uri.startswith("file://"):
        return uri[len("file://"):]
    if uri.startswith("s3://"):
        return os.path.join(s3_root, *[p for p in uri[5:].split("/") if p])
    raise ValueError(uri)

"""Train the reference CIFAR10 network, one process or many, under any launcher.

    python -m dtrain.workloads.cifar10 train --data-dir DATA --model-dir OUT            # one process
    torchrun --nproc-per-node 2 -m dtrain.workloads.cifar10 train --data-dir DATA ...   # DDP
    mpirun -np 2 -x MASTER_ADDR=host0 -x MASTER_PORT=29500 python -m dtrain.workloads.cifar10 train ...

--batch-size is PER PROCESS: the global batch is world_size x batch-size, and
the data each process sees is its DistributedSampler shard. With the same seed
and global batch, every launcher gives the same weights.

Rank 0 writes <model-dir>/model.pth (the state_dict), one JSON line of metrics
per step, and a last line `FINAL test_accuracy=... test_loss=... steps=...`. Without
--model-dir that is the platform's model folder: $SM_MODEL_DIR on SageMaker, $DTRAIN_MODEL_DIR
in a job of this platform's (the folder `dtrain artifacts` copies), else ./model; so one command runs unchanged
under plain torchrun, dtrain and SageMaker. A hyperparameter SageMaker passes as '' (None) is
the default; on SageMaker an error is also the job's FailureReason (output/failure).

Resume by default: rank 0 checkpoints every --checkpoint-every steps (model, optimizer, RNG; the
step fixes the epoch and the sampler position) into --checkpoint-dir (default: $DTRAIN_CHECKPOINT_DIR,
/opt/ml/checkpoints on SageMaker, else --model-dir), and a rerun continues from the newest one.
SIGTERM finishes the step, checkpoints and exits with code 143.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
from collections.abc import Mapping
from dataclasses import MISSING, fields
from dataclasses import replace as _replace
from pathlib import Path

import torch
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

from dtrain.errors import SpecError
from dtrain.names import listed
from dtrain.training import (
    STOPPED_EXIT_CODE,
    Checkpointer,
    DistInfo,
    GracefulStop,
    MetricsWriter,
    ResumableSampler,
    checkpoint_dir,
    detect_runtime,
    leave_stop_to_parent,
    save_atomic,
    setup_distributed,
    teardown,
)
from dtrain.training.resume import (CHECKPOINT_DIR_ENV, SAGEMAKER_CHECKPOINT_DIR, checkpoint_config_local_path,
                                    start_over)
from dtrain.workloads.cifar10.config import (  # re-exported: callers and tests read them as train.NAME
    BACKENDS,
    LIMITS,
    TrainConfig,
    _as_bool,
    _as_float,
    _as_int,
    _blank_is_none,
)
from dtrain.workloads.cifar10.data import find_root, load_split
from dtrain.workloads.cifar10.failure import RESOURCE_CONFIG_FILE, CommandParser, reports_failure
from dtrain.workloads.cifar10.loop import (  # re-exported as above
    DATA_POSITION,
    _AllreduceTimer,
    _Loop,
    _normalise,
    _resume,
    _this_runs_settings,
    _timed_allreduce,
    evaluate,
)
from dtrain.workloads.cifar10.model import Net
from dtrain.workloads.cifar10.outputs import (  # re-exported as above
    CHECKPOINT_LOCK,
    _one_training_writes,
    _written_folders,
    check_outputs,
    metrics_file,
)
from dtrain.workloads.inputs import env_int, in_range, learning_rate, schedule_steps


def _platform_paths(env: Mapping[str, str] | None = None) -> dict[str, str]:
    """Folder and file defaults from where the script runs, so one command serves every platform.

    The model folder is SageMaker's ($SM_MODEL_DIR), else dtrain's ($DTRAIN_MODEL_DIR: the folder
    `dtrain artifacts` copies), else /opt/ml/model in a SageMaker container without the training
    toolkit, else ./model (plain torchrun: parse_args)."""
    env = os.environ if env is None else env
    out: dict[str, str] = {}
    if env.get("SM_CHANNEL_TRAINING", "").strip():
        out["data_dir"] = env["SM_CHANNEL_TRAINING"]
    elif OPT_ML_TRAINING.is_dir():  # SageMaker's layout, in a container without the training toolkit
        out["data_dir"] = str(OPT_ML_TRAINING)
    # SageMaker examples often give the test set its own channel ({"train": ..., "test": ...}).
    if env.get("SM_CHANNEL_TEST", "").strip():
        out["test_dir"] = env["SM_CHANNEL_TEST"]
    elif OPT_ML_TEST.is_dir():
        out["test_dir"] = str(OPT_ML_TEST)
    if env.get("SM_MODEL_DIR", "").strip():
        out["model_dir"] = env["SM_MODEL_DIR"]
    elif env.get("DTRAIN_MODEL_DIR", "").strip():
        out["model_dir"] = env["DTRAIN_MODEL_DIR"]
    elif OPT_ML_MODEL.is_dir():
        out["model_dir"] = str(OPT_ML_MODEL)
    # Metrics are output data, not the model: SageMaker uploads $SM_OUTPUT_DATA_DIR as output.tar.gz
    # beside model.tar.gz, so a deployment of the model does not carry them.
    if env.get("SM_OUTPUT_DATA_DIR", "").strip():
        out["metrics_file"] = str(Path(env["SM_OUTPUT_DATA_DIR"]) / "metrics.jsonl")
    elif OPT_ML_OUTPUT_DATA.is_dir():
        out["metrics_file"] = str(OPT_ML_OUTPUT_DATA / "metrics.jsonl")
    # SageMaker restores CheckpointConfig's S3 prefix into its LocalPath, /opt/ml/checkpoints unless the job
    # names another (a spot restart resumes from there): the toolkit's variables make
    # dtrain.training.checkpoint_dir pick it, and so does the folder in a container without them. Only in a
    # container SageMaker started (its resource config is there): a stray /opt/ml/checkpoints on a workstation
    # would make unrelated runs resume each other.
    if not env.get(CHECKPOINT_DIR_ENV, "").strip() and RESOURCE_CONFIG_FILE.is_file():
        config = RESOURCE_CONFIG_FILE.parent / "checkpointconfig.json"
        synced = checkpoint_config_local_path(config) or OPT_ML_CHECKPOINTS
        if synced.is_dir():
            out["checkpoint_dir"] = str(synced)
    return out


ENV_SETTINGS = {"BATCH_SIZE": "batch_size", "NUM_WORKERS": "num_workers"}  # as the lanes workload reads them


def _env_defaults(env: Mapping[str, str] | None = None) -> dict[str, int]:
    """The settings a job's environment gives (Run:AI's `-e BATCH_SIZE=64`, as the lanes workload reads it),
    bounded as their flags are; a flag or a SageMaker hyperparameter wins over them."""
    env = os.environ if env is None else env
    given = {key: env_int(env, name, LIMITS[key]) for name, key in ENV_SETTINGS.items()}
    return {key: value for key, value in given.items() if value is not None}


def _hyperparameter_defaults(env: Mapping[str, str] | None = None) -> dict[str, object]:
    """This workload's settings among SageMaker's hyperparameters (SM_HPS, else hyperparameters.json).
    A null one is left out: a hyperparameter set to None means the default."""
    env = os.environ if env is None else env
    raw = env.get("SM_HPS", "").strip()
    hps = None
    if raw:
        try:
            hps = json.loads(raw)
        except json.JSONDecodeError:
            raise SpecError(f"SM_HPS={raw!r} is not JSON; SageMaker sets it to an object of hyperparameters") from None
        if not isinstance(hps, dict):
            raise SpecError(f"SM_HPS={raw!r} must be a JSON object")
    elif HYPERPARAMETERS_FILE.is_file():  # a container without the training toolkit: only the file is there
        hps = _hyperparameters_file(HYPERPARAMETERS_FILE)
    known = {f.name for f in fields(TrainConfig)} | {"no_resume"}
    return {k.replace("-", "_"): v for k, v in (hps or {}).items()
            if k.replace("-", "_") in known and v is not None and not (isinstance(v, str) and not v.strip())}


HYPERPARAMETERS_FILE = Path("/opt/ml/input/config/hyperparameters.json")  # SageMaker's, values JSON-encoded strings
OPT_ML_DATA = Path("/opt/ml/input/data")  # a folder per channel
OPT_ML_TRAINING, OPT_ML_TEST, OPT_ML_MODEL = OPT_ML_DATA / "training", OPT_ML_DATA / "test", Path("/opt/ml/model")
OPT_ML_OUTPUT_DATA = Path("/opt/ml/output/data")
OPT_ML_CHECKPOINTS = Path(SAGEMAKER_CHECKPOINT_DIR)
READ_CHANNELS = ("training", "test")  # the SageMaker channels this workload reads


def sagemaker_channels(env: Mapping[str, str] | None = None) -> list[str]:
    """The job's SageMaker channel names: $SM_CHANNELS (the toolkit's), else the folders of
    /opt/ml/input/data (a container without it); [] elsewhere."""
    env = os.environ if env is None else env
    raw = env.get("SM_CHANNELS", "").strip()
    if raw:
        try:
            names = json.loads(raw)
        except json.JSONDecodeError:
            return []
        return sorted(str(n) for n in names) if isinstance(names, list) else []
    return sorted(p.name for p in OPT_ML_DATA.iterdir() if p.is_dir()) if OPT_ML_DATA.is_dir() else []


def _launch_env() -> dict[str, str] | None:
    """The environment setup_distributed reads. SageMaker without the training toolkit starts the
    script once on every host and sets no variable: its resource config names the hosts, so they
    train as one job (rank: the host's place in the list) instead of each alone, racing to write
    the same checkpoints. None (the process's own environment) everywhere else."""
    env = dict(os.environ)
    if not RESOURCE_CONFIG_FILE.is_file() or detect_runtime(env)["runtime"] != "single":
        return None
    path = RESOURCE_CONFIG_FILE
    try:
        config = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SpecError(f"{path} cannot be read as JSON ({e}); SageMaker writes the job's hosts there") from None
    hosts = config.get("hosts") if isinstance(config, dict) else None
    current = config.get("current_host") if isinstance(config, dict) else None
    if not isinstance(hosts, list) or not hosts or not all(isinstance(h, str) and h for h in hosts) \
            or len(set(hosts)) != len(hosts) or current not in hosts:
        raise SpecError(f"{path} must name the job's hosts (\"hosts\": a list of distinct names) and this one "
                        f"(\"current_host\", one of them), as SageMaker writes it")
    if len(hosts) == 1:
        return None
    return {**env, "SM_HOSTS": json.dumps(hosts), "SM_CURRENT_HOST": current}


def _hyperparameters_file(path: Path) -> dict[str, object]:
    """SageMaker's hyperparameters.json read as the training toolkit reads it: each value is a string
    holding JSON (the SDK encodes them), decoded when it parses, kept as the string otherwise."""
    try:
        hps = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SpecError(f"{path} cannot be read as JSON ({e}); SageMaker writes an object of strings there") from None
    if not isinstance(hps, dict):
        raise SpecError(f"{path} must hold a JSON object of hyperparameters")
    out = {}
    for key, value in hps.items():
        try:
            out[key] = json.loads(value) if isinstance(value, str) else value
        except ValueError:
            out[key] = value
    return {k: v for k, v in out.items() if not k.startswith("sagemaker_")}


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    p = CommandParser(prog="dtrain cifar10 train", description=__doc__,
                      formatter_class=argparse.RawDescriptionHelpFormatter)
    d = TrainConfig.__dataclass_fields__

    def add(name: str, kind: type, help: str) -> None:
        flag = name.replace("_", "-")
        # SageMaker passes hyperparameters with the spelling the user gave them, so accept both.
        names = [f"--{flag}"] + ([f"--{name}"] if flag != name else [])
        default = d[name].default
        p.add_argument(*names, dest=name, type=_blank_is_none(kind), default=None if default is MISSING else default,
                       help=help)

    add("batch_size", int, "images per step PER PROCESS (global batch = world size x this; default $BATCH_SIZE, "
        "else 4)")
    add("epochs", int, "passes over the training set (default 2)")
    add("lr", float, "SGD learning rate (default 0.001)")
    add("momentum", float, "SGD momentum (default 0.9)")
    add("backend", str, "nccl | gloo (default: nccl on GPU, gloo on CPU)")
    add("device", str, "cpu | cuda (default: cuda when available)")
    add("data_dir", str, "CIFAR10 folder (default: $SM_CHANNEL_TRAINING on SageMaker)")
    add("test_dir", str, "folder holding the test batch (default: $SM_CHANNEL_TEST on SageMaker, else --data-dir)")
    add("model_dir", str, "where rank 0 saves model.pth (default: $SM_MODEL_DIR on SageMaker, else "
        "$DTRAIN_MODEL_DIR (a job of this platform's), else ./model)")
    add("seed", int, "random seed (default 0)")
    add("max_steps", int, "stop after this many steps; 0 runs all epochs (default 0)")
    add("metrics_file", str, "per-step JSONL metrics (default: $SM_OUTPUT_DATA_DIR/metrics.jsonl on SageMaker, "
        "else <model-dir>/metrics.jsonl)")
    add("num_workers", int, "DataLoader worker processes (default $NUM_WORKERS, else 0)")
    add("log_interval", int, "print progress every N steps; 0 never (default 100)")
    add("checkpoint_dir", str, "checkpoint folder (default: $DTRAIN_CHECKPOINT_DIR, /opt/ml/checkpoints "
        "on SageMaker, else --model-dir)")
    add("checkpoint_every", int, "steps between checkpoints; 0: only at the end and on SIGTERM (default 1000)")
    add("keep_checkpoints", int, "newest checkpoints kept (default 3)")
    # SageMaker passes a boolean hyperparameter as `--resume False` (the toolkit's str(value)), so the
    # flag takes an optional true/false as well as the bare `--resume` / `--no-resume`.
    p.add_argument("--resume", nargs="?", const=True, default=True, metavar="true|false",
                   help="continue from the newest checkpoint (default: yes); --no-resume or --resume false starts over")
    # A hyperparameter no-resume (or no_resume) set to true arrives as `--no-resume True`, and one set
    # to false as `--no-resume False`: an optional value here too.
    p.add_argument("--no-resume", "--no_resume", dest="no_resume", nargs="?", const=True, default=None,
                   metavar="true|false", help="start over, ignoring checkpoints (the same as --resume false)")
    paths = _platform_paths()
    p.set_defaults(**{**paths, **_env_defaults(), **_hyperparameter_defaults()})
    a = vars(p.parse_args(argv))
    no_resume = a.pop("no_resume")
    if no_resume is not None and not (isinstance(no_resume, str) and not no_resume.strip()):
        a["resume"] = not _as_bool("no_resume", no_resume)
    # The toolkit passes a hyperparameter set to None as `--name ''`: that means the default.
    for name, value in a.items():
        if value is None or (isinstance(value, str) and not value.strip()):
            default = d[name].default
            a[name] = paths.get(name, None if default is MISSING else default)
    a["model_dir"] = a["model_dir"] or "model"
    types = {f.name: f.type for f in fields(TrainConfig)}
    # SM_HPS values arrive as JSON numbers or strings; coerce them like argparse does.
    cast = {"int": _as_int, "float": _as_float, "bool": _as_bool}
    a = {k: cast[types[k]](k, v) if v is not None and types[k] in cast else v for k, v in a.items()}
    for name, (low, high) in LIMITS.items():
        in_range(f"--{name.replace('_', '-')}", a[name], low, high)
    learning_rate("--lr", a["lr"], 0.001)
    in_range("--momentum", a["momentum"], 0.0, 0.999)
    if a["backend"] is not None and a["backend"] not in BACKENDS:
        raise SpecError(f"--backend {a['backend']!r} is not a backend: give nccl (GPU) or gloo (CPU), "
                        "or leave it out to pick one for the device")
    if a["device"] is not None and not re.fullmatch(r"cpu|cuda(:\d{1,3})?", a["device"], re.ASCII):
        raise SpecError(f"--device {a['device']!r} is not a device: give cpu or cuda (cuda:N for one GPU), "
                        "or leave it out to use a GPU when there is one")
    # the data last, as argparse names a bad value before a missing argument: '--epochs -1' without
    # --data-dir is the value's mistake first
    if not a["data_dir"]:
        given = sagemaker_channels()
        if given:
            raise SpecError(f"no 'training' channel among this job's SageMaker channels ({', '.join(given)}): the "
                            f"CIFAR10 data must come as the channel named training (the test batch may come as "
                            f"'test'), e.g. --channel training=s3://BUCKET/cifar10; or pass --data-dir")
        raise SpecError("no CIFAR10 data: pass --data-dir DIR (or run under SageMaker with a 'training' channel)")
    return TrainConfig(**a)


def train(cfg: TrainConfig) -> dict[str, float]:
    """Run training and evaluation; returns the final metrics (on every rank)."""
    find_root(cfg.data_dir)  # a wrong --data-dir (or --test-dir) is named before any folder is made
    if cfg.test_dir:
        find_root(cfg.test_dir, "test")
    launch_env = _launch_env()
    cfg = _replace(cfg, checkpoint_dir=str(check_outputs(cfg)))
    x_train, y_train = (torch.from_numpy(a) for a in load_split(cfg.data_dir, "train"))
    x_test, y_test = (torch.from_numpy(a) for a in load_split(cfg.test_dir or cfg.data_dir, "test"))
    info = setup_distributed(cfg.backend, device=cfg.device, env=launch_env)
    try:
        metrics, locks = _one_training_writes(cfg, info)
        with metrics:
            try:
                return _train(cfg, info, metrics, (x_train, y_train), (x_test, y_test))
            finally:
                for lock in locks:
                    if lock is not None:
                        lock.close()
    finally:
        teardown()


def _train(cfg: TrainConfig, info: DistInfo, metrics: MetricsWriter, train_set: tuple,
           test_set: tuple) -> dict[str, float]:
    torch.manual_seed(cfg.seed)
    net = Net().to(info.device)
    opt = torch.optim.SGD(net.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    ckpt = Checkpointer(cfg.checkpoint_dir or checkpoint_dir(cfg.model_dir), every=cfg.checkpoint_every,
                        keep=cfg.keep_checkpoints, enabled=info.is_main, log=lambda m: print(m, flush=True))
    # What maps a step to its images (see DATA_POSITION); saved with every checkpoint.
    plan = {"global_batch": cfg.batch_size * info.world_size, "seed": cfg.seed, "train_images": len(train_set[0])}
    # Every rank loads the same file before DDP is built, so optimizer state matches on all of them.
    resumed = _resume(ckpt, net, opt, info, plan) if cfg.resume else None
    if resumed:
        _this_runs_settings(opt, cfg, info)
    model, timer = net, _AllreduceTimer()
    if info.distributed:
        model = DDP(net, device_ids=[info.device.index] if info.device.type == "cuda" else None)
        model.register_comm_hook(timer, _timed_allreduce)
    # One sampler for every world size: the shuffle is the same permutation, so
    # N ranks x batch b see exactly the images 1 rank x batch N*b sees.
    dataset = TensorDataset(*train_set)
    sampler = ResumableSampler(dataset, num_replicas=info.world_size, rank=info.rank, shuffle=True, seed=cfg.seed)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler,
                        num_workers=cfg.num_workers, pin_memory=info.device.type == "cuda",
                        worker_init_fn=leave_stop_to_parent)  # a group's SIGTERM stops the rank, not its workers
    steps_per_epoch = math.ceil(sampler.num_samples / cfg.batch_size)
    global_batch = cfg.batch_size * info.world_size
    if info.is_main:
        print(f"cifar10: runtime={info.runtime} world_size={info.world_size} backend={info.backend} "
              f"device={info.device} global_batch={global_batch} train_images={len(dataset)}", flush=True)
        unread = [c for c in sagemaker_channels() if c not in READ_CHANNELS]
        if unread:
            print(f"cifar10: SageMaker {listed(unread, 'channel')} not read: this workload reads "
                  f"{' and '.join(READ_CHANNELS)}", flush=True)
    step = resumed.step if resumed else 0
    last = min(cfg.epochs * steps_per_epoch, cfg.max_steps) if cfg.max_steps else schedule_steps(cfg.epochs, steps_per_epoch)
    if resumed and resumed.step >= last and info.is_main:  # a rerun with new settings would change nothing
        print(f"cifar10: the checkpoint's step {resumed.step} is at or past this run's last step {last}: nothing "
              f"is left to train, and the model is the checkpoint's; to train with this run's settings start over "
              f"({start_over()}), or give more --epochs or --max-steps", flush=True)
    loop = _Loop(cfg=cfg, info=info, model=model, opt=opt, timer=timer, ckpt=ckpt, net=net, last=last, plan=plan)
    with GracefulStop() as stop:
        epoch = step // steps_per_epoch
        while step < last and not stop.requested:
            epoch, position = divmod(step, steps_per_epoch)
            sampler.set_epoch(epoch, start=position * cfg.batch_size)  # a new shuffle each epoch, same on every rank
            step = loop.epoch(loader, metrics, stop, epoch, step)
        if stop.requested:
            if info.is_main:
                print(f"stopped at step {step} by a signal; checkpoint in {ckpt.folder}", flush=True)
            return {"steps": step, "stopped": True}
        if not resumed or resumed.step < step:
            ckpt.save(step, model=net, optimizer=opt, extra=plan)
        accuracy, test_loss = evaluate(net, *test_set, info)
        metrics.log(step=step, epoch=epoch, test_accuracy=accuracy, test_loss=test_loss)
    if info.is_main:
        save_atomic(net.state_dict(), Path(cfg.model_dir) / "model.pth")
        print(f"FINAL test_accuracy={accuracy:.4f} test_loss={test_loss:.4f} steps={step} "
              f"world_size={info.world_size} global_batch={global_batch}", flush=True)
    return {"test_accuracy": accuracy, "test_loss": test_loss, "steps": step}


@reports_failure
def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    result = train(cfg)
    return STOPPED_EXIT_CODE if result.get("stopped") else 0


if __name__ == "__main__":
    sys.exit(main())

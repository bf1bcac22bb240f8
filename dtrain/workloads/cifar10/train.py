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
import time
from collections.abc import Mapping
from dataclasses import MISSING, dataclass, fields
from dataclasses import replace as _replace
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, TensorDataset

from dtrain.errors import ConflictError, DtrainError, SpecError
from dtrain.names import listed
from dtrain.training import (
    STOPPED_EXIT_CODE,
    Checkpointer,
    DistInfo,
    GracefulStop,
    MetricsWriter,
    ResumableSampler,
    Resumed,
    all_reduce_sum,
    checkpoint_dir,
    detect_runtime,
    leave_stop_to_parent,
    max_over_ranks,
    refuse_another_data_position,
    resume_on_every_rank,
    save_atomic,
    setup_distributed,
    teardown,
)
from dtrain.training.metrics import open_append
from dtrain.training.resume import CHECKPOINT_DIR_ENV, SAGEMAKER_CHECKPOINT_DIR, start_over, start_over_words
from dtrain.workloads.cifar10.data import find_root, load_split
from dtrain.workloads.cifar10.failure import RESOURCE_CONFIG_FILE, CommandParser, reports_failure
from dtrain.workloads.cifar10.model import Net
from dtrain.workloads.inputs import (
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_SEED,
    MAX_STEPS,
    MAX_WORKERS,
    NotWhole,
    hold,
    in_range,
    learning_rate,
    out_folder,
    real_number,
    schedule_steps,
    whole_number,
)

# Lowest and highest value of each whole-number setting.
LIMITS: dict[str, tuple[int, int]] = {
    "batch_size": (1, MAX_BATCH),
    "epochs": (1, MAX_EPOCHS),
    "seed": (0, MAX_SEED),
    "max_steps": (0, MAX_STEPS),
    "num_workers": (0, MAX_WORKERS),
    "log_interval": (0, MAX_STEPS),
    "checkpoint_every": (0, MAX_STEPS),
    "keep_checkpoints": (1, 1000),
}


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    data_dir: str  # folder holding cifar-10-batches-py/ or cifar-10-batches-bin/
    model_dir: str  # rank 0 writes model.pth here (default: the platform's model folder, else ./model)
    test_dir: str | None = None  # folder holding the test batch; None: data_dir (SageMaker: a 'test' channel)
    batch_size: int = 4  # images per step PER PROCESS; the global batch is world_size x this
    epochs: int = 2  # passes over the training set
    lr: float = 0.001  # SGD learning rate
    momentum: float = 0.9  # SGD momentum
    backend: str | None = None  # process-group backend; None picks nccl on GPU, gloo on CPU
    device: str | None = None  # 'cpu', 'cuda'; None picks cuda when available
    seed: int = 0  # seeds weights and the sampler's shuffle: same seed, same run
    max_steps: int = 0  # stop after this many optimizer steps (0: run all epochs)
    metrics_file: str | None = None  # JSONL of per-step metrics; None: <model_dir>/metrics.jsonl (SageMaker: output data)
    num_workers: int = 0  # DataLoader workers; the data is in memory, so 0 is usually fastest
    log_interval: int = 100  # print a progress line every this many steps (0: never)
    checkpoint_dir: str | None = None  # None: $DTRAIN_CHECKPOINT_DIR, /opt/ml/checkpoints on SageMaker, model_dir
    checkpoint_every: int = 1000  # steps between checkpoints (0: only at the end and on SIGTERM)
    keep_checkpoints: int = 3  # newest checkpoints kept
    resume: bool = True  # continue from the newest valid checkpoint


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
    # SageMaker restores CheckpointConfig's S3 prefix into /opt/ml/checkpoints (a spot restart resumes
    # from there): the toolkit's variables make dtrain.training.checkpoint_dir pick it, and so does the
    # folder in a container without them. Only in a container SageMaker started (its resource config
    # is there): a stray /opt/ml/checkpoints on a workstation would make unrelated runs resume each other.
    if not env.get(CHECKPOINT_DIR_ENV, "").strip() and RESOURCE_CONFIG_FILE.is_file() and OPT_ML_CHECKPOINTS.is_dir():
        out["checkpoint_dir"] = str(OPT_ML_CHECKPOINTS)
    return out


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

    add("batch_size", int, "images per step PER PROCESS (global batch = world size x this; default 4)")
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
    add("num_workers", int, "DataLoader worker processes (default 0)")
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
    p.set_defaults(**paths, **_hyperparameter_defaults())
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
    if a["device"] is not None and not re.fullmatch(r"cpu|cuda(:\d{1,3})?", a["device"]):
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


BACKENDS = ("nccl", "gloo")


def _blank_is_none(kind: type):
    """argparse's `type`: a blank value is None (the default), anything else `kind`'s."""
    def convert(text: str):
        return None if not text.strip() else {int: whole_number, float: real_number}.get(kind, kind)(text)

    convert.__name__ = kind.__name__  # argparse names it in "invalid int value"
    return convert


def check_outputs(cfg: TrainConfig) -> Path:
    """Create the model and checkpoint folders and check the metrics file before any work starts
    (every rank, so all of them stop alike); returns the checkpoint folder.

    One SpecError line for a path that is a file, or a metrics file that is a folder or a
    symbolic link (appending would write wherever the link points)."""
    model_dir = out_folder(cfg.model_dir, "--model-dir")
    folder = out_folder(cfg.checkpoint_dir or checkpoint_dir(model_dir), "--checkpoint-dir")
    metrics = Path(cfg.metrics_file) if cfg.metrics_file else model_dir / "metrics.jsonl"
    out_folder(metrics.parent, "--metrics-file's folder")
    if metrics.is_symlink():
        raise SpecError(f"--metrics-file {metrics} is a symbolic link: give a path that is not a link "
                        "(metrics are appended to the file itself)")
    if metrics.exists() and not metrics.is_file():
        raise SpecError(f"--metrics-file {metrics} is not a regular file: give a file path (it is created if missing)")
    if (model_dir / "model.pth").is_dir():
        raise SpecError(f"--model-dir {model_dir} holds a folder named model.pth: move it or give another --model-dir")
    return folder


def _as_int(name: str, value: object) -> int:
    # argparse has converted flags and string hyperparameters; a JSON number stays as SageMaker sent it.
    if isinstance(value, (int, NotWhole)) and not isinstance(value, bool):
        return value  # a NotWhole (--batch-size 1.5) is refused by in_range, which names the range
    if isinstance(value, float):
        return int(value) if value.is_integer() else NotWhole(value)  # SM_HPS' JSON number: as above
    raise SpecError(f"--{name.replace('_', '-')} {value!r} is not a whole number: give e.g. 10")


def _as_float(name: str, value: object) -> float:
    if isinstance(value, float):
        return value  # as argparse read it: a refusal quotes what was typed (--lr 1e300)
    if isinstance(value, int) and not isinstance(value, bool):
        return float(value)
    raise SpecError(f"--{name.replace('_', '-')} {value!r} is not a number: give e.g. 0.01")


def _as_bool(name: str, value: object) -> bool:
    # A hyperparameter "false" is a string: bool("false") would be True.
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text in ("1", "true", "yes", "on"):
        return True
    if text in ("0", "false", "no", "off"):
        return False
    raise SpecError(f"--{name.replace('_', '-')} {value!r} is not true or false: give true or false")


class _AllreduceTimer:
    """Seconds spent in gradient all-reduces since the last reset (see _timed_allreduce)."""

    def __init__(self) -> None:
        self.seconds = 0.0


# No annotations: DDP inspects a hook's and rejects the strings `from __future__ import annotations` makes.
def _timed_allreduce(timer, bucket):  # (_AllreduceTimer, dist.GradBucket) -> Future[Tensor]
    """DDP comm hook: average gradients exactly as DDP's default hook does, and time it.

    On Gloo the time is the collective's wall time; on NCCL it includes waiting
    for the stream, so it is an upper bound.
    """
    start = time.perf_counter()
    tensor = bucket.buffer().div_(dist.get_world_size())
    fut = dist.all_reduce(tensor, async_op=True).get_future()

    def done(f):
        timer.seconds += time.perf_counter() - start
        return f.value()[0]

    return fut.then(done)


def _normalise(x: torch.Tensor) -> torch.Tensor:
    # uint8 [0, 255] -> float [-1, 1], the reference's Normalize((0.5,)*3, (0.5,)*3).
    return x.float().div_(127.5).sub_(1.0)


@torch.no_grad()
def evaluate(model: torch.nn.Module, x: torch.Tensor, y: torch.Tensor, info: DistInfo, batch: int = 1000) -> tuple[float, float]:
    """(accuracy, mean loss) on the test set; each rank scores every world_size-th image."""
    model.eval()
    xs, ys = x[info.rank :: info.world_size], y[info.rank :: info.world_size]
    totals = torch.zeros(3, dtype=torch.float64, device=info.device)  # correct, loss sum, count
    for i in range(0, len(xs), batch):
        xb, yb = _normalise(xs[i : i + batch].to(info.device)), ys[i : i + batch].to(info.device)
        logits = model(xb)
        totals[0] += (logits.argmax(1) == yb).sum()
        totals[1] += F.cross_entropy(logits, yb, reduction="sum")
        totals[2] += len(yb)
    all_reduce_sum(totals)
    model.train()
    return (totals[0] / totals[2]).item(), (totals[1] / totals[2]).item()


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
        with MetricsWriter(metrics_file(cfg), enabled=info.is_main) as metrics:
            lock = _one_training_writes(metrics, cfg, info)
            try:
                return _train(cfg, info, metrics, (x_train, y_train), (x_test, y_test))
            finally:
                if lock is not None:
                    lock.close()
    finally:
        teardown()


def metrics_file(cfg: TrainConfig) -> Path:
    return Path(cfg.metrics_file) if cfg.metrics_file else Path(cfg.model_dir) / "metrics.jsonl"


# The file rank 0 locks in a checkpoint folder apart from the metrics file's (_one_training_writes).
CHECKPOINT_LOCK = ".training.lock"


def _written_folders(cfg: TrainConfig) -> list[tuple[Path, str]]:
    """(the file rank 0 locks, the fix a refusal names) for each folder this run writes that another run may
    share: the metrics file's, and the checkpoint folder where it is another one (cfg.checkpoint_dir as
    check_outputs made it). A run given its own --metrics-file on a shared --model-dir locked only that file,
    and shared the folder's checkpoints and model.pth. On SageMaker the metrics file is in output/data and the
    checkpoints in /opt/ml/checkpoints: the model folder, which becomes model.tar.gz, gets no file."""
    metrics = metrics_file(cfg)
    folders = [(metrics, f"give this run another {'--metrics-file' if cfg.metrics_file else '--model-dir'}")]
    ckpt = Path(cfg.checkpoint_dir)
    if not os.path.samefile(ckpt, metrics.parent):
        own = "another --model-dir" if os.path.samefile(ckpt, cfg.model_dir) else start_over_words()[1]
        folders.append((ckpt / CHECKPOINT_LOCK, f"give this run {own}"))
    return folders


def _one_training_writes(metrics: MetricsWriter, cfg: TrainConfig, info: DistInfo):
    """Rank 0 holds a lock on the metrics file it appends to (inputs.hold), and on CHECKPOINT_LOCK in a
    checkpoint folder apart from it, before any checkpoint is read or written; returns that lock's file (to
    close when the run ends) or None. Every rank takes part in one all-reduce of which lock was refused and
    stops with its own line. Two jobs on one volume and one --model-dir both trained, interleaving
    metrics.jsonl and replacing each other's checkpoints and model.pth. SageMaker's model and output folders
    are the job's own: the lock is taken there too and is never refused."""
    folders = _written_folders(cfg)
    error, refused, lock = None, 0, None
    if info.is_main:
        try:
            for refused, (path, fix) in enumerate(folders, start=1):  # refused: 1 + the index of the one refused
                if refused == 1:
                    hold(metrics.file, path, fix)
                else:
                    lock = open_append(path, fix=f"training locks a file of its own there; remove the link or {fix}")
                    hold(lock, path, fix)
        except DtrainError as e:
            error = e
    refused = max_over_ranks(refused if error else 0, info.device)
    if error is None and refused:
        path, fix = folders[refused - 1]
        error = ConflictError(f"rank 0 found another training writing {path.parent}, so rank {info.rank} stops "
                              f"too: wait for it to end, or {fix}")
    if error is not None:
        raise error
    return lock


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


# What maps a step to its images: the shuffle (seed, number of images) and the images a step takes
# (the global batch: N processes x batch b see what one process with batch N*b sees, so a resume
# on another number of processes with the same global batch continues exactly). Checkpoints
# written before 2026-12-04 hold none of these: they are not compared.
DATA_POSITION = (("global_batch", "global batch {}"), ("seed", "seed {}"), ("train_images", "{} training images"))


def _resume(ckpt: Checkpointer, net: torch.nn.Module, opt: torch.optim.Optimizer, info: DistInfo,
            plan: dict[str, int]):
    """ckpt.resume on every rank, refusing a checkpoint whose step means other images; all ranks go
    on from the same step or all stop (resume_on_every_rank)."""
    def same_data_position(resumed: Resumed) -> None:
        refuse_another_data_position(resumed, plan, DATA_POSITION, samples="images",
                                     fix="resume with the same global batch (processes x --batch-size), --seed "
                                         f"and data, or start over: {start_over()}")

    fresh, own = start_over_words()
    resumed = resume_on_every_rank(
        ckpt, info, model=net, optimizer=opt, accept=same_data_position,
        mismatch=lambda e: f"checkpoint {e.path} does not fit the CIFAR10 network ({e.fault}): give this run "
                           f"{own}, or {fresh} to start over")
    return resumed


def _this_runs_settings(opt: torch.optim.Optimizer, cfg: TrainConfig, info: DistInfo) -> None:
    """--lr and --momentum of this run, not the checkpoint's: loading the optimizer's state brings back
    the learning rate and momentum it was saved with, so a resume ignored the flags without a word."""
    changed = []
    for name, value in (("lr", cfg.lr), ("momentum", cfg.momentum)):
        saved = opt.param_groups[0][name]
        if saved != value:
            changed.append(f"--{name} {value} (the checkpoint's run: {saved})")
        for group in opt.param_groups:
            group[name] = value
    if changed and info.is_main:
        print(f"cifar10: resumed with {', '.join(changed)}", flush=True)


@dataclass(kw_only=True)
class _Loop:
    """What every step needs; `epoch` runs one (possibly partial) pass over this rank's shard."""

    cfg: TrainConfig
    info: DistInfo
    model: torch.nn.Module  # the DDP wrapper, or the net itself for one process
    net: torch.nn.Module  # the bare network: what checkpoints hold
    opt: torch.optim.Optimizer
    timer: _AllreduceTimer
    ckpt: Checkpointer
    last: int  # the step training ends after
    plan: dict[str, int]  # the checkpoints' extra: what maps a step to its images

    def epoch(self, loader: DataLoader, metrics: MetricsWriter, stop: GracefulStop, epoch: int, step: int) -> int:
        cfg, info, opt = self.cfg, self.info, self.opt
        global_batch = cfg.batch_size * info.world_size
        t_data = time.perf_counter()
        for xb, yb in loader:
            t0 = time.perf_counter()
            xb, yb = _normalise(xb.to(info.device, non_blocking=True)), yb.to(info.device, non_blocking=True)
            self.timer.seconds = 0.0
            loss = F.cross_entropy(self.model(xb), yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
            loss_value = loss.item()  # also waits for the GPU, so step_time is real
            step += 1
            step_time, data_time = time.perf_counter() - t0, t0 - t_data
            # loss is rank 0's own batch: averaging it across ranks would cost a collective per step.
            metrics.log(step=step, epoch=epoch, loss=loss_value, lr=opt.param_groups[0]["lr"],
                        images_per_s=global_batch / (step_time + data_time), step_time=step_time,
                        data_time=data_time, allreduce_time=self.timer.seconds if info.distributed else None)
            if info.is_main and cfg.log_interval and step % cfg.log_interval == 0:
                print(f"epoch {epoch} step {step} loss {loss_value:.4f}", flush=True)
            stopping = stop.should_stop()
            # The last step's checkpoint is the end of run's (_train), which a stop skips: save it here then.
            if (self.ckpt.due(step) and step < self.last) or stopping:
                self.ckpt.save(step, model=self.net, optimizer=opt, extra=self.plan)
            if stopping or step >= self.last:
                break
            t_data = time.perf_counter()
        return step


@reports_failure
def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    result = train(cfg)
    return STOPPED_EXIT_CODE if result.get("stopped") else 0


if __name__ == "__main__":
    sys.exit(main())

"""Train the reference CIFAR10 network, one process or many, under any launcher.

    python -m dtrain.workloads.cifar10 train --data-dir DATA --model-dir OUT            # one process
    torchrun --nproc-per-node 2 -m dtrain.workloads.cifar10 train --data-dir DATA ...   # DDP
    mpirun -np 2 -x MASTER_ADDR=host0 -x MASTER_PORT=29500 python -m dtrain.workloads.cifar10 train ...

--batch-size is PER PROCESS: the global batch is world_size x batch-size, and
the data each process sees is its DistributedSampler shard. With the same seed
and global batch, every launcher gives the same weights.

Rank 0 writes <model-dir>/model.pth (the state_dict), one JSON line of metrics
per step, and a last line `FINAL test_accuracy=... test_loss=... steps=...`.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import MISSING, dataclass, fields
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

from dtrain.errors import SpecError
from dtrain.training import DistInfo, MetricsWriter, all_reduce_sum, save_atomic, setup_distributed, teardown
from dtrain.workloads.cifar10.data import load_split
from dtrain.workloads.cifar10.model import Net


@dataclass(frozen=True, kw_only=True)
class TrainConfig:
    data_dir: str  # folder holding cifar-10-batches-py/ or cifar-10-batches-bin/
    model_dir: str  # rank 0 writes model.pth here
    batch_size: int = 4  # images per step PER PROCESS; the global batch is world_size x this
    epochs: int = 2  # passes over the training set
    lr: float = 0.001  # SGD learning rate
    momentum: float = 0.9  # SGD momentum
    backend: str | None = None  # process-group backend; None picks nccl on GPU, gloo on CPU
    device: str | None = None  # 'cpu', 'cuda'; None picks cuda when available
    seed: int = 0  # seeds weights and the sampler's shuffle: same seed, same run
    max_steps: int = 0  # stop after this many optimizer steps (0: run all epochs)
    metrics_file: str | None = None  # JSONL of per-step metrics; None: <model_dir>/metrics.jsonl
    num_workers: int = 0  # DataLoader workers; the data is in memory, so 0 is usually fastest
    log_interval: int = 100  # print a progress line every this many steps (0: never)


def _sagemaker_defaults() -> dict[str, object]:
    """Argument defaults from SageMaker's environment: channels, model dir and SM_HPS."""
    out: dict[str, object] = {}
    if os.environ.get("SM_CHANNEL_TRAINING"):
        out["data_dir"] = os.environ["SM_CHANNEL_TRAINING"]
    if os.environ.get("SM_MODEL_DIR"):
        out["model_dir"] = os.environ["SM_MODEL_DIR"]
    raw = os.environ.get("SM_HPS", "").strip()
    if raw:
        try:
            hps = json.loads(raw)
        except json.JSONDecodeError:
            raise SpecError(f"SM_HPS={raw!r} is not JSON; SageMaker sets it to an object of hyperparameters") from None
        if not isinstance(hps, dict):
            raise SpecError(f"SM_HPS={raw!r} must be a JSON object")
        known = {f.name for f in fields(TrainConfig)}
        out.update({k.replace("-", "_"): v for k, v in hps.items() if k.replace("-", "_") in known})
    return out


def parse_args(argv: list[str] | None = None) -> TrainConfig:
    p = argparse.ArgumentParser(prog="dtrain cifar10 train", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    d = TrainConfig.__dataclass_fields__

    def add(name: str, kind: type, help: str) -> None:
        flag = name.replace("_", "-")
        # SageMaker passes hyperparameters with the spelling the user gave them, so accept both.
        names = [f"--{flag}"] + ([f"--{name}"] if flag != name else [])
        default = d[name].default
        p.add_argument(*names, dest=name, type=kind, default=None if default is MISSING else default, help=help)

    add("batch_size", int, "images per step PER PROCESS (global batch = world size x this; default 4)")
    add("epochs", int, "passes over the training set (default 2)")
    add("lr", float, "SGD learning rate (default 0.001)")
    add("momentum", float, "SGD momentum (default 0.9)")
    add("backend", str, "nccl | gloo (default: nccl on GPU, gloo on CPU)")
    add("device", str, "cpu | cuda (default: cuda when available)")
    add("data_dir", str, "CIFAR10 folder (default: $SM_CHANNEL_TRAINING)")
    add("model_dir", str, "where rank 0 saves model.pth (default: $SM_MODEL_DIR, else ./model)")
    add("seed", int, "random seed (default 0)")
    add("max_steps", int, "stop after this many steps; 0 runs all epochs (default 0)")
    add("metrics_file", str, "per-step JSONL metrics (default: <model-dir>/metrics.jsonl)")
    add("num_workers", int, "DataLoader worker processes (default 0)")
    add("log_interval", int, "print progress every N steps; 0 never (default 100)")
    p.set_defaults(**_sagemaker_defaults())
    a = vars(p.parse_args(argv))
    if not a["data_dir"]:
        raise SpecError("no CIFAR10 data: pass --data-dir DIR (or run under SageMaker with a 'training' channel)")
    a["model_dir"] = a["model_dir"] or "model"
    for name in ("batch_size", "epochs"):
        if int(a[name]) < 1:
            raise SpecError(f"--{name.replace('_', '-')} {a[name]} must be >= 1")
    if float(a["lr"]) <= 0 or not math.isfinite(float(a["lr"])):
        raise SpecError(f"--lr {a['lr']} must be a positive number")
    for name in ("max_steps", "num_workers", "log_interval"):
        if int(a[name]) < 0:
            raise SpecError(f"--{name.replace('_', '-')} {a[name]} must be >= 0")
    types = {f.name: f.type for f in fields(TrainConfig)}
    # SM_HPS values arrive as JSON numbers or strings; coerce them like argparse does.
    cast = {"int": int, "float": float}
    return TrainConfig(**{k: cast.get(types[k], lambda v: v)(v) if v is not None else None for k, v in a.items()})


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
    x_train, y_train = (torch.from_numpy(a) for a in load_split(cfg.data_dir, "train"))
    x_test, y_test = (torch.from_numpy(a) for a in load_split(cfg.data_dir, "test"))
    info = setup_distributed(cfg.backend, device=cfg.device)
    try:
        return _train(cfg, info, (x_train, y_train), (x_test, y_test))
    finally:
        teardown()


def _train(cfg: TrainConfig, info: DistInfo, train_set: tuple, test_set: tuple) -> dict[str, float]:
    torch.manual_seed(cfg.seed)
    net = Net().to(info.device)
    model, timer = net, _AllreduceTimer()
    if info.distributed:
        model = DDP(net, device_ids=[info.device.index] if info.device.type == "cuda" else None)
        model.register_comm_hook(timer, _timed_allreduce)
    opt = torch.optim.SGD(model.parameters(), lr=cfg.lr, momentum=cfg.momentum)
    # One sampler for every world size: the shuffle is the same permutation, so
    # N ranks x batch b see exactly the images 1 rank x batch N*b sees.
    dataset = TensorDataset(*train_set)
    sampler = DistributedSampler(dataset, num_replicas=info.world_size, rank=info.rank, shuffle=True, seed=cfg.seed)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, sampler=sampler,
                        num_workers=cfg.num_workers, pin_memory=info.device.type == "cuda")
    global_batch = cfg.batch_size * info.world_size
    if info.is_main:
        print(f"cifar10: runtime={info.runtime} world_size={info.world_size} backend={info.backend} "
              f"device={info.device} global_batch={global_batch} train_images={len(dataset)}", flush=True)
    step = 0
    metrics_path = cfg.metrics_file or str(Path(cfg.model_dir) / "metrics.jsonl")
    with MetricsWriter(metrics_path, enabled=info.is_main) as metrics:
        for epoch in range(cfg.epochs):
            sampler.set_epoch(epoch)  # a new shuffle each epoch, the same on every rank
            step = _train_epoch(cfg, info, model, opt, loader, timer, metrics, epoch, step)
            if step == cfg.max_steps:
                break
        accuracy, test_loss = evaluate(net, *test_set, info)
        metrics.log(step=step, epoch=epoch, test_accuracy=accuracy, test_loss=test_loss)
    if info.is_main:
        save_atomic(net.state_dict(), Path(cfg.model_dir) / "model.pth")
        print(f"FINAL test_accuracy={accuracy:.4f} test_loss={test_loss:.4f} steps={step} "
              f"world_size={info.world_size} global_batch={global_batch}", flush=True)
    return {"test_accuracy": accuracy, "test_loss": test_loss, "steps": step}


def _train_epoch(cfg: TrainConfig, info: DistInfo, model: torch.nn.Module, opt: torch.optim.Optimizer,
                 loader: DataLoader, timer: _AllreduceTimer, metrics: MetricsWriter, epoch: int, step: int) -> int:
    """One pass over this rank's shard (or up to cfg.max_steps); returns the step count."""
    global_batch = cfg.batch_size * info.world_size
    t_data = time.perf_counter()
    for xb, yb in loader:
        t0 = time.perf_counter()
        xb, yb = _normalise(xb.to(info.device, non_blocking=True)), yb.to(info.device, non_blocking=True)
        timer.seconds = 0.0
        loss = F.cross_entropy(model(xb), yb)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        loss_value = loss.item()  # also waits for the GPU, so step_time is real
        step += 1
        step_time, data_time = time.perf_counter() - t0, t0 - t_data
        # loss is rank 0's own batch: averaging it across ranks would cost a collective per step.
        metrics.log(step=step, epoch=epoch, loss=loss_value, lr=opt.param_groups[0]["lr"],
                    images_per_s=global_batch / (step_time + data_time), step_time=step_time,
                    data_time=data_time, allreduce_time=timer.seconds if info.distributed else None)
        if info.is_main and cfg.log_interval and step % cfg.log_interval == 0:
            print(f"epoch {epoch} step {step} loss {loss_value:.4f}", flush=True)
        if step == cfg.max_steps:
            break
        t_data = time.perf_counter()
    return step


def main(argv: list[str] | None = None) -> int:
    cfg = parse_args(argv)
    train(cfg)
    return 0


if __name__ == "__main__":
    sys.exit(main())

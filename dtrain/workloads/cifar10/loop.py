"""The CIFAR10 run's steps: the timed gradient all-reduce, the resume from a checkpoint (refusing one whose
step means other images), this run's --lr and --momentum over the checkpoint's, an epoch's steps (_Loop)
and the test set's evaluation. train.py's _train puts them together."""

from __future__ import annotations

import time
from dataclasses import dataclass

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader

from dtrain.training import (
    Checkpointer,
    DistInfo,
    GracefulStop,
    MetricsWriter,
    Resumed,
    all_reduce_sum,
    refuse_another_data_position,
    resume_on_every_rank,
)
from dtrain.training.resume import start_over, start_over_words
from dtrain.workloads.cifar10.config import TrainConfig


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

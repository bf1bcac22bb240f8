"""Data-parallel SCNN training on TuSimple: runs the same under torchrun, mpirun, Kubeflow or SageMaker.

    torchrun --nproc-per-node 2 -m dtrain.workloads.lanes train --recipe demo --data-dir D --out-dir O

One optimizer step per global batch (BATCH_SIZE x processes); rank 0 logs and checkpoints.
A run resumes from the newest valid ckpt-<step>.pt in --checkpoint-dir (default: $DTRAIN_CHECKPOINT_DIR,
/opt/ml/checkpoints on SageMaker, else --out-dir) and continues the same schedule:
the step sets the lr, the sampler's epoch and position, and the random seed of every step,
so an interrupted run ends where an uninterrupted one would (exactly, with NUM_WORKERS=0).
SIGTERM finishes the current step, checkpoints and exits with code 143 (a restart resumes there).

Settings come from the recipe, then the platform's environment variables, then flags (flags win):
    USE_WORKERS NUM_WORKERS BATCH_SIZE USE_VAL VAL_BATCH_SIZE ENABLE_SNAPSHOT PVC_NAME DATA_DIR OUTPUT_DIR
ENABLE_SNAPSHOT and PVC_NAME belong to the platform (dtrain.spec.JobSpec.snapshot_volume turns
them into --snapshot-on-success; docs/architecture.md); this script only records them in run.json.
"""

import dataclasses
import json
import os
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from dtrain.errors import DtrainError, QuotaError, SpecError
from dtrain.names import counted
from dtrain.replace import replace_file
from dtrain.training import (
    STOPPED_EXIT_CODE,
    Checkpointer,
    DistInfo,
    GracefulStop,
    MetricsWriter,
    ResumableSampler,
    Resumed,
    broadcast_buffers,
    keep_freed_memory,
    leave_stop_to_parent,
    load_checkpoint,
    refuse_another_data_position,
    resume_on_every_rank,
    save_atomic,
    setup_distributed,
    teardown,
)
from dtrain.training.metrics import open_append
from dtrain.workloads.inputs import can_write, hold, out_folder, schedule_steps
from dtrain.workloads.lanes.config import (  # re-exported: tests and bench/ read them as train.NAME
    _FALSE,
    _TRUE,
    TrainConfig,
    _env_bool,
    build_parser,
    parse_config,
)
from dtrain.workloads.lanes.data import LaneDataset
from dtrain.workloads.lanes.metric import evaluate
from dtrain.workloads.lanes.model import SCNN
from dtrain.workloads.lanes.predict import predict_labels, split_labels
from dtrain.workloads.lanes.steps import (  # re-exported as above
    build_model,
    build_optimizer,
    capture_graphs,
    data_parallel,
    forward_backward,
    lr_at,
    scnn_loss,
    speed_up,
    step_seed,
    train_step,
)
from dtrain.workloads.rank0 import LINK, UNLOCKED, UNWRITABLE, Place, Rank0Checks, lock_place, opened, own_folder_fix

class Log:
    """Progress lines to stdout and <out-dir>/train.log, on rank 0 only. The file's lock marks the run that
    writes the folder: a second training on one --out-dir (a teammate's job on the same volume) appended
    its lines to both runs' metrics.jsonl and replaced the other's checkpoints and model.pt without a word."""

    def __init__(self, path: Path, enabled: bool, file=None, metrics: MetricsWriter | None = None) -> None:
        """`file`: `path` already opened and held (one_training_writes); else, when enabled, opened and held here.
        `metrics`: the run's metrics.jsonl, opened with rank 0's checks (one_training_writes), closed with the log."""
        self.locks: list = []  # the locks of the run's other folders (one_training_writes), let go with the log
        self.metrics = metrics if metrics is not None else MetricsWriter(None, enabled=False)
        self.file = file
        if file is None and enabled:
            self.file = open_log(path)
            hold(self.file, path, "give this run another --out-dir")

    def __call__(self, msg: str) -> None:
        if self.file is not None:
            line = f"{time.strftime('%Y-%m-%d %H:%M:%S')} {msg}"
            print(line, flush=True)
            self.file.write(line + "\n")
            self.file.flush()

    def close(self) -> None:
        self.metrics.close()
        for lock in self.locks:
            lock.close()
        if self.file is not None:
            self.file.close()


def one_training_writes(out: Path, checkpoints: Path, info: DistInfo) -> Log:
    """The run's Log, whose lock on rank 0 marks the one training writing `out`, after rank 0's checks that both
    folders take a file (an existing folder that takes none, /proc, was a traceback at train.log) and that no link
    was planted at a file it appends to, with its metrics.jsonl opened among them (log.metrics: opened after the
    checks, an I/O error of a network disk there was a traceback on rank 0 alone). Every rank takes part in one
    all-reduce of what rank 0 found, and each other rank stops with its own line naming it: the others waited in
    their next collective until the launcher ended them, saying nothing useful. One process: no collective. A
    --checkpoint-dir apart from `out` is locked too (lock_place): two runs given other --out-dirs and one
    --checkpoint-dir both ran, replacing each other's checkpoints and resuming from them."""
    fix = "give this run another --out-dir"
    ckpt_fix = own_folder_fix(checkpoints, "checkpoint folder") or "give this run another --checkpoint-dir"
    places = [Place(out, fix), Place(checkpoints, ckpt_fix), Place(out / "train.log", fix),
              Place(out / "metrics.jsonl", fix)]
    apart = not os.path.samefile(out, checkpoints)
    if apart:
        places.append(lock_place(checkpoints, ckpt_fix))
    checks = Rank0Checks(info, places)
    checks.check(0, UNWRITABLE, can_write, out, "--out-dir")
    checks.check(1, UNWRITABLE, can_write, checkpoints, "--checkpoint-dir")
    checks.check(2, LINK, refuse_links, out, ("train.log",))
    checks.check(3, LINK, refuse_links, out, ("metrics.jsonl",))
    file = checks.check(2, UNWRITABLE, opened, places[2], open_log, out / "train.log")
    if file is not None:
        checks.check(2, UNLOCKED, hold, file, out / "train.log", fix)
    metrics = checks.open_metrics(3, out / "metrics.jsonl")
    lock = checks.lock(4) if apart else None
    try:
        checks.stop_together()
    except BaseException:
        for f in (lock, file, metrics):
            if f is not None:
                f.close()
        raise
    log = Log(out / "train.log", False, file, metrics)
    if lock is not None:
        log.locks.append(lock)
    return log


def open_log(path: Path):
    """Append to `path`, never through a symbolic link someone left there (it could point anywhere)."""
    return open_append(path, fix="training writes its log only to a file of its own; remove the link or give "
                                 "another --out-dir")


def refuse_links(out: Path, names: Sequence[str]) -> None:
    """SpecError when an output file that is appended to (not replaced) is a symbolic link."""
    for name in names:
        if (out / name).is_symlink():
            raise SpecError(f"{out / name} is a symbolic link: training writes its outputs only to files of its "
                            "own; remove the link or give another --out-dir")


def next_batch(batches):
    """The loader's next batch; a dataset error raised in a loader worker comes back as its one line."""
    try:
        return next(batches)
    except DtrainError as e:
        text = str(e)
        if "\nOriginal Traceback" not in text:  # raised in this process: already one line
            raise
        last = text.strip().splitlines()[-1]  # "dtrain.errors.DataError: cannot decode ..."
        raise type(e)(last.split(": ", 1)[1] if ": " in last else last) from None


def worker_died(e: RuntimeError) -> QuotaError | None:
    """The one line for a loader worker that died (the kernel's OOM killer, a full /dev/shm), else None.

    torch raises it from its SIGCHLD handler, wherever the training process is (mostly mid-step,
    while the worker prepared a later batch), or from the loader when a batch never comes."""
    if not str(e).startswith("DataLoader worker ("):  # torch's words for a worker that is gone
        return None
    why = " ".join(str(e.__cause__ or e).split()).rstrip(".")  # "... is killed by signal: Killed"
    return QuotaError(f"a data loader worker died ({why}), most often for want of memory or shared memory "
                      "(/dev/shm): lower NUM_WORKERS or BATCH_SIZE, or turn USE_WORKERS off, and rerun (it resumes "
                      "from the last checkpoint)")


def validate(model: SCNN, cfg: TrainConfig, info: DistInfo, labels: list) -> dict:
    """TuSimple accuracy on the val split; each rank predicts a share, rank 0 scores all."""
    broadcast_buffers(model)  # every rank predicts with rank 0's running statistics: the model saved
    mine = labels[info.rank::info.world_size]
    preds = predict_labels(model, cfg.data_dir, mine, batch_size=cfg.val_batch_size,
                           threshold=cfg.recipe.threshold, device=info.device, bf16=cfg.recipe.autocast(info.device))
    if info.world_size > 1:
        shares: list = [None] * info.world_size
        torch.distributed.all_gather_object(shares, preds)
        preds = [p for share in shares for p in share]
    return evaluate(preds, labels) if info.is_main else {}


def build_loader(cfg: TrainConfig, info: DistInfo) -> tuple[LaneDataset, ResumableSampler, DataLoader, int]:
    """Training data sharded over the ranks; also the number of optimizer steps per epoch."""
    recipe = cfg.recipe
    dataset = LaneDataset(cfg.data_dir, "train", size=recipe.input_size, augment=recipe.augment)
    # Each frame's augmentation comes from (seed, epoch, frame): the same with or without loader
    # workers, and after a resume.
    sampler = ResumableSampler(dataset, num_replicas=info.world_size, rank=info.rank, shuffle=True,
                               seed=cfg.seed, drop_last=True, item_seeds=True)
    loader = DataLoader(dataset, batch_size=recipe.batch_size, sampler=sampler, drop_last=True,
                        num_workers=cfg.num_workers, persistent_workers=cfg.num_workers > 0,
                        pin_memory=info.device.type == "cuda", worker_init_fn=leave_stop_to_parent)
    steps_per_epoch = sampler.num_samples // recipe.batch_size
    if steps_per_epoch == 0:
        raise SpecError(f"{len(dataset)} training frames cannot fill one batch of {recipe.batch_size} on each of "
                        f"{info.world_size} processes: lower BATCH_SIZE or add data")
    return dataset, sampler, loader, steps_per_epoch


def restore(ckpt: Checkpointer, cfg: TrainConfig, model: SCNN, opt: torch.optim.Optimizer, plan: Mapping,
            log: "Log", info: DistInfo) -> int:
    """Load the newest valid checkpoint, if resuming, on every rank (all go on from the same step or
    all stop: resume_on_every_rank); returns the step to continue from.

    `plan` is what this run would save as the checkpoint's extra (max_steps, seed, batch_size,
    world_size, train_frames)."""
    if not cfg.resume:
        return 0
    fix = ("resume it with the recipe that wrote it, or start afresh: --no-resume, or another --out-dir "
           "(--checkpoint-dir)")

    def refuse_another_run(resumed: Resumed) -> None:  # before the "resumed from step" line the platform records
        written_by = resumed.extra.get("recipe")
        config = json.loads(json.dumps(resumed.extra.get("model_config"), default=list))
        own = json.loads(json.dumps(dataclasses.asdict(model.cfg), default=list))
        if written_by != cfg.recipe.name or config != own:
            raise SpecError(f"checkpoint {resumed.path} was written by recipe {written_by or 'unknown'}"
                            f"{'' if written_by != cfg.recipe.name else ' with another model'}, this run trains "
                            f"recipe {cfg.recipe.name}: {fix}")
        refuse_another_data_position(resumed, plan, DATA_POSITION, samples="frames",
                                     fix="resume with the same processes, BATCH_SIZE, --seed and data, or start "
                                         "afresh: --no-resume, or another --out-dir (--checkpoint-dir)")
        if resumed.step > plan["max_steps"]:  # it would report "finished at step N" past the plan it records
            raise SpecError(f"checkpoint {resumed.path} is at step {resumed.step}, past this run's {plan['max_steps']} "
                            f"steps: give --max-steps {resumed.step} or more (or --epochs) to go on, or start afresh: "
                            f"--no-resume, or another --out-dir (--checkpoint-dir)")

    resumed = resume_on_every_rank(
        ckpt, info, model=model, optimizer=opt, accept=refuse_another_run,
        mismatch=lambda e: f"{_foreign(e.path)} does not fit recipe {cfg.recipe.name}'s model ({e.fault}): {fix}")
    if resumed is None:
        return 0
    max_steps = plan["max_steps"]
    if resumed.extra.get("max_steps") != max_steps:
        log(f"note: checkpoint planned {resumed.extra.get('max_steps')} steps, this run plans {max_steps}: "
            f"the lr schedule changes")
    log(f"resumed from {resumed.path} at step {resumed.step}")
    return resumed.step


# What maps a step to its place in the data: the sampler's epoch order (seed, frames, processes)
# and the samples a step takes (batch per process x processes). Checkpoints written before
# 2026-12-04 hold no world_size nor train_frames: those are not compared.
DATA_POSITION = (("world_size", lambda n: counted(n, "process", "processes")), ("batch_size", "batch {} per process"),
                 ("seed", "seed {}"), ("train_frames", "{} training frames"))


def _foreign(path: Path) -> str:
    """'checkpoint PATH (written by recipe R)' for a checkpoint that would not load."""
    try:
        extra = load_checkpoint(path).get("extra") or {}
        recipe = extra.get("recipe") if isinstance(extra, dict) else None
    except Exception:  # noqa: BLE001 - only to name it in the message
        recipe = None
    return f"checkpoint {path}" + (f" (written by recipe {recipe})" if recipe else "")


def for_world(cfg: TrainConfig, world_size: int) -> TrainConfig:
    """The recipe's defaults that depend on the number of processes: CUDA graphs (cuda_graphs None)
    for one process; under DDP only when asked."""
    if cfg.recipe.cuda_graphs is None and world_size > 1:
        return dataclasses.replace(cfg, recipe=dataclasses.replace(cfg.recipe, cuda_graphs=False))
    return cfg


def train(cfg: TrainConfig, info: DistInfo) -> dict:
    cfg = for_world(cfg, info.world_size)
    recipe, device = cfg.recipe, info.device
    heap = keep_freed_memory() if recipe.keep_heap else "off"  # before the first tensor and any worker fork
    val_labels = split_labels(cfg.data_dir, "val") if cfg.use_val else []
    if cfg.use_val and not val_labels:
        raise SpecError(f"validation is on but the val split of {cfg.data_dir} holds no frames "
                        "(label_data_0531.json is empty): add val frames or turn USE_VAL / --use-val off")
    # The output folders' paths, the model (its --backbone-weights), then the data (a missing --data-dir,
    # too few frames for a batch), and only then are the folders made: a run refused for its data
    # leaves no empty train.log and metrics.jsonl behind (a job without its --pvc wrote them on the host).
    out_folder(cfg.out_dir, "--out-dir", create=False)
    out_folder(cfg.checkpoint_dir, "--checkpoint-dir", create=False)
    model = build_model(cfg, device)
    opt = build_optimizer(model, recipe)
    dataset, sampler, loader, steps_per_epoch = build_loader(cfg, info)
    # Checked on every rank before any work, as cifar10 train does, so all of them stop alike.
    out = out_folder(cfg.out_dir, "--out-dir")
    out_folder(cfg.checkpoint_dir, "--checkpoint-dir")
    log = one_training_writes(out, Path(cfg.checkpoint_dir), info)
    metrics = log.metrics  # opened by rank 0 with its checks; a disabled writer on the other ranks
    max_steps = schedule_steps(cfg.epochs, steps_per_epoch) if cfg.epochs else recipe.max_steps
    ckpt = Checkpointer(cfg.checkpoint_dir, every=recipe.ckpt_every, keep=recipe.keep_ckpts, enabled=info.is_main,
                        log=log)
    extra = {"max_steps": max_steps, "model_config": dataclasses.asdict(model.cfg), "recipe": recipe.name,
             "seed": cfg.seed, "batch_size": recipe.batch_size, "world_size": info.world_size,
             "train_frames": len(dataset)}
    # Every rank loads the same file before DDP is built, so optimizer state matches on all of them.
    step = restore(ckpt, cfg, model, opt, extra, log, info)
    model = capture_graphs(model, recipe, device)  # after the checkpoint's weights are in, before DDP
    ddp = data_parallel(model, recipe, info)
    log(f"recipe {recipe.name}: {counted(info.world_size, 'process', 'processes')} x batch {recipe.batch_size}, {max_steps} steps, "
        f"{steps_per_epoch} steps/epoch, input {recipe.input_size}, width {recipe.model.width}, device {device}, "
        f"{recipe.precision(device)}{', channels-last' if recipe.nhwc(device) else ''}"
        f"{', CUDA graphs' if recipe.graphs(device) else ''}, freed memory kept: {heap}")
    if recipe.cuda_graphs and not recipe.graphs(device):  # asked for, nothing to capture: said, not refused
        why = f"device {device.type}" if device.type != "cuda" else "message passing 'none'"
        log(f"note: --cuda-graphs has no effect here ({why}): CUDA graphs replay the message passing on a CUDA "
            "device only; the same command uses them on a GPU")
    log(f"data {cfg.data_dir} ({len(dataset)} frames), workers {cfg.num_workers}, validation {cfg.use_val}; "
        f"ENABLE_SNAPSHOT={cfg.enable_snapshot} PVC_NAME={cfg.pvc_name} (recorded; the platform takes snapshots)")

    start, images, last, result = time.time(), 0, {}, {}
    stop = min(max_steps, cfg.stop_after) if cfg.stop_after else max_steps
    ddp.train()
    with GracefulStop() as signalled:
        while step < stop and not signalled.requested:
            epoch, position = divmod(step, steps_per_epoch)
            sampler.set_epoch(epoch, start=position * recipe.batch_size)
            # worker seeds of this epoch's iterator (augmentation draws from item seeds, not from these)
            torch.manual_seed(step_seed(cfg.seed, info.rank, step))
            batches = iter(loader)
            for _ in range(min(steps_per_epoch - position, stop - step)):
                t0 = time.perf_counter()
                torch.manual_seed(step_seed(cfg.seed, info.rank, step))  # dropout of this step
                batch = next_batch(batches)
                t1 = time.perf_counter()
                lr = lr_at(recipe, step, max_steps)
                loss = train_step(ddp, opt, batch, lr, cfg, device)
                step, dt = step + 1, time.perf_counter() - t0
                images += recipe.batch_size * info.world_size
                last = dict(step=step, epoch=epoch, loss=loss, lr=lr, data_time=round(t1 - t0, 4),
                            step_time=round(dt, 4), images_per_s=round(recipe.batch_size * info.world_size / dt, 2))
                metrics.log(**last)
                if step % recipe.log_every == 0 or step == stop:
                    log(f"step {step}/{max_steps} epoch {epoch} loss {loss:.4f} lr {lr:.5f} "
                        f"{last['images_per_s']:.1f} img/s (data {last['data_time']:.3f}s step {last['step_time']:.3f}s)")
                if cfg.use_val and recipe.val_every and step % recipe.val_every == 0 and step < max_steps:
                    result = validate(model, cfg, info, val_labels)
                    _log_val(log, metrics, step, result)
                stopping = signalled.should_stop()
                if ckpt.due(step) or step == stop or stopping:
                    ckpt.save(step, model=model, optimizer=opt, extra=extra)
                if stopping:
                    log(f"stopped by a signal after step {step}; checkpoint in {ckpt.folder}")
                    break
            del batches  # ends the epoch's worker processes unless they are persistent
    if step >= max_steps and cfg.use_val:
        result = validate(model, cfg, info, val_labels)
        _log_val(log, metrics, step, result)
    wall = time.time() - start
    summary = {"step": step, "max_steps": max_steps, "finished": step >= max_steps, "last": last, "val": result,
               "wall_s": round(wall, 1), "images_per_s": round(images / max(wall, 1e-9), 2),
               "signalled": signalled.requested}
    if info.is_main:
        _write_outputs(out, model, cfg, info, summary)
        log(f"{'finished' if step >= max_steps else 'stopped'} at step {step}; outputs in {out}")
    metrics.close()
    log.close()
    return summary


def _log_val(log: Log, metrics: MetricsWriter, step: int, result: dict) -> None:
    if result:
        metrics.log(step=step, val_accuracy=result["accuracy"], val_fp=result["fp"], val_fn=result["fn"])
        log(f"val step {step}: accuracy {result['accuracy']:.4f} fp {result['fp']:.4f} fn {result['fn']:.4f} "
            f"({result['frames']} frames)")


def _write_outputs(out: Path, model: SCNN, cfg: TrainConfig, info: DistInfo, summary: dict) -> None:
    if summary["finished"]:
        save_atomic({"model": model.state_dict(), "model_config": dataclasses.asdict(model.cfg),
                     "recipe": cfg.recipe.name, "step": summary["step"]}, out / "model.pt")
    run = {"config": dataclasses.asdict(cfg), "recipe": cfg.recipe.name, "world_size": info.world_size,
           "runtime": info.runtime, "backend": info.backend, "device": str(info.device), **summary}
    replace_file(out / "run.json", json.dumps(run, indent=2, default=str) + "\n")


def main(argv: Sequence[str] | None = None) -> int:
    cfg = parse_config(argv, os.environ)
    info = setup_distributed(cfg.backend)
    try:
        summary = train(cfg, info)
    except RuntimeError as e:
        if (died := worker_died(e)) is None:
            raise
        raise died from None
    finally:
        teardown()
    return STOPPED_EXIT_CODE if summary["signalled"] and not summary["finished"] else 0


if __name__ == "__main__":
    sys.exit(main())

"""The CIFAR10 run's outputs before any work: the model and checkpoint folders made and the metrics file
checked on every rank (check_outputs), then the locks that make this run the one training that writes them
(_one_training_writes), which every rank stops on together."""

from __future__ import annotations

import os
from pathlib import Path

from dtrain.errors import ConflictError, DtrainError, SpecError
from dtrain.training import DistInfo, MetricsWriter, checkpoint_dir, max_over_ranks
from dtrain.training.metrics import open_append
from dtrain.training.resume import start_over_words
from dtrain.workloads.cifar10.config import TrainConfig
from dtrain.workloads.inputs import hold, out_folder


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

"""The CIFAR10 run's outputs before any work: the model and checkpoint folders made and the metrics file
checked on every rank (check_outputs), then the locks that make this run the one training that writes them
(_one_training_writes), which every rank stops on together."""

from __future__ import annotations

import os
from pathlib import Path

from dtrain.errors import SpecError
from dtrain.training import DistInfo, MetricsWriter, checkpoint_dir
from dtrain.training.resume import on_sagemaker
from dtrain.workloads.cifar10.config import TrainConfig
from dtrain.workloads.inputs import can_write, hold, out_folder
from dtrain.workloads.rank0 import (LOCK_FILE, UNLOCKED, UNWRITABLE, Place, Rank0Checks, lock_place,
                                    own_folder_fix)


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


SAGEMAKER_OUTPUT_DATA = "/opt/ml/output/data"  # the job's output data folder, without the toolkit's variables

CHECKPOINT_LOCK = LOCK_FILE  # the file rank 0 locks in a folder apart from the metrics file's (lock_place)


def _written_folders(cfg: TrainConfig) -> list[Place]:
    """Where rank 0 locks each folder this run writes that another run may share, with the fix a refusal names:
    the metrics file, the checkpoint folder where it is another one (cfg.checkpoint_dir as check_outputs made
    it), and the model folder where it is neither, each locked where lock_place says (a LOCK_FILE in it, or, in
    a folder SageMaker uploads, the folder itself). A run given its own --metrics-file on a shared --model-dir
    locked only that file, and shared the folder's checkpoints and model.pth; two given their own checkpoint
    folders too both wrote model.pth, the last to end replacing it. On SageMaker the metrics file is in
    output/data and the checkpoints in /opt/ml/checkpoints: the model folder, which becomes model.tar.gz, is
    locked as itself and gets no file."""
    metrics = metrics_file(cfg)
    places = [Place(metrics, _metrics_fix(cfg, metrics),
                    flag="--metrics-file's folder" if cfg.metrics_file else "--model-dir")]
    ckpt = Path(cfg.checkpoint_dir)
    if not os.path.samefile(ckpt, metrics.parent):
        flag = "--model-dir" if os.path.samefile(ckpt, cfg.model_dir) else "--checkpoint-dir"
        places.append(lock_place(ckpt, own_folder_fix(ckpt, "checkpoint folder") or _flag_fix(flag), flag))
    model = Path(cfg.model_dir)
    if not any(os.path.samefile(model, place.held) for place in places):
        places.append(lock_place(model, own_folder_fix(model, "model folder") or _flag_fix("--model-dir"),
                                 "--model-dir"))
    return places


def _flag_fix(flag: str) -> str:
    """'give this run another --FLAG', or on SageMaker the hyperparameter: the user writes no command there."""
    if on_sagemaker():
        name = flag.removeprefix("--")
        return f"give this run another hyperparameter {name} (--hp {name}=PATH)"
    return f"give this run another {flag}"


def _metrics_fix(cfg: TrainConfig, metrics: Path) -> str:
    """The fix a refusal at the metrics file names, in the words of where the run is. SageMaker gives each job an
    output folder of its own ($SM_OUTPUT_DATA_DIR, /opt/ml/output/data: output.tar.gz), which no other job
    writes, so a training holding a file there is one this job started: the refusal named --metrics-file, a
    flag the SageMaker user never gave (the default comes from SM_OUTPUT_DATA_DIR) and cannot add to the
    job's command. A metrics file given elsewhere on SageMaker is the hyperparameter metrics-file."""
    if _in_sagemaker_output(metrics.parent):
        return ("start one training per SageMaker job (each job's output folder is its own: the other training is "
                "one this job started)")
    return _flag_fix("--metrics-file" if cfg.metrics_file else "--model-dir")


def _in_sagemaker_output(folder: Path) -> bool:
    """Whether `folder` is the SageMaker job's output data folder: $SM_OUTPUT_DATA_DIR (the toolkit's), or
    /opt/ml/output/data in a SageMaker container without it."""
    own = os.environ.get("SM_OUTPUT_DATA_DIR", "").strip() or (SAGEMAKER_OUTPUT_DATA if on_sagemaker() else "")
    try:
        return bool(own) and os.path.samefile(folder, own)
    except OSError:
        return False


def _one_training_writes(cfg: TrainConfig, info: DistInfo) -> tuple[MetricsWriter, list]:
    """Rank 0 opens the metrics file and holds a lock on it (inputs.hold), and locks each other folder of
    _written_folders (Rank0Checks.lock), before any checkpoint is read or written; returns the MetricsWriter (on
    the other ranks a disabled one) and those locks (to close when the run ends; None where none was taken).
    Every rank takes part in one all-reduce of what rank 0 found (Rank0Checks) and stops with its own line naming
    it: a metrics file rank 0 could not open stopped rank 0 alone, and the others waited in their first
    collective. Two jobs on one volume and one --model-dir both trained, interleaving metrics.jsonl and replacing
    each other's checkpoints and model.pth. SageMaker's model and output folders are the job's own: the lock is
    taken there too, and only a second training of the same job is refused (_metrics_fix)."""
    places = _written_folders(cfg)
    count = len(places)
    checks = Rank0Checks(info, places + [Place(place.held, place.fix) for place in places])
    for index, place in enumerate(places):  # a folder that takes no file (/proc) was a traceback
        checks.check(count + index, UNWRITABLE, can_write, place.held, place.flag)
    metrics = checks.open_metrics(0, metrics_file(cfg))
    if metrics is not None:
        checks.check(0, UNLOCKED, hold, metrics.file, places[0].path, places[0].fix)
    locks = [checks.lock(index) for index in range(1, count)]
    try:
        checks.stop_together()
    except BaseException:
        for f in (*locks, metrics):
            if f is not None:
                f.close()
        raise
    return (metrics if metrics is not None else MetricsWriter(metrics_file(cfg), enabled=False)), locks

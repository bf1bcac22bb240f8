"""What a training script needs inside a job: who am I, save safely, log metrics.

This package runs inside jobs launched by plain torchrun, mpirun, a Kubeflow
PyTorchJob or SageMaker, so it imports nothing from dtrain but dtrain.errors.
"""

from dtrain.training.checkpoint import checkpoint_path, latest_checkpoint, load_checkpoint, save_atomic
from dtrain.training.dist import (
    DistInfo,
    all_reduce_mean,
    all_reduce_sum,
    barrier,
    broadcast_buffers,
    detect_runtime,
    exit_process,
    max_over_ranks,
    setup_distributed,
    teardown,
)
from dtrain.training.heap import keep_freed_memory
from dtrain.training.metrics import MetricsWriter, read_metrics
from dtrain.training.resume import (CheckpointMismatch, Checkpointer, Resumed, checkpoint_dir,
                                    refuse_another_data_position, resume_on_every_rank)
from dtrain.training.sampler import ResumableSampler
from dtrain.training.stop import STOPPED_EXIT_CODE, GracefulStop, leave_stop_to_parent

__all__ = [
    "CheckpointMismatch",
    "STOPPED_EXIT_CODE",
    "Checkpointer",
    "DistInfo",
    "GracefulStop",
    "ResumableSampler",
    "Resumed",
    "checkpoint_dir",
    "refuse_another_data_position",
    "resume_on_every_rank",
    "MetricsWriter",
    "all_reduce_mean",
    "all_reduce_sum",
    "barrier",
    "broadcast_buffers",
    "checkpoint_path",
    "detect_runtime",
    "exit_process",
    "keep_freed_memory",
    "leave_stop_to_parent",
    "latest_checkpoint",
    "load_checkpoint",
    "max_over_ranks",
    "read_metrics",
    "save_atomic",
    "setup_distributed",
    "teardown",
]

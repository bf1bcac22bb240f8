"""The CIFAR10 training run's settings: TrainConfig, the bounds of its whole numbers, and the conversions of
a flag's or a SageMaker hyperparameter's value (a blank one is the default, a JSON number stays a number).
The defaults that depend on where the run is (SageMaker's folders, the hyperparameters file) and the parser
stay in train.py, whose module constants tests point elsewhere."""

from __future__ import annotations

from dataclasses import dataclass

from dtrain.errors import SpecError
from dtrain.workloads.inputs import (
    MAX_BATCH,
    MAX_EPOCHS,
    MAX_SEED,
    MAX_STEPS,
    MAX_WORKERS,
    NotWhole,
    real_number,
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


BACKENDS = ("nccl", "gloo")


def _blank_is_none(kind: type):
    """argparse's `type`: a blank value is None (the default), anything else `kind`'s."""
    def convert(text: str):
        return None if not text.strip() else {int: whole_number, float: real_number}.get(kind, kind)(text)

    convert.__name__ = kind.__name__  # argparse names it in "invalid int value"
    return convert


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

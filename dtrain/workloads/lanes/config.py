"""The settings of `lanes train`: TrainConfig, read from the recipe, then the platform's environment
variables, then flags (flags win); see train.py's docstring for the variables."""

import argparse
import dataclasses
from collections.abc import Mapping, Sequence

import torch

from dtrain.errors import SpecError
from dtrain.training import checkpoint_dir
from dtrain.workloads.inputs import MAX_EPOCHS, MAX_SEED, MAX_STEPS, Parser, env_int, in_range, learning_rate
from dtrain.workloads.lanes import recipes
from dtrain.workloads.lanes.recipes import LIMITS, Recipe


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off", "")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TrainConfig:
    recipe: Recipe  # after --batch-size / --lr / --max-steps overrides
    data_dir: str  # prepared TuSimple folder (DATA_DIR)
    out_dir: str  # metrics.jsonl, train.log, model.pt, run.json (OUTPUT_DIR)
    checkpoint_dir: str  # ckpt-<step>.pt files (default: see dtrain.training.checkpoint_dir, else out_dir)
    epochs: int | None  # if set, the schedule is epochs x steps per epoch instead of max_steps
    stop_after: int | None  # leave after this step with a checkpoint, as a preemption would
    seed: int  # model init, data order, augmentation, dropout
    backend: str | None  # process group backend (None: nccl on GPU, gloo otherwise)
    backbone_weights: str | None  # local VGG16-BN features state_dict to start from
    resume: bool  # continue from the newest checkpoint in out_dir
    num_workers: int  # data loader processes per training process (0 when USE_WORKERS is off)
    use_val: bool  # validate on the val split every recipe.val_every steps and at the end
    val_batch_size: int  # frames per validation batch
    enable_snapshot: bool  # recorded only: the platform snapshots the output volume
    pvc_name: str | None  # recorded only: the volume the platform snapshots


def _env_bool(env: Mapping[str, str], name: str) -> bool | None:
    value = env.get(name)
    if value is None:
        return None
    if value.strip().lower() in _TRUE:
        return True
    if value.strip().lower() in _FALSE:
        return False
    raise SpecError(f"{name}={value!r}: use true or false")


def build_parser(env: Mapping[str, str]) -> argparse.ArgumentParser:
    """Flags whose defaults come from the environment, so a flag on the command line wins."""
    p = Parser(prog="dtrain lanes train", description="Train SCNN on TuSimple (data parallel).")
    p.add_argument("--recipe", default="tiny", choices=sorted(recipes.RECIPES), help="named configuration (default tiny)")
    p.add_argument("--data-dir", default=env.get("DATA_DIR", "/mnt/tusimple"), help="prepared TuSimple folder [DATA_DIR]")
    p.add_argument("--out-dir", default=env.get("OUTPUT_DIR", "/mnt/output"), help="checkpoints, model.pt, metrics [OUTPUT_DIR]")
    p.add_argument("--max-steps", type=int, help="optimizer steps in the schedule (default: the recipe's)")
    p.add_argument("--epochs", type=int, help="schedule length in epochs instead of steps")
    p.add_argument("--stop-after", type=int, help="stop after this step (checkpointed); a later run resumes")
    p.add_argument("--lr", type=float, help="peak learning rate (default: the recipe's)")
    p.add_argument("--seed", type=int, default=0, help="random seed (default 0)")
    p.add_argument("--backend", choices=("gloo", "nccl", "mpi"), help="default: nccl on GPU, gloo on CPU")
    p.add_argument("--backbone-weights", help="local VGG16-BN features state_dict (no downloads)")
    p.add_argument("--resume", action=argparse.BooleanOptionalAction, default=True,
                   help="resume from the newest checkpoint")
    p.add_argument("--checkpoint-every", type=int, help="steps between checkpoints (default: the recipe's)")
    p.add_argument("--checkpoint-dir", help="checkpoint folder (default: $DTRAIN_CHECKPOINT_DIR, "
                   "/opt/ml/checkpoints on SageMaker, else --out-dir)")
    p.add_argument("--batch-size", type=int, default=env_int(env, "BATCH_SIZE", LIMITS["batch_size"]),
                   help="per process [BATCH_SIZE]")
    p.add_argument("--use-workers", action=argparse.BooleanOptionalAction, default=_env_bool(env, "USE_WORKERS"),
                   help="load data in worker processes [USE_WORKERS]")
    p.add_argument("--num-workers", type=int, default=env_int(env, "NUM_WORKERS", LIMITS["num_workers"]),
                   help="[NUM_WORKERS]")
    p.add_argument("--use-val", action=argparse.BooleanOptionalAction, default=_env_bool(env, "USE_VAL"),
                   help="validate on the val split [USE_VAL]")
    p.add_argument("--val-batch-size", type=int, default=env_int(env, "VAL_BATCH_SIZE", LIMITS["val_batch_size"]),
                   help="[VAL_BATCH_SIZE]")
    p.add_argument("--enable-snapshot", action=argparse.BooleanOptionalAction,
                   default=_env_bool(env, "ENABLE_SNAPSHOT"), help="recorded for the platform [ENABLE_SNAPSHOT]")
    p.add_argument("--pvc-name", default=env.get("PVC_NAME"), help="recorded for the platform [PVC_NAME]")
    p.add_argument("--bf16", action=argparse.BooleanOptionalAction,
                   help="bfloat16 autocast on this device (default: the recipe's; --no-bf16 runs float32)")
    p.add_argument("--cuda-graphs", action=argparse.BooleanOptionalAction,
                   help="replay the model's forward and backward as CUDA graphs (default: the recipe's; CUDA only)")
    p.add_argument("--keep-heap", action=argparse.BooleanOptionalAction,
                   help="keep freed memory mapped between steps (default: the recipe's, on; glibc only)")
    return p


def parse_config(argv: Sequence[str] | None, env: Mapping[str, str]) -> TrainConfig:
    args = build_parser(env).parse_args(argv)
    if args.backend == "mpi" and not torch.distributed.is_mpi_available():
        raise SpecError("--backend mpi: this torch is built without MPI: give gloo (CPU) or nccl (GPU), "
                        "or leave it out to pick one for the device")
    recipe = recipes.get(args.recipe)
    for flag, value, (low, high) in (
        ("--batch-size", args.batch_size, LIMITS["batch_size"]), ("--max-steps", args.max_steps, LIMITS["max_steps"]),
        ("--epochs", args.epochs, (1, MAX_EPOCHS)), ("--stop-after", args.stop_after, (1, MAX_STEPS)),
        ("--checkpoint-every", args.checkpoint_every, LIMITS["ckpt_every"]), ("--seed", args.seed, (0, MAX_SEED)),
        ("--val-batch-size", args.val_batch_size, LIMITS["val_batch_size"]),
        ("--num-workers", args.num_workers, LIMITS["num_workers"]),
    ):
        if value is not None:
            in_range(flag, value, low, high)
    if args.lr is not None:
        learning_rate("--lr", args.lr, recipe.lr)
    overrides = {k: v for k, v in (("batch_size", args.batch_size), ("lr", args.lr), ("max_steps", args.max_steps),
                                   ("val_batch_size", args.val_batch_size), ("ckpt_every", args.checkpoint_every))
                 if v is not None}
    recipe = dataclasses.replace(recipe, **overrides)  # Recipe re-validates the values
    if args.bf16 is not None:
        recipe = recipe.with_bf16(args.bf16)
    if args.keep_heap is not None:
        recipe = dataclasses.replace(recipe, keep_heap=args.keep_heap)
    if args.cuda_graphs is not None:
        recipe = dataclasses.replace(recipe, cuda_graphs=args.cuda_graphs)
    if args.use_workers is False:
        workers = 0
    elif args.num_workers is not None:
        workers = args.num_workers
    else:
        workers = max(recipe.num_workers, 2 if args.use_workers else 0)
    return TrainConfig(
        recipe=recipe, data_dir=args.data_dir, out_dir=args.out_dir, epochs=args.epochs, stop_after=args.stop_after,
        checkpoint_dir=str(args.checkpoint_dir or checkpoint_dir(args.out_dir, env)),
        seed=args.seed, backend=args.backend, backbone_weights=args.backbone_weights, resume=args.resume,
        num_workers=workers, use_val=bool(args.use_val), val_batch_size=recipe.val_batch_size,
        enable_snapshot=bool(args.enable_snapshot), pvc_name=args.pvc_name,
    )

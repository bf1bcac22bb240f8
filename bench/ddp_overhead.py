"""What data parallelism costs a CPU step, with the host's drift cancelled: DDP steps against the same steps with no communication, interleaved in short blocks.

    OMP_NUM_THREADS=1 .venv/bin/torchrun --nproc-per-node 2 bench/ddp_overhead.py --recipe demo --rounds 15

`dtrain bench scaling` compares runs a minute apart, and on a shared host the same run swings by
15-25% from one minute to the next, more than the cost it looks for. Here every rank (pinned to
core LOCAL_RANK, one thread) holds one copy of the model per variant, all from the same seed, and
runs blocks of `--block` optimizer steps of each variant in turn, the order rotating each round:

- `alone`: the bare model, no collective at all: both ranks compute at once, as in the scaling
  bench's ceiling (N independent jobs);
- `lockstep`: the bare model and a barrier after every step: the ranks wait for each other once
  a step, as in data parallelism, but nothing is communicated;
- `ddp`: the model as the lanes training wraps it (`dtrain.workloads.lanes.train.data_parallel`:
  DistributedDataParallel, gradients all-reduced in buckets during backward, buffers broadcast
  at each forward);
- `train_step`: the lanes training's own step (`train_step` over the `ddp` model: DDP plus the
  step's loss average) and the training loop's stop agreement after it (`should_stop`).

A block starts after a barrier; its time on a rank is from the barrier to its last step's end.
For each round the script divides each variant's block time by `alone`'s (mean over ranks for
`alone`, whose ranks never wait for each other; the slowest rank for the rest), and prints one
JSON line: the median of those ratios per variant, their spread, and the median step of each.
`alone`'s ratio to itself, with ranks pooled as the slowest, is printed as `alone_lockstep`:
what waiting for the slower rank at the end of a block would cost with free communication.
`lockstep_vs_alone` is what waiting once a step costs; `ddp_vs_lockstep` and `train_step_vs_ddp`
are the same medians of per-round ratios taken between neighbours directly: what DDP's
communication adds to the waiting, and what the training step's two one-number collectives add.
"""

import argparse
import dataclasses
import json
import os
import statistics
import time
import types

import torch
import torch.distributed as dist

from dtrain.training import GracefulStop
from dtrain.training.heap import keep_freed_memory
from dtrain.workloads.lanes import recipes
from dtrain.workloads.lanes.model import SCNN
from dtrain.workloads.lanes.train import build_optimizer, data_parallel, forward_backward, speed_up, train_step

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)
from lanes_train import random_batch  # noqa: E402  (the same folder)

VARIANTS = ("alone", "lockstep", "ddp", "train_step")


def main() -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="demo", choices=sorted(recipes.RECIPES))
    parser.add_argument("--batch", type=int, default=8, help="per-process batch")
    parser.add_argument("--rounds", type=int, default=15, help="rounds of one block of every variant")
    parser.add_argument("--block", type=int, default=4, help="optimizer steps in a block")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps of each variant first")
    parser.add_argument("--bf16", action=argparse.BooleanOptionalAction, help="override the recipe's bf16")
    parser.add_argument("--keep-heap", action=argparse.BooleanOptionalAction,
                        help="override the recipe's keep_heap (freed memory kept mapped, as training does)")
    args = parser.parse_args()
    ab.bounded(parser, ("--batch", args.batch, 1, 256), ("--rounds", args.rounds, 1, 1000),
               ("--block", args.block, 1, 1000), ("--warmup", args.warmup, 0, 100))

    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    local = int(os.environ.get("LOCAL_RANK", rank))
    cores = sorted(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cores[local % len(cores)]})
    torch.set_num_threads(1)

    recipe = dataclasses.replace(recipes.get(args.recipe), batch_size=args.batch)
    if args.bf16 is not None:
        recipe = recipe.with_bf16(args.bf16)
    if args.keep_heap is not None:
        recipe = dataclasses.replace(recipe, keep_heap=args.keep_heap)
    heap = keep_freed_memory() if recipe.keep_heap else "off"  # as train.py: before the models' first tensor
    device = torch.device("cpu")
    batch = random_batch(recipe, rank)  # each rank its own, as with a sampler

    info = types.SimpleNamespace(world_size=world, device=device)  # what data_parallel reads

    def build(wrap: bool):
        torch.manual_seed(0)
        net = speed_up(SCNN(recipe.model).to(device), recipe, device)
        return (data_parallel(net, recipe, info) if wrap else net), build_optimizer(net, recipe)

    models = {"alone": build(False), "lockstep": build(False), "ddp": build(True), "train_step": build(True)}
    stop, cfg = GracefulStop(), types.SimpleNamespace(recipe=recipe)  # train_step reads cfg.recipe

    def run_block(name: str, steps: int) -> float:
        model, opt = models[name]
        dist.barrier()
        t0 = time.perf_counter()
        for _ in range(steps):
            if name == "train_step":
                # The lanes loop's per-step collectives: train_step's loss average, then should_stop.
                train_step(model, opt, batch, 0.01, cfg, device)
                stop.should_stop()
            else:
                opt.zero_grad(set_to_none=True)
                forward_backward(model, batch, recipe, device)
                opt.step()
                if name == "lockstep":
                    dist.barrier()
        return time.perf_counter() - t0

    for name in VARIANTS:
        run_block(name, args.warmup)
    times: dict[str, list[list[float]]] = {name: [] for name in VARIANTS}  # [round][rank]
    for r in range(args.rounds):
        order = VARIANTS[r % len(VARIANTS):] + VARIANTS[:r % len(VARIANTS)]
        for name in order:
            mine = torch.tensor([run_block(name, args.block)], dtype=torch.float64)
            every = [torch.zeros_like(mine) for _ in range(world)]
            dist.all_gather(every, mine)
            times[name].append([float(t) for t in every])
    if rank == 0:
        alone = [statistics.mean(ranks) for ranks in times["alone"]]
        row = {"recipe": recipe.name, "batch": args.batch, "world_size": world, "rounds": args.rounds,
               "block": args.block, "bf16": recipe.autocast(device), "keep_heap": heap, "load_avg_1m": round(os.getloadavg()[0], 1),
               "alone_step_s": round(statistics.median(alone) / args.block, 4)}
        pooled = {"alone_lockstep": [max(ranks) for ranks in times["alone"]]}
        pooled.update({name: [max(ranks) for ranks in times[name]] for name in VARIANTS[1:]})
        def compare(key: str, blocks: list[float], base: list[float]) -> None:
            """The median of per-round ratios as `key`, their quartiles as `key`_q."""
            ratios = [b / a for b, a in zip(blocks, base)]
            row[key] = round(statistics.median(ratios), 4)
            row[f"{key}_q"] = [round(q, 4) for q in statistics.quantiles(ratios, n=4)] if len(ratios) > 1 else None

        for name, blocks in pooled.items():
            row[f"{name}_step_s"] = round(statistics.median(blocks) / args.block, 4)
            compare(f"{name}_vs_alone", blocks, alone)
        for name, base in (("ddp", "lockstep"), ("train_step", "ddp")):
            compare(f"{name}_vs_{base}", pooled[name], pooled[base])
        print(json.dumps(row), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

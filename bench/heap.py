"""SCNN training step with freed memory kept (the recipe's `keep_heap`) against glibc's defaults, side by side.

    .venv/bin/python bench/heap.py --recipe demo --size 256x144 --rounds 4 --steps 12 --core 0
    .venv/bin/python bench/heap.py --recipe paper --size 512x288 --batch 2 --rounds 2 --steps 3 --threads 2

The malloc settings hold for a whole process, so each side runs in fresh processes of its own,
taking turns (default, kept, kept, default, ...), each pinned to --core when given, with
--threads compute threads. Each process builds the recipe's model as the training runs it (fast
message passing and the recipe's speed knobs), takes --warmup untimed steps, then --steps timed
full optimizer steps on one fixed random batch. Prints one JSON line per process (median and
spread of its steps, minor page faults per step, peak resident memory) and a summary line: each
side's median step over all its processes, and the median of the per-round ratios default / kept.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import statistics
import subprocess
import sys
from pathlib import Path

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)

SIDES = ("default", "kept")


def child(args: argparse.Namespace) -> None:
    """One process of one side: set the heap policy first, then time steps."""
    if args.core is not None:
        os.sched_setaffinity(0, {args.core})
    if args.child == "kept":
        from dtrain.training.heap import keep_freed_memory

        state = keep_freed_memory()
        if state != "on":
            sys.exit(f"bench/heap.py: freed memory could not be kept here ({state})")
    import torch

    from dtrain.workloads.lanes import recipes
    from lanes_train import Runner, random_batch

    recipe = recipes.get(args.recipe)
    model = dataclasses.replace(recipe.model, input_size=args.size, message_passing="fast")
    recipe = dataclasses.replace(recipe, model=model, batch_size=args.batch or recipe.batch_size)
    runner = Runner(recipe, random_batch(recipe, 0), torch.device("cpu"))
    for _ in range(args.warmup):
        runner.step()
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    steps = [runner.step()[0] for _ in range(args.steps)]
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults
    print(json.dumps({"side": args.child, "step_s": round(statistics.median(steps), 4),
                      "step_sd_s": round(statistics.pstdev(steps), 4), "minor_faults_per_step": faults // args.steps,
                      "max_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024,
                      "threads": torch.get_num_threads()}), flush=True)


def main(argv=None) -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="demo", choices=("tiny", "demo", "paper"))
    parser.add_argument("--size", default="256x144", help="WxH")
    parser.add_argument("--batch", type=int, help="per-process batch (default: the recipe's)")
    parser.add_argument("--rounds", type=int, default=4, help="processes of each side, taking turns (1-100)")
    parser.add_argument("--steps", type=int, default=12, help="timed steps in each process (1-1000)")
    parser.add_argument("--warmup", type=int, default=3, help="untimed steps first (0-100)")
    parser.add_argument("--threads", type=int, default=1, help="compute threads per process (1-256)")
    parser.add_argument("--core", type=int, help="pin each process to this CPU")
    parser.add_argument("--child", choices=SIDES, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    args.size = ab.size(parser, args.size)
    size_text = "{}x{}".format(*args.size)
    ab.bounded(parser, ("--batch", 1 if args.batch is None else args.batch, 1, 256), ("--rounds", args.rounds, 1, 100),
               ("--steps", args.steps, 1, 1000), ("--warmup", args.warmup, 0, 100), ("--threads", args.threads, 1, 256))
    if args.core is not None and args.core not in os.sched_getaffinity(0):
        parser.error(f"--core {args.core} is not a CPU this process may use: give one of "
                     f"{sorted(os.sched_getaffinity(0))}")
    if args.child:
        return child(args)
    from dtrain.errors import SpecError
    from dtrain.training.heap import user_settings
    from dtrain.workloads.lanes import recipes

    try:  # the model's own check of the size, in one line before any process starts
        dataclasses.replace(recipes.get(args.recipe).model, input_size=args.size)
    except SpecError as err:
        parser.error(f"--size {size_text}: {err}")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    for name in user_settings(env):
        env.pop(name)  # glibc's own defaults on the default side (and nothing that stops the kept side)
    base = [sys.executable, str(Path(__file__).resolve()), "--recipe", args.recipe, "--size", size_text,
            "--steps", str(args.steps), "--warmup", str(args.warmup), "--threads", str(args.threads)]
    base += ["--batch", str(args.batch)] if args.batch else []
    base += ["--core", str(args.core)] if args.core is not None else []
    rows: dict[str, list[dict]] = {side: [] for side in SIDES}
    for i in range(args.rounds):
        for side in ab.order(i, SIDES):
            out = subprocess.run(base + ["--child", side], env=env, check=True, capture_output=True, text=True).stdout
            row = json.loads(out.strip().splitlines()[-1])
            rows[side].append(row)
            print(json.dumps(row), flush=True)
    ratios = [d["step_s"] / k["step_s"] for d, k in zip(rows["default"], rows["kept"])]
    summary = {side: {"step_s": round(statistics.median(r["step_s"] for r in rows[side]), 4),
                      "step_sd_s": round(statistics.median(r["step_sd_s"] for r in rows[side]), 4),
                      "minor_faults_per_step": int(statistics.median(r["minor_faults_per_step"] for r in rows[side])),
                      "max_rss_mib": max(r["max_rss_mib"] for r in rows[side])} for side in SIDES}
    print(json.dumps({"recipe": args.recipe, "size": size_text, "rounds": args.rounds, **summary,
                      "default_over_kept": round(statistics.median(ratios), 3),
                      "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)]}), flush=True)


if __name__ == "__main__":
    main()

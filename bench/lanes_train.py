"""SCNN training throughput per process at 512x288 for the widths of the tiny, demo and paper recipes.

    nice -n 10 .venv/bin/python bench/lanes_train.py --recipes tiny demo paper --size 512x288

Times full optimizer steps (forward, loss, backward, SGD) on random batches, so the figure is the
model's cost alone; data loading runs in parallel in the real loop (NUM_WORKERS). Prints one JSON
line per recipe with the best and the median step of --steps after one warm-up step.
"""

import argparse
import dataclasses
import json
import statistics
import time

import torch

from dtrain.workloads.lanes import recipes
from dtrain.workloads.lanes.model import SCNN
from dtrain.workloads.lanes.train import build_optimizer, forward_backward


def measure(name: str, size: tuple[int, int], batch: int | None, steps: int, impl: str) -> dict:
    recipe = recipes.get(name)
    model_cfg = dataclasses.replace(recipe.model, input_size=size, message_passing=impl)
    recipe = dataclasses.replace(recipe, model=model_cfg, batch_size=batch or recipe.batch_size)
    torch.manual_seed(0)
    model = SCNN(model_cfg)
    opt = build_optimizer(model, recipe)
    w, h = size
    batch_t = (torch.randn(recipe.batch_size, 3, h, w), torch.randint(0, 6, (recipe.batch_size, h, w)),
               torch.randint(0, 2, (recipe.batch_size, 5)).float())
    times = []
    for _ in range(steps + 1):  # the first step warms up oneDNN and the allocator
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        forward_backward(model, batch_t, recipe, torch.device("cpu"))
        opt.step()
        times.append(time.perf_counter() - start)
    best, median = min(times[1:]), statistics.median(times[1:])
    return {"recipe": name, "width": model_cfg.width, "size": f"{w}x{h}", "batch": recipe.batch_size, "impl": impl,
            "threads": torch.get_num_threads(), "best_step_s": round(best, 3), "median_step_s": round(median, 3),
            "images_per_s_best": round(recipe.batch_size / best, 2),
            "images_per_s_median": round(recipe.batch_size / median, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipes", nargs="+", default=["tiny", "demo", "paper"])
    parser.add_argument("--size", default="512x288", help="WxH")
    parser.add_argument("--batch", type=int, help="per-process batch (default: the recipe's)")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--impl", default="fast", choices=("fast", "naive"))
    args = parser.parse_args()
    size = tuple(int(v) for v in args.size.split("x"))
    for name in args.recipes:
        print(json.dumps(measure(name, size, args.batch, args.steps, args.impl)), flush=True)


if __name__ == "__main__":
    main()

"""SCNN training step: the recipe's fast path against plain eager float32 of the same model, side by side.

    OMP_NUM_THREADS=1 nice -n 10 .venv/bin/python bench/lanes_train.py --recipe paper --batch 2 --size 512x288 --repeats 5

Builds two copies of the model from the same seed: `eager` is what public SCNN code runs (NCHW,
float32, eager, slice-by-slice message passing), `fast` is the recipe's path (fast message
passing plus the recipe's speed knobs, or those given with --channels-last/--compile/--cuda-graphs/--bf16).
Times full optimizer steps (forward, loss, backward, SGD) on one random batch, alternating the
two (eager, fast, fast, eager, ...) so that load from other processes falls on both alike, and
prints one JSON line: median step of each, their ratio, and the process CPU time per step.
The first steps (oneDNN primitive caches, torch.compile's compilation) are left out.
"""

import argparse
import dataclasses
import json
import os
import statistics
import time

import torch

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)
from dtrain.errors import SpecError
from dtrain.workloads.lanes import recipes
from dtrain.workloads.lanes.model import SCNN
from dtrain.workloads.lanes.recipes import Recipe
from dtrain.workloads.lanes.train import build_optimizer, capture_graphs, forward_backward, speed_up


def variants(recipe: Recipe) -> dict[str, Recipe]:
    """The plain eager float32 reference and the fast path of the same recipe."""
    eager_model = dataclasses.replace(recipe.model, message_passing="naive")
    eager = dataclasses.replace(recipe, model=eager_model, channels_last=False, compile=False,
                                cuda_graphs=False).with_bf16(False)
    return {"eager": eager, "fast": recipe}


class Runner:
    """One model, optimizer and batch; `step()` runs and times one optimizer step."""

    def __init__(self, recipe: Recipe, batch: tuple, device: torch.device) -> None:
        torch.manual_seed(0)  # both copies start from the same weights
        self.recipe, self.device, self.batch = recipe, device, batch
        self.model = capture_graphs(speed_up(SCNN(recipe.model).to(device), recipe, device), recipe, device)
        self.opt = build_optimizer(self.model, recipe)

    def step(self) -> tuple[float, float, float]:
        """(wall seconds, process CPU seconds, loss) of one step."""
        sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
        sync()
        wall, cpu = time.perf_counter(), time.process_time()
        self.opt.zero_grad(set_to_none=True)
        loss = forward_backward(self.model, self.batch, self.recipe, self.device)
        self.opt.step()
        sync()
        return time.perf_counter() - wall, time.process_time() - cpu, loss.item()


def random_batch(recipe: Recipe, seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One fixed batch of the recipe's size: images, lane-segmentation labels (0-5), lane-exists flags."""
    w, h = recipe.input_size
    g = torch.Generator().manual_seed(seed)
    n = recipe.batch_size
    return (torch.randn(n, 3, h, w, generator=g), torch.randint(0, 6, (n, h, w), generator=g),
            torch.randint(0, 2, (n, 5), generator=g).float())


def measure(recipe: Recipe, device: torch.device, repeats: int, warmup: int) -> dict:
    batch = random_batch(recipe, 0)
    runners = {name: Runner(r, batch, device) for name, r in variants(recipe).items()}
    for runner in runners.values():
        for _ in range(warmup):
            runner.step()
    samples: dict[str, list] = {name: [] for name in runners}
    for i in range(repeats):
        for name in (("eager", "fast") if i % 2 == 0 else ("fast", "eager")):
            samples[name].append(runners[name].step())
    w, h = recipe.input_size
    row = {"recipe": recipe.name, "size": f"{w}x{h}", "batch": recipe.batch_size, "device": str(device),
           "threads": torch.get_num_threads(), "load_avg_1m": round(os.getloadavg()[0], 1), "repeats": repeats,
           "knobs": {"channels_last": recipe.nhwc(device), "compile": recipe.compile,
                     "cuda_graphs": recipe.graphs(device), "bf16": recipe.autocast(device)}}
    for name, s in samples.items():
        row[f"{name}_step_s"] = round(statistics.median(x[0] for x in s), 3)
        row[f"{name}_cpu_s"] = round(statistics.median(x[1] for x in s), 3)
    row["speedup"] = round(row["eager_step_s"] / row["fast_step_s"], 2)
    row["speedup_min"] = round(min(x[0] for x in samples["eager"]) / min(x[0] for x in samples["fast"]), 2)
    return row


def main() -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", nargs="+", default=["paper"], choices=sorted(recipes.RECIPES))
    parser.add_argument("--size", default="512x288", help="WxH")
    parser.add_argument("--batch", type=int, help="per-process batch (default: the recipe's)")
    parser.add_argument("--repeats", type=int, default=5, help="timed steps of each, alternating")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps of each first")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    for knob in ("channels_last", "compile", "cuda_graphs", "bf16"):
        parser.add_argument(f"--{knob.replace('_', '-')}", action=argparse.BooleanOptionalAction,
                            help=f"override the recipe's {knob}")
    args = parser.parse_args()
    size = ab.size(parser, args.size)
    device = ab.device(parser, args.device)
    ab.bounded(parser, ("--batch", 1 if args.batch is None else args.batch, 1, 256), ("--repeats", args.repeats, 1, 1000),
               ("--warmup", args.warmup, 0, 100))
    knobs = {k: getattr(args, k) for k in ("channels_last", "compile", "cuda_graphs") if getattr(args, k) is not None}
    for name in args.recipe:
        recipe = recipes.get(name)
        try:
            model = dataclasses.replace(recipe.model, input_size=size, message_passing="fast")
        except SpecError as err:
            parser.error(f"--size {args.size}: {err}")
        recipe = dataclasses.replace(recipe, model=model, batch_size=args.batch or recipe.batch_size, **knobs)
        if args.bf16 is not None:  # --bf16 / --no-bf16: on whichever device runs
            recipe = recipe.with_bf16(args.bf16)
        print(json.dumps(measure(recipe, device, args.repeats, args.warmup)), flush=True)


if __name__ == "__main__":
    main()

"""SCNN inference frames/s at batch 1 (the paper reports 7.5 FPS for SCNN on a GPU), eager float32 vs fast path.

    .venv/bin/python bench/lanes_infer.py --recipe paper --frames 50

Times `probabilities` (forward, softmax, sigmoid) on one 512x288 frame at a time, synchronising
the device after each, for the plain eager float32 model (NCHW, slice-by-slice message passing)
and the recipe's fast path (fast message passing, channels-last, bf16 autocast on CUDA and on a
CPU with bf16 instructions, as `dtrain lanes predict` runs).
Prints one JSON line with the median frames/s of each.
"""

import argparse
import dataclasses
import json
import statistics
import time

import torch

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)
from dtrain.workloads.lanes import recipes
from dtrain.workloads.lanes.model import SCNN, probabilities


def fps(model: torch.nn.Module, img: torch.Tensor, frames: int, bf16: bool) -> float:
    device = img.device
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    bf16 = bf16 and recipes.native_bf16(device)  # decided once, outside the timed frames
    times = []
    for i in range(frames + 3):  # 3 warm-up frames: cuDNN autotuning, allocator
        sync()
        start = time.perf_counter()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            probabilities(model, img)
        sync()
        if i >= 3:
            times.append(time.perf_counter() - start)
    return 1 / statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="paper", choices=sorted(recipes.RECIPES))
    parser.add_argument("--frames", type=int, default=50, help="timed frames of each (1 to 10000)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    ab.bounded(parser, ("--frames", args.frames, 1, 10_000))
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True
    recipe = recipes.get(args.recipe)
    w, h = recipe.input_size
    img = torch.randn(1, 3, h, w, device=device)
    torch.manual_seed(0)
    eager = SCNN(dataclasses.replace(recipe.model, message_passing="naive")).to(device).eval()
    fast = SCNN(dataclasses.replace(recipe.model, message_passing="fast")).to(device).eval()
    fast.load_state_dict(eager.state_dict())
    fast = fast.to(memory_format=torch.channels_last)
    row = {"recipe": recipe.name, "size": f"{w}x{h}", "device": str(device),
           "name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "eager_fp32_fps": round(fps(eager, img, args.frames, bf16=False), 1),
           "fast_fps": round(fps(fast, img.contiguous(memory_format=torch.channels_last), args.frames, bf16=True), 1),
           "paper_fps": 7.5}
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

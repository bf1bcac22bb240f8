"""SCNN inference frames/s at batch 1 (the paper reports 7.5 FPS for SCNN on a GPU), eager float32 vs fast path.

    .venv/bin/python bench/lanes_infer.py --recipe paper --frames 50

Times `probabilities` (forward, softmax, sigmoid) on one 512x288 frame at a time, synchronising
the device after each, for the plain eager float32 model (NCHW, slice-by-slice message passing)
and the recipe's fast path (fast message passing, channels-last, bf16 autocast on CUDA and on a
CPU with bf16 instructions, as `dtrain lanes predict` runs). On CUDA also the fast path in
float32, and the fast path captured once as a CUDA graph and replayed per frame (float32 and bf16):
at batch 1 a GPU mostly waits for kernel launches.
Prints one JSON line with the median frames/s of each.
"""

import dataclasses
import json
import statistics
import time

import torch

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)
from dtrain.workloads.lanes import recipes
from dtrain.workloads.lanes.model import SCNN, probabilities


def fps(run, img: torch.Tensor, frames: int) -> float:
    """Median frames/s of `run(img)` (one frame), the device synchronised around each."""
    sync = torch.cuda.synchronize if img.device.type == "cuda" else (lambda: None)
    times = []
    for i in range(frames + 3):  # 3 warm-up frames: cuDNN autotuning, allocator
        sync()
        start = time.perf_counter()
        run(img)
        sync()
        if i >= 3:
            times.append(time.perf_counter() - start)
    return 1 / statistics.median(times)


def eager_run(model: torch.nn.Module, bf16: bool):
    """`probabilities` as `dtrain lanes predict` calls it, under bf16 autocast where asked and native."""
    def run(img):
        with torch.autocast(img.device.type, dtype=torch.bfloat16, enabled=bf16 and recipes.native_bf16(img.device)):
            return probabilities(model, img)
    return run


def graph_run(model: torch.nn.Module, img: torch.Tensor, bf16: bool):
    """The same, captured once as a CUDA graph and replayed per frame (the frame copied in first)."""
    static = img.clone()
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up outside the capture: cuDNN picks its algorithms here
        for _ in range(3):
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
                probabilities(model, static)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        with torch.autocast("cuda", dtype=torch.bfloat16, enabled=bf16, cache_enabled=False):
            out = probabilities(model, static)

    def run(frame):
        static.copy_(frame)
        graph.replay()
        return out
    return run


def main() -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", default="paper", choices=sorted(recipes.RECIPES))
    parser.add_argument("--frames", type=int, default=50, help="timed frames of each (1 to 10000)")
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    args = parser.parse_args()
    ab.bounded(parser, ("--frames", args.frames, 1, 10_000))
    device = ab.device(parser, args.device)
    torch.backends.cudnn.benchmark = True
    recipe = recipes.get(args.recipe)
    w, h = recipe.input_size
    img = torch.randn(1, 3, h, w, device=device)
    torch.manual_seed(0)
    eager = SCNN(dataclasses.replace(recipe.model, message_passing="naive")).to(device).eval()
    fast = SCNN(dataclasses.replace(recipe.model, message_passing="fast")).to(device).eval()
    fast.load_state_dict(eager.state_dict())
    fast = fast.to(memory_format=torch.channels_last)
    nhwc = img.contiguous(memory_format=torch.channels_last)
    row = {"recipe": recipe.name, "size": f"{w}x{h}", "device": str(device),
           "name": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
           "eager_fp32_fps": round(fps(eager_run(eager, bf16=False), img, args.frames), 1),
           "fast_fps": round(fps(eager_run(fast, bf16=True), nhwc, args.frames), 1)}
    if device.type == "cuda":  # which part of the fast path pays at batch 1, and what launches cost
        row["fast_fp32_fps"] = round(fps(eager_run(fast, bf16=False), nhwc, args.frames), 1)
        row["graph_fp32_fps"] = round(fps(graph_run(fast, nhwc, bf16=False), nhwc, args.frames), 1)
        row["graph_bf16_fps"] = round(fps(graph_run(fast, nhwc, bf16=True), nhwc, args.frames), 1)
    row["paper_fps"] = 7.5
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

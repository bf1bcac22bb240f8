"""The same short SCNN training with and without CUDA graphs: loss curves, validation, step time.

    python bench/lanes_graphs_loss.py [--train 240] [--steps 120] [--device cuda]

Synthesises TuSimple-format frames into a temporary folder (`dtrain lanes synth`), then runs
`python -m dtrain.workloads.lanes train --recipe demo` twice from the same seed, once with
--cuda-graphs and once with --no-cuda-graphs (both the recipe's fast path otherwise), validating on
the val split at the end (eager forward, eval mode). Prints one JSON line: the mean loss of the last
20 steps of each, their relative difference, the largest per-step difference, how far the saved
batch-norm running statistics of the two runs are apart (the graph replays must update them as
the eager steps do: eval mode reads them), the validation accuracy of each and the median step time
of each. `agree` is the stated tolerance: last-20 mean losses within 5% of each other and running
statistics within 10% (bf16 and cuDNN's non-deterministic kernels make the two runs drift apart
slightly, graphs or not). Validation accuracy is shown, not compared: this early in training it
flips between 0 and ~0.4 with any small change (bf16 against float32 on a CPU gave 0.00 and 0.37
after 120 steps).
On a CPU --cuda-graphs changes nothing: both runs are the same (a check of this script).
"""

import json
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import torch

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)


def train(data: Path, out: Path, steps: int, graphs: bool, device: str) -> dict:
    env_device = [] if device == "cuda" else ["env", "CUDA_VISIBLE_DEVICES="]
    argv = [*env_device, sys.executable, "-m", "dtrain.workloads.lanes", "train", "--recipe", "demo", "--data-dir", str(data),
            "--out-dir", str(out), "--max-steps", str(steps), "--no-resume", "--use-val", "--seed", "0",
            "--cuda-graphs" if graphs else "--no-cuda-graphs"]
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL)
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return {"loss": [r["loss"] for r in rows if "loss" in r],
            "step_s": statistics.median(r["step_time"] for r in rows if "step_time" in r),
            "val": next((r["val_accuracy"] for r in reversed(rows) if "val_accuracy" in r), None),
            "stats": {k: v.float() for k, v in torch.load(out / "model.pt", map_location="cpu")["model"].items()
                      if k.endswith(("running_mean", "running_var"))}}


def stats_apart(a: dict, b: dict) -> float:
    """The largest relative distance ||a - b|| / ||b|| over the batch-norm running statistics."""
    return max(float((a[k] - b[k]).norm() / b[k].norm().clamp_min(1e-12)) for k in b)


def main() -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--train", type=int, default=240, help="synthetic training frames (20 to 5000)")
    parser.add_argument("--steps", type=int, default=120, help="training steps of each run (5 to 5000)")
    parser.add_argument("--device", default="cuda", choices=("cuda", "cpu"))
    args = parser.parse_args()
    ab.bounded(parser, ("--train", args.train, 20, 5000), ("--steps", args.steps, 5, 5000))
    ab.device(parser, args.device)  # cuda where there is none would train on the CPU, reported as cuda
    with tempfile.TemporaryDirectory() as tmp:
        data = Path(tmp) / "data"
        subprocess.run([sys.executable, "-m", "dtrain.cli.main", "lanes", "synth", "--out", str(data), "--train",
                        str(args.train), "--test", "4", "--seed", "1"], check=True, stdout=subprocess.DEVNULL)
        runs = {name: train(data, Path(tmp) / name, args.steps, name == "graphs", args.device)
                for name in ("graphs", "eager")}
    tail = {name: statistics.fmean(r["loss"][-20:]) for name, r in runs.items()}
    rel = abs(tail["graphs"] - tail["eager"]) / tail["eager"]
    vals = [runs[n]["val"] for n in ("graphs", "eager")]
    row = {"device": args.device, "steps": args.steps, "train_frames": args.train,
           "loss_last20_graphs": round(tail["graphs"], 4), "loss_last20_eager": round(tail["eager"], 4),
           "loss_rel_diff": round(rel, 4),
           "max_step_loss_diff": round(max(abs(a - b) for a, b in zip(runs["graphs"]["loss"], runs["eager"]["loss"])), 4),
           "val_graphs": vals[0], "val_eager": vals[1],
           "step_s_graphs": round(runs["graphs"]["step_s"], 4), "step_s_eager": round(runs["eager"]["step_s"], 4)}
    row["bn_stats_apart"] = round(stats_apart(runs["graphs"]["stats"], runs["eager"]["stats"]), 4)
    row["agree"] = rel <= 0.05 and row["bn_stats_apart"] <= 0.10
    print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()

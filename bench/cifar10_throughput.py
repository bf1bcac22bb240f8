"""CIFAR10 training throughput for 1 and 2 processes, and the DDP cost per step.

    nice -n 10 .venv/bin/python bench/cifar10_throughput.py --steps 300 --batch-size 64

Writes synthetic CIFAR10 to a temp folder, runs `python -m dtrain.workloads.cifar10
train` once per process count (plain python for 1, torchrun for more, Gloo on
CPU), and reads the per-step metrics rank 0 writes. The first --warmup steps are
dropped; figures are medians over the rest.

    images/s       global images per second (all processes), data wait included
    step ms        forward + backward (with DDP's all-reduce) + optimizer step
    allreduce ms   gradient all-reduce wall time per step (DDP comm hook, Gloo)

--batch-size is per process (weak scaling), as in the training script; each
process gets max(1, cpu_count // nproc) threads unless --threads says otherwise.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ab  # noqa: E402  (the bounds check; bench/ is this script's folder, first on sys.path)
from dtrain.workloads.cifar10.data import write_synthetic  # noqa: E402


def run(nproc: int, data: Path, work: Path, args: argparse.Namespace) -> dict[str, float]:
    out = work / f"np{nproc}"
    metrics = out / "metrics.jsonl"
    train = ["-m", "dtrain.workloads.cifar10", "train", "--data-dir", str(data), "--model-dir", str(out),
             "--metrics-file", str(metrics), "--batch-size", str(args.batch_size), "--lr", "0.01",
             "--epochs", "1000", "--max-steps", str(args.steps), "--log-interval", "0"]
    launcher = [sys.executable]
    if nproc > 1:
        launcher += ["-m", "torch.distributed.run", "--nproc-per-node", str(nproc), "--master-port", str(args.port)]
    threads = args.threads or max(1, (os.cpu_count() or 1) // nproc)
    # TMPDIR: torchrun's own torchelastic_* folder goes with the run's temporary folder, not into /tmp
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(threads), "TMPDIR": str(work)}
    start = time.perf_counter()
    subprocess.run(launcher + train, cwd=REPO, env=env, check=True, stdout=subprocess.DEVNULL)
    wall = time.perf_counter() - start
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    steps = [r for r in rows if "loss" in r][args.warmup :]
    med = lambda key: statistics.median(r[key] for r in steps)  # noqa: E731
    allreduce = med("allreduce_time") if nproc > 1 else 0.0
    return {
        "nproc": nproc,
        "threads_per_proc": threads,
        "global_batch": args.batch_size * nproc,
        "images_per_s": med("images_per_s"),
        "step_ms": 1000 * med("step_time"),
        "data_ms": 1000 * med("data_time"),
        "allreduce_ms": 1000 * allreduce,
        "allreduce_share": allreduce / med("step_time"),
        "wall_s": wall,
    }


def main() -> int:
    p = ab.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=300, help="optimizer steps per run (default 300)")
    p.add_argument("--warmup", type=int, default=30, help="steps dropped from the figures (default 30)")
    p.add_argument("--batch-size", type=int, default=64, help="images per step per process (default 64)")
    p.add_argument("--procs", default="1,2", help="comma-separated process counts (default 1,2)")
    p.add_argument("--n-train", type=int, default=10000, help="synthetic training images (default 10000)")
    p.add_argument("--threads", type=int, default=0, help="threads per process (default cpu_count // procs)")
    p.add_argument("--port", type=int, default=29531, help="torchrun master port (default 29531)")
    p.add_argument("--json", help="also write the results to this file")
    args = p.parse_args()
    procs = [int(n) for n in args.procs.split(",") if n.strip().isdigit()]
    if len(procs) != len(args.procs.split(",")):
        p.error(f"--procs {args.procs!r} is not a list of process counts: give e.g. 1,2")
    ab.bounded(p, ("--steps", args.steps, 2, 100_000), ("--warmup", args.warmup, 0, args.steps - 2),
               ("--batch-size", args.batch_size, 1, 4096), *(("--procs", n, 1, 64) for n in procs),
               ("--n-train", args.n_train, args.batch_size * max(procs), 1_000_000),
               ("--threads", args.threads, 0, 1024), ("--port", args.port, 1024, 65535))
    ab.output_file(p, args.json)
    with tempfile.TemporaryDirectory(prefix="cifar10-bench-") as tmp:
        work = Path(tmp)
        write_synthetic(work / "data", fmt="binary", n_train=args.n_train, n_test=1000, seed=0)
        results = [run(int(n), work / "data", work, args) for n in args.procs.split(",")]
    print(f"CIFAR10 reference CNN, CPU/Gloo, {os.cpu_count()} CPUs, batch {args.batch_size} per process, "
          f"{args.steps} steps ({args.warmup} warm-up dropped), medians")
    print("| procs | threads/proc | global batch | images/s | step ms | data ms | allreduce ms | allreduce share |")
    print("|---|---|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['nproc']} | {r['threads_per_proc']} | {r['global_batch']} | {r['images_per_s']:.0f} | "
              f"{r['step_ms']:.2f} | {r['data_ms']:.2f} | {r['allreduce_ms']:.2f} | {100 * r['allreduce_share']:.0f}% |")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

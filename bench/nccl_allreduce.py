"""All-reduce bus bandwidth between the GPUs of one machine (NCCL), as nccl-tests reports it.

    torchrun --nproc-per-node NGPU bench/nccl_allreduce.py --sizes-mb 1 64 256 1024
    torchrun --nproc-per-node 2 bench/nccl_allreduce.py --backend gloo --sizes-mb 1.7   # CPU processes

For each message size: median time of --iters all-reduces after 5 warm-up ones, algorithm
bandwidth (bytes / time) and bus bandwidth (algbw x 2 (n-1) / n, the figure nccl-tests prints,
comparable across GPU counts). Rank 0 prints one JSON line per size. With one GPU there is no
link to measure: it says so and exits 0.
"""

import json
import os
import statistics
import time

import torch
import torch.distributed as dist

from dtrain.names import counted

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)


def main() -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mb", type=float, nargs="+", default=[1, 64, 256, 1024],
                        help="message sizes in MiB (0.001 to 16384)")
    parser.add_argument("--iters", type=int, default=20, help="timed all-reduces per size (1 to 10000)")
    parser.add_argument("--backend", choices=["nccl", "gloo"], default="nccl",
                        help="nccl between GPUs, or gloo between CPU processes (what DDP uses without GPUs)")
    args = parser.parse_args()
    ab.bounded(parser, ("--iters", args.iters, 1, 10_000), *(("--sizes-mb", mb, 0.001, 16384) for mb in args.sizes_mb))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world < 2:
        gpus = counted(torch.cuda.device_count(), "GPU")
        print(json.dumps({"note": f"{gpus}, 1 process: no all-reduce link to measure"}))
        return
    rank = int(os.environ["RANK"])
    gpu = args.backend == "nccl"
    if gpu:
        torch.cuda.set_device(int(os.environ["LOCAL_RANK"]))
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    dist.init_process_group(args.backend)
    for mb in args.sizes_mb:
        x = torch.ones(max(1, int(mb * (1 << 20)) // 4), device="cuda" if gpu else "cpu")
        times = []
        for i in range(args.iters + 5):
            sync()
            start = time.perf_counter()
            dist.all_reduce(x)
            sync()
            if i >= 5:
                times.append(time.perf_counter() - start)
        t = statistics.median(times)
        algbw = x.numel() * 4 / t / 1e9
        if rank == 0:
            print(json.dumps({"size_mb": mb, "backend": args.backend, "processes": world, "time_ms": round(t * 1e3, 3), "algbw_GBps": round(algbw, 1),
                              "busbw_GBps": round(algbw * 2 * (world - 1) / world, 1)}), flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()

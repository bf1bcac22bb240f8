"""`dtrain bench scaling`: the same training at 1, 2, ... processes, through the platform.

    dtrain bench scaling --workload lanes --processes 1,2 --data-dir DIR [--gpu G] [--steps N]

Each size runs as a real dtrain job (submit-dist, torchrun) with a fixed per-process batch and a
fixed number of steps, one device (a GPU, or here one CPU core) per process, as the reference's
1-GPU vs 3-GPU comparison. Throughput is read from the job's metrics JSONL (wall time between
the first steady step and the last), so it excludes start-up and the first (warm-up) steps.
Writes a markdown table (`scaling.md`), the raw figures (`scaling.json`) and a plot (`scaling.png`).

Each size's steps are also summarised (median and spread of the time from one step's end to the
next), with a lockstep bound for N > 1: data parallelism makes every step wait for the slowest
rank, so step-to-step variation alone costs efficiency even with free communication. The bound
draws N steps from the 1-process run's own step times (independently: a slowdown of the whole
machine that hits every rank at once costs less than that).

With --ceiling, each size N > 1 also runs as N independent 1-process jobs at once (each pinned
to its own cores, as the N ranks are): their summed throughput is what the machine gives N
processes that never talk to each other, so `images/s / ceiling` is what DDP itself costs,
apart from cores that slow each other down (shared caches, SMT siblings, a busy host).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import shlex
import signal
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from dtrain.client import Client
from dtrain.errors import DtrainError, SpecError
from dtrain.names import counted
from dtrain.replace import replacing
from dtrain.spec import JobSpec
from dtrain.workloads.inputs import Parser, in_range, out_folder, whole_number


@dataclass(frozen=True, kw_only=True)
class Workload:
    """How to run one workload for a fixed number of steps."""

    epoch_images: int  # images in one epoch of the real dataset (for the projected epoch time)
    dataset: str  # what epoch_images counts
    command: callable  # (data_dir, out_dir, steps, batch, extra) -> argv


def _lanes(data_dir, out_dir, steps, batch, extra):
    return ["python", "-m", "dtrain.workloads.lanes", "train", "--data-dir", data_dir, "--out-dir", out_dir,
            "--max-steps", str(steps), "--batch-size", str(batch), "--no-resume", "--no-use-val", *extra]


def _cifar10(data_dir, out_dir, steps, batch, extra):
    return ["python", "-m", "dtrain.workloads.cifar10", "train", "--data-dir", data_dir, "--model-dir", out_dir,
            "--max-steps", str(steps), "--batch-size", str(batch), "--epochs", "1000", *extra]


WORKLOADS = {
    "lanes": Workload(epoch_images=3268, dataset="TuSimple train (0313 + 0601)", command=_lanes),
    "cifar10": Workload(epoch_images=50000, dataset="CIFAR10 train", command=_cifar10),
}


def timed_steps(metrics_path: Path, warmup: int) -> list[dict]:
    """The training-step rows of rank 0's metrics, from the end of step `warmup` on."""
    rows = [json.loads(line) for line in metrics_path.read_text().splitlines() if line.strip()]
    steps = [r for r in rows if "step" in r and "time" in r and "loss" in r]
    if len(steps) < warmup + 2:
        raise DtrainError(f"{metrics_path} has {len(steps)} steps; need more than {warmup + 1} (raise --steps)")
    return steps[warmup:]


def throughput(steps: list[dict], global_batch: int) -> float:
    """Images/s between the end of the first timed step and the end of the last (`timed_steps`)."""
    first, last = steps[0], steps[-1]
    return (last["step"] - first["step"]) * global_batch / (last["time"] - first["time"])


def step_walls(steps: list[dict]) -> list[float]:
    """Seconds from the end of each timed step to the end of the next (what throughput divides)."""
    return [b["time"] - a["time"] for a, b in zip(steps, steps[1:]) if b["step"] == a["step"] + 1]


def expected_max(xs: list[float], n: int) -> float:
    """E[max of n independent draws, with replacement, from xs], exactly: the sorted i-th value
    (1-based) is the largest of n draws with probability (i^n - (i-1)^n) / len^n."""
    ordered, m = sorted(xs), len(xs)
    return sum(x * (((i + 1) / m) ** n - (i / m) ** n) for i, x in enumerate(ordered))  # floats: n may be 1024


def lockstep_bound(one_process_steps: list[float], n: int) -> float:
    """The efficiency N ranks in lockstep reach at best when every step waits for the slowest of
    N steps drawn from one process's own step times (no communication cost, ranks independent):
    mean / E[max of N]. What step-to-step variation alone costs data parallelism."""
    return statistics.fmean(one_process_steps) / expected_max(one_process_steps, n)


def run(args) -> list[dict]:
    """Run every size `repeats` times, interleaved (1, 2, 1, 2, ...), and keep the median."""
    client = Client(home=args.home)
    for p in args.sizes:  # every size the backend refuses (too many processes, GPUs, a quota) before any run
        client.render(_spec(args, client, p, f"scaling-{args.workload}-{p}p-check", Path(args.out) / f"{p}p"))
    samples: dict[int, list[float]] = {p: [] for p in args.sizes}
    walls: dict[int, list[float]] = {p: [] for p in args.sizes}
    jobs: dict[int, list[str]] = {p: [] for p in args.sizes}
    devices: dict[int, set[str]] = {p: set() for p in args.sizes}  # what the runs trained on (run.json)
    ceiling: dict[int, list[float]] = {p: [] for p in args.sizes if p > 1}
    for r in range(args.repeats):
        for p in args.sizes:
            name, ips, steps, device = _run_one(args, client, p, r)
            if device is not None:
                devices[p].add(device.split(":")[0])
            samples[p].append(ips)
            walls[p].extend(steps)
            jobs[p].append(name)
            if args.ceiling and p > 1:
                ceiling[p].append(_run_independent(args, client, p, r))
    results = [{"processes": p, "jobs": jobs[p], "samples": samples[p],
                "images_per_s": statistics.median(samples[p]),
                "step_s": statistics.median(walls[p]), "step_sd_s": statistics.pstdev(walls[p]),
                **({"devices": sorted(devices[p])} if devices[p] else {})} for p in args.sizes]
    if results[0]["processes"] == 1:  # what waiting for the slowest rank costs, from the 1-process steps
        for res in results[1:]:
            res["lockstep_bound"] = lockstep_bound(walls[1], res["processes"])
    for res in results:
        if ceiling.get(res["processes"]):
            res["ceiling_samples"] = ceiling[res["processes"]]
            res["ceiling_images_per_s"] = statistics.median(ceiling[res["processes"]])
            res["vs_ceiling"] = res["images_per_s"] / res["ceiling_images_per_s"]
    base = results[0]["images_per_s"] / results[0]["processes"]
    for r in results:
        r["speedup"] = r["images_per_s"] / results[0]["images_per_s"]
        r["efficiency"] = r["images_per_s"] / (base * r["processes"])
        r["epoch_minutes"] = WORKLOADS[args.workload].epoch_images / r["images_per_s"] / 60
    return results


def _run_one(args, client: Client, p: int, repeat: int) -> tuple[str, float, list[float]]:
    started = []
    with _stopping(client, started):
        name, job_out = _submit(args, client, p, f"{p}p-{repeat}", f"{p}p", started)
        _wait(client, name)
    steps = timed_steps(_metrics_file(job_out), args.warmup)
    return name, throughput(steps, p * args.batch), step_walls(steps), trained_on(job_out)


def trained_on(folder: Path) -> str | None:
    """The device the run trained on, as its run.json says ('cpu', 'cuda:0'); None where it says none."""
    try:
        device = json.loads((folder / "run.json").read_text()).get("device")
    except (OSError, ValueError, AttributeError):
        return None
    return device if isinstance(device, str) else None


def _run_independent(args, client: Client, p: int, repeat: int) -> float:
    """Summed images/s of `p` independent 1-process jobs running at once."""
    started = []
    with _stopping(client, started):
        outs = [_submit(args, client, 1, f"{p}x1-{repeat}-{i}", f"{p}x1/{i}", started)[1] for i in range(p)]
        for name in started:
            _wait(client, name)
    return sum(throughput(timed_steps(_metrics_file(job_out), args.warmup), args.batch) for job_out in outs)


@contextlib.contextmanager
def _stopping(client: Client, started: list[str]):
    """Delete the jobs in `started` that are still going when the block is cut short (Ctrl-C,
    SIGTERM, one of them failed): a benchmark that stops leaves no training behind on the
    cores (or holding the cores its --cpu jobs pinned)."""
    try:
        yield
    except BaseException:
        for name in started:
            with contextlib.suppress(Exception):
                if not client.get(name).status.terminal:
                    client.delete(name)
                    print(f"deleted {name}: the benchmark stopped", file=sys.stderr, flush=True)
        raise


def _submit(args, client: Client, p: int, tag: str, folder: str, started: list[str]) -> tuple[str, Path]:
    name = f"scaling-{args.workload}-{tag}-{int(time.time())}"
    job_out = out_folder(Path(args.out).resolve() / folder, "--out")
    for stale in job_out.glob("*"):
        if stale.is_file():
            stale.unlink()
    spec = _spec(args, client, p, name, job_out)
    print(f"[{p} process{'es' if p > 1 else ''}] dtrain submit-dist {name}: {shlex.join(spec.command)}", flush=True)
    started.append(name)  # before submitting: an interrupt mid-submit still finds it
    client.submit(spec)
    return name, job_out


def _spec(args, client: Client, p: int, name: str, job_out: Path) -> JobSpec:
    command = WORKLOADS[args.workload].command(str(Path(args.data_dir).resolve()), str(job_out), args.steps,
                                                args.batch, args.extra)
    return JobSpec(name=name, command=tuple(command), processes=p, launcher="torchrun" if p > 1 else "none",
                   gpu=args.gpu, cpu=args.cpu_per_process, project=args.project or client.default_project,
                   env={"PYTHONUNBUFFERED": "1"})


def _wait(client: Client, name: str) -> None:
    info = client.wait(name)
    if info.status.value != "Succeeded":
        hint = "" if "'dtrain logs " in (info.message or "") else f"; see 'dtrain logs {name}'"  # said once
        raise DtrainError(f"scaling job {name} {info.status.value}: {info.message}{hint}")


def _terminated(signum, frame):
    raise SystemExit(128 + signum)


def _metrics_file(folder: Path) -> Path:
    """metrics.jsonl (both workloads' default), else the only JSONL the job wrote."""
    if (folder / "metrics.jsonl").exists():
        return folder / "metrics.jsonl"
    found = sorted(folder.glob("*.jsonl"))
    if not found:
        raise DtrainError(f"the job wrote no metrics JSONL into {folder}")
    return found[0]


def markdown(results: list[dict], args) -> str:
    wl = WORKLOADS[args.workload]
    device = f"{args.gpu} GPU" if args.gpu else f"{args.cpu_per_process:g} CPU core"
    device += " per process"
    if args.gpu and any(r.get("devices") == ["cpu"] for r in results):  # GPUs scheduled, none used
        device += (" (scheduled, but the runs trained on the CPU: an injected GPU inventory, DTRAIN_GPUS, or no "
                   "CUDA here; these are CPU figures)")
    lines = [f"Workload `{args.workload}`, per-process batch {args.batch}, {args.steps} steps "
             f"({args.warmup} warm-up), {device}, median of {counted(args.repeats, 'interleaved run')}.", "",
             f"| processes | images/s | speed-up | efficiency | projected epoch ({wl.dataset}, {wl.epoch_images} images) |",
             "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r['processes']} | {r['images_per_s']:.2f} | {r['speedup']:.2f}x | "
                     f"{100 * r['efficiency']:.0f}% | {_minutes(r['epoch_minutes'])} |")
    lines += ["", "Per step (rank 0, steady steps of every run pooled). Lockstep bound: the efficiency N ranks "
              "would reach if each step waited for the slowest of N steps drawn from the 1-process run's own "
              "step times, with no communication cost: what step-to-step variation alone costs.", "",
              "| processes | step (median) | step sd | lockstep bound |", "|---|---|---|---|"]
    for r in results:
        bound = f"{100 * r['lockstep_bound']:.0f}%" if "lockstep_bound" in r else ""
        lines.append(f"| {r['processes']} | {r['step_s']:.3f} s | {r['step_sd_s']:.3f} s | {bound} |")
    ceilings = [r for r in results if "ceiling_images_per_s" in r]
    if ceilings:
        lines += ["", "Ceiling: N independent 1-process runs at once (no communication), summed.", "",
                  "| processes | ceiling images/s | ceiling vs N x 1 process | DDP images/s vs ceiling |",
                  "|---|---|---|---|"]
        base = results[0]["images_per_s"] / results[0]["processes"]
        for r in ceilings:
            lines.append(f"| {r['processes']} | {r['ceiling_images_per_s']:.2f} | "
                         f"{100 * r['ceiling_images_per_s'] / (base * r['processes']):.0f}% | "
                         f"{100 * r['vs_ceiling']:.0f}% |")
    return "\n".join(lines) + "\n"


def _minutes(m: float) -> str:
    return f"{m:.1f} min" if m < 120 else f"{m / 60:.1f} h"


def plot(results: list[dict], path: Path, title: str) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    ps = [r["processes"] for r in results]
    fig, (a, b) = plt.subplots(1, 2, figsize=(9, 3.5))
    a.plot(ps, [r["speedup"] for r in results], "o-", label="measured")
    a.plot(ps, ps, "--", color="grey", label="linear")
    a.set_xlabel("processes")
    a.set_ylabel("speed-up")
    a.set_xticks(ps)
    a.legend()
    b.bar([str(p) for p in ps], [100 * r["efficiency"] for r in results])
    b.set_ylim(0, 110)
    b.set_xlabel("processes")
    b.set_ylabel("efficiency (%)")
    fig.suptitle(title)
    fig.tight_layout()
    with replacing(path, "wb") as f:  # a link at `path` is replaced, never written through
        fig.savefig(f, format="png", dpi=110)
    plt.close(fig)


def parse(argv) -> argparse.Namespace:
    ap = Parser(prog="dtrain bench scaling", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workload", required=True, choices=sorted(WORKLOADS), help="which training to time")
    ap.add_argument("--processes", default="1,2", help="sizes to run, e.g. 1,2,3")
    ap.add_argument("--data-dir", required=True, help="the workload's prepared data")
    ap.add_argument("--out", default="scaling-out", help="folder for scaling.md/json/png")
    ap.add_argument("--gpu", type=int, default=0, help="GPUs per process")
    ap.add_argument("--cpu-per-process", type=float, default=1.0, help="CPU threads per process (default 1)")
    ap.add_argument("--batch", type=int, default=4, help="per-process batch")
    ap.add_argument("--steps", type=int, default=20, help="training steps per run")
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the timing")
    ap.add_argument("--repeats", type=int, default=1, help="runs per size, interleaved; the median is kept")
    ap.add_argument("--ceiling", action="store_true",
                    help="also run each size N > 1 as N independent 1-process jobs at once (the machine's ceiling)")
    ap.add_argument("--project", help="project the runs are submitted to")
    ap.add_argument("--home", help="DTRAIN_HOME to use")
    ap.add_argument("--json", action="store_true", help="print the results as JSON")
    ap.add_argument("extra", nargs="*", help="after --: extra arguments for the training command")
    args = ap.parse_args(argv)
    sizes = [whole_number(x) for x in args.processes.split(",")]  # each as any whole-number flag reads it
    if not all(isinstance(n, int) for n in sizes):
        raise SpecError(f"invalid --processes {args.processes!r}: use sizes such as 1,2,3")
    args.sizes = [int(n) for n in sizes]
    if not args.sizes or min(args.sizes) < 1 or args.sizes != sorted(set(args.sizes)):
        raise SpecError(f"invalid --processes {args.processes!r}: use increasing sizes >= 1, such as 1,2,3")
    for flag, value, low, high in (("--processes", max(args.sizes), 1, 1024), ("--repeats", args.repeats, 1, 100),
                                   ("--steps", args.steps, 2, 10_000_000), ("--warmup", args.warmup, 0, 1_000_000),
                                   ("--batch", args.batch, 1, 65_536), ("--gpu", args.gpu, 0, 64),
                                   ("--cpu-per-process", args.cpu_per_process, 0.01, 1024)):
        in_range(flag, value, low, high)
    if args.steps <= args.warmup + 1:  # each in range, but the timing needs two steps past the warm-up
        raise SpecError(f"--steps {args.steps} leaves no steps to time after --warmup {args.warmup}: give --steps "
                        f"{args.warmup + 2} or more (or a smaller --warmup), e.g. --steps 20 --warmup 5")
    if not Path(args.data_dir).exists():
        raise SpecError(f"--data-dir {args.data_dir} does not exist; prepare the data first")
    out_folder(args.out, "--out")  # before any run: a file there would end the benchmark after its runs
    return args


def main(argv=None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    previous = signal.signal(signal.SIGTERM, _terminated)  # so that `_stopping` runs on SIGTERM too
    try:
        results = run(args)
    finally:
        signal.signal(signal.SIGTERM, previous)
    out = Path(args.out)
    table = markdown(results, args)
    for name, text in (("scaling.md", table), ("scaling.json", json.dumps(results, indent=2))):
        with replacing(out / name) as f:  # a link at its name is replaced, never written through
            f.write(text)
    plot(results, out / "scaling.png", f"dtrain bench scaling: {args.workload}")
    print(json.dumps(results, indent=2) if args.json else table)
    print(f"wrote {out / 'scaling.md'}, {out / 'scaling.json'} and {out / 'scaling.png'}")
    return 0

"""What the platform costs a training: the same data-parallel lanes training as a dtrain job and by plain torchrun, taking turns.

    .venv/bin/python bench/platform_ab.py --data-dir DIR --processes 2 --rounds 4 -- --recipe demo

Each round runs the training twice, the order alternating: as a dtrain job (`submit-dist
--processes N --cpu 1`: torchrun under dtrain's supervisor and rank wrappers, in cgroups, each rank
pinned to its own core), and as a user would type it: `torchrun --standalone --nproc-per-node N`,
each rank pinned to core LOCAL_RANK with `taskset`, OMP_NUM_THREADS=1. The command, batch and steps
are those of `dtrain bench scaling`, and so is the figure: rank 0's images/s from the end of the
warm-up steps to the last step (its metrics.jsonl). Prints one JSON line per round and a summary:
each side's median and the median of the per-round ratios dtrain / by hand. The jobs' home and
torchrun's own folders go in a temporary folder that is removed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)
from dtrain.bench.scaling import WORKLOADS, throughput, timed_steps
from dtrain.client import Client
from dtrain.spec import JobSpec

SIDES = ("dtrain", "by_hand")


def command(args, out: Path) -> list[str]:
    return WORKLOADS["lanes"].command(str(args.data_dir), str(out), args.steps, args.batch, args.extra)


def through_dtrain(args, client: Client, out: Path, name: str) -> None:
    spec = JobSpec(name=name, command=tuple(command(args, out)), processes=args.processes, launcher="torchrun",
                   cpu=1, project=client.default_project, env={"PYTHONUNBUFFERED": "1"})
    client.submit(spec)
    info = client.wait(name)
    if info.status.value != "Succeeded":
        # the job's home goes with the scratch folder: name the ranks' own error, not a log to read later
        lines = [line.text for line in client.logs(name, tail=40)]
        why = next((line for line in lines if "error:" in line.lower()), lines[-1] if lines else "")
        sys.exit(f"{Path(sys.argv[0]).name}: job {name} {info.status.value}: {info.message.split('; see ')[0]}"
                 + (f": {why.strip()}" if why.strip() else ""))


def by_hand(args, out: Path) -> None:
    argv = command(args, out)
    argv[0] = sys.executable  # `python` of the job's PATH: the same interpreter
    pin = 'exec taskset -c "$LOCAL_RANK" "$0" "$@"'
    proc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone",
                           f"--nproc-per-node={args.processes}", "--no-python", "bash", "-c", pin, *argv],
                          capture_output=True, text=True, env={**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"})
    if proc.returncode != 0:
        # the ranks' own messages come before torchrun's report of their failure
        lines = proc.stderr.splitlines()
        why = next((line for line in lines if "error:" in line.lower()), lines[-1] if lines else "")
        sys.exit(f"{Path(sys.argv[0]).name}: the training by torchrun exited {proc.returncode}: {why.strip()}")


def add_training_args(parser: argparse.ArgumentParser, *, rounds: int) -> None:
    """The flags both A/B trainings take: data, processes, rounds, batch, steps, warm-up, extra."""
    parser.add_argument("--data-dir", type=Path, required=True, help="a prepared lanes data folder")
    parser.add_argument("--processes", type=int, default=2, help="data-parallel processes (1 to the CPUs here)")
    parser.add_argument("--rounds", type=int, default=rounds, help="runs of each side, taking turns (1-100)")
    parser.add_argument("--batch", type=int, default=8, help="per-process batch (1-256)")
    parser.add_argument("--steps", type=int, default=60, help="training steps per run (warm-up + 2 to 100000)")
    parser.add_argument("--warmup", type=int, default=5, help="steps left out of the timing (0-1000)")
    parser.add_argument("extra", nargs="*", help="after --: more arguments for the training")


def check_training_args(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Every number in its range and a data folder that exists, or one line (argparse's exit 2)."""
    ab.bounded(parser, ("--processes", args.processes, 1, len(os.sched_getaffinity(0))),
               ("--rounds", args.rounds, 1, 100), ("--batch", args.batch, 1, 256), ("--warmup", args.warmup, 0, 1000),
               ("--steps", args.steps, args.warmup + 2, 100_000))
    if not args.data_dir.is_dir():
        parser.error(f"--data-dir {args.data_dir} is not a folder: make one with 'dtrain lanes synth'")
    args.data_dir = args.data_dir.resolve()


def images_per_s(args: argparse.Namespace, out: Path) -> float:
    """The figure of `dtrain bench scaling`: rank 0's images/s after the warm-up (its metrics.jsonl)."""
    return throughput(timed_steps(out / "metrics.jsonl", args.warmup), args.processes * args.batch)


@contextlib.contextmanager
def scratch(prefix: str):
    """A temporary folder for the runs' outputs, also this process's and its children's TMPDIR
    (torchrun's and torch's own files), removed at the end."""
    work = Path(tempfile.mkdtemp(prefix=prefix))
    (work / "tmp").mkdir()
    os.environ["TMPDIR"] = str(work / "tmp")
    try:
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def take_turns(args: argparse.Namespace, work: Path, sides: tuple[str, str],
               run: Callable[[str, int, Path], None]) -> dict[str, list[float]]:
    """--rounds rounds of `run(side, round, out)` for both sides, the order alternating; prints
    each round's images/s as one JSON line and returns them by side."""
    rates: dict[str, list[float]] = {side: [] for side in sides}
    for i in range(args.rounds):
        row = {"round": i}
        for side in ab.order(i, sides):
            out = work / f"{side}-{i}"
            run(side, i, out)
            rates[side].append(images_per_s(args, out))
            row[f"{side}_images_per_s"] = round(rates[side][-1], 2)
        print(json.dumps(row), flush=True)
    return rates


def summary(args: argparse.Namespace, rates: dict[str, list[float]], ratio: str) -> dict:
    """Each side's median images/s and the median and range of the per-round ratios first / second side."""
    first, second = rates
    ratios = [a / b for a, b in zip(rates[first], rates[second])]
    return {"processes": args.processes, "rounds": args.rounds,
            **{f"{side}_images_per_s": round(statistics.median(r), 2) for side, r in rates.items()},
            ratio: round(statistics.median(ratios), 3), "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)]}


def main(argv=None) -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    add_training_args(parser, rounds=4)
    args = parser.parse_args(argv)
    check_training_args(parser, args)
    with scratch("platform-ab-") as work:
        client = Client(home=work / "home")

        def run(side: str, i: int, out: Path) -> None:
            if side == "dtrain":
                through_dtrain(args, client, out, f"platform-ab-{i}")
            else:
                by_hand(args, out)

        rates = take_turns(args, work, SIDES, run)
        print(json.dumps(summary(args, rates, "dtrain_over_by_hand")), flush=True)


if __name__ == "__main__":
    main()

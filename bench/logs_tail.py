"""A/B of `dtrain logs` on a local job with a long log, between two checkouts: wall time and peak memory.

    git worktree add /tmp/old HEAD~1
    .venv/bin/python bench/logs_tail.py --old /tmp/old --new . --lines 1000000 --repeats 3

One finished job in a fresh home prints --lines lines (a real job: the rank wrapper stamps and
writes them as it does for any job). Each round, each checkout runs `dtrain logs JOB -t 3` and
`dtrain logs JOB` (all lines, to /dev/null) in a fresh process; the figures are the command's
wall time and its peak resident memory (ru_maxrss of the child).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ab  # noqa: E402


def _run(tree: Path, home: Path, args: list[str]) -> tuple[float, int]:
    """Seconds and peak KiB of one `dtrain` command run with `tree` first on the path."""
    code = ("import resource, subprocess, sys, time; t = time.perf_counter(); "
            "r = subprocess.run([sys.executable, '-m', 'dtrain.cli.main', *sys.argv[1:]], stdout=subprocess.DEVNULL); "
            "took = time.perf_counter() - t; "
            "print(r.returncode, took, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)")
    env = dict(os.environ, PYTHONPATH=str(tree), DTRAIN_HOME=str(home))
    # cwd: the home's folder, never a checkout (`python -m` looks in the working folder first)
    out = subprocess.run([sys.executable, "-c", code, *args], env=env, capture_output=True, text=True, timeout=900,
                         cwd=home.parent)
    rc, took, peak = out.stdout.split()
    if rc != "0":
        raise SystemExit(f"{tree}: dtrain {' '.join(args)} exited {rc}: {out.stderr.strip()[-300:]}")
    return float(took), int(peak)


def main(argv=None) -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    ab.add_checkouts(parser, repeats=3, unit="rounds")
    parser.add_argument("--lines", type=int, default=1_000_000, help="lines the job prints (1-100000000)")
    args = ab.checked(parser, argv)
    ab.bounded(parser, ("--lines", args.lines, 1, 100_000_000))
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    with tempfile.TemporaryDirectory() as work:
        home = Path(work) / "home"
        # the job is stored by the old checkout: the new code reads an older record, while the old code
        # refuses one with fields it does not know (a job spec only grows)
        env = dict(os.environ, PYTHONPATH=str(trees["old"]), DTRAIN_HOME=str(home))
        dtrain = [sys.executable, "-m", "dtrain.cli.main"]
        program = f"import sys\nfor i in range({args.lines}): sys.stdout.write(f'step {{i}} loss 0.{{i % 997:03d}}\\n')"
        subprocess.run([*dtrain, "submit", "big", "--", sys.executable, "-c", program], env=env, check=True,
                       capture_output=True, cwd=work)
        t = time.perf_counter()
        subprocess.run([*dtrain, "wait", "big"], env=env, check=True, capture_output=True, timeout=3600, cwd=work)
        size = sum(p.stat().st_size for p in (home / "jobs" / "big" / "logs").glob("rank-*.log"))
        print(f"job: {args.lines} lines, {size / 2**20:.0f} MiB of log, written in {time.perf_counter() - t:.0f} s")
        for what, cmd in (("tail -t 3", ["logs", "big", "-t", "3"]), ("whole log", ["logs", "big"])):
            seen: dict[str, list[tuple[float, int]]] = {k: [] for k in trees}
            for i in range(args.repeats):
                for k in ab.order(i):
                    seen[k].append(_run(trees[k], home, cmd))
            for k in trees:
                wall = statistics.median(s for s, _ in seen[k])
                peak = max(p for _, p in seen[k]) / 1024
                print(f"{what} {k}: median {wall * 1000:.0f} ms, peak {peak:.0f} MiB")
            ratio = statistics.median(s for s, _ in seen["old"]) / statistics.median(s for s, _ in seen["new"])
            print(f"{what} old / new (median): {ratio:.2f}x")


if __name__ == "__main__":
    main()

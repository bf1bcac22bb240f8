"""A/B of one `dtrain` command between two checkouts: interleaved fresh processes, median wall.

    git worktree add /tmp/old HEAD~3
    .venv/bin/python bench/cli_ab.py --old /tmp/old --new . --home /tmp/home --repeats 20 -- list

Each checkout runs `python -m dtrain.cli.main --home HOME <command>` with PYTHONPATH set to it,
from a neutral folder (so the current folder cannot shadow it), alternating which goes first.
The command must leave the home as it found it (list, describe, logs, snapshot list...): both
checkouts read the same home. Store its jobs with the old checkout: the newer code reads older
records, the older code refuses a job record with fields it does not know. Prints each one's
median and fastest wall time and the ratio.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ab  # noqa: E402


def main(argv=None) -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    ab.add_checkouts(parser, repeats=20, unit="runs")
    parser.add_argument("--home", type=Path, required=True, help="the dtrain home both read (its jobs stored by the old checkout: newer records have "
                        "fields older code refuses)")
    parser.add_argument("command", nargs="+", help="after --: the dtrain command, e.g. list")
    args = ab.checked(parser, argv)
    if not (args.home / "state.db").is_file():  # a new home would be made and an empty one timed
        parser.error(f"--home {args.home} holds no dtrain state (state.db): give the home the command should read")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # from bytecode, as installed
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    wall = {k: [] for k in trees}
    with tempfile.TemporaryDirectory() as neutral:
        def run(k: str) -> float:
            t = time.perf_counter()
            proc = subprocess.run([sys.executable, "-m", "dtrain.cli.main", "--home", str(args.home), *args.command],
                                  env=dict(env, PYTHONPATH=str(trees[k])), cwd=neutral, capture_output=True, text=True)
            took = time.perf_counter() - t
            if proc.returncode != 0:
                raise SystemExit(f"{k}: dtrain {' '.join(args.command)} exited {proc.returncode}: "
                                 f"{proc.stderr.strip()[-300:]}")
            return took
        for k in trees:  # untimed: the bytecode caches
            run(k)
        for i in range(args.repeats):
            for k in ab.order(i):
                wall[k].append(run(k))
    ab.report(wall)


if __name__ == "__main__":
    main()

"""A/B of one snapshot step between two checkouts of dtrain, interleaved, fresh processes.

Each checkout gets its own dtrain home with the same generated volume (bench/snapshots.py's
generator) and a first snapshot; then, round after round, each takes one more snapshot of its
unchanged volume in a fresh Python (`bench/snapshots.py`'s step script, run with PYTHONPATH set to
that checkout), the order flipping every round. It reports each one's median wall time and time
in process, and the ratio of the medians. Two homes, not one: a key written by one version must
not decide what the other reads.

    git worktree add /tmp/old b83ac70
    .venv/bin/python bench/snapshots_ab.py --old /tmp/old --new . --workdir /work/tmp/ab --repeats 16

With `--first`, every snapshot is a first one: before each (untimed), the checkout's own code
deletes the snapshots of its volume and sweeps the store, so the step reads, hashes and stores
every byte again, as a volume's first snapshot does.

With `--cli create` (or `--cli restore`) each step is the command a user types instead:
`dtrain snapshot create bench` (or `dtrain snapshot restore base --to NEW`), the CLI's start-up
and the backend's record of the result included; there is no in-process figure then.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import ab  # noqa: E402
import snapshots  # noqa: E402  (the generator and the step script)


def prepare(tree: Path, home: Path, files: int, size_mb: int, checkpoints: int, env: dict) -> None:
    """A volume and its first snapshot, made by `tree`'s own code."""
    script = ("import sys; from pathlib import Path; sys.path.insert(0, sys.argv[2]); import snapshots as B\n"
              "from dtrain.storage import Storage\n"
              "s = Storage(Path(sys.argv[1])); v = s.create_volume('bench'); print(v.snapshots)\n"
              "B.generate(v.path, int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]))\n"
              "s.create_snapshot('bench', name='base', progress=False); s.close()\n")
    subprocess.run([sys.executable, "-c", script, str(home), str(REPO / "bench"), str(files), str(size_mb),
                    str(checkpoints)], env=dict(env, PYTHONPATH=str(tree)), cwd=tree, check=True)


EMPTY = ("from pathlib import Path; import sys\n"
         "from dtrain.storage import Storage\n"
         "s = Storage(Path(sys.argv[1]))\n"
         "for snap in s.list_snapshots(volume='bench'):\n"
         "    s.delete_snapshot(snap.name)\n"
         "s.close()\n")


def main(argv=None) -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    ab.add_checkouts(parser, repeats=16, unit="snapshots")
    parser.add_argument("--workdir", type=Path, required=True, help="scratch folder (on the file system to test)")
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--size-mb", type=int, default=1024)
    parser.add_argument("--checkpoints", type=int, default=3)
    parser.add_argument("--cli", choices=["create", "restore"],
                        help="time 'dtrain snapshot create' (or 'restore' of the base into a new volume)")
    parser.add_argument("--first", action="store_true",
                        help="empty the store before each snapshot: time first snapshots")
    args = ab.checked(parser, argv)
    snapshots.check_volume(parser, args.files, args.size_mb, args.checkpoints)
    if args.first and args.cli == "restore":
        parser.error("--first times snapshots: it cannot go with --cli restore (nothing would be left to restore)")
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # run from bytecode
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    homes = {k: args.workdir / f"home-{k}" for k in trees}
    for k, tree in trees.items():
        if not homes[k].exists():
            prepare(tree, homes[k], args.files, args.size_mb, args.checkpoints, env)
    wall = {k: [] for k in trees}
    inside = {k: [] for k in trees}
    for i in range(args.repeats):
        for k in ab.order(i):
            name = f"ab-{i}-{time.time_ns()}"
            if args.cli is None:
                cmd = ["-c", snapshots.DTRAIN, str(homes[k]), "snapshot", name, "1"]
            else:
                verb = (["create", "bench", "--name", name] if args.cli == "create"
                        else ["restore", "base", "--to", name])
                cmd = ["-m", "dtrain.cli.main", "--home", str(homes[k]), "snapshot", *verb]
            if args.first:
                subprocess.run([sys.executable, "-c", EMPTY, str(homes[k])], env=dict(env, PYTHONPATH=str(trees[k])),
                               cwd=trees[k], check=True)
            os.sync()
            t = time.perf_counter()
            out = subprocess.run([sys.executable, *cmd], env=dict(env, PYTHONPATH=str(trees[k])),
                                 cwd=trees[k], check=True, capture_output=True, text=True).stdout
            wall[k].append(time.perf_counter() - t)
            if args.cli is None:
                inside[k].append(float(out))
    ab.report(wall, inside)


if __name__ == "__main__":
    main()

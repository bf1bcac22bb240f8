"""Local overhead: from `dtrain submit-dist` to the first line of the user's command, against
running `torchrun` by hand, side by side in one run (interleaved, median of N).

    .venv/bin/python bench/submit_overhead.py --runs 7

The user's command prints time.time() as its first statement, so both figures are
"process start of the submitting command -> user code running", for 2 processes; then the same
for one process: `dtrain submit` against `python -c` by hand.
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

from dtrain.names import counted

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)

FIRST_LINE = "import time; print(repr(time.time()), flush=True)"
FIRST_LINE_TO_FILE = ("import time, os; t = time.time(); "
                      "open(os.environ['STAMP_DIR'] + '/' + os.environ['RANK'], 'w').write(repr(t))")
BIN = Path(sys.executable).parent


def by_hand(processes: int, work: Path) -> float:
    """torchrun as typed; its own /tmp/torchelastic_* folder lands in `work` ($TMPDIR), not in /tmp."""
    stamps = Path(tempfile.mkdtemp(dir=work))
    t0 = time.time()
    subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
                    f"--nproc-per-node={processes}", "--rdzv-backend=c10d", "--rdzv-endpoint=127.0.0.1:0",
                    "--no-python", sys.executable, "-c", FIRST_LINE_TO_FILE],
                   capture_output=True, text=True, check=True,
                   env={**os.environ, "STAMP_DIR": str(stamps), "TMPDIR": str(work)})
    return min(float(p.read_text()) for p in stamps.iterdir()) - t0


def through_dtrain(home: Path, name: str, processes: int) -> float:
    env = {**os.environ, "DTRAIN_HOME": str(home)}
    t0 = time.time()
    verb = ["submit-dist", name, "--processes", str(processes)] if processes > 1 else ["submit", name]
    subprocess.run([str(BIN / "dtrain"), *verb, "--", "python", "-c", FIRST_LINE], env=env, check=True,
                   capture_output=True)
    subprocess.run([str(BIN / "dtrain"), "wait", name], env=env, check=True, capture_output=True)
    logs = subprocess.run([str(BIN / "dtrain"), "logs", name], env=env, check=True, capture_output=True, text=True)
    return min(float(line.split()[-1]) for line in logs.stdout.splitlines()) - t0


def plain(_processes: int) -> float:
    t0 = time.time()
    out = subprocess.run([sys.executable, "-c", FIRST_LINE], capture_output=True, text=True, check=True)
    return float(out.stdout) - t0


def main() -> None:
    ap = ab.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=7, help="runs of each, interleaved (1 to 1000)")
    ap.add_argument("--json", action="store_true", help="print the figures as one JSON object instead of the table")
    args = ap.parse_args()
    ab.bounded(ap, ("--runs", args.runs, 1, 1000))
    res = {"torchrun_by_hand_2p": [], "dtrain_submit_dist_2p": [], "python_by_hand_1p": [], "dtrain_submit_1p": []}
    with tempfile.TemporaryDirectory(prefix="dtrain-bench-") as tmp:  # the jobs' home and the stamps go with it
        work = Path(tmp)
        home = work / "home"
        for i in range(args.runs):
            res["torchrun_by_hand_2p"].append(by_hand(2, work))
            res["dtrain_submit_dist_2p"].append(through_dtrain(home, f"bench-d{i}", 2))
            res["python_by_hand_1p"].append(plain(1))
            res["dtrain_submit_1p"].append(through_dtrain(home, f"bench-s{i}", 1))
    med = {k: statistics.median(v) for k, v in res.items()}
    if args.json:
        print(json.dumps({"median_s": med, "runs": res}, indent=2))
        return
    print(f"| path | median to first line (s), {counted(args.runs, 'run')} |")
    print("|---|---|")
    for k, v in med.items():
        print(f"| {k} | {v:.3f} |")
    print(f"\nratio dtrain submit-dist / torchrun by hand (2 processes): "
          f"{med['dtrain_submit_dist_2p'] / med['torchrun_by_hand_2p']:.2f}x "
          f"(+{med['dtrain_submit_dist_2p'] - med['torchrun_by_hand_2p']:.3f} s)")
    print(f"ratio dtrain submit / python by hand (1 process): {med['dtrain_submit_1p'] / med['python_by_hand_1p']:.2f}x "
          f"(+{med['dtrain_submit_1p'] - med['python_by_hand_1p']:.3f} s)")


if __name__ == "__main__":
    main()

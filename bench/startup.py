"""What a fresh Python process costs before dtrain does anything: the floor under every
`dtrain` command and every fresh-process step of bench/snapshots.py.

    .venv/bin/python bench/startup.py --repeats 20

Times, interleaved, fresh processes of this interpreter that: do nothing (`-c pass`), do
nothing without `site` (`-S`), import only the standard modules a snapshot needs at the least
(`json`, `sqlite3`, `pathlib`, `typing`), import `dtrain.storage`, import it and leave with
`os._exit` (no interpreter teardown), and import the CLI. Prints the median and the fastest of
each in milliseconds. Run it on an idle machine; it runs from cached bytecode (the variable
PYTHONDONTWRITEBYTECODE is removed from the children's environment, and each child runs once
untimed first).
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import ab  # the bounds check (bench/ is this script's folder, first on sys.path)

REPO = Path(__file__).resolve().parents[1]

CASES = {
    "python -c pass": ["-c", "pass"],
    "python -S -c pass": ["-S", "-c", "pass"],
    "stdlib floor: json, sqlite3, pathlib, typing": ["-c", "import json, sqlite3, pathlib, typing"],
    "import dtrain.storage": ["-c", "import dtrain.storage"],
    "import dtrain.storage, then os._exit": ["-c", "import os, dtrain.storage; os._exit(0)"],
    "import dtrain.cli.main": ["-c", "import dtrain.cli.main"],
}


def measure(repeats: int) -> dict[str, list[float]]:
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    times: dict[str, list[float]] = {name: [] for name in CASES}
    for args in CASES.values():  # untimed: writes the bytecode caches
        subprocess.run([sys.executable, *args], env=env, check=True)
    for _ in range(repeats):
        for name, args in CASES.items():
            t = time.perf_counter()
            subprocess.run([sys.executable, *args], env=env, check=True)
            times[name].append(time.perf_counter() - t)
    return times


def main(argv=None) -> None:
    parser = ab.Parser(description=__doc__.split("\n\n")[0])  # its first sentence, whole
    parser.add_argument("--repeats", type=int, default=20, help="timed runs of each case (1-1000)")
    parser.add_argument("--json", type=Path, default=None, help="write the figures here")
    args = parser.parse_args(argv)
    ab.bounded(parser, ("--repeats", args.repeats, 1, 1000))
    ab.output_file(parser, args.json)
    times = measure(args.repeats)
    for name, xs in times.items():
        print(f"{name:<45} median {statistics.median(xs) * 1e3:6.1f} ms   fastest {min(xs) * 1e3:6.1f} ms")
    if args.json:
        args.json.write_text(json.dumps({"repeats": args.repeats, "seconds": times}, indent=1))


if __name__ == "__main__":
    main()

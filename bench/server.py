"""The HTTP API's list latency with many jobs stored, alone and while clients follow logs.

    .venv/bin/python bench/server.py --jobs 1000 --followers 50 --requests 100

1. Starts a real `dtrain server --port 0` on 127.0.0.1 with a fresh DTRAIN_HOME.
2. Stores --jobs finished jobs. They are written into the local backend's job table directly
   (as `dtrain submit` would record them, then marked Succeeded): running a thousand real
   processes first is not what this measures.
3. Times --requests sequential `GET /api/v1/jobs` (all projects): median and p99.
4. Starts --running real jobs that print a line every 0.2 s, opens --followers log streams
   (`/logs/stream`, server-sent events) spread over them, checks every follower is receiving
   lines, and times the same list requests again while the streams run.

Figures are wall-clock seconds seen by the client; the server runs in its own process.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import ab  # noqa: E402  (the bounds check; bench/ is this script's folder, first on sys.path)
import httpx  # noqa: E402

from dtrain.backends.local.store import JobStore  # noqa: E402
from dtrain.spec import JobSpec, VolumeMount  # noqa: E402


def start_server(home: Path, work: Path, tree: Path = REPO) -> tuple[subprocess.Popen, str]:
    """A `dtrain server` on a free port, run from the checkout `tree`; its process and URL."""
    env = {**os.environ, "DTRAIN_HOME": str(home), "PYTHONPATH": str(tree.resolve())}
    proc = subprocess.Popen([sys.executable, "-m", "dtrain.cli.main", "server", "--port", "0"], env=env, cwd=work,
                            stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline()
    if not line.startswith("dtrain server: http://"):
        proc.kill()
        raise SystemExit(f"the server from {tree} did not start: {line!r}")
    return proc, line.split()[2].rstrip("/")


def store_jobs(home: Path, n: int, volume: str | None = None) -> None:
    """`n` finished jobs in five projects, each mounting `volume` (an existing one) when given."""
    store = JobStore(home / "state.db")
    mounts = () if volume is None else (VolumeMount(volume=volume, mount_path="/data"),)
    for i in range(n):
        name = f"stored-{i:05d}"
        spec = JobSpec(name=name, command=("python", "train.py", "--epochs", "2"), project=f"team-{i % 5}",
                       volumes=mounts)
        store.insert_job(spec, cwd="/tmp", node="bench")
        store.set_status(name, "Running", "started")
        store.set_status(name, "Succeeded", "all processes exited 0")
    store.close()


def time_lists(http: httpx.Client, requests: int, expect: int) -> list[float]:
    times = []
    for _ in range(requests):
        t0 = time.perf_counter()
        r = http.get("/api/v1/jobs")
        times.append(time.perf_counter() - t0)
        assert r.status_code == 200 and len(r.json()) >= expect, r.status_code
    return times


def p99(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(0.99 * (len(ordered) - 1))))]


def follow(url: str, job: str, counts: dict, stop: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=None) as http, http.stream("GET", f"/api/v1/jobs/{job}/logs/stream") as r:
        for line in r.iter_lines():
            if line.startswith("data: {\"rank"):
                counts[threading.get_ident()] = counts.get(threading.get_ident(), 0) + 1
            if stop.is_set():
                return


def main(argv: list[str] | None = None) -> int:
    ap = ab.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--jobs", type=int, default=1000, help="finished jobs stored (default 1000)")
    ap.add_argument("--followers", type=int, default=50, help="log streams open during the second run")
    ap.add_argument("--running", type=int, default=5, help="real jobs printing lines for the followers")
    ap.add_argument("--requests", type=int, default=100, help="list requests per run")
    args = ap.parse_args(argv)
    ab.bounded(ap, *((f"--{flag}", getattr(args, flag), 1, 100_000) for flag in ("jobs", "followers", "running", "requests")))
    with tempfile.TemporaryDirectory(prefix="dtrain-bench-server-") as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        store_jobs(home, args.jobs)
        proc, url = start_server(home, work)
        stop = threading.Event()
        try:
            with httpx.Client(base_url=url, timeout=120) as http:
                quiet = time_lists(http, args.requests, args.jobs)
                script = "while true; do echo tick; sleep 0.2; done"
                for i in range(args.running):
                    r = http.post("/api/v1/jobs", json={"name": f"talker-{i}", "command": ["sh", "-c", script]})
                    assert r.status_code == 201, r.text
                counts: dict = {}
                threads = [threading.Thread(target=follow, args=(url, f"talker-{i % args.running}", counts, stop),
                                            daemon=True) for i in range(args.followers)]
                for t in threads:
                    t.start()
                deadline = time.monotonic() + 120
                while len(counts) < args.followers and time.monotonic() < deadline:
                    time.sleep(0.2)
                if len(counts) < args.followers:
                    raise SystemExit(f"only {len(counts)} of {args.followers} followers received lines")
                busy = time_lists(http, args.requests, args.jobs)
                lines = sum(counts.values())
                for i in range(args.running):
                    http.delete(f"/api/v1/jobs/talker-{i}")
        finally:
            stop.set()
            proc.terminate()
            proc.wait(timeout=30)
    report = {"jobs_stored": args.jobs, "requests": args.requests, "followers": args.followers,
              "list_median_s": statistics.median(quiet), "list_p99_s": p99(quiet),
              "list_median_s_while_following": statistics.median(busy), "list_p99_s_while_following": p99(busy),
              "lines_received_by_followers": lines}
    print(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())

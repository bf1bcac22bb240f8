"""The dashboard's Jobs page request and others, old code against new, on one home of many jobs.

    git worktree add /tmp/old <commit before>
    .venv/bin/python bench/page_ab.py --old /tmp/old --new . --jobs 1000 --repeats 40

Stores --jobs finished jobs, each mounting one volume (as bench/server.py does: into the local job
table directly), starts one real `dtrain server` from each checkout, each over its own copy of that
home with the job table's indexes its code makes, and times, taking turns between the two, the
request the dashboard's Jobs table makes every 2 s (`GET /api/v1/jobs?limit=25&offset=0`), the same
page filtered by a status, one job's record, a Prometheus scrape (`/metrics`) and the lineage the
Volumes and snapshots page draws every 6 s (`/api/v1/lineage`). Reports each side's median and the
ratio; the two sides must answer the same (but for where their homes are), and for the lineage
only without --lineage-differs (a checkout before 2026-12-05 drew every job: the numbers of nodes
are reported instead).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import sqlite3
import subprocess
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlencode

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ab  # noqa: E402
import httpx  # noqa: E402
from server import start_server, store_jobs  # noqa: E402

from dtrain import Client  # noqa: E402
from dtrain.names import counted  # noqa: E402

QUERIES = {  # what is timed: (path, query)
    "a page": ("/api/v1/jobs", {"limit": 25, "offset": 0}),
    "a page, status=Succeeded": ("/api/v1/jobs", {"limit": 25, "offset": 0, "status": "Succeeded"}),
    "one job": ("/api/v1/jobs/stored-00000", {}),
    "a Prometheus scrape": ("/metrics", {}),
    "the lineage": ("/api/v1/lineage", {}),
}


OWN = """import os, sys, tempfile
from dtrain.backends.local.store import JobStore
store = JobStore(os.path.join(tempfile.mkdtemp(), "state.db"))
for kind, name in store.conn.execute("SELECT type, name FROM sqlite_master WHERE sql IS NOT NULL"):
    print(kind, name)
"""


def own_indexes(tree: Path, db: Path) -> None:
    """Drop from `db` the indexes on the job tables that the checkout `tree` does not make (the
    newer side's store made them): its server then reads the database its own code would have."""
    tree = Path(tree).resolve()  # run there: `python -c` puts its working folder first on sys.path
    made = subprocess.run([sys.executable, "-c", OWN], env={**os.environ, "PYTHONPATH": str(tree)}, cwd=tree,
                          capture_output=True, text=True, check=True).stdout.split("\n")
    tables = {line.split()[1] for line in made if line.startswith("table ")}
    indexes = {line.split()[1] for line in made if line.startswith("index ")}
    with contextlib.closing(sqlite3.connect(db)) as conn:
        for name, table in conn.execute("SELECT name, tbl_name FROM sqlite_master WHERE type='index' "
                                        "AND sql IS NOT NULL").fetchall():
            if table in tables and name not in indexes:
                conn.execute(f'DROP INDEX "{name}"')


def main(argv: list[str] | None = None) -> int:
    ap = ab.Parser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ab.add_checkouts(ap, repeats=40, unit="requests of each kind")
    ap.add_argument("--jobs", type=int, default=1000, help="finished jobs stored (1-100000, default 1000)")
    ap.add_argument("--lineage-differs", action="store_true",
                    help="the two sides draw different lineage graphs: report their sizes, not a mismatch")
    args = ab.checked(ap, argv)
    ab.bounded(ap, ("--jobs", args.jobs, 1, 100_000))
    with tempfile.TemporaryDirectory(prefix="dtrain-bench-page-") as tmp:
        home, work = Path(tmp) / "home", Path(tmp) / "work"
        home.mkdir()
        work.mkdir()
        Client(home=home).create_volume("data", size="1Gi")
        store_jobs(home, args.jobs, volume="data")
        # each side its own copy of that home, with the job table's indexes its own code makes
        homes = {"old": Path(shutil.copytree(home, Path(tmp) / "home-old", symlinks=True)), "new": home}
        for side in homes:
            own_indexes(getattr(args, side), homes[side] / "state.db")
        servers = {side: start_server(homes[side], work, getattr(args, side)) for side in ("old", "new")}
        try:
            http = {side: httpx.Client(base_url=url, timeout=120) for side, (_, url) in servers.items()}
            for side in http:  # a server's first request builds FastAPI's route models: untimed
                assert http[side].get(QUERIES["a page"][0], params=QUERIES["a page"][1]).status_code == 200
            for what, (path, query) in QUERIES.items():
                wall: dict[str, list[float]] = {"old": [], "new": []}
                bodies = {}
                for i in range(args.repeats):
                    for side in ab.order(i):
                        t0 = time.perf_counter()
                        r = http[side].get(path, params=query)
                        wall[side].append(time.perf_counter() - t0)
                        assert r.status_code == 200, r.text
                        text = r.text.replace(str(homes[side]), "$DTRAIN_HOME")  # the same, but for where
                        body = json.loads(text) if r.headers["content-type"].startswith("application/json") else text
                        bodies[side] = (body, r.headers.get("x-total-count"))
                differs = args.lineage_differs and path == "/api/v1/lineage"
                shown = f"{path}?{urlencode(query)}" if query else path
                if not differs and bodies["old"] != bodies["new"]:
                    hint = (": a checkout before 2026-12-05 draws every job, pass --lineage-differs"
                            if path == "/api/v1/lineage" else "")
                    raise SystemExit(f"page_ab.py: GET {shown}: the two sides answered differently{hint}")
                print(f"GET {shown} ({counted(args.jobs, 'job')} stored):")
                ab.report(wall)
                print(f"  medians: old {statistics.median(wall['old']) * 1000:.1f} ms, "
                      f"new {statistics.median(wall['new']) * 1000:.1f} ms")
                if differs:
                    print("  nodes drawn: " + ", ".join(f"{side} {len(bodies[side][0]['nodes'])}" for side in bodies))
        finally:
            for proc, _ in servers.values():
                proc.terminate()
                proc.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())

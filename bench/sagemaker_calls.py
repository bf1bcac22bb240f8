"""A/B of `list` on the SageMaker backend between two checkouts: AWS calls and time, against moto.

    git worktree add /tmp/old HEAD~1
    .venv/bin/python bench/sagemaker_calls.py --old /tmp/old --new . --jobs 200 --repeats 3

One moto server on 127.0.0.1 holds --jobs dtrain jobs (their requests and stored specs, as
submit leaves them; moto completes a job at once). Each round, each checkout lists them in two
fresh processes on one new dtrain home: `cold` (nothing kept yet) and `warm` (what the cold one
kept), as two `dtrain list` commands in a row would. The calls are counted with botocore's
event hooks on the backend's clients; the time is the list call's own (not the process start).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import ab  # noqa: E402

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
BUCKET = "dtrain-bench"
# What runs in each checkout's process: one list, its calls and its seconds as one JSON line.
MEASURE = """
import json, sys, time
from collections import Counter
import boto3
from dtrain.backends.sagemaker.backend import Clients, SageMakerBackend
from dtrain.backends.sagemaker.config import SageMakerConfig
url, home = sys.argv[1], sys.argv[2]
s = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")
clients = Clients(*(s.client(n, endpoint_url=url) for n in ("sagemaker", "s3", "logs")))
calls = Counter()
for c in (clients.sagemaker, clients.s3, clients.logs):
    c.meta.events.register("before-parameter-build.*.*", lambda model, **_: calls.update([model.name]))
be = SageMakerBackend(SageMakerConfig(role=%(role)r, bucket=%(bucket)r), clients=clients, home=home)
t = time.perf_counter()
jobs = be.list()
took = time.perf_counter() - t
print(json.dumps({"seconds": took, "jobs": len(jobs), "calls": dict(calls)}))
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def populate(url: str, jobs: int) -> None:
    """`jobs` training jobs with their stored specs, as dtrain's submit leaves them."""
    import boto3

    from dtrain.backends.sagemaker.config import SageMakerConfig
    from dtrain.backends.sagemaker.render import SPEC_FILE, training_job_request
    from dtrain.spec import JobSpec

    cfg = SageMakerConfig(role=ROLE, bucket=BUCKET)
    s = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="us-east-1")
    sm, s3 = s.client("sagemaker", endpoint_url=url), s.client("s3", endpoint_url=url)
    s3.create_bucket(Bucket=BUCKET)
    for i in range(jobs):
        spec = JobSpec(name=f"bench-{i:04d}", command=("python", "train.py", "--epochs", "2"), backend="sagemaker",
                       processes=2, launcher="torchrun")
        s3.put_object(Bucket=BUCKET, Key=f"{cfg.prefix}/{spec.name}/{SPEC_FILE}", Body=json.dumps(spec.to_dict()))
        sm.create_training_job(**training_job_request(spec, cfg))


def main(argv=None) -> None:
    parser = ab.Parser(description=__doc__.splitlines()[0])
    ab.add_checkouts(parser, repeats=3, unit="rounds")
    parser.add_argument("--jobs", type=int, default=200, help="training jobs in the account (1-1000)")
    args = ab.checked(parser, argv)
    ab.bounded(parser, ("--jobs", args.jobs, 1, 1000))
    from moto.server import ThreadedMotoServer

    logging.getLogger("werkzeug").setLevel(logging.ERROR)  # a line per request otherwise
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    url = f"http://127.0.0.1:{port}"
    code = MEASURE % {"role": ROLE, "bucket": BUCKET}
    trees = {"old": args.old.resolve(), "new": args.new.resolve()}
    seen: dict[str, dict[str, list[dict]]] = {k: {"cold": [], "warm": []} for k in trees}
    try:
        populate(url, args.jobs)
        with tempfile.TemporaryDirectory() as work:
            for i in range(args.repeats):
                for k in ab.order(i):
                    home = Path(work) / f"{k}-{i}"
                    home.mkdir()
                    for phase in ("cold", "warm"):
                        proc = subprocess.run([sys.executable, "-c", code, url, str(home)], cwd=work,
                                              env=dict(os.environ, PYTHONPATH=str(trees[k])),
                                              capture_output=True, text=True, timeout=600)
                        if proc.returncode != 0:
                            raise SystemExit(f"{k} {phase}: exited {proc.returncode}: {proc.stderr.strip()[-300:]}")
                        seen[k][phase].append(json.loads(proc.stdout.splitlines()[-1]))
    finally:
        server.stop()
    for phase in ("cold", "warm"):
        for k in trees:
            runs = seen[k][phase]
            calls = ", ".join(f"{op} {n}" for op, n in sorted(runs[-1]["calls"].items()))
            median = statistics.median(r["seconds"] for r in runs)
            print(f"{phase} {k}: {runs[-1]['jobs']} jobs listed, median {median * 1000:.0f} ms; calls: {calls}")
        ratio = statistics.median(r["seconds"] for r in seen["old"][phase]) / \
            statistics.median(r["seconds"] for r in seen["new"][phase])
        print(f"{phase} old / new (median): {ratio:.2f}x")


if __name__ == "__main__":
    main()

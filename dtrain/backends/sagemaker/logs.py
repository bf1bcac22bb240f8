"""CloudWatch Logs of a training job: group /aws/sagemaker/TrainingJobs, one stream per host.

SageMaker names a host's stream `JOB/algo-N-<unix seconds>`; dtrain's `--rank R` picks host
algo-(R+1), since a SageMaker host is the unit that writes one stream. Parsing is pure; the
paging loop takes the logs client as an argument.

The group appears with the first job that logs in an account and region, a stream once its host
starts: until then CloudWatch answers ResourceNotFoundException, which here means "no lines yet".
"""

from __future__ import annotations

import re
from typing import Iterator

from dtrain.backends.base import LogLine

GROUP = "/aws/sagemaker/TrainingJobs"
_HOST = re.compile(r"/algo-(\d+)(?:-|$)")
MAX_PAGES = 10_000  # a bound on one read; a month-long job's stream is well under it


def host_index(stream: str) -> int | None:
    """'cifar/algo-2-1700000000' -> 1 (the rank dtrain shows)."""
    m = _HOST.search(stream)
    return int(m.group(1)) - 1 if m else None


def to_lines(events: list[dict], rank: int) -> list[LogLine]:
    return [LogLine(rank=rank, time=e["timestamp"] / 1000.0, text=e.get("message", "").rstrip("\n"))
            for e in events]


def _not_yet(err: Exception) -> bool:
    """CloudWatch's answer for a log group or stream that does not exist (yet)."""
    response = getattr(err, "response", None)
    return isinstance(response, dict) and response.get("Error", {}).get("Code") == "ResourceNotFoundException"


def streams(logs, job: str) -> dict[int, str]:
    """rank -> stream name of each host of `job`; none while the group does not exist."""
    out: dict[int, str] = {}
    kw = {"logGroupName": GROUP, "logStreamNamePrefix": f"{job}/"}
    for _ in range(MAX_PAGES):
        try:
            page = logs.describe_log_streams(**kw)
        except Exception as err:  # botocore's ClientError: importable only with the optional boto3
            if _not_yet(err):
                return out
            raise
        for s in page.get("logStreams", []):
            idx = host_index(s["logStreamName"])
            if idx is not None:
                out[idx] = s["logStreamName"]
        if not page.get("nextToken"):
            break
        kw["nextToken"] = page["nextToken"]
    return out


def read_stream(logs, stream: str, *, since: float | None, token: str | None = None) -> tuple[list[dict], str | None]:
    """Every event after `token` (oldest first) and the token to continue from."""
    out: list[dict] = []
    kw: dict = {"logGroupName": GROUP, "logStreamName": stream, "startFromHead": True}
    if since is not None:
        kw["startTime"] = int(since * 1000)
    for _ in range(MAX_PAGES):
        if token:
            kw["nextToken"] = token
        try:
            page = logs.get_log_events(**kw)
        except Exception as err:  # the group or stream went away between listing and reading
            if _not_yet(err):
                return out, token
            raise
        out += page.get("events", [])
        nxt = page.get("nextForwardToken")
        if not nxt or nxt == token:  # the same token back means the end of the stream
            return out, nxt or token
        token = nxt
    return out, token


def merged(batches: dict[int, list[dict]], *, tail: int | None) -> Iterator[LogLine]:
    """Lines of several hosts in time order; the last `tail` of them when asked."""
    lines = sorted((ln for rank, evs in batches.items() for ln in to_lines(evs, rank)),
                   key=lambda ln: (ln.time, ln.rank))
    return iter(lines[-tail:] if tail else lines)

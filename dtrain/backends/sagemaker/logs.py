"""CloudWatch Logs of a training job: group /aws/sagemaker/TrainingJobs, streams per host.

SageMaker names a host's stream `JOB/algo-N-<unix seconds>`, a new one each time the host's
container starts (after a spot interruption, on a retry); dtrain's `--rank R` picks host
algo-(R+1), since a SageMaker host is the unit that writes streams, and reads all of them.
Parsing is pure; the paging loop takes the logs client as an argument.

The group appears with the first job that logs in an account and region, a stream once its host
starts: until then CloudWatch answers ResourceNotFoundException, which here means "no lines yet".
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterator

from dtrain.backends.base import LogLine
from dtrain.backends.sagemaker.clients import aws_call
from dtrain.errors import NotFoundError

GROUP = "/aws/sagemaker/TrainingJobs"
_HOST = re.compile(r"/algo-(\d+)(?:-|$)")
MAX_PAGES = 10_000  # a bound on one read; a month-long job's stream is well under it


@dataclass(frozen=True, kw_only=True)
class Pace:
    """How `logs -f` polls AWS (seconds)."""

    first: float = 1.0  # between CloudWatch reads while new lines arrive
    most: float = 5.0  # the longest wait between reads of quiet streams (doubling from `first`)
    status: float = 20.0  # of waiting between DescribeTrainingJob calls: a status lasts tens of seconds


def host_index(stream: str) -> int | None:
    """'cifar/algo-2-1700000000' -> 1 (the rank dtrain shows)."""
    m = _HOST.search(stream)
    return int(m.group(1)) - 1 if m else None


def to_lines(events: list[dict], rank: int) -> list[LogLine]:
    return [LogLine(rank=rank, time=e["timestamp"] / 1000.0, text=e.get("message", "").rstrip("\n"))
            for e in events]


def _call(what: str, fn, **kw) -> dict | None:
    """One CloudWatch Logs call; None for a log group or stream that does not exist (yet)
    (ResourceNotFoundException). Any other refusal (AccessDeniedException: a policy without
    logs:GetLogEvents, throttling) is a one-line BackendError, as every AWS call's."""
    try:
        return aws_call(what, fn, **kw)
    except NotFoundError:
        return None


def streams(logs, job: str) -> dict[int, list[str]]:
    """rank -> the stream names of host algo-(rank+1), oldest first; none while the group does not exist.
    A host writes a new stream each time its container starts (a spot interruption, a retry), and
    each holds lines the others do not."""
    out: dict[int, list[str]] = {}
    kw = {"logGroupName": GROUP, "logStreamNamePrefix": f"{job}/"}
    for _ in range(MAX_PAGES):
        page = _call("CloudWatch Logs DescribeLogStreams", logs.describe_log_streams, **kw)
        if page is None:
            break
        for s in page.get("logStreams", []):
            idx = host_index(s["logStreamName"])
            if idx is not None and s["logStreamName"] not in out.setdefault(idx, []):
                out[idx].append(s["logStreamName"])
        if not page.get("nextToken"):
            break
        kw["nextToken"] = page["nextToken"]
    return {idx: sorted(names, key=_started) for idx, names in out.items()}


def _started(stream: str) -> tuple[int, str]:
    """'job/algo-1-1700000000' -> (1700000000, name): the container's start, in unix seconds."""
    tail = stream.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else 0, stream)


def read_stream(logs, stream: str, *, since: float | None, token: str | None = None) -> tuple[list[dict], str | None]:
    """Every event after `token` (oldest first) and the token to continue from."""
    out: list[dict] = []
    kw: dict = {"logGroupName": GROUP, "logStreamName": stream, "startFromHead": True}
    if since is not None:
        kw["startTime"] = int(since * 1000)
    for _ in range(MAX_PAGES):
        if token:
            kw["nextToken"] = token
        page = _call(f"CloudWatch Logs GetLogEvents of {stream}", logs.get_log_events, **kw)
        if page is None:  # the group or stream went away between listing and reading
            return out, token
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

"""CloudWatch Logs of a training job: group /aws/sagemaker/TrainingJobs, streams per host.

SageMaker names a host's stream `JOB/algo-N-<unix seconds>`, a new one each time the host's
container starts (after a spot interruption, on a retry), the start in its name: dtrain's `--rank R`
picks host algo-(R+1), since a SageMaker host is the unit that writes streams, and reads its newest
stream, the current attempt's (`--previous`: the one before it), as kubectl shows the current
container's lines; `-f` goes on into a stream the host starts while it follows. After a spot
interruption or a retry, until a host's container starts again its newest stream is the last
attempt's: the current attempt has no lines yet (and `--previous` reads that stream).
Parsing is pure; the paging loop takes the logs client as an argument.

The group appears with the first job that logs in an account and region, a stream once its host
starts: until then CloudWatch answers ResourceNotFoundException, which here means "no lines yet".
"""

from __future__ import annotations

import heapq
import re
from collections import deque
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
    return {idx: sorted(names, key=started) for idx, names in out.items()}


def started(stream: str) -> tuple[int, str]:
    """'job/algo-1-1700000000' -> (1700000000, name): the container's start, in unix seconds."""
    tail = stream.rsplit("-", 1)[-1]
    return (int(tail) if tail.isdigit() else 0, stream)


def current_start(names: list[str], attempt: float | None) -> int:
    """The earliest container start (unix seconds) of a host's current attempt, given its streams (oldest
    first) and when the job's current attempt began (status.attempt_start): its newest stream's start,
    unless that stream is older than the attempt, whose container has then not started yet."""
    newest = started(names[-1])[0] if names else 0
    return max(newest, int(attempt) if attempt is not None else 0)


def read_stream(logs, stream: str, *, since: float | None, tokens: dict[str, str | None]) -> Iterator[dict]:
    """The events after `tokens[stream]` (oldest first), a page at a time as they are taken;
    `tokens[stream]` moves on with each page read, to where the next read goes on."""
    kw: dict = {"logGroupName": GROUP, "logStreamName": stream, "startFromHead": True}
    if since is not None:
        kw["startTime"] = int(since * 1000)
    for _ in range(MAX_PAGES):
        token = tokens.get(stream)
        if token:
            kw["nextToken"] = token
        page = _call(f"CloudWatch Logs GetLogEvents of {stream}", logs.get_log_events, **kw)
        if page is None:  # the group or stream went away between listing and reading
            return
        nxt = page.get("nextForwardToken")
        tokens[stream] = nxt or token
        yield from page.get("events", [])
        if not nxt or nxt == token:  # the same token back means the end of the stream
            return


def host_lines(logs, rank: int, names: list[str], *, since: float | None,
               tokens: dict[str, str | None]) -> Iterator[LogLine]:
    """One host's lines, its streams one after the other (a container's start after the last's)."""
    for stream in names:
        for e in read_stream(logs, stream, since=since, tokens=tokens):
            yield LogLine(rank=rank, time=e["timestamp"] / 1000.0, text=e.get("message", "").rstrip("\n"))


def merged(hosts: list[Iterator[LogLine]], *, tail: int | None) -> Iterator[LogLine]:
    """Lines of several hosts in time order, read a page at a time from each as the merge needs
    them; the last `tail` of them when asked (only those held)."""
    lines = heapq.merge(*hosts, key=lambda ln: (ln.time, ln.rank))
    return lines if tail is None else iter(deque(lines, maxlen=tail))

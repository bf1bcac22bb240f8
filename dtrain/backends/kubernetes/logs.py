"""Pure parsing of pod log lines into dtrain LogLines (which rank wrote what, and when), and which
pods hold a job's lines (none left of an ended job is an error: the cluster kept them with the pods).

A pod's log has one line per write, prefixed by the API with its RFC 3339 time (timestamps=True).
Three shapes of pod:
    one rank per pod                  every line is that rank's
    torchrun packing k ranks (--tee)  '[<global rank>]:text' (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)
    MPI launcher (mpirun --tag-output) '[<jobid>,<rank>]<stdout>:text'
Lines without a prefix (the launcher's own messages) go to the pod's first rank.

The stateful parts of `logs -f`: ReadAhead, what the reader threads of several pods hold for their
caller, bounded; SeenLines, where a pod's stream that ended and is opened again goes on.
"""

from __future__ import annotations

import math
import re
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any

from dtrain.backends.base import JobStatus, LogLine
from dtrain.errors import NotFoundError

from .objects import MPI_JOB
from .status import job_status, newest_pod, parse_time, pod_index, procs_per_pod

_MPI_TAG = re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr)>: ?(.*)$")
_TORCHRUN_TAG = re.compile(r"^\[(\d+)\]:(.*)$")


@dataclass(frozen=True)
class LogSource:
    """One pod whose log holds the lines of some ranks."""

    pod: str
    first_rank: int  # rank of untagged lines
    tags: str | None = None  # None, 'torchrun' or 'mpi'


class ReadAhead:
    """Items that reader threads hand to one consumer, at most `limit` held at once. A reader waits
    for room, so it stops reading its pod's stream and TCP holds the rest back at the API server:
    a caller that stalls (a CLI writing to a slow pipe, a dashboard's stream) costs `limit` lines of
    memory, not the whole log. close() (the caller is gone) drops what is held and lets every
    waiting reader go: put() then answers False and takes nothing."""

    def __init__(self, limit: int) -> None:
        if limit < 1:
            raise ValueError(f"a read-ahead of {limit} items holds nothing: use 1 or more")
        self.limit = limit
        self.waiting = 0  # readers waiting for room now (it was full when they came)
        self._items: deque[Any] = deque()
        self._changed = threading.Condition()
        self._closed = False

    @property
    def held(self) -> int:
        with self._changed:
            return len(self._items)

    def put(self, item: Any) -> bool:
        with self._changed:
            if not self._closed and len(self._items) >= self.limit:
                self.waiting += 1
                self._changed.notify_all()  # for wait_for's watchers
                try:
                    self._changed.wait_for(lambda: self._closed or len(self._items) < self.limit)
                finally:
                    self.waiting -= 1
            if self._closed:
                return False
            self._items.append(item)
            self._changed.notify_all()
            return True

    def get(self) -> Any:
        with self._changed:
            self._changed.wait_for(lambda: self._items)
            item = self._items.popleft()
            self._changed.notify_all()
            return item

    def close(self) -> None:
        with self._changed:
            self._closed = True
            self._items.clear()
            self._changed.notify_all()

    def wait_for(self, predicate, timeout: float | None = None) -> bool:
        """Block until predicate(self) holds (e.g. every reader waits for room); False on timeout."""
        with self._changed:
            return self._changed.wait_for(lambda: predicate(self), timeout)


class SeenLines:
    """The time of the last line a pod's stream gave, and how many lines had that time, so that
    a stream opened again gives only what comes after (its API takes whole seconds: sinceSeconds)."""

    def __init__(self) -> None:
        self.last: float | None = None
        self.at_last = 0  # lines seen with time `last`
        self._skip = 0  # lines with time `last` still to pass over in a stream opened again

    def new(self, raw: str) -> bool:
        when, _ = split_timestamp(raw)
        if when is None or self.last is None or when > self.last:
            if when is not None:
                self.last, self.at_last, self._skip = when, 1, 0
            return True
        if when < self.last:
            return False
        if self._skip:
            self._skip -= 1
            return False
        self.at_last += 1
        return True

    def query(self, query: dict) -> dict:
        """The query of the stream opened again: from a second before the last line seen (none
        seen: the same query, which gave nothing yet)."""
        if self.last is None:
            return query
        self._skip = self.at_last
        again = {k: v for k, v in query.items() if k not in ("tail_lines", "since_seconds")}
        again["since_seconds"] = max(1, math.ceil(time.time() - self.last) + 1)
        return again


def split_timestamp(raw: str) -> tuple[float | None, str]:
    stamp, sep, text = raw.partition(" ")
    if sep and stamp[:1].isdigit() and "T" in stamp:
        try:
            return parse_time(stamp), text
        except ValueError:
            pass
    return None, raw


def parse_line(raw: str, source: LogSource) -> LogLine:
    when, text = split_timestamp(raw)
    rank = source.first_rank
    tag = {"mpi": _MPI_TAG, "torchrun": _TORCHRUN_TAG}.get(source.tags or "")
    if tag is not None:
        m = tag.match(text)
        if m:
            rank, text = int(m.group(1)), m.group(2)
    return LogLine(rank=rank, time=when, text=text)


def keep(line: LogLine, rank: int | None, since: float | None) -> bool:
    if rank is not None and line.rank != rank:
        return False
    return since is None or line.time is None or line.time >= since


def merge(streams: list[list[LogLine]], tail: int | None) -> list[LogLine]:
    """Lines of several pods, oldest first (stable for equal times), then the last `tail` of them."""
    lines = sorted((x for s in streams for x in s), key=lambda x: x.time if x.time is not None else 0.0)
    if tail is not None:
        lines = lines[-tail:] if tail > 0 else []
    return lines


def check_pods_left(name: str, kind: str, obj: dict, pods: list[dict], rank: int | None) -> None:
    """A job without a pod to read: one that has not started has written nothing yet; one that has
    ended lost its logs with its pods (the cluster keeps a container's log only while its pod
    exists), which is an error that names what removed them."""
    status, _ = job_status(kind, obj, pods)
    if not status.terminal:
        return
    which = "its pods are" if rank is None else f"the pod of rank {rank} is"
    policy = ((obj.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy")
    collector = "read them from the cluster's log collector if it has one"
    if status is JobStatus.DELETED:
        raise NotFoundError(f"job {name!r} is being deleted and {which} gone, with the logs: {collector}")
    if policy in ("All", "Running"):
        raise NotFoundError(f"job {name!r} ended ({status}) and its cleanPodPolicy {policy} deleted its pods, "
                            f"with their logs: {collector}, and set 'clean_pod_policy: None' in the kubernetes "
                            f"settings so that later jobs keep theirs")
    raise NotFoundError(f"job {name!r} ended ({status}) and {which} gone, with the logs (a cluster keeps a "
                        f"pod's log only while the pod exists): {collector}")


def log_sources(kind: str, obj: dict, pods: list[dict], rank: int | None) -> list[LogSource]:
    """Which pods hold the wanted ranks' lines, and how their lines are tagged."""
    if kind == MPI_JOB.kind:  # mpirun on the launcher collects every rank's output
        launcher = [p for p in pods if pod_index(kind, obj, p) is None]
        return [LogSource(newest_pod(launcher)["metadata"]["name"], 0, "mpi")] if launcher else []
    per_pod = procs_per_pod(obj)
    by_index: dict[int, list[dict]] = {}
    for pod in pods:
        by_index.setdefault(pod_index(kind, obj, pod), []).append(pod)
    wanted = sorted(i for i in by_index if i is not None) if rank is None else [rank // per_pod]
    sources = []
    for index in wanted:
        if index in by_index:
            pod = newest_pod(by_index[index])
            command = pod["spec"]["containers"][0].get("command") or []
            tags = "torchrun" if "--tee=3" in command else None
            sources.append(LogSource(pod["metadata"]["name"], index * per_pod, tags))
    return sources

"""Pure parsing of pod log lines into dtrain LogLine records (which rank wrote what, and when), and which
pods hold a job's lines (none left of an ended job is an error: the cluster kept them with the pods).

A pod's log has one line per write, prefixed by the API with its RFC 3339 time (timestamps=True).
Three shapes of pod:
    one rank per pod                  every line is that rank's
    torchrun packing k ranks (--tee)  '[<global rank>]:text' (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)
    MPI launcher (mpirun --tag-output) '[<jobid>,<rank>]<stdout>:text'
Lines without a prefix (the launcher's own messages) go to the pod's first rank.

The stateful parts of reading logs: LogLines, a log's bytes cut into lines of bounded length;
ReadAhead, what the reader threads of `logs -f` of several pods hold for their caller, bounded;
SeenLines, where a pod's stream that ended and is opened again goes on.
"""

from __future__ import annotations

import heapq
import math
import re
import tempfile
import threading
import time
from collections import deque
from dataclasses import dataclass, replace
from typing import Any, Callable, Iterable, Iterator

from dtrain.backends.base import JobStatus, LogLine
from dtrain.errors import NotFoundError, StorageError

from .objects import MPI_JOB
from .status import job_status, newest_pod, parse_time, pod_age, pod_index, pod_ranks

_MPI_TAG = re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr)>: ?(.*)$")
_TORCHRUN_TAG = re.compile(r"^\[(\d+)\]:(.*)$")


# Bytes of a log line given at most; a longer one comes in pieces of this size. A progress bar (tqdm)
# writes '\r' and no '\n' for a whole run, one line of many MB; `logs -f` of several pods holds up to
# its read-ahead (1000) of lines, so this bounds that to 64 MB.
MAX_LINE = 1 << 16
SPOOL = 8 << 20  # bytes of a pod's log that `logs` of several pods holds in memory to merge them; the rest: a file


# The rank tag of a packed pod's line (LogSource.tags) as it starts the line's bytes, and what a later
# piece of a cut line repeats of it: MPI's with the one space that parse_line takes off after it, so
# that a piece that starts with a space keeps it.
_PIECE_TAGS = {"torchrun": (re.compile(rb"\[\d+\]:"), b""),
               "mpi": (re.compile(rb"\[\d+,\d+\]<(?:stdout|stderr)>:"), b" ")}


class LogLines:
    """A pod log's bytes, as they arrive, cut into its lines (a newline ends one; a carriage return
    does not: the kubelet splits only at newlines). A line longer than `limit` bytes comes in pieces, so what is held
    stays under `limit` plus a chunk: each piece ends after the last carriage return in it (a progress bar's
    update stays whole) or else at a UTF-8 character's start (no byte is lost to decoding). With
    `stamped` (timestamps=True), each later piece repeats its line's time prefix, so it keeps its
    place when lines are sorted by time and a stream opened again cuts and skips it the same way;
    with `tags` (a packed pod's, LogSource.tags), it repeats the line's rank tag too, so that it is
    given to the rank that wrote it, not to the pod's first."""

    def __init__(self, *, stamped: bool, tags: str | None = None, limit: int = MAX_LINE) -> None:
        self.stamped = stamped
        self.tag = _PIECE_TAGS[tags] if tags is not None else None
        self.limit = limit
        self._buffer = b""
        self._cutting = False  # the line now read was cut: what is left of it is a later piece
        self._prefix = b""  # the time prefix of the line being cut (stamped), which its later pieces repeat

    def feed(self, chunk: bytes) -> list[bytes]:
        buffer, start, out = self._buffer + chunk, 0, []
        while True:
            end = buffer.find(b"\n", start, start + self.limit + 1)
            if end >= 0:
                if end > start or not self._cutting:  # (not the empty rest of a line cut at its end)
                    out.append(self._prefix + buffer[start:end])
                start, self._cutting, self._prefix = end + 1, False, b""
            elif len(buffer) - start > self.limit:
                cut = _cut(buffer, start, start + self.limit)
                piece = buffer[start:cut]
                out.append(self._prefix + piece)
                if not self._cutting:
                    self._prefix = self._repeated(piece)
                start, self._cutting = cut, True
            else:
                break
        self._buffer = buffer[start:]
        return out

    def _repeated(self, first: bytes) -> bytes:
        """What each later piece of the line whose first piece this is starts with."""
        prefix, rest = b"", first
        if self.stamped:
            stamp, space, after = first.partition(b" ")
            if space and stamp[:1].isdigit():
                prefix, rest = stamp + space, after
        if self.tag is not None:
            pattern, then = self.tag
            m = pattern.match(rest)
            if m:
                prefix += m.group(0) + then
        return prefix

    def end(self) -> list[bytes]:
        """The last line, which the stream ended without a newline."""
        rest, prefix = self._buffer, self._prefix
        self._buffer, self._cutting, self._prefix = b"", False, b""
        return [prefix + rest] if rest else []


def _cut(buffer: bytes, start: int, stop: int) -> int:
    """Where a piece of buffer[start:stop] ends: after its last carriage return, else at the start
    of a UTF-8 character."""
    ret = buffer.rfind(b"\r", start, stop)
    if ret > start:
        return ret + 1
    cut = stop
    while cut > stop - 3 and buffer[cut] & 0xC0 == 0x80:  # a UTF-8 continuation byte: back to its lead
        cut -= 1
    return cut if cut > start else stop


@dataclass(frozen=True)
class LogSource:
    """One pod whose log holds the lines of some ranks."""

    pod: str
    first_rank: int  # rank of untagged lines
    tags: str | None = None  # None, 'torchrun' or 'mpi'
    uid: str = ""  # the pod's uid: a pod made again under the same name is another one


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


def merge(streams: list[Iterable[LogLine]], tail: int | None) -> Iterator[LogLine]:
    """Lines of several pods, oldest first (each pod's in its own order; for equal times the
    earlier pod's first), then the last `tail` of them; what is held is `tail` lines at most."""
    lines = heapq.merge(*streams, key=lambda x: x.time if x.time is not None else 0.0)
    return lines if tail is None else iter(deque(lines, maxlen=tail))


def set_aside(lines: Iterable[str]) -> Iterator[str]:
    """Read `lines` to their end now, into memory up to SPOOL bytes and a temporary file past that,
    and give them back from there: the logs of several pods are merged by time, and reading them
    side by side would hold a connection to the API server open per pod for as long as the
    caller takes to print them."""
    spool = tempfile.SpooledTemporaryFile(max_size=SPOOL)
    try:
        for line in lines:
            spool.write(line.encode() + b"\n")
        spool.seek(0)
    except OSError as err:
        spool.close()
        raise StorageError(f"cannot set a pod's log aside in {tempfile.gettempdir()} ({err.strerror or err}): free "
                           f"space there, set TMPDIR to another folder, or read fewer lines (--tail, --rank)") from None
    return _given_back(spool)


def _given_back(spool) -> Iterator[str]:
    with spool:
        for raw in spool:
            yield raw[:-1].decode()


def check_pods_left(name: str, kind: str, obj: dict, pods: list[dict], rank: int | None,
                    cmd: Callable[[str], str] = lambda words: f"dtrain {words}") -> None:
    """A job without a pod to read: one that has not started has written nothing yet; one that has
    ended lost its logs with its pods (the cluster keeps a container's log only while its pod
    exists), which is an error that names what removed them."""
    status, _ = job_status(kind, obj, pods)
    if not status.stopped:
        return
    which = "its pods are" if rank is None else f"the pod of rank {rank} is"
    policy = ((obj.get("spec") or {}).get("runPolicy") or {}).get("cleanPodPolicy")
    collector = "read them from the cluster's log collector if it has one"
    if status is JobStatus.SUSPENDED:
        raise NotFoundError(f"job {name!r} is suspended and {which} gone (a suspension deletes them), with the "
                            f"logs: {collector}; '{cmd(f'resume {name}')}' starts new ones")
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
        return [_source(newest_pod(launcher), 0, "mpi")] if launcher else []
    by_ranks: dict[range, list[dict]] = {}
    for pod in pods:
        by_ranks.setdefault(pod_ranks(kind, obj, pod), []).append(pod)
    sources = []
    for ranks in sorted((r for r in by_ranks if r and (rank is None or rank in r)), key=lambda r: r.start):
        pod = newest_pod(by_ranks[ranks])
        command = pod["spec"]["containers"][0].get("command") or []
        tags = "torchrun" if "--tee=3" in command else None
        sources.append(_source(pod, ranks.start, tags))
    return sources


def _source(pod: dict, first_rank: int, tags: str | None) -> LogSource:
    meta = pod["metadata"]
    return LogSource(meta["name"], first_rank, tags, uid=str(meta.get("uid") or ""))


def next_attempt(kind: str, obj: dict, pods: list[dict], source: LogSource, known: set[str]) -> LogSource | None:
    """The pod that took over `source`'s ranks since the pods of uids `known` were seen, the oldest
    first: a batch Job's next try after a failed pod (restartPolicy Never, up to backoffLimit) is a
    new pod with a new name, and so is a JobSet's; the Training Operator makes an evicted replica
    again under its name. None while there is none."""
    def takes_over(pod: dict) -> bool:  # the launcher runs no rank; a replica's pod runs the ranks the ended one ran
        ranks = pod_ranks(kind, obj, pod)
        return not ranks if source.tags == "mpi" else source.first_rank in ranks

    fresh = [p for p in pods if str(p["metadata"].get("uid") or "") not in known and takes_over(p)]
    if not fresh:
        return None
    meta = min(fresh, key=pod_age)["metadata"]
    return replace(source, pod=meta["name"], uid=str(meta.get("uid") or ""))

"""Pure parsing of pod log lines into dtrain LogLines (which rank wrote what, and when).

A pod's log has one line per write, prefixed by the API with its RFC 3339 time (timestamps=True).
Three shapes of pod:
    one rank per pod                  every line is that rank's
    torchrun packing k ranks (--tee)  '[<global rank>]:text' (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE)
    MPI launcher (mpirun --tag-output) '[<jobid>,<rank>]<stdout>:text'
Lines without a prefix (the launcher's own messages) go to the pod's first rank.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from dtrain.backends.base import LogLine

from .status import parse_time

_MPI_TAG = re.compile(r"^\[\d+,(\d+)\]<(?:stdout|stderr)>: ?(.*)$")
_TORCHRUN_TAG = re.compile(r"^\[(\d+)\]:(.*)$")


@dataclass(frozen=True)
class LogSource:
    """One pod whose log holds the lines of some ranks."""

    pod: str
    first_rank: int  # rank of untagged lines
    tags: str | None = None  # None, 'torchrun' or 'mpi'


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

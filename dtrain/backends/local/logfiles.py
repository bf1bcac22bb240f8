"""A local job's log files (`jobs/NAME/logs/rank-N.log`, one record a line, as rankrun writes
them), read for `dtrain logs`: each rank's last N lines found from the end of its file, the rest
read in blocks, the ranks merged by time.

A training job may log for days: `logs -t 10` must cost a few blocks read backwards and a full
read one block per rank at a time, never the whole file. (Read whole and split, a 90 MB log of a
million lines took 12 s and 500 MB of memory to show its last 3 lines.)
"""

from __future__ import annotations

import heapq
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from dtrain.backends.base import LogLine
from dtrain.backends.local.rankrun import parse_line
from dtrain.backends.local.ranks import rank_of
from dtrain.replace import open_regular

BLOCK = 1 << 20  # bytes read at a time, forwards or backwards
MAX_RECORD = 8 * BLOCK  # rankrun cuts output lines at 1 MiB; a longer "line" (not its writing) is cut here


class LogFiles:
    """The log files of one job (one rank's with `rank`), each read on from where the previous
    read of it stopped, so that `logs -f` prints every line once."""

    def __init__(self, logs_dir: Path, *, rank: int | None, since: float | None,
                 window: dict[int, tuple[int, int | None]] | None = None):
        """`window`: per rank, the part of its file to read, (first offset, offset past the last line
        or None: to the end): one attempt's lines (ranks.log_launches); a rank not named, all of it."""
        self.logs_dir, self.rank, self.since, self.window = logs_dir, rank, since, window or {}
        self.offsets: dict[Path, int] = {}

    def read(self, last: int | None = None) -> Iterator[LogLine]:
        """The complete lines written since the previous read (with `last`: only each rank's
        last `last` of them), oldest first across ranks. A half-written line waits for the next read."""
        files = sorted(self.logs_dir.glob("rank-*.log")) if self.logs_dir.exists() else []
        ranks = [(r, p) for p in files if (r := rank_of(p.name, "log")) is not None]  # not rank-0-old.log
        return heapq.merge(*(self._records(r, p, last) for r, p in ranks if self.rank in (None, r)),
                           key=lambda ln: (ln.time or 0.0, ln.rank))

    def _records(self, rank: int, path: Path, last: int | None) -> Iterator[LogLine]:
        # Bytes, split at "\n" only: a record is one "\n"-ended line (a "\r" inside it is text),
        # and the offset counts what was read, whatever bytes a line holds.
        f = open_regular(path)  # a link or a fifo put there is no rank's log: never followed or waited on
        if f is None:
            return
        with f:
            low, high = self.window.get(rank, (0, None))
            if high is None and low > f.seek(0, os.SEEK_END):
                low = 0  # cut short (by hand) since the attempt began: what it holds now is the attempt's
            start = max(self.offsets.get(path, 0), low)
            end = complete_end(f, start)
            if high is not None:
                end = max(start, min(end, high))
            if last is not None:
                start = max(start, start_of_last(f, end, last))
            if self.since is not None:
                start = first_since(f, start, end, self.since)
            self.offsets[path] = end
            for raw in lines_between(f, start, end):
                when, text = parse_line(raw.decode("utf-8", errors="replace"))
                if self.since is None or (when is not None and when >= self.since):
                    yield LogLine(rank=rank, time=when, text=text)


def complete_end(f: BinaryIO, start: int) -> int:
    """The offset just past the last "\\n" of the file at or after `start` (`start` if none)."""
    pos = f.seek(0, os.SEEK_END)
    while pos > start:
        low = max(start, pos - BLOCK)
        f.seek(low)
        i = f.read(pos - low).rfind(b"\n")
        if i >= 0:
            return low + i + 1
        pos = low
    return start


def start_of_last(f: BinaryIO, end: int, n: int) -> int:
    """The offset where the last `n` lines before `end` (just past a "\\n") begin, found by reading
    backwards: just past the n-th "\\n" before the one that ends the last line (0 if there are fewer)."""
    if n <= 0:
        return end
    pos, found = end - 1, 0
    while pos > 0:
        low = max(0, pos - BLOCK)
        f.seek(low)
        block = f.read(pos - low)
        i = len(block)
        while (i := block.rfind(b"\n", 0, i)) >= 0:
            found += 1
            if found == n:
                return low + i + 1
        pos = low
    return 0


CLOCK_SLACK_S = 300.0  # a line this much older than --since still bounds the search (a clock set back)


def first_since(f: BinaryIO, start: int, end: int, since: float) -> int:
    """A line start at or after `start` before which no line between `start` and `end` is newer
    than `since`: found by bisecting on the times the lines begin with (rankrun writes them in
    order), so `logs --since 10m` of a long log reads a few blocks, not the whole file. A line
    counts as older only when it is CLOCK_SLACK_S older, so a clock set back a little loses no
    line; a line without a time stops the search where it is (the caller's filter still applies)."""
    lo, hi = start, end
    while hi - lo > BLOCK:
        mid = line_start_after(f, (lo + hi) // 2, hi)
        if mid >= hi:
            break
        f.seek(mid)
        when, _ = parse_line(f.read(STAMP_READ).split(b"\n", 1)[0].decode("utf-8", errors="replace"))
        if when is None:
            break
        if when < since - CLOCK_SLACK_S:
            lo = mid
        else:
            hi = mid
    return lo


STAMP_READ = 64  # bytes enough for a line's time and the character after it
PROBE = 4096  # bytes first read to find where the next line starts


def line_start_after(f: BinaryIO, pos: int, end: int) -> int:
    """The offset just past the first "\\n" at or after `pos - 1` and before `end` (`end` if none)."""
    pos, size = max(pos - 1, 0), PROBE
    while pos < end:
        f.seek(pos)
        block = f.read(min(size, end - pos))
        i = block.find(b"\n")
        if i >= 0:
            return pos + i + 1
        pos += len(block) or end
        size = min(size * 2, BLOCK)  # a log line is short; a long one costs a few more reads
    return end


def lines_between(f: BinaryIO, start: int, end: int) -> Iterator[bytes]:
    """The lines (without their "\\n") between `start` and `end`, read a block at a time."""
    f.seek(start)
    left, rest = end - start, b""
    while left > 0:
        chunk = f.read(min(BLOCK, left))
        if not chunk:  # the file was cut short meanwhile
            return
        left -= len(chunk)
        *lines, rest = (rest + chunk).split(b"\n")
        yield from lines
        if len(rest) > MAX_RECORD:  # memory stays bounded whatever the file holds
            yield rest
            rest = b""

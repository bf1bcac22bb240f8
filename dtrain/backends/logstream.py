"""`logs`' answer: the lines of one call, with that call's notices, cut at --limit-bytes."""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Iterator

from dtrain.backends.records import LogLine, Notice
from dtrain.errors import SpecError
from dtrain.names import check_limit_bytes, check_rank, check_since, check_tail, counted, switched


class LogStream:
    """The lines of one `logs` call, an iterator, with that call's `notices`, known while it is read:
    why lines may be missing (a restarted host not started yet, a resumed job followed before it runs
    again). A `_logs` hook yields a :class:`Notice` among its lines; it is kept here, and logged at once
    (`dtrain: warning: ...` on stderr, as a follower may wait long for the next line), not yielded."""

    def __init__(self, items: Iterator[LogLine | Notice], limit_bytes: int | None = None, *, job: str | None = None):
        self._items = items
        self.job = job  # whose lines: what its repr names
        self._notices: list[Notice] = []
        lines = self._lines()
        self._out = lines if limit_bytes is None else _at_most(lines, limit_bytes)

    @property
    def notices(self) -> tuple[Notice, ...]:
        return tuple(self._notices)

    def _lines(self) -> Iterator[LogLine]:
        try:
            for item in self._items:
                if isinstance(item, Notice):
                    self._notices.append(item)
                    logging.getLogger(__name__).warning("dtrain: warning: %s", item.message)
                else:
                    yield item
        finally:
            close = getattr(self._items, "close", None)
            if close is not None:  # a generator's files are closed now, not when it is collected
                close()

    def __repr__(self) -> str:
        # what a notebook cell shows for client.logs(name): what it is and how to read it, not an address
        whose = f" of job {self.job!r}" if self.job else ""
        return (f"<LogStream{whose}: an iterator of LogLine(rank, time, text), read with list() or a for loop; "
                f"{counted(len(self._notices), 'notice')} so far>")

    def __iter__(self) -> LogStream:
        return self

    def __next__(self) -> LogLine:
        return next(self._out)

    def close(self) -> None:
        self._out.close()


def _at_most(lines: Iterator[LogLine], limit: int) -> Iterator[LogLine]:
    """`lines` up to `limit` bytes (text and newline, UTF-8); the line that passes it cut to fit, at a
    character's end; nothing is read past it (a follower is not left waiting for a line it drops)."""
    left = limit
    for line in lines:
        size = len(line.text.encode("utf-8", "surrogateescape")) + 1
        if size <= left:
            yield line
            left -= size
            if left:
                continue
        else:
            cut = line.text.encode("utf-8", "surrogateescape")[:left - 1].decode("utf-8", "ignore")
            if cut:
                yield dataclasses.replace(line, text=cut)
        close = getattr(lines, "close", None)
        if close is not None:  # a generator's files are closed now, not when it is collected
            close()
        return


def check_logs_args(*, rank, tail, since, follow, previous, limit_bytes, door: str = "sdk") -> int | None:
    """`logs`' arguments checked as every backend checks them, before the job is read; returns the
    rank as the plain number the backend is given (a refusal names it as typed: --rank 1E3). `door`:
    whose words the refusals name them in (the SDK's rank=, tail=, previous=True; the CLI's flags)."""
    if limit_bytes is not None:
        check_limit_bytes(limit_bytes, door)
    if rank is not None:  # the job's own last rank is checked once it is read
        rank = check_rank(rank, door)
    if tail is not None:
        check_tail(tail, door)
    if since is not None:  # refused before the job is read, as the HTTP query is
        check_since(since)
    if not isinstance(previous, bool) or not isinstance(follow, bool):
        raise SpecError(f"invalid previous {previous!r} or follow {follow!r}: use "
                        f"{'True or False' if door == 'sdk' else 'true or false'}")
    if previous and follow:  # the SDK's caller reads the lines it is given, the CLI's sees them printed
        raise SpecError(f"{switched('previous', door)} cannot be followed: the previous attempt has ended; drop "
                        f"{switched('follow', door)} to {'read' if door == 'sdk' else 'print'} its lines, or drop "
                        f"{switched('previous', door)} to follow the current attempt")
    return rank

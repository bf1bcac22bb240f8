"""A job's training curves: the metrics file its MetricsWriter keeps in the job's folder.

The local backend reports the folder as `JobInfo.extra['job_dir']` and points the job at
`<folder>/metrics.jsonl` with DTRAIN_METRICS_FILE; other backends have no folder here, and
their jobs show no curves.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any, BinaryIO, Iterator

from dtrain.replace import open_regular

METRICS_FILE = "metrics.jsonl"
TAIL_BYTES = 64 * 1024  # /metrics reads only the end of the file: the newest values
CURVE_BYTES = 32 * 1024 * 1024  # a curve reads at most this much of the file's end (20,000 records take ~4 MiB)
BLOCK = 256 * 1024
MAX_LINE = 1024 * 1024  # a longer line is no training record: skipped, never held whole
UNREADABLE = (ValueError, RecursionError)  # json.loads: not JSON; nested deeper than Python recurses


def metrics_path(info) -> Path | None:
    folder = info.extra.get("job_dir")
    if not folder:
        return None
    path = Path(folder) / METRICS_FILE
    return path if path.is_file() and not path.is_symlink() else None


def _open(info) -> BinaryIO | None:
    """The job's metrics file, opened only when it is a regular file: never through a symbolic
    link, and never a fifo put at its name (an open of one would wait for a writer for ever)."""
    path = metrics_path(info)
    return None if path is None else open_regular(path)


def _lines_backwards(f: BinaryIO, budget: int) -> Iterator[bytes]:
    """The file's lines, newest first, read from its end in blocks until `budget` bytes are read.

    The dashboard asks for a curve every few seconds: a job that logs every step for days
    writes hundreds of MiB, which were read and parsed whole each time."""
    pos = f.seek(0, os.SEEK_END)
    stop = max(0, pos - budget)
    partial = b""  # the later part of the line that the blocks read so far begin inside
    skipping = False  # that line grew past MAX_LINE: its earlier part is skipped too
    while pos > stop:
        step = min(BLOCK, pos - stop)
        pos -= step
        f.seek(pos)
        lines = (f.read(step) + partial).split(b"\n")
        partial = lines[0]
        for i, line in enumerate(reversed(lines[1:])):
            if i == 0 and skipping:
                skipping = False
                continue
            yield line
        if len(partial) > MAX_LINE:
            partial, skipping = b"", True
    if pos == 0 and not skipping:
        yield partial  # the file's first line (a line cut by the budget is not yielded)


def _record(line: bytes) -> dict[str, Any] | None:
    try:
        record = json.loads(line.decode("utf-8", errors="replace"))
    except UNREADABLE:
        return None
    return record if isinstance(record, dict) else None


def curve(info, *, last: int) -> list[dict[str, Any]]:
    """The last `last` records, oldest first. Lines that are not JSON objects (a torn last line
    of a killed job) are skipped: a chart shows what can be read. (Not dtrain.training's
    read_metrics: importing dtrain.training would load torch into the server.)"""
    f = _open(info)
    if f is None:
        return []
    out: list[dict[str, Any]] = []
    with f:
        for line in _lines_backwards(f, CURVE_BYTES):
            record = _record(line)
            if record is not None:
                out.append(record)
                if len(out) == last:
                    break
    out.reverse()
    return out


def latest(info, keys: tuple[str, ...]) -> dict[str, float]:
    """The newest numeric value of each key, read from the end of the file (bounded work per scrape)."""
    f = _open(info)
    if f is None:
        return {}
    found: dict[str, float] = {}
    with f, contextlib.suppress(OSError):  # a read error: a scrape shows what was read, never fails
        for line in _lines_backwards(f, TAIL_BYTES):
            record = _record(line)
            if record is None:
                continue
            for k in keys:
                v = record.get(k)
                if k not in found and isinstance(v, (int, float)) and not isinstance(v, bool):
                    found[k] = float(v)
            if len(found) == len(keys):
                break
    return found

"""A job's training curves: the metrics file its MetricsWriter keeps in the job's folder.

The local backend reports the folder as `JobInfo.extra['job_dir']` and points the job at
`<folder>/metrics.jsonl` with DTRAIN_METRICS_FILE; other backends have no folder here, and
their jobs show no curves.
"""

from __future__ import annotations

import json
from collections import deque
from pathlib import Path
from typing import Any


METRICS_FILE = "metrics.jsonl"
TAIL_BYTES = 64 * 1024  # /metrics reads only the end of the file: the newest values


def metrics_path(info) -> Path | None:
    folder = info.extra.get("job_dir")
    if not folder:
        return None
    path = Path(folder) / METRICS_FILE
    return path if path.is_file() and not path.is_symlink() else None


def curve(info, *, last: int) -> list[dict[str, Any]]:
    """The last `last` records, oldest first. Lines that are not JSON objects (a torn last line
    of a killed job) are skipped: a chart shows what can be read. (Not dtrain.training's
    read_metrics: importing dtrain.training would load torch into the server.)"""
    path = metrics_path(info)
    if path is None:
        return []
    out: deque[dict[str, Any]] = deque(maxlen=last)
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            try:
                record = json.loads(line)
            except ValueError:
                continue
            if isinstance(record, dict):
                out.append(record)
    return list(out)


def latest(info, keys: tuple[str, ...]) -> dict[str, float]:
    """The newest numeric value of each key, read from the end of the file (bounded work per scrape)."""
    path = metrics_path(info)
    if path is None:
        return {}
    try:
        with open(path, "rb") as f:
            size = f.seek(0, 2)
            f.seek(max(0, size - TAIL_BYTES))
            lines = f.read().decode("utf-8", errors="replace").splitlines()
    except OSError:
        return {}
    if size > TAIL_BYTES:
        lines = lines[1:]  # the first line was cut by the seek
    found: dict[str, float] = {}
    for line in reversed(lines):
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            for k in keys:
                v = record.get(k)
                if k not in found and isinstance(v, (int, float)) and not isinstance(v, bool):
                    found[k] = float(v)
        if len(found) == len(keys):
            break
    return found

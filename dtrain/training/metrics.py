"""Per-step metrics as JSON lines, one object per line.

Every line carries 'time' (seconds since the epoch) next to the caller's
fields, and is flushed at once so a platform tailing the file sees progress
while the job runs. Only rank 0 should enable a writer: the other ranks make a
disabled one and call it the same way.

Under dtrain, `DTRAIN_METRICS_FILE` names a second copy in the job's own folder (the
platform cannot know where a workload puts its outputs); the dashboard and the server's
/metrics read that copy. Without the variable (plain torchrun) nothing changes.
"""

from __future__ import annotations

import errno
import json
import math
import os
import time
from pathlib import Path
from typing import Any

from dtrain.errors import SpecError


def _plain(value: Any) -> Any:
    # Tensors and numpy scalars arrive from training loops; JSON wants Python numbers.
    if hasattr(value, "item") and getattr(value, "ndim", 0) == 0:
        return value.item()
    if hasattr(value, "tolist"):
        return value.tolist()
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    raise TypeError(type(value).__name__)


def open_append(path: Path, *, fix: str):
    """`path` opened to append text, never through a symbolic link left at its name (it could point
    anywhere: the run would write into a file it never made); SpecError `PATH is a symbolic link: FIX`."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:
            raise SpecError(f"{path} is a symbolic link: {fix}") from None
        raise
    return open(fd, "a", encoding="utf-8")


# The fix where the platform's copy (DTRAIN_METRICS_FILE) cannot be opened: it is the job's folder's, which no
# folder of the run's changes
MIRROR_FIX = "submit the job under another home (dtrain's --home or $DTRAIN_HOME; a job's folder is HOME/jobs/NAME)"


def _append(path: Path, *, mirror: bool = False):
    # a link at the platform's copy was sent to another folder of the run's, which changes nothing there
    return open_append(path, fix=f"remove it, or {MIRROR_FIX}" if mirror else
                       "remove it, or write the run to another folder (metrics go to a file of its own)")


class MetricsWriter:
    def __init__(self, path: str | os.PathLike | None, *, enabled: bool = True) -> None:
        self.path = Path(path) if path is not None else None
        self.enabled = enabled and path is not None
        self._f = None
        self._mirror = None
        if self.enabled:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._f = _append(self.path)
            mirror = os.environ.get("DTRAIN_METRICS_FILE")
            if mirror and Path(mirror).resolve() != self.path.resolve():
                try:
                    self._mirror = _append(Path(mirror), mirror=True)
                except BaseException:
                    self._f.close()
                    raise

    def log(self, **fields: Any) -> None:
        """Append one line with `fields` plus 'time'; NaN and inf become null."""
        if not self.enabled:
            return
        if self._f is None:
            raise SpecError(f"metrics file {self.path} is closed; log before close()")
        record = {"time": time.time(), **fields}
        try:
            line = json.dumps(record, default=_plain, allow_nan=False)
        except ValueError:  # NaN/inf: strict JSON readers reject them, so write null
            record = {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in record.items()}
            line = json.dumps(record, default=_plain)
        except TypeError as e:
            raise SpecError(f"metric value of type {e} is not JSON-serialisable; log numbers or strings") from None
        for f in (self._f, self._mirror):
            if f is not None:
                f.write(line + "\n")
                f.flush()

    @property
    def file(self):
        """The open metrics file; None when disabled or closed (a workload locks it: one run writes it)."""
        return self._f

    def close(self) -> None:
        for f in (self._f, self._mirror):
            if f is not None:
                f.close()
        self._f = self._mirror = None

    def __enter__(self) -> MetricsWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """Every record of a metrics file, skipping a torn last line from a killed job."""
    lines = Path(path).read_text(encoding="utf-8").splitlines()
    out = []
    for i, line in enumerate(lines):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise
    return out

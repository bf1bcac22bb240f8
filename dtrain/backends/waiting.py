"""The two loops of `dtrain.backends.base.Backend` that wait: one for a status (`wait`,
`wait_snapshot`, `wait_volume`), one for a call that is not ready yet (`exec`, `notebook_url`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from dtrain.backends.records import JobInfo, JobStatus
from dtrain.errors import DtrainError, NotReadyError, TimeoutError_, UnavailableError
from dtrain.names import wait_longer

# Seconds in a row `wait` asks a backend again that does not answer: an API server's restart or a
# rollout of its load balancer takes a minute or two; a cluster down for longer is reported.
WAIT_OUTAGE = 300.0


def _while_not_ready(attempt: Callable[[], Any], *, wait: float, pause: float):
    """`attempt()`, asked again every `pause` seconds while it raises NotReadyError (a notebook's
    Jupyter starting, a job's rank being launched), for up to `wait` seconds; then its last
    NotReadyError. `exec` and `notebook_url` use it; `_until` is the loop that polls a status."""
    deadline = time.monotonic() + wait
    while True:
        try:
            return attempt()
        except NotReadyError:
            if time.monotonic() >= deadline:
                raise
        time.sleep(max(0.0, min(pause, deadline - time.monotonic())))


def _until(info, read: Callable[[], Any], done: Callable[[Any], bool], late: Callable[[Any], DtrainError], *,
           timeout: float | None, poll: Callable[[], float]):
    """The one loop that waits for a status (`wait`, `wait_snapshot`): `read` until `done` says yes, `late`'s
    error once `timeout` seconds have passed. A read the backend does not answer (UnavailableError)
    is asked again, for up to WAIT_OUTAGE seconds in a row: an API server that sheds load (429),
    restarts (5xx) or drops a connection for a while must not end an hours-long wait (a pipeline
    step's). A pause never runs past the timeout."""
    deadline = None if timeout is None else time.monotonic() + timeout
    outage: float | None = None  # since when the backend has not answered a read
    while True:
        if done(info):
            return info
        if deadline is not None and time.monotonic() >= deadline:
            raise late(info)
        pause = poll()
        time.sleep(pause if deadline is None else max(0.0, min(pause, deadline - time.monotonic())))
        try:
            info = read()
            outage = None
        except UnavailableError:
            outage = time.monotonic() if outage is None else outage
            if time.monotonic() - outage >= WAIT_OUTAGE:
                raise


def late_wait(name: str, info: JobInfo, timeout: float | None, command: Callable[[str], str] | None,
              door: str = "sdk") -> DtrainError:
    """`wait`'s timeout, naming where to look further (see `Backend.wait`), and the timeout as `door` takes it."""
    words = f"describe job {name}" if info.status is JobStatus.PENDING else f"logs {name}"
    if info.status is JobStatus.SUSPENDED:  # it ends only once someone resumes it: say so, not its logs
        words = f"resume {name}"
        look = command(words) if command else f"dtrain {words}"
        return TimeoutError_(f"job {name!r} is still Suspended after {timeout:g}s: it ends only once "
                             f"resumed ('{look}')", look)
    look = command(words) if command else f"dtrain {words}"
    return TimeoutError_(f"job {name!r} is still {info.status} after {timeout:g}s; "
                         f"wait longer ({wait_longer(door)}) or check '{look}'", look)

"""Which run of a job a snapshot holds: a job name submitted again after a purge is another job
(another uid), and a snapshot the earlier one left is marked `earlier_run`; one whose job is deleted
(purged, or Deleted) and not submitted again is marked `job_deleted`."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable

from dtrain.backends.records import JobInfo, JobStatus, SnapshotInfo
from dtrain.errors import NotFoundError


def mark_earlier_runs(snaps: list[SnapshotInfo],
                      job_uids: Callable[[set[str]], dict[str, str | None]]) -> list[SnapshotInfo]:
    """`snaps`, marked from one read of the jobs they name (`job_uids`: the jobs now so named and not
    Deleted, each name to its uid or None where unknown; only those jobs are read, each once, not every
    job): `earlier_run` where the job now so named has another uid than the one the snapshot recorded (it
    was purged and submitted again), `job_deleted` where no job has the name now (deleted or purged and
    not submitted again, as `describe` marks a deleted snapshot or volume). Where the uid of either side
    is unknown, which run it holds is unknown: not marked an earlier run."""
    names = {s.job for s in snaps if s.job is not None}
    current = job_uids(names) if names else {}
    marked = []
    for s in snaps:
        if s.job is not None and s.job not in current:
            s = dataclasses.replace(s, job_deleted=True)
        elif s.job is not None and s.job_uid and current[s.job] not in (None, s.job_uid):
            s = dataclasses.replace(s, earlier_run=True)
        marked.append(s)
    return marked


def job_uids_one_by_one(get: Callable[[str], JobInfo], names: Iterable[str]) -> dict[str, str | None]:
    """The jobs now named `names` and not Deleted, each name to its uid (None where unknown); a name no
    job has is left out. Each read once with `get`."""
    uids = {}
    for name in names:
        with contextlib.suppress(NotFoundError):
            info = get(name)
            if info.status is not JobStatus.DELETED:
                uids[name] = info.uid
    return uids

"""Which run of a job a snapshot holds: a job name submitted again after a purge is another job
(another uid), and a snapshot the earlier one left is marked `earlier_run`; one whose job is deleted
(purged, or Deleted) and not submitted again is marked `job_deleted`."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable

from dtrain.backends.records import JobInfo, SnapshotInfo
from dtrain.errors import DtrainError, NotFoundError


def mark_earlier_runs(snaps: list[SnapshotInfo], job_uids: Callable[[set[str]], dict[str, str]]) -> list[SnapshotInfo]:
    """`snaps`, those an earlier job of their job's name left (their job_uid is not the uid of the
    job now so named: it was purged and submitted again) marked `earlier_run`. Only the jobs the
    snapshots name are read, each once (`job_uids`), not every job. Where no job has the name now,
    or its uid is unknown, or a snapshot recorded none, which run it holds is unknown: as it is."""
    names = {s.job for s in snaps if s.job is not None and s.job_uid}
    current = job_uids(names) if names else {}
    return [dataclasses.replace(s, earlier_run=True) if current.get(s.job) not in (None, s.job_uid) else s
            for s in snaps]


def mark_deleted_jobs(snaps: list[SnapshotInfo], live: Callable[[], Iterable[str]]) -> list[SnapshotInfo]:
    """`snaps`, those whose job is no longer among `live()` (the names of the jobs not Deleted) marked
    `job_deleted`, as `describe` marks a deleted snapshot or volume; an earlier run's stays marked as that.
    Where the names cannot be read (DtrainError, OSError), as they are."""
    if not any(s.job is not None and not s.earlier_run for s in snaps):
        return snaps
    try:
        names = set(live())
    except (DtrainError, OSError):
        return snaps
    return [dataclasses.replace(s, job_deleted=True) if s.job is not None and not s.earlier_run and s.job not in names
            else s for s in snaps]


def job_uids_one_by_one(get: Callable[[str], JobInfo], names: Iterable[str]) -> dict[str, str]:
    """The uids of the jobs now named `names`, by name; a name no job has, or one whose uid is
    unknown, is left out. Each read once with `get`."""
    uids = {}
    for name in names:
        with contextlib.suppress(NotFoundError):
            if (uid := get(name).uid) is not None:
                uids[name] = uid
    return uids

"""A local job read back: its record (JobInfo) from its row and its ranks' records, and its logs
(LocalBackend's mixin)."""

from __future__ import annotations

import functools
import json
import time
from typing import TYPE_CHECKING, Iterator

from dtrain.backends.base import DataSource, Event, JobInfo, JobStatus, LogLine, Notice, ProcessInfo
from dtrain.backends.local.reconcile import _supervisor
from dtrain.backends.local.store import ACTIVE
from dtrain.errors import NotFoundError
from dtrain.names import counted
from dtrain.spec import JobSpec

if TYPE_CHECKING:
    from dtrain.backends.local import cgroups


class JobRecords:
    """LocalBackend's `_info` (a row -> JobInfo) and `_logs`."""

    def _info(self, row) -> JobInfo:
        from dtrain.backends.local.scheduler import split_devices
        from dtrain.backends.local.ranks import TERMINATING, rank_records, still_stopping

        spec = JobSpec.from_stored(json.loads(row["spec"]))
        status = JobStatus(row["status"])
        records = {r["rank"]: r for r in rank_records(self.home / "jobs" / spec.name)}
        events = self.store.events(spec.name)
        suspended = max((e["time"] for e in events if e["status"] == "Suspended"), default=None)
        devices = self.store.job_devices(spec.name)
        # after its end (or a suspension) the devices are released: each rank shows those it ran on
        ran_on = devices or (self.store.recorded(row, "ran_on") or [] if status != JobStatus.PENDING else [])
        groups = split_devices(ran_on, spec.processes, spec.gpu) if ran_on else []
        node = row["node"] if row["started"] is not None else None  # a job never placed ran on no node
        procs = []
        for rank in range(spec.processes):
            # A Pending job runs nothing: what a resumed job's ranks recorded is of the run it stopped
            rec = records.get(rank, {}) if status != JobStatus.PENDING else {}
            pstatus = rec.get("status", "Pending")
            if status != JobStatus.RUNNING and still_stopping(records.get(rank, {})):
                # preempted (Pending again), suspended or deleted, its process not yet exited: a
                # pod Terminating; Pending (or Stopped) once it has
                pstatus = TERMINATING
            elif status.terminal and pstatus in ("Pending", "Running"):
                pstatus = "Stopped" if status == JobStatus.DELETED else ("Failed" if pstatus == "Running" else pstatus)
            elif status == JobStatus.DELETED and _ended_by(rec, row["finished"]):
                pstatus = "Stopped"  # its exit (143: SIGTERM) was `dtrain delete`'s doing, not a failure
            elif status == JobStatus.SUSPENDED and (pstatus in ("Pending", "Running") or _ended_by(rec, suspended)):
                pstatus = "Stopped"  # as for a deletion: the suspension ended it
            procs.append(ProcessInfo(rank=rank, status=pstatus, exit_code=rec.get("exit_code"),
                                     devices=tuple(groups[rank]) if groups else (), node=node,
                                     pod=f"{spec.name}-{rank}"))  # Run:AI's short form: `--pod NAME-R` is rank R
        # A running job's launched ranks: one that has ended counts until the job's end (or its restart) is
        # recorded, so the columns add up to its processes and never read '0 (0)' while it is Running
        running = sum(p.status != "Pending" for p in procs) if status == JobStatus.RUNNING else 0
        pending = sum(p.status == "Pending" for p in procs) if status.value in ACTIVE else 0
        events = tuple(Event(time=e["time"], status=e["status"], message=e["message"]) for e in events)
        sources = self._data_sources(self.store.recorded(row, "data_sources") or [])
        # its --snapshot-on-success snapshot was deleted since (`snapshot delete`)
        gone = bool(row["snapshot"]) and not self.storage.has_job_snapshot(row["snapshot"], spec.name, row["created"],
                                                                           self.store.uid(row))
        return JobInfo(name=spec.name, spec=spec, status=status, backend=self.name, created=row["created"],
                       uid=self.store.uid(row),
                       started=row["started"], finished=row["finished"], node=node,
                       gpus_allocated=len(devices), processes_running=running, processes_pending=pending,
                       processes=tuple(procs), events=events, restarts=max([row["restarts"]] + [
                           r.get("restart", 0) for r in records.values()]),
                       message=row["message"], snapshot=row["snapshot"], snapshot_deleted=gone, data_sources=sources,
                       extra={"limits": _limits_note(spec), "cwd": row["cwd"],
                              "job_dir": str(self.home / "jobs" / spec.name),
                              # its snapshot's source (a job of before recorded no other), else its first volume's
                              "source_snapshot": row["source_snapshot"] or next(
                                  (s.snapshot for s in sources), None),
                              "exit_code": row["exit_code"],
                              "snapshot_deleted": gone})  # JobInfo.snapshot_deleted's copy: for one release

    def _data_sources(self, recorded: list[dict]) -> tuple[DataSource, ...]:
        """The snapshots a job's volumes held when it started, as its supervisor recorded them, each
        said deleted where that snapshot or volume (by uid: a name may be reused) is gone now."""
        if not recorded:
            return ()
        volumes, snapshots = self.storage.still_there([r["volume_uid"] for r in recorded],
                                                      [r["snapshot_uid"] for r in recorded])
        return tuple(DataSource(volume=r["volume"], snapshot=r["snapshot"],
                                snapshot_deleted=r["snapshot_uid"] not in snapshots,
                                volume_deleted=r["volume_uid"] not in volumes) for r in recorded)

    def _logs(self, name, *, rank, tail, since, follow, previous=False) -> Iterator[LogLine | Notice]:
        from collections import deque

        from dtrain.backends.local.logfiles import LogFiles
        from dtrain.backends.local.ranks import log_launches

        job_dir = self.home / "jobs" / name
        # Every attempt appends to the same rank-N.log; the supervisor records where each launch began
        launches = log_launches(job_dir)
        if previous:
            row = self.store.job(name)
            if len(launches) < 2:
                raise NotFoundError(_no_previous(name, row["restarts"], launches,
                                                 self.cmd(f"logs {name}", row["project"])))
            low, high = launches[-2]["starts"], launches[-1]["starts"]
            # a rank whose log was not there when the latest attempt began wrote nothing before it
            window = {r: (low.get(r, 0), high.get(r, 0))
                      for r in range(JobSpec.from_stored(json.loads(row["spec"])).processes)}
        else:
            if follow and self._relaunching(name, launches):
                # Resumed (or preempted and queued again): its last run has ended, or is ending, and the next has
                # not begun. Followed, the current attempt is the one to come, as kubectl -f follows the container
                # that runs: a follower got the ended run's lines first, then the new run's, every line of the run
                # before shown again. A read without -f still gives the last run's lines (why it stopped).
                yield Notice(code="logs-incomplete", message=(  # said at once (logs() logs it): -f may wait
                    f"job {name!r} is Pending again ({self.store.job(name)['message'] or 'queued'}): following its "
                    f"next run, which has not started; '{self._job_cmd(f'logs {name}', name)}' shows the last run's lines"))
                launches = self._next_launch(name, launches)
                if launches is None:  # stopped (suspended, deleted) before it ran again: nothing to follow
                    return
            window = {r: (o, None) for r, o in launches[-1]["starts"].items()} if launches else {}
        files = LogFiles(job_dir / "logs", rank=rank, since=since, window=window)
        # the last `tail` lines of the job are among the last `tail` of each rank
        yield from files.read() if tail is None else deque(files.read(last=tail), maxlen=tail)
        while follow:
            # Ended once nothing runs and its supervisor has exited: a suspended job is recorded
            # Suspended before its supervisor is signalled, and its ranks' checkpoint lines come after.
            row = self._reconcile(self.store.job(name))
            sup = _supervisor(row)
            done = JobStatus(row["status"]).stopped and (sup is None or not sup.alive())
            yield from files.read()
            if done:
                return
            time.sleep(0.2)

    def _relaunching(self, name: str, launches: list[dict]) -> bool:
        """Pending again after its last launch began (resumed, or preempted): that run has ended, or
        is ending, and the next one has not started."""
        if not launches or self.store.status(name) != "Pending":
            return False
        began = launches[-1].get("time") or 0.0
        return any(e["status"] == "Pending" and e["time"] > began for e in self.store.events(name))

    def _next_launch(self, name: str, launches: list[dict]) -> list[dict] | None:
        """Wait until a launch after `launches[-1]` is recorded: the launches then; None once the job
        has stopped without one."""
        from dtrain.backends.local.ranks import log_launches

        job_dir, last = self.home / "jobs" / name, launches[-1]
        while True:
            now = log_launches(job_dir)
            if now and (now[-1]["attempt"], now[-1]["time"]) != (last["attempt"], last["time"]):
                return now
            row = self._reconcile(self.store.job(name))
            if JobStatus(row["status"]).stopped:
                return None
            time.sleep(0.2)


@functools.cache
def _cgroup_support() -> cgroups.Support:
    from dtrain.backends.local import cgroups

    return cgroups.support()


def _limits_note(spec: JobSpec) -> str | None:
    """What --memory/--cpu mean here: enforced through cgroups, or only advisory (and why)."""
    if spec.memory is None and spec.cpu is None:
        return None
    found = _cgroup_support()
    asked = ", ".join(x for x in (f"memory {spec.memory}" if spec.memory else "",
                                  f"cpu {spec.cpu:g}" if spec.cpu is not None else "") if x)
    if found.enforced:
        return f"{asked} per process, enforced ({found.detail})"
    return f"{asked} per process, {found.detail}"


def _ended_by(rec: dict, deleted: float | None) -> bool:
    """Whether a rank's record says it ended once its job was deleted (`finished` is then the
    deletion's time, recorded before any process is signalled): stopped, not failed or done."""
    ended = rec.get("finished")
    return isinstance(ended, (int, float)) and deleted is not None and ended >= deleted


def _no_previous(name: str, restarts: int, launches: list[dict], logs: str) -> str:
    """Why `logs --previous` has nothing to show, as kubectl's "previous terminated container not found"."""
    if restarts and not launches:  # restarted before dtrain recorded where attempts begin
        return (f"job {name!r} restarted {counted(restarts, 'time')}, but where its attempts' lines begin was not "
                f"recorded (it ran under an older dtrain): '{logs}' shows every attempt's lines")
    return (f"job {name!r} has no previous attempt (previous terminated container not found): it has not "
            f"restarted; '{logs}' shows its current attempt")

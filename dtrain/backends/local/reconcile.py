"""A job whose supervisor died while nobody watched: found by the next command that reads it, and
relaunched (restarts left), queued again or Failed, never left Running (LocalBackend's mixin)."""

from __future__ import annotations

import json
import os
import sqlite3
import time
from pathlib import Path

from dtrain import db
from dtrain.backends.local.store import ACTIVE, SNAPSHOTTING
from dtrain.errors import SetupError
from dtrain.spec import JobSpec

LOST_AFTER_S = 60.0  # a Pending job whose supervisor never registered is lost after this
# A queued job whose supervisor was lost (killed, the machine restarted) gets a new one without
# spending a restart: it had not started. Bounded, as a supervisor that dies at every start
# would otherwise be started again by every command (and every waiting supervisor) for good.
QUEUED_RELAUNCHES = 5
REQUEUED = "nothing had started: a new supervisor keeps its place in the queue"
# ...or it had run, was preempted, and its processes were stopping (it still held its GPUs)
REQUEUED_PREEMPTED = "it was preempted and stopping: a new supervisor stops what is left and keeps its place in the queue"


class Reconciling:
    """LocalBackend's reconciling of lost supervisors (`_reconcile`, `reconcile_others`)."""

    def _reconcile(self, row):
        """A job whose supervisor died while nobody watched is relaunched (restarts left) or Failed, never Running.

        The command that notices first claims the job (a compare-and-set recording itself as the
        job's supervisor, see ranks.supervisor_token) before it stops anything: a command that read
        the job before another one relaunched it would otherwise stop the new attempt's ranks as
        leftovers of the lost one."""
        if row["status"] not in ACTIVE:
            return row
        from dtrain.backends.local.ranks import (disk_full, full_disk_advice, full_disk_signs, kill_ranks, own_causes,
                                                 parse_ident, supervisor_token)
        from dtrain.procs import Ident

        sup = parse_ident(row["supervisor_pid"], row["supervisor_start"])
        if sup is None:
            if time.time() - row["created"] < LOST_AFTER_S:
                return row
            reason = "its supervisor never started"
        elif sup.alive():
            return row
        elif full := disk_full(self.home):  # it died writing there (fail_for_room could record nothing)
            reason = f"its supervisor (pid {sup.pid}) is gone: most likely a write it needed failed, as {full}"
        elif signs := full_disk_signs(self.home / "jobs" / row["name"]):  # freed since: what it left says so
            reason = (f"its supervisor (pid {sup.pid}) is gone: most likely a write it needed failed on the home "
                      f"disk, full then ({signs})")
        else:
            reason = f"its supervisor (pid {sup.pid}) is gone: killed, or the machine restarted"
        name = row["name"]
        job_dir = self.home / "jobs" / name
        why, reason = reason, reason + own_causes(job_dir)
        old = (row["supervisor_pid"], row["supervisor_start"])
        me = Ident.of(os.getpid())
        claim = (me.pid, supervisor_token(me, claim=True))
        # A full (or read-only) disk, as when the job filled it, refuses the record: the job is shown
        # for what it is, and recorded by the first command that can write (`list` must still show it).
        room = (full_disk_advice(self.home, lambda job: self.cmd(f"delete {job} --purge", row["project"]))
                if sup is not None and disk_full(self.home) else "free space there")
        unrecorded = {**dict(row), "status": "Failed", "finished": time.time(),
                      # one sentence: the disk's advice said once, at its end (the rank's own left out)
                      "message": f"lost: {why}{own_causes(job_dir, fix='')}; this is not recorded yet, as the disk "
                                 f"holding $DTRAIN_HOME is full or read-only: {room}"}
        try:
            claimed = self.store.replace_supervisor(name, old=old, pid=claim[0], token=claim[1])
        except sqlite3.OperationalError as err:
            if not db.disk_refused(err):
                raise
            return unrecorded
        if not claimed:
            return self.store.job(name)  # another command got there first (or the job ended)
        try:
            kill_ranks(job_dir)  # only processes whose recorded identity still matches
            spec = JobSpec.from_stored(json.loads(row["spec"]))
            last = self.store.events(name)[-1:]
            if not job_dir.is_dir():  # a supervisor started there would have nowhere to write
                self.store.set_status(name, "Failed", f"lost: its folder {job_dir} was removed while it was "
                                      f"{row['status'].lower()}; submit it again")
            elif last and last[0]["message"].startswith(SNAPSHOTTING):  # trained: never run it again
                self._snapshot_lost(name, last[0]["message"][len(SNAPSHOTTING):], since=last[0]["time"],
                                    reason=reason)
            elif sup is not None and row["status"] == "Running" and (done := _all_exited_0(job_dir, spec)):
                # lost after its ranks ended well, before it recorded so (killed; a full or locked
                # database refused the write): the job is done, never trained again nor Failed
                if spec.snapshot_volume:
                    self._snapshot_lost(name, spec.snapshot_volume, since=min(r["finished"] for r in done),
                                        reason=reason)
                else:
                    self.store.set_status(name, "Succeeded", "all processes exited 0" + "".join(
                        f"; rank {r['rank']}'s log is incomplete: {r['log_error']}" for r in done
                        if r.get("log_error")) + f"; its supervisor (pid {sup.pid}) was lost before it recorded this "
                        f"(killed, the machine restarted, or the database could not be written then)", exit_code=0)
            elif sup is not None and row["status"] == "Pending" and self._queued_relaunches(name) < QUEUED_RELAUNCHES:
                # Nothing of it ran: a new supervisor takes its place in the queue, and no restart is spent
                try:
                    self._start_supervisor(name, replacing=claim, message=f"lost: {reason}; " + (
                        REQUEUED_PREEMPTED if self.store.job_devices(name) else REQUEUED))
                except SetupError:
                    pass  # the job is Failed, saying why: what listed it goes on
            elif sup is not None and row["restarts"] < spec.max_restarts:
                restart = row["restarts"] + 1
                try:
                    self._start_supervisor(name, restarts=restart, replacing=claim,
                                           message=f"lost: {reason}; relaunching every rank from the last "
                                                   f"checkpoint (restart {restart} of {spec.max_restarts})")
                except SetupError:
                    pass  # the job is Failed, saying why: what listed it goes on
            elif spec.notebook:  # `dtrain notebook` takes no --max-restarts: say what starts it again
                self.store.set_status(name, "Failed", f"lost: {reason}; start it again: "
                                      f"'{self.cmd(f'delete {name}', spec.project)}' (its files are kept), "
                                      f"then '{self.cmd(f'notebook {name} ...', spec.project)}'")
            else:
                self.store.set_status(name, "Failed", f"lost: {reason}" + (
                    f"; no restarts left (--max-restarts {spec.max_restarts})" if sup is not None else ""))
        except BaseException as err:  # give the job back as it was: the next command tries again
            refused = isinstance(err, sqlite3.OperationalError) and db.disk_refused(err)
            try:
                self.store.replace_supervisor(name, old=claim, pid=old[0], token=old[1])
            except sqlite3.OperationalError as again:
                if not (refused and db.disk_refused(again)):
                    raise
            if refused:
                return unrecorded
            raise
        return self.store.job(name)

    def _snapshot_lost(self, name: str, volume: str, *, since: float, reason: str) -> None:
        """The supervisor died after every rank exited 0, while snapshotting for --snapshot-on-success:
        the job is Succeeded if that snapshot was registered, else Failed saying how to take it."""
        snaps = [s for s in self.storage.list_snapshots(volume=volume, job=name)
                 if s.created >= int(since)]  # a snapshot's time is kept to the second
        if snaps:
            self.store.set_status(name, "Succeeded", f"all processes exited 0; snapshot {snaps[-1].name} (its "
                                  f"supervisor was lost after taking it)", exit_code=0, snapshot=snaps[-1].name)
            return
        self.store.set_status(name, "Failed", f"lost: {reason}, after every process exited 0, while taking the "
                              f"snapshot of volume {volume}: the results are on the volume; take it with "
                              f"'{self._job_cmd(f'snapshot create {volume} --job {name}', name)}'", exit_code=0)

    def _queued_relaunches(self, name: str) -> int:
        return sum(e["status"] == "Pending" and e["message"].endswith((REQUEUED, REQUEUED_PREEMPTED)) for e in self.store.events(name))

    def reconcile_others(self, name: str | None) -> None:
        """What `list` does, for every active job but `name` (None: every one): one whose supervisor
        died is relaunched or Failed, releasing its devices. A page and a summary call it before
        they count; a supervisor waiting for its turn calls it now and then:
        a lost job ahead of it in the queue, or holding the devices it waits for, would otherwise
        block it until somebody ran a command."""
        for row in self.store.active_jobs():
            if row["name"] != name:
                self._reconcile(row)
        self._release_stopped()

    def _release_stopped(self) -> None:
        """A deleted or suspended job holds its devices until its processes are gone: its stop (the
        `delete` or `suspend` command, or its supervisor) releases them. One whose stop was cut
        short (both killed) is released here, once its supervisor is gone, after its leftovers."""
        from dtrain.backends.local.ranks import kill_ranks

        for row in self.store.held_by_stopped():
            sup = _supervisor(row)
            if sup is None or not sup.alive():
                kill_ranks(self.home / "jobs" / row["name"])
                try:
                    self.store.release(row["name"])
                except sqlite3.OperationalError as err:  # a full or read-only disk: a later command does it
                    if not db.disk_refused(err):
                        raise


def _supervisor(row):
    """The Ident of the supervisor a job's row records, or None: none recorded, or a claim (a
    command relaunching the job, whose relaunch is refused once the job has moved on)."""
    from dtrain.backends.local.ranks import is_claim, parse_ident

    if is_claim(row["supervisor_start"]):
        return None
    return parse_ident(row["supervisor_pid"], row["supervisor_start"])


def _all_exited_0(job_dir: Path, spec: JobSpec) -> list[dict]:
    """The rank records of the job's last attempt when every one of its processes exited 0 (none
    missing), else []: what a supervisor lost before recording the job's success left behind."""
    from dtrain.backends.local.ranks import rank_records

    records = rank_records(job_dir)
    if len(records) != spec.processes or any(r.get("exit_code") != 0 for r in records):
        return []
    if any(not isinstance(r.get("finished"), (int, float)) for r in records):
        return []
    return records

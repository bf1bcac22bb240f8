"""How a supervised job ends (Supervisor's mixin): why an attempt failed, in words; whether a
restart could help (not on a full disk, nor past a log refused); the job's last record, its
snapshot taken first where asked; and the guarded writes of that record, retried while another
process holds the database locked and once more on a full disk with the home's reserve given up.
"""

from __future__ import annotations

import contextlib
import signal
import sys
import time

from dtrain import db
from dtrain.backends.local.ranks import (describe_exit, disk_full, failing_rank, own_causes, rank_records,
                                         room_advice)
from dtrain.backends.local.store import SNAPSHOTTING, JobStore

FINAL_WRITE_S = 600.0  # how long the job's last status is retried while another process holds the database
PORT_TRIES = 3  # a notebook whose port another program took before Jupyter bound it: Jupyter again, on a new port


class JobOutcome:
    """Supervisor's failure words and last records (the attributes it reads are Supervisor's)."""

    def _hopeless(self) -> bool:
        """A log the attempt refused to write through (a link at its name) is refused again by every
        restart: the job fails now, saying so, instead of after its restarts and their backoff.
        A full disk likewise: a rank stopped because its log could not be written, or a home disk still
        full when the attempt ended, would meet it again (Kubernetes evicts such a pod, saying so)."""
        return (self.refused is not None or disk_full(self.home) is not None
                or any(r.get("log_refused") or r.get("log_error") for r in rank_records(self.job_dir)))

    def _room_fix(self) -> str | None:
        """'the disk holding HOME is full (60 KiB free): free space there (df -h HOME), e.g. ...' while it
        is, naming what to delete; else None."""
        full = disk_full(self.home, given_up=db.RESERVE_BYTES if self.reserve_given else 0)
        return None if full is None else f"{full}: {self._room_advice()}"

    def _room_advice(self) -> str:
        """'free space there (df -h HOME); the largest job logs ..., then submit the job again'."""
        return room_advice(self.home, self.spec.project)

    def _full_disk(self) -> str:
        """'; ' + _room_fix() while the home disk is full; else ''."""
        fix = self._room_fix()
        return f"; {fix}" if fix else ""

    def _recorded(self, write, *, what: str):
        """`write()` of a record the job cannot do without (how it ended): retried while another process
        holds the database locked (written_when_unlocked), and once more on a full disk with the home's
        reserve given up (db.room_to_free, as a delete does), so that the job ends saying why instead of
        reading "lost" at the next command. A `write` that words the disk's free space measures it when
        called (`_room_fix`): after the reserve is given up, the figure says that room is in it."""
        def once():
            return written_when_unlocked(write, what=what, give_up_s=FINAL_WRITE_S, stopping=lambda: self.stopping)
        try:
            return once()
        except Exception as err:
            if not db.no_room(err):
                raise
        with db.room_to_free(self.home) as given_up:
            self.reserve_given = self.reserve_given or given_up
            return once()

    def fail_for_room(self, err: BaseException) -> int:
        """A write the supervisor needed was refused by a full disk (ENOSPC, EDQUOT, SQLite's "disk is
        full"): the job fails saying so where that can still be recorded; else one line in supervisor.log,
        and the next command's `lost` names the full disk (LocalBackend._reconcile)."""
        why = f"{err.strerror} ({err.filename})" if isinstance(err, OSError) and err.filename else str(err)

        def message() -> str:  # when written: its free space is measured after the reserve is given up
            full = self._full_disk() or f"; the disk holding {self.home} refused it: {self._room_advice()}"
            return f"the supervisor could not write what it needs: {why}{full}{own_causes(self.job_dir)}"
        try:
            self._recorded(lambda: self.store.set_status(self.name, "Failed", message()), what=f"job {self.name}'s end")
        except Exception as again:  # noqa: BLE001 - nothing more can be recorded: the reader words it
            with contextlib.suppress(OSError):
                print(f"supervisor of job {self.name}: {message()} (not recorded: {again})", file=sys.stderr, flush=True)
        return 1

    def _source_snapshot(self) -> str | None:
        """The snapshot the volume --snapshot-on-success snapshots held when the job started (its
        snapshot records it as its source), from what was recorded then; None where there is none."""
        sources = JobStore.recorded(self.store.job(self.name), "data_sources") or []
        return next((s["snapshot"] for s in sources if s["volume"] == self.spec.snapshot_volume), None)

    def _finish(self, code: int, source: str | None) -> None:
        """Record how the job ended (taking its snapshot first where asked). The record is retried
        while another process holds the database past its busy timeout: given up, the job would
        read "lost" at the next command, without its exit code or snapshot."""
        def set_status(name, status, message, **kw):  # a callable message: worded when written (_recorded)
            return self._recorded(lambda: self.store.set_status(name, status, message() if callable(message)
                                                                else message, **kw), what=f"job {self.name}'s end")
        if self.stopping:
            return  # dtrain delete already recorded Deleted
        if self.refused is not None:
            set_status(self.name, "Failed", lambda: self.refused + self._full_disk(), exit_code=code)
            return
        if code != 0:
            first = failing_rank(rank_records(self.job_dir))
            set_status(self.name, "Failed", lambda: self._failure_message(code, fix=self._room_fix()),
                       exit_code=first["exit_code"] if first else code)
            return
        volume = self.spec.snapshot_volume
        lost = [r for r in rank_records(self.job_dir) if r.get("log_error")]  # exited 0 before the stop came
        if volume is None:
            set_status(self.name, "Succeeded", "all processes exited 0" + "".join(
                f"; rank {r['rank']}'s log is incomplete: {r['log_error']}" for r in lost), exit_code=0)
            return
        if (why := self._copy_logs(volume)) is not None:  # before SNAPSHOTTING: that event must stay the last
            self._recorded(lambda: self.store.add_event(self.name, "Running", why), what=f"job {self.name}'s events")
        self._recorded(lambda: self.store.add_event(self.name, "Running", SNAPSHOTTING + volume),
                       what=f"job {self.name}'s snapshot")  # the lost supervisor's last word
        try:
            snap = self.storage.create_snapshot(volume, job=self.name, job_spec=self.spec.to_dict(),
                                                source_snapshot=source, job_uid=self.uid)
        except Exception as err:  # the training result stays on the volume; say how to snapshot it
            set_status(self.name, "Failed", f"training succeeded but the snapshot of volume {volume} "
                       f"failed: {err}; take it with '{self.cmd(f'snapshot create {volume} --job {self.name}')}'",
                       exit_code=0)
            return
        set_status(self.name, "Succeeded", f"all processes exited 0; snapshot {snap.name}",
                   exit_code=0, snapshot=snap.name, source_snapshot=source)

    def _copy_logs(self, volume: str) -> str | None:
        """The job's logs copied into `volume` (.dtrain/logs/<job>/), so that its snapshot holds data,
        model and logs together; else one line saying why not. Nothing here fails the job or stops
        the snapshot: a full disk, a link in the way, any error is said and the snapshot taken."""
        from dtrain.backends.local.joblogs import LogsNotCopied, copy_job_logs, logs_path
        try:
            copy_job_logs(self.job_dir, self.storage.get_volume(volume).path, self.name)
        except LogsNotCopied as err:
            reason = str(err)
        except Exception as err:  # noqa: BLE001 - the logs are a bonus; the snapshot is what was asked
            reason = f"{type(err).__name__}: {err}"
        else:
            return None
        return (f"the job's logs were not copied into volume {volume} ({logs_path(self.name)}): {reason}; "
                f"the snapshot is taken without them")

    def _failure_message(self, code: int, fix: str | None = None) -> str:
        """Why the attempt failed; `fix` (a full disk's, `_room_fix`) said where it belongs."""
        first = failing_rank(rank_records(self.job_dir))
        if fix is not None and first is not None and first.get("log_error") and self.port_taken is None:
            rank = first["rank"]
            return f"{describe_exit(first, fix)}; see '{self.cmd(f'logs {self.name} --rank {rank}')}'"
        if fix and self.unrestarted:  # a failure of its own: the disk is why the restarts asked for were not tried
            return (f"{self._why_failed(code)}; not restarted ({self.unrestarted} of --max-restarts "
                    f"{self.spec.max_restarts} left), as a restart would meet the full disk: {fix}")
        return self._why_failed(code) + (f"; {fix}" if fix else "")

    def _why_failed(self, code: int) -> str:
        if self.port_taken is not None:
            return (f"Jupyter could not listen on 127.0.0.1:{self.port_taken}: another program took that port "
                    f"({PORT_TRIES} ports tried); see '{self.cmd(f'logs {self.name}')}'")
        first = failing_rank(rank_records(self.job_dir))
        if code in (-signal.SIGKILL, 128 + signal.SIGKILL) and self.spec.launcher != "none" and \
                (first is None or first.get("signal") == "SIGTERM"):
            # torchrun or mpirun killed (the OOM killer, kill -9; bwrap says 137): its ranks got
            # SIGTERM because it died, so the launcher, not a rank, is what to look at
            launcher = "torchrun" if self.spec.launcher == "torchrun" else "mpirun"
            return (f"the launcher ({launcher}) was killed by SIGKILL, and its ranks were stopped with it; see "
                    f"{self.job_dir / 'launcher.log'}")
        if first is not None and first.get("log_refused"):  # it has no log to see
            return describe_exit(first)
        if first is not None:
            rank = first["rank"]
            return f"{describe_exit(first)}; see '{self.cmd(f'logs {self.name} --rank {rank}')}'"
        return f"the launcher exited with code {code}; see {self.job_dir / 'launcher.log'}"


def written_when_unlocked(write, *, what: str, give_up_s: float, stopping=lambda: False, wait_s: float = 5.0):
    """`write()`, again every `wait_s` while it fails because another process holds the database
    locked past the busy timeout (said on stderr: supervisor.log), for at most `give_up_s`."""
    deadline = time.monotonic() + give_up_s
    while True:
        try:
            return write()
        except Exception as err:
            locked = db.lock_refused(err)
            if locked is None or stopping() or time.monotonic() + wait_s > deadline:
                raise
            print(f"could not record {what} yet: {locked}; trying again in {wait_s:g} s", file=sys.stderr, flush=True)
            time.sleep(wait_s)

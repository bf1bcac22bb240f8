"""The verbs that act on a local job's processes: delete, suspend, resume, exec (LocalBackend's mixin)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import time
from pathlib import Path

from dtrain import db
from dtrain.backends.base import JobInfo, Notice
from dtrain.backends.local.reconcile import _supervisor
from dtrain.backends.local.store import ACTIVE, QUEUED, UNFINISHED, injected_at_submit, injected_word
from dtrain.errors import ConflictError, NotReadyError, SetupError, StorageError
from dtrain.spec import JobSpec
from dtrain.names import shown


class JobControl:
    """LocalBackend's `_delete`, `_suspend`, `_resume` and `_exec`."""

    def _delete(self, name: str) -> JobInfo:
        from dtrain.backends.local.ranks import kill_ranks

        row = self.store.job(name)
        was_active = row["status"] in ACTIVE
        try:  # refused if already Deleted; its devices are held until its processes are gone
            self.store.set_status(name, "Deleted", "deleted by the user", hold=True)
        except sqlite3.OperationalError as err:
            # A full or read-only disk must not keep a runaway job (one filling that disk) running:
            # its processes are stopped all the same, and the record waits for a retry.
            if not was_active or not db.disk_refused(err):
                raise
            unrecorded = err
        else:
            unrecorded = None
        if was_active:
            self._stop(name, row)
        else:  # a suspended (or ended) job's leftovers, if any
            kill_ranks(self.home / "jobs" / name)
        if unrecorded is None:  # else it is still recorded as it was, and holds its devices
            self.store.release(name)
        if unrecorded is not None:
            raise StorageError(f"job {name!r} was stopped, but its deletion could not be recorded: the state "
                               f"database could not be written ({unrecorded}): the disk holding $DTRAIN_HOME is "
                               f"probably full or read-only; free space there (df -h) and run "
                               f"'{self._job_cmd(f'delete {name}', name)}' again")
        return self._get(name)

    def _suspend(self, name: str) -> JobInfo:
        """As `_delete`, but the job reads Suspended and `dtrain resume` queues it again: the status
        is recorded first (the supervisor, finding it, records nothing after the stop), then its
        supervisor gets SIGTERM and passes it on; its devices are free once its processes are gone
        (they may still use them while they write their checkpoint)."""
        row = self.store.job(name)
        again = ("(its kernels ended; its files are kept)" if json.loads(row["spec"]).get("notebook")
                 else "from its last checkpoint")  # a notebook has no checkpoint to go on from
        if not self.store.set_status(name, "Suspended", f"suspended by the user; "
                                                        f"'{self.cmd(f'resume {name}', row['project'])}' starts it "
                                                        f"again {again}", hold=True):
            raise ConflictError(f"job {name!r} is {self.store.status(name)}: only a Pending or Running job can "
                                f"be suspended")
        self._stop(name, row)
        self.store.release(name)
        return self._get(name)

    def _stopping_wait(self, name: str) -> float:
        """As long as `_resume` waits for a last supervisor still stopping its ranks (`_exited`)."""
        from dtrain.backends.local.ranks import GRACE_S, parse_ident

        row = self.store.job(name)
        sup = parse_ident(row["supervisor_pid"], row["supervisor_start"])
        return GRACE_S + 5 if sup is not None and sup.alive() else 0.0

    def _resume(self, name: str) -> JobInfo:
        """Suspended -> Pending with a new supervisor, which waits for devices as a new job's does;
        the restarts spent so far stay spent. The last supervisor may still be stopping its ranks (an
        idle notebook's suspends itself): waited for as `delete` waits, then refused."""
        from dtrain.backends.local.ranks import kill_ranks, parse_ident, supervisor_token
        from dtrain.procs import Ident

        row = self.store.job(name)
        sup = parse_ident(row["supervisor_pid"], row["supervisor_start"])
        if sup is not None and not _exited(sup):
            raise ConflictError(f"job {name!r} is still stopping (its supervisor, pid {sup.pid}, has not exited): "
                                f"run '{self.cmd(f'resume {name}', row['project'])}' again in a minute")
        spec = JobSpec.from_stored(json.loads(row["spec"]))
        self._check_resources(spec, volumes=False,  # a quota may have been lowered since
                              injected=injected_at_submit(row))
        for mount in spec.resolved_volumes():  # and a volume deleted (--force) or lost: say so now
            self._check_existing(mount, spec.project)
        me = Ident.of(os.getpid())
        claim = (me.pid, supervisor_token(me, claim=True))  # ours until the new supervisor records itself
        self.store.resume(name, "resumed by the user; " + QUEUED, claim=claim, release=False)
        # A rank its killed supervisor left (its stop cut short) must not run beside the next run's,
        # nor keep using the devices it held once they go to another job. Killed only by the resume
        # that queued the job, before its supervisor starts: a second resume at once (refused just
        # above) killed first, and so the ranks the winner's new supervisor had started meanwhile.
        kill_ranks(self.home / "jobs" / name)
        self.store.release_preempted(name)
        self._start_supervisor(name, replacing=claim)
        return self._get(name)

    def _serving_notices(self) -> list[Notice]:
        """The GPU jobs that may run again (Pending, Running, Suspended) submitted with another
        DTRAIN_GPUS than this process has: a server started so cannot resume them, and a supervisor
        it restarts for one queued sees another inventory. One line, naming them and the setting to
        start it with (the most jobs'; the others' named beside theirs)."""
        now = os.environ.get("DTRAIN_GPUS")
        by_setting: dict[str | None, list[str]] = {}
        for row in self.store.jobs_in(UNFINISHED):
            known, recorded = injected_at_submit(row)  # a job submitted without it counts too; one of before never
            if known and recorded != now and JobSpec.from_stored(json.loads(row["spec"])).gpus_requested:
                by_setting.setdefault(recorded, []).append(row["name"])
        if not by_setting:
            return []
        groups = sorted(by_setting.items(), key=lambda kv: -len(kv[1]))  # stable: the first submitted's first

        def jobs(names: list[str]) -> str:
            return f"job {names[0]}" if len(names) == 1 else f"jobs {', '.join(names)}"

        (first, names), *others = groups
        said = (f"{jobs(names)} {'was' if len(names) == 1 else 'were'} submitted with {injected_word(first)}"
                + "".join(f" and {jobs(n)} with {injected_word(v)}" for v, n in others))
        them = "them" if sum(map(len, by_setting.values())) > 1 else "it"
        return [Notice(code="gpus-injected",
                       message=f"{said}, but this server has {injected_word(now)}: it cannot schedule or resume "
                               f"{them} on the GPUs {them} {'were' if them == 'them' else 'was'} submitted with; "
                               f"stop it and start it as " + ("'env -u DTRAIN_GPUS dtrain server'"
                                                               if first is None else f"'DTRAIN_GPUS={first} dtrain server'"))]

    def _stop(self, name: str, row) -> None:
        """Stop what runs of a job whose new status (Deleted, Suspended) is recorded: SIGTERM to its
        supervisor, which passes it on (the workloads checkpoint and exit), SIGKILL after the grace
        period, then whatever rank is left. `row` is the job as it was before."""
        from dtrain.backends.local.ranks import kill_ranks
        from dtrain.procs import signal_process

        sup = _supervisor(row)
        if signal_process(sup, signal.SIGTERM) and not _exited(sup):
            signal_process(sup, signal.SIGKILL)
        kill_ranks(self.home / "jobs" / name)

    def _exec(self, name: str, command: list[str], *, rank: int) -> int:
        """nsenter into the rank's mount namespace (bubblewrap's, when the job has volumes), in
        its working folder, with its environment read from /proc."""
        import subprocess

        from dtrain.backends.local.ranks import rank_records
        from dtrain.procs import Ident

        rec = {r.get("rank"): r for r in rank_records(self.home / "jobs" / name)}.get(rank)
        if rec is None:  # the job reads Running once its first rank is; this one is still being launched
            raise NotReadyError(f"rank {rank} of job {name!r} has not started yet (its process is being "
                                f"launched): try again in a moment; see "
                                f"'{self._job_cmd(f'describe job {name}', name)}'")
        ident = Ident.from_record(rec)
        pid = ident.pid if ident is not None else None
        env = _environ(pid) if ident is not None and ident.alive() and rec.get("exit_code") is None else None
        # The record's pid is trusted only while that process still carries this job's rank.
        if env is None or env.get("DTRAIN_JOB_NAME") != name or env.get("RANK") != str(rank):
            raise ConflictError(f"rank {rank} of job {name!r} is not running now; "
                                f"see '{self._job_cmd(f'describe job {name}', name)}'")
        nsenter = shutil.which("nsenter")
        if nsenter is None:
            raise SetupError("dtrain exec needs nsenter (Debian package util-linux)")
        argv = [nsenter, "--target", str(pid), "--mount", "--wd"]
        if os.stat(f"/proc/{pid}/ns/user").st_ino != os.stat("/proc/self/ns/user").st_ino:
            argv += ["--user", "--preserve-credentials"]  # bubblewrap run without root: a user namespace
        # A command the rank's namespace lacks is said in dtrain's words, not nsenter's ("nsenter: failed
        # to execute x"): a shell there looks it up as the rank would, then becomes the command (exec).
        missing = (f"dtrain: error: command {shown(command[0])} not found in rank {rank} of job {name!r} (looked in "
                   + ("its PATH" if "/" not in command[0] else "the folders it sees")
                   + "); check the spelling after '--'")
        return subprocess.run([*argv, "--", "/bin/sh", "-c", _FOUND_OR_SAY, missing, *command], env=env).returncode


# $0: the line to print where $1 is no command there; else the shell is replaced by the command
_FOUND_OR_SAY = 'command -v "$1" >/dev/null 2>&1 || { printf "%s\\n" "$0" >&2; exit 127; }; exec "$@"'


def _exited(sup) -> bool:
    """Wait for a supervisor (an Ident) to exit, as long as it may take to stop its ranks (the grace
    period, and a little); whether it did."""
    from dtrain.backends.local.ranks import GRACE_S

    deadline = time.monotonic() + GRACE_S + 5  # LocalBackend._stopping_wait says so
    while sup.alive() and time.monotonic() < deadline:
        time.sleep(0.1)
    return not sup.alive()


def _environ(pid: int) -> dict[str, str] | None:
    try:
        raw = Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return None
    return dict(item.split("=", 1) for item in raw.decode("utf-8", "replace").split("\0") if "=" in item)

"""The local backend's job state in SQLite: jobs, their events, projects and device allocations.

Every CLI process and every job supervisor opens the same `$DTRAIN_HOME/state.db`; writes that
read-check-write (submit, allocate, finish) run in one `BEGIN IMMEDIATE` transaction.

This module owns a job's status: every change goes through `JobStore.move` (directly or via
`set_status`), checked against `TRANSITIONS`. The scheduler calls `move` inside its allocation
transaction, the supervisor and the backend call `set_status`; nobody else writes the column.
"""

from __future__ import annotations

import json
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Callable

from dtrain import db
from dtrain.errors import ConflictError, NotFoundError
from dtrain.names import require_project, shown, volume_maker
from dtrain.spec import JobSpec

SCHEMA = """
CREATE TABLE IF NOT EXISTS jobs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    name TEXT NOT NULL UNIQUE,
    project TEXT NOT NULL,
    spec TEXT NOT NULL,
    status TEXT NOT NULL,
    created REAL NOT NULL,
    started REAL,
    finished REAL,
    cwd TEXT NOT NULL,
    node TEXT,
    supervisor_pid INTEGER,
    supervisor_start TEXT,
    restarts INTEGER NOT NULL DEFAULT 0,
    message TEXT NOT NULL DEFAULT '',
    snapshot TEXT,
    source_snapshot TEXT,
    exit_code INTEGER,
    data_sources TEXT,
    ran_on TEXT,
    last_started REAL
);
CREATE TABLE IF NOT EXISTS job_events (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    job TEXT NOT NULL,
    time REAL NOT NULL,
    status TEXT NOT NULL,
    message TEXT NOT NULL DEFAULT ''
);
CREATE INDEX IF NOT EXISTS job_events_job ON job_events(job);
CREATE TABLE IF NOT EXISTS allocations (
    device TEXT PRIMARY KEY,
    job TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS core_pins (
    core INTEGER PRIMARY KEY,
    job TEXT NOT NULL
);
CREATE TABLE IF NOT EXISTS projects (
    name TEXT PRIMARY KEY,
    gpu_quota INTEGER,
    created REAL NOT NULL
);
"""

# What is read often while the history grows: a page of the newest jobs (the dashboard, every 2 s),
# the jobs in a status (those that may run: every check a queued supervisor makes), the counts by
# project and status (a Prometheus scrape). Without them each read the whole table: 20-50 ms with
# 100,000 jobs, against 0.1 ms for a page (docs/benchmarks.md).
INDEXES = """
CREATE INDEX IF NOT EXISTS jobs_by_created ON jobs(created, name);
CREATE INDEX IF NOT EXISTS jobs_by_status ON jobs(status, created, name);
CREATE INDEX IF NOT EXISTS jobs_by_project ON jobs(project, status, created, name);
"""

# Columns added after the first release, to a `jobs` table of before: `data_sources` (JSON: the
# snapshots the job's volumes held when it started, recorded by its supervisor), `ran_on` (JSON:
# the devices its latest start was given, which `describe` shows once they are released),
# `last_started` (when the scheduler last started it: `started` keeps the first start; the most
# recently started job is preempted first), `uid` (unique per submit, as a Kubernetes object's
# metadata.uid: a name submitted again after `delete --purge` is a new job, and the snapshots the
# earlier one left are told apart by it; a job of before has none: unknown), `gpus_injected` (the
# DTRAIN_GPUS its submit ran with, as typed: a server or resume started without it sees another
# inventory, and its refusal names the one to start it with; JSON null where it ran without one,
# SQL NULL where nothing was recorded: a job of before, unknown).
ADDED_COLUMNS = {"data_sources": "TEXT", "ran_on": "TEXT", "last_started": "REAL", "uid": "TEXT",
                 "gpus_injected": "TEXT"}

ACTIVE = ("Pending", "Running")
# A new job's message until its supervisor first asks the scheduler (then "waiting: <why>" or
# "started on ..."): `describe` right after `submit` says what is happening, not "-".
QUEUED = "queued: waiting for the scheduler to place it"
SNAPSHOTTING = "taking a snapshot of volume "  # the event before --snapshot-on-success's snapshot: + volume
RUN_EVENT_BEFORE_S = 0.001  # how long before the event that ended a run one of its late-seen events goes
FINAL = ("Succeeded", "Failed", "Deleted")  # `finished` is set and the devices are released

# The allowed status changes, written once. A finished job only becomes Deleted (by `dtrain
# delete`); Deleted is final: submitting the name again replaces the row (insert_job). A refused
# change is not an error: it is how a supervisor that finishes after `dtrain delete` loses the race.
# A job moves to its own status on a relaunch: Running -> Running when the supervisor restarts the
# gang or a later command replaces a lost supervisor (restarts + 1), Pending -> Pending when a lost
# supervisor of a queued job is replaced.
# Suspended (`dtrain suspend`, an idle notebook) holds no devices and waits for `dtrain resume`,
# which queues it again (Pending); nothing but that or `dtrain delete` moves it, so a supervisor
# that finishes after the suspension loses the race as it does after a deletion.
# Running -> Pending is a preemption (scheduler.py): the job keeps its devices while its processes
# stop, then its supervisor lets them go and queues it again. Pending -> Succeeded is a preempted
# job whose processes had all exited 0 before the preemption could stop them: it is done.
TRANSITIONS: dict[str, frozenset[str]] = {
    "Pending": frozenset({"Pending", "Running", "Succeeded", "Failed", "Deleted", "Suspended"}),  # relaunch; ...
    "Running": frozenset({"Running", "Pending", "Succeeded", "Failed", "Deleted", "Suspended"}),  # relaunch; ...
    "Suspended": frozenset({"Pending", "Deleted"}),  # resumed; deleted
    "Succeeded": frozenset({"Deleted"}),
    "Failed": frozenset({"Deleted"}),
    "Deleted": frozenset(),
}
UNFINISHED = (*ACTIVE, "Suspended")  # may run again: Prometheus gives each its series
HOLDS_NOTHING = (*FINAL, "Suspended")  # moving here releases the job's devices and pinned cores


def injected_word(value: str | None) -> str:
    """How a DTRAIN_GPUS setting reads in a message: 'DTRAIN_GPUS=2', or 'DTRAIN_GPUS unset'."""
    return "DTRAIN_GPUS unset" if value is None else f"DTRAIN_GPUS={value}"


def under_injected(value: str | None, command: str) -> str:
    """`command` run with DTRAIN_GPUS as `value` was: 'DTRAIN_GPUS=2 CMD', or 'env -u DTRAIN_GPUS CMD'."""
    return f"env -u DTRAIN_GPUS {command}" if value is None else f"DTRAIN_GPUS={value} {command}"


def other_inventory(row: sqlite3.Row, now: str | None) -> bool:
    """Whether a job's submit had another DTRAIN_GPUS than `now` (unset counts; a job of before
    the column, whose setting is unknown, never does): it sees another inventory here."""
    known, recorded = injected_at_submit(row)
    return known and recorded != now


def injected_at_submit(row: sqlite3.Row) -> tuple[bool, str | None]:
    """(known, DTRAIN_GPUS) of a job's submit: (True, None) where it ran without one, (False, None)
    where nothing was recorded (a job of before the column, or of before unset was recorded)."""
    text = row["gpus_injected"] if "gpus_injected" in row.keys() else None
    return (False, None) if text is None else (True, json.loads(text))


class JobStore:
    """Thin typed access to the job tables; policy lives in the scheduler and the backend."""

    def __init__(self, path: str | Path, *, list_command: str = "dtrain list jobs"):
        """`list_command`: the command a "no job named" names, as it works where it was asked (the
        backend's, with its -p PROJECT and --backend)."""
        self.path = Path(path)
        self.list_command = list_command
        self.conn = db.connect(self.path, owner=self)
        self.conn.executescript(SCHEMA)
        if self._missing_columns():
            try:
                with db.transaction(self.conn):  # asked again as the one writer: another command may add them first
                    for column in self._missing_columns():
                        self.conn.execute(f"ALTER TABLE jobs ADD COLUMN {column} {ADDED_COLUMNS[column]}")
            except sqlite3.OperationalError as err:
                if not db.disk_refused(err):
                    raise  # a read-only disk: jobs are read without them (`recorded` gives None)
        try:  # made once, in the first open of a database that lacks them (a long history: a second)
            self.conn.executescript(INDEXES)
        except sqlite3.OperationalError as err:
            if not db.disk_refused(err):
                raise  # a full or read-only disk: they only make reads faster, and a later open makes them

    @staticmethod
    def recorded(row: sqlite3.Row, column: str):
        """An added column's JSON value in `row`; None where it is empty or the table lacks it."""
        text = row[column] if column in row.keys() else None
        return None if text is None else json.loads(text)

    def _missing_columns(self) -> list[str]:
        have = {r[1] for r in self.conn.execute("PRAGMA table_info(jobs)")}
        return [c for c in ADDED_COLUMNS if c not in have]

    def close(self) -> None:
        self.conn.close()

    # ---- jobs ---------------------------------------------------------------------------
    def insert_job(self, spec: JobSpec, *, cwd: str, node: str, cmd: Callable[[str, str], str] | None = None,
                   gpus_injected: str | None = None, in_project: bool = False) -> None:
        """Add a Pending job; a Deleted job of the same name is replaced, any other clashes (its
        message's commands named by `cmd`, as check_free's: another submit of the name may have
        come in since the caller's check). `gpus_injected`: the DTRAIN_GPUS it was submitted with.
        `in_project`: its project (but `default`, which needs no row) must have its row, checked in the
        insert's transaction, so that a `project delete` since the caller's check never leaves a job in
        a project that is gone (delete_project's transaction refuses while a job is there)."""
        now = time.time()
        with db.transaction(self.conn):
            if in_project and spec.project != "default":
                require_project(spec.project, [row["name"] for row in self.projects()])
            if self.check_free(spec.name, cmd):
                self._release(spec.name)  # a deleted job's, never the new one's
                self.conn.execute("DELETE FROM jobs WHERE name=?", (spec.name,))
                self.conn.execute("DELETE FROM job_events WHERE job=?", (spec.name,))
            self.conn.execute(
                "INSERT INTO jobs (name, project, spec, status, created, cwd, node, message, uid) "
                "VALUES (?, ?, ?, 'Pending', ?, ?, ?, ?, ?)",
                (spec.name, spec.project, json.dumps(spec.to_dict()), now, cwd, node, QUEUED, str(uuid.uuid4())))
            if gpus_injected is not None or "gpus_injected" not in self._missing_columns():  # unset: JSON null
                self.conn.execute("UPDATE jobs SET gpus_injected=? WHERE name=?", (json.dumps(gpus_injected), spec.name))
            self._event(spec.name, "Pending", "queued", now)

    def check_free(self, name: str, cmd: Callable[[str, str], str] | None = None) -> bool:
        """Raise ConflictError if a job `name` exists and is not Deleted; True if a Deleted one does.
        `cmd(words, project)` names the commands its message gives (the backend's `cmd`)."""
        status = self.status(name)
        if status not in (None, "Deleted"):
            row = self.job(name)
            project, notebook = row["project"], bool(json.loads(row["spec"]).get("notebook"))
            cmd = cmd or (lambda words, _project: f"dtrain {words}")
            # `dtrain notebook NAME` run again the next day means the notebook there is: its way back first
            again = (f" (or go on with it: '{cmd(f'resume {name}', project)}')" if status == "Suspended" else
                     f" (or open it: '{cmd(f'notebook open {name}', project)}')" if notebook and status == "Running"
                     else "")
            raise ConflictError(f"a {'notebook' if notebook else 'job'} named {name!r} already exists ({status}); "
                                f"pick another name or remove it first with '{cmd(f'delete {name}', project)}'{again}")
        return status == "Deleted"

    def job(self, name: str) -> sqlite3.Row:
        row = self.conn.execute("SELECT * FROM jobs WHERE name=?", (name,)).fetchone()
        if row is None:
            raise NotFoundError(f"no job named {shown(name)}; see '{self.list_command}' for the jobs there are")
        return row

    def names(self) -> tuple[list[str], list[str]]:
        """The names of the jobs not Deleted, and of the Deleted ones (`logs`, `describe` still read them)."""
        rows = self.conn.execute("SELECT name, status FROM jobs").fetchall()
        return ([r["name"] for r in rows if r["status"] != "Deleted"],
                [r["name"] for r in rows if r["status"] == "Deleted"])

    def status(self, name: str) -> str | None:
        """The job's status, or None when there is no such job."""
        row = self.conn.execute("SELECT status FROM jobs WHERE name=?", (name,)).fetchone()
        return None if row is None else row["status"]

    def uids(self) -> dict[str, str]:
        """Each job's uid by name, for the jobs that have one (those submitted before uids have none)."""
        if "uid" not in {r[1] for r in self.conn.execute("PRAGMA table_info(jobs)")}:  # a read-only disk, unmigrated
            return {}
        return {r["name"]: r["uid"] for r in self.conn.execute("SELECT name, uid FROM jobs WHERE uid IS NOT NULL")}

    def live_uids(self) -> dict[str, str | None]:
        """Each job not Deleted, by name, to its uid (None for a job submitted before uids were recorded)."""
        has_uid = "uid" in {r[1] for r in self.conn.execute("PRAGMA table_info(jobs)")}  # a read-only disk, unmigrated
        rows = self.conn.execute(f"SELECT name, {'uid' if has_uid else 'NULL AS uid'} FROM jobs WHERE status != ?",
                                 ("Deleted",))
        return {r["name"]: r["uid"] for r in rows}

    @staticmethod
    def uid(row: sqlite3.Row) -> str | None:
        """The job's uid in `row`; None for a job submitted before uids were recorded."""
        return row["uid"] if "uid" in row.keys() else None

    def jobs(self) -> list[sqlite3.Row]:
        return self.conn.execute("SELECT * FROM jobs ORDER BY seq").fetchall()

    def active_jobs(self) -> list[sqlite3.Row]:
        return self.jobs_in(ACTIVE)

    def jobs_in(self, statuses: tuple[str, ...]) -> list[sqlite3.Row]:
        """The jobs in these statuses, in submission order: the few that may run, not the history."""
        return self.conn.execute(f"SELECT * FROM jobs WHERE status IN ({', '.join('?' * len(statuses))}) ORDER BY seq",
                                 statuses).fetchall()

    def page(self, *, project: str | None, statuses: list[str] | None, limit: int | None,
             offset: int) -> tuple[int, list[sqlite3.Row]]:
        """How many jobs match (in one of `statuses`; None: all but Deleted), and `limit` of them (None: all)
        after `offset`, newest first (created, then name); read in one transaction: the count and the page agree."""
        where, args = ((f"status IN ({', '.join('?' * len(statuses))})", list(statuses)) if statuses is not None
                       else ("status!='Deleted'", []))
        if project is not None:
            where, args = where + " AND project=?", [*args, project]
        self.conn.execute("BEGIN")  # deferred: a read snapshot, no lock taken from writers
        try:
            total = self.conn.execute(f"SELECT count(*) FROM jobs WHERE {where}", args).fetchone()[0]
            # sorted by what the order needs alone, then the page's rows read whole: sorting whole rows
            # (their specs) took 19 ms for 10,000 jobs, this 3.5 ms
            newest = "ORDER BY created DESC, name DESC"
            rows = self.conn.execute(f"SELECT * FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE {where} {newest} "
                                     f"LIMIT ? OFFSET ?) {newest}",
                                     [*args, -1 if limit is None else limit, offset]).fetchall()
        finally:
            self.conn.execute("COMMIT")
        return total, rows

    def mounting_page(self, volumes: frozenset[str], *, project: str | None,
                      limit: int | None) -> tuple[int, list[sqlite3.Row]]:
        """As `page` (all but Deleted), of the jobs whose spec mounts one of `volumes` (a mount is stored as
        `NAME:/PATH[:ro]`), that made one of them (`--pvc CLASS:SIZE:/PATH` makes pvc-JOB-I: the job's name
        is read off the volume's, see names.job_volume_name), or that recorded a snapshot its data came from."""
        makers = sorted({job for v in volumes if (job := volume_maker(v))})
        names, made = json.dumps(sorted(volumes)), json.dumps(makers)
        where = ("status!='Deleted' AND (source_snapshot IS NOT NULL"
                 " OR data_sources IS NOT NULL AND data_sources NOT IN ('', '[]')"
                 " OR name IN (SELECT value FROM json_each(?))"
                 " OR EXISTS (SELECT 1 FROM json_each(spec, '$.volumes') AS m WHERE substr(m.value, 1, "
                 "instr(m.value, ':/') - 1) IN (SELECT value FROM json_each(?))))")
        args: list = [made, names]
        if project is not None:
            where, args = where + " AND project=?", [*args, project]
        self.conn.execute("BEGIN")  # deferred: a read snapshot, so that the count and the page agree
        try:
            total = self.conn.execute(f"SELECT count(*) FROM jobs WHERE {where}", args).fetchone()[0]
            newest = "ORDER BY created DESC, name DESC"
            rows = self.conn.execute(f"SELECT * FROM jobs WHERE seq IN (SELECT seq FROM jobs WHERE {where} {newest} "
                                     f"LIMIT ?) {newest}", [*args, -1 if limit is None else limit]).fetchall()
        finally:
            self.conn.execute("COMMIT")
        return total, rows

    def count(self, *, project: str | None) -> list[tuple[str, str, int]]:
        """(project, status, jobs) for every status some job of `project` (None: all) is in."""
        where, args = ("WHERE project=?", [project]) if project is not None else ("", [])
        return [tuple(r) for r in self.conn.execute(
            f"SELECT project, status, count(*) FROM jobs {where} GROUP BY project, status", args)]

    def events(self, name: str) -> list[sqlite3.Row]:
        """In the order they happened (the order written where two share a time): an event is written
        with the time it happened, which, written by another process, may come before an event
        written sooner (`add_run_event`)."""
        return self.conn.execute("SELECT * FROM job_events WHERE job=? ORDER BY time, id", (name,)).fetchall()

    def update(self, name: str, **fields) -> None:
        """Set bookkeeping fields (pid, restarts); the status only changes through `move`."""
        assert "status" not in fields, "use set_status/move: they check TRANSITIONS"
        cols = ", ".join(f"{k}=?" for k in fields)
        self.conn.execute(f"UPDATE jobs SET {cols} WHERE name=?", (*fields.values(), name))

    def set_status(self, name: str, status: str, message: str = "", *, hold: bool = False,
                   only_from: str | None = None, **fields) -> bool:
        """Move a job to `status` in its own transaction; False if TRANSITIONS forbids it, or if the
        job is not in status `only_from` (when given: a restart is no longer one once preempted)."""
        with db.transaction(self.conn):
            if only_from is not None and self.status(name) != only_from:
                return False
            return self.move(name, status, message, hold=hold, **fields)

    def move(self, name: str, status: str, message: str = "", *, hold: bool = False, **fields) -> bool:
        """Move a job to `status` inside the caller's transaction, recording an event; a final
        status, or Suspended, releases the job's devices, unless `hold`: a job stopped while its
        processes still run (delete, suspend) keeps them until `release`, once those processes
        are gone, so that no other job is started on a GPU they still use. False (nothing
        written) if TRANSITIONS forbids it."""
        row = self.conn.execute("SELECT status, started FROM jobs WHERE name=?", (name,)).fetchone()
        if row is None or status not in TRANSITIONS[row["status"]]:
            return False
        now = time.time()
        extra = dict(fields)
        if status in FINAL:
            extra.setdefault("finished", now)
        if status in HOLDS_NOTHING and not hold:
            self._release(name)
        if status == "Running" and row["started"] is None:  # a relaunch or a resumed job keeps the first start
            extra.setdefault("started", now)
        if status == "Running" and row["status"] == "Pending":  # started (again): not a relaunch in place
            extra.setdefault("last_started", now)
        cols = ", ".join(["status=?", "message=?"] + [f"{k}=?" for k in extra])
        self.conn.execute(f"UPDATE jobs SET {cols} WHERE name=?", (status, message, *extra.values(), name))
        self._event(name, status, message, now)
        return True

    def resume(self, name: str, message: str, *, claim: tuple[int, str] | None = None, release: bool = True) -> None:
        """Suspended -> Pending, only from Suspended (Pending -> Pending is a relaunch, which two
        `dtrain resume` at once must not both do): ConflictError otherwise. The caller has seen
        the last supervisor exit: devices it still held (its stop was cut short) are let go, or with
        `release=False` kept until the caller, having stopped what that run left, calls
        `release_preempted` (as a preempted job's supervisor does).
        `claim` (the resuming command's pid and claim token) is recorded as the job's supervisor in
        the same transaction, until the new supervisor replaces it: a command reading the job in
        between would otherwise find a Pending job whose supervisor is gone, and call it lost.
        None (a test of the store alone) leaves the recorded supervisor as it is."""
        with db.transaction(self.conn):
            status = self.status(name)
            if status != "Suspended":
                raise ConflictError(f"job {name!r} is {status}: only a Suspended job can be resumed")
            if release:
                self._release(name)
            if claim is not None:
                self.conn.execute("UPDATE jobs SET supervisor_pid=?, supervisor_start=? WHERE name=?", (*claim, name))
            self.move(name, "Pending", message)

    def release(self, name: str) -> None:
        """Let go of the devices and cores a stopped job held while its processes stopped (`hold`);
        never those of a job that may run (resumed meanwhile: they are its new ones)."""
        with db.transaction(self.conn):
            if self.status(name) not in ACTIVE:
                self._release(name)

    def release_preempted(self, name: str) -> bool:
        """Let go of the devices and cores a preempted job (Pending again) held while its processes
        stopped: its supervisor, once they are gone, before it waits for its turn again. False (and
        nothing released) if the job is no longer Pending."""
        with db.transaction(self.conn):
            if self.status(name) != "Pending":
                return False
            self._release(name)
            return True

    def _release(self, name: str) -> None:
        self.conn.execute("DELETE FROM allocations WHERE job=?", (name,))
        self.conn.execute("DELETE FROM core_pins WHERE job=?", (name,))

    def held_by_stopped(self) -> list[sqlite3.Row]:
        """Jobs that no longer run but still hold devices or cores: stopping (delete, suspend), or
        left so by a stop that was cut short (its command and supervisor killed)."""
        return self.conn.execute(
            "SELECT * FROM jobs WHERE status NOT IN ('Pending', 'Running') AND name IN "
            "(SELECT job FROM allocations UNION SELECT job FROM core_pins) ORDER BY seq").fetchall()

    def replace_supervisor(self, name: str, *, old: tuple, pid: int, token: str | None, message: str = "",
                           restarts: int | None = None) -> bool:
        """Record a new supervisor only if the recorded one is still `old` = (pid, start token).

        With a `message`, this is a relaunch: the job moves to its own status (an event) with the
        new restart count, in the same transaction, so two commands never both relaunch it."""
        with db.transaction(self.conn):
            row = self.conn.execute("SELECT status, supervisor_pid, supervisor_start FROM jobs WHERE name=?",
                                    (name,)).fetchone()
            recorded = (row["supervisor_pid"], row["supervisor_start"]) if row is not None else None
            if recorded == (pid, token) and not message:  # it recorded itself (its starter was slow): ours
                return True
            if row is None or row["status"] not in ACTIVE or recorded != old:
                return False
            self.conn.execute("UPDATE jobs SET supervisor_pid=?, supervisor_start=? WHERE name=?", (pid, token, name))
            if message:
                extra = {} if restarts is None else {"restarts": restarts}
                self.move(name, row["status"], message, **extra)
        return True
    def purge(self, name: str) -> None:
        """Forget a job that is no longer active (its row and events)."""
        with db.transaction(self.conn):
            if self.status(name) not in (None, *ACTIVE):
                self._release(name)
            self.conn.execute("DELETE FROM jobs WHERE name=? AND status NOT IN ('Pending', 'Running')", (name,))
            self.conn.execute("DELETE FROM job_events WHERE job=? AND NOT EXISTS "
                              "(SELECT 1 FROM jobs WHERE name=?)", (name, name))

    def add_event(self, name: str, status: str, message: str) -> None:
        self._event(name, status, message, time.time())

    def add_run_event(self, name: str, status: str, message: str, *, when: float) -> None:
        """An event of the job's running attempt, at `when` (when it happened: a rank said it), seen
        by its supervisor a moment later. When the job no longer runs by then (preempted: Pending,
        suspended, deleted), that run has ended, and its event goes just before the event that ended
        it, never after: the run's events come before `describe` says it stopped."""
        with db.transaction(self.conn):
            row = self.conn.execute("SELECT status FROM jobs WHERE name=?", (name,)).fetchone()
            if row is not None and row["status"] != "Running":
                end = self.conn.execute("SELECT MAX(time) FROM job_events WHERE job=? AND status<>'Running'",
                                        (name,)).fetchone()[0]
                if end is not None:
                    when = min(when, end - RUN_EVENT_BEFORE_S)
            self._event(name, status, message, min(when, time.time()))

    def _event(self, name: str, status: str, message: str, when: float) -> None:
        self.conn.execute("INSERT INTO job_events (job, time, status, message) VALUES (?, ?, ?, ?)",
                          (name, when, status, message))

    # ---- allocations and projects ---------------------------------------------------------
    def allocations(self) -> dict[str, str]:
        return {r["device"]: r["job"] for r in self.conn.execute("SELECT * FROM allocations")}

    def allocation_projects(self) -> dict[str, str]:
        """The project of each job holding a device (its dashboard link's ?project=)."""
        return {r["job"]: r["project"] for r in self.conn.execute(
            "SELECT DISTINCT a.job AS job, j.project AS project FROM allocations a JOIN jobs j ON j.name = a.job")}

    def job_devices(self, name: str) -> list[str]:
        rows = self.conn.execute("SELECT device FROM allocations WHERE job=? ORDER BY rowid", (name,))
        return [r["device"] for r in rows]

    def pinned_cores(self) -> dict[int, str]:
        """CPU cores a running --cpu job's ranks are pinned to -> that job."""
        return {r["core"]: r["job"] for r in self.conn.execute("SELECT * FROM core_pins")}

    def job_cores(self, name: str) -> list[int]:
        return [r["core"] for r in self.conn.execute("SELECT core FROM core_pins WHERE job=? ORDER BY core", (name,))]

    def upsert_project(self, name: str, gpu_quota: int | None, *, keep_quota: bool = False) -> None:
        """Make project NAME with GPU_QUOTA (None: no quota); an existing one gets GPU_QUOTA unless
        `keep_quota`."""
        self.conn.execute(
            "INSERT INTO projects (name, gpu_quota, created) VALUES (?, ?, ?) ON CONFLICT(name) DO "
            + ("NOTHING" if keep_quota else "UPDATE SET gpu_quota=excluded.gpu_quota"), (name, gpu_quota, time.time()))

    def delete_project(self, name: str) -> tuple[sqlite3.Row | None, list[sqlite3.Row]]:
        """Remove project NAME's row (its GPU quota) unless a job of it is not Deleted, in one transaction, so
        that a job submitted meanwhile keeps its project: (the row removed, None where there was none or it
        was kept; the jobs that kept it, name and spec)."""
        with db.transaction(self.conn):
            jobs = self.conn.execute("SELECT name, spec FROM jobs WHERE project=? AND status != 'Deleted' "
                                     "ORDER BY name", (name,)).fetchall()
            row = self.conn.execute("SELECT name, gpu_quota FROM projects WHERE name=?", (name,)).fetchone()
            if row is not None and not jobs:
                self.conn.execute("DELETE FROM projects WHERE name=?", (name,))
        return (None if jobs else row), jobs

    def projects(self) -> list[sqlite3.Row]:
        """Every project by name, `default` always among them: every job without -p runs there,
        though it has a row only once `dtrain project create default` gives it a quota."""
        return self.conn.execute(
            "SELECT name, gpu_quota, created FROM projects UNION ALL "
            "SELECT 'default', NULL, NULL WHERE NOT EXISTS (SELECT 1 FROM projects WHERE name='default') "
            "ORDER BY name").fetchall()

    def project_quota(self, name: str) -> int | None:
        row = self.conn.execute("SELECT gpu_quota FROM projects WHERE name=?", (name,)).fetchone()
        return None if row is None else row["gpu_quota"]

"""Remote backends: those this home has submitted jobs to (state.db), and their counts shared a while.

`dtrain submit --backend kubernetes` with no `kubernetes:` settings in config.yaml (the default
kubeconfig) sends a job where nothing in config.yaml points; a later `dtrain list -A`, in another
process, reads every backend it walks (Client._every_backend) and would miss it. Each submit to
another backend records it here (table `sent_to`, made on first use: an older home gains it then),
and the walk reads it. A backend that lists no job of any project is forgotten (Client.list).

A Prometheus scrape of the HTTP API (`Client.summary`) reads every backend walked, and so does each
dashboard refresh of the jobs list (`Client.list`, `Client.page` of every project); `RemoteReads` keeps
each remote one's answer (or its error: one that does not answer is not waited for at each refresh)
for REMOTE_TTL_S, shared by the server's threads. The CLI and the SDK read live.
"""

from __future__ import annotations

import logging
import os
import sqlite3
import threading
import time
from pathlib import Path
from typing import Callable, TypeVar

from dtrain import db
from dtrain.errors import DtrainError

T = TypeVar("T")

SCHEMA = """
CREATE TABLE IF NOT EXISTS sent_to (
    backend TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    last REAL NOT NULL
);
"""


class SentTo:
    """`state.db`'s `sent_to` table: backend -> the project of the last job submitted there (the
    project a Kubernetes backend is opened for). One connection per SentTo (per Client), opened when
    the database first exists and kept: every job verb reads the table (a bare name may be on a
    backend recorded here), and opening state.db each time cost a connect and WAL setup per verb. Each
    read is its own autocommit statement, so it sees what any other thread or process recorded."""

    def __init__(self, home: str | Path):
        self.path = Path(home) / "state.db"
        self._lock = threading.Lock()  # a Client may be used from several threads: one statement at a time
        self._conn: sqlite3.Connection | None = None
        self._pid = 0  # the process the connection was opened in: a forked child opens its own
        self.opened = 0  # connections opened: one per SentTo (tests count it)

    def _connect(self, *, make: bool) -> sqlite3.Connection | None:
        """The kept connection; None when there is no database yet and `make` is false (none is made)."""
        if self._conn is None or self._pid != os.getpid():
            if not make and not self.path.is_file():
                return None
            self._conn, self._pid = db.connect(self.path, owner=self), os.getpid()
            self.opened += 1
        return self._conn

    def record(self, backend: str, project: str) -> None:
        """Remember that a job of `project` was submitted to `backend`. A disk that refuses the write
        (full, read-only) loses only this: the job runs, and this process lists it still."""
        try:
            with self._lock:
                conn = self._connect(make=True)
                conn.executescript(SCHEMA)
                conn.execute("INSERT INTO sent_to (backend, project, last) VALUES (?, ?, ?) ON CONFLICT(backend) "
                             "DO UPDATE SET project = excluded.project, last = excluded.last",
                             (backend, project, time.time()))
        except sqlite3.OperationalError as err:
            if not db.disk_refused(err):
                raise

    def read(self) -> list[tuple[str, str]]:
        """(backend, project) of each backend recorded, oldest first; [] for a home without the table
        (nothing sent elsewhere yet, or a home of before) or without a database: none is made here."""
        with self._lock:
            conn = self._connect(make=False)
            if conn is None:
                return []
            try:
                rows = conn.execute("SELECT backend, project FROM sent_to ORDER BY last").fetchall()
            except sqlite3.OperationalError as err:
                if "no such table" in str(err):
                    return []
                raise
        return [(r["backend"], r["project"]) for r in rows]

    def forget(self, backend: str) -> None:
        """Stop walking `backend`: it lists no job any more (each was purged or expired)."""
        try:
            with self._lock:
                conn = self._connect(make=False)
                if conn is not None:
                    conn.execute("DELETE FROM sent_to WHERE backend = ?", (backend,))
        except sqlite3.OperationalError as err:
            if not (db.disk_refused(err) or "no such table" in str(err)):
                raise


# How long a remote backend's count of jobs (Client.summary of every project: what a Prometheus scrape
# reads) is used again by the server's threads before it is read anew. A scrape read the cluster's
# five job kinds (five LISTs of every dtrain namespace) or SageMaker's ListTrainingJobs pages and a
# DescribeTrainingJob per unfinished job, every 15 s (Prometheus' default), twice for an HA pair:
# 30 s bounds that to one read per backend each 30 s, whoever scrapes; a count 30 s old is what a
# 15 s scrape interval already tolerates. The local backend is counted at each scrape (11 ms, SQL).
REMOTE_TTL_S = 30.0


class RemoteReads:
    """Reads of remote backends shared by threads for `ttl` seconds: a read's result, or its error, is
    given to every caller until it is that old, and one caller at a time reads it anew. An error is
    logged once, and again only when it changes (another message, or read again once it passed), not
    at each scrape: a backend without credentials is one warning line, not one per 15 s."""

    def __init__(self, ttl: float = REMOTE_TTL_S, *, clock: Callable[[], float] = time.monotonic):
        self.ttl = ttl
        self._clock = clock
        self._lock = threading.Lock()
        self._keys: dict[str, threading.Lock] = {}
        self._kept: dict[str, tuple[float, object, BaseException | None]] = {}
        self._said: dict[str, str | None] = {}  # the last error logged for each key (None: it read fine)

    def get(self, key: str, read: Callable[[], T]) -> T:
        return self.aged(key, read)[0]

    def aged(self, key: str, read: Callable[[], T], *, log: bool = True) -> tuple[T, float]:
        """`get`, with how many seconds ago the answer was read (0: just now). `log=False`: its error is
        not logged here (a job list says it in a notice of each answer)."""
        with self._lock:
            lock = self._keys.setdefault(key, threading.Lock())
        with lock:  # one thread reads; the others wait for its answer rather than ask too
            kept = self._kept.get(key)
            if kept is None or self._clock() - kept[0] >= self.ttl:
                try:
                    kept = (self._clock(), read(), None)
                except DtrainError as err:
                    kept = (self._clock(), None, err)
                self._kept[key] = kept
                if log:
                    self._log_change(key, kept[2])
            age = self._clock() - kept[0]
        if kept[2] is not None:
            raise kept[2].with_traceback(None)
        return kept[1], age

    def age(self, key: str) -> float | None:
        """How many seconds ago the answer or error kept for `key` was read (None: none is kept): a
        notice of an error given again says how old it is, as one of an answer does."""
        with self._lock:
            kept = self._kept.get(key)
        return None if kept is None else self._clock() - kept[0]

    def _log_change(self, key: str, err: BaseException | None) -> None:
        said = None if err is None else " ".join(str(err).split())
        if said == self._said.get(key):
            return
        log = logging.getLogger("dtrain.server")
        if said is not None:
            log.warning("dtrain: warning: jobs on the %s backend not counted in /metrics (asked again each %g s, "
                        "said again when this changes): %s", key, self.ttl, said)
        elif key in self._said:
            log.warning("dtrain: jobs on the %s backend are counted in /metrics again", key)
        self._said[key] = said

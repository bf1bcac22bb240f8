"""The backends other than the local one that this home has submitted jobs to, kept in state.db.

`dtrain submit --backend kubernetes` with no `kubernetes:` settings in config.yaml (the default
kubeconfig) sends a job where nothing in config.yaml points; a later `dtrain list -A`, in another
process, reads every backend it walks (Client._every_backend) and would miss it. Each submit to
another backend records it here (table `sent_to`, made on first use: an older home gains it then),
and the walk reads it. A backend that lists no job of any project is forgotten (Client.list).
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

from dtrain import db

SCHEMA = """
CREATE TABLE IF NOT EXISTS sent_to (
    backend TEXT PRIMARY KEY,
    project TEXT NOT NULL,
    last REAL NOT NULL
);
"""


class SentTo:
    """`state.db`'s `sent_to` table: backend -> the project of the last job submitted there (the
    project a Kubernetes backend is opened for). Each call opens and closes its own connection, so
    that every thread and process sees what any other recorded."""

    def __init__(self, home: str | Path):
        self.path = Path(home) / "state.db"

    def record(self, backend: str, project: str) -> None:
        """Remember that a job of `project` was submitted to `backend`. A disk that refuses the write
        (full, read-only) loses only this: the job runs, and this process lists it still."""
        try:
            conn = db.connect(self.path)
            try:
                conn.executescript(SCHEMA)
                conn.execute("INSERT INTO sent_to (backend, project, last) VALUES (?, ?, ?) ON CONFLICT(backend) "
                             "DO UPDATE SET project = excluded.project, last = excluded.last",
                             (backend, project, time.time()))
            finally:
                conn.close()
        except sqlite3.OperationalError as err:
            if not db.disk_refused(err):
                raise

    def read(self) -> list[tuple[str, str]]:
        """(backend, project) of each backend recorded, oldest first; [] for a home without the table
        (nothing sent elsewhere yet, or a home of before) or without a database: none is made here."""
        if not self.path.is_file():
            return []
        conn = db.connect(self.path)
        try:
            return [(r["backend"], r["project"]) for r in conn.execute("SELECT backend, project FROM sent_to ORDER BY last")]
        except sqlite3.OperationalError as err:
            if "no such table" in str(err):
                return []
            raise
        finally:
            conn.close()

    def forget(self, backend: str) -> None:
        """Stop walking `backend`: it lists no job any more (each was purged or expired)."""
        if not self.path.is_file():
            return
        try:
            conn = db.connect(self.path)
            try:
                conn.execute("DELETE FROM sent_to WHERE backend = ?", (backend,))
            finally:
                conn.close()
        except sqlite3.OperationalError as err:
            if not (db.disk_refused(err) or "no such table" in str(err)):
                raise

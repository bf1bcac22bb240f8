"""SQLite access shared by every local component: one file, WAL, safe for concurrent CLIs."""

from __future__ import annotations

import contextlib
import sqlite3
from pathlib import Path


def connect(path: str | Path) -> sqlite3.Connection:
    """Open the state database; autocommit mode so that `transaction` controls locking."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(str(path), timeout=30.0, isolation_level=None, check_same_thread=False)
    conn.row_factory = sqlite3.Row
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA busy_timeout=30000")
    conn.execute("PRAGMA foreign_keys=ON")
    return conn


@contextlib.contextmanager
def transaction(conn: sqlite3.Connection):
    """BEGIN IMMEDIATE: take the write lock up front so read-check-write is atomic across processes."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield conn
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    else:
        conn.execute("COMMIT")

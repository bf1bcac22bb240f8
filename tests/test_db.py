"""The state database under concurrent first use."""

from __future__ import annotations

import multiprocessing

from dtrain import db


def _open(path: str, barrier, results) -> None:
    barrier.wait()
    try:
        conn = db.connect(path)
        conn.execute("CREATE TABLE IF NOT EXISTS t (x)")
        mode = conn.execute("PRAGMA journal_mode").fetchone()[0]
        conn.close()
        results.put(mode)
    except Exception as err:  # reported, not raised: the parent counts them
        results.put(repr(err))


def test_processes_opening_a_new_database_at_once_all_get_it_in_wal_mode(tmp_path):
    """Twelve processes open the same fresh database at the same instant (as six `dtrain submit`
    in a new home do), forty times over. Switching to WAL takes the exclusive lock, and SQLite
    refuses it at once, without waiting, to one that holds the shared lock while another waits:
    before `connect` retried that, about one database in fifteen left a process with
    "database is locked"."""
    ctx = multiprocessing.get_context("fork")
    outcomes = []
    for trial in range(40):
        path = str(tmp_path / f"{trial}.db")
        barrier, results = ctx.Barrier(12), ctx.Queue()
        procs = [ctx.Process(target=_open, args=(path, barrier, results)) for _ in range(12)]
        for p in procs:
            p.start()
        outcomes += [results.get(timeout=60) for _ in procs]
        for p in procs:
            p.join(timeout=60)
    assert outcomes.count("wal") == len(outcomes), sorted(set(outcomes))

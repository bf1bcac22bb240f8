"""Twin checks and repeated reads the last review found: one check where two doors each had theirs, and a
listing that asks the state database a fixed number of questions whatever its length."""

from __future__ import annotations

from dtrain.backends.local.backend import LocalBackend
from dtrain.storage.volumes import Storage


def _queries(storage: Storage, call) -> tuple[object, int]:
    """`call()`'s result and the number of statements it ran on the storage database."""
    ran: list[str] = []
    storage.conn.set_trace_callback(ran.append)
    try:
        return call(), len(ran)
    finally:
        storage.conn.set_trace_callback(None)


def _listed(home, count: int) -> tuple[list, int, list, int]:
    """`count` snapshots whose data started from 'base', and `count` volumes restored from it, 'base' deleted
    since: the snapshot and volume lists and the statements each ran."""
    storage = Storage(home)
    try:
        storage.create_volume("data", size="1Mi")
        storage.create_snapshot("data", name="base")
        for i in range(count):
            storage.create_snapshot("data", name=f"s{i}", source_snapshot="base")
            storage.restore_snapshot("base", to=f"v{i}")
        storage.delete_snapshot("base")
        storage.create_volume("gone", size="1Mi")
        storage.create_snapshot("gone", name="g")
        storage.delete_volume("gone")
        backend = LocalBackend(home, storage=storage)
        snaps, snap_queries = _queries(storage, backend.list_snapshots)
        vols, vol_queries = _queries(storage, backend.list_volumes)
        return snaps, snap_queries, vols, vol_queries
    finally:
        storage.close()


def test_snapshot_and_volume_lists_ask_the_database_the_same_whatever_their_length(tmp_path):
    """snapshot list asked twice a snapshot (was its volume deleted, was its source), volume list once a volume
    (was its origin deleted): 41 questions for 20 snapshots. Now a fixed number, the marks as before."""
    one = _listed(tmp_path / "one", 1)
    twenty = _listed(tmp_path / "twenty", 20)
    assert twenty[1] == one[1] and twenty[3] == one[3], (one[1], twenty[1], one[3], twenty[3])
    snaps, _, vols, _ = twenty
    assert {s.name: s.extra["source_snapshot_deleted"] for s in snaps} == {"g": False,
                                                                            **{f"s{i}": True for i in range(20)}}
    assert {s.name: s.extra["volume_deleted"] for s in snaps} == {"g": True, **{f"s{i}": False for i in range(20)}}
    assert {v.name: v.extra["origin_snapshot_deleted"] for v in vols} == {"data": False,
                                                                          **{f"v{i}": True for i in range(20)}}


"""Twin checks and repeated reads the last review found: one check where two doors each had theirs, and a
listing that asks the state database a fixed number of questions whatever its length."""

from __future__ import annotations

import pytest

from dtrain.backends.local.backend import LocalBackend
from dtrain.client import Client
from dtrain.errors import BackendError
from dtrain.storage.volumes import Storage
from test_audit16_projread import _Counting


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


class _Refusing(_Counting):
    """A backend whose jobs cannot be counted (a cluster that does not answer), counting the project reads
    it is asked for; `keeps_projects` False: one that keeps none (SageMaker)."""

    def __init__(self, *args, keeps: bool = True, **kw):
        super().__init__(*args, **kw)
        self.name, self.keeps_projects = "other", keeps

    def _summary(self, *, project=None):
        raise BackendError("the other backend does not answer")


@pytest.mark.parametrize("keeps", [True, False])
def test_read_project_does_not_read_a_backend_again_after_it_refused(home, keeps):
    """Client.read_project asked a backend whose jobs could not be counted for the project again, to learn
    whether it kept projects at all (a second trip to a cluster that had just not answered). It is told by
    Backend.keeps_projects: one that does is a notice, as before; one that does not is left out, as before."""
    LocalBackend(home).create_project("team-a", gpu_quota=0)
    other = _Refusing(home, keeps=keeps)
    client = Client(home=home, backends={"other": other})
    client._sent_to.record("other", "default")  # a job submitted there: every read of all projects walks it
    got = client.read_project("team-a")
    assert [(p.name, p.backend) for p in got] == [("team-a", "local")]
    assert other.reads == []
    said = [n.message for n in got.notices]
    assert said == ([f"projects on the other backend (where this home's submit --backend other sent jobs) not "
                     f"listed, the others are: the other backend does not answer; to stop asking it (a cluster "
                     f"that is gone): dtrain.Client().forget_backend('other')"] if keeps else []), said


def test_only_sagemaker_of_dtrains_backends_keeps_no_projects():
    from dtrain.backends.kubernetes.backend import KubernetesBackend
    from dtrain.backends.sagemaker.backend import SageMakerBackend

    assert (LocalBackend.keeps_projects, KubernetesBackend.keeps_projects, SageMakerBackend.keeps_projects) == (
        True, True, False)


def test_a_listing_longer_than_sqlites_variable_limit_is_asked_in_batches(tmp_path):
    """still_there and sources_there bind one variable a row: past SQLite's limit (999 before 3.32) one query was
    'too many SQL variables'. They ask in batches of db.IN_BATCH now."""
    import sqlite3

    from dtrain import db

    storage = Storage(tmp_path)
    try:
        storage.create_volume("data", size="1Mi")
        storage.create_snapshot("data", name="base")
        vol_uid = storage.get_volume("data").uid
        storage.conn.setlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER, db.IN_BATCH)
        many = [f"uid-{i}" for i in range(3 * db.IN_BATCH)] + [vol_uid]
        volumes, snapshots = storage.still_there(many, many)
        assert volumes == {vol_uid} and snapshots == set()
        sources = [(f"snap-{i}", 1e10) for i in range(2 * db.IN_BATCH)] + [("base", 1e10)]
        assert storage.sources_there(sources) == {("base", 1e10)}
    finally:
        storage.close()

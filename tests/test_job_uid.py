"""A job's uid: a name submitted again after `delete --purge` is a new job, and the snapshots the
earlier run of that name left are not shown as the new one's (`snapshot list --job`)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from conftest import Dtrain, job_store
from dtrain.backends.local.store import JobStore
from dtrain.spec import JobSpec
from dtrain.storage import volumes
from dtrain.storage.volumes import Storage


def _spec(name: str) -> JobSpec:
    return JobSpec(name=name, command=["true"])


@pytest.fixture
def home_store(home):
    """The JobStore over home's state.db, closed at the end."""
    with job_store(home) as store:
        yield store


def test_each_submit_of_a_name_gets_its_own_uid(store):
    store.insert_job(_spec("t"), cwd="/", node="n")
    first = JobStore.uid(store.job("t"))
    store.set_status("t", "Failed", "done")
    store.purge("t")
    store.insert_job(_spec("t"), cwd="/", node="n")
    second = JobStore.uid(store.job("t"))
    assert first and second and first != second
    assert store.uids() == {"t": second}


def test_a_home_of_before_uids_keeps_its_jobs_and_snapshots_readable(home):
    """An old state.db: its jobs table lacks `uid`, its snapshots table `job_uid`; both are added on
    open, and what was there reads as unknown (None), as before."""
    conn = sqlite3.connect(home / "state.db")
    conn.executescript(volumes.SCHEMA)
    conn.execute("CREATE TABLE jobs (seq INTEGER PRIMARY KEY AUTOINCREMENT, name TEXT NOT NULL UNIQUE, "
                 "project TEXT NOT NULL, spec TEXT NOT NULL, status TEXT NOT NULL, created REAL NOT NULL, "
                 "started REAL, finished REAL, cwd TEXT NOT NULL, node TEXT, supervisor_pid INTEGER, "
                 "supervisor_start TEXT, restarts INTEGER NOT NULL DEFAULT 0, message TEXT NOT NULL DEFAULT '', "
                 "snapshot TEXT, source_snapshot TEXT, exit_code INTEGER)")
    conn.execute("INSERT INTO jobs (name, project, spec, status, created, cwd) VALUES (?, 'default', ?, "
                 "'Succeeded', 1.0, '/')", ("old", json.dumps(_spec("old").to_dict())))
    conn.execute("INSERT INTO snapshots VALUES ('s', 'u1', 'v', 'vu', '2026-01-01T00:00:00Z', 0, '1Mi', 'local', "
                 "'old', NULL, NULL, 0, 0, 0, 'cas')")
    conn.commit()
    conn.close()
    with job_store(home) as store:
        assert JobStore.uid(store.job("old")) is None and store.uids() == {}
    storage = Storage(home)
    try:
        assert storage.get_snapshot("s").job == "old" and storage.get_snapshot("s").job_uid is None
    finally:
        storage.close()


@pytest.mark.slow
def test_snapshot_list_job_marks_an_earlier_run_of_the_name(dt: Dtrain, tmp_path):
    """Reproduced: a snapshot taken by job t, t purged and submitted again: `snapshot list --job t`
    listed the first run's snapshot as the new job's, with nothing to tell them apart."""
    dt("volume", "create", "v", "--size", "1Mi")
    dt("submit", "t", "--pvc", "v:/mnt", "--snapshot-on-success", "v", "--", "true", cwd=tmp_path)
    dt("wait", "t")
    first = json.loads(dt("describe", "job", "t", "--json").stdout)
    dt("delete", "t", "--purge")
    dt("submit", "t", "--pvc", "v:/mnt", "--snapshot-on-success", "v", "--", "true", cwd=tmp_path)
    dt("wait", "t")
    second = json.loads(dt("describe", "job", "t", "--json").stdout)
    assert first["uid"] and second["uid"] and first["uid"] != second["uid"]
    assert f"UID: {second['uid']}" in dt("describe", "job", "t").stdout

    snaps = {s["name"]: s for s in json.loads(dt("snapshot", "list", "--job", "t", "--json").stdout)}
    old, new = snaps[first["snapshot"]], snaps[second["snapshot"]]
    assert (old["job_uid"], old["earlier_run"]) == (first["uid"], True)
    assert (new["job_uid"], new["earlier_run"]) == (second["uid"], False)
    rows = {line.split()[0]: line for line in dt("snapshot", "list", "--job", "t").stdout.splitlines()[1:]}
    assert "t (earlier run)" in rows[first["snapshot"]]
    assert "earlier run" not in rows[second["snapshot"]]
    assert "Job: t (earlier run)" in dt("snapshot", "describe", first["snapshot"]).stdout



def test_a_sagemaker_jobs_uid_is_its_training_job_arn():
    from dtrain.backends.sagemaker.status import job_info

    arn = "arn:aws:sagemaker:us-east-1:123456789012:training-job/t"
    desc = {"TrainingJobName": "t", "TrainingJobArn": arn, "TrainingJobStatus": "InProgress",
            "SecondaryStatus": "Starting"}
    assert job_info(desc, _spec("t")).uid == arn


def test_the_lineage_draws_an_earlier_runs_snapshot_apart_from_the_job_now_so_named():
    """The lineage told an earlier run apart only by time (a job made after the snapshot); a run
    purged and submitted again within the same second was drawn as the snapshot's job."""
    pytest.importorskip("fastapi")
    from dtrain.backends.base import JobInfo, JobStatus, SnapshotInfo
    from dtrain.server.lineage import lineage

    job = JobInfo(name="t", spec=_spec("t"), status=JobStatus.SUCCEEDED, backend="local", created=100.2, uid="b")
    snaps = [SnapshotInfo(name="old", backend="local", volume=None, created=100.0, job="t", job_uid="a",
                          earlier_run=True),
             SnapshotInfo(name="new", backend="local", volume=None, created=100.5, job="t", job_uid="b")]
    edges = {(e.source, e.target) for e in lineage([job], [], snaps).edges if e.label == "results"}
    assert edges == {("job:t@old", "snapshot:old"), ("job:t", "snapshot:new")}


def _succeeded_with_snapshot(store: JobStore, name: str) -> str:
    """Job `name` Succeeded with its snapshot `<name>-success` recorded (the supervisor's end); its uid."""
    store.insert_job(_spec(name), cwd="/", node="n")
    for status in ("Running", "Succeeded"):
        store.set_status(name, status, "done", snapshot=f"{name}-success" if status == "Succeeded" else None)
    return JobStore.uid(store.job(name))


def test_describe_job_tells_its_snapshot_by_uid_not_by_name_and_time(home, home_store):
    """`describe job`'s "(deleted)" matched the job's snapshot by name, job name and time: a snapshot
    whose clock read before the job's (a clock stepped back) was said deleted while there, and another
    run's of that name was taken for the job's. Where the uid is recorded, it decides."""
    from dtrain.backends.local.backend import LocalBackend

    uid = _succeeded_with_snapshot(home_store, "t")
    storage = Storage(home)
    try:
        storage.create_volume("v", size="1Mi")
        storage.create_snapshot("v", name="t-success", job="t", job_uid=uid)
        storage.conn.execute("UPDATE snapshots SET created_ns = 0 WHERE name = 't-success'")  # before the job
        storage.conn.commit()
        backend = LocalBackend(home, storage=storage)
        assert backend.get("t").extra["snapshot_deleted"] is False and backend.get("t").snapshot_deleted is False
        storage.delete_snapshot("t-success")
        storage.create_snapshot("v", name="t-success", job="t", job_uid="another-run")  # after the job, not its
        assert backend.get("t").extra["snapshot_deleted"] is True and backend.get("t").snapshot_deleted is True
    finally:
        storage.close()


def test_describe_job_keeps_the_time_rule_for_a_snapshot_without_a_uid(home, home_store):
    from dtrain.backends.local.backend import LocalBackend

    _succeeded_with_snapshot(home_store, "t")
    storage = Storage(home)
    try:
        storage.create_volume("v", size="1Mi")
        storage.create_snapshot("v", name="t-success", job="t")  # recorded no uid: as one taken before uids
        backend = LocalBackend(home, storage=storage)
        assert backend.get("t").extra["snapshot_deleted"] is False and backend.get("t").snapshot_deleted is False
        storage.conn.execute("UPDATE snapshots SET created_ns = 0 WHERE name = 't-success'")  # before the job
        storage.conn.commit()
        assert backend.get("t").extra["snapshot_deleted"] is True and backend.get("t").snapshot_deleted is True
    finally:
        storage.close()


def test_local_snapshot_list_and_describe_mark_an_earlier_run_without_job(home, home_store):
    """Plain `snapshot list` and `snapshot describe` mark an earlier run's snapshot as `--job` does
    (one rule, Backend._mark_earlier_runs; the local backend reads every uid in one query)."""
    from dtrain.backends.local.backend import LocalBackend

    first = _succeeded_with_snapshot(home_store, "t")
    storage = Storage(home)
    try:
        storage.create_volume("v", size="1Mi")
        storage.create_snapshot("v", name="old", job="t", job_uid=first)
        home_store.set_status("t", "Deleted", "purged")
        home_store.purge("t")
        second = _succeeded_with_snapshot(home_store, "t")
        storage.create_snapshot("v", name="new", job="t", job_uid=second)
        backend = LocalBackend(home, storage=storage)
        assert {s.name: s.earlier_run for s in backend.list_snapshots()} == {"old": True, "new": False}
        assert backend.get_snapshot("old").earlier_run and not backend.get_snapshot("new").earlier_run
    finally:
        storage.close()

"""A job's data sources: every mounted volume whose content was a snapshot's when the job started
(restored from it, or its latest snapshot taken) is recorded then, whatever the job does at its
end, and `describe job` (text, --json, the SDK, the HTTP record, the lineage graph) says so, marking
a snapshot or volume deleted since. And the devices each rank ran on stay shown after the job ends."""

from __future__ import annotations

import sqlite3

import pytest

from conftest import job_store
from dtrain import Client, JobSpec


def _head(dt, name: str) -> dict[str, str]:
    """`describe job NAME`'s header lines, label -> value."""
    out = dt("describe", "job", name).stdout
    return dict(line.split(": ", 1) for line in out.split("\nSpec:")[0].splitlines() if ": " in line)


@pytest.mark.slow
def test_a_job_on_a_restored_volume_says_which_snapshot_its_data_came_from(dt, home):
    dt("volume", "create", "data")
    dt("volume", "create", "scratch")  # never snapshotted: no source
    dt("submit", "prep", "--pvc", "data:/data", "--", "sh", "-c", "echo v1 > /data/x")
    dt("wait", "prep")
    dt("snapshot", "create", "data", "--name", "data-v1")
    dt("snapshot", "restore", "data-v1", "--to", "retrain-data")
    # no --snapshot-on-success: before, nothing recorded where its data came from
    dt("submit", "retrain", "--pvc", "retrain-data:/data", "--pvc", "scratch:/s", "--", "sh", "-c",
       "cat /data/x && echo v2 > /data/x")
    dt("wait", "retrain")

    info = dt.json("describe", "job", "retrain")
    assert info["data_sources"] == [{"volume": "retrain-data", "snapshot": "data-v1", "snapshot_deleted": False,
                                     "volume_deleted": False}]
    assert info["source_snapshot"] == "data-v1"
    assert _head(dt, "retrain")["Started from snapshot"] == "data-v1 on volume retrain-data"
    assert "Started from snapshot" not in _head(dt, "prep")  # its volume held no snapshot's content
    job = Client(home=home).get("retrain")
    assert [(d.volume, d.snapshot) for d in job.data_sources] == [("retrain-data", "data-v1")]

    # recorded at the start: a snapshot taken later does not rewrite it, a delete marks it
    dt("snapshot", "create", "retrain-data", "--name", "later")
    dt("snapshot", "delete", "data-v1")
    info = dt.json("describe", "job", "retrain")
    assert info["data_sources"] == [{"volume": "retrain-data", "snapshot": "data-v1", "snapshot_deleted": True,
                                     "volume_deleted": False}]
    assert _head(dt, "retrain")["Started from snapshot"] == "data-v1 (deleted) on volume retrain-data"
    dt("volume", "delete", "retrain-data")
    assert _head(dt, "retrain")["Started from snapshot"] == "data-v1 (deleted) on volume retrain-data (deleted)"

    # a new snapshot that takes the deleted one's name is not the one the job started from
    dt("snapshot", "create", "scratch", "--name", "data-v1")
    assert dt.json("describe", "job", "retrain")["data_sources"][0]["snapshot_deleted"] is True


@pytest.mark.slow
def test_each_mounted_volume_with_a_snapshot_is_a_source_and_the_snapshot_on_success_records_its_own(dt):
    for volume in ("a", "b", "c"):
        dt("volume", "create", volume)
    dt("snapshot", "create", "a", "--name", "a-v1")
    dt("snapshot", "create", "b", "--name", "b-v1")
    dt("snapshot", "restore", "a-v1", "--to", "a2")
    dt("submit", "train", "--pvc", "c:/c", "--pvc", "a2:/a", "--pvc", "b:/b", "--snapshot-on-success", "b",
       "--", "true")
    dt("wait", "train")
    info = dt.json("describe", "job", "train")
    assert [(d["volume"], d["snapshot"]) for d in info["data_sources"]] == [("a2", "a-v1"), ("b", "b-v1")]
    assert info["source_snapshot"] == "b-v1"  # the source of the volume it snapshotted, as its snapshot says
    snap = dt.json("snapshot", "describe", info["snapshot"])
    assert snap["source_snapshot"] == "b-v1" and snap["job"] == "train"
    assert _head(dt, "train")["Started from snapshot"] == "a-v1 on volume a2, b-v1 on volume b"


def test_the_http_record_and_the_lineage_graph_show_every_source(dt, home):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain.server.app import create_app

    dt("volume", "create", "a")
    dt("volume", "create", "b")
    dt("snapshot", "create", "a", "--name", "a-v1")
    dt("snapshot", "create", "b", "--name", "b-v1")
    dt("submit", "two", "--pvc", "a:/a", "--pvc", "b:/b", "--", "true")
    dt("wait", "two")
    dt("snapshot", "delete", "b-v1")
    with TestClient(create_app(lambda: Client(home=home), sample_every=3600), base_url="http://127.0.0.1:8000") as http:
        job = http.get("/api/v1/jobs/two").json()
        assert job["data_sources"] == [
            {"volume": "a", "snapshot": "a-v1", "snapshot_deleted": False, "volume_deleted": False},
            {"volume": "b", "snapshot": "b-v1", "snapshot_deleted": True, "volume_deleted": False}]
        graph = http.get("/api/v1/lineage").json()
    edges = {(e["source"], e["label"], e["target"]) for e in graph["edges"]}
    assert {("snapshot:a-v1", "started", "job:two"), ("snapshot:b-v1", "started", "job:two")} <= edges
    nodes = {n["id"]: n for n in graph["nodes"]}
    assert nodes["snapshot:b-v1"]["status"] == "gone" and nodes["snapshot:a-v1"]["status"] is None


def test_a_state_database_of_before_gains_the_columns_and_its_jobs_read_as_before(home):
    with sqlite3.connect(home / "state.db") as conn:  # the jobs table as it was, one finished job in it
        from dtrain.backends.local import store as store_module
        old = store_module.SCHEMA.replace("    exit_code INTEGER,\n    data_sources TEXT,\n    ran_on TEXT,\n    last_started REAL\n",
                                          "    exit_code INTEGER\n")
        assert old != store_module.SCHEMA
        conn.executescript(old)
    with job_store(home) as store:
        store.insert_job(JobSpec(name="old", command=("true",)), cwd="/", node="here")
        store.update("old", source_snapshot="s1")
    info = Client(home=home).get("old")
    assert info.data_sources == () and info.extra["source_snapshot"] == "s1"


@pytest.mark.slow
def test_after_the_job_ends_each_rank_shows_the_devices_it_ran_on(dt_gpus):
    dt = dt_gpus
    dt("submit-dist", "g", "--gpu", "1", "--processes", "2", "--", "true")
    dt("wait", "g")
    info = dt.json("describe", "job", "g")
    assert info["gpus_allocated"] == 0  # released: held by nothing now
    started = next(e["message"] for e in info["events"] if e["message"].startswith("started on"))
    ran = sorted(d for p in info["processes"] for d in p["devices"])
    assert len(ran) == 2 and started == "started on " + ", ".join(f"GPU {d}" for d in ran)
    table = dt("describe", "job", "g").stdout.split("Processes:")[1].split("Events:")[0]
    assert all(f" {d} " in table for d in ran), table


def test_kubernetes_describes_the_pvcs_restored_from_a_volume_snapshot():
    from dtrain.backends.kubernetes.backend import KubernetesBackend
    from dtrain.backends.kubernetes.config import KubernetesConfig
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
    from dtrain.spec import parse_pvc

    cluster = FakeCluster()
    server = FakeKubeServer(cluster).start()
    client = server.api_client()
    try:
        backend = KubernetesBackend(KubernetesConfig(project="lanes", image="ghcr.io/example/lanes:1"),
                                    api_client=client)
        backend.create_volume("data", size="1Gi")
        backend.create_volume("scratch", size="1Gi")
        backend.create_snapshot("data", name="data-v1")
        cluster.ready_snapshots()
        backend.restore_snapshot("data-v1", to="retrain-data")
        backend.submit(JobSpec(name="retrain", command=("python", "train.py"), project="lanes",
                               volumes=(parse_pvc("retrain-data:/mnt"), parse_pvc("scratch:/s"))))
        info = backend.get("retrain")
        assert [(d.volume, d.snapshot, d.snapshot_deleted) for d in info.data_sources] == [
            ("retrain-data", "data-v1", False)]
        assert info.to_dict()["source_snapshot"] == "data-v1"
        backend.delete_snapshot("data-v1")
        assert backend.get("retrain").data_sources[0].snapshot_deleted is True
    finally:
        client.close()
        server.close()

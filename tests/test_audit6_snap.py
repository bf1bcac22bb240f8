"""Audit 6, snapshots and lineage: what a Run:AI + NetApp user hits when snapshotting volumes."""

from __future__ import annotations

import time

import pytest

from conftest import Dtrain


def _running(dt: Dtrain, name: str, *args: str) -> None:
    dt("submit", name, *args, "--", "sleep", "60")
    dt.wait_for(name, {"Running"})


def test_a_snapshot_of_a_volume_a_running_job_writes_says_it_is_not_a_point_in_time(dt: Dtrain):
    dt("volume", "create", "work")
    _running(dt, "writer", "--pvc", "work:/mnt")
    _running(dt, "reader", "--pvc", "work:/mnt:ro")
    proc = dt("snapshot", "create", "work", "--name", "during", "--json")
    assert dt.json("snapshot", "describe", "during")["volume"] == "work"  # taken all the same, as NetApp does
    assert proc.stdout.lstrip().startswith("{")  # the warning stays out of the JSON
    warning = [line for line in proc.stderr.splitlines() if "point in time" in line]
    assert len(warning) == 1 and "writer" in warning[0], proc.stderr
    assert "reader" not in warning[0]  # a read-only mount changes nothing
    assert "dtrain suspend writer" in warning[0]


def test_a_snapshot_linked_to_a_job_still_running_says_so(dt: Dtrain):
    dt("volume", "create", "out")
    _running(dt, "train", "--pvc", "out:/mnt:ro")  # it does not write this volume: only the link is early
    proc = dt("snapshot", "create", "out", "--name", "early", "--job", "train")
    assert "still Running" in proc.stderr and "'early'" in proc.stderr, proc.stderr
    assert "point in time" not in proc.stderr
    assert dt.json("snapshot", "describe", "early")["job"] == "train"


def test_a_snapshot_of_a_volume_nobody_writes_warns_of_nothing(dt: Dtrain):
    dt("volume", "create", "quiet")
    dt("submit", "done", "--pvc", "quiet:/mnt", "--", "true")
    dt.wait_for("done", {"Succeeded"})
    _running(dt, "elsewhere", "--pvc", "local:1Gi:/mnt")  # another volume's writer
    proc = dt("snapshot", "create", "quiet", "--job", "done")
    assert proc.stderr == "", proc.stderr


@pytest.mark.slow
def test_the_lineage_draws_a_deleted_snapshots_job_as_deleted_and_a_purged_one_as_gone(dt: Dtrain, tmp_path):
    """The lineage reads a page of jobs without the Deleted ones: a snapshot's deleted job was drawn
    with no status, as a job that was simply not read; now it is read by name (Deleted), and a
    purged one, whose record is gone, reads "gone" as a deleted snapshot or volume does."""
    from server_util import ServerProcess

    dt("volume", "create", "v", "--size", "1Mi")
    for job in ("kept", "deleted", "purged"):
        dt("submit", job, "--pvc", "v:/mnt", "--", "true")
        dt("wait", job)
        dt("snapshot", "create", "v", "--name", f"of-{job}", "--job", job)
    dt("delete", "deleted")
    dt("delete", "purged", "--purge")
    server = ServerProcess(dt.home, cwd=tmp_path)
    try:
        body = server.http.get("/api/v1/lineage").json()
    finally:
        server.stop()
    nodes = {n["id"]: n["status"] for n in body["nodes"]}
    edges = {(e["source"], e["label"], e["target"]) for e in body["edges"]}
    assert nodes["job:kept"] == "Succeeded" and nodes["job:deleted"] == "Deleted" and nodes["job:purged"] == "gone"
    assert {("job:deleted", "results", "snapshot:of-deleted"), ("job:purged", "results", "snapshot:of-purged")} <= edges

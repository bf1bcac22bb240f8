"""The '(deleted)' marks (a job's snapshot, a volume's origin snapshot, a snapshot's volume and source
snapshot, deleted since) are typed fields of their records, of the HTTP API's and of its OpenAPI schema,
and the dashboard reads them there: they were only in `extra`, which keeps a copy for one release."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import dtrain
from dtrain.backends.records import JobInfo, SnapshotInfo, VolumeInfo

REPO = Path(__file__).resolve().parents[1]
MARKS = {JobInfo: ["snapshot_deleted"], VolumeInfo: ["origin_snapshot_deleted"],
         SnapshotInfo: ["volume_deleted", "source_snapshot_deleted"]}


def test_the_marks_are_fields_of_the_records_and_of_the_openapi_schema():
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    import dataclasses

    from dtrain.server.app import create_app

    schema = create_app(lambda: None, sample_every=3600).openapi()["components"]["schemas"]
    for record, marks in MARKS.items():
        fields = {f.name: f for f in dataclasses.fields(record)}
        wire = {JobInfo: "Job", VolumeInfo: "Volume", SnapshotInfo: "Snapshot"}[record]
        for mark in marks:
            assert fields[mark].type in (bool, "bool") and fields[mark].default is False, (record, mark)
            said = schema[wire]["properties"][mark]
            assert said["type"] == "boolean" and said["default"] is False and said["description"], (wire, said)


def test_a_local_volume_and_snapshot_say_their_marks_in_fields_and_in_extra_for_one_release(home):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain.server.app import create_app

    client = dtrain.Client(home=home)
    client.create_volume("data", size="1Mi")
    client.create_snapshot("data", name="a")
    client.restore_snapshot("a", to="b")
    client.create_snapshot("b", name="b1")
    client.delete_snapshot("a")
    client.delete_volume("data")
    http = TestClient(create_app(lambda: dtrain.Client(home=home), sample_every=3600), base_url="http://127.0.0.1:8000")
    volume, wired = client.get_volume("b"), http.get("/api/v1/volumes/b").json()
    assert volume.origin_snapshot_deleted is True and wired["origin_snapshot_deleted"] is True
    assert volume.extra["origin_snapshot_deleted"] is True and wired["extra"]["origin_snapshot_deleted"] is True
    snaps = {s.name: s for s in client.list_snapshots()}
    wired = {s["name"]: s for s in http.get("/api/v1/snapshots").json()}
    assert {n: (s.volume_deleted, s.source_snapshot_deleted) for n, s in snaps.items()} == {"b1": (False, False)}
    assert (wired["b1"]["volume_deleted"], wired["b1"]["source_snapshot_deleted"]) == (False, False)
    client.delete_volume("b")
    snap, wired = client.get_snapshot("b1"), http.get("/api/v1/snapshots/b1").json()
    assert snap.volume_deleted is True and wired["volume_deleted"] is True
    assert snap.extra["volume_deleted"] is True and wired["extra"]["volume_deleted"] is True
    assert snap.to_dict()["volume_deleted"] is True


def test_the_dashboard_reads_the_marks_from_the_fields():
    """app.js read x.extra.volume_deleted, x.extra.origin_snapshot_deleted and x.extra.source_snapshot_deleted
    (and marked no deleted snapshot on a job's page)."""
    app = (REPO / "dtrain" / "server" / "static" / "app.js").read_text()
    marks = [m for marks in MARKS.values() for m in marks]
    assert [m for m in marks if re.search(r"extra\." + m, app)] == []
    assert all(re.search(r"\b[xj]\." + m + r"\b", app) for m in marks), marks

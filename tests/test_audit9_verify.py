"""`snapshot verify` on a full disk: it says what it left undone, at every door (audit 9, verify)."""

from __future__ import annotations

import json
import os
import sqlite3

import pytest

from conftest import Dtrain, fill, tmpfs, usage_line


def _corrupt(storage, snapshot: str) -> str:
    """Flip bytes inside the first stored object of `snapshot`; its digest."""
    entries = storage.engine.load(storage.get_snapshot(snapshot).id).entries
    digest = next(e.chunks[0] for e in entries if e.chunks)
    path, offset, _ = storage.engine.packs.locate(digest)
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset + 100)
        f.write(b"flipped bits")
    return digest


def test_cli_verify_on_a_full_disk_says_tidying_was_skipped(tmp_path):
    """On a full disk verify only checks; it reported "garbage_objects: 0" as if it had looked. Now
    it says the tidying was skipped and how to have it, and that leftovers were not looked for."""
    with tmpfs(tmp_path / "disk", "size=3m") as disk:
        dt = Dtrain(disk / "home")
        dt("volume", "create", "data", "--size", "1Mi")
        (dt.home / "volumes" / "data" / "data" / "weights.bin").write_bytes(os.urandom(50_000))
        dt("snapshot", "create", "data", "--name", "first")
        fill(disk)
        try:
            text = dt("snapshot", "verify").stdout
            assert "skipped: tidying skipped" in text and "free space there" in text
            assert "leftovers: not looked for" in text and "garbage_objects" not in text and "ok: True" in text
            report = dt.json("snapshot", "verify", "first")
            assert report["ok"] and "tidying skipped" in report["skipped"]
        finally:
            (disk / "fill").unlink()
        text = dt("snapshot", "verify").stdout
        assert "skipped" not in text and "garbage_objects: 0" in text
        assert dt.json("snapshot", "verify", "first")["skipped"] is None


def test_server_verify_on_a_disk_that_filled_since_it_started_checks_and_says_so(tmp_path):
    """A long-lived server's connections were opened writable; when the disk filled later, its verify
    tried to tidy first and answered 507 ("the state database could not be opened or written"),
    though verify is a check. Now it checks, reports the damage it finds, leaves the store as it is
    and says what it skipped, as the CLI does; with room again it tidies and sets damage aside."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain.client import Client
    from dtrain.server.app import create_app
    from dtrain.storage import Storage

    with tmpfs(tmp_path / "disk", "size=3m") as disk:
        dt = Dtrain(disk / "home")
        dt("volume", "create", "data", "--size", "1Mi")
        (dt.home / "volumes" / "data" / "data" / "weights.bin").write_bytes(os.urandom(50_000))
        dt("snapshot", "create", "data", "--name", "first")
        storage = Storage(dt.home)
        try:
            digest = _corrupt(storage, "first")
        finally:
            storage.close()
        app = create_app(lambda: Client(home=dt.home), sample_every=3600)
        with TestClient(app, base_url="http://127.0.0.1:8000") as api:
            assert api.get("/api/v1/snapshots").status_code == 200  # this thread's Client is open
            fill(disk)
            try:
                for path in ("/api/v1/snapshots/first/verify", "/api/v1/verify"):
                    answer = api.post(path)
                    assert answer.status_code == 200, answer.text
                    report = answer.json()
                    assert not report["ok"] and [d["problem"] for d in report["damaged"]] == ["corrupt"]
                    assert "tidying skipped" in report["skipped"]
                cli = dt("snapshot", "verify", "first", "--json", check=False)  # the same answer
                assert cli.returncode == 1 and json.loads(cli.stdout)["skipped"] == report["skipped"]
            finally:
                (disk / "fill").unlink()
            storage = Storage(dt.home)
            try:
                assert storage.engine.packs.locate(digest) is not None  # not set aside: nothing was written
            finally:
                storage.close()
            report = api.post("/api/v1/snapshots/first/verify").json()
            assert report["skipped"] is None and not report["ok"]
            again = api.post("/api/v1/snapshots/first/verify").json()["damaged"][0]
            assert again["earlier"]  # set aside by the verify that had room


def test_verify_whose_setting_aside_the_disk_refuses_reports_what_it_found(tmp_path, monkeypatch):
    """The disk filling between the tidying and the setting aside of a corrupt object raised a
    storage error and lost the findings; they are reported, and `skipped` names what was not done."""
    from dtrain.storage import Storage

    storage = Storage(tmp_path / "home")
    try:
        vol = storage.create_volume("data")
        (vol.path / "w.bin").write_bytes(os.urandom(50_000))
        storage.create_snapshot("data", name="one")
        digest = _corrupt(storage, "one")

        def full(*_args, **_kwargs):
            raise sqlite3.OperationalError("database or disk is full")

        monkeypatch.setattr(storage.engine.packs, "mark_damaged", full)
        report = storage.verify("one")
        assert [(d.object, d.problem) for d in report.damaged] == [(digest, "corrupt")]
        assert report.skipped is not None and "setting aside skipped" in report.skipped
        assert storage.engine.packs.locate(digest) is not None  # still indexed: the next verify finds it anew
        monkeypatch.undo()
        report = storage.verify("one")
        assert report.skipped is None and [d.problem for d in report.damaged] == ["corrupt"]
        assert storage.verify("one").damaged[0].earlier
    finally:
        storage.close()


def test_snapshot_diff_with_one_snapshot_compares_with_its_volume_as_it_is_now(tmp_path):
    """storage.md says `dtrain snapshot diff SNAP` compares a snapshot with its volume now; the CLI
    required a second snapshot (argparse: "the following arguments are required: b"), the HTTP API
    its `to`. Now both compare with the live volume; one whose volume was deleted, or re-created
    under the same name (another volume), is refused in one line instead of compared."""
    dt = Dtrain(tmp_path / "home")
    dt("volume", "create", "data")
    folder = dt.home / "volumes" / "data" / "data"
    (folder / "a.txt").write_text("one\n")
    dt("snapshot", "create", "data", "--name", "s1")
    (folder / "a.txt").write_text("two!\n")
    (folder / "b.txt").write_text("new\n")
    changes = {c["path"]: c["kind"] for c in dt.json("snapshot", "diff", "s1")}
    assert changes["a.txt"] == "modified" and changes["b.txt"] == "added"
    assert dt("snapshot", "diff", "s1").stdout.splitlines()[-1] == f"{len(changes)} changes"  # names.counted
    dt("volume", "delete", "data")
    for again in (False, True):  # deleted; then another volume of that name
        if again:
            dt("volume", "create", "data")
        line = usage_line(dt("snapshot", "diff", "s1", check=False))
        assert "'data', which has been deleted" in line and "dtrain snapshot diff s1 OTHER" in line


def test_http_diff_without_to_compares_with_the_live_volume_as_the_cli_does(tmp_path):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain.client import Client
    from dtrain.server.app import create_app

    dt = Dtrain(tmp_path / "home")
    dt("volume", "create", "data")
    dt("snapshot", "create", "data", "--name", "s1")
    (dt.home / "volumes" / "data" / "data" / "b.txt").write_text("new\n")
    app = create_app(lambda: Client(home=dt.home), sample_every=3600)
    with TestClient(app, base_url="http://127.0.0.1:8000") as api:
        answer = api.get("/api/v1/snapshots/s1/diff")
        assert answer.status_code == 200, answer.text
        assert answer.json() == dt.json("snapshot", "diff", "s1")
        dt("volume", "delete", "data")
        refused = api.get("/api/v1/snapshots/s1/diff")
        assert refused.status_code == 404
        assert refused.json()["error"] == usage_line(dt("snapshot", "diff", "s1", check=False))


def test_restore_onto_the_snapshots_own_volume_names_the_in_place_restore(tmp_path):
    """`snapshot restore S --to VOL` where VOL is S's own volume said only "already exists: ... delete it
    first", steering a user who wants a roll-back into deleting the volume; it now names --in-place."""
    dt = Dtrain(tmp_path / "home")
    dt("volume", "create", "data")
    dt("volume", "create", "other")
    dt("snapshot", "create", "data", "--name", "s1")
    line = usage_line(dt("snapshot", "restore", "s1", "--to", "data", check=False))
    assert "dtrain snapshot restore s1 --in-place" in line and "delete" not in line
    assert "delete it first" in usage_line(dt("snapshot", "restore", "s1", "--to", "other", check=False))
    dt("snapshot", "restore", "s1", "--in-place")  # what the line says works


def test_describe_job_marks_its_snapshot_deleted_once_deleted(tmp_path):
    """After `snapshot delete` of a job's --snapshot-on-success snapshot, `describe job` still said
    "Snapshot: NAME" as if it were there (its data sources were marked, not it). Now "(deleted)", and
    `extra.snapshot_deleted` in --json; a new snapshot that took the name is another one."""
    dt = Dtrain(tmp_path / "home")
    dt("volume", "create", "w")
    dt("submit", "j1", "--pvc", "w:/mnt", "--snapshot-on-success", "w", "--", "true")
    dt("wait", "j1")
    info = dt.json("describe", "job", "j1")
    snap = info["snapshot"]
    assert snap and info["extra"]["snapshot_deleted"] is False
    assert f"Snapshot: {snap}\n" in dt("describe", "job", "j1").stdout
    dt("snapshot", "delete", snap)
    assert f"Snapshot: {snap} (deleted)" in dt("describe", "job", "j1").stdout
    dt("snapshot", "create", "w", "--name", snap)  # the name again, not the job's
    assert dt.json("describe", "job", "j1")["extra"]["snapshot_deleted"] is True

"""Local storage: a killed process's staging folders are judged by pid *and* start time (a reused
pid keeps nothing for good); `snapshot verify` checks what is stored on a full disk."""

from __future__ import annotations

import os

from conftest import Dtrain, fill, tmpfs


def test_snapshot_verify_checks_what_is_stored_on_a_full_home_disk(tmp_path):
    """verify tidied leftovers first (a write transaction on state.db, a sweep of index.db), so on
    a full disk it refused with "the state database could not be opened or written", though a
    check only reads. Now it checks, reports, and changes nothing."""
    with tmpfs(tmp_path / "disk", "size=3m") as disk:
        dt = Dtrain(disk / "home")
        dt("volume", "create", "data", "--size", "1Mi")
        (dt.home / "volumes" / "data" / "data" / "weights.bin").write_bytes(os.urandom(50_000))
        dt("snapshot", "create", "data", "--name", "first")
        dbs = {p: p.read_bytes() for p in (dt.home / "state.db", dt.home / "store" / "index.db")}
        assert not any(p.with_name(p.name + "-wal").exists() for p in dbs)  # all in the main files
        fill(disk)
        try:
            report = dt.json("snapshot", "verify", "first")
            assert report["ok"] and report["snapshots"] == ["first"] and report["objects"] >= 1
            assert dt.json("snapshot", "verify")["ok"]
            assert "first" in dt("snapshot", "list").stdout and "data" in dt("volume", "list").stdout
            assert dt.json("snapshot", "describe", "first")["name"] == "first"
            assert {p: p.read_bytes() for p in dbs} == dbs
        finally:
            (disk / "fill").unlink()
        assert dt.json("snapshot", "verify", "first")["ok"]  # with room again: as ever

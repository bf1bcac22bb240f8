"""Local backend: what a full disk must not take from the user."""

from __future__ import annotations

import os

from conftest import Dtrain, assert_usage_error, rank_record, tmpfs
from dtrain.procs import Ident


def _fill(folder) -> None:
    """Use up every free block of the file system holding `folder`."""
    with open(folder / "fill", "wb") as f:
        block = b"\0" * 65536
        try:
            while True:
                f.write(block)
                f.flush()
        except OSError:
            pass
    assert os.statvfs(folder).f_bavail == 0


def test_delete_stops_a_running_job_even_when_the_home_disk_is_full(tmp_path):
    with tmpfs(tmp_path / "disk", "size=8m") as disk:
        dt = Dtrain(disk / "home")
        dt("submit", "runaway", "--", "sleep", "300")
        rank = Ident.from_record(rank_record(dt.home, "runaway", 0))
        try:
            assert rank.alive()
            _fill(disk)
            # the job (say, one whose checkpoints filled the disk) is stopped although nothing can be recorded
            assert_usage_error(dt("delete", "runaway", check=False), "job 'runaway' was stopped",
                               "free space there (df -h) and run 'dtrain delete runaway' again")
            assert not rank.alive()
        finally:
            (disk / "fill").unlink(missing_ok=True)
            dt("delete", "runaway", check=False)
        assert dt.status("runaway") == "Deleted"  # recorded by the retry the line asked for
        assert not rank.alive()


def test_a_full_home_disk_still_lets_the_user_read_what_is_stored(tmp_path):
    """Opening a WAL database makes its -wal and -shm files, which a full disk refuses; `list`,
    `describe`, `logs` and the storage listings read the main file alone instead. Writes stay refused."""
    with tmpfs(tmp_path / "disk", "size=8m") as disk:
        dt = Dtrain(disk / "home")
        dt("volume", "create", "data", "--size", "1Mi")
        dt("snapshot", "create", "data", "--name", "first")
        dt("submit", "done", "--", "echo", "a line of output")
        dt.wait_for("done", {"Succeeded"})
        state = (dt.home / "state.db").read_bytes()
        _fill(disk)
        try:
            assert "done" in dt("list", "jobs").stdout
            assert dt.json("describe", "job", "done")["status"] == "Succeeded"
            assert dt("logs", "done").stdout == "a line of output\n"
            assert "first" in dt("snapshot", "list").stdout and "data" in dt("volume", "list").stdout
            assert_usage_error(dt("submit", "more", "--", "true", check=False), "state database",
                               "free space there (df -h) and retry")
            assert_usage_error(dt("logs", "done", "-f", check=False), "free space there")  # it would watch for good
            assert (dt.home / "state.db").read_bytes() == state
        finally:
            (disk / "fill").unlink()
        dt("submit", "more", "--", "true")  # space freed: the database is writable again
        assert {j["name"] for j in dt.json("list", "jobs")} == {"done", "more"}

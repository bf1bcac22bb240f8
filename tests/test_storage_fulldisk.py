"""A full home disk: the deletes that free it commit (the reserve, `db.room_to_free`), and a delete
whose freeing the disk put off says so and is finished by the next command with room."""

from __future__ import annotations

import os
import sys

import pytest
from conftest import Dtrain, fill, tmpfs

from dtrain import db

_LOGS = "import sys; sys.stdout.write('x' * 3_000_000 + '\\n')"  # 3 MB of log to free


@pytest.mark.slow  # a job run and a filled tmpfs: about 8 s
def test_a_purge_on_a_full_home_disk_commits_and_frees_the_jobs_logs(tmp_path):
    """`dtrain delete --purge` was refused on a full home disk ("the state database could not be
    opened or written"): it never gave up the reserve, which a home that never used volumes did not
    even have. The way out of a full disk is now the one that works."""
    with tmpfs(tmp_path / "disk", f"size={db.RESERVE_FROM + (8 << 20)}") as disk:
        dt = Dtrain(disk / "home")
        dt("submit", "j1", "--", sys.executable, "-c", _LOGS)
        dt("wait", "j1")
        assert (dt.home / db.RESERVE).stat().st_blocks * 512 == db.RESERVE_BYTES  # jobs alone make it
        fill(disk)
        assert dt("delete", "j1", "--purge").stdout.strip() == "The job 'j1' has been purged"
        assert not (dt.home / "jobs" / "j1").exists()
        assert dt.json("list", "jobs", "--show-deleted") == []

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

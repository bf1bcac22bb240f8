"""What the machine refuses (a full disk, a home that cannot be a folder) is one line and an exit
of 2, and loses nothing stored."""

from __future__ import annotations

import os

import pytest

from conftest import Dtrain, fill, tmpfs


@pytest.fixture
def small_disk(tmp_path):
    """A 6 MiB tmpfs, to fill."""
    with tmpfs(tmp_path / "disk", "size=6m") as mnt:
        yield mnt


def _fill(disk) -> None:
    fill(disk)


def test_a_full_disk_is_one_line_for_every_command_and_loses_nothing(small_disk):
    dt = Dtrain(small_disk / "home")
    dt("volume", "create", "v1", "--size", "1Gi")
    (dt.home / "volumes" / "v1" / "data" / "kept.txt").write_text("kept")
    _fill(small_disk)
    for args in (["volume", "create", "v2"], ["submit", "j1", "--", "echo", "hi"], ["project", "create", "p1"],
                 ["lanes", "synth", "--out", str(small_disk / "synth"), "--train", "4", "--test", "2"]):
        proc = dt(*args, check=False)
        assert proc.returncode == 2, (args, proc.stderr[-2000:])
        assert len(proc.stderr.strip().splitlines()) == 1 and "free space" in proc.stderr, (args, proc.stderr)
        assert "Traceback" not in proc.stderr
    # what only reads still answers (the database read alone, read-only: tests/test_local_leftovers.py)
    assert dt("list").returncode == 0 and "v1" in dt("volume", "list").stdout
    os.unlink(small_disk / "fill")
    listed = dt("volume", "list").stdout
    assert "v1" in listed and "v2" not in listed
    assert "j1" not in dt("list", "-A").stdout and "p1" not in dt("project", "list").stdout
    assert (dt.home / "volumes" / "v1" / "data" / "kept.txt").read_text() == "kept"
    dt("volume", "create", "v2")  # with space again, the same command works
    assert "v2" in dt("volume", "list").stdout


@pytest.mark.parametrize("home, message", [
    ("FILE", "the home folder FILE is a file, not a folder: give --home (or $DTRAIN_HOME) a folder, or move the "
             "file away"),
    ("/proc/no-such", "cannot make the home folder /proc/no-such: No such file or directory; give --home (or "
                      "$DTRAIN_HOME) a folder you can write"),
    ("FILE/x", "cannot make the home folder FILE/x: Not a directory; give --home (or $DTRAIN_HOME) a folder you "
               "can write"),
])
def test_a_home_that_cannot_be_a_folder_is_one_line(tmp_path, home, message):
    (tmp_path / "afile").write_text("not a folder")
    home, message = (x.replace("FILE", str(tmp_path / "afile")) for x in (home, message))
    proc = Dtrain(tmp_path / "unused")("--home", home, "list", check=False)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [f"dtrain: error: {message}"]
    assert (tmp_path / "afile").read_text() == "not a folder"

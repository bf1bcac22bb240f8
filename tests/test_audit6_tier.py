"""Audit 6, storage classes: moving a volume off a disk gone read-only, unwritable class folders,
and an update to the class the volume is already in."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from conftest import Dtrain, tmpfs
from test_volume_classes import describe, entries, fill, tree_hash


@pytest.fixture
def fast_mount(tmp_path):
    """A tmpfs (another file system than the home's) that the test can remount read-only."""
    with tmpfs(tmp_path / "tmpfs", "size=64m") as mnt:
        yield mnt


def remount(mnt: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(mnt)], check=True)


@pytest.fixture
def dtc(dt: Dtrain, fast_mount) -> Dtrain:
    (dt.home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"fast": str(fast_mount / "fast")}}))
    return dt


def test_moving_a_volume_off_a_disk_gone_read_only_succeeds_and_names_the_old_folder(dtc: Dtrain, fast_mount):
    dtc("volume", "create", "work", "--class", "fast")
    old = Path(describe(dtc, "work")["path"])
    fill(old)
    before = tree_hash(old)
    remount(fast_mount, "ro")  # a failing disk remounted read-only: the moment to move its volumes off
    try:
        moved = dtc("volume", "update", "work", "--class", "local", check=False)
        # The move committed: it says so (exit 0), and names the old folder it could not remove.
        assert moved.returncode == 0, moved.stderr
        assert "now in storage class 'local'" in moved.stdout
        assert str(old.parent) in moved.stderr and "remove it by hand" in moved.stderr
        assert "Traceback" not in moved.stderr
        vol = describe(dtc, "work")
        assert vol["storage_class"] == "local" and tree_hash(Path(vol["path"])) == before
        # Later commands are not stuck retrying the removal on a read-only disk.
        listed = dtc("volume", "list", check=False)
        assert listed.returncode == 0 and "work" in listed.stdout and listed.stderr == ""
        dtc("volume", "create", "other")
    finally:
        remount(fast_mount, "rw")
    dtc("snapshot", "create", "work", "--name", "after")


def test_a_move_killed_after_its_commit_on_a_read_only_disk_does_not_block_every_command(dtc: Dtrain, fast_mount):
    dtc("volume", "create", "work", "--class", "fast")
    fill(Path(describe(dtc, "work")["path"]))
    before = tree_hash(Path(describe(dtc, "work")["path"]))
    killed = Dtrain(dtc.home, {"DTRAIN_MOVE_KILL_AT": "committed"})("volume", "update", "work", "--class", "local",
                                                                     check=False)
    assert killed.returncode == -9, killed.stderr
    remount(fast_mount, "ro")
    try:
        listed = dtc("volume", "list", check=False)  # recovery cannot remove the old folder: it says so once
        assert listed.returncode == 0, listed.stderr
        assert "remove it by hand" in listed.stderr and str(fast_mount / "fast" / "work") in listed.stderr
        again = dtc("volume", "list", check=False)
        assert again.returncode == 0 and again.stderr == ""
        vol = describe(dtc, "work")
        assert vol["storage_class"] == "local" and tree_hash(Path(vol["path"])) == before
    finally:
        remount(fast_mount, "rw")
    assert entries(fast_mount / "fast") == {".dtrain-volumes", "work"}  # left, as the warning said


def test_a_class_folder_that_cannot_be_written_is_one_line(dt: Dtrain, fast_mount):
    root = fast_mount / "fast"
    root.mkdir()
    (dt.home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"fast": str(root)}}))
    dt("volume", "create", "work")
    remount(fast_mount, "ro")  # an existing, empty folder dtrain may not mark as its own
    try:
        for args in (("volume", "create", "v", "--class", "fast"), ("volume", "update", "work", "--class", "fast")):
            proc = dt(*args, check=False)
            assert proc.returncode == 2 and "Traceback" not in proc.stderr, proc.stderr
            assert "storage class 'fast'" in proc.stderr and str(root) in proc.stderr
            assert len(proc.stderr.strip().splitlines()) == 1
    finally:
        remount(fast_mount, "rw")
    assert describe(dt, "work")["storage_class"] == "local"


def test_an_update_to_the_class_the_volume_is_in_says_nothing_moved(dtc: Dtrain):
    dtc("volume", "create", "work")
    path = describe(dtc, "work")["path"]
    plan = yaml.safe_load(dtc("volume", "update", "work", "--class", "local", "--dry-run").stdout)
    assert plan["method"].startswith("none")  # it planned a 'rename' of the folder onto itself
    same = dtc("volume", "update", "work", "--class", "local")
    assert "already in storage class 'local'" in same.stdout and "nothing moved" in same.stdout
    assert dtc.json("volume", "update", "work", "--class", "local")["extra"]["moved"] is False
    assert describe(dtc, "work")["path"] == path
    moved = dtc.json("volume", "update", "work", "--class", "fast")
    assert moved["extra"]["moved"] is True and moved["storage_class"] == "fast"
    assert "is now in storage class 'local'" in dtc("volume", "update", "work", "--class", "local").stdout


@pytest.mark.slow
def test_a_class_whose_disk_is_not_mounted_is_refused_not_claimed_again(dtc: Dtrain, fast_mount):
    """The empty mount point of an unmounted class disk looked like a new class folder: a move or a
    create there went to the disk beneath, hidden (Lost) once the class's disk was mounted again."""
    dtc("volume", "create", "kept", "--class", "fast")
    dtc("volume", "create", "work")
    dtc("volume", "update", "work", "--class", "fast")
    dtc("volume", "update", "work", "--class", "local")
    subprocess.run(["umount", "-l", str(fast_mount)], check=True)
    try:
        (fast_mount / "fast").mkdir()  # the mount point's folder, empty on the disk beneath
        assert describe(dtc, "kept")["status"] == "Lost"
        for args in (("volume", "update", "work", "--class", "fast"), ("volume", "create", "new", "--class", "fast"),
                     ("volume", "update", "work", "--class", "fast", "--dry-run")):
            proc = dtc(*args, check=False)
            assert proc.returncode != 0 and "is its disk mounted?" in proc.stderr and "kept" in proc.stderr, args
            assert len(proc.stderr.strip().splitlines()) == 1
        assert describe(dtc, "work")["storage_class"] == "local"
        assert entries(fast_mount / "fast") == set()

        dtc("volume", "delete", "kept")  # no volume there now: the class's earlier use still counts
        proc = dtc("volume", "create", "new", "--class", "fast", check=False)
        assert proc.returncode != 0 and "is its disk mounted?" in proc.stderr
        (fast_mount / "fast" / ".dtrain-volumes").touch()  # the fix the message gives, for a folder emptied on purpose
        dtc("volume", "update", "work", "--class", "fast")
    finally:
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(fast_mount)], check=True)


def test_volume_create_help_says_a_local_size_is_not_enforced(dt: Dtrain):
    out = " ".join(dt("volume", "create", "--help").stdout.split())
    assert "not a quota" in out and "PVC's request" in out

"""Volumes and snapshots under concurrent commands and hostile volume content: what a job may
leave in its volume (1,000 nested folders), and a volume deleted or moved while a snapshot of it
is taken. Each test failed on the code before its fix."""

import os
from pathlib import Path

import pytest

from conftest import tmpfs
from dtrain.backends.local.backend import _disk_usage
from dtrain.errors import ConflictError
from dtrain.storage import Storage, folders
from dtrain.storage.testing import tree_state

DEPTH = 1200  # past Python's recursion limit (1,000 frames)


def _nest(folder: Path, depth: int = DEPTH) -> None:
    """`depth` nested folders with a file at the bottom, made relative to each parent (as a job may)."""
    folder.mkdir(exist_ok=True)
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(depth):
        os.mkdir("d", dir_fd=fd)
        child = os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(os.open("bottom", os.O_CREAT | os.O_WRONLY, 0o644, dir_fd=fd))
    os.close(fd)


def test_a_volume_nested_1200_deep_is_measured_restored_in_place_moved_and_deleted(tmp_path):
    """shutil.rmtree and os.walk recurse once per folder level: with 1,200 nested folders in a
    volume, `volume list` (its used bytes), the in-place restore's removal of the old data, every
    command that collected its leftover, a move to another file system and `volume delete` each
    ended in a RecursionError traceback."""
    with tmpfs(tmp_path / "other", "size=64m") as other:
        storage = Storage(tmp_path / "home", classes={"other": other / "root"})
        vol = storage.create_volume("deep")
        _nest(vol.path / "a")
        (vol.path / "model.pt").write_text("epoch 1")
        storage.create_snapshot("deep", name="one")
        before = tree_state(vol.path)
        assert _disk_usage(vol.path) > 0
        _nest(vol.path / "b")  # a run after the snapshot nests more
        storage.restore_snapshot("one", in_place=True)  # removes the old data, 'b' included
        assert tree_state(vol.path) == before
        assert sorted(os.listdir(vol.path.parent)) == ["data"]
        moved = storage.update_volume("deep", storage_class="other")  # copy, verify, remove the old folder
        assert tree_state(moved.path) == before and not (storage.home / "volumes" / "deep").exists()
        storage.delete_volume("deep")
        assert os.listdir(other / "root") == [".dtrain-volumes"]
        storage.close()


def test_rmtree_never_follows_a_link_and_empties_read_only_folders(tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep").write_text("k")
    tree = tmp_path / "tree"
    tree.mkdir()
    _nest(tree, 300)
    os.symlink(outside, tree / "link")
    (tree / "ro").mkdir()
    (tree / "ro" / "f").write_text("x")
    (tree / "ro" / "sub").mkdir()
    os.chmod(tree / "ro" / "sub", 0)
    os.chmod(tree / "ro", 0o500)
    folders.rmtree(tree)
    assert not tree.exists() and os.listdir(outside) == ["keep"]

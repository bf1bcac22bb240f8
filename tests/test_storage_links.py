"""Hard links inside a volume: a snapshot reads one inode once, a restore and a move between
storage classes give back one inode under all its paths, and only real links are joined."""

import os
import stat
import uuid
from pathlib import Path

from dtrain.storage.engine import Engine
from dtrain.storage.manifest import Entry, hard_links
from dtrain.storage.move import copy_tree
from dtrain.storage.testing import CountingIO

CHUNK = 64 << 10


def snapshot(engine: Engine, src: Path, base=None):
    with engine.pin():
        manifest, stats = engine.capture(src, base=base)
        manifest_id = uuid.uuid4().hex
        engine.commit(manifest_id, manifest)
    return manifest_id, stats


def restore(engine: Engine, manifest_id: str, dest: Path) -> Path:
    with engine.pin():
        engine.materialize(engine.load(manifest_id), dest)
    return dest


def linked_tree(root: Path) -> int:
    """model.pt under three paths (one read-only folder among them), and a copy of it that is
    not a link; returns the linked file's size."""
    data = os.urandom(3 * CHUNK + 5)
    (root / "ckpt").mkdir(parents=True)
    (root / "best").mkdir()
    (root / "ckpt" / "model.pt").write_bytes(data)
    os.chmod(root / "ckpt" / "model.pt", 0o444)
    os.link(root / "ckpt" / "model.pt", root / "best" / "model.pt")
    os.link(root / "ckpt" / "model.pt", root / "latest.pt")
    (root / "copy.pt").write_bytes(data)
    os.chmod(root / "best", 0o555)
    return len(data)


def inodes(root: Path) -> dict[str, int]:
    return {p: os.lstat(root / p).st_ino for p in ("ckpt/model.pt", "best/model.pt", "latest.pt", "copy.pt")}


def assert_linked(root: Path, size: int) -> None:
    ino = inodes(root)
    assert ino["ckpt/model.pt"] == ino["best/model.pt"] == ino["latest.pt"] != ino["copy.pt"]
    assert os.lstat(root / "latest.pt").st_nlink == 3 and os.lstat(root / "copy.pt").st_nlink == 1
    assert (root / "latest.pt").read_bytes() == (root / "copy.pt").read_bytes() and os.path.getsize(root / "copy.pt") == size
    assert os.lstat(root / "best" / "model.pt").st_mode & 0o777 == 0o444


def test_a_hard_linked_file_is_read_once_and_restored_as_one_inode(tmp_path):
    src = tmp_path / "vol"
    size = linked_tree(src)
    io = CountingIO()
    engine = Engine(tmp_path / "store", chunk_size=CHUNK, durable=False, io=io)
    first, stats = snapshot(engine, src)
    assert stats.files == 4 and stats.bytes == 4 * size
    assert io.bytes_read == stats.read_bytes == 2 * size  # the linked file once, its copy once
    out = restore(engine, first, tmp_path / "r1")
    assert_linked(out, size)

    # The link broken apart: the next snapshot restores two files.
    os.unlink(src / "latest.pt")
    (src / "latest.pt").write_bytes(b"retrained")
    second, _ = snapshot(engine, src, base=engine.load(first))
    out = restore(engine, second, tmp_path / "r2")
    ino = inodes(out)
    assert ino["ckpt/model.pt"] == ino["best/model.pt"] != ino["latest.pt"]
    assert (out / "latest.pt").read_bytes() == b"retrained" and os.lstat(out / "best/model.pt").st_nlink == 2
    assert_linked(restore(engine, first, tmp_path / "r3"), size)  # the first point in time still has three


def test_only_one_inode_at_one_time_is_joined():
    """The same inode number with another ctime (a file removed mid-capture, its number taken
    by a new one), or a file that changed while read (ctime 0), stays a file of its own."""
    a = Entry("a", "file", 0o644, 0, 0, 10, 3, ["x"], 7, 100)
    assert hard_links([a, a._replace(path="b"), a._replace(path="c", ctime_ns=101),
                       a._replace(path="d", ctime_ns=0), a._replace(path="e", data=["y"])]) == {"b": "a"}
    assert hard_links([a, a._replace(path="b", ino=8)]) == {}


def test_a_copy_between_file_systems_keeps_hard_links(tmp_path):
    src = tmp_path / "vol"
    size = linked_tree(src)
    copy_tree(src, tmp_path / "copy")
    assert_linked(tmp_path / "copy", size)


def test_a_leftover_that_is_a_link_is_unlinked_not_followed_and_its_folder_keeps_its_mode(tmp_path):
    """A staging folder swapped out of a volume whose data folder was a link is that link: the
    clean-up removes the link, leaves its target alone and changes no folder's permissions."""
    from dtrain.storage import folders

    target = tmp_path / "outside"
    target.mkdir()
    (target / "keep").write_text("mine")
    parent = tmp_path / "vol"
    parent.mkdir(mode=0o755)
    link = parent / ".restore-999999-x"
    link.symlink_to(target)
    folders.rmtree(link)
    assert not os.path.lexists(link) and (target / "keep").read_text() == "mine"
    assert stat.S_IMODE(parent.stat().st_mode) == 0o755


def test_two_commands_removing_one_leftover_do_not_fail_each_other(tmp_path, monkeypatch):
    """Both found the same dead pid's staging folder; the other one removed part of it first."""
    from dtrain.storage import folders

    tree = tmp_path / ".tmp-999999-x"
    (tree / "data").mkdir(parents=True)
    for i in range(50):
        (tree / "data" / f"f{i}").write_text("x")
    unlink = os.unlink

    def raced(path, *args, **kw):  # the other command got to f7 first
        if os.fspath(path).endswith("f7"):
            unlink(path, *args, **kw)
            raise FileNotFoundError(2, "No such file or directory", path)
        return unlink(path, *args, **kw)

    monkeypatch.setattr(os, "unlink", raced)
    folders.rmtree(tree)
    monkeypatch.undo()
    assert not tree.exists()
    folders.rmtree(tree)  # already gone: nothing to do

"""dtrain.replace: a file is replaced whole, and never written through a link."""

from __future__ import annotations

import os
import stat

import pytest

from dtrain.replace import replace_file, replacing


def test_a_file_is_replaced_whole_with_the_usual_permissions(tmp_path):
    path = tmp_path / "run.json"
    path.write_text("old")
    old_umask = os.umask(0o027)
    try:
        replace_file(path, "new")
    finally:
        os.umask(old_umask)
    assert path.read_text() == "new"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # 0666 less the umask, as open() makes it
    replace_file(path, b"\x00bytes", durable=True)
    assert path.read_bytes() == b"\x00bytes"
    assert os.listdir(tmp_path) == ["run.json"]


def test_a_failed_write_leaves_the_old_file_and_no_temporary_one(tmp_path):
    path = tmp_path / "labels.json"
    path.write_text("old")
    with pytest.raises(RuntimeError):
        with replacing(path) as f:
            f.write("half")
            raise RuntimeError("killed mid-write")
    assert path.read_text() == "old" and os.listdir(tmp_path) == ["labels.json"]


def test_links_are_replaced_never_followed(tmp_path):
    """A link at the target is replaced by the new file; the file it pointed to is untouched. A
    link at any name the old code used for its temporary file changes nothing."""
    victim = tmp_path / "victim"
    victim.write_text("keep")
    folder = tmp_path / "shared-volume"
    folder.mkdir()
    (folder / "run.json").symlink_to(victim)
    for planted in (".run.json.tmp", "run.json.tmp", ".run.json.123.tmp"):
        (folder / planted).symlink_to(victim)
    replace_file(folder / "run.json", "new")
    assert victim.read_text() == "keep"
    assert not (folder / "run.json").is_symlink() and (folder / "run.json").read_text() == "new"
    assert len(os.listdir(folder)) == 4  # the planted links stay as they were, nothing else is left


def test_open_for_append_writes_only_a_regular_file_of_a_real_folder(tmp_path):
    import errno

    from dtrain.replace import open_for_append

    fd = open_for_append(tmp_path, "a.log")
    os.write(fd, b"one\n")
    os.close(fd)
    fd = open_for_append(tmp_path, "a.log")
    os.write(fd, b"two\n")
    os.close(fd)
    assert (tmp_path / "a.log").read_bytes() == b"one\ntwo\n"
    victim = tmp_path / "victim"
    victim.mkdir()
    (tmp_path / "linked-folder").symlink_to(victim)
    (tmp_path / "linked.log").symlink_to(victim / "x.log")
    os.mkfifo(tmp_path / "fifo.log")
    (tmp_path / "dir.log").mkdir()
    for folder, name, codes in [(tmp_path / "linked-folder", "a.log", (errno.ELOOP, errno.ENOTDIR)),
                                (tmp_path, "linked.log", (errno.ELOOP,)),
                                (tmp_path, "fifo.log", (errno.ENXIO,)),
                                (tmp_path, "dir.log", (errno.EISDIR,)),
                                (tmp_path / "missing", "a.log", (errno.ENOENT,))]:
        with pytest.raises(OSError) as err:
            open_for_append(folder, name)
        assert err.value.errno in codes and err.value.filename == str(folder / name), (name, err.value)
    assert list(victim.iterdir()) == []  # nothing made through either link

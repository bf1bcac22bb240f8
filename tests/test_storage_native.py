"""Native copy-on-write snapshots on a loop-mounted btrfs (needs root, mkfs.btrfs, loop devices):
a volume is a subvolume, a snapshot is a read-only subvolume snapshot, a restore a writable one,
and everything above the engine (names, lineage, restore --to/--in-place, diff, verify, delete)
works as on the content path."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import Dtrain
from conftest import fill as fill_disk
from dtrain.storage import Engine, Storage, btrfs
from dtrain.storage.testing import CountingIO, tree_state


def _mount_btrfs(folder: Path, size_mb: int = 300) -> bool:
    if os.geteuid() != 0 or not shutil.which("mkfs.btrfs"):
        return False
    image = folder.with_suffix(".img")
    with open(image, "wb") as f:
        f.truncate(size_mb << 20)
    folder.mkdir()
    ok = subprocess.run(["mkfs.btrfs", "-q", str(image)], capture_output=True).returncode == 0 and \
        subprocess.run(["mount", "-o", "loop", str(image), str(folder)], capture_output=True).returncode == 0
    image.unlink()  # the loop device keeps it alive while mounted
    return ok


@pytest.fixture
def on_btrfs(tmp_path):
    fs = tmp_path / "btrfs"
    if not _mount_btrfs(fs):
        pytest.skip("needs root, mkfs.btrfs and loop mounts to test btrfs subvolumes")
    yield fs
    subprocess.run(["umount", "--lazy", str(fs)], check=True)


def fill(path: Path) -> None:
    (path / "clips/0601").mkdir(parents=True)
    (path / "empty").mkdir()
    for i in range(3):
        (path / f"clips/0601/{i}.jpg").write_bytes(os.urandom(300_000))
    os.symlink("clips/0601/0.jpg", path / "first.jpg")


def test_subvolume_snapshots_restore_diff_verify_delete(on_btrfs):
    io = CountingIO()
    s = Storage(on_btrfs / "home", engine=Engine(on_btrfs / "home" / "store", io=io))
    vol = s.create_volume("data")
    assert btrfs.is_subvolume(vol.path) and s.get_volume("data").snapshots == "subvolume"
    fill(vol.path)
    before = tree_state(vol.path)
    one = s.create_snapshot("data", name="one", job="train-1")
    assert one.method == "subvolume" and one.added_bytes == 0
    assert io.bytes_read == 0  # nothing read or hashed on the snapshot's path
    assert [p.name for p in (on_btrfs / "home/store/subvols").iterdir()] != []

    (vol.path / "clips/0601/0.jpg").write_bytes(b"new content")
    os.chmod(vol.path / "clips/0601/1.jpg", 0o600)
    (vol.path / "added.txt").write_text("hi")
    s.create_snapshot("data", name="two")
    changes = {c.path: (c.kind, c.fields) for c in s.diff("one", "two")}
    assert changes["clips/0601/0.jpg"] == ("modified", ("content", "mtime"))
    assert changes["clips/0601/1.jpg"] == ("modified", ("mode",))
    assert changes["added.txt"] == ("added", ()) and "clips/0601/2.jpg" not in changes
    assert s.diff("two") == []  # the live volume is what "two" holds

    copy = s.restore_snapshot("one", to="copy")
    assert tree_state(copy.path) == before and btrfs.is_subvolume(copy.path)
    assert copy.origin_snapshot == "one"
    (copy.path / "written.txt").write_text("a restored volume is writable")
    s.restore_snapshot("one", in_place=True)
    assert tree_state(vol.path) == before and btrfs.is_subvolume(vol.path)

    first = s.verify()
    assert first.ok and first.objects >= 3 and io.bytes_read >= 900_000  # verify hashes every byte
    assert s.verify().ok  # the second pass compares against the recorded hashes

    subvols = set(os.listdir(on_btrfs / "home/store/subvols"))
    s.delete_snapshot("two")
    assert len(set(os.listdir(on_btrfs / "home/store/subvols"))) == len(subvols) - 1
    s.delete_volume("copy")
    assert not (on_btrfs / "home/volumes/copy").exists()
    s.close()


def test_verify_finds_a_file_changed_inside_a_read_only_snapshot(on_btrfs):
    s = Storage(on_btrfs / "home")
    vol = s.create_volume("data")
    fill(vol.path)
    snap = s.create_snapshot("data", name="one")
    assert s.verify().ok  # records the hashes
    sub = next((on_btrfs / "home/store/subvols").iterdir())
    subprocess.run(["btrfs", "property", "set", "-ts", str(sub), "ro", "false"], check=True)
    victim = sub / "clips/0601/2.jpg"
    st = victim.stat()
    with open(victim, "r+b") as f:  # bit rot: the bytes change, the metadata does not
        f.write(b"rot")
    os.utime(victim, ns=(st.st_atime_ns, st.st_mtime_ns))
    report = s.verify("one")
    assert not report.ok
    assert [(d.problem, d.hits) for d in report.damaged] == [("corrupt", (("one", "clips/0601/2.jpg"),))]
    assert snap.name == "one"
    s.close()


@pytest.mark.slow
def test_verify_on_a_disk_that_fills_reports_what_it_skipped_as_the_content_path_does(on_btrfs):
    """The first verify of a native snapshot records its files' hashes; on a disk with room for the
    databases but not for that record, the content path reports its findings and says what it
    skipped, while the native path failed whole ("No space left on device", exit 2) after hashing
    every file. Now it reports them too, records nothing, and records the hashes once there is room."""
    dt = Dtrain(on_btrfs / "home")
    dt("volume", "create", "data", "--size", "1Mi")
    vol = dt.home / "volumes/data/data"
    for i in range(20_000):  # ~1 MiB of hashes to record
        (vol / f"{i}.bin").write_bytes(os.urandom(100))
    dt("snapshot", "create", "data", "--name", "first")
    manifests = dt.home / "store/manifests"
    before = sorted(os.listdir(manifests))
    spacer = on_btrfs / "spacer"  # freed once the disk is full: room for the databases' writes only
    spacer.write_bytes(os.urandom(256 << 10))
    os.sync()
    fill_disk(on_btrfs)
    spacer.unlink()
    os.sync()
    try:
        text = dt("snapshot", "verify").stdout
        assert "skipped: setting aside skipped" in text and "hashes computed now were not recorded" in text
        assert "objects: 20000" in text and "ok: True" in text
        report = dt.json("snapshot", "verify", "first")
        assert report["ok"] and report["objects"] == 20_000 and "free space there" in report["skipped"]
        assert sorted(os.listdir(manifests)) == before  # no record, nor a part of one
    finally:
        (on_btrfs / "fill").unlink()
    report = dt.json("snapshot", "verify", "first")
    assert report["ok"] and report["skipped"] is None
    assert [n for n in os.listdir(manifests) if n not in before and n.endswith(".hashes.gz")] != []


def test_a_plain_folder_on_btrfs_falls_back_to_reflink_clones(on_btrfs):
    s = Storage(on_btrfs / "home")
    vol = s.create_volume("data")
    btrfs.delete(vol.path)  # a volume made before subvolumes: a plain folder
    vol.path.mkdir()
    fill(vol.path)
    assert s.get_volume("data").snapshots == "reflink"
    snap = s.create_snapshot("data", name="one")
    assert snap.method == "reflink"
    assert tree_state(s.restore_snapshot("one", to="copy").path) == tree_state(vol.path)
    s.close()


def test_volume_describe_says_which_path_the_volume_uses(on_btrfs, tmp_path):
    on = Dtrain(on_btrfs / "home")
    on("volume", "create", "fast")
    assert on.json("volume", "describe", "fast")["extra"]["snapshots"] == "subvolume"
    assert "subvolume" in on("volume", "describe", "fast").stdout
    off = Dtrain(tmp_path / "plain-home")  # the test's temp folder: not btrfs here
    off("volume", "create", "slow")
    assert off.json("volume", "describe", "slow")["extra"]["snapshots"] in ("reflink", "cas")


def test_reflink_path_clones_without_reading_and_verify_hashes_later(on_btrfs):
    """A plain folder on btrfs (or XFS): files are cloned into the store unread; chunk ids
    mark them unhashed; the first verify computes and records BLAKE3 hashes, a later one
    compares against them and finds a clone whose bytes changed."""
    src = on_btrfs / "vol"
    src.mkdir()
    fill(src)
    (src / "ckpt.pt").write_bytes(os.urandom((9 << 20) + 7))
    io = CountingIO()
    engine = Engine(on_btrfs / "store", io=io, chunk_size=4 << 20)
    assert engine.method == "reflink" and engine.defer_hashing
    with engine.pin():
        manifest, stats = engine.capture(src)
        engine.commit("one", manifest)
    ckpt = next(e for e in manifest.entries if e.path == "ckpt.pt")
    assert io.bytes_read == 0 and stats.read_bytes == 0  # nothing read on the snapshot's path
    assert len(ckpt.chunks) == 3 and all(c.startswith("u-") for c in ckpt.chunks)
    with engine.pin():
        engine.materialize(engine.load("one"), on_btrfs / "restored")
        first = engine.verify(["one"])
    assert tree_state(on_btrfs / "restored") == tree_state(src)
    assert not first.corrupt and io.bytes_read >= (9 << 20) + 900_000  # hashed now
    recorded = dict(engine.packs.conn.execute("SELECT id, digest FROM hashes"))
    assert set(ckpt.chunks) <= recorded.keys() and all(d.startswith("b3-") for d in recorded.values())

    pack, offset, _ = engine.packs.locate(ckpt.chunks[1])
    with open(pack, "r+b") as f:  # the stored clone rots
        f.seek(offset + 10)
        f.write(b"rot")
    with engine.pin():
        second = engine.verify(["one"])
    assert second.corrupt == {ckpt.chunks[1]}
    engine.close()


def test_a_content_snapshot_after_a_native_one_reads_the_volume_in_full(on_btrfs):
    """When the kernel refuses a subvolume snapshot (no rights), the content path runs with
    the native snapshot as base: it must not reuse its unhashed ids (no stored object has
    them), even for files whose lstat did not change."""
    vol = on_btrfs / "vol"
    btrfs.create(vol)
    fill(vol)
    engine = Engine(on_btrfs / "store")
    with engine.pin():
        native_manifest, stats = engine.capture(vol)
        engine.commit("native", native_manifest)
    assert stats.method == "subvolume"
    engine.subvols.enabled = False  # as where subvolume snapshots are not allowed
    with engine.pin():
        manifest, stats = engine.capture(vol, base=engine.load("native"))
        engine.commit("content", manifest)
        engine.materialize(engine.load("content"), on_btrfs / "restored")
    assert stats.method == "reflink" and stats.added_bytes >= 900_000
    assert tree_state(on_btrfs / "restored") == tree_state(vol)
    engine.close()


def test_a_subvolume_on_another_btrfs_takes_the_content_path(on_btrfs, tmp_path):
    other = tmp_path / "other"
    if not _mount_btrfs(other, size_mb=150):
        pytest.skip("a second loop mount failed")
    try:
        vol = other / "vol"
        btrfs.create(vol)
        fill(vol)
        engine = Engine(on_btrfs / "store")
        assert not engine.subvols.usable(vol)  # a snapshot could not land in this store
        with engine.pin():
            manifest, stats = engine.capture(vol)
            engine.commit("one", manifest)
            engine.materialize(engine.load("one"), on_btrfs / "restored")
        assert stats.method in ("reflink", "cas") and manifest.subvolume is None
        assert tree_state(on_btrfs / "restored") == tree_state(vol)
        engine.close()
    finally:
        subprocess.run(["umount", "--lazy", str(other)], check=True)

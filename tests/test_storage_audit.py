"""Faults found by an adversarial pass over the storage engine: a damaged store, links swapped in
during a restore, kills between steps, full disks, sparse files. Each test failed on the code
before its fix."""

import errno
import gzip
import os
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import tmpfs
from dtrain.errors import StorageError
from dtrain.storage import Storage
from dtrain.storage.engine import Engine
from dtrain.storage.fileio import FileIO
from dtrain.storage.testing import tree_state

CHUNK = 64 << 10


@pytest.fixture
def storage(tmp_path):
    s = Storage(tmp_path / "home")
    yield s
    s.close()


def _flip_byte(storage: Storage, snapshot: str, path: str) -> None:
    """Rot one byte of the stored object holding the start of `path` in `snapshot`."""
    entry = next(e for e in storage.engine.load(storage.get_snapshot(snapshot).id).entries if e.path == path)
    pack, offset, _ = storage.engine.packs.locate(entry.chunks[0])
    os.chmod(pack, 0o644)
    with open(pack, "r+b") as f:
        f.seek(offset + 10)
        byte = f.read(1)
        f.seek(offset + 10)
        f.write(bytes([byte[0] ^ 1]))


def _two_snapshots(storage: Storage) -> tuple[Path, dict, dict]:
    """A volume with snapshots 'one' (a.bin) and 'two' (a.bin, b.bin); the volume's folder and
    the trees the two hold."""
    vol = storage.create_volume("data")
    (vol.path / "a.bin").write_bytes(os.urandom(300_000))
    storage.create_snapshot("data", name="one")
    one = tree_state(vol.path)
    (vol.path / "b.bin").write_bytes(os.urandom(100_000))
    storage.create_snapshot("data", name="two")
    return vol.path, one, tree_state(vol.path)


# --- a damaged store ---------------------------------------------------------------------------
def test_a_restore_never_writes_an_object_whose_bytes_rotted(storage):
    """Before verify has seen the damage, a restore copied the rotten bytes into the new volume
    and said nothing."""
    path, one, _ = _two_snapshots(storage)
    os.unlink(path / "b.bin")
    (path / "c.txt").write_text("after")
    live = tree_state(path)
    _flip_byte(storage, "two", "b.bin")
    with pytest.raises(StorageError, match=r"'b\.bin'.*corrupt.*snapshot verify"):
        storage.restore_snapshot("two", to="copy")
    with pytest.raises(StorageError, match=r"'b\.bin'.*corrupt"):
        storage.restore_snapshot("two", in_place=True)
    assert tree_state(path) == live  # the volume as it was
    assert [v.name for v in storage.list_volumes()] == ["data"]
    assert sorted(os.listdir(storage.home / "volumes")) == ["data"]
    assert sorted(os.listdir(storage.home / "volumes/data")) == ["data"]
    assert tree_state(storage.restore_snapshot("one", to="first").path) == one  # undamaged: restores
    report = storage.verify()
    assert [(d.problem, d.hits) for d in report.damaged] == [("corrupt", (("two", "b.bin"),))]


def test_a_pack_cut_short_is_refused_by_a_restore(storage):
    path, one, _ = _two_snapshots(storage)
    entry = next(e for e in storage.engine.load(storage.get_snapshot("two").id).entries if e.path == "b.bin")
    pack, offset, _ = storage.engine.packs.locate(entry.chunks[0])
    os.chmod(pack, 0o644)
    os.truncate(pack, offset + 10)
    with pytest.raises(StorageError, match=r"'b\.bin'.*shorter than recorded"):
        storage.restore_snapshot("two", to="copy")
    assert tree_state(storage.restore_snapshot("one", to="first").path) == one


def _b_bin(field: str, value):
    """A hand edit of a manifest body: b.bin's `field` set to `value`."""
    def edit(body: dict) -> None:
        row = next(r for r in body["entries"] if r[0] == "b.bin")
        row[body["fields"].index(field)] = value
    return edit


def _add_rows(*rows):
    def edit(body: dict) -> None:
        b_bin = next(r for r in body["entries"] if r[0] == "b.bin")
        for path, kind, data in rows:
            body["entries"].append([path, kind, *b_bin[2:7], data, *b_bin[8:]])
        body["entries"].sort(key=lambda r: r[0])
    return edit


# Edited by hand, each of these crashed a restore half way (a traceback: TypeError from fchmod,
# fchown, utime or symlink) or failed it on a bare errno ("[Errno 20] Not a directory"), while
# verify called the snapshot sound; a file listed under a link to outside the volume was kept
# from being written there only by O_NOFOLLOW.
EDITS = {
    "mode-as-text": _b_bin("mode", "rwx"),
    "mode-too-big": _b_bin("mode", 0o7777777),
    "uid-as-name": _b_bin("uid", "root"),
    "mtime-as-text": _b_bin("mtime_ns", "yesterday"),
    "negative-size": _b_bin("size", -5),
    "content-as-text": _b_bin("data", "b3-0"),
    "path-twice": _add_rows(("b.bin", "file", ["b3-0"])),
    "folder-unlisted": _add_rows(("nodir/x.bin", "file", [])),
    "file-under-a-file": _add_rows(("b.bin/x.bin", "file", [])),
    "file-under-a-link-out": _add_rows(("out", "symlink", "OUTSIDE"), ("out/x.bin", "file", [])),
    "link-target-a-number": _add_rows(("out", "symlink", 42)),
    "subvolume-a-path": lambda body: body.update(subvolume="../../volumes/data/data"),
}


@pytest.mark.parametrize("spoil", ["truncate", "garbage", "not-gzip", "json-list", "escaping-path", *EDITS])
def test_a_damaged_manifest_is_named_by_verify_and_refused_by_restore_and_diff(storage, spoil, tmp_path):
    """A manifest cut short raised EOFError out of verify, restore, diff and every sweep (a
    traceback instead of the damaged snapshot's name)."""
    import json

    _two_snapshots(storage)
    (storage.get_volume("data").path / "c.bin").write_bytes(b"three")
    storage.create_snapshot("data", name="three")
    manifest = storage.engine.manifest_path(storage.get_snapshot("two").id)
    blob = manifest.read_bytes()
    outside = tmp_path / "outside"
    outside.mkdir()
    if spoil in EDITS:
        edited = json.loads(gzip.decompress(blob))
        EDITS[spoil](edited)
        body = gzip.compress(json.dumps(edited).replace('"OUTSIDE"', json.dumps(str(outside))).encode())
    else:
        body = {"truncate": blob[: len(blob) // 2], "garbage": blob[:20] + bytes(len(blob) - 20),
                "not-gzip": b"{}", "json-list": gzip.compress(b"[1, 2]"),
                "escaping-path": gzip.compress(gzip.decompress(blob).replace(b'"b.bin"', b'"../../b.bin"'))}[spoil]
    os.chmod(manifest, 0o644)
    manifest.write_bytes(body)
    report = storage.verify()
    assert [(d.problem, d.hits) for d in report.damaged] == [("manifest", (("two", "*"),))]
    with pytest.raises(StorageError, match="snapshot 'two' is damaged.*snapshot verify two"):
        storage.restore_snapshot("two", to="copy")
    with pytest.raises(StorageError, match="snapshot 'two' is damaged"):
        storage.diff("two", "three")
    assert not (storage.home / "b.bin").exists() and not (storage.home / "volumes/b.bin").exists()
    assert os.listdir(outside) == [] and sorted(os.listdir(storage.home / "volumes")) == ["data"]
    assert storage.restore_snapshot("three", to="copy").name == "copy"
    storage.delete_snapshot("two")  # a damaged snapshot can still be deleted
    assert storage.verify().ok


def test_an_unreadable_pack_is_reported_not_a_crash_and_nothing_is_dropped(storage):
    """A pack that fails to read (here a folder in its place: EISDIR; on a failing disk EIO)
    made verify raise; now it names the snapshot and file, keeps the index, and a restore
    refuses with the same words."""
    _, _, two = _two_snapshots(storage)
    entry = next(e for e in storage.engine.load(storage.get_snapshot("two").id).entries if e.path == "b.bin")
    pack, _, _ = storage.engine.packs.locate(entry.chunks[0])
    aside = storage.home / "aside"
    os.rename(pack, aside)
    os.mkdir(pack)
    report = storage.verify()
    assert [(d.problem, d.hits) for d in report.damaged] == [("unreadable", (("two", "b.bin"),))]
    with pytest.raises(StorageError, match=r"'b\.bin' cannot be read"):
        storage.restore_snapshot("two", to="copy")
    os.rmdir(pack)
    os.rename(aside, pack)  # readable again: nothing was forgotten or swept meanwhile
    assert storage.verify().ok
    assert tree_state(storage.restore_snapshot("two", to="copy").path) == two


# --- links swapped in during a restore ---------------------------------------------------------
@pytest.fixture(params=["openat2", "walk"])
def beneath(request, monkeypatch):
    """open_beneath both ways: one openat2(2) call, and the component walk used without it."""
    from dtrain.storage import manifest
    if request.param == "walk":
        monkeypatch.setattr(manifest, "_openat2_impl", False)
    return request.param


class SwapOnFirstWrite(FileIO):
    """On the restore's first write, swaps the folder `sub` of the tree being restored for a
    link to `outside` (the file written tells where the tree is)."""

    def __init__(self, outside: Path):
        self.outside, self.armed, self.done = outside, False, False

    def _swap(self, fd: int) -> None:
        if self.done or not self.armed:
            return
        self.done = True
        tree = Path(os.readlink(f"/proc/self/fd/{fd}")).parent
        os.rename(tree / "sub", tree / "sub-moved")
        os.symlink(self.outside, tree / "sub")

    def write_at(self, fd, data, offset):
        self._swap(fd)
        super().write_at(fd, data, offset)

    def copy(self, src, dst, length, src_offset, dst_offset):
        self._swap(dst)
        super().copy(src, dst, length, src_offset, dst_offset)


def test_a_folder_swapped_for_a_link_during_a_restore_is_never_written_through(tmp_path, beneath):
    """The old restore created files and folders through the link, and chmod'ed (as root:
    chown'ed) the folder it pointed to."""
    src = tmp_path / "vol"
    (src / "sub/deep/deeper").mkdir(parents=True)
    (src / "0-first.bin").write_bytes(b"first")
    (src / "sub/deep/f.bin").write_bytes(b"restored inside only")
    os.symlink("f.bin", src / "sub/deep/link")
    os.chmod(src / "sub", 0o700)
    outside = tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    os.chmod(outside, 0o755)
    before = tree_state(outside)
    engine = Engine(tmp_path / "store", chunk_size=CHUNK, durable=False, workers=1, io=SwapOnFirstWrite(outside))
    with engine.pin():
        manifest, _ = engine.capture(src)
        engine.commit("m", manifest)
        engine.io.armed = True
        with pytest.raises(StorageError, match="restoring into"):
            engine.materialize(engine.load("m"), tmp_path / "restored")
    assert engine.io.done
    assert tree_state(outside) == before  # nothing made, nothing chmod'ed or chown'ed there
    engine.close()


@pytest.mark.parametrize("put", ["nothing", "link-out", "file"])
def test_a_volume_whose_folder_is_gone_or_replaced_is_refused_in_one_line_before_any_work(storage, tmp_path, put):
    """Its folder removed (Lost: a class's disk not mounted), or a link to outside the volume or a
    file put in its place: snapshot and diff said "cannot snapshot PATH: it is not a folder (... not
    a symlink or a file)" for all three, naming no volume (a diff is no snapshot), and an in-place
    restore onto a Lost volume wrote every file, then failed its swap with a traceback
    (FileNotFoundError: '.restore-...' -> '.../data')."""
    vol = storage.create_volume("data")
    (vol.path / "a.bin").write_bytes(b"first")
    storage.create_snapshot("data", name="one")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "a.bin").write_bytes(b"not the volume's")
    shutil.rmtree(vol.path)
    if put == "link-out":
        os.symlink(outside, vol.path)
    elif put == "file":
        vol.path.write_bytes(b"")
    why = {"nothing": rf"volume 'data' has lost its folder {vol.path} \(removed by hand, or the disk of storage "
                      r"class 'local' is not mounted\): put it back, or restore one of its snapshots into a new "
                      r"volume .*dtrain snapshot list --volume data",
           "link-out": rf"the folder of volume 'data', {vol.path}, is a symbolic link \(to {outside}\), which "
                       r"is never followed: put the volume's own folder back there",
           "file": rf"the folder of volume 'data', {vol.path}, is not a folder: put the volume's own folder back"}[put]
    with pytest.raises(StorageError, match="cannot snapshot volume 'data': " + why):
        storage.create_snapshot("data", name="two")
    with pytest.raises(StorageError, match="cannot compare snapshot 'one' with volume 'data': " + why):
        storage.diff("one")
    assert [s.name for s in storage.list_snapshots()] == ["one"]
    if put == "nothing":
        with pytest.raises(StorageError, match="cannot restore snapshot 'one' in place: " + why):
            storage.restore_snapshot("one", in_place=True)
        assert os.listdir(vol.path.parent) == []  # no staging folder was made, nor the volume's folder
    else:  # the link or file itself is replaced (never followed): the volume is back as it was
        storage.restore_snapshot("one", in_place=True)
        assert (vol.path / "a.bin").read_bytes() == b"first" and not vol.path.is_symlink()
    assert (outside / "a.bin").read_bytes() == b"not the volume's" and os.listdir(outside) == ["a.bin"]
    assert storage.restore_snapshot("one", to="back").name == "back"


# --- housekeeping after kills --------------------------------------------------------------------
def _store_files(home: Path) -> list[str]:
    return sorted(p.name for p in (home / "store").rglob("*") if p.is_file() and p.parent.name in
                  {"manifests"} | {f"{i:02x}" for i in range(256)})


def _keep_and_doomed(storage: Storage) -> list[str]:
    """Volume 'data' with snapshots 'keep' (keep.bin) and 'doomed' (keep.bin, big.bin); returns
    the store's files as they were with 'keep' alone."""
    vol = storage.create_volume("data")
    (vol.path / "keep.bin").write_bytes(os.urandom(50_000))
    storage.create_snapshot("data", name="keep")
    kept = _store_files(storage.home)
    (vol.path / "big.bin").write_bytes(os.urandom(400_000))
    storage.create_snapshot("data", name="doomed")
    return kept


def test_a_delete_killed_after_forgetting_the_snapshot_frees_its_space_at_the_next_command(storage, monkeypatch):
    """The row went first and the manifest after; killed in between, nothing asked for a sweep,
    so the manifest and every object only it needed stayed until someone ran verify."""
    kept = _keep_and_doomed(storage)

    def killed(_id):
        raise SystemExit("killed")  # as SIGKILL right after the row's transaction

    monkeypatch.setattr(storage.engine, "drop", killed)
    with pytest.raises(SystemExit):
        storage.delete_snapshot("doomed")
    monkeypatch.undo()
    assert [s.name for s in storage.list_snapshots()] == ["keep"]
    storage.create_volume("other")  # any later command that tidies
    assert _store_files(storage.home) == kept


def test_a_sweep_killed_midway_is_finished_by_the_next_command(storage, monkeypatch):
    """A sweep started by a killed capture's pin forgot the dead objects, then died before
    deleting their packs: nothing asked for another sweep, so the packs stayed."""
    kept = _keep_and_doomed(storage)
    storage.engine.mark_sweepable(storage.get_snapshot("doomed").id)  # as delete_snapshot does first
    with storage.conn:
        storage.conn.execute("DELETE FROM snapshots WHERE name = 'doomed'")  # as a delete killed at once
    (storage.engine.root / "pins" / "999999999-dead").touch()  # a killed capture's pin
    scandir, packs_root = os.scandir, storage.engine.packs.root

    def killed_at_the_packs(path="."):  # dead objects forgotten, their packs not yet deleted
        if os.fspath(path) == packs_root:
            raise SystemExit("killed")
        return scandir(path)

    monkeypatch.setattr(os, "scandir", killed_at_the_packs)
    with pytest.raises(SystemExit):
        storage.create_volume("other")
    monkeypatch.undo()
    storage.create_volume("third")
    assert _store_files(storage.home) == kept


@pytest.mark.parametrize("how", ["moved away", "an older copy put back"])
def test_a_state_db_that_lists_fewer_snapshots_never_sweeps_theirs(tmp_path, how):
    """`state.db` moved away (as a damaged one's message says), or put back from a copy older than
    some snapshots: the store holds manifests that database does not list. A sweep keeps them and
    every object they need (verify counts them), and the newer database sees them all again."""
    home = tmp_path / "home"
    first = Storage(home)
    vol = first.create_volume("data")
    (vol.path / "a.bin").write_bytes(os.urandom(300_000))
    first.create_snapshot("data", name="s1")
    (vol.path / "b.bin").write_bytes(os.urandom(300_000))
    older = tmp_path / "older.db"
    first.conn.execute("VACUUM INTO ?", (str(older),))  # the copy a backup made after s1
    first.create_snapshot("data", name="s2")
    store = _store_files(home)
    first.close()
    for part in ("state.db", "state.db-wal", "state.db-shm"):
        if (home / part).exists():
            shutil.move(home / part, tmp_path / f"newer-{part}")
    if how == "an older copy put back":
        shutil.copy(older, home / "state.db")
    other = Storage(home)
    report = other.verify()
    assert report.ok and report.unlisted_manifests == (2 if how == "moved away" else 1), report
    other.create_volume("x")
    other.delete_volume("x")  # a command that sweeps, as any later one may
    other.close()
    assert _store_files(home) == store
    for part in ("state.db", "state.db-wal", "state.db-shm"):
        (home / part).unlink(missing_ok=True)
        if (tmp_path / f"newer-{part}").exists():
            shutil.move(tmp_path / f"newer-{part}", home / part)
    back = Storage(home)
    assert back.verify().ok and back.verify().unlisted_manifests == 0
    restored = back.restore_snapshot("s2", to="again")
    assert (restored.path / "b.bin").read_bytes() == (vol.path / "b.bin").read_bytes()
    back.close()


# --- full disks ----------------------------------------------------------------------------------
@pytest.fixture
def small_tmpfs(tmp_path):
    """A 2 MiB tmpfs (root only), unmounted afterwards."""
    with tmpfs(tmp_path / "small", "size=2m") as mnt:
        yield mnt


def test_a_move_to_a_full_storage_class_says_so_and_keeps_the_volume(tmp_path, small_tmpfs):
    """The old message was a bare errno with both paths ("[Errno 28] No space left on device:
    '...' -> '...'") and no way out."""
    storage = Storage(tmp_path / "home", classes={"fast": small_tmpfs / "fast"})
    vol = storage.create_volume("data")
    for i in range(3):
        (vol.path / f"{i}.bin").write_bytes(os.urandom(1 << 20))
    before = tree_state(vol.path)
    storage.create_snapshot("data", name="one")
    with pytest.raises(StorageError, match=r"no space left in storage class 'fast' for volume 'data': it needs "
                                           r"3\.\d MiB.*stays where it was.*choose another class"):
        storage.update_volume("data", storage_class="fast")
    moved = storage.get_volume("data")
    assert (moved.storage_class, moved.path, tree_state(moved.path)) == ("local", vol.path, before)
    assert os.listdir(small_tmpfs / "fast") == [".dtrain-volumes"]  # the partial copy went
    os.unlink(vol.path / "2.bin")
    assert storage.update_volume("data", storage_class="fast").path == small_tmpfs / "fast/data/data"
    assert storage.verify().ok
    storage.close()


# --- sparse files --------------------------------------------------------------------------------
def test_a_huge_sparse_file_is_neither_read_nor_restored_dense(tmp_path):
    """A file of holes was read whole (every zero hashed) and restored dense (as much disk as its
    size: a 1 TiB sparse image filled the disk); now holes that span whole chunks are named as
    zeros unread and stay holes."""
    from dtrain.storage.testing import CountingIO

    src = tmp_path / "vol"
    src.mkdir()
    with open(src / "sparse.img", "wb") as f:
        f.truncate(512 << 20)
        f.seek(256 << 20)
        f.write(b"data in the middle")
    (src / "dense.bin").write_bytes(bytes(3 * CHUNK) + os.urandom(100))  # real zeros: same content
    if os.stat(src / "sparse.img").st_blocks * 512 >= 1 << 20:
        pytest.skip("this file system has no holes")
    io = CountingIO()
    engine = Engine(tmp_path / "store", chunk_size=CHUNK, durable=False, io=io)
    with engine.pin():
        manifest, stats = engine.capture(src)
        engine.commit("m", manifest)
        assert io.bytes_read < 1 << 20 and stats.bytes == (512 << 20) + 3 * CHUNK + 100
        engine.materialize(engine.load("m"), tmp_path / "restored")
    restored = tmp_path / "restored/sparse.img"
    assert os.stat(restored).st_size == 512 << 20 and os.stat(restored).st_blocks * 512 < 1 << 20
    with open(restored, "rb") as f:
        f.seek(256 << 20)
        assert f.read(18) == b"data in the middle"
        f.seek((256 << 20) - CHUNK)
        assert f.read(CHUNK) == bytes(CHUNK)
    assert (tmp_path / "restored/dense.bin").read_bytes() == (src / "dense.bin").read_bytes()
    st, rt = os.stat(src / "sparse.img"), os.stat(restored)
    assert (stat.S_IMODE(st.st_mode), st.st_mtime_ns) == (stat.S_IMODE(rt.st_mode), rt.st_mtime_ns)
    with engine.pin():
        assert not engine.verify(["m"]).corrupt
    engine.close()


def test_a_move_keeps_a_sparse_file_sparse(tmp_path, small_tmpfs):
    """The copy between file systems wrote every hole as zeros: a 256 MiB sparse image could not
    move to a class with 2 MiB free."""
    storage = Storage(tmp_path / "home", classes={"fast": small_tmpfs / "fast"})
    vol = storage.create_volume("data")
    with open(vol.path / "disk.img", "wb") as f:
        f.truncate(256 << 20)
        f.seek(100 << 20)
        f.write(b"middle")
    if os.stat(vol.path / "disk.img").st_blocks * 512 >= 1 << 20:
        pytest.skip("this file system has no holes")
    before = tree_state(vol.path)
    moved = storage.update_volume("data", storage_class="fast")
    assert moved.storage_class == "fast" and tree_state(moved.path) == before
    assert os.stat(moved.path / "disk.img").st_blocks * 512 < 1 << 20
    storage.close()


def test_a_restore_into_a_full_class_names_that_disk_not_the_store(tmp_path, small_tmpfs):
    """The message said how much was free under the store (another disk, with room to spare)."""
    storage = Storage(tmp_path / "home", classes={"fast": small_tmpfs / "fast"})
    vol = storage.create_volume("data")
    for i in range(3):
        (vol.path / f"{i}.bin").write_bytes(os.urandom(1 << 20))
    storage.create_snapshot("data", name="one")
    storage.create_volume("placed", storage_class="fast")
    storage.conn.execute("UPDATE snapshots SET storage_class = 'fast'")  # as if taken of a 'fast' volume
    with pytest.raises(StorageError, match=rf"no space left.*free under {small_tmpfs}/fast;"):
        storage.restore_snapshot("one", to="copy")
    assert sorted(os.listdir(small_tmpfs / "fast")) == [".dtrain-volumes", "placed"]
    assert [v.name for v in storage.list_volumes()] == ["data", "placed"]
    storage.close()


def test_a_restore_out_of_inodes_says_so_rather_than_bytes(tmp_path):
    """With bytes to spare but no inode left, the message read 'needed up to 28 B, 15.6 MiB
    free': true, and no help."""
    mnt = tmp_path / "few"
    mnt.mkdir()
    if os.geteuid() != 0 or subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m,nr_inodes=40", "tmpfs", str(mnt)],
                                           capture_output=True).returncode != 0:
        pytest.skip("needs root to mount a small tmpfs")
    try:
        storage = Storage(tmp_path / "home", classes={"few": mnt / "few"})
        vol = storage.create_volume("data")
        for i in range(60):
            (vol.path / f"{i}.txt").write_text(str(i))
        storage.create_snapshot("data", name="one")
        storage.create_volume("placed", storage_class="few")
        storage.conn.execute("UPDATE snapshots SET storage_class = 'few'")  # as if taken of a 'few' volume
        with pytest.raises(StorageError, match=rf"no room for new files.*inodes are free under {mnt}/few;"):
            storage.restore_snapshot("one", to="copy")
        assert sorted(os.listdir(mnt / "few")) == [".dtrain-volumes", "placed"]
        storage.close()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], check=False)


def test_an_index_moved_away_never_gets_the_packs_deleted(storage):
    """Told that index.db is damaged, a user moves it away (as the error says); the next verify
    swept every pack as 'never indexed', so putting the index back found no data left."""
    path, _, two = _two_snapshots(storage)
    index = storage.engine.root / "index.db"
    storage.close()
    aside = storage.home / "index.db.aside"
    os.rename(index, aside)
    lost = Storage(storage.home)
    report = lost.verify()
    assert {h for d in report.damaged for h in d.hits} == {("one", "a.bin"), ("two", "a.bin"), ("two", "b.bin")}
    lost.verify()  # damage now recorded: still nothing deleted
    lost.create_volume("other")
    lost.close()
    for name in os.listdir(storage.engine.root):
        if name.startswith("index.db"):
            os.unlink(storage.engine.root / name)
    os.rename(aside, index)
    back = Storage(storage.home)
    assert back.verify().ok
    assert tree_state(back.restore_snapshot("two", to="copy").path) == two
    back.close()


def test_an_in_place_restore_of_a_volume_of_another_storage_class(tmp_path):
    """The staging folder was put under <home>/volumes/<name>, which a volume of another class
    does not have: every in-place restore of such a volume failed with ENOENT."""
    storage = Storage(tmp_path / "home", classes={"near": tmp_path / "near"})
    vol = storage.create_volume("data", storage_class="near")
    (vol.path / "model.pt").write_text("epoch 1")
    storage.create_snapshot("data", name="one")
    before = tree_state(vol.path)
    (vol.path / "model.pt").write_text("epoch 2, diverged")
    restored = storage.restore_snapshot("one", in_place=True)
    assert restored.path == vol.path and tree_state(vol.path) == before
    assert os.listdir(tmp_path / "near/data") == ["data"] and os.listdir(storage.home / "volumes") == []
    storage.close()


KILLED_DELETE = r"""
import os, sys
from pathlib import Path
from dtrain.storage import Storage
storage = Storage(Path(sys.argv[1]))
rename = os.rename

def rename_then_die(src, dst, *a, **k):
    rename(src, dst, *a, **k)
    if os.path.basename(dst).startswith("."):  # the folder renamed aside, its row not yet deleted
        os.kill(os.getpid(), 9)

os.rename = rename_then_die
storage.delete_volume("data")
"""


def test_a_delete_killed_before_its_commit_leaves_the_volume_whole(tmp_path):
    """The folder was renamed to a '.trash-<pid>' name inside the transaction; killed before
    the commit, the row stayed and the next command deleted the folder as a dead process's
    trash: a registered volume without data."""
    storage = Storage(tmp_path / "home")
    vol = storage.create_volume("data")
    (vol.path / "weights.pt").write_bytes(os.urandom(10_000))
    before = tree_state(vol.path)
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    child = subprocess.run([sys.executable, "-c", KILLED_DELETE, str(storage.home)], env=env, timeout=60)
    assert child.returncode == -9
    assert [v.name for v in storage.list_volumes()] == ["data"]
    storage.create_volume("other")  # a command that tidies
    assert tree_state(storage.get_volume("data").path) == before
    assert sorted(os.listdir(storage.home / "volumes")) == ["data", "other"]
    storage.delete_volume("data")  # and a delete that finishes still deletes
    assert sorted(os.listdir(storage.home / "volumes")) == ["other"]
    storage.close()

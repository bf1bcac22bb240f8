"""The content-addressed snapshot engine, on real files: exactness, point-in-time, dedup,
incremental capture, sweeping, verification, full disks and copy-on-write clones."""

import contextlib
import errno
import gc
import os
import shutil
import subprocess
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from dtrain.errors import StorageError
from dtrain.storage import hashing
from dtrain.storage.engine import Engine
from dtrain.storage.progress import Run
from dtrain.storage.testing import CountingIO, FullDiskIO, tree_state

CHUNK = 64 << 10  # small chunks: multi-chunk files stay cheap to build


def make_engine(tmp_path, **kw) -> Engine:
    return Engine(tmp_path / "store", chunk_size=CHUNK, durable=False, **kw)


def build_tree(root: Path) -> None:
    """Every kind of thing a restore must get exactly right."""
    (root / "clips/0531/1492626047222176976").mkdir(parents=True)
    (root / "clips/0531/1492626047222176976/20.jpg").write_bytes(os.urandom(3 * CHUNK + 123))
    (root / "labels.json").write_text('{"lanes": [[1, 2, 3]]}\n')
    (root / "empty-file").touch()
    (root / "empty-dir/nested-empty").mkdir(parents=True)
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    os.chmod(root / "run.sh", 0o755)
    (root / "secret").write_text("s")
    os.chmod(root / "secret", 0o600)
    os.symlink("clips/0531/1492626047222176976/20.jpg", root / "latest.jpg")
    os.symlink("/nonexistent/target", root / "dangling")
    (root / os.fsdecode(b"caf\xe9-latin1.txt")).write_text("not utf-8 name")
    (root / "readonly").mkdir()
    (root / "readonly/kept.txt").write_text("inside a read-only folder")
    os.chmod(root / "readonly", 0o555)
    (root / "-sorts-before-dot").write_text("the root is not the first entry")
    os.chmod(root, 0o751)
    os.utime(root / "labels.json", ns=(1, 1_500_000_000_123_456_789))
    os.utime(root / "latest.jpg", ns=(1, 1_400_000_000_000_000_001), follow_symlinks=False)
    if os.geteuid() == 0:
        os.chown(root / "secret", 1234, 5678)


def change_tree(root: Path) -> None:
    p = root / "clips/0531/1492626047222176976/20.jpg"
    data = bytearray(p.read_bytes())
    data[CHUNK + 5] ^= 0xFF  # one chunk changes
    p.write_bytes(bytes(data))
    os.chmod(root / "secret", 0o640)
    (root / "labels.json").unlink()
    (root / "new-model.pt").write_bytes(os.urandom(2 * CHUNK))
    os.unlink(root / "latest.jpg")
    os.symlink("new-model.pt", root / "latest.jpg")
    os.rmdir(root / "empty-dir/nested-empty")
    os.utime(root / "run.sh", ns=(1, 1_600_000_000_000_000_000))


def snapshot(engine: Engine, src: Path, base=None, base_id=None):
    with engine.pin():
        manifest, stats = engine.capture(src, base=base, base_id=base_id)
        manifest_id = uuid.uuid4().hex
        engine.commit(manifest_id, manifest)
    return manifest_id, manifest, stats


def restore(engine: Engine, manifest_id: str, dest: Path) -> Path:
    with engine.pin():
        engine.materialize(engine.load(manifest_id), dest)
    return dest


@pytest.mark.parametrize("unnamed_temp_files", [True, False])
def test_restores_each_point_in_time_exactly(tmp_path, unnamed_temp_files):
    src = tmp_path / "vol"
    src.mkdir()
    build_tree(src)
    engine = make_engine(tmp_path)
    engine.packs._anonymous &= unnamed_temp_files  # the named-temp path of file systems without O_TMPFILE
    first_state = tree_state(src)
    first, _, _ = snapshot(engine, src)
    change_tree(src)
    second_state = tree_state(src)
    assert second_state != first_state
    second, _, _ = snapshot(engine, src, base=engine.load(first))
    assert tree_state(restore(engine, first, tmp_path / "r1")) == first_state
    assert tree_state(restore(engine, second, tmp_path / "r2")) == second_state
    if os.geteuid() == 0:
        assert os.stat(tmp_path / "r1/secret").st_uid == 1234


def test_later_writes_never_reach_a_snapshot(tmp_path):
    src = tmp_path / "vol"
    src.mkdir()
    build_tree(src)
    engine = make_engine(tmp_path)
    state = tree_state(src)
    manifest_id, _, _ = snapshot(engine, src)
    with open(src / "clips/0531/1492626047222176976/20.jpg", "r+b") as f:  # in place, like a checkpoint
        f.write(b"X" * 100)
    restored = restore(engine, manifest_id, tmp_path / "r1")
    assert tree_state(restored) == state
    target = restored / "clips/0531/1492626047222176976/20.jpg"
    assert os.stat(target).st_nlink == 1  # a copy or clone, never a hard link into the store
    with open(target, "r+b") as f:
        f.write(b"Y" * 100)
    assert tree_state(restore(engine, manifest_id, tmp_path / "r2")) == state
    with engine.pin():
        assert not engine.verify([manifest_id]).corrupt


def test_unchanged_files_are_not_read(tmp_path):
    src = tmp_path / "vol"
    src.mkdir()
    build_tree(src)
    time.sleep(0.2)  # outside the racy window of the first capture
    io = CountingIO()
    engine = make_engine(tmp_path, io=io)
    first, _, stats = snapshot(engine, src)
    assert io.bytes_read == stats.read_bytes == stats.bytes > 0
    io.bytes_read = 0
    second, _, stats = snapshot(engine, src, base=engine.load(first))
    assert io.bytes_read == 0 and stats.read_bytes == 0 and stats.added_bytes == 0
    same_file = os.stat(engine.manifest_path(first)).st_ino == os.stat(engine.manifest_path(second)).st_ino
    assert same_file  # not even a new manifest
    (src / "labels.json").write_text('{"lanes": []}\n')
    _, _, stats = snapshot(engine, src, base=engine.load(second))
    assert io.bytes_read == len('{"lanes": []}\n') == stats.added_bytes


@pytest.mark.parametrize("by_id", [False, True], ids=["base", "base_id"])
def test_file_changed_right_before_a_capture_is_read_again_once(tmp_path, by_id):
    src = tmp_path / "vol"
    src.mkdir()
    window = 1_000_000_000  # wide: the write and the first capture are this close even on a loaded machine
    io = CountingIO()
    engine = make_engine(tmp_path, io=io, racy_window_ns=window)
    based = (lambda m: {"base_id": m}) if by_id else (lambda m: {"base": engine.load(m)})
    (src / "hot.bin").write_bytes(b"a" * 1000)
    first, _, _ = snapshot(engine, src)  # written within the window: timestamps may not tell a rewrite
    changed = (src / "hot.bin").stat().st_ctime_ns
    assert engine.load(first).started_ns - changed < window  # what the test is about (a second's delay: none)
    while time.time_ns() <= changed + window + 50_000_000:  # the second capture is past the window (by the
        time.sleep(0.05)  # file's own clock, which may lag time_ns by a tick)
    io.bytes_read = 0
    second, _, _ = snapshot(engine, src, **based(first))
    assert io.bytes_read == 1000
    snapshot(engine, src, **based(second))
    assert io.bytes_read == 1000  # settled: not read a third time


def test_fifos_are_kept_never_opened(tmp_path):
    """Recorded and made again (as `cp -a` does), never opened: opening a fifo waits for a writer."""
    src = tmp_path / "vol"
    src.mkdir()
    (src / "kept.txt").write_text("data")
    os.mkfifo(src / "pipe", 0o640)
    engine = make_engine(tmp_path)
    manifest_id, _, stats = snapshot(engine, src)
    assert stats.skipped == () and stats.files == 1
    assert sorted(os.listdir(restore(engine, manifest_id, tmp_path / "r"))) == ["kept.txt", "pipe"]
    assert tree_state(tmp_path / "r") == tree_state(src)


def test_content_is_stored_once_and_appends_store_only_new_chunks(tmp_path):
    src = tmp_path / "vol"
    src.mkdir()
    blob = os.urandom(10 * CHUNK)
    (src / "ckpt.pt").write_bytes(blob)
    (src / "copy-of-ckpt.pt").write_bytes(blob)
    engine = make_engine(tmp_path)
    first, _, stats = snapshot(engine, src)
    assert stats.bytes == 20 * CHUNK and stats.added_bytes == 10 * CHUNK and stats.added_objects == 10
    with open(src / "ckpt.pt", "ab") as f:
        f.write(os.urandom(1000))
    with open(src / "copy-of-ckpt.pt", "r+b") as f:
        f.seek(4 * CHUNK + 10)
        f.write(b"changed")
    _, _, stats = snapshot(engine, src, base=engine.load(first))
    assert stats.added_objects == 2 and stats.added_bytes == 1000 + CHUNK


def test_sweep_frees_only_content_no_other_manifest_needs(tmp_path):
    src = tmp_path / "vol"
    src.mkdir()
    (src / "shared.bin").write_bytes(os.urandom(CHUNK))
    (src / "only-first.bin").write_bytes(os.urandom(CHUNK // 2))
    engine = make_engine(tmp_path)
    first, _, _ = snapshot(engine, src)
    (src / "only-first.bin").unlink()
    second, _, _ = snapshot(engine, src, base=engine.load(first))
    engine.drop(first)
    swept = engine.sweep(lambda: [second])
    assert (swept.objects, swept.bytes) == (1, CHUNK // 2)
    assert tree_state(restore(engine, second, tmp_path / "r")) == tree_state(src)


def test_sweep_waits_while_a_pin_is_held(tmp_path):
    engine = make_engine(tmp_path)
    engine.request_sweep()
    with engine.pin():
        assert engine.sweep(lambda: []) is None
    assert engine.sweep(lambda: []) is not None


def damage(engine: Engine, corrupt: str, cut: str) -> None:
    """Flip bytes of one stored object in its pack; cut the other off (its pack truncated
    before it, or removed when it starts the pack)."""
    path, offset, _ = engine.packs.locate(corrupt)
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset)
        f.write(b"bitrot")
    path, offset, _ = engine.packs.locate(cut)
    os.chmod(path, 0o644)
    if offset:
        os.truncate(path, offset)
    else:
        os.unlink(path)


@pytest.mark.parametrize("by_id", [False, True], ids=["base", "base_id"])
def test_verify_finds_corrupt_and_missing_objects_and_a_capture_heals(tmp_path, by_id):
    src = tmp_path / "vol"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(CHUNK))
    (src / "b.bin").write_bytes(os.urandom(CHUNK))
    time.sleep(0.2)
    engine = make_engine(tmp_path)
    manifest_id, manifest, _ = snapshot(engine, src)
    a, b = sorted((e.chunks[0] for e in manifest.entries if e.kind == "file"), key=engine.packs.locate)
    damage(engine, corrupt=a, cut=b)  # b after a in the same pack, or in a pack of its own
    with engine.pin():
        found = engine.verify([manifest_id])
    assert found.corrupt == {a} and found.missing == {b} and found.objects == 2
    with engine.pin():
        assert engine.verify([manifest_id]).missing == {a, b}  # out of the index until stored again
    with pytest.raises(StorageError, match="missing.*verify"):
        restore(engine, manifest_id, tmp_path / "r")
    assert not (tmp_path / "r").exists()
    based = {"base_id": manifest_id} if by_id else {"base": manifest}
    healed, _, stats = snapshot(engine, src, **based)  # files unchanged, yet both are re-read
    assert stats.read_bytes == 2 * CHUNK and stats.added_objects == 2
    with engine.pin():
        again = engine.verify([healed])
    assert (again.corrupt, again.missing, again.objects) == (set(), set(), 2)
    assert tree_state(restore(engine, healed, tmp_path / "r")) == tree_state(src)


def test_many_small_files_go_into_few_packs_and_deleting_frees_their_blocks(tmp_path):
    src = tmp_path / "vol"
    (src / "clips").mkdir(parents=True)
    for i in range(300):
        (src / f"clips/{i}.jpg").write_bytes(os.urandom(100_000 + i))
        (src / f"clips/{i}.json").write_text(f'{{"lanes": [[{i}]]}}')
    engine = Engine(tmp_path / "store", chunk_size=1 << 20, pack_size=8 << 20, durable=False)
    packs = lambda: [p for p in (engine.root / "packs").rglob("*") if p.is_file()]  # noqa: E731
    blocks = lambda: sum(p.stat().st_blocks * 512 for p in packs())  # noqa: E731
    first, _, stats = snapshot(engine, src)
    assert stats.added_objects == 600 and 3 <= len(packs()) <= 6  # ~30 MB in 8 MB packs
    assert tree_state(restore(engine, first, tmp_path / "r")) == tree_state(src)
    for i in range(0, 300, 2):
        (src / f"clips/{i}.jpg").unlink()
    second, _, _ = snapshot(engine, src, base=engine.load(first))
    before = blocks()
    engine.drop(first)
    swept = engine.sweep(lambda: [second])
    assert swept.objects == 150 and swept.bytes == sum(100_000 + i for i in range(0, 300, 2))
    assert before - blocks() >= swept.bytes - 150 * 4096  # whole blocks given back, in place
    assert tree_state(restore(engine, second, tmp_path / "r2")) == tree_state(src)
    engine.drop(second)
    assert engine.sweep(lambda: []).objects == 450 and packs() == []


def test_a_store_of_the_first_format_is_adopted(tmp_path):
    src = tmp_path / "vol"
    src.mkdir()
    (src / "a.bin").write_bytes(os.urandom(3 * CHUNK))
    engine = make_engine(tmp_path)
    manifest_id, manifest, _ = snapshot(engine, src)
    objects = engine.root / "objects"  # lay the objects out as the first format did
    for digest in manifest.digests():
        path, offset, length = engine.packs.locate(digest)
        with open(path, "rb") as f:
            f.seek(offset)
            (objects / digest[:2]).mkdir(parents=True, exist_ok=True)
            (objects / digest[:2] / digest[2:]).write_bytes(f.read(length))
    engine.close()
    shutil.rmtree(engine.root / "packs")
    for db_file in engine.root.glob("index.db*"):
        db_file.unlink()
    adopted = make_engine(tmp_path)
    assert not objects.exists()
    with adopted.pin():
        assert adopted.verify([manifest_id]).objects == 3
    assert tree_state(restore(adopted, manifest_id, tmp_path / "r")) == tree_state(src)


def test_full_disk_during_capture_leaves_the_store_as_it_was(tmp_path):
    src = tmp_path / "vol"
    src.mkdir()
    for i in range(6):
        (src / f"f{i}.bin").write_bytes(os.urandom(CHUNK))
    engine = Engine(tmp_path / "store", chunk_size=CHUNK, durable=False, io=FullDiskIO(limit=3 * CHUNK))
    files = lambda: sorted(p.relative_to(engine.root) for p in engine.root.rglob("*") if p.name != "lock")  # noqa: E731
    before = files()
    with pytest.raises(StorageError, match="no space left.*needed up to 384.0 KiB.*free.*snapshot delete"):
        with engine.pin():
            engine.capture(src)
    assert engine.sweep(lambda: []) is not None
    assert files() == before


def test_full_disk_during_restore_raises_storage_error(tmp_path):
    src = tmp_path / "vol"
    src.mkdir()
    (src / "big.bin").write_bytes(os.urandom(4 * CHUNK))
    manifest_id, _, _ = snapshot(make_engine(tmp_path), src)
    engine = Engine(tmp_path / "store", chunk_size=CHUNK, durable=False, io=FullDiskIO(limit=CHUNK))
    with pytest.raises(StorageError, match="no space left.*restoring"):
        restore(engine, manifest_id, tmp_path / "r")


def test_durable_capture_and_commit_work(tmp_path):
    src = tmp_path / "vol"
    src.mkdir()
    build_tree(src)
    engine = Engine(tmp_path / "store", chunk_size=CHUNK, durable=True)
    manifest_id, _, _ = snapshot(engine, src)
    assert tree_state(restore(engine, manifest_id, tmp_path / "r")) == tree_state(src)


def _mount_btrfs(folder: Path) -> bool:
    if os.geteuid() != 0 or not shutil.which("mkfs.btrfs"):
        return False
    image = folder.with_suffix(".img")
    with open(image, "wb") as f:
        f.truncate(200 << 20)
    folder.mkdir()
    ok = subprocess.run(["mkfs.btrfs", "-q", str(image)], capture_output=True).returncode == 0 and \
        subprocess.run(["mount", "-o", "loop", str(image), str(folder)], capture_output=True).returncode == 0
    image.unlink()  # the loop device keeps it alive while mounted
    return ok


def test_copy_on_write_clones_on_btrfs(tmp_path):
    fs = tmp_path / "btrfs"
    if not _mount_btrfs(fs):
        pytest.skip("needs root, mkfs.btrfs and loop mounts to test reflink clones")
    try:
        src = fs / "vol"
        src.mkdir()
        build_tree(src)
        (src / "old.pt").write_bytes(os.urandom((9 << 20) + 5))
        time.sleep(0.2)  # older than the racy window: hashed from the source's cached pages
        (src / "ckpt.pt").write_bytes(os.urandom((30 << 20) + 123))  # just written: hashed from the clone
        engine = Engine(fs / "store", chunk_size=4 << 20, durable=True, racy_window_ns=150_000_000)
        assert engine.method == "reflink"
        os.sync()  # the volume's own data allocated first: free space then moves only for the store
        free = shutil.disk_usage(fs).free
        manifest_id, _, stats = snapshot(engine, src)
        restored = restore(engine, manifest_id, fs / "restored")
        assert stats.method == "reflink" and stats.added_bytes > 39 << 20
        assert free - shutil.disk_usage(fs).free < 10 << 20  # 78 MiB more data, shared extents
        assert tree_state(restored) == tree_state(src)
        with open(restored / "ckpt.pt", "r+b") as f:
            f.write(b"Z" * 4096)
        with engine.pin():
            assert not engine.verify([manifest_id]).corrupt
        engine.close()
    finally:
        subprocess.run(["umount", "--lazy", str(fs)], check=True)


def test_two_stores_racing_on_the_same_content_keep_one_copy(tmp_path):
    """Two processes (here: two engines on one store, in threads) capture the same new
    content at once: both write it, the index keeps one copy, the sweep frees the other."""
    blob = [os.urandom(200_000) for _ in range(20)]
    sources = []
    for name in ("a", "b"):
        src = tmp_path / name
        src.mkdir()
        for i, data in enumerate(blob):
            (src / f"{i}.jpg").write_bytes(data)
        sources.append(src)
    engines = [Engine(tmp_path / "store", chunk_size=1 << 20, durable=False) for _ in sources]
    gate = threading.Barrier(2)

    def capture(engine, src):
        with engine.pin():
            packer_known = engine.packs.known

            def known_then_wait():  # each loads the (empty) index, then waits until the other has too:
                held = packer_known()  # loading after the wait let one capture store everything
                gate.wait()  # before the other thread got to read the index (under load)
                return held

            engine.packs.known = known_then_wait
            manifest, stats = engine.capture(src)
            manifest_id = uuid.uuid4().hex
            engine.commit(manifest_id, manifest)
        return manifest_id, stats

    with ThreadPoolExecutor(2) as pool:
        (first, s1), (second, s2) = pool.map(capture, engines, sources)
    assert s1.added_bytes == s2.added_bytes == sum(map(len, blob))  # both wrote everything
    engine = engines[0]
    blocks = lambda: sum(p.stat().st_blocks * 512 for p in (engine.root / "packs").rglob("*") if p.is_file())  # noqa: E731
    assert blocks() >= 2 * sum(map(len, blob))
    swept = engine.sweep(lambda: [first, second])  # requested by the capture that lost the race
    assert swept is not None and swept.objects == 0
    assert blocks() < 1.1 * sum(map(len, blob))
    for manifest_id, src in ((first, sources[0]), (second, sources[1])):
        with engine.pin():
            assert engine.verify([manifest_id]).objects == 20
        assert tree_state(restore(engine, manifest_id, tmp_path / f"r-{manifest_id}")) == tree_state(src)


def test_an_unchanged_tree_reuses_its_base_and_a_folder_change_alone_is_seen(tmp_path):
    src = tmp_path / "vol"
    src.mkdir()
    build_tree(src)
    time.sleep(0.2)  # past the racy window: files are judged by lstat alone
    engine = make_engine(tmp_path, io=CountingIO())
    first, manifest, _ = snapshot(engine, src)
    read_before = engine.io.bytes_read
    with engine.pin():
        again, stats = engine.capture(src, base=engine.load(first))
    assert again.id == first and stats.read_bytes == 0 and engine.io.bytes_read == read_before
    assert (stats.files, stats.bytes) == (sum(e.kind == "file" for e in manifest.entries),
                                          sum(e.size for e in manifest.entries))
    os.chmod(src / "empty-dir", 0o700)  # no file changes: only a folder's mode
    os.utime(src / "empty-dir", ns=(1, 1_234_000_000_000_000_000))
    second, _, stats = snapshot(engine, src, base=engine.load(first))
    assert second != first and stats.read_bytes == 0
    assert tree_state(restore(engine, second, tmp_path / "r")) == tree_state(src)


def test_an_unchanged_tree_is_known_by_its_key_without_loading_the_base(tmp_path, monkeypatch):
    src = tmp_path / "vol"
    src.mkdir()
    build_tree(src)
    time.sleep(0.2)  # past the racy window
    engine = make_engine(tmp_path, io=CountingIO())
    first, manifest, first_stats = snapshot(engine, src)
    read_before, loads = engine.io.bytes_read, []
    load = engine.load
    monkeypatch.setattr(engine, "load", lambda manifest_id: loads.append(manifest_id) or load(manifest_id))
    second, again, stats = snapshot(engine, src, base_id=first)
    assert loads == [] and engine.io.bytes_read == read_before  # neither the base nor a file was read
    assert again.id == first and (stats.files, stats.bytes) == (first_stats.files, first_stats.bytes)
    for path in engine.manifest_path, engine.key_path:  # nothing new on disk: both are shared
        assert os.stat(path(first)).st_ino == os.stat(path(second)).st_ino
    assert tuple(again.entries) == tuple(manifest.entries) and loads == [first]  # loaded when asked for
    third, _, _ = snapshot(engine, src, base_id=second)  # the linked snapshot has its key too
    assert loads == [first] and tree_state(restore(engine, third, tmp_path / "r")) == tree_state(src)


def _rewrite_keeping_size_and_mtime(root: Path) -> None:
    p = root / "clips/0531/1492626047222176976/20.jpg"
    st = p.stat()
    p.write_bytes(os.urandom(st.st_size))
    os.utime(p, ns=(st.st_atime_ns, st.st_mtime_ns))  # only ctime (and the inode's content) tell


def _replace_file_by_rename(root: Path) -> None:
    (root / "labels.json.tmp").write_text('{"lanes": [[9, 9, 9]]}\n')
    st = (root / "labels.json").stat()
    os.utime(root / "labels.json.tmp", ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(root / "labels.json.tmp", root / "labels.json")


@pytest.mark.parametrize("change", [
    _rewrite_keeping_size_and_mtime,
    _replace_file_by_rename,
    lambda root: os.chmod(root / "secret", 0o644),
    lambda root: (root / "empty-dir/nested-empty/new").mkdir(),
    lambda root: os.unlink(root / "empty-file"),
    lambda root: (os.unlink(root / "dangling"), os.symlink("/elsewhere", root / "dangling")),
    change_tree,
], ids=["rewrite-same-size-and-mtime", "rename-over", "chmod", "new-folder", "unlink", "new-link", "many"])
def test_the_key_misses_no_change_the_full_comparison_sees(tmp_path, change):
    src = tmp_path / "vol"
    src.mkdir()
    build_tree(src)
    time.sleep(0.2)
    engine = make_engine(tmp_path)
    first, _, _ = snapshot(engine, src)
    change(src)
    time.sleep(0.2)
    second, manifest, _ = snapshot(engine, src, base_id=first)
    assert manifest.id != first
    assert tree_state(restore(engine, second, tmp_path / "r")) == tree_state(src)


@pytest.mark.parametrize("spoil", [lambda p: p.unlink(), lambda p: p.write_text("{not json"),
                                   lambda p: p.write_text('{"digest": 1}')], ids=["missing", "torn", "foreign"])
def test_a_missing_or_bad_key_costs_only_the_full_comparison(tmp_path, spoil):
    src = tmp_path / "vol"
    src.mkdir()
    build_tree(src)
    time.sleep(0.2)
    engine = make_engine(tmp_path, io=CountingIO())
    first, manifest, _ = snapshot(engine, src)
    spoil(engine.key_path(first))
    read_before = engine.io.bytes_read
    second, again, stats = snapshot(engine, src, base_id=first)
    assert again.id == first and stats.read_bytes == 0 and engine.io.bytes_read == read_before
    assert engine.key_path(second).exists()  # the next one is quick again
    engine.drop(second)
    assert not engine.key_path(second).exists() and engine.manifest_path(first).exists()


def test_a_volume_folder_that_is_a_symlink_is_refused_clearly(tmp_path):
    (tmp_path / "real").mkdir()
    (tmp_path / "real/a.txt").write_text("a")
    (tmp_path / "link").symlink_to(tmp_path / "real")
    engine = make_engine(tmp_path)
    with pytest.raises(StorageError, match="not a folder.*real directory"), engine.pin():
        engine.capture(tmp_path / "link")
    assert engine.sweep(lambda: []) is not None and list((engine.root / "manifests").iterdir()) == []


@pytest.fixture(params=["openat2", "walk"])
def beneath(request, monkeypatch):
    """open_beneath both ways: one openat2(2) call, and the component walk used without it."""
    from dtrain.storage import manifest
    if request.param == "walk":
        monkeypatch.setattr(manifest, "_openat2_impl", False)
    else:
        fd = os.open(".", os.O_RDONLY | os.O_DIRECTORY)
        try:
            probe = manifest._openat2(fd, ".", os.O_RDONLY | os.O_DIRECTORY)
        finally:
            os.close(fd)
        if probe is None:
            pytest.skip("openat2(2) cannot be used here (kernel older than 5.6, or a seccomp filter)")
        os.close(probe)
    return request.param


@pytest.mark.slow
def test_open_beneath_follows_no_link_and_never_leaves_the_root(tmp_path, beneath):
    from dtrain.storage.manifest import open_beneath
    (tmp_path / "root/a/b").mkdir(parents=True)
    (tmp_path / "root/a/b/f.txt").write_text("inside")
    (tmp_path / "outside.txt").write_text("outside")
    os.symlink(tmp_path / "root/a", tmp_path / "root/link")
    os.symlink("b/f.txt", tmp_path / "root/a/file-link")
    fd = open_beneath(tmp_path / "root", "a/b/f.txt")
    assert os.read(fd, 100) == b"inside"
    os.close(fd)
    for rel in ("link/b/f.txt", "a/file-link", "a/../../outside.txt", "../outside.txt"):
        with pytest.raises(OSError) as err:
            os.close(open_beneath(tmp_path / "root", rel))
        assert err.value.errno in (errno.ELOOP, errno.EXDEV, errno.ENOTDIR), (rel, err.value)
    with pytest.raises(FileNotFoundError):
        open_beneath(tmp_path / "root", "a/missing")
    gc.collect()  # only this loop's descriptors are counted
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(20):
        os.close(open_beneath(tmp_path / "root", "a/b", os.O_RDONLY | os.O_DIRECTORY))
        with pytest.raises(OSError):
            open_beneath(tmp_path / "root", "link/b")
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) == before  # no descriptor leaks, either way


def test_a_folder_swapped_for_a_link_never_brings_outside_files_in(tmp_path, beneath):
    """D: while captures run, a thread keeps swapping a folder of the volume for a symlink to a
    host folder; no capture may record a name or byte from the host folder."""
    from dtrain.storage.manifest import open_beneath

    src, host = tmp_path / "vol", tmp_path / "host"
    (src / "data").mkdir(parents=True)
    (src / "data" / "mine.txt").write_text("volume")
    host.mkdir()
    for i in range(200):
        (host / f"secret-{i}.txt").write_text("host secret")
    os.symlink(host, src / "link-to-host")
    (src / "data" / "mine.txt").rename(src / "mine.txt")
    with pytest.raises(OSError):  # a link on the way, not only at the end, stops the open
        open_beneath(src, "link-to-host/secret-0.txt")

    stop = threading.Event()

    def swap():
        while not stop.is_set():
            os.rename(src / "data", tmp_path / "data-away")
            os.symlink(host, src / "data")
            os.unlink(src / "data")
            os.rename(tmp_path / "data-away", src / "data")

    (src / "data" / "inside.txt").write_text("volume")
    (host / "inside.txt").write_text("host secret")  # what the same path reaches through the link
    engine = make_engine(tmp_path)
    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        manifests = [snapshot(engine, src)[1] for _ in range(15)]
    finally:
        stop.set()
        swapper.join()
    for manifest in manifests:
        names = {e.path for e in manifest.entries}
        assert not any("secret" in n for n in names), sorted(n for n in names if "secret" in n)[:3]
        assert {e.path for e in manifest.entries if e.path.startswith("link-to-host")} == {"link-to-host"}
        inside = [e for e in manifest.entries if e.path == "data/inside.txt"]
        assert all(e.chunks == [hashing.digest(b"volume")] for e in inside), inside  # never the host's bytes


def test_a_walked_file_reached_through_a_link_afterwards_is_not_opened(tmp_path, beneath):
    """The capture opens a walked file with one open of its whole path and keeps it only if it
    is the very file the walk saw: a folder swapped for a link to a host folder holding a file
    of the same name leads to the host's file, which is closed unread and the path opened again
    by open_beneath (which refuses the link). A fifo swapped in for a file is passed over
    without hanging; a file rewritten since the walk is still read."""
    from dtrain.storage.manifest import scan

    src, host = tmp_path / "vol", tmp_path / "host"
    (src / "data").mkdir(parents=True)
    (src / "data" / "f.txt").write_text("volume")
    (src / "g.txt").write_text("before")
    (src / "p").write_text("a file")
    host.mkdir()
    (host / "f.txt").write_text("host secret")
    walked = dict(scan(src))
    os.rename(src / "data", tmp_path / "away")
    os.symlink(host, src / "data")
    (src / "p").unlink()
    os.mkfifo(src / "p")
    time.sleep(0.01)
    (src / "g.txt").write_text("after!")
    engine = make_engine(tmp_path)
    root_fd = os.open(src, os.O_RDONLY | os.O_DIRECTORY)
    try:
        with pytest.raises(OSError) as err:
            engine._open_walked(src, root_fd, "data/f.txt", walked["data/f.txt"])
        assert err.value.errno in (errno.ELOOP, errno.ENOTDIR)
        run = Run(0, None)
        assert engine._ingest(src, root_fd, "data/f.txt", walked["data/f.txt"], None, run) is None
        assert engine._ingest(src, root_fd, "p", walked["p"], None, run) is None  # a fifo now: gone, no hang
        entry = engine._ingest(src, root_fd, "g.txt", walked["g.txt"], None, run)
        assert entry.chunks == [hashing.digest(b"after!")] and entry.size == 6
    finally:
        os.close(root_fd)
        engine.close()


def test_a_link_replaced_by_a_folder_after_the_walk_counts_as_gone(tmp_path, monkeypatch):
    """The walk lstat's a symlink; before its target is read the link is replaced by a folder
    (readlink: EINVAL). The snapshot records the path as gone, as for a removed one, and does
    not fail (the race test above hit this window now and then)."""
    import dtrain.storage.engine as engine_mod

    src = tmp_path / "vol"
    src.mkdir()
    (src / "kept.txt").write_text("kept")
    os.symlink("kept.txt", src / "flips")
    real_scan = engine_mod.scan

    def scan_then_flip(root):
        yield from real_scan(root)
        os.unlink(src / "flips")
        (src / "flips").mkdir()

    monkeypatch.setattr(engine_mod, "scan", scan_then_flip)
    _, manifest, _ = snapshot(make_engine(tmp_path), src)
    assert {e.path for e in manifest.entries} == {".", "kept.txt"}


def test_a_dropped_unclosed_storage_or_job_store_closes_its_files_at_once(tmp_path):
    """No reference cycle keeps a Storage, its engine's index or a job store alive: dropping the
    last reference closes their SQLite files then, not whenever the cyclic collector runs."""
    from dtrain.backends.local.store import JobStore
    from dtrain.storage import Storage

    def files() -> set[str]:
        out = set()
        for fd in os.listdir("/proc/self/fd"):
            with contextlib.suppress(OSError):
                out.add(os.readlink(f"/proc/self/fd/{fd}"))
        return {f for f in out if f.startswith(str(tmp_path))}

    gc.collect()
    gc.disable()
    try:
        s = Storage(tmp_path / "home")
        vol = Path(s.create_volume("v").path)
        (vol / "a.bin").write_bytes(os.urandom(1 << 16))
        s.create_snapshot("v", name="s1", progress=False)
        assert {Path(f).name for f in files()} >= {"state.db", "index.db"}
        del s
        assert files() == set()
        jobs = JobStore(tmp_path / "jobs.db")
        assert files()
        del jobs
        assert files() == set()
    finally:
        gc.enable()

"""Snapshots and restores as a demanding user meets them: special files (fifos, sockets, device
nodes) and extended attributes kept as `cp -a` and restic keep them, sparse files restored
sparse down to the block, paths longer than PATH_MAX, files written to while a snapshot reads
them, folders in a volume root that dtrain did not make, and manifests of older versions still
read. Each test failed on the code before its fix (the names test guards what already worked)."""

import contextlib
import gzip
import json
import logging
import os
import shutil
import stat
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from conftest import tmpfs
from dtrain.errors import ConflictError
from dtrain.storage import Storage
from dtrain.storage import manifest as mf
from dtrain.storage import engine as engine_module
from dtrain.storage.engine import Engine
from dtrain.storage.fileio import FileIO
from dtrain.storage.testing import tree_state

CHUNK = 64 << 10
ROOT = os.geteuid() == 0


@pytest.fixture
def storage(tmp_path):
    s = Storage(tmp_path / "home")
    yield s
    s.close()


def make_specials(root: Path, *, owners: bool = True) -> None:
    """A fifo, a socket node and (as root) a character and a block device, each with its own
    mode, owner and time, beside an ordinary file."""
    (root / "jobs").mkdir()
    (root / "jobs/data.txt").write_text("data")
    os.mkfifo(root / "jobs/queue", 0o600)
    os.chmod(root / "jobs/queue", 0o640)
    os.mknod(root / "jobs/agent.sock", 0o600 | stat.S_IFSOCK)
    os.chmod(root / "jobs/agent.sock", 0o755)
    if ROOT:
        os.mknod(root / "null", 0o600 | stat.S_IFCHR, os.makedev(1, 3))
        os.mknod(root / "loop9", 0o600 | stat.S_IFBLK, os.makedev(7, 9))
        if owners:
            os.chown(root / "jobs/queue", 1234, 5678)
    for i, name in enumerate(["jobs/queue", "jobs/agent.sock", *(["null", "loop9"] if ROOT else [])]):
        os.utime(root / name, ns=(1, 1_600_000_000_000_000_000 + i))
    os.utime(root / "jobs", ns=(1, 1_500_000_000_000_000_000))


# --- special files ---------------------------------------------------------------------------
def test_fifos_sockets_and_devices_survive_a_snapshot_and_both_restores(storage):
    """A snapshot skipped them with a warning only a terminal saw: a restored volume had lost the
    fifo a job's workers talk through (`cp -a`, `rsync -a` and restic all keep it)."""
    vol = storage.create_volume("work")
    make_specials(vol.path)
    before = tree_state(vol.path)
    snap = storage.create_snapshot("work", name="one")
    assert snap.files == 1
    restored = storage.restore_snapshot("one", to="copy")
    assert tree_state(restored.path) == before
    assert stat.S_ISFIFO(os.lstat(restored.path / "jobs/queue").st_mode)
    for name in ["jobs/queue", "jobs/agent.sock"]:
        os.unlink(vol.path / name)
    (vol.path / "jobs/queue").write_text("a file now")
    assert {c.path: c.fields for c in storage.diff("one")} == {
        "jobs": ("mtime",), "jobs/agent.sock": (), "jobs/queue": ("type",)}
    storage.restore_snapshot("one", in_place=True)
    assert tree_state(vol.path) == before
    assert storage.verify().ok


def test_an_unchanged_volume_with_a_fifo_adds_nothing_and_a_new_fifo_is_seen(storage):
    vol = storage.create_volume("work")
    make_specials(vol.path)
    one = storage.create_snapshot("work", name="one")
    two = storage.create_snapshot("work", name="two")
    assert (one.id != two.id, storage.diff("one", "two")) == (True, [])
    os.mkfifo(vol.path / "jobs/second")
    storage.create_snapshot("work", name="three")
    assert [(c.path, c.kind) for c in storage.diff("two", "three")] == [("jobs", "modified"),
                                                                         ("jobs/second", "added")]


def test_a_manifest_with_special_files_is_a_new_version_and_old_ones_stay_readable(tmp_path):
    """Older dtrain must refuse a manifest holding kinds it does not know as a whole (its version),
    and manifests of version 1 (every snapshot taken before) still load and restore."""
    src = tmp_path / "vol"
    src.mkdir()
    (src / "a.txt").write_text("a")
    engine = Engine(tmp_path / "store", chunk_size=CHUNK, durable=False)
    with engine.pin():
        plain, _ = engine.capture(src)
        engine.commit("plain", plain)
        os.mkfifo(src / "pipe")
        special, _ = engine.capture(src)
        engine.commit("special", special)
    body = {m: json.loads(gzip.decompress(engine.manifest_path(m).read_bytes())) for m in ("plain", "special")}
    assert (body["plain"]["version"], body["special"]["version"]) == (1, 2)
    assert [e[1] for e in body["special"]["entries"]] == ["dir", "file", "fifo"]
    body["special"]["entries"][2][1] = "chardev"  # a damaged device entry: no number
    with pytest.raises(ValueError, match="device 'pipe' has no 'major:minor' number"):
        mf.Manifest.parse(gzip.compress(json.dumps(body["special"]).encode()))
    body["plain"]["xattrs"] = {"a.txt": {"user.k": 5}}  # damaged attributes: refused, never a crash
    with pytest.raises(ValueError, match="xattrs are not a map"):
        mf.Manifest.parse(gzip.compress(json.dumps(body["plain"]).encode()))
    with engine.pin():
        engine.materialize(engine.load("plain"), tmp_path / "r")
    assert os.listdir(tmp_path / "r") == ["a.txt"]
    engine.close()


@pytest.mark.skipif(not ROOT, reason="a tmpfs storage class needs root")
def test_a_move_to_another_file_system_keeps_fifos_and_devices(tmp_path):
    """The move refused a volume holding a fifo ("sockets, fifos and devices are not volume data;
    remove it"), though a snapshot and a restore keep it."""
    with tmpfs(tmp_path / "other", "size=8m") as mnt:
        storage = Storage(tmp_path / "home", classes={"fast": mnt / "fast"})
        vol = storage.create_volume("work")
        make_specials(vol.path)
        before = tree_state(vol.path)
        moved = storage.update_volume("work", storage_class="fast")
        assert moved.path == mnt / "fast/work/data" and tree_state(moved.path) == before
        storage.close()


RESTORE_WITHOUT_MKNOD = r"""
import sys
from pathlib import Path
from dtrain.storage.engine import Engine
engine = Engine(Path(sys.argv[1]), durable=False)
with engine.pin():
    engine.materialize(engine.load("m"), Path(sys.argv[2]))
print("restored")
"""


@pytest.mark.skipif(not ROOT or not shutil.which("unshare"), reason="needs root and unshare(1)")
def test_a_restore_that_may_not_make_device_nodes_makes_the_rest_and_says_so(tmp_path):
    """Inside a user namespace (a rootless container) mknod of a device fails: the restore
    leaves the devices out with one warning naming them, instead of failing whole."""
    src = tmp_path / "vol"
    src.mkdir()
    make_specials(src, owners=False)  # a user namespace maps no other owner
    engine = Engine(tmp_path / "store", durable=False)
    with engine.pin():
        manifest, _ = engine.capture(src)
        engine.commit("m", manifest)
    engine.close()
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    probe = subprocess.run(["unshare", "--user", "--map-root-user", "true"], capture_output=True)
    if probe.returncode:
        pytest.skip("user namespaces are not allowed here")
    done = subprocess.run(["unshare", "--user", "--map-root-user", sys.executable, "-c", RESTORE_WITHOUT_MKNOD,
                           str(tmp_path / "store"), str(tmp_path / "r")], capture_output=True, text=True, env=env)
    assert done.returncode == 0 and done.stdout == "restored\n", done.stderr
    assert "leaves out 2 device nodes (only root may make them), e.g. loop9" in done.stderr
    assert sorted(os.listdir(tmp_path / "r")) == ["jobs"]
    assert stat.S_ISFIFO(os.lstat(tmp_path / "r/jobs/queue").st_mode)


# --- sparse files ------------------------------------------------------------------------------
@pytest.mark.slow
def test_a_sparse_file_with_a_little_data_is_restored_with_as_little_disk(storage):
    """Holes inside a chunk that holds data were written as zeros: a 1 GiB file with 4 KiB of data
    took 4 MiB after a restore (the whole chunk), 1,024 times the original; a file with a block of
    data every 4 MiB took its whole size."""
    vol = storage.create_volume("disks")
    with open(vol.path / "disk.img", "wb") as f:
        f.truncate(1 << 30)
        f.seek(300 << 20)
        f.write(b"\x01" * 4096)
    with open(vol.path / "striped.img", "wb") as f:
        for i in range(16):
            f.seek(i * (4 << 20) + 8192)
            f.write(os.urandom(4096))
        f.truncate(16 * (4 << 20) + 5000)  # ends inside a chunk, in a hole shorter than it
    (vol.path / "tail.bin").write_bytes(os.urandom(100) + bytes(3 * 4096 + 17))  # a short tail of zeros
    if os.stat(vol.path / "disk.img").st_blocks * 512 > 64 << 10:
        pytest.skip("this file system has no holes")
    before = tree_state(vol.path)
    storage.create_snapshot("disks", name="one")
    restored = storage.restore_snapshot("one", to="copy").path
    assert tree_state(restored) == before
    used = {p.name: os.stat(p).st_blocks * 512 for p in restored.iterdir()}
    assert used["disk.img"] <= 64 << 10, used  # was 4 MiB
    assert used["striped.img"] <= 16 * 4096 + (1 << 20), used  # was 64 MiB
    assert os.stat(restored / "striped.img").st_size == 16 * (4 << 20) + 5000
    with open(restored / "disk.img", "rb") as f:
        f.seek((300 << 20) - 1)
        assert f.read(4098) == b"\0" + b"\x01" * 4096 + b"\0"
    assert storage.verify().ok


# --- long paths -------------------------------------------------------------------------------
def _deep(root: Path, levels: int, name: str) -> int:
    """A descriptor of a folder `levels` deep under `root`, made on the way (names of 200 bytes:
    the whole path is longer than PATH_MAX, which no single system call takes)."""
    fd = os.open(root, os.O_RDONLY | os.O_DIRECTORY)
    for _ in range(levels):
        if not os.path.lexists(f"/proc/self/fd/{fd}/{name}"):
            os.mkdir(name, dir_fd=fd)
        nxt = os.open(name, os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
        os.close(fd)
        fd = nxt
    return fd


def test_a_path_longer_than_path_max_is_snapshotted_and_restored(storage):
    """A file 30 folders of 200-byte names deep (6 KB of path) failed the whole snapshot with
    ENAMETOOLONG and a 6,000-character message: openat2 takes at most PATH_MAX bytes."""
    vol = storage.create_volume("deep")
    name = "d" * 200
    fd = _deep(vol.path, 30, name)
    try:
        out = os.open("model.pt", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fd)
        os.write(out, b"weights")
        os.close(out)
        os.symlink("model.pt", "latest", dir_fd=fd)
    finally:
        os.close(fd)
    snap = storage.create_snapshot("deep", name="one")
    assert snap.files == 1
    restored = storage.restore_snapshot("one", to="copy")
    fd = _deep(restored.path, 30, name)
    try:
        assert sorted(os.listdir(fd)) == ["latest", "model.pt"]
        got = os.open("model.pt", os.O_RDONLY, dir_fd=fd)
        assert os.read(got, 100) == b"weights"
        os.close(got)
        assert os.readlink("latest", dir_fd=fd) == "model.pt"
    finally:
        os.close(fd)
    assert storage.verify().ok


def test_names_with_newlines_and_bytes_that_are_not_utf8_round_trip(storage):
    vol = storage.create_volume("names")
    odd = [b"new\nline", b"tab\tand space ", b"latin1-\xe9\xff", b"\x01control"]
    for raw in odd:
        os.makedirs(os.fsencode(vol.path) + b"/" + raw)
        with open(os.fsencode(vol.path) + b"/" + raw + b"/" + raw, "wb") as f:
            f.write(raw)
    before = tree_state(vol.path)
    storage.create_snapshot("names", name="one")
    restored = storage.restore_snapshot("one", to="copy")
    assert tree_state(restored.path) == before
    assert sorted(os.listdir(os.fsencode(restored.path))) == sorted(odd)


# --- files written to while a snapshot reads them --------------------------------------------
class RewritingIO(FileIO):
    """Rewrites one file in place (same size, new bytes, a later mtime, as a training job saving
    a checkpoint over the old one does) just before some of the reads at a chunk after its first:
    the snapshot has already read the first chunk of the old version."""

    def __init__(self, path: Path, times: int):
        self.path, self.times, self.rewrites = path, times, 0
        self.ino = os.stat(path).st_ino

    def read_into(self, fd, buf, offset):
        if offset and self.rewrites < self.times and os.fstat(fd).st_ino == self.ino:
            self.rewrites += 1
            size = os.stat(self.path).st_size
            with open(self.path, "r+b") as f:
                f.write(bytes([self.rewrites]) * size)
            os.utime(self.path, ns=(1, 1_700_000_000_000_000_000 + self.rewrites))
        return super().read_into(fd, buf, offset)


def capture(engine: Engine, src: Path):
    with engine.pin():
        manifest, stats = engine.capture(src)
        manifest_id = uuid.uuid4().hex
        engine.commit(manifest_id, manifest)
    return manifest_id, manifest, stats


def test_a_file_rewritten_while_read_is_read_again_not_recorded_torn(tmp_path):
    """Its first chunk came from the old version and the rest from the new one: the snapshot held
    a checkpoint that never existed, recorded as unchanged (its old ctime), and restored as such."""
    src = tmp_path / "vol"
    src.mkdir()
    (src / "ckpt.pt").write_bytes(b"\xaa" * (2 * CHUNK))
    engine = Engine(tmp_path / "store", chunk_size=CHUNK, durable=False, io=RewritingIO(src / "ckpt.pt", times=1))
    manifest_id, manifest, stats = capture(engine, src)
    now = os.stat(src / "ckpt.pt")
    (entry,) = [e for e in manifest.entries if e.kind == "file"]
    assert (entry.mtime_ns, entry.ctime_ns) == (now.st_mtime_ns, now.st_ctime_ns) and stats.changing == ()
    with engine.pin():
        engine.materialize(engine.load(manifest_id), tmp_path / "r")
    assert (tmp_path / "r/ckpt.pt").read_bytes() == b"\x01" * (2 * CHUNK)  # the new version, whole
    engine.close()


def test_a_file_that_never_settles_is_reported_and_read_again_next_time(tmp_path, caplog):
    src = tmp_path / "vol"
    src.mkdir()
    (src / "ckpt.pt").write_bytes(b"\xaa" * (2 * CHUNK))
    reads = engine_module.READS_OF_A_CHANGING_FILE
    io = RewritingIO(src / "ckpt.pt", times=reads)
    engine = Engine(tmp_path / "store", chunk_size=CHUNK, durable=False, io=io)
    with caplog.at_level(logging.WARNING):
        manifest_id, manifest, stats = capture(engine, src)
    assert io.rewrites == reads and stats.changing == ("ckpt.pt",)
    assert "1 file kept changing while read" in caplog.text and "ckpt.pt" in caplog.text
    (entry,) = [e for e in manifest.entries if e.kind == "file"]
    assert entry.ctime_ns == 0  # read again by the next snapshot, never trusted by its lstat
    engine.io = FileIO()
    with engine.pin():
        again, stats = engine.capture(src, base=engine.load(manifest_id))
    (entry,) = [e for e in again.entries if e.kind == "file"]
    assert stats.read_bytes == 2 * CHUNK and entry.ctime_ns == os.stat(src / "ckpt.pt").st_ctime_ns
    engine.close()


# --- folders in the volume roots that dtrain did not make ----------------------------------------
def test_a_folder_dtrain_did_not_make_is_never_deleted_and_blocks_its_name(storage):
    """Any command (a snapshot, a restore, a new volume) deleted every folder of the volumes root
    that no volume row named, taking it for a kill's leftover: a state.db restored from last
    week's backup cost every volume made since, and a restore `--to scratch` deleted the
    user's own `scratch` folder before putting the snapshot there."""
    vol = storage.create_volume("work")
    (vol.path / "a.txt").write_text("a")
    storage.create_snapshot("work", name="one")
    mine = storage.home / "volumes/scratch"
    (mine / "data").mkdir(parents=True)
    (mine / "data/precious.txt").write_text("mine")
    (storage.home / "volumes/notes.txt").write_text("a file beside the volumes")
    with pytest.raises(ConflictError, match=r"^volume 'scratch' cannot be made: .*volumes/scratch is in the way "
                                            r"\(a folder not made by dtrain.*\); move it elsewhere and retry$"):
        storage.restore_snapshot("one", to="scratch")
    with pytest.raises(ConflictError, match="volume 'scratch' cannot be made"):
        storage.create_volume("scratch")
    storage.create_snapshot("work", name="two")
    assert (mine / "data/precious.txt").read_text() == "mine"
    assert (storage.home / "volumes/notes.txt").read_text() == "a file beside the volumes"
    assert "scratch" not in [v.name for v in storage.list_volumes()]
    assert sorted(os.listdir(storage.home / "volumes/work")) == ["data"]  # no marker left behind
    assert sorted(os.listdir(storage.restore_snapshot("one", to="other").path.parent)) == ["data"]


def test_volumes_of_a_lost_state_database_survive_a_fresh_one(tmp_path):
    home = tmp_path / "home"
    storage = Storage(home)
    vol = storage.create_volume("dataset")
    (vol.path / "train.bin").write_bytes(os.urandom(1000))
    storage.close()
    os.unlink(home / "state.db")  # "reset dtrain": the jobs table went, and the volume rows with it
    storage = Storage(home)
    storage.create_volume("fresh")
    storage.close()
    assert (home / "volumes/dataset/data/train.bin").stat().st_size == 1000


# --- extended attributes ------------------------------------------------------------------------
def test_extended_attributes_of_files_and_folders_survive_snapshots_restores_and_moves(tmp_path):
    """They were dropped: a restored volume had lost the user.* attributes a data pipeline tags
    its shards with (and ACLs, which are attributes too); `cp -a`, `rsync -aX` and restic keep them."""
    with tmpfs(tmp_path / "other", "size=8m") if ROOT else _no_class() as mnt:
        storage = Storage(tmp_path / "home", classes={"fast": mnt / "fast"} if mnt else {})
        vol = storage.create_volume("shards")
        (vol.path / "train").mkdir()
        (vol.path / "train/0.bin").write_bytes(os.urandom(1000))
        (vol.path / "train/1.bin").write_bytes(os.urandom(1000))
        try:
            os.setxattr(vol.path / "train/0.bin", "user.split", b"train\x00\xff")
        except OSError as err:
            pytest.skip(f"no user attributes here: {err}")
        os.setxattr(vol.path / "train", "user.owner", b"lanes-team")
        os.chmod(vol.path / "train/0.bin", 0o444)
        before = tree_state(vol.path)
        storage.create_snapshot("shards", name="one")
        copy = storage.restore_snapshot("one", to="copy").path
        assert os.getxattr(copy / "train/0.bin", "user.split") == b"train\x00\xff"
        assert os.getxattr(copy / "train", "user.owner") == b"lanes-team"
        assert tree_state(copy) == before
        (vol.path / "train/1.bin").write_bytes(b"changed")  # the others are kept from the base manifest
        storage.create_snapshot("shards", name="two")
        assert tree_state(storage.restore_snapshot("two", to="copy2").path) == tree_state(vol.path)
        os.setxattr(vol.path / "train/0.bin", "user.split", b"val")
        assert {c.path: c.fields for c in storage.diff("two")} == {"train/0.bin": ("xattrs",)}
        storage.restore_snapshot("two", in_place=True)
        assert os.getxattr(vol.path / "train/0.bin", "user.split") == b"train\x00\xff"
        if mnt:
            after = tree_state(vol.path)
            assert tree_state(storage.update_volume("shards", storage_class="fast").path) == after
        assert storage.verify().ok
        storage.close()


@contextlib.contextmanager
def _no_class():
    yield None

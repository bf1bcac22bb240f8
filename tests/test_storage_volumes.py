"""Volumes and snapshots through the policy layer: lifecycle, lineage, bad input, crashes
(SIGKILL at several points), full disks, dedup across volumes, verify and diff."""

import json
import os
import signal
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from dtrain.errors import ConflictError, NotFoundError, SpecError, StorageError
from dtrain.storage import Storage
from dtrain.storage.testing import tree_state


@pytest.fixture
def storage(tmp_path):
    s = Storage(tmp_path / "home")
    yield s
    s.close()


def fill(path: Path, n: int = 3, size: int = 50_000) -> None:
    (path / "clips/0601").mkdir(parents=True, exist_ok=True)
    (path / "empty").mkdir(exist_ok=True)
    for i in range(n):
        (path / f"clips/0601/{i}.jpg").write_bytes(os.urandom(size))
    os.symlink("clips/0601/0.jpg", path / "first.jpg")


def fingerprint(s: Storage) -> tuple:
    """Everything stored: rows, store files, volume trees."""
    rows = [tuple(r) for t in ("volumes", "snapshots") for r in s.conn.execute(f"SELECT * FROM {t} ORDER BY name")]
    files = sorted(str(p.relative_to(s.home)) for p in (s.home / "store").rglob("*")
                   if p.is_file() and p.parent.name != "pins" and p.name != "lock")
    trees = {v.name: tree_state(v.path) for v in s.list_volumes()}
    return rows, files, trees, sorted(os.listdir(s.home / "volumes"))


def test_snapshot_change_snapshot_restore_both(storage):
    vol = storage.create_volume("tusimple", size="20Gi", labels={"team": "lanes"})
    assert vol.path == storage.home / "volumes/tusimple/data" and vol.size_bytes == 20 * 2**30
    fill(vol.path)
    before = tree_state(vol.path)
    seen = []
    one = storage.create_snapshot("tusimple", name="one", progress=lambda done, total: seen.append((done, total)))
    assert seen and seen[-1] == (one.bytes, one.bytes) and seen == sorted(seen)
    (vol.path / "clips/0601/1.jpg").write_bytes(b"rewritten")
    (vol.path / "model.pt").write_bytes(os.urandom(10_000))
    after = tree_state(vol.path)
    two = storage.create_snapshot("tusimple", name="two")
    assert (one.files, two.files) == (3, 4) and one.method == two.method == storage.engine.method
    r1 = storage.restore_snapshot("one", to="restored-one")
    r2 = storage.restore_snapshot("two", to="restored-two")
    assert tree_state(r1.path) == before and tree_state(r2.path) == after
    assert (r1.origin_snapshot, r1.head_snapshot, r1.size, r1.storage_class) == ("one", "one", "20Gi", "local")
    (r1.path / "clips/0601/0.jpg").write_bytes(b"job output")  # a restored volume is writable...
    assert tree_state(storage.restore_snapshot("one", to="again").path) == before  # ...and independent
    assert storage.verify().ok


def test_restore_in_place(storage):
    vol = storage.create_volume("data")
    fill(vol.path)
    before = tree_state(vol.path)
    storage.create_snapshot("data", name="good")
    (vol.path / "clips/0601/0.jpg").unlink()
    (vol.path / "junk").write_text("x")
    with pytest.raises(ConflictError, match="train-1"):
        storage.restore_snapshot("good", in_place=True, in_use_by=["train-1"])
    restored = storage.restore_snapshot("good", in_place=True)
    assert tree_state(vol.path) == before and restored.head_snapshot == "good"
    assert sorted(os.listdir(storage.home / "volumes/data")) == ["data"]  # no staging left


def test_lineage_and_listing(storage):
    storage.create_volume("data")
    storage.create_volume("other")
    base = storage.create_snapshot("data")
    assert base.name.startswith("data-") and len(base.name) == len("data-20250101-120000")
    spec = {"name": "train-1", "command": ["python", "train.py"], "processes": 2}
    out = storage.create_snapshot("data", job="train-1", job_spec=spec, source_snapshot=base.name)
    storage.create_snapshot("other", name="other-snap")
    assert (out.job, out.job_spec, out.source_snapshot) == ("train-1", spec, base.name)
    assert [s.name for s in storage.list_snapshots(volume="data")] == [base.name, out.name]
    assert [s.name for s in storage.list_snapshots(job="train-1")] == [out.name]
    assert storage.get_volume("data").head_snapshot == out.name
    json.dumps([out.to_dict(), storage.get_volume("data").to_dict()])  # --json output
    assert out.to_dict()["job_spec"] == spec


def test_bad_input_raises_and_changes_nothing(storage):
    vol = storage.create_volume("data")
    fill(vol.path)
    storage.create_snapshot("data", name="snap")
    storage.create_volume("taken")
    before = fingerprint(storage)
    cases = [
        (NotFoundError, "dtrain volume list", lambda: storage.create_snapshot("nope")),
        (NotFoundError, "dtrain snapshot list", lambda: storage.restore_snapshot("nope", to="x")),
        (NotFoundError, "dtrain snapshot list", lambda: storage.delete_snapshot("nope")),
        (NotFoundError, "dtrain volume list", lambda: storage.delete_volume("nope")),
        (NotFoundError, "dtrain snapshot list", lambda: storage.create_volume("x", origin_snapshot="nope")),
        (ConflictError, "already exists", lambda: storage.create_volume("taken")),
        (ConflictError, "already exists", lambda: storage.create_snapshot("data", name="snap")),
        (ConflictError, "already exists", lambda: storage.restore_snapshot("snap", to="taken")),
        (ConflictError, "train-1, train-2", lambda: storage.delete_volume("data", in_use_by=["train-1", "train-2"])),
        (SpecError, "invalid volume name", lambda: storage.create_volume("Bad_Name")),
        (SpecError, "invalid snapshot name", lambda: storage.create_snapshot("data", name="-x")),
        (SpecError, "invalid volume size", lambda: storage.create_volume("x", size="lots")),
        (SpecError, "exactly one", lambda: storage.restore_snapshot("snap")),
        (SpecError, "exactly one", lambda: storage.restore_snapshot("snap", to="x", in_place=True)),
        (SpecError, "job_spec", lambda: storage.create_snapshot("data", job="j", job_spec=["not", "a", "dict"])),
    ]
    for error, words, call in cases:
        with pytest.raises(error, match=words):
            call()
        assert fingerprint(storage) == before, words


def test_delete_volume_keeps_its_snapshots(storage):
    vol = storage.create_volume("data")
    fill(vol.path)
    state = tree_state(vol.path)
    storage.create_snapshot("data", name="keep")
    storage.delete_volume("data", in_use_by=["zombie"], force=True)
    assert storage.list_volumes() == [] and not (storage.home / "volumes/data").exists()
    assert tree_state(storage.create_volume("data", origin_snapshot="keep").path) == state
    with pytest.raises(ConflictError, match="created again"):  # a different volume under the old name
        storage.restore_snapshot("keep", in_place=True)


def test_delete_snapshot_frees_what_only_it_held(storage):
    vol = storage.create_volume("data")
    fill(vol.path, n=2, size=300_000)
    storage.create_snapshot("data", name="a")
    (vol.path / "clips/0601/1.jpg").write_bytes(os.urandom(200_000))
    storage.create_snapshot("data", name="b")
    store_bytes = lambda: sum(p.stat().st_blocks * 512 for p in (storage.home / "store/packs").rglob("*") if p.is_file())  # noqa: E731
    before = store_bytes()
    freed = storage.delete_snapshot("a")
    assert (freed.bytes, freed.objects, freed.pending) == (300_000, 1, False)
    assert 300_000 - 4096 < before - store_bytes() < 300_000 + 4096  # its blocks, punched out of the pack
    freed = storage.delete_snapshot("b")
    assert freed.bytes == 500_000 and store_bytes() == 0


def test_of_two_deletes_of_one_snapshot_one_frees_it_and_the_other_is_not_found(storage):
    """Two commands delete the same snapshot at once: the one whose delete lands second read the
    snapshot before the first removed it. It must not answer as if it had deleted it, nor remove a
    new snapshot that took the name meanwhile."""
    vol = storage.create_volume("data")
    fill(vol.path, n=2, size=100_000)
    first = storage.create_snapshot("data", name="s")
    other = Storage(storage.home)  # another command
    read = storage.get_snapshot
    won = []

    def read_then_lose_the_race(name):
        snap = read(name)
        won.append(other.delete_snapshot(name))  # lands between this command's read and its delete
        other.create_snapshot("data", name=name)  # and the name is taken again
        return snap

    storage.get_snapshot = read_then_lose_the_race
    try:
        with pytest.raises(NotFoundError, match="no snapshot named 's': another command deleted it just now"):
            storage.delete_snapshot("s")
    finally:
        del storage.get_snapshot
        other.close()
    assert won[0].bytes == 200_000 and not won[0].pending
    again = storage.get_snapshot("s")  # the new one, whole
    assert again.id != first.id and (again.files, again.bytes) == (first.files, first.bytes)
    assert storage.verify("s").damaged == ()


def test_same_content_in_two_volumes_is_stored_once(storage):
    a, b = storage.create_volume("a"), storage.create_volume("b")
    fill(a.path)
    for p in a.path.rglob("*.jpg"):
        target = b.path / p.relative_to(a.path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(p.read_bytes())
    assert storage.create_snapshot("a").added_bytes == 150_000
    snap = storage.create_snapshot("b")
    assert snap.added_bytes == 0 and (snap.files, snap.bytes) == (4, 200_000)  # first.jpg: a copy, not a link


def test_verify_reports_damage_with_snapshots_and_paths(storage):
    vol = storage.create_volume("data")
    fill(vol.path)
    storage.create_snapshot("data", name="one")
    storage.create_snapshot("data", name="two")
    digest = storage.engine.load(storage.get_snapshot("one").id).entries
    digest = next(e.chunks[0] for e in digest if e.path == "clips/0601/2.jpg")
    path, offset, _ = storage.engine.packs.locate(digest)
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset + 1000)
        f.write(b"flipped bits")
    report = storage.verify()
    assert not report.ok and report.objects == 3
    (damage,) = report.damaged
    assert damage.problem == "corrupt" and damage.object == digest
    assert set(damage.hits) == {("one", "clips/0601/2.jpg"), ("two", "clips/0601/2.jpg")}
    again = storage.verify("one").damaged[0]  # out of the index after the first report, which found it corrupt
    assert (again.problem, again.earlier) == ("corrupt", True) and not damage.earlier
    os.unlink(storage.engine.manifest_path(storage.get_snapshot("two").id))
    assert any(d.problem == "manifest" and d.hits == (("two", "*"),) for d in storage.verify().damaged)


def test_diff_between_snapshots_and_against_the_live_volume(storage):
    vol = storage.create_volume("data")
    fill(vol.path)
    storage.create_snapshot("data", name="one")
    (vol.path / "clips/0601/0.jpg").write_bytes(b"new content")
    os.chmod(vol.path / "clips/0601/1.jpg", 0o600)
    (vol.path / "first.jpg").unlink()
    (vol.path / "first.jpg").mkdir()
    (vol.path / "added.txt").write_text("hi")
    storage.create_snapshot("data", name="two")
    (vol.path / "clips/0601/2.jpg").unlink()
    changes = {c.path: (c.kind, c.fields) for c in storage.diff("one", "two")}
    assert changes["clips/0601/0.jpg"] == ("modified", ("content", "mtime"))
    assert changes["clips/0601/1.jpg"] == ("modified", ("mode",))
    assert changes["first.jpg"] == ("modified", ("type",)) and changes["added.txt"] == ("added", ())
    live = {c.path: c.kind for c in storage.diff("two")}
    assert live["clips/0601/2.jpg"] == "removed" and "added.txt" not in live


def test_usage_counts_disk_blocks(storage):
    vol = storage.create_volume("data")
    (vol.path / "f.bin").write_bytes(os.urandom(1 << 20))
    assert (1 << 20) <= storage.usage("data") < (1 << 20) + 64 * 1024


CHILD = r"""
import os, sys
from pathlib import Path
from dtrain.storage import Engine, Storage
from dtrain.storage.testing import SlowIO
home, mode = Path(sys.argv[1]), sys.argv[2]

class DieAfterCommit(Engine):
    def commit(self, *args):
        super().commit(*args)
        os.kill(os.getpid(), 9)  # manifest written, snapshot row not yet committed

class DieBeforeRegistering(Storage):
    def _insert_volume(self, *args):
        os.kill(os.getpid(), 9)  # restored folder renamed into place, row not yet committed

engine_cls = DieAfterCommit if mode == "commit" else Engine
storage_cls = DieBeforeRegistering if mode == "register" else Storage
storage = storage_cls(home, engine=engine_cls(home / "store", io=SlowIO(0.03), workers=2))
report = lambda done, total: print("progress", done, total, flush=True)
if mode in ("snapshot", "commit"):
    storage.create_snapshot("data", name="doomed", progress=report)
else:
    storage.restore_snapshot("base", to="doomed", progress=report)
print("finished", flush=True)
"""


def run_and_kill(home: Path, mode: str, after_lines: int) -> None:
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(home), mode], stdout=subprocess.PIPE, text=True, env=env)
    lines = []
    try:
        for line in child.stdout:
            lines.append(line)
            if len(lines) >= after_lines:
                child.send_signal(signal.SIGKILL)
                break
        child.wait(timeout=60)
    finally:
        child.kill()
    assert child.returncode == -signal.SIGKILL and not any("finished" in x for x in lines), lines


@pytest.mark.parametrize("mode, after_lines", [("snapshot", 5), ("commit", 10**9), ("restore", 5), ("register", 10**9)])
def test_killed_midway_leaves_nothing_visible(tmp_path, mode, after_lines):
    home = tmp_path / "home"
    storage = Storage(home)
    vol = storage.create_volume("data")
    fill(vol.path, n=40, size=20_000)
    storage.create_snapshot("data", name="base")
    (vol.path / "later.bin").write_bytes(os.urandom(500_000))
    for i in range(40):
        (vol.path / f"clips/0601/{i}.jpg").write_bytes(os.urandom(20_000))  # all new content
    run_and_kill(home, mode, after_lines)
    assert [s.name for s in storage.list_snapshots()] == ["base"]
    assert [v.name for v in storage.list_volumes()] == ["data"]
    report = storage.verify()
    assert report.ok and report.garbage_objects > 0 if mode == "commit" else report.ok  # indexed, never registered
    packs = [p for p in (home / "store/packs").rglob("*") if p.is_file()]
    needed = storage.engine.load(storage.get_snapshot("base").id).digests()
    assert {storage.engine.packs.locate(d)[0] for d in needed} == {str(p) for p in packs}  # no pack left unindexed
    assert os.listdir(home / "store/tmp") == [] and sorted(os.listdir(home / "volumes")) == ["data"]
    base_id = storage.get_snapshot("base").id
    assert sorted(os.listdir(home / "store/manifests")) == [f"{base_id}.json.gz", f"{base_id}.key.json"]
    state = tree_state(vol.path)
    storage.create_snapshot("data", name="doomed")
    assert tree_state(storage.restore_snapshot("doomed", to="check").path) == state


def test_killed_in_place_restore_keeps_a_whole_volume(tmp_path):
    home = tmp_path / "home"
    storage = Storage(home)
    vol = storage.create_volume("data")
    fill(vol.path, n=40, size=20_000)
    storage.create_snapshot("data", name="base")
    (vol.path / "extra").write_text("after the snapshot")
    current = tree_state(vol.path)
    script = CHILD.replace('storage.restore_snapshot("base", to="doomed", progress=report)',
                           'storage.restore_snapshot("base", in_place=True, progress=report)')
    env = dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    child = subprocess.Popen([sys.executable, "-c", script, str(home), "restore"], stdout=subprocess.PIPE, env=env)
    child.stdout.readline()
    child.kill()
    child.wait()
    assert tree_state(vol.path) == current  # the old content, whole, until the final swap
    storage.verify()
    assert sorted(os.listdir(home / "volumes/data")) == ["data"]


def _mount_tmpfs(folder: Path, size: str) -> bool:
    folder.mkdir()
    if os.geteuid() != 0:
        return False
    return subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(folder)],
                          capture_output=True).returncode == 0


def test_full_disk_on_a_real_small_file_system(tmp_path):
    small = tmp_path / "small"
    if not _mount_tmpfs(small, "6m"):
        pytest.skip("needs root to mount a small tmpfs")
    try:
        storage = Storage(small / "home")
        vol = storage.create_volume("data")
        (vol.path / "a.bin").write_bytes(os.urandom(1 << 20))
        (vol.path / "b.bin").write_bytes(os.urandom(2 << 20))
        free = os.statvfs(small).f_bavail
        with pytest.raises(StorageError, match=r"no space left.*needed up to 3.0 MiB.*free.*snapshot delete"):
            storage.create_snapshot("data", name="too-big")
        assert storage.list_snapshots() == []
        assert abs(os.statvfs(small).f_bavail - free) < 16  # partial objects were removed
        (vol.path / "b.bin").unlink()
        assert storage.create_snapshot("data", name="fits").bytes == 1 << 20
        with pytest.raises(StorageError, match="no space left.*restoring"):
            (vol.path / "filler").write_bytes(os.urandom(int(os.statvfs(small).f_bavail * 4096 - (300 << 10))))
            storage.restore_snapshot("fits", to="copy")
        assert [v.name for v in storage.list_volumes()] == ["data"]
        assert sorted(os.listdir(storage.home / "volumes")) == ["data"]
        storage.close()
    finally:
        subprocess.run(["umount", str(small)], check=True)


def test_two_storages_share_the_database(storage):
    storage.create_volume("data")
    other = Storage(storage.home)
    other.create_snapshot("data", name="from-other")
    assert [s.name for s in storage.list_snapshots()] == ["from-other"]
    with pytest.raises(sqlite3.IntegrityError):  # names are unique at the database level too
        storage.conn.execute("INSERT INTO volumes (name, uid, created, size, storage_class, labels) "
                             "VALUES ('data','u','t','1Gi','local','{}')")
    other.close()


def test_first_uses_of_a_fresh_home_at_once_all_succeed(tmp_path):
    """Two commands (or server threads) opening a new home at the same moment: the second mkdir
    of its folders found the first's and failed (FileExistsError, a 500 through the server)."""
    import threading

    for round_ in range(30):
        home = tmp_path / f"home{round_}"
        barrier, errors, opened = threading.Barrier(4), [], []

        def first_use():
            barrier.wait()
            try:
                opened.append(Storage(home))
            except Exception as err:  # noqa: BLE001 - collected and shown below
                errors.append(repr(err))

        threads = [threading.Thread(target=first_use) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for s in opened:
            s.close()
        assert errors == [], errors

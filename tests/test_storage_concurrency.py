"""Volumes and snapshots under concurrent commands and hostile volume content: what a job may
leave in its volume (1,000 nested folders), and a volume deleted or moved while a snapshot of it
is taken. Each test failed on the code before its fix."""

import os
import threading
from pathlib import Path

import pytest

from conftest import tmpfs
from dtrain.backends.local.backend import _disk_usage
from dtrain.errors import ConflictError, NotFoundError
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


@pytest.mark.slow
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


# --- a volume's folder replaced, moved or removed while a snapshot reads it -----------------------
@pytest.fixture
def two(tmp_path):
    """Two Storage objects on one home: two commands at once."""
    classes = {"other": tmp_path / "other"}
    a, b = Storage(tmp_path / "home", classes=classes), Storage(tmp_path / "home", classes=classes)
    yield a, b
    a.close()
    b.close()


def _filled(storage: Storage, name: str, tag: bytes) -> Path:
    vol = storage.create_volume(name)
    for i in range(20):
        (vol.path / f"f{i:02d}").write_bytes(tag * 1000)
    return vol.path


def _during_capture(storage: Storage, monkeypatch, act) -> list:
    """Run `act()` once the capture has walked the volume, before it reads a file; what it raised."""
    raised, capture = [], storage.engine.capture

    def capture_with(src, **kw):
        from dtrain.storage import engine as eng
        scan = eng.scan

        def scan_then_act(root):
            items = list(scan(root))
            try:
                act()
            except Exception as err:  # noqa: BLE001 - the test looks at it
                raised.append(err)
            return iter(items)
        monkeypatch.setattr(eng, "scan", scan_then_act)
        try:
            return capture(src, **kw)
        finally:
            monkeypatch.setattr(eng, "scan", scan)
    monkeypatch.setattr(storage.engine, "capture", capture_with)
    return raised


def _blocked(fn) -> threading.Thread:
    """`fn` on a thread of its own, found still waiting 2 s later (it returns within milliseconds
    when nothing holds it)."""
    thread = threading.Thread(target=fn)
    thread.start()
    thread.join(2)
    return thread


@pytest.mark.slow
def test_an_in_place_restore_while_a_snapshot_is_taken_waits_and_the_snapshot_is_whole(two, monkeypatch):
    """The restore swapped the volume's folder under the capture: the snapshot recorded some old
    files, some restored ones and some as gone (88 of 100 files, 4 of them the restored content),
    and both commands said they had succeeded."""
    a, b = two
    path = _filled(a, "data", b"A")
    a.create_snapshot("data", name="old")
    old = tree_state(path)
    for i in range(20):
        (path / f"f{i:02d}").write_bytes(b"B" * 1000)
    now = tree_state(path)
    waiting = []
    raised = _during_capture(a, monkeypatch, lambda: waiting.append(
        _blocked(lambda: b.restore_snapshot("old", in_place=True))))
    a.create_snapshot("data", name="new")
    assert raised == [] and waiting[0].is_alive()  # the swap waited for the capture
    waiting[0].join(30)
    assert tree_state(path) == old  # then restored
    a.restore_snapshot("new", to="copy")
    assert tree_state(a.get_volume("copy").path) == now


@pytest.mark.slow
def test_a_volume_deleted_while_a_snapshot_is_taken_waits_for_it(two, monkeypatch):
    """A delete during the capture: the snapshot was recorded with the files not read yet missing,
    as if the volume had held fewer (or failed with 'No such file or directory')."""
    a, b = two
    path = _filled(a, "data", b"A")
    now = tree_state(path)
    waiting = []
    raised = _during_capture(a, monkeypatch, lambda: waiting.append(_blocked(lambda: b.delete_volume("data"))))
    snap = a.create_snapshot("data", name="s")
    assert raised == [] and waiting[0].is_alive()
    waiting[0].join(30)
    assert snap.files == 20 and a.list_volumes() == []
    a.restore_snapshot("s", to="copy")
    assert tree_state(a.get_volume("copy").path) == now


def test_a_move_while_a_snapshot_is_taken_is_refused(two, monkeypatch):
    """A move to another class during the capture: the folder went away under it."""
    a, b = two
    path = _filled(a, "data", b"A")
    now = tree_state(path)
    raised = _during_capture(a, monkeypatch, lambda: b.update_volume("data", storage_class="other"))
    snap = a.create_snapshot("data", name="s")
    assert [type(e) for e in raised] == [ConflictError] and "is busy" in str(raised[0])
    assert snap.files == 20 and tree_state(a.get_volume("data").path) == now


def test_a_volume_deleted_between_a_snapshots_read_and_its_capture_is_not_snapshotted(two, monkeypatch):
    a, b = two
    _filled(a, "data", b"A")
    settled = a.settled

    def deleted_meanwhile(name):
        settled(name)
        b.delete_volume(name)
    monkeypatch.setattr(a, "settled", deleted_meanwhile)
    with pytest.raises(Exception, match="no volume named 'data'"):
        a.create_snapshot("data", name="s")
    assert a.list_snapshots() == [] and a.engine.manifest_path("x").parent.exists()


HOLD = r"""
import sys, time
from pathlib import Path
from dtrain.storage import Storage
s = Storage(Path(sys.argv[1]))
with s.hold(s.get_volume("data"), exclusive=sys.argv[2] == "x"):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.mark.parametrize("mode", ["x", "s"])
def test_a_killed_command_never_leaves_the_volume_busy(two, mode):
    import signal
    import subprocess
    import sys
    a, _ = two
    _filled(a, "data", b"A")
    proc = subprocess.Popen([sys.executable, "-c", HOLD, str(a.home), mode], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline() == "held\n"
        with pytest.raises(ConflictError, match="is busy"):  # a snapshot meanwhile; a move
            a.update_volume("data", storage_class="other") if mode == "s" else a.create_snapshot("data")
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait()
    a.create_snapshot("data", name="s")
    a.delete_volume("data")
    assert a.list_volumes() == []


def test_a_volume_is_deleted_on_a_disk_without_a_free_inode(tmp_path):
    """Deleting a volume is how a full disk is freed: the lock a delete takes makes no file."""
    import errno
    with tmpfs(tmp_path / "home", "size=20m,nr_inodes=400") as home:
        storage = Storage(home)
        vol = storage.create_volume("data")
        storage.create_snapshot("data", name="s")
        with pytest.raises(OSError) as full:
            for i in range(1000):
                (vol.path / f"f{i}").touch()
        assert full.value.errno == errno.ENOSPC
        storage.delete_volume("data")
        assert storage.list_volumes() == []
        storage.close()


# --- file names a job chose, printed ---------------------------------------------------------------
def test_snapshot_diff_prints_a_name_with_a_newline_or_an_escape_as_one_quoted_line(dt):
    """`snapshot diff` printed names raw: a file named 'x\\nA secret.txt' showed as two changes, and
    one holding an escape sequence recolored (or retitled) the terminal of whoever read the diff."""
    dt("volume", "create", "work")
    data = dt.home / "volumes" / "work" / "data"
    (data / "plain é").write_text("1")
    dt("snapshot", "create", "work", "--name", "one")
    for name in (b"x\nA secret.txt", b"esc\x1b[31mRED", b"bad\xff"):
        with open(os.path.join(os.fsencode(data), name), "wb") as f:
            f.write(b"2")
    dt("snapshot", "create", "work", "--name", "two")
    out = dt("snapshot", "diff", "one", "two").stdout
    assert [line for line in out.splitlines() if line.startswith("A ")] == [
        "A 'bad\\xff'", "A 'esc\\x1b[31mRED'", "A 'x\\nA secret.txt'"]
    assert "\x1b" not in out
    assert [c["path"] for c in dt.json("snapshot", "diff", "one", "two") if c["kind"] == "added"] == [
        "bad\udcff", "esc\x1b[31mRED", "x\nA secret.txt"]


def test_a_snapshot_deleted_while_verify_runs_is_not_reported_damaged(two, monkeypatch):
    """verify listed the snapshots, another command deleted one, and verify found its manifest
    gone: it reported that snapshot's manifest as damaged (ok False, exit 1), a false alarm."""
    a, b = two
    _filled(a, "data", b"A")
    a.create_snapshot("data", name="one")
    a.create_snapshot("data", name="two")
    sweep = a.engine.sweep

    def sweep_then_delete(*args, **kwargs):  # verify has its list of snapshots by now
        done = sweep(*args, **kwargs)
        b.delete_snapshot("one")
        return done
    monkeypatch.setattr(a.engine, "sweep", sweep_then_delete)
    report = a.verify()
    assert report.ok and report.damaged == () and report.snapshots == ("two",)
    b.create_snapshot("data", name="one")
    with pytest.raises(NotFoundError, match="another command deleted it just now"):
        a.verify("one")


def test_the_http_diff_of_a_volume_holding_a_name_that_is_not_utf8(tmp_path):
    """GET /snapshots/NAME/diff answered 500 Internal Server Error (pydantic could not encode the
    lone surrogate Python keeps for the byte 0xff) as soon as a job wrote such a file name."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    import httpx
    from server_util import ThreadServer

    from dtrain.client import Client
    from dtrain.server.app import create_app

    storage = Storage(tmp_path / "home")
    vol = storage.create_volume("data")
    storage.create_snapshot("data", name="one")
    for name in (b"bad\xff", "café".encode(), b"nl\nname"):
        with open(os.path.join(os.fsencode(vol.path), name), "wb") as f:
            f.write(b"x")
    storage.create_snapshot("data", name="two")
    storage.close()
    server = ThreadServer(create_app(lambda: Client(home=tmp_path / "home"), sample_every=3600))
    try:
        r = httpx.get(f"{server.url}/api/v1/snapshots/one/diff", params={"to": "two"})
        assert r.status_code == 200, r.text
        assert {c["path"] for c in r.json() if c["kind"] == "added"} == {"bad\\xff", "café", "nl\nname"}
    finally:
        server.stop()


def test_a_job_started_while_an_in_place_restore_writes_keeps_its_volume_and_files(dt, monkeypatch):
    """Jobs using the volume were looked for before the restore wrote its files, only: a job started
    meanwhile mounted data/, which the swap then moved aside and removed, and the job's output was
    gone though it Succeeded. The restore now asks again, under the volume's lock, before the swap."""
    from dtrain import Client

    dt("volume", "create", "data")
    folder = Path(dt.json("volume", "describe", "data")["extra"]["path"])
    (folder / "v.txt").write_text("one")
    dt("snapshot", "create", "data", "--name", "one")
    (folder / "v.txt").write_text("two")
    backend = Client(home=dt.home).backend()
    materialize = backend.storage.engine.materialize

    gate = folder.parent.parent.parent / "go"  # outside the volume: the job runs until the restore has answered
    job = f"cat /mnt/v.txt > /mnt/seen; while [ ! -e {gate} ]; do sleep 0.05; done; echo out > /mnt/out"

    def materialize_then_a_job_starts(*args, **kw):
        materialize(*args, **kw)
        dt("submit", "writer", "--pvc", "data:/mnt", "--", "sh", "-c", job)
        dt.wait_for("writer", {"Running", "Succeeded", "Failed"})

    monkeypatch.setattr(backend.storage.engine, "materialize", materialize_then_a_job_starts)
    with pytest.raises(ConflictError, match=r"job writer started on volume 'data' while snapshot 'one'"):
        backend.restore_snapshot("one", in_place=True)
    gate.write_text("")
    assert dt.wait_for("writer", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert (folder / "v.txt").read_text() == "two" and (folder / "seen").read_text() == "two"
    assert (folder / "out").read_text() == "out\n"
    assert sorted(os.listdir(folder.parent)) == ["data"]  # the restored files written aside are gone
    backend.storage.close()


def test_a_job_mounts_a_volume_only_once_an_in_place_restores_swap_is_over(tmp_path):
    """A job whose record came after the restore's last look waits for the swap, then mounts the
    restored folder (not the one the swap moves aside)."""
    storage = Storage(tmp_path / "home")
    vol = storage.create_volume("data")
    got = []
    with storage.hold(vol, exclusive=True):  # the swap under way
        t = threading.Thread(target=lambda: got.append(Storage(tmp_path / "home").volume_path("data")))
        t.start()
        t.join(1.0)
        assert t.is_alive() and not got  # waits
    t.join(30)
    assert got == [vol.path]
    assert Storage(tmp_path / "home").volume_path("data") == vol.path  # nothing held: at once
    storage.close()


def test_a_link_put_at_a_volumes_folder_is_one_line_and_never_followed(tmp_path):
    """The lock opens the volume's folder without following a link: a link put there by hand was an
    OSError traceback (ELOOP) from every snapshot, restore and delete of the volume."""
    from dtrain.errors import StorageError

    storage = Storage(tmp_path / "home")
    vol = storage.create_volume("data")
    (vol.path / "f").write_text("x")
    elsewhere = tmp_path / "elsewhere"
    os.rename(vol.path.parent, elsewhere)
    os.symlink(elsewhere, vol.path.parent)
    for act in (lambda: storage.create_snapshot("data", name="s"), lambda: storage.delete_volume("data")):
        with pytest.raises(StorageError, match=r"is not the folder made for it .*a link there is never followed"):
            act()
    assert (elsewhere / "data" / "f").read_text() == "x" and storage.list_snapshots() == []
    storage.close()

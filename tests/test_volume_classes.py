"""Storage classes of local volumes: `volume update --class` moves a volume between class roots.

The second class lives on a tmpfs mounted for the test, so the move is a real copy across file
systems (verified with the snapshot engine's hashes before the switch); the tree is compared by a
hash walk written here, independent of the engine. SIGKILL points come from DTRAIN_MOVE_KILL_AT,
which only the move code reads (dtrain/storage/move.py).
"""

from __future__ import annotations

import hashlib
import os
import random
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from conftest import DTRAIN, Dtrain, tmpfs


@pytest.fixture
def fast_root(tmp_path):
    """A tmpfs: a different file system from the dtrain home's."""
    with tmpfs(tmp_path / "tmpfs", "size=256m") as mnt:
        yield mnt / "fast"


@pytest.fixture
def dtc(dt: Dtrain, fast_root, tmp_path) -> Dtrain:
    config = {"storage_classes": {"fast": str(fast_root), "near": str(tmp_path / "near")}}
    (dt.home / "config.yaml").write_text(yaml.safe_dump(config))
    return dt


def fill(root: Path) -> None:
    """Bytes, modes (setuid, read-only folders), owners, times, and every kind of symlink."""
    (root / "code").mkdir()
    (root / "code" / "train.py").write_text("print('hi')\n")
    (root / "code" / "run.sh").write_text("#!/bin/sh\necho run\n")
    os.chmod(root / "code" / "run.sh", 0o4755)
    (root / "data" / "deep" / "er").mkdir(parents=True)
    (root / "data" / "blob.bin").write_bytes(os.urandom(3 * 1024 * 1024 + 17))
    (root / "data" / "empty").write_bytes(b"")
    (root / "data" / "deep" / "er" / "secret").write_text("s")
    os.chmod(root / "data" / "deep" / "er" / "secret", 0o600)
    os.chown(root / "data" / "deep" / "er" / "secret", 1234, 5678)
    os.symlink("../data/blob.bin", root / "code" / "blob")  # relative
    os.symlink("/etc/hostname", root / "abs-link")  # absolute, outside the volume
    os.symlink("nowhere", root / "dangling")
    os.symlink("data/deep", root / "dir-link")  # a folder link: copied as a link, not followed
    os.utime(root / "data" / "empty", ns=(1, 1_000_000_123))
    os.chmod(root / "data" / "deep" / "er", 0o500)  # read-only folder, filled before it got its mode
    os.chmod(root / "data" / "deep", 0o750)


def tree_hash(root: Path) -> dict[str, tuple]:
    out = {}
    for here, dirs, files in os.walk(root):
        for name in [".", *dirs, *files] if here == str(root) else [*dirs, *files]:
            path = Path(here) / name if name != "." else Path(here)
            st = os.lstat(path)
            if os.path.islink(path):
                what = ("link", os.readlink(path))
            elif path.is_dir():
                what = ("dir",)
            else:
                what = ("file", hashlib.sha256(path.read_bytes()).hexdigest())
            out[str(path.relative_to(root))] = (*what, st.st_mode, st.st_uid, st.st_gid, st.st_mtime_ns)
    return out


def describe(dt: Dtrain, name: str) -> dict:
    vol = dt.json("volume", "describe", name)
    return {**vol, "path": vol["extra"]["path"]}


def entries(folder: Path) -> set[str]:
    return set(os.listdir(folder)) if folder.exists() else set()


def test_move_across_file_systems_keeps_every_byte_mode_and_link(dtc: Dtrain, fast_root, tmp_path):
    dtc("volume", "create", "work")
    old = Path(describe(dtc, "work")["path"])
    fill(old)
    before = tree_hash(old)
    dtc("snapshot", "create", "work", "--name", "before")

    out = dtc("volume", "update", "work", "--class", "fast").stdout
    vol = describe(dtc, "work")
    new = Path(vol["path"])
    assert vol["storage_class"] == "fast" and new == fast_root / "work" / "data" and "fast" in out
    assert os.stat(new).st_dev != os.stat(dtc.home).st_dev  # really another file system
    assert tree_hash(new) == before
    assert not old.parent.exists() and entries(dtc.home / "volumes") == set()
    assert entries(fast_root) == {".dtrain-volumes", "work"}

    # Snapshots keep working: the old one restores, a new one sees no change, the next one is incremental.
    dtc("snapshot", "create", "work", "--name", "after")
    assert dtc.json("snapshot", "diff", "before", "after") == []
    (new / "code" / "train.py").write_text("print('changed')\n")
    dtc("snapshot", "create", "work", "--name", "changed")
    assert [c["path"] for c in dtc.json("snapshot", "diff", "after", "changed")] == ["code/train.py"]
    dtc("snapshot", "restore", "before", "--to", "copy")
    copy = describe(dtc, "copy")
    assert copy["storage_class"] == "local" or Path(copy["path"]).is_relative_to(fast_root)
    assert tree_hash(Path(copy["path"])) == before

    # Same file system: a rename (the data folder keeps its inode); and back across to local.
    inode = os.stat(new).st_ino
    dtc("volume", "update", "work", "--class", "near")
    near = Path(describe(dtc, "work")["path"])
    assert near == tmp_path / "near" / "work" / "data" or os.stat(near).st_ino == inode
    dtc("volume", "update", "work", "--class", "local")
    assert Path(describe(dtc, "work")["path"]) == dtc.home / "volumes" / "work" / "data"
    assert tree_hash(dtc.home / "volumes" / "work" / "data")["code/train.py"] != before["code/train.py"]


def test_a_move_and_a_restore_keep_hard_links_as_one_file(dtc: Dtrain, fast_root):
    dtc("volume", "create", "work")
    old = Path(describe(dtc, "work")["path"])
    (old / "model.pt").write_bytes(os.urandom(1 << 20))
    os.link(old / "model.pt", old / "best.pt")  # as a training script keeps its best checkpoint
    dtc("snapshot", "create", "work", "--name", "linked")
    dtc("volume", "update", "work", "--class", "fast")
    dtc("snapshot", "restore", "linked", "--to", "copy")
    for folder in (Path(describe(dtc, "work")["path"]), Path(describe(dtc, "copy")["path"])):
        assert os.stat(folder / "model.pt").st_ino == os.stat(folder / "best.pt").st_ino
        assert os.stat(folder / "best.pt").st_nlink == 2


@pytest.mark.slow
def test_update_refuses_while_a_job_mounts_the_volume(dtc: Dtrain):
    dtc("volume", "create", "work")
    gate = Path(describe(dtc, "work")["path"]) / "go"
    wait = "import os, time\nwhile not os.path.exists('/mnt/go'): time.sleep(0.1)"
    dtc("submit", "writer", "--pvc", "work:/mnt", "--", "python", "-c", wait)
    dtc.wait_for("writer", {"Running"})
    refused = dtc("volume", "update", "work", "--class", "fast", check=False)
    assert refused.returncode == 2
    assert "mounted read-write by job writer" in refused.stderr and "Traceback" not in refused.stderr
    assert describe(dtc, "work")["storage_class"] == "local"
    gate.write_text("")
    assert dtc.wait_for("writer", {"Succeeded", "Failed"})["status"] == "Succeeded"
    dtc("volume", "update", "work", "--class", "fast")
    assert describe(dtc, "work")["storage_class"] == "fast"

    plan = yaml.safe_load(dtc("volume", "update", "work", "--class", "local", "--dry-run").stdout)
    assert plan["method"].startswith("copy") and plan["to"] == str(dtc.home / "volumes" / "work")
    assert describe(dtc, "work")["storage_class"] == "fast"  # a dry run moves nothing
    missing = dtc("volume", "update", "work", "--class", "nvme", check=False)
    assert missing.returncode == 2 and "unknown storage class 'nvme'" in missing.stderr


# point -> the class the volume must be in after recovery (the commit point decides)
KILL_POINTS = {"journaled": "local", "copied": "local", "verified": "local", "placed": "local",
               "committed": "fast", "removed": "fast"}


@pytest.mark.slow  # six kills and recoveries, ~9 s each on a shared 2-core machine
@pytest.mark.parametrize("point", sorted(KILL_POINTS))
def test_sigkill_mid_move_leaves_the_volume_whole_in_exactly_one_place(dtc: Dtrain, fast_root, point):
    dtc("volume", "create", "work")
    fill(Path(describe(dtc, "work")["path"]))
    before = tree_hash(Path(describe(dtc, "work")["path"]))
    killed = Dtrain(dtc.home, {"DTRAIN_MOVE_KILL_AT": point})("volume", "update", "work", "--class", "fast",
                                                               check=False)
    assert killed.returncode == -9, killed.stderr  # it really died at that point

    vol = describe(dtc, "work")  # the next access recovers
    assert vol["storage_class"] == KILL_POINTS[point]
    assert tree_hash(Path(vol["path"])) == before
    local, fast = entries(dtc.home / "volumes"), entries(fast_root) - {".dtrain-volumes"}
    assert (local, fast) == (({"work"}, set()) if KILL_POINTS[point] == "local" else (set(), {"work"}))

    dtc("snapshot", "create", "work", "--name", "usable")  # usable: snapshot, move on, run a job
    dtc("volume", "update", "work", "--class", "fast")
    assert describe(dtc, "work")["storage_class"] == "fast"
    assert tree_hash(Path(describe(dtc, "work")["path"])) == before


def test_sigkill_mid_rename_on_one_file_system(dtc: Dtrain, tmp_path):
    dtc("volume", "create", "work")
    fill(Path(describe(dtc, "work")["path"]))
    before = tree_hash(Path(describe(dtc, "work")["path"]))
    for point, expected in (("journaled", "local"), ("renamed", "near")):
        killed = Dtrain(dtc.home, {"DTRAIN_MOVE_KILL_AT": point})("volume", "update", "work", "--class", "near",
                                                                   check=False)
        assert killed.returncode == -9, killed.stderr
        vol = describe(dtc, "work")
        assert vol["storage_class"] == expected and tree_hash(Path(vol["path"])) == before
    assert entries(dtc.home / "volumes") == set() and entries(tmp_path / "near") == {".dtrain-volumes", "work"}
    dtc("submit", "reader", "--pvc", "work:/mnt:ro", "--", "python", "-c", "print(open('/mnt/code/train.py').read(), end='')")
    assert dtc.wait_for("reader", {"Succeeded", "Failed"})["status"] == "Succeeded"
    assert dtc("logs", "reader").stdout == "print('hi')\n"


@pytest.mark.slow
def test_sigkill_at_arbitrary_moments_never_splits_the_volume(dtc: Dtrain, fast_root):
    """Kills wherever they land (mid-copy, mid-hash, mid-delete): the points above, and the ones between."""
    dtc("volume", "create", "work")
    data = Path(describe(dtc, "work")["path"])
    fill(data)
    (data / "bulk").mkdir()
    for i in range(64):  # enough bytes that a copy and its verification take a while
        (data / "bulk" / f"{i:02d}.bin").write_bytes(os.urandom(1 << 20))
    before = tree_hash(data)
    delays = random.Random(16).sample([0.4 + 0.1 * i for i in range(12)], 8)  # the same delays every run
    for delay in delays:
        target = "fast" if describe(dtc, "work")["storage_class"] == "local" else "local"
        proc = subprocess.Popen([DTRAIN, "volume", "update", "work", "--class", target], env=dtc.env,
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(delay)
        proc.kill()
        proc.wait()
        vol = describe(dtc, "work")
        places = [p for p in (dtc.home / "volumes" / "work", fast_root / "work") if p.exists()]
        assert places == [Path(vol["path"]).parent], (delay, places)
        assert tree_hash(Path(vol["path"])) == before, delay


@pytest.mark.parametrize("config, words", [
    ("storage_classes: {local: /srv/x}", "other than 'local'"),
    ("storage_classes: {fast: relative/path}", "absolute folder"),
    ("storage_classes: [/srv/x]", "must map class names to folders"),
])
def test_a_bad_storage_class_config_is_one_clear_line(dt: Dtrain, config, words):
    (dt.home / "config.yaml").write_text(config + "\n")
    proc = dt("volume", "create", "v", check=False)
    assert proc.returncode == 2 and words in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_a_class_root_holding_other_files_is_refused(dt: Dtrain, tmp_path):
    (tmp_path / "busy").mkdir()
    (tmp_path / "busy" / "precious.txt").write_text("not dtrain's")
    (dt.home / "config.yaml").write_text(f"storage_classes: {{busy: {tmp_path / 'busy'}}}\n")
    proc = dt("volume", "create", "v", "--class", "busy", check=False)
    assert proc.returncode == 2 and "holds files dtrain did not put there" in proc.stderr
    assert os.listdir(tmp_path / "busy") == ["precious.txt"]


def test_a_class_root_overlapping_the_home_or_another_class_is_refused(dt: Dtrain, tmp_path):
    dt("volume", "create", "v1", "--size", "1Gi")
    inside_volume = dt.home / "volumes" / "v1" / "data"  # where the finding put a class: v1's delete took its volumes
    near = tmp_path / "near"
    cases = [({"fast": inside_volume}, dt.home), ({"fast": tmp_path}, dt.home),
             # two classes on one folder, or one inside the other: config.yaml is refused, naming both (safe_dump sorts)
             ({"near": near, "fast": near}, "storage classes 'fast' and 'near' share the folder"),
             ({"near": near, "fast": near / "inner"}, "storage classes 'fast' and 'near' nest their folders"),
             ({"near": near / "inner", "fast": near}, "storage classes 'fast' and 'near' nest their folders")]
    for classes, other in cases:
        (dt.home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {k: str(v) for k, v in classes.items()}}))
        proc = dt("volume", "create", "x", "--class", "fast", check=False)
        assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
        said = other if isinstance(other, str) else f"storage class 'fast': its folder {classes['fast']} overlaps {other}, "
        assert said in proc.stderr, proc.stderr
    assert os.listdir(inside_volume) == []  # nothing made in the volume, so deleting it deletes no other volume
    (dt.home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"fast": str(inside_volume)}}))
    assert " x " not in dt("volume", "list").stdout
    proc = dt("volume", "update", "v1", "--class", "fast", check=False)
    assert proc.returncode == 2 and "overlaps" in proc.stderr
    assert inside_volume.is_dir()


def test_volumes_of_one_class_share_its_root(dt: Dtrain, tmp_path):
    (dt.home / "config.yaml").write_text(f"storage_classes: {{fast: {tmp_path / 'fast'}}}\n")
    for name in ("a", "b"):
        dt("volume", "create", name, "--class", "fast")
    assert sorted(p.name for p in (tmp_path / "fast").iterdir() if not p.name.startswith(".")) == ["a", "b"]


def test_a_class_folder_spelled_another_way_keeps_the_volumes_in_it(dt: Dtrain, tmp_path):
    """config.yaml may name the same folder through a link or with '..' (or change its spelling after
    volumes were made there): the volumes already in it are the class's, never leftovers to remove."""
    root = tmp_path / "fast"
    os.symlink(root, tmp_path / "link")
    spellings = [root, tmp_path / "link", tmp_path / "x" / ".." / "fast"]
    (tmp_path / "x").mkdir()
    for i, spelling in enumerate(spellings):
        (dt.home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"fast": str(spelling)}}))
        dt("volume", "create", f"v{i}", "--class", "fast")
        path = Path(dt.json("volume", "describe", f"v{i}")["extra"]["path"])
        (path / "precious.txt").write_text(f"volume {i}\n")
        for j in range(i + 1):  # every volume made so far, under any spelling, still has its data
            path = Path(dt.json("volume", "describe", f"v{j}")["extra"]["path"])
            assert (path / "precious.txt").read_text() == f"volume {j}\n"
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["v0", "v1", "v2"]
    (dt.home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"slow": str(tmp_path / "link")}}))
    dt("volume", "create", "v3", "--class", "slow")  # the class renamed, its folder given through the link
    assert sorted(p.name for p in root.iterdir() if not p.name.startswith(".")) == ["v0", "v1", "v2", "v3"]
    assert (root / "v0" / "data" / "precious.txt").read_text() == "volume 0\n"


def test_a_dry_run_makes_no_class_folder(dt: Dtrain, tmp_path):
    (dt.home / "config.yaml").write_text(f"storage_classes: {{fast: {tmp_path / 'new' / 'fast'}}}\n")
    dt("volume", "create", "v")
    plan = dt("volume", "update", "v", "--class", "fast", "--dry-run").stdout
    assert f"to: {tmp_path / 'new' / 'fast' / 'v'}" in plan and "method: rename" in plan
    dt("volume", "create", "w", "--class", "fast", "--dry-run")
    assert not (tmp_path / "new").exists()
    assert dt.json("volume", "describe", "v")["storage_class"] == "local"

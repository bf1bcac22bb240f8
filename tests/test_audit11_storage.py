"""Volumes and snapshots, audit 11: a move into a class folder that is missing, the words of a
verify that could not tidy, a restore that fills the disk, a name beginning with '-', hints that
carry -p and --backend, and manifest checks run once per manifest. Each test failed before its fix."""

from __future__ import annotations

import gzip
import json
import os
import shutil

import pytest
import yaml

from conftest import Dtrain, tmpfs, usage_line
from test_audit9_verify import _corrupt
from dtrain.cli.storage import _verify_text
from dtrain.errors import StorageError
from dtrain.storage import Storage
from dtrain.storage import manifest as mf
from dtrain.storage.info import VerifyReport


# --- 1. volume update into a class whose folder is missing --------------------------------------
def test_a_move_into_a_class_whose_folder_is_missing_is_refused_and_makes_no_folder(tmp_path):
    """The move made the missing folder (mkdir -p) and put the volume there: on the disk beneath
    the mount point of a disk not mounted, hidden once it is mounted again."""
    dt = Dtrain(tmp_path / "home")
    (tmp_path / "nvme").mkdir()  # the mount point of a disk not mounted: an empty folder
    root = tmp_path / "nvme" / "volumes"
    dt("config", "storage-class", "fast", str(root))
    dt("volume", "create", "work")
    (dt.home / "volumes" / "work" / "data" / "a.txt").write_text("kept")
    for dry in ([], ["--dry-run"]):
        line = usage_line(dt("volume", "update", "work", "--class", "fast", *dry, check=False))
        assert f"storage class 'fast': its folder {root} does not exist" in line
        assert f"mkdir -p {root}" in line and "dtrain config storage-class fast FOLDER" in line
    assert os.listdir(tmp_path / "nvme") == []
    vol = dt.json("volume", "describe", "work", "--json")
    assert vol["storage_class"] == "local" and (dt.home / "volumes" / "work" / "data" / "a.txt").read_text() == "kept"
    root.mkdir(parents=True)  # mounted (or made on purpose): the move goes ahead
    dt("volume", "update", "work", "--class", "fast")
    assert (root / "work" / "data" / "a.txt").read_text() == "kept"
    dt("volume", "update", "work", "--class", "local")
    shutil.rmtree(root)  # a folder dtrain used, removed: not made again by the next move
    line = usage_line(dt("volume", "update", "work", "--class", "fast", check=False))
    assert f"its folder {root} does not exist" in line and not root.exists()


def test_a_first_move_into_a_class_on_a_mounted_disk_still_makes_its_folder(tmp_path):
    """A class's first folder, on a disk that is there (a mount point, or a folder holding files),
    is made by the first volume moved in, as by the first one created."""
    dt = Dtrain(tmp_path / "home")
    root = tmp_path / "disk" / "volumes"  # tmp_path holds the home: not an empty mount point
    dt("config", "storage-class", "fast", str(tmp_path / "disk" / "volumes"))
    dt("volume", "create", "work")
    dt("volume", "update", "work", "--class", "fast")
    assert (root / "work" / "data").is_dir()


# --- 2. the words of a verify that only checked -------------------------------------------------
def _report(skipped: str | None, garbage: int = 0) -> VerifyReport:
    return VerifyReport(snapshots=("s1",), objects=2, bytes=10, damaged=(), garbage_objects=garbage,
                        garbage_bytes=garbage * 100, unlisted_manifests=0, skipped=skipped)


def test_verify_that_could_not_tidy_says_what_was_not_looked_for_and_why():
    """It printed 'garbage_objects: not counted' (and two more such lines): not counted why, and
    were there any? Now one line says leftovers were not looked for, why, and where to read more."""
    text = _verify_text(_report("tidying skipped: the disk holding the home folder ($DTRAIN_HOME) is full ..."))
    assert "not counted" not in text and "garbage_objects" not in text and "unlisted_manifests" not in text
    line = next(x for x in text.splitlines() if x.startswith("leftovers:"))
    assert "not looked for" in line and "disk full or read-only" in line and "see skipped" in line


def test_verify_that_tidied_but_could_not_set_aside_shows_the_counts_it_has():
    """Setting damaged objects aside failed after the tidying had run: its counts were real, and
    were printed as 'not counted'."""
    text = _verify_text(_report("setting aside skipped: the disk holding the home folder ($DTRAIN_HOME) filled",
                                garbage=3))
    assert "garbage_objects: 3" in text and "garbage_bytes: 300" in text and "leftovers" not in text


# --- 3. a restore that fills the disk ------------------------------------------------------------
def test_a_restore_that_fills_the_disk_names_the_volume_and_what_it_needs_and_leaves_nothing(tmp_path):
    """It named the internal staging folder ('.../volumes/.tmp-<pid>.<time>.<boot>-<hex>/data') and
    what was left to write when it failed, not what the restore needs."""
    with tmpfs(tmp_path / "disk", "size=6m") as disk:
        dt = Dtrain(disk / "home")
        dt("volume", "create", "data", "--size", "1Mi")
        (dt.home / "volumes" / "data" / "data" / "weights.bin").write_bytes(os.urandom(2_000_000))
        dt("snapshot", "create", "data", "--name", "s1")
        with open(disk / "fill", "wb") as f:  # leave ~600 KB: too little for the 1.9 MiB volume
            f.write(b"\0" * (os.statvfs(disk).f_bavail * os.statvfs(disk).f_frsize - 600_000))
        line = usage_line(dt("snapshot", "restore", "s1", "--to", "copy", check=False))
        assert ".tmp-" not in line and "staging" not in line
        assert line.startswith("no space left in storage class 'local' for volume 'copy' while restoring "
                               "snapshot 's1': it needs about 1.9 MiB")
        assert f"free under {dt.home / 'volumes'};" in line and "Free at least" in line
        assert "'dtrain snapshot restore s1 --to copy --class CLASS'" in line
        assert sorted(os.listdir(dt.home / "volumes")) == ["data"]
        assert os.listdir(dt.home / "store" / "tmp") == []
        assert [v["name"] for v in dt.json("volume", "list", "--json")] == ["data"]
        (disk / "fill").unlink()
        dt("snapshot", "restore", "s1", "--to", "copy")  # with room: the same command works


def test_a_restore_out_of_inodes_names_the_files_it_needs(tmp_path):
    with tmpfs(tmp_path / "few", "size=16m,nr_inodes=40") as mnt:
        storage = Storage(tmp_path / "home", classes={"few": mnt / "few"})
        vol = storage.create_volume("data")
        for i in range(60):
            (vol.path / f"{i}.txt").write_text(str(i))
        storage.create_snapshot("data", name="one")
        with pytest.raises(StorageError, match=r"no room for new files in storage class 'few' for volume 'copy' "
                                               r"while restoring snapshot 'one': it needs 61 files and folders, "
                                               rf"and only \d+ inodes are free under {mnt}/few"):
            storage.restore_snapshot("one", to="copy", storage_class="few")
        assert sorted(os.listdir(mnt / "few")) == [".dtrain-volumes"]
        storage.close()


# --- 4. a name beginning with '-' --------------------------------------------------------------
def test_a_volume_name_beginning_with_a_dash_meets_the_naming_rule(tmp_path):
    """`volume create -- -x` said "the following arguments are required: name": the '--' was taken
    for the start of a job's command, and '-x' never reached the name."""
    dt = Dtrain(tmp_path / "home")
    line = usage_line(dt("volume", "create", "--", "-x", check=False))
    assert line.startswith("invalid volume name '-x': use 1-") and "starting and ending with a letter or digit" in line
    assert "(e.g. '" in line
    dt("volume", "create", "--", "ok")  # '--' ends the options, as argparse has it
    assert [v["name"] for v in dt.json("volume", "list", "--json")] == ["ok"]


# --- 5. hints carry -p and --backend -------------------------------------------------------------
def test_storage_hints_carry_the_project_given(tmp_path):
    """docs/storage.md says the commands these verbs name carry the -p; they named a bare command,
    which looks in the default project's backend."""
    dt = Dtrain(tmp_path / "home")
    dt("project", "create", "team-b")
    dt("volume", "create", "data", "-p", "team-b")
    dt("snapshot", "create", "data", "--name", "s1", "-p", "team-b")
    line = usage_line(dt("snapshot", "restore", "s1", "--to", "data", "-p", "team-b", check=False))
    assert "'dtrain snapshot restore s1 --in-place -p team-b'" in line
    assert "'dtrain snapshot list -p team-b'" in usage_line(dt("snapshot", "describe", "nope", "-p", "team-b",
                                                                check=False))
    assert "'dtrain volume list -p team-b'" in usage_line(dt("volume", "delete", "nope", "-p", "team-b", check=False))
    assert "'dtrain volume list'" in usage_line(dt("volume", "delete", "nope", check=False))  # the default: bare


def test_storage_hints_carry_the_backend_given(tmp_path):
    dt = Dtrain(tmp_path / "home")
    dt.home.mkdir()
    (dt.home / "config.yaml").write_text(yaml.safe_dump({"project": "default", "backend": "kubernetes"}))
    line = usage_line(dt("--backend", "local", "snapshot", "describe", "nope", check=False))
    assert "'dtrain --backend local snapshot list'" in line
    line = usage_line(dt("volume", "delete", "nope", "--backend", "local", check=False))
    assert "'dtrain --backend local volume list'" in line


def test_the_stores_own_hints_name_the_command_as_the_storage_was_told(tmp_path):
    """The engine's messages (a damaged object, a full disk) named `dtrain snapshot verify` bare."""
    storage = Storage(tmp_path / "home", command=lambda words: f"dtrain {words} -p team-b")
    vol = storage.create_volume("data")
    (vol.path / "w.bin").write_bytes(os.urandom(100_000))
    storage.create_snapshot("data", name="s1")
    _corrupt(storage, "s1")
    with pytest.raises(StorageError, match=r"run 'dtrain snapshot verify -p team-b' to see which"):
        storage.restore_snapshot("s1", to="copy")
    storage.close()


# --- 6. manifest checks once per manifest ------------------------------------------------------
def _blob(rows: list) -> bytes:
    body = {"version": 1, "hash": "blake3", "chunk_size": 1 << 20, "started_ns": 1, "fields": mf.FIELDS,
            "entries": rows}
    return gzip.compress(json.dumps(body).encode())


ROOT = [".", "dir", 0o755, 0, 0, 1, 0, "", 1, 1]


def test_a_manifest_is_checked_once_and_an_edited_one_again(monkeypatch):
    """A verify parsed every manifest twice (its sweep, then its check), paying the field checks
    (a third of a parse) each time."""
    calls = []
    check = mf._check_fields
    monkeypatch.setattr(mf, "_check_fields", lambda entries: calls.append(len(entries)) or check(entries))
    monkeypatch.setattr(mf, "_SOUND", {})
    blob = _blob([ROOT, ["a", "file", 0o644, 0, 0, 1, 3, ["x" * 64], 2, 2]])
    first, again = mf.Manifest.parse(blob), mf.Manifest.parse(blob)
    assert first.entries == again.entries and calls == [2]
    edited = _blob([ROOT, ["a", "file", "rwx", 0, 0, 1, 3, ["x" * 64], 2, 2]])
    with pytest.raises(ValueError, match="has mode 'rwx', not a whole number"):
        mf.Manifest.parse(edited)
    with pytest.raises(ValueError, match="has mode 'rwx'"):  # refused each time: never remembered as sound
        mf.Manifest.parse(edited)


@pytest.mark.parametrize("path", ["/abs", "a//b", "a/./b", "a/..", "../x", "a/", "..", "./a", "a/.", "b/../../x"])
def test_every_path_part_that_leads_out_is_still_refused(path, monkeypatch):
    """The paths' check now searches plain substrings first; what the pattern refused, it refuses."""
    monkeypatch.setattr(mf, "_SOUND", {})
    with pytest.raises(ValueError, match="has an empty, '.' or '..' part"):
        mf.Manifest.parse(_blob([ROOT, [path, "file", 0o644, 0, 0, 1, 0, [], 2, 2]]))


@pytest.mark.parametrize("path", ["a.", ".a", "a..b", "...", "a/.b/c", "x/..y"])
def test_dots_inside_a_name_are_not_a_bad_part(path, monkeypatch):
    monkeypatch.setattr(mf, "_SOUND", {})
    folders = [[p, "dir", 0o755, 0, 0, 1, 0, "", 3 + i, 1] for i, p in enumerate(_parents(path))]
    assert mf.Manifest.parse(_blob([ROOT, *folders, [path, "file", 0o644, 0, 0, 1, 0, [], 2, 2]])).entries


def _parents(path: str) -> list[str]:
    parts = path.split("/")[:-1]
    return ["/".join(parts[:i + 1]) for i in range(len(parts))]


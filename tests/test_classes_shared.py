"""Storage classes that share a folder: a removed class's volumes where a configured class now lives
(volume update between them relabels, volume classes names a fix that works) and a configured class
re-pointed away from its volumes (config storage-class says where they stay)."""

from __future__ import annotations

import re
import shlex
import shutil

from conftest import Dtrain, tmpfs
from dtrain.storage.info import human_bytes


def _shared(dt: Dtrain, tmp_path):
    """Volume v1 of class 'fast', removed from config.yaml; 'nvme' named at fast's folder since."""
    folder = tmp_path / "nvme"
    dt("config", "storage-class", "fast", str(folder))
    dt("volume", "create", "v1", "--class", "fast")
    (folder / "v1" / "data" / "f").write_text("kept")
    dt("config", "storage-class", "--unset", "fast")
    dt("config", "storage-class", "nvme", str(folder))
    return folder


def test_volume_update_between_two_classes_of_one_folder_relabels_it(dt: Dtrain, tmp_path):
    """`volume update v1 --class nvme` said '.../v1 already exists': a move into the folder it is in."""
    folder = _shared(dt, tmp_path)
    plan = dt.json("volume", "update", "v1", "--class", "nvme", "--dry-run")
    assert plan["method"].startswith("none (the class's folder is the one the volume is in"), plan
    moved = dt("volume", "update", "v1", "--class", "nvme")
    assert moved.stdout == (f"volume 'v1' is now in storage class 'nvme', whose folder it was in already as class "
                            f"'fast': nothing moved ({folder / 'v1' / 'data'})\n"), moved.stdout
    assert (folder / "v1" / "data" / "f").read_text() == "kept"
    assert [(v["name"], v["storage_class"]) for v in dt.json("volume", "list")] == [("v1", "nvme")]
    classes = {c["name"]: c for c in dt.json("volume", "classes")}
    assert "fast" not in classes and classes["nvme"]["volumes"] == 1, classes
    dt("volume", "update", "v1", "--class", "local")  # a real move still moves
    assert (dt.home / "volumes" / "v1" / "data" / "f").read_text() == "kept" and not (folder / "v1").exists()


def test_a_removed_class_sharing_a_configured_class_folder_names_a_fix_that_works(dt: Dtrain, tmp_path):
    """volume classes told 'dtrain config storage-class fast FOLDER', which config.yaml refuses while
    'nvme' shares that folder."""
    folder = _shared(dt, tmp_path)
    fast = next(c for c in dt.json("volume", "classes") if c["name"] == "fast")
    assert fast["status"] == "NotConfigured", fast
    refused = dt("config", "storage-class", "fast", str(folder), check=False)
    assert refused.returncode != 0  # what it said before
    commands = re.search(r"with '(dtrain config storage-class --unset .*?)', then '(dtrain config storage-class .*?)'",
                         fast["message"])  # quoted as the other hints (it named them unquoted in parentheses)
    assert commands, fast["message"]
    assert ("give its volumes class 'nvme' where they are with 'dtrain volume update VOLUME --class nvme' (nothing "
            "moves, only the class changes)") in fast["message"], fast["message"]
    for command in commands.groups():  # as printed
        dt(*shlex.split(command)[1:])
    assert dt("config", "storage-class", "fast").stdout == f"{folder}\n"
    assert [(c["name"], c["status"]) for c in dt.json("volume", "classes")] == [("local", "Ready"), ("fast", "Ready")]


def test_a_class_named_where_a_re_pointed_class_left_its_volumes_warns(dt: Dtrain, tmp_path):
    """'fast' re-pointed from A to B leaves v1 in A (its recorded folder); `config storage-class nvme A`
    said nothing, as only classes config.yaml no longer names were looked for."""
    old, new = tmp_path / "a", tmp_path / "b"
    dt("config", "storage-class", "fast", str(old))
    dt("volume", "create", "v1", "--class", "fast")
    dt("config", "storage-class", "fast", str(new))
    shared = dt("config", "storage-class", "nvme", str(old))
    assert shared.stderr == (f"dtrain: warning: {old} holds 1 volume of storage class 'fast', whose folder is {new} "
                             f"now: it stays here in class 'fast' and keeps working; 'dtrain volume update VOLUME "
                             f"--class fast' moves one to {new}, and 'dtrain volume update VOLUME --class nvme' gives "
                             f"one class 'nvme' without moving it\n"), shared.stderr
    dt("volume", "update", "v1", "--class", "nvme")  # as said: no move
    assert [(v["name"], v["storage_class"], v["extra"]["path"]) for v in dt.json("volume", "list")] == \
        [("v1", "nvme", str(old / "v1" / "data"))]
    assert dt("config", "storage-class", "other", str(new / ".." / "c")).stderr == ""  # nothing there: quiet


def test_volume_classes_shows_every_folder_a_re_pointed_class_s_volumes_live_in(dt: Dtrain, tmp_path):
    """'fast' re-pointed from A to B: `volume classes` showed B alone, with the volumes of A counted there.
    Each folder is a row with its count, B marked as the one config.yaml names; --json has them in 'folders'."""
    old, new = tmp_path / "a", tmp_path / "b"
    dt("config", "storage-class", "fast", str(old))
    dt("volume", "create", "v1", "--class", "fast")
    dt("volume", "create", "v2", "--class", "fast")
    dt("config", "storage-class", "fast", str(new))
    dt("volume", "create", "v3", "--class", "fast")
    fast = next(c for c in dt.json("volume", "classes") if c["name"] == "fast")
    assert (fast["root"], fast["volumes"], fast["folders"]) == (str(new), 3, {str(new): 1, str(old): 2}), fast
    rows = [line.split() for line in dt("volume", "classes").stdout.splitlines()]
    at = next(i for i, row in enumerate(rows) if row[0] == "fast")
    assert rows[at][1:3] == [str(new), "(configured)"] and rows[at][-1] == "1", rows
    assert rows[at + 1] == [str(old), "-", "-", "2"], rows
    local = next(c for c in dt.json("volume", "classes") if c["name"] == "local")
    assert local["folders"] == {str(dt.home / "volumes"): 0}  # one folder: one row, as before
    assert [row[0] for row in rows[1:]] == ["local", "fast", str(old)], rows


def test_a_removed_class_nested_in_a_configured_class_folder_names_a_move_that_works_and_what_it_moves(
        dt: Dtrain, tmp_path):
    """'fast' at NVME/fast, removed, then 'nvme' named at NVME: volume classes told 'move its volumes into
    'nvme' (dtrain volume update VOLUME --class nvme)', which is refused ('nvme' overlaps fast's folder) and
    was no relabel. It names the move out to 'local' as a move (rename or copy, with the bytes copied) and
    the folder left to remove; done as said, 'nvme' takes the volume."""
    folder = tmp_path / "nvme"
    dt("config", "storage-class", "fast", str(folder / "fast"))
    dt("volume", "create", "v1", "--class", "fast")
    (folder / "fast" / "v1" / "data" / "f").write_bytes(b"x" * 100_000)
    dt("config", "storage-class", "--unset", "fast")
    dt("config", "storage-class", "nvme", str(folder))
    said = dt("config", "storage-class", "nvme", str(folder)).stderr  # named again: it said nothing of this
    assert said == (f"dtrain: warning: storage class 'nvme' takes no volume while {folder / 'fast'}, which overlaps "
                    f"its folder, holds 1 volume of storage class 'fast': 'dtrain volume classes' says how to move it "
                    f"out, or give 'nvme' a folder of its own with 'dtrain config storage-class nvme FOLDER'\n"), said
    fast = next(c for c in dt.json("volume", "classes") if c["name"] == "fast")
    assert "--class nvme" not in fast["message"], fast["message"]
    assert dt("volume", "update", "v1", "--class", "nvme", check=False).returncode != 0  # what it named before
    assert ("'nvme' takes no volume while these lie there, so to keep it instead move them out with 'dtrain volume "
            f"update VOLUME --class local' (it moves each to {dt.home / 'volumes'}: a rename on the same disk: nothing "
            f"is copied), then remove the emptied {folder / 'fast'}") in fast["message"], fast["message"]
    move = re.search(r"with '(dtrain volume update VOLUME --class local)'", fast["message"]).group(1)
    dt(*shlex.split(move.replace("VOLUME", "v1"))[1:])
    shutil.rmtree(folder / "fast")
    dt("volume", "update", "v1", "--class", "nvme")
    assert (folder / "v1" / "data" / "f").read_bytes() == b"x" * 100_000



def test_the_move_out_names_the_bytes_it_copies_from_another_disk(dt: Dtrain, tmp_path):
    """The same with the classes on a disk other than the home's: the move out copies, and says how much."""
    with tmpfs(tmp_path / "disk", "size=8m") as disk:
        dt("config", "storage-class", "fast", str(disk / "fast"))
        dt("volume", "create", "v1", "--class", "fast")
        (disk / "fast" / "v1" / "data" / "f").write_bytes(b"x" * 300_000)
        dt("config", "storage-class", "--unset", "fast")
        dt("config", "storage-class", "nvme", str(disk))
        fast = next(c for c in dt.json("volume", "classes") if c["name"] == "fast")
        used = next(v["used_bytes"] for v in dt.json("volume", "list") if v["name"] == "v1")
        assert f"each to {dt.home / 'volumes'}: a copy of {human_bytes(used)} to another disk, verified by hashing " \
               f"both), then remove the emptied {disk / 'fast'}" in fast["message"], fast["message"]
        assert used >= 300_000
        dt("volume", "update", "v1", "--class", "local")
        assert (dt.home / "volumes" / "v1" / "data" / "f").read_bytes() == b"x" * 300_000


def test_re_pointing_and_removing_a_class_say_where_its_volumes_really_stay(dt: Dtrain, tmp_path):
    """'fast' re-pointed A -> B -> C: the second warning counted the volumes of A as staying in B, and
    --unset said all of them stayed in C's predecessor B. Each folder is named with its own count."""
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    dt("config", "storage-class", "fast", str(a))
    dt("volume", "create", "v1", "--class", "fast")
    dt("volume", "create", "v2", "--class", "fast")
    dt("config", "storage-class", "fast", str(b))
    dt("volume", "create", "v3", "--class", "fast")
    said = dt("config", "storage-class", "fast", str(c)).stderr
    assert said.startswith(f"dtrain: warning: the 1 volume of storage class 'fast' stays in {b} and keeps "), said
    said = dt("config", "storage-class", "--unset", "fast").stderr
    assert said.startswith(f"dtrain: warning: storage class 'fast' still holds 3 volumes: they stay in {a} (2 volumes) "
                           f"and {b} (1 volume) and keep working "), said

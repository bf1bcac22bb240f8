"""Local storage classes: a removed class's message names every folder its volumes lie in; a class is
never named inside a folder other volumes live in; dtrain tidies only the class folders it claimed."""

from __future__ import annotations

import yaml

from conftest import Dtrain


def _fast(dt: Dtrain) -> dict:
    return next(c for c in dt.json("volume", "classes") if c["name"] == "fast")


def test_a_removed_class_re_pointed_before_names_every_folder_its_volumes_lie_in(dt: Dtrain, tmp_path):
    """'fast' re-pointed from a to b (v1 stays in a), then removed: NotConfigured said 'volumes live in a'
    alone, and v2 in b went unnamed."""
    a, b = tmp_path / "a", tmp_path / "b"
    dt("config", "storage-class", "fast", str(a))
    dt("volume", "create", "v1", "--class", "fast")
    dt("config", "storage-class", "fast", str(b))
    dt("volume", "create", "v2", "--class", "fast")
    dt("config", "storage-class", "--unset", "fast")
    fast = _fast(dt)
    assert fast["status"] == "NotConfigured" and set(fast["folders"]) == {str(a), str(b)}, fast
    root, other = fast["root"], ({str(a), str(b)} - {fast["root"]}).pop()
    assert fast["message"].startswith(f"volumes live in {root}, {other}, but "), fast["message"]


def test_the_folders_named_are_bounded(dt: Dtrain, tmp_path):
    """Five folders: the first three, then how many more."""
    folders = [tmp_path / f"f{i}" for i in range(5)]
    for i, folder in enumerate(folders):
        dt("config", "storage-class", "fast", str(folder))
        dt("volume", "create", f"v{i}", "--class", "fast")
    dt("config", "storage-class", "--unset", "fast")
    message = _fast(dt)["message"]
    said = message.removeprefix("volumes live in ").split(", but ")[0]
    assert said.endswith(" and 2 more") and said.count(str(tmp_path)) == 3, message


def test_a_class_inside_a_removed_class_folder_is_refused_and_nothing_is_saved(dt: Dtrain, tmp_path):
    """'nvme' named at a folder inside v1's data (of removed 'fast') was only warned of, and the next
    `volume create` tidied nvme's folder as a class folder: an empty folder of v1's data was removed."""
    fast = tmp_path / "fast"
    dt("config", "storage-class", "fast", str(fast))
    dt("volume", "create", "v1", "--class", "fast")
    (fast / "v1" / "data" / "sub" / "empty").mkdir(parents=True)
    dt("config", "storage-class", "--unset", "fast")
    before = (dt.home / "config.yaml").read_text()
    inside = fast / "v1" / "data" / "sub"
    proc = dt("config", "storage-class", "nvme", str(inside), check=False)
    assert proc.returncode != 0 and proc.stdout == "", proc
    assert proc.stderr == (f"dtrain: error: storage class 'nvme': its folder {inside} lies inside {fast}, where 1 volume "
                           f"of storage class 'fast' lives, and a class's folder is tidied as dtrain's own (a volume's "
                           f"data there would be cut): give 'nvme' a folder apart from {fast} with 'dtrain config storage-class nvme "
                           f"FOLDER'; nothing was changed\n"), proc.stderr
    assert (dt.home / "config.yaml").read_text() == before
    dt("config", "storage-class", "nvme", str(tmp_path / "nvme"))  # a folder of its own: taken
    assert (fast / "v1" / "data" / "sub" / "empty").is_dir()


def test_a_class_around_a_removed_class_folder_is_still_only_warned_of(dt: Dtrain, tmp_path):
    """Around it (the removed class's folder inside the new one's) the class takes no volume until they
    move out (test_classes_shared): warned, saved, and nothing of theirs is tidied away."""
    folder = tmp_path / "nvme"
    dt("config", "storage-class", "fast", str(folder / "fast"))
    dt("volume", "create", "v1", "--class", "fast")
    dt("config", "storage-class", "--unset", "fast")
    said = dt("config", "storage-class", "nvme", str(folder))
    assert "takes no volume while" in said.stderr and yaml.safe_load((dt.home / "config.yaml").read_text())[
        "storage_classes"] == {"nvme": str(folder)}
    dt("volume", "create", "x")
    assert [v["name"] for v in dt.json("volume", "list")] == ["v1", "x"]


def test_a_class_folder_dtrain_never_claimed_is_not_tidied(dt: Dtrain, tmp_path):
    """A class named at a folder of the user's (Unusable: it holds other files): the next `volume create`
    removed its empty folders as a killed create's leftovers."""
    mine = tmp_path / "mine"
    (mine / "empty").mkdir(parents=True)
    (mine / "notes.txt").write_text("x")
    (dt.home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"nvme": str(mine)}}))
    dt("volume", "create", "x")
    assert sorted(p.name for p in mine.iterdir()) == ["empty", "notes.txt"]

"""Local storage classes: a removed class's message names every folder its volumes lie in."""

from __future__ import annotations

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

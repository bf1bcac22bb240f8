"""Audit 8, storage classes (performance tiers) and config.yaml: repairing a config.yaml whose
classes overlap, links between class folders, removing a class that holds volumes, and a
Kubernetes user who may list StorageClasses but not VolumeAttributesClasses."""

from __future__ import annotations

import os

import yaml
from conftest import Dtrain, assert_usage_error


def _write_classes(dt: Dtrain, classes: dict) -> None:
    (dt.home / "config.yaml").write_text(yaml.safe_dump({"deleted_job_ttl": "7d",
                                                         "storage_classes": {k: str(v) for k, v in classes.items()}}))


def _classes(dt: Dtrain) -> dict:
    return yaml.safe_load((dt.home / "config.yaml").read_text())["storage_classes"]


def test_class_folders_reaching_one_folder_through_a_link_are_refused_at_load(dt: Dtrain, tmp_path):
    """A link to another class's folder (or into it) passed the load check and was refused only at use,
    so `volume classes` showed both Unusable and config storage-class accepted it."""
    disk = tmp_path / "disk"
    (disk / "inner").mkdir(parents=True)
    (tmp_path / "same").symlink_to(disk)
    (tmp_path / "into").symlink_to(disk / "inner")
    for link, words in ((tmp_path / "same", "share the folder"), (tmp_path / "into", "nest their folders")):
        _write_classes(dt, {"fast": disk, "slow": link})
        assert_usage_error(dt("volume", "classes", check=False), "'fast' and 'slow'", words, "symbolic link")
        _write_classes(dt, {"fast": disk})
        assert_usage_error(dt("config", "storage-class", "slow", str(link), check=False), words)
        assert _classes(dt) == {"fast": str(disk)}
    assert os.listdir(disk) == ["inner"] and os.listdir(disk / "inner") == []  # nothing written through a link

"""Audit 8, storage classes (performance tiers) and config.yaml: repairing a config.yaml whose
classes overlap, links between class folders, removing a class that holds volumes, and a
Kubernetes user who may list StorageClasses but not VolumeAttributesClasses."""

from __future__ import annotations

import os

import pytest
import yaml
from conftest import Dtrain, assert_usage_error


def _write_classes(dt: Dtrain, classes: dict) -> None:
    (dt.home / "config.yaml").write_text(yaml.safe_dump({"deleted_job_ttl": "7d",
                                                         "storage_classes": {k: str(v) for k, v in classes.items()}}))


def _classes(dt: Dtrain) -> dict:
    return yaml.safe_load((dt.home / "config.yaml").read_text())["storage_classes"]


@pytest.mark.slow
def test_overlapping_classes_refuse_every_command_but_the_config_verbs_that_repair_them(dt: Dtrain, tmp_path):
    """Two classes on one folder (or nested) stopped every command, the `--unset` that fixes the
    file included; the error only said to edit it."""
    disk = tmp_path / "disk"
    for classes in ({"fast": disk, "slow": disk}, {"fast": disk, "slow": disk / "inner"}):
        _write_classes(dt, classes)
        refused = dt("volume", "list", check=False)
        assert_usage_error(refused, "'fast' and 'slow'", "dtrain config storage-class --unset slow",
                           "dtrain config storage-class slow FOLDER")
        shown = dt("config", "storage-class")  # what is configured, to repair it
        assert f"slow: {classes['slow']}" in shown.stdout and "'fast' and 'slow'" in shown.stderr
        assert dt("config", "storage-class", "slow").stdout.strip() == str(classes["slow"])
        # a change that leaves them overlapping is refused and writes nothing
        before = (dt.home / "config.yaml").read_bytes()
        assert_usage_error(dt("config", "storage-class", "slow", str(disk / "deeper"), check=False),
                           "'fast' and 'slow'", "nothing was changed")
        assert (dt.home / "config.yaml").read_bytes() == before
        dt("config", "storage-class", "--unset", "slow")
        assert _classes(dt) == {"fast": str(disk)}
        assert yaml.safe_load((dt.home / "config.yaml").read_text())["deleted_job_ttl"] == "7d"
        dt("volume", "list")
    _write_classes(dt, {"fast": disk, "slow": disk})
    dt("config", "storage-class", "slow", str(tmp_path / "other"))  # re-pointing one repairs it too
    assert _classes(dt) == {"fast": str(disk), "slow": str(tmp_path / "other")}
    dt("volume", "create", "v", "--class", "slow", "--size", "1Mi")


def test_a_config_that_is_not_yaml_keeps_its_one_line_error_for_the_config_verbs(dt: Dtrain):
    (dt.home / "config.yaml").write_text("storage_classes: [unclosed\n")
    for words in (["config", "storage-class"], ["config", "storage-class", "--unset", "fast"], ["volume", "list"]):
        assert_usage_error(dt(*words, check=False), "config.yaml")


def test_the_sdk_repairs_overlapping_classes_too(home, tmp_path):
    from dtrain.client import Client
    from dtrain.errors import SpecError

    (home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"a": str(tmp_path / "d"), "b": str(tmp_path / "d")}}))
    client = Client(home=home)
    try:
        client.list_volumes()
    except SpecError as err:
        assert "storage classes 'a' and 'b'" in str(err)
    else:
        raise AssertionError("overlapping classes were used")
    assert client.unset_storage_classes(["b"]).volumes == {"b": 0}
    assert client.list_volumes() == []


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
        dt("config", "storage-class", "--unset", "slow")
        assert_usage_error(dt("config", "storage-class", "slow", str(link), check=False), words, "nothing was changed")
        assert _classes(dt) == {"fast": str(disk)}
    assert os.listdir(disk) == ["inner"] and os.listdir(disk / "inner") == []  # nothing written through a link


def test_removing_or_repointing_a_class_that_holds_volumes_says_what_becomes_of_them(dt: Dtrain, tmp_path):
    """`--unset` of a class holding volumes said only that they stay; re-pointing it said nothing."""
    disk, other = tmp_path / "disk", tmp_path / "other"
    dt("config", "storage-class", "fast", str(disk))
    dt("config", "storage-class", "empty", str(tmp_path / "empty"))
    for name in ("a", "b"):
        dt("volume", "create", name, "--class", "fast", "--size", "1Mi")
    quiet = dt("config", "storage-class", "fast", f"{tmp_path}/x/../disk")  # the same folder spelled anew
    assert quiet.stderr == ""
    moved = dt("config", "storage-class", "fast", str(other))
    assert "2 volumes of storage class 'fast' stay in" in moved.stderr and str(other) in moved.stderr
    assert "dtrain volume update VOLUME --class fast" in moved.stderr
    dt("config", "storage-class", "fast", str(disk))
    gone = dt("config", "storage-class", "--unset", "fast", "empty")
    assert gone.stdout.splitlines() == ["storage class 'fast' removed", "storage class 'empty' removed"]
    warning = gone.stderr.strip().splitlines()
    assert len(warning) == 1 and "storage class 'fast' still holds 2 volumes" in warning[0]
    assert str(disk) in warning[0] and f"dtrain config storage-class fast {disk}" in warning[0]
    dt("snapshot", "create", "a", "--name", "a1")  # they keep working, as said
    assert sorted(os.listdir(disk)) == [".dtrain-volumes", "a", "b"]


# ------------------------------------------------------------------------------- Kubernetes

def _k8s_cluster():
    from dtrain.backends.kubernetes.fake import FakeCluster

    cluster = FakeCluster()
    cluster.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "csi.trident.netapp.io",
                    "metadata": {"name": "standard",
                                 "annotations": {"storageclass.kubernetes.io/is-default-class": "true"}}})
    cluster.create({"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass", "metadata": {"name": "ultra"},
                    "driverName": "csi.trident.netapp.io", "parameters": {"serviceLevel": "Ultra"}})
    return cluster


def test_kubernetes_lists_storage_classes_when_volume_attributes_classes_are_forbidden(home, tmp_path):
    """A 403 on VolumeAttributesClasses (cluster-scoped, granted apart) failed the whole listing; the
    StorageClasses the user may read are listed now, with one warning line naming what is missing."""
    pytest.importorskip("kubernetes")
    from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
    from dtrain.backends.kubernetes.fake import FakeKubeServer

    cluster = _k8s_cluster()
    with FakeKubeServer(cluster) as server:
        api = server.api_client()
        backend = KubernetesBackend(KubernetesConfig(project="lanes", image="i:1"), api_client=api)
        classes = backend.list_storage_classes()
        assert [c.name for c in classes] == ["standard", "ultra"] and classes.notices == ()
        cluster.forbidden.add(("storage.k8s.io", "volumeattributesclasses"))
        classes = backend.list_storage_classes()
        assert [c.name for c in classes] == ["standard"]
        [notice] = classes.notices
        assert notice.code == "classes-unlisted" and "VolumeAttributesClasses" in notice.message
        assert "kubectl auth can-i list volumeattributesclasses.storage.k8s.io" in notice.message
        api.close()


@pytest.mark.slow
def test_the_cli_and_the_api_warn_of_forbidden_volume_attributes_classes(home, tmp_path):
    import json

    import httpx

    pytest.importorskip("kubernetes")
    pytest.importorskip("fastapi")
    from server_util import ThreadServer

    from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
    from dtrain.backends.kubernetes.fake import FakeKubeServer
    from dtrain.client import Client
    from dtrain.server.app import create_app

    cluster = _k8s_cluster()
    cluster.forbidden.add(("storage.k8s.io", "volumeattributesclasses"))
    with FakeKubeServer(cluster) as server:
        api = server.api_client()
        backend = KubernetesBackend(KubernetesConfig(project="lanes", image="i:1"), api_client=api)
        kubeconfig = tmp_path / "kubeconfig"
        server.write_kubeconfig(kubeconfig)
        (home / "config.yaml").write_text(json.dumps({"backend": "kubernetes", "project": "lanes", "kubernetes": {
            "kubeconfig": str(kubeconfig), "image": "i:1"}}))
        dt = Dtrain(home)
        proc = dt("volume", "classes")
        assert "standard (default)" in proc.stdout and "ultra" not in proc.stdout
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("dtrain: warning: VolumeAttributesClasses"), proc.stderr
        assert [c["name"] for c in json.loads(dt("volume", "classes", "--json").stdout)] == ["standard"]

        http_server = ThreadServer(create_app(lambda: Client(
            home=home, backend="kubernetes", backends={"kubernetes": backend}), sample_every=3600))
        try:
            with httpx.Client(base_url=http_server.url, timeout=60) as http:
                r = http.get("/api/v1/storage-classes")
                assert r.status_code == 200 and [c["name"] for c in r.json()] == ["standard"]
                assert "VolumeAttributesClasses" in r.headers["warning"]
                cluster.forbidden.clear()
                r = http.get("/api/v1/storage-classes")
                assert [c["name"] for c in r.json()] == ["standard", "ultra"] and "warning" not in r.headers
        finally:
            http_server.stop()
        api.close()


def test_storage_class_is_spelled_as_kubectl_and_run_ai_spell_it_too(dt: Dtrain, tmp_path):
    """`--storage-class` (a PVC's storageClassName, Run:AI's storage class) was an unrecognized argument."""
    dt("config", "storage-class", "fast", str(tmp_path / "fast"))
    dt("volume", "create", "v", "--storage-class", "fast", "--size", "1Mi")
    dt("volume", "update", "v", "--storage-class", "local")
    dt("snapshot", "create", "v", "--name", "s")
    dt("snapshot", "restore", "s", "--to", "w", "--storage-class", "fast")
    assert {v["name"]: v["storage_class"] for v in dt.json("volume", "list")} == {"v": "local", "w": "fast"}

"""Storage classes shown to the user (`dtrain volume classes`, Client.list_storage_classes,
GET /api/v1/storage-classes): what `kubectl get storageclass` shows, on every backend."""

from __future__ import annotations

import json

import pytest
import yaml

from conftest import Dtrain
from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer

IMAGE = "ghcr.io/example/lanes:1"


def _classes(dt: Dtrain) -> dict[str, dict]:
    return {c["name"]: c for c in dt.json("volume", "classes")}


def test_local_classes_show_folder_state_space_volumes_and_the_default(dt: Dtrain, tmp_path):
    fast, slow = tmp_path / "fast", tmp_path / "disk" / "slow"
    (dt.home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"fast": str(fast), "slow": str(slow)}}))
    dt("volume", "create", "a", "--class", "fast", "--size", "1Mi")
    dt("volume", "create", "b", "--class", "fast", "--size", "1Mi")
    dt("volume", "create", "c", "--size", "1Mi")
    listed = dt.json("volume", "classes")
    assert [c["name"] for c in listed] == ["local", "fast", "slow"]  # the default first
    classes = {c["name"]: c for c in listed}
    assert [n for n, c in classes.items() if c["default"]] == ["local"]
    assert classes["local"]["root"] == str(dt.home / "volumes")
    assert (classes["fast"]["root"], classes["slow"]["root"]) == (str(fast), str(slow))
    assert {n: c["volumes"] for n, c in classes.items()} == {"local": 1, "fast": 2, "slow": 0}
    assert {n: c["status"] for n, c in classes.items()} == {"local": "Ready", "fast": "Ready", "slow": "Ready"}
    assert "not used yet" in classes["slow"]["message"] and not slow.exists()  # listing makes nothing
    for c in listed:
        assert 0 < c["free_bytes"] <= c["total_bytes"]
    text = dt("volume", "classes").stdout
    assert "local (default)" in text and str(fast) in text and "KIND" not in text  # one kind locally

    (fast / ".dtrain-volumes").unlink()  # what an unmounted disk looks like: its mount point, unmarked
    c = _classes(dt)["fast"]
    assert c["status"] == "NotMounted" and "is its disk mounted?" in c["message"] and "a, b" in c["message"]
    (fast / ".dtrain-volumes").touch()

    (dt.home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"slow": str(slow)}}))
    c = _classes(dt)["fast"]  # taken out of config.yaml: its volumes are still somewhere
    assert (c["status"], c["volumes"], c["root"]) == ("NotConfigured", 2, str(fast))
    assert "names no class 'fast'" in c["message"]
    assert (f"name its folder under 'storage_classes:' again with 'dtrain config storage-class fast {fast}' to use "
            "or move them") in c["message"], c["message"]  # quoted as the other hints (it said it in parentheses)


def test_a_class_whose_folder_holds_other_files_is_unusable(dt: Dtrain, tmp_path):
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "precious.txt").write_text("x")
    (dt.home / "config.yaml").write_text(f"storage_classes: {{busy: {busy}}}\n")
    c = _classes(dt)["busy"]
    assert c["status"] == "Unusable" and "holds files dtrain did not put there" in c["message"]
    assert "busy: " in dt("volume", "classes").stdout  # the reason under the table


def test_sagemaker_refuses_storage_classes_in_one_line(dt: Dtrain):
    proc = dt("volume", "classes", "--backend", "sagemaker", check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "--channel" in proc.stderr


def test_the_sdk_lists_the_same_classes(home, tmp_path):
    from dtrain.client import Client

    (home / "config.yaml").write_text(f"storage_classes: {{fast: {tmp_path / 'fast'}}}\n")
    classes = Client(home=home).list_storage_classes()
    assert [(c.name, c.default, c.kind) for c in classes] == [("local", True, "StorageClass"),
                                                               ("fast", False, "StorageClass")]


# ------------------------------------------------------------------------------- Kubernetes

def _storage_class(name: str, provisioner: str, *, default: bool = False, **fields) -> dict:
    meta: dict = {"name": name}
    if default:
        meta["annotations"] = {"storageclass.kubernetes.io/is-default-class": "true"}
    return {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": meta,
            "provisioner": provisioner, **fields}


def _vac(name: str, driver: str, **parameters) -> dict:
    return {"apiVersion": "storage.k8s.io/v1", "kind": "VolumeAttributesClass", "metadata": {"name": name},
            "driverName": driver, "parameters": parameters}


@pytest.fixture
def k8s():
    cluster = FakeCluster()
    cluster.create(_storage_class("standard", "csi.trident.netapp.io", default=True, reclaimPolicy="Retain",
                                  parameters={"backendType": "ontap-nas"}))
    cluster.create(_storage_class("premium", "csi.trident.netapp.io", allowVolumeExpansion=True))
    cluster.create(_vac("ultra", "csi.trident.netapp.io", serviceLevel="Ultra"))
    with FakeKubeServer(cluster) as server:
        client = server.api_client()
        yield cluster, server, lambda **kw: KubernetesBackend(KubernetesConfig(project="lanes", image=IMAGE, **kw),
                                                              api_client=client)
        client.close()


def test_kubernetes_lists_storage_classes_and_volume_attributes_classes(k8s):
    cluster, _server, make = k8s
    backend = make()
    backend.create_volume("data", size="1Gi")  # no class: the cluster's default class, as admission sets it
    backend.create_volume("fast", size="1Gi", storage_class="premium")
    backend.update_volume("fast", storage_class="ultra")
    classes = backend.list_storage_classes()
    assert [(c.name, c.kind, c.default) for c in classes] == [
        ("standard", "StorageClass", True), ("premium", "StorageClass", False),
        ("ultra", "VolumeAttributesClass", False)]
    by = {c.name: c for c in classes}
    assert {n: c.volumes for n, c in by.items()} == {"standard": 1, "premium": 1, "ultra": 1}
    assert by["standard"].provisioner == "csi.trident.netapp.io" and by["standard"].extra["reclaim_policy"] == "Retain"
    assert by["standard"].extra["parameters"] == {"backendType": "ontap-nas"}
    assert by["premium"].extra["allow_volume_expansion"] is True
    assert by["ultra"].extra["parameters"] == {"serviceLevel": "Ultra"}
    assert all(c.status is None and c.free_bytes is None for c in classes)  # the API does not say
    # dtrain's own default (kubernetes: storage_class) is what `volume create` uses: that one is the default
    assert [c.name for c in make(storage_class="premium").list_storage_classes() if c.default] == ["premium"]
    assert by["standard"].extra["cluster_default"] and not by["premium"].extra["cluster_default"]


def test_a_cluster_without_volume_attributes_classes_lists_its_storage_classes(k8s):
    cluster, _server, make = k8s
    del cluster.served[("storage.k8s.io", "volumeattributesclasses")]  # the feature gate off (before 1.34)
    assert [c.name for c in make().list_storage_classes()] == ["standard", "premium"]
    asked = [p for _, p in cluster.requests if "volumeattributesclasses" in p]
    assert [p.split("/")[3] for p in asked] == ["v1", "v1beta1", "v1alpha1"]  # each version, newest first


def test_a_user_who_may_not_read_storage_classes_is_told_how_to_check(k8s):
    cluster, _server, make = k8s
    cluster.forbidden.add(("storage.k8s.io", "storageclasses"))
    from dtrain.errors import DtrainError

    with pytest.raises(DtrainError) as err:
        make().list_storage_classes()
    assert "kubectl auth can-i list storageclasses.storage.k8s.io" in str(err.value)


@pytest.mark.slow
def test_the_cli_lists_kubernetes_classes(k8s, home, tmp_path):
    _cluster, server, _make = k8s
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(kubeconfig)
    (home / "config.yaml").write_text(json.dumps({"backend": "kubernetes", "project": "lanes", "kubernetes": {
        "kubeconfig": str(kubeconfig), "image": IMAGE}}))
    dt = Dtrain(home)
    text = dt("volume", "classes").stdout
    assert "standard (default)" in text and "VolumeAttributesClass" in text and "PROVISIONER" in text
    assert [c["name"] for c in dt.json("volume", "classes")] == ["standard", "premium", "ultra"]


# ------------------------------------------------------------------------ config storage-class

def test_config_storage_class_defines_and_removes_a_class_keeping_every_other_key(dt: Dtrain, tmp_path):
    from conftest import assert_usage_error

    (dt.home / "config.yaml").write_text(yaml.safe_dump({"deleted_job_ttl": "7d", "kubernetes": {"image": "i:1"}}))
    dt("config", "storage-class", "fast", str(tmp_path / "fast"))
    saved = yaml.safe_load((dt.home / "config.yaml").read_text())
    assert saved["storage_classes"] == {"fast": str(tmp_path / "fast")}
    assert saved["deleted_job_ttl"] == "7d" and saved["kubernetes"] == {"image": "i:1"}
    assert dt("config", "storage-class", "fast").stdout.strip() == str(tmp_path / "fast")
    dt("volume", "create", "v", "--class", "fast", "--size", "1Mi")
    before = (dt.home / "config.yaml").read_bytes()
    for words, needle in ((["quick", str(tmp_path / "fast")], "storage classes 'fast' and 'quick' share the folder"),
                          (["local", "/x"], "other than 'local'"), (["Bad_Name", "/x"], "lower-case name"),
                          (["--unset", "nope"], "no storage class 'nope'"), (["fast", "/x", "--role", "r"], "--role")):
        assert_usage_error(dt("config", "storage-class", *words, check=False), needle)
    assert (dt.home / "config.yaml").read_bytes() == before  # a refusal writes nothing
    assert "still holds 1 volume:" in dt("config", "storage-class", "--unset", "fast").stderr
    assert _classes(dt)["fast"]["status"] == "NotConfigured"
    assert yaml.safe_load((dt.home / "config.yaml").read_text())["deleted_job_ttl"] == "7d"
    rel = dt("config", "storage-class", "slow", "disk", cwd=tmp_path).stdout  # a relative folder: made absolute
    assert str(tmp_path / "disk") in rel
    assert_usage_error(dt("config", "project", "a", "b", check=False), "takes one value")

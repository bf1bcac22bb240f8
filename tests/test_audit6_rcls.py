"""`dtrain snapshot restore SNAP --to NEW --class C`: the new volume in another storage class than
the snapshot's volume was in (a Kubernetes restore sets the new PVC's storageClassName; NetApp
clones onto another tier), through every door: the CLI, the SDK, the HTTP API and each backend.
Without --class a restore keeps the snapshot's class; --class with --in-place is refused (an
in-place restore keeps the volume's class: `volume update --class` changes it)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from conftest import Dtrain
from dtrain.backends.kubernetes import KubernetesConfig
from dtrain.backends.kubernetes.render_storage import render_volume
from dtrain.errors import DtrainError, SpecError
from test_k8s_backend import NS, backend, cluster, make_backend  # noqa: F401 (fixtures)

IN_PLACE = "--class does not go with --in-place"


def tree(root: Path) -> dict[str, tuple]:
    """Every entry under `root`: kind, permission bits and content (a link's target)."""
    out = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            st = p.lstat()
            if p.is_symlink():
                out[str(p.relative_to(root))] = ("link", os.readlink(p))
            elif p.is_dir():
                out[str(p.relative_to(root))] = ("dir", st.st_mode & 0o7777)
            else:
                out[str(p.relative_to(root))] = ("file", st.st_mode & 0o7777, p.read_bytes())
    return out


@pytest.fixture
def dtc(dt: Dtrain, tmp_path) -> Dtrain:
    """A home with a second class 'fast', and a snapshot 's1' of volume 'work' (class local)."""
    (dt.home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"fast": str(tmp_path / "fast")}}))
    dt("volume", "create", "work")
    data = Path(dt.json("volume", "describe", "work")["extra"]["path"])
    (data / "sub").mkdir()
    (data / "sub" / "blob.bin").write_bytes(os.urandom(300_000))
    (data / "run.sh").write_text("#!/bin/sh\n")
    os.chmod(data / "run.sh", 0o750)
    os.symlink("sub/blob.bin", data / "link")
    dt("snapshot", "create", "work", "--name", "s1")
    return dt


@pytest.mark.slow
def test_cli_restore_into_another_class(dtc, tmp_path):
    src = Path(dtc.json("volume", "describe", "work")["extra"]["path"])
    plan = yaml.safe_load(dtc("snapshot", "restore", "s1", "--to", "quick", "--class", "fast", "--dry-run").stdout)
    assert (plan["storage_class"], plan["into"]) == ("fast", "quick")
    assert dtc("volume", "list", "--json").stdout.count('"name"') == 1  # a dry run makes nothing
    out = dtc("snapshot", "restore", "s1", "--to", "quick", "--class", "fast")
    assert "(class fast)" in out.stdout
    made = dtc.json("volume", "describe", "quick")
    assert (made["storage_class"], made["origin_snapshot"]) == ("fast", "s1")
    path = Path(made["extra"]["path"])
    assert path.is_relative_to(tmp_path / "fast") and Path(plan["path"]) == path.parent
    assert tree(path) == tree(src)
    assert "Storage class: fast" in dtc("volume", "describe", "quick").stdout
    # without --class: the snapshot's class, as before
    kept = json.loads(dtc("snapshot", "restore", "s1", "--to", "same", "--json").stdout)
    assert kept["storage_class"] == "local" and not Path(kept["extra"]["path"]).is_relative_to(tmp_path / "fast")
    # a snapshot of the restored volume records its class; restoring it back into local works too
    dtc("snapshot", "create", "quick", "--name", "s2")
    assert dtc.json("snapshot", "describe", "s2")["storage_class"] == "fast"
    back = json.loads(dtc("snapshot", "restore", "s2", "--to", "back", "--class", "local", "--json").stdout)
    assert back["storage_class"] == "local" and tree(Path(back["extra"]["path"])) == tree(src)
    verify = dtc.json("snapshot", "verify")
    assert verify["ok"] is True and verify["damaged"] == []


def test_cli_refusals_are_one_line_and_change_nothing(dtc):
    create = dtc("volume", "create", "x", "--class", "nope", check=False)
    for args in (("--to", "x", "--class", "nope"), ("--to", "x", "--class", "nope", "--dry-run")):
        r = dtc("snapshot", "restore", "s1", *args, check=False)
        assert (r.returncode, r.stderr) == (create.returncode, create.stderr), args  # volume create's line
    bad = dtc("snapshot", "restore", "s1", "--to", "x", "--class", "Fast Tier", check=False)
    assert bad.returncode == 2 and "invalid storage class 'Fast Tier'" in bad.stderr
    for extra in ((), ("--dry-run",)):
        r = dtc("snapshot", "restore", "s1", "--in-place", "--class", "fast", *extra, check=False)
        assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and IN_PLACE in r.stderr
        assert "volume update" in r.stderr and "Traceback" not in r.stderr
    for extra in ((), ("--dry-run",)):  # a name taken: the dry run printed a plan the restore then refused
        taken = dtc("snapshot", "restore", "s1", "--to", "work", *extra, check=False)
        assert taken.returncode == 2 and "volume 'work' already exists" in taken.stderr, extra
    assert [v["name"] for v in json.loads(dtc("volume", "list", "--json").stdout)] == ["work"]
    help_text = " ".join(dtc("snapshot", "restore", "--help").stdout.split())
    assert "--class" in help_text and "default: the class of the snapshot's volume" in help_text


def test_sdk_restore_with_a_class(dtc, tmp_path):
    from dtrain.client import Client

    client = Client(home=dtc.home)
    vol = client.restore_snapshot("s1", to="sdk", storage_class="fast")
    assert vol.storage_class == "fast" and Path(vol.extra["path"]).is_relative_to(tmp_path / "fast")
    assert client.get_volume("sdk").storage_class == "fast"
    with pytest.raises(SpecError, match=IN_PLACE):
        client.restore_snapshot("s1", in_place=True, storage_class="fast")
    with pytest.raises(DtrainError, match="unknown storage class 'nope'"):
        client.restore_snapshot("s1", to="sdk2", storage_class="nope")


def test_http_restore_with_a_class(home, tmp_path):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from server_util import ServerProcess

    (home / "config.yaml").write_text(yaml.safe_dump({"storage_classes": {"fast": str(tmp_path / "fast")}}))
    server = ServerProcess(home, cwd=tmp_path)
    try:
        http, dt = server.http, server.dtrain()
        assert http.post("/api/v1/volumes", json={"name": "v"}).status_code == 201
        assert http.post("/api/v1/snapshots", json={"volume": "v", "name": "s"}).status_code == 201
        r = http.post("/api/v1/snapshots/s/restore", json={"to": "w", "storage_class": "fast"})
        assert r.status_code == 201 and r.json()["storage_class"] == "fast", r.text
        assert Path(r.json()["extra"]["path"]).is_relative_to(tmp_path / "fast")
        for body, args in (({"to": "x", "storage_class": "nope"}, ("--to", "x", "--class", "nope")),
                           ({"to": "x", "storage_class": "Bad"}, ("--to", "x", "--class", "Bad"))):
            r = http.post("/api/v1/snapshots/s/restore", json=body)
            cli = dt("snapshot", "restore", "s", *args, check=False)
            assert r.status_code in (404, 422), (body, r.text)
            assert r.json()["error"] == cli.stderr.strip().removeprefix("dtrain: error: "), body
        # A class with in_place is outside the schema (a schema-valid body is never refused), said in the
        # API's words: what to send instead
        r = http.post("/api/v1/snapshots/s/restore", json={"in_place": True, "storage_class": "fast"})
        assert r.status_code == 422 and r.json()["error"].startswith(
            "invalid request: storage_class does not go with in_place: an in-place restore keeps"), r.text
        assert "PATCH /api/v1/volumes/NAME" in r.json()["error"]
        assert http.post("/api/v1/snapshots/s/restore", json={"in_place": True, "storage_class": None}).status_code == 200
        assert [v["name"] for v in http.get("/api/v1/volumes").json()] == ["v", "w"]
    finally:
        server.stop()


def test_kubernetes_restore_sets_the_new_claims_storage_class(backend, cluster):  # noqa: F811
    backend.create_volume("data", size="7Gi", storage_class="standard")
    backend.create_snapshot("data", name="data-v1")
    cluster.ready_snapshots()
    [plan] = backend.render_restore("data-v1", to="fast-copy", storage_class="ontap-ssd")
    made = backend.restore_snapshot("data-v1", to="fast-copy", storage_class="ontap-ssd")
    pvc = cluster.get("", "persistentvolumeclaims", NS, "fast-copy")
    assert pvc["spec"]["storageClassName"] == "ontap-ssd" == made.storage_class == plan["spec"]["storageClassName"]
    assert pvc["spec"]["dataSource"] == {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
                                         "name": "data-v1"}
    assert made.size == "7Gi" and made.origin_snapshot == "data-v1"
    # the field where `volume create --class` puts it, and a claim the API server's schema takes
    created = render_volume("x", project="lanes", size="7Gi", storage_class="ontap-ssd", config=KubernetesConfig())
    assert plan["spec"]["storageClassName"] == created["spec"]["storageClassName"]
    kubernetes_validate.validate(plan, kubernetes_validate.latest_version(), strict=True)
    # without a class: the source's, as before
    assert backend.restore_snapshot("data-v1", to="same").storage_class == "standard"
    before = len(cluster.requests)
    with pytest.raises(SpecError, match=IN_PLACE):
        backend.restore_snapshot("data-v1", in_place=True, storage_class="ontap-ssd")
    with pytest.raises(SpecError, match="invalid storage class"):
        backend.render_restore("data-v1", to="y", storage_class="SSD!")
    assert cluster.requests[before:] == []  # refused before any call


def test_sagemaker_keeps_its_refusal():
    from dtrain.backends.sagemaker.backend import Clients, SageMakerBackend
    from dtrain.backends.sagemaker.config import SageMakerConfig

    config = SageMakerConfig(role="arn:aws:iam::123456789012:role/R", bucket="dtrain-test", region="us-east-1")
    be = SageMakerBackend(config, clients=Clients(None, None, None))  # no AWS call is made: refused first
    with pytest.raises(DtrainError, match="sagemaker backend does not support volumes and snapshots"):
        be.restore_snapshot("s", to="v", storage_class="fast")
    with pytest.raises(DtrainError, match="sagemaker backend does not support a dry run"):
        be.render_restore("s", to="v", storage_class="fast")


def test_volume_create_dry_run_refuses_an_unknown_class_as_the_create_does(dtc):
    create = dtc("volume", "create", "x", "--class", "nope", check=False)
    dry = dtc("volume", "create", "x", "--class", "nope", "--dry-run", check=False)
    assert (dry.returncode, dry.stderr) == (create.returncode, create.stderr) and dry.returncode == 2
    plan = yaml.safe_load(dtc("volume", "create", "x", "--class", "fast", "--dry-run").stdout)
    assert plan["storage_class"] == "fast" and "fast" in plan["path"]

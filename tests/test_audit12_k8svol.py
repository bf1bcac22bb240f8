"""Kubernetes volumes, the twelfth audit: `volume update --class --wait` (a VolumeAttributesClass
takes effect asynchronously), --snapshot-on-success on an account without batch Job rights, and
existing claims whose names have dots. Each test fails on the code before its fix."""

from __future__ import annotations

import json
import time

import pytest
import yaml

from conftest import Dtrain, assert_usage_error, wait_through
from dtrain.backends.base import TimeoutError_
from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
from dtrain.errors import ConflictError, NotFoundError, SpecError
from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: F401  (their fixtures)

PVC = ("", "persistentvolumeclaims", NS)


def _modifying(cluster: FakeCluster, name: str, status: str, target: str = "premium") -> dict:
    """The external-resizer at work on claim `name`: modifyVolumeStatus `status` for `target`."""
    pvc = cluster.get(*PVC, name)
    pvc["status"]["modifyVolumeStatus"] = {"status": status, "targetVolumeAttributesClassName": target}
    return pvc


def _on_kubernetes(home, tmp_path, cluster: FakeCluster) -> tuple[FakeKubeServer, Dtrain]:
    server = FakeKubeServer(cluster).start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    home.mkdir(parents=True, exist_ok=True)
    (home / "config.yaml").write_text(yaml.safe_dump({"backend": "kubernetes", "project": "lanes", "kubernetes": {
        "kubeconfig": str(tmp_path / "kubeconfig"), "image": IMAGE}}))
    return server, Dtrain(home)


# ------------------------------------------------------------------------- 1: volume update --wait


def test_wait_volume_returns_once_the_driver_put_the_class_in_effect(backend, cluster):
    backend.create_volume("work", size="1Gi")
    cluster.bind_volumes()
    assert backend.wait_volume("work", timeout=0).name == "work"  # no class ever asked: nothing to wait for
    backend.update_volume("work", storage_class="premium")
    _modifying(cluster, "work", "InProgress")
    started = time.monotonic()
    done = wait_through(cluster.modify_volumes, lambda: backend.wait_volume("work", timeout=30, poll=0.05))
    assert time.monotonic() - started >= 0.3  # it did wait for the driver
    assert done.extra["current_volume_attributes_class"] == "premium" and done.extra["modify_volume_status"] is None


def test_wait_volume_runs_out_naming_describe_and_ends_at_once_when_infeasible(backend, cluster):
    backend.create_volume("work", size="1Gi")
    cluster.bind_volumes()
    backend.update_volume("work", storage_class="standard")
    cluster.modify_volumes()
    backend.update_volume("work", storage_class="premium")
    _modifying(cluster, "work", "InProgress")
    with pytest.raises(TimeoutError_, match=r"volume 'work' is still changing storage class after 0.2s "
                                            r"\(VolumeAttributesClass standard in effect, 'premium' InProgress\); "
                                            r"wait longer \(timeout=\) or check 'dtrain volume describe work'") as err:
        backend.wait_volume("work", timeout=0.2, poll=0.05)  # the SDK's words: its door by default
    assert err.value.look == "dtrain volume describe work"
    with pytest.raises(TimeoutError_, match=r"; wait longer \(--timeout\) or check 'dtrain volume describe work'$"):
        backend.wait_volume("work", timeout=0.2, poll=0.05, door="cli")  # the CLI's
    pvc = _modifying(cluster, "work", "Infeasible")
    cluster.create({"apiVersion": "v1", "kind": "Event", "metadata": {"name": "work.modify", "namespace": NS},
                    "involvedObject": {"kind": "PersistentVolumeClaim", "name": "work", "uid": pvc["metadata"]["uid"]},
                    "reason": "VolumeModifyFailed", "message": "iops 90000 over the limit",
                    "lastTimestamp": "2026-01-01T00:00:00Z"})
    started = time.monotonic()
    with pytest.raises(ConflictError) as refused:
        backend.wait_volume("work")  # no timeout: it ends at once, not never
    assert time.monotonic() - started < 5
    assert str(refused.value) == (
        "the storage system refused VolumeAttributesClass 'premium' for volume 'work' (Infeasible: "
        "VolumeModifyFailed: iops 90000 over the limit): set a class its driver accepts ('dtrain volume update "
        "work --class CLASS'; 'dtrain volume classes' lists them), or put the class in effect back: "
        "'dtrain volume update work --class standard'")
    with pytest.raises(NotFoundError, match="volume 'nosuch' not found"):
        backend.wait_volume("nosuch", timeout=1)
    with pytest.raises(SpecError, match="timeout"):
        backend.wait_volume("work", timeout=-1)


@pytest.mark.slow
def test_the_cli_waits_for_the_class_and_exits_124_naming_describe(home, tmp_path):
    cluster = FakeCluster()
    server, dt = _on_kubernetes(home, tmp_path, cluster)
    try:
        dt("volume", "create", "work", "--size", "1Gi")
        cluster.bind_volumes()
        late = dt("volume", "update", "work", "--class", "premium", "--wait", "--timeout", "0.3", check=False)
        assert late.returncode == 124 and late.stdout == ""
        assert late.stderr.strip().splitlines() == [
            "dtrain: --timeout 0.3 ran out waiting for volume 'work' to take VolumeAttributesClass 'premium' (set; "
            "the storage system goes on); check 'dtrain volume describe work'"]  # its StorageClass stays
        done = wait_through(cluster.modify_volumes, lambda: dt("volume", "update", "work", "--class", "premium",
                                                               "--wait", "--json"), after=0.5)
        assert json.loads(done.stdout)["extra"]["current_volume_attributes_class"] == "premium"
        assert_usage_error(dt("volume", "update", "work", "--class", "ultra", "--timeout", "5", check=False),
                           "--timeout goes with --wait: dtrain volume update work --class ultra --wait --timeout 5")
        assert cluster.get(*PVC, "work")["spec"]["volumeAttributesClassName"] == "premium"  # refused: unchanged
        _modifying(cluster, "work", "Infeasible", "ultra")
        refused = dt("volume", "update", "work", "--class", "ultra", "--wait", check=False)
        assert refused.returncode != 0 and len(refused.stderr.strip().splitlines()) == 1
        assert "refused VolumeAttributesClass 'ultra'" in refused.stderr
        assert "'dtrain volume update work --class premium'" in refused.stderr
    finally:
        server.close()


def test_a_local_class_change_is_in_effect_when_update_returns(dt):
    dt("volume", "create", "v", "--size", "1Mi")
    out = dt("volume", "update", "v", "--class", "local", "--wait", "--timeout", "10")
    assert out.stdout.startswith("volume 'v' is already in storage class 'local': nothing moved") and out.stderr == ""


def test_the_sdk_and_the_http_api_wait_for_a_volume(make_backend, cluster, tmp_path):
    import requests

    import dtrain
    from dtrain.server.app import create_app
    from server_util import ThreadServer

    backend = make_backend()
    client = dtrain.Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    client.create_volume("work", size="1Gi")
    cluster.bind_volumes()
    client.update_volume("work", storage_class="premium")
    with pytest.raises(TimeoutError_, match="'dtrain --backend kubernetes volume describe work'"):
        client.wait_volume("work", timeout=0.1)
    server = ThreadServer(create_app(lambda: dtrain.Client(home=tmp_path, backend="kubernetes",
                                                           backends={"kubernetes": backend}), sample_every=3600))
    try:
        url = f"{server.url}/api/v1/volumes/work/wait"
        late = requests.get(url, params={"timeout": 0.2}, timeout=30)
        assert late.status_code == 408 and "still changing storage class after 0.2s" in late.json()["error"]
        done = wait_through(cluster.modify_volumes, lambda: requests.get(url, params={"timeout": 30}, timeout=60))
        assert done.status_code == 200 and done.json()["extra"]["current_volume_attributes_class"] == "premium"
        client.update_volume("work", storage_class="ultra")
        _modifying(cluster, "work", "Infeasible", "ultra")
        refused = requests.get(url, timeout=30)
        assert refused.status_code == 409 and "refused VolumeAttributesClass 'ultra'" in refused.json()["error"]
    finally:
        server.stop()


# ------------------------------------------------------------------------- 2: the watcher without batch rights

WATCHER_FIX = ("ask an admin to run 'kubectl create role dtrain-job-writer -n dtrain-lanes --verb=get,create,delete "
               "--resource=jobs.batch' and 'kubectl create rolebinding dtrain-job-writer -n dtrain-lanes "
               "--role=dtrain-job-writer --user=USER'")


class ReadsJobsOnly(FakeCluster):
    """RBAC that lets the account get batch Jobs but not create them."""

    def _post(self, group, plural, namespace, obj):
        if (group, plural) == ("batch", "jobs"):
            return 403, json.dumps({"kind": "Status", "status": "Failure", "reason": "Forbidden", "code": 403,
                                    "message": 'jobs.batch is forbidden: User "test" cannot create resource "jobs" '
                                               'in API group "batch"'}).encode()
        return super()._post(group, plural, namespace, obj)


@pytest.mark.parametrize("refused", ["read", "create"])
def test_an_mpijob_whose_watcher_rbac_refuses_says_the_rule_to_grant(make_backend, refused):
    from dtrain.backends.kubernetes.client import Forbidden

    fake = FakeCluster() if refused == "read" else ReadsJobsOnly()
    backend = make_backend(fake=fake)
    backend.create_volume("data", size="1Gi")
    if refused == "read":
        fake.forbidden.add(("batch", "jobs"))
    with pytest.raises(Forbidden) as err:
        backend.submit(spec(launcher="mpi", processes=2, snapshot_on_success="data"))
    said = str(err.value)
    assert "\n" not in said and "cannot read Job" not in said
    assert said.startswith("job 'train' not submitted and no snapshot of volume 'data' taken: --snapshot-on-success "
                           "runs a watcher, batch Job 'train-snap', and this account may not read or create batch "
                           "Jobs in namespace dtrain-lanes; " + WATCHER_FIX)
    assert said.endswith("or turn the watcher off (snapshot_watcher: false under kubernetes: in config.yaml), and "
                         "the snapshot is taken once the job is seen to succeed ('dtrain wait train')")
    assert fake.items("kubeflow.org", "mpijobs") == []  # nothing left behind: rolled back, or never made
    assert fake.items("batch", "jobs") == [] and fake.items("", "services") == []


def test_a_plain_refusal_of_the_job_itself_is_not_blamed_on_the_watcher(make_backend, cluster):
    from dtrain.backends.kubernetes.client import Forbidden

    backend = make_backend()
    backend.create_volume("data", size="1Gi")
    cluster.forbidden.add(("kubeflow.org", "mpijobs"))
    with pytest.raises(Forbidden) as err:
        backend.submit(spec(launcher="mpi", processes=2, snapshot_on_success="data"))
    assert "watcher" not in str(err.value) and "mpijobs" in str(err.value)


# ------------------------------------------------------------------------- 3: an existing claim with dots


def test_a_kubernetes_job_mounts_an_existing_claim_by_its_dotted_name(backend, cluster):
    import kubernetes_validate

    from dtrain.backends.kubernetes.render_storage import render_volume
    from dtrain.spec import parse_pvc

    claim = render_volume("data.v1", project="lanes", size="1Gi", storage_class=None,
                          config=backend.config)  # as another tool makes it: the name is a DNS-1123 subdomain
    cluster.create(claim)
    mount = parse_pvc("data.v1:/data:ro")
    assert mount.volume == "data.v1"
    backend.submit(spec(launcher="torchrun", processes=2, volumes=(mount,)))
    [job] = cluster.items("kubeflow.org", "pytorchjobs", NS)
    pod = job["spec"]["pytorchReplicaSpecs"]["Master"]["template"]["spec"]
    assert pod["volumes"][0] == {"name": "vol-0", "persistentVolumeClaim": {"claimName": "data.v1", "readOnly": True}}
    kubernetes_validate.validate({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"}, "spec": pod},
                                 kubernetes_validate.latest_version(), strict=True)
    long = "a" * 60 + "." + "b" * 60  # past a label's 63, within a subdomain's 253
    assert parse_pvc(f"{long}:/x").volume == long
    for bad in ("Data.v1", "data..v1", ".data", "a" * 254 + ".b"):
        with pytest.raises(SpecError, match="an existing Kubernetes claim's full name"):
            parse_pvc(f"{bad}:/x")


def test_a_local_job_refuses_a_dotted_volume_naming_the_rule_and_the_fix(dt):
    dt("volume", "create", "data", "--size", "1Mi")
    before = dt("list", "--json").stdout
    assert_usage_error(dt("submit", "t1", "--pvc", "data.v1:/mnt", "--", "true", check=False),
                       "invalid volume name 'data.v1' for a local job: a local volume's name is 1-53 lower-case "
                       "letters, digits or '-', no '.' (a dotted name is an existing Kubernetes claim's, mounted with "
                       "--backend kubernetes); make a local one ('dtrain volume create data-v1') and mount it: "
                       "--pvc data-v1:/mnt")
    assert dt("list", "--json").stdout == before  # nothing submitted

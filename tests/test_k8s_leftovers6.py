"""The Kubernetes backend's leftovers of a sixth pass: the shipped fake worded every refusal as
`cannot get` (a LIST is a list to RBAC) and without its namespace, where the API server names the
request's verb and where it was refused; the snapshot of another tool's (dotted) claim, which the
HTTP API would not list by its volume; and `snapshot create --job J` of a job the cluster has
deleted, whose snapshot then carried no spec without a word.

Each test drives the official `kubernetes` client against the shipped fake API server.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer  # noqa: E402
from test_k8s_backend import NS, backend, cluster, make_backend  # noqa: E402,F401  (their fixtures)


# ------------------------------------------------------------------------- 1: a refusal's words


def _refusal(server: FakeKubeServer, method: str, path: str, body: dict | None = None) -> dict:
    """The Status body the fake answers a refused request with, read through the official client."""
    from kubernetes.client.rest import ApiException

    api = server.api_client()
    try:
        api.call_api(path, method, body=body, header_params={"Content-Type": "application/json-patch+json"
                                                             if method == "PATCH" else "application/json"},
                     response_type="object", _preload_content=True)
    except ApiException as err:
        assert err.status == 403
        return json.loads(err.body)
    raise AssertionError(f"{method} {path} was not refused")


def test_the_fake_words_a_refusal_as_the_api_server_does_naming_the_verb_and_the_scope():
    cluster = FakeCluster(namespaces=("default", NS))
    cluster.forbidden |= {("", "pods"), ("", "nodes"), ("", "namespaces"), ("kubeflow.org", "pytorchjobs")}
    pods = f"/api/v1/namespaces/{NS}/pods"
    jobs = f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs"
    said = {  # (method, path, body) -> the message a real API server answers with
        ("GET", pods): f'pods is forbidden: User "test" cannot list resource "pods" in API group "" in the '
                       f'namespace "{NS}"',
        ("GET", pods + "?watch=true"): f'pods is forbidden: User "test" cannot watch resource "pods" in API group "" '
                                       f'in the namespace "{NS}"',
        ("GET", pods + "/p-0"): f'pods "p-0" is forbidden: User "test" cannot get resource "pods" in API group "" '
                                f'in the namespace "{NS}"',
        ("GET", pods + "/p-0/log"): f'pods "p-0" is forbidden: User "test" cannot get resource "pods/log" in API '
                                    f'group "" in the namespace "{NS}"',
        ("GET", "/api/v1/pods"): 'pods is forbidden: User "test" cannot list resource "pods" in API group "" at the '
                                 'cluster scope',
        ("GET", "/api/v1/nodes"): 'nodes is forbidden: User "test" cannot list resource "nodes" in API group "" at '
                                  'the cluster scope',
        ("GET", f"/api/v1/namespaces/{NS}"): f'namespaces "{NS}" is forbidden: User "test" cannot get resource '
                                             f'"namespaces" in API group "" in the namespace "{NS}"',
        ("POST", jobs): f'pytorchjobs.kubeflow.org is forbidden: User "test" cannot create resource "pytorchjobs" in '
                        f'API group "kubeflow.org" in the namespace "{NS}"',
        ("PATCH", jobs + "/train"): f'pytorchjobs.kubeflow.org "train" is forbidden: User "test" cannot patch '
                                    f'resource "pytorchjobs" in API group "kubeflow.org" in the namespace "{NS}"',
        ("PUT", jobs + "/train"): f'pytorchjobs.kubeflow.org "train" is forbidden: User "test" cannot update '
                                  f'resource "pytorchjobs" in API group "kubeflow.org" in the namespace "{NS}"',
        ("DELETE", jobs + "/train"): f'pytorchjobs.kubeflow.org "train" is forbidden: User "test" cannot delete '
                                     f'resource "pytorchjobs" in API group "kubeflow.org" in the namespace "{NS}"',
    }
    with FakeKubeServer(cluster) as server:
        for (method, path), message in said.items():
            body = [] if method == "PATCH" else {} if method in ("POST", "PUT") else None
            status = _refusal(server, method, path, body)
            assert (status["reason"], status["message"]) == ("Forbidden", message), (method, path)
    assert status["details"] == {"name": "train", "group": "kubeflow.org", "kind": "pytorchjobs"}


def test_dtrain_quotes_a_refused_list_once_with_the_command_to_check_it(backend, cluster):
    from dtrain.backends.kubernetes.client import Forbidden

    cluster.forbidden.add(("", "persistentvolumeclaims"))
    with pytest.raises(Forbidden) as err:
        backend.list_volumes()
    assert str(err.value) == (f'cannot list PersistentVolumeClaims in namespace {NS}: persistentvolumeclaims is '
                              f'forbidden: User "test" cannot list resource "persistentvolumeclaims" in API group "" '
                              f'in the namespace "{NS}"; check your credentials and RBAC (kubectl auth can-i list '
                              f'persistentvolumeclaims -n {NS})')


# ------------------------------------------------------------------------- 2: a snapshot of a dotted claim


def _foreign_snapshot(cluster: FakeCluster, backend) -> None:
    """Claim 'data.v1' and a VolumeSnapshot of it, both made by another tool (kubectl, Run:AI)."""
    from dtrain.backends.kubernetes.render_storage import render_volume

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    claim = render_volume("data.v1", project="lanes", size="2Gi", storage_class=None, config=backend.config)
    claim["metadata"]["namespace"] = NS
    cluster.create(claim)
    cluster.bind_volumes()
    cluster.create({"apiVersion": "snapshot.storage.k8s.io/v1", "kind": "VolumeSnapshot",
                    "metadata": {"name": "data-v1-monday", "namespace": NS},
                    "spec": {"source": {"persistentVolumeClaimName": "data.v1"}}})
    cluster.ready_snapshots()


@pytest.mark.slow
def test_a_snapshot_of_another_tools_claim_is_listed_and_restored_at_every_door(home, tmp_path, backend, cluster):
    from test_audit12_k8s import _http
    from test_k8s_leftovers3 import _cli

    from dtrain.client import Client
    from dtrain.errors import SpecError

    _foreign_snapshot(cluster, backend)
    sdk = Client(home=tmp_path / "sdk-home", backend="kubernetes", backends={"kubernetes": backend})
    assert [s.name for s in sdk.list_snapshots(volume="data.v1")] == ["data-v1-monday"]
    http = _http(tmp_path, backend)
    listed = http.get("/api/v1/snapshots", params={"volume": "data.v1"})
    assert listed.status_code == 200, listed.text
    assert [(s["name"], s["volume"]) for s in listed.json()] == [("data-v1-monday", "data.v1")]
    assert http.get("/api/v1/snapshots", params={"volume": "nosuch.v1"}).status_code == 404  # never was: said
    with FakeKubeServer(cluster) as server:
        dt = _cli(home, tmp_path, server)
        shown = json.loads(dt("snapshot", "list", "--volume", "data.v1", "--json").stdout)
        assert [s["name"] for s in shown] == ["data-v1-monday"]
        into = dt("snapshot", "restore", "data-v1-monday", "--to", "data.v2", check=False)
        assert into.returncode == 2 and "invalid volume name 'data.v2'" in into.stderr
        assert dt("snapshot", "restore", "data-v1-monday", "--to", "from-cli").stdout.startswith(
            "snapshot 'data-v1-monday' restored into new volume 'from-cli'")
    with pytest.raises(SpecError, match="invalid volume name 'data.v2'"):
        sdk.restore_snapshot("data-v1-monday", to="data.v2")
    made = http.post("/api/v1/snapshots/data-v1-monday/restore", json={"to": "from-http"})
    assert made.status_code == 201, made.text
    assert http.post("/api/v1/snapshots/data-v1-monday/restore", json={"to": "data.v2"}).status_code == 422
    for name in ("from-cli", "from-http"):
        pvc = cluster.get("", "persistentvolumeclaims", NS, name)
        assert pvc["spec"]["dataSource"]["name"] == "data-v1-monday"
        assert pvc["spec"]["resources"]["requests"]["storage"] == "2Gi"  # the snapshot's restoreSize
    assert ("", "persistentvolumeclaims", NS, "data.v2") not in cluster.objects


# ------------------------------------------------------------------------- 3: a snapshot of a job that is gone


def _ttl_delete(cluster: FakeCluster, job: str) -> None:
    """What ttl_seconds_after_finished does: the job's object goes, and its pods with it."""
    obj = cluster.find_job(NS, job)
    group, _, version = obj["apiVersion"].rpartition("/")
    plural = next(p for (g, p), (k, _) in cluster.served.items() if g == group and k == obj["kind"])
    prefix = f"/apis/{group}/{version}" if group else f"/api/{version}"
    assert cluster.handle("DELETE", f"{prefix}/namespaces/{NS}/{plural}/{job}", b"")[0] == 200


def test_a_snapshot_of_a_deleted_job_takes_the_spec_an_earlier_snapshot_recorded(backend, cluster, caplog):
    from test_k8s_backend import spec

    backend.create_volume("data", size="1Gi")
    backend.submit(spec(name="train", command=("python", "train.py", "--lr", "0.1")))
    first = backend.create_snapshot("data", name="data-first", job="train")
    assert first.job_spec["command"] == ["python", "train.py", "--lr", "0.1"]
    _ttl_delete(cluster, "train")
    with caplog.at_level("WARNING"):
        later = backend.create_snapshot("data", name="data-later", job="train")
    assert later.job == "train" and later.job_spec == first.job_spec
    assert backend.get_snapshot("data-later").job_spec == first.job_spec  # kept on the VolumeSnapshot
    assert not [r for r in caplog.records if r.levelname == "WARNING"]


def test_a_snapshot_of_a_deleted_job_without_a_recorded_spec_says_why_in_one_line(make_backend, cluster, caplog):
    from test_k8s_backend import IMAGE, spec

    from dtrain.backends.kubernetes.config import KubernetesConfig

    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, ttl_seconds_after_finished=600))
    backend.create_volume("data", size="1Gi")
    backend.submit(spec(name="train"))
    _ttl_delete(cluster, "train")
    with caplog.at_level("WARNING"):
        snap = backend.create_snapshot("data", name="data-after", job="train")
    assert snap.job == "train" and snap.job_spec is None
    [warning] = [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]
    assert warning == ("dtrain: warning: snapshot 'data-after' records no spec of job 'train': the cluster no longer "
                       "has it (it deletes a job 600s after it ends) and no other snapshot of it records one; it is "
                       "linked to the job by name only")

"""`project delete` on Kubernetes, against the fake API server: a project is a namespace. Its namespace is
deleted only where dtrain made it for the project (managed-by dtrain, owned by nothing, not the shared
`namespace` setting's); otherwise the namespace stays and only dtrain's quota, watcher account and
labels there go, and the record says why it stayed. What it still holds refuses it, each kind named."""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.kubernetes import KubernetesConfig  # noqa: E402
from dtrain.backends.kubernetes.fake import FakeCluster  # noqa: E402
from dtrain.errors import ConflictError, NotFoundError  # noqa: E402
from dtrain.spec import JobSpec, notebook_spec  # noqa: E402

from test_k8s_backend import IMAGE, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)

NS = "dtrain-lanes"


def _writes(cluster: FakeCluster) -> list[tuple[str, str]]:
    return [(method, path.split("?")[0]) for method, path in cluster.requests if method != "GET"]


def test_a_namespace_dtrain_made_goes_once_the_project_holds_nothing(backend, cluster):
    backend.create_project("lanes", gpu_quota=4)
    backend.submit(spec())
    backend.submit(notebook_spec("nb", image=IMAGE, project="lanes"))
    backend.create_volume("data", size="1Gi")
    cluster.bind_volumes()
    backend.create_snapshot("data", name="data-v1")
    cluster.requests.clear()
    with pytest.raises(ConflictError) as err:
        backend.delete_project("lanes")
    assert str(err.value) == (
        "project 'lanes' still has 1 job (train), 1 notebook (nb), 1 volume (data), 1 snapshot (data-v1): delete "
        "them first ('dtrain delete train nb', then 'dtrain volume delete data', then 'dtrain snapshot delete "
        "data-v1'), then the project")
    assert _writes(cluster) == []  # nothing sent
    backend.delete("train")
    backend.delete("nb")
    with pytest.raises(ConflictError, match=r"still has 1 volume \(data\), 1 snapshot"):  # jobs being deleted: gone
        backend.delete_project("lanes")
    backend.delete_snapshot("data-v1")
    backend.delete_volume("data")
    cluster.finish_deletions()
    cluster.requests.clear()
    gone = backend.delete_project("lanes")
    assert (gone.removed, gone.kept) == ((f"namespace {NS}",), None)
    assert _writes(cluster) == [("DELETE", f"/api/v1/namespaces/{NS}")]  # the quota goes with it
    assert [p.name for p in backend.list_projects()] == []
    with pytest.raises(NotFoundError, match=f"^no project named 'lanes' here \\(namespace {NS} does not exist\\); "
                                            f"see 'dtrain project list'$"):
        backend.delete_project("lanes")


def test_a_namespace_another_tool_made_stays_and_only_dtrains_objects_and_labels_go(make_backend, cluster):
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "dtrain-team", "labels": {"dtrain.io/project": "team", "runai/queue": "team", "project": "team"}}})
    backend = make_backend(KubernetesConfig(project="team", image=IMAGE))
    backend.create_project("team", gpu_quota=2)  # the namespace exists: only the quota is made
    cluster.create({"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {
        "name": "dtrain-snapshotter", "namespace": "dtrain-team", "labels": {"app.kubernetes.io/managed-by": "dtrain"}}})
    cluster.create({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",  # another tool's: it stays
                    "metadata": {"name": "dtrain-snapshotter", "namespace": "dtrain-team"}, "rules": []})
    cluster.requests.clear()
    gone = backend.delete_project("team")
    assert gone.removed == ("ServiceAccount dtrain-snapshotter", "ResourceQuota dtrain-quota",
                            "labels dtrain.io/project of namespace dtrain-team")  # the project as listed goes last
    assert cluster.get("rbac.authorization.k8s.io", "roles", "dtrain-team", "dtrain-snapshotter") is not None
    assert gone.kept == ("namespace dtrain-team stays, with what else it holds: another tool made it (it has no "
                         "label app.kubernetes.io/managed-by=dtrain)")
    assert ("DELETE", "/api/v1/namespaces/dtrain-team") not in _writes(cluster)
    assert ("PATCH", "/api/v1/namespaces/dtrain-team") in _writes(cluster)
    labels = cluster.get("", "namespaces", "", "dtrain-team")["metadata"]["labels"]
    assert labels == {"runai/queue": "team", "project": "team"}  # Run:AI's own labels stay
    assert cluster.items("", "resourcequotas", "dtrain-team") == []


def test_a_kubeflow_profiles_namespace_stays_though_labelled_dtrains(make_backend, cluster):
    """`kubectl apply` of a dry run's output labels a namespace managed-by dtrain; an owner (a Kubeflow
    Profile) says whose it is, and it is not deleted with the project."""
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": "dtrain-alice", "labels": {"dtrain.io/project": "alice", "app.kubernetes.io/managed-by": "dtrain"},
        "ownerReferences": [{"apiVersion": "kubeflow.org/v1", "kind": "Profile", "name": "alice", "uid": "u1"}]}})
    backend = make_backend(KubernetesConfig(project="alice", image=IMAGE))
    gone = backend.delete_project("alice")
    assert gone.kept == "namespace dtrain-alice stays, with what else it holds: it is owned by Profile alice"
    assert gone.removed == ("labels app.kubernetes.io/managed-by, dtrain.io/project of namespace dtrain-alice",)
    assert cluster.get("", "namespaces", "", "dtrain-alice")["metadata"].get("labels") == {}


def test_a_shared_namespace_stays_and_other_projects_things_there_do_not_hold_it(make_backend, cluster):
    shared = KubernetesConfig(project="a", namespace="team-ns", image=IMAGE)
    a = make_backend(shared)
    a.create_project("a", gpu_quota=1)  # makes team-ns, labelled project a
    b = make_backend(KubernetesConfig(project="b", namespace="team-ns", image=IMAGE))
    b.submit(JobSpec(name="other", command=("true",), project="b"))
    b.create_volume("shared-data", size="1Gi")
    a.submit(JobSpec(name="mine", command=("true",), project="a"))
    with pytest.raises(ConflictError, match=r"^project 'a' still has 1 job \(mine\): delete it first"):
        a.delete_project("a")
    a.delete("mine")
    cluster.finish_deletions()
    gone = a.delete_project("a")
    assert gone.kept == ("namespace team-ns stays, with what else it holds: the kubernetes setting namespace "
                         "shares it among projects")
    assert gone.removed[0] == "ResourceQuota dtrain-quota"
    assert [j.name for j in b.list(project="b")] == ["other"]  # b's job and volume are untouched
    assert [v.name for v in b.list_volumes()] == ["shared-data"]

"""The Kubernetes backend's leftovers of a fifth audit: an account that may read its Kubeflow jobs
but not pods, for which `describe`, `wait`, `delete`, `suspend` failed with a raw 403 where the
job's own status was there to show, and `logs` did not say what to grant; a refusal about an
MPIJob that named it a Job (the first kind looked at); and `volume create --class` of a
StorageClass the cluster does not have, accepted, its PVC then Pending for good.

Each test drives the official `kubernetes` client against the shipped fake API server.
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.base import JobStatus  # noqa: E402
from dtrain.backends.kubernetes.client import Forbidden  # noqa: E402
from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer  # noqa: E402
from dtrain.errors import NotFoundError  # noqa: E402

from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)
from test_k8s_leftovers3 import _cli  # noqa: E402

POD_ROLE = f"kubectl create role dtrain-pod-reader -n {NS} --verb=get,list --resource=pods,pods/log"


def _running(backend, cluster: FakeCluster, name: str = "train", **kw) -> list[str]:
    backend.submit(spec(name=name, processes=2, **kw))
    pods = [p["metadata"]["name"] for p in cluster.run_pods(NS, name)]
    cluster.transition(NS, name, "Running")
    return pods


# ------------------------------------------------------------------------- jobs readable, pods not


def test_describe_wait_delete_of_an_account_that_may_not_read_pods(backend, cluster):
    """`list` worked, but each verb of one job read its pods first and failed with the 403."""
    _running(backend, cluster, launcher="torchrun")
    cluster.forbidden.add(("", "pods"))
    info = backend.get("train")
    assert info.status is JobStatus.RUNNING  # the job's own conditions
    assert "pods not shown (processes, GPUs and node unknown)" in info.message
    assert POD_ROLE in info.message and "\n" not in info.message
    assert backend.suspend("train").status is not None and backend.resume("train").name == "train"
    cluster.transition(NS, "train", "Succeeded")
    assert backend.wait("train", timeout=30).status is JobStatus.SUCCEEDED
    deleted = backend.delete("train")
    assert (deleted.status, deleted.message) == (JobStatus.DELETED, f"deleted PyTorchJob train from namespace {NS}")


def test_logs_and_exec_without_pods_refuse_in_one_line_naming_the_role(backend, cluster):
    pods = _running(backend, cluster, launcher="torchrun")
    cluster.append_log(NS, pods[0], "step 1")
    cluster.forbidden.add(("", "pods"))
    for call in (lambda: list(backend.logs("train")), lambda: list(backend.logs("train", follow=True)),
                 lambda: backend.exec("train", ["ls"], rank=0)):
        with pytest.raises(Forbidden) as refused:
            call()
        said = str(refused.value)
        assert "this account may not list pods in namespace dtrain-lanes" in said and POD_ROLE in said
        assert "\n" not in said
    cluster.forbidden = {("", "pods/log")}  # pods listable, their logs not (RBAC grants pods/log apart)
    with pytest.raises(Forbidden, match="may not read pods/log in namespace dtrain-lanes; ask an admin") as refused:
        list(backend.logs("train"))
    assert POD_ROLE in str(refused.value)
    cluster.forbidden = set()
    assert [line.text for line in backend.logs("train")] == ["step 1"]


@pytest.mark.slow
def test_cli_describe_and_logs_of_an_account_without_pods(home, tmp_path, backend, cluster):
    _running(backend, cluster, launcher="torchrun")
    cluster.forbidden.add(("", "pods"))
    with FakeKubeServer(cluster) as server:
        dt = _cli(home, tmp_path, server)
        described = dt("describe", "job", "train")
        logs = dt("logs", "train", check=False)
    assert "Running" in described.stdout and POD_ROLE in described.stdout
    assert logs.returncode != 0 and len(logs.stderr.strip().splitlines()) == 1
    assert "cannot show the logs of job 'train'" in logs.stderr and POD_ROLE in logs.stderr
    assert "Traceback" not in logs.stderr


# ------------------------------------------------------------------------- a refused MPIJob is an MPIJob


def test_a_refused_mpijob_is_named_mpijob(backend, cluster):
    """With jobs.batch refused too, the first refusal (of a batch Job) was raised: 'cannot read Job'."""
    _running(backend, cluster, name="mpi", launcher="mpi")
    cluster.forbidden |= {("batch", "jobs"), ("kubeflow.org", "mpijobs")}
    with pytest.raises(Forbidden) as refused:
        backend.get("mpi")
    said = str(refused.value)
    assert said.startswith("cannot read MPIJob 'mpi' in namespace dtrain-lanes")
    assert "kubectl auth can-i get mpijobs.kubeflow.org" in said and "cannot read Job" not in said
    cluster.forbidden.add(("", "pods"))  # no pods to tell its kind by: every refused kind, each by its name
    for call in (lambda: backend.get("mpi"), lambda: backend.delete("mpi"), lambda: list(backend.logs("mpi"))):
        with pytest.raises(Forbidden) as refused:
            call()
        said = str(refused.value)
        assert "Job (jobs.batch), MPIJob (mpijobs.kubeflow.org)" in said and "cannot read Job" not in said
        assert "kubectl auth can-i get mpijobs.kubeflow.org -n dtrain-lanes" in said


def test_one_refused_kind_is_its_own_refusal(backend, cluster):
    _running(backend, cluster, name="mpi", launcher="mpi")
    cluster.forbidden.add(("kubeflow.org", "mpijobs"))
    with pytest.raises(Forbidden, match=r"^cannot read MPIJob 'mpi' in namespace dtrain-lanes"):
        backend.get("mpi")


# ------------------------------------------------------------------------- volume create --class


def _storage_classes(cluster: FakeCluster, *names: str) -> None:
    for name in names:
        cluster.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": name},
                        "provisioner": "csi.trident.netapp.io"})


def test_volume_create_refuses_a_storage_class_the_cluster_lacks(backend, cluster):
    _storage_classes(cluster, "standard", "premium")
    with pytest.raises(NotFoundError) as refused:
        backend.create_volume("data", size="1Gi", storage_class="premum")
    assert str(refused.value) == ("unknown StorageClass 'premum' (did you mean 'premium'?) on this cluster: use "
                                  "one of premium, standard (see 'dtrain volume classes')")
    with pytest.raises(NotFoundError, match=r"^unknown StorageClass 'nosuch' on this cluster: use one of premium"):
        backend.create_volume("data", size="1Gi", storage_class="nosuch")
    assert cluster.items("", "persistentvolumeclaims") == []  # nothing made
    assert backend.create_volume("data", size="1Gi", storage_class="premium").storage_class == "premium"
    assert backend.create_volume("other", size="1Gi").name == "other"  # no class: the default, unchecked


def test_submit_pvc_and_restore_class_refuse_a_storage_class_the_cluster_lacks(backend, cluster):
    from dtrain.spec import parse_pvc

    _storage_classes(cluster, "standard", "premium")
    with pytest.raises(NotFoundError, match=r"^unknown StorageClass 'premum' \(did you mean 'premium'\?\)"):
        backend.submit(spec(volumes=(parse_pvc("premum:1Gi:/data"),)))
    assert cluster.items("", "persistentvolumeclaims") == [] and backend.list() == []  # nothing made
    backend.create_volume("data", size="1Gi", storage_class="standard")
    backend.create_snapshot("data", name="s1")
    cluster.ready_snapshots()
    with pytest.raises(NotFoundError, match=r"^unknown StorageClass 'nosuch' on this cluster"):
        backend.restore_snapshot("s1", to="back", storage_class="nosuch")
    assert backend.restore_snapshot("s1", to="back", storage_class="premium").storage_class == "premium"


def test_volume_create_of_an_account_that_may_not_list_classes_warns_once(backend, cluster, caplog):
    _storage_classes(cluster, "standard")
    cluster.forbidden.add(("storage.k8s.io", "storageclasses"))
    with caplog.at_level(logging.WARNING):
        made = backend.create_volume("data", size="1Gi", storage_class="nosuch")
    assert made.storage_class == "nosuch"
    [warning] = [r.getMessage() for r in caplog.records if "StorageClass" in r.getMessage()]
    assert warning.startswith("dtrain: warning: StorageClass 'nosuch' not checked, this account may not list "
                              "StorageClasses (cannot list StorageClasses")
    assert warning.endswith("see 'dtrain volume describe data'")


def test_a_cluster_without_storage_classes_takes_any_name(backend, cluster):
    """No StorageClass at all: the name binds pre-provisioned PersistentVolumes, nothing to check against."""
    assert backend.create_volume("data", size="1Gi", storage_class="static-nfs").storage_class == "static-nfs"


def test_cli_volume_create_of_an_unknown_class_is_one_line(home, tmp_path, cluster):
    _storage_classes(cluster, "standard", "premium")
    with FakeKubeServer(cluster) as server:
        dt = _cli(home, tmp_path, server)
        proc = dt("volume", "create", "data", "--class", "nosuch", check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    assert proc.stderr.strip() == ("dtrain: error: unknown StorageClass 'nosuch' on this cluster: use one of "
                                   "premium, standard (see 'dtrain volume classes')")


# ------------------------------------------------------------------------- volume update --class: not waited for


def test_volume_describe_shows_a_class_change_under_way(backend, cluster):
    """`volume update --class` returns before the driver changes the tier (docs/kubernetes.md says how to
    wait): describe showed the new and old class but not that the driver was at it, or refused it."""
    backend.create_volume("work", size="1Gi")
    updated = backend.update_volume("work", storage_class="premium")
    assert (updated.extra["volume_attributes_class"], updated.extra["current_volume_attributes_class"]) == (
        "premium", None)
    pvc = cluster.get("", "persistentvolumeclaims", NS, "work")
    pvc["status"]["modifyVolumeStatus"] = {"status": "Infeasible", "targetVolumeAttributesClassName": "premium"}
    assert backend.get_volume("work").extra["modify_volume_status"]["status"] == "Infeasible"
    pvc["status"] = {"phase": "Bound", "currentVolumeAttributesClassName": "premium"}  # the driver is done
    done = backend.get_volume("work").extra
    assert (done["current_volume_attributes_class"], done["modify_volume_status"]) == ("premium", None)

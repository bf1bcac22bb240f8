"""A notebook on Kubernetes: a Kubeflow Notebook created, read, logged and deleted through the
official client against the shipped fake API server (schemas: tests/test_k8s_render.py)."""

from __future__ import annotations

import argparse

import pytest

from dtrain.backends.base import JobStatus
from dtrain.backends.kubernetes import KubernetesConfig
from dtrain.backends.kubernetes.fake import CRDS, FakeCluster
from dtrain.client import Client
from dtrain.errors import BackendError, ConflictError, NotFoundError, SpecError
from dtrain.spec import notebook_spec
from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, posts  # noqa: F401 (fixtures)


def _claim(cluster: FakeCluster, name: str) -> None:
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": name, "namespace": NS},
                    "spec": {"resources": {"requests": {"storage": "5Gi"}}, "accessModes": ["ReadWriteMany"]}})


def test_notebook_lifecycle_on_the_claim(backend, cluster, tmp_path):
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    _claim(cluster, "work")
    client = Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    info = client.notebook("nb", volumes=["work:/home/jovyan/work"], gpu=1, project="lanes", backend="kubernetes")
    assert info.status is JobStatus.PENDING and info.spec.kind == "Notebook" and info.extra["kind"] == "Notebook"
    assert posts(cluster) == [f"/apis/kubeflow.org/v1/namespaces/{NS}/notebooks"]
    made = cluster.get("kubeflow.org", "notebooks", NS, "nb")
    assert made["spec"]["template"]["spec"]["volumes"][0]["persistentVolumeClaim"] == {"claimName": "work"}

    (pod,) = cluster.run_pods(NS, "nb")
    assert pod["metadata"]["labels"]["notebook-name"] == "nb"
    cluster.append_log(NS, "nb-0", "Jupyter Server is running at /notebook/dtrain-lanes/nb/")
    running = client.get("nb")
    assert running.status is JobStatus.RUNNING and running.gpus_allocated == 1
    assert [n.name for n in client.list_notebooks(project="lanes")] == ["nb"]
    assert [ln.text for ln in client.logs("nb")] == ["Jupyter Server is running at /notebook/dtrain-lanes/nb/"]
    assert client.notebook_url("nb") == f"http://localhost:8080/notebook/{NS}/nb/"

    assert client.delete("nb").status is JobStatus.DELETED
    cluster.finish_deletions()
    assert cluster.items("kubeflow.org", "notebooks", NS) == [] and cluster.items("", "pods", NS) == []
    with pytest.raises(NotFoundError):
        client.get("nb")


def test_notebook_refusals(make_backend, cluster):
    backend = make_backend()
    with pytest.raises(NotFoundError, match="'work' not found"):
        backend.submit(notebook_spec("nb", volumes=["work:/home/jovyan/work"], project="lanes"))
    without = make_backend(KubernetesConfig(project="lanes"))
    with pytest.raises(SpecError, match="needs a container image"):
        without.submit(notebook_spec("nb", project="lanes"))
    bare = make_backend(fake=FakeCluster(crds={k: v for k, v in CRDS.items() if v[0] != "Notebook"}))
    with pytest.raises(BackendError, match="Notebook controller"):
        bare.submit(notebook_spec("nb", project="lanes"))
    with pytest.raises(SpecError, match="one interactive process"):
        notebook_spec("nb", max_restarts=2)


def test_the_hints_name_the_backend_where_it_is_not_the_default(backend, cluster, tmp_path, capsys):
    """The start line and `notebook open`'s refusals said `dtrain notebook open nb`, `dtrain delete nb`,
    which the default (local) backend then answered 'not found'."""
    from dtrain.cli.notebook import cmd_start

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    _claim(cluster, "work")
    client = Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    args = argparse.Namespace(name="nb", pvc=["work:/home/jovyan/work"], gpu=None, cpu=None, memory=None, image=None,
                              project="lanes", backend="kubernetes", idle_timeout=None, json=False, dry_run=False)
    assert cmd_start(args, client) == 0
    assert capsys.readouterr().out == (  # a new Notebook is Pending until its pod runs: not said to be started
        "notebook 'nb' is queued, not started yet (Pending: waiting to be scheduled; backend kubernetes); follow it "
        "with 'dtrain --backend kubernetes describe job nb -p lanes' or 'dtrain --backend kubernetes notebook list "
        "-p lanes', open it once Running with 'dtrain --backend kubernetes notebook open nb -p lanes'; stop it with "
        "'dtrain --backend kubernetes suspend nb -p lanes', delete it with 'dtrain --backend kubernetes delete nb "
        "-p lanes'\n")  # project lanes is not the default one: its namespace is found with -p
    client.suspend("nb")
    with pytest.raises(ConflictError) as err:
        client.notebook_url("nb")
    assert str(err.value) == ("notebook 'nb' is Suspended: start it again with "
                              "'dtrain --backend kubernetes resume nb -p lanes'")  # its namespace, as the start line's
    client.config.backend = "kubernetes"  # where it is the default, no --backend
    with pytest.raises(ConflictError, match="^notebook 'nb' is Suspended: start it again with 'dtrain resume nb -p lanes'$"):
        client.notebook_url("nb")

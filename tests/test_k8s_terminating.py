"""A project whose namespace is being deleted (Terminating: Kubernetes deletes what it holds, then the
namespace, and refuses anything new in it meanwhile). `project list` showed it as if alive, and
`project create` said it already exists (or, with --gpu-quota, gave the API server's raw 403), as did
`submit` and `volume create` into it. It is marked Terminating now, and each refusal is one line naming
the fix: wait for it to go, or use another project."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.base import Listed  # noqa: E402
from dtrain.backends.kubernetes.client import NAMESPACE  # noqa: E402
from dtrain.backends.kubernetes.fake import FakeCluster  # noqa: E402
from dtrain.backends.records import ProjectInfo  # noqa: E402
from dtrain.cli.cluster import cmd_project  # noqa: E402
from dtrain.errors import ConflictError  # noqa: E402

from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)

GOING = (f"namespace {NS} is being deleted (Terminating: Kubernetes deletes what it holds, then the namespace, and "
         f"refuses anything new in it meanwhile): wait until it is gone ('dtrain project list' no longer shows "
         f"project lanes), then create it with 'dtrain project create lanes' (or kubectl create namespace {NS}); "
         f"or use another project")


def _terminating(backend, cluster: FakeCluster) -> None:
    """Project lanes, its namespace deleted while an object with a finalizer keeps it Terminating."""
    backend.create_project("lanes", gpu_quota=2)
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {
        "name": "held", "namespace": NS, "finalizers": ["example.com/hold"]},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}}})
    backend.api.delete(NAMESPACE, None, NS)  # as `project delete` does
    assert cluster.get("", "namespaces", "", NS)["status"]["phase"] == "Terminating"


def test_project_list_marks_a_terminating_project(backend, cluster):
    _terminating(backend, cluster)
    [lanes] = backend.list_projects()
    assert (lanes.name, lanes.terminating, lanes.extra.get("status")) == ("lanes", True, "Terminating")
    [alone] = backend.read_project("lanes")  # as `project create` reads it back
    assert alone.terminating and alone.extra.get("status") == "Terminating"


def test_project_create_submit_and_volume_create_into_it_are_one_line_naming_the_fix(backend, cluster):
    _terminating(backend, cluster)
    assert backend.has_project("lanes") is False  # going: no project to have
    for call in (lambda: backend.create_project("lanes"), lambda: backend.create_project("lanes", gpu_quota=4),
                 lambda: backend.submit(spec()), lambda: backend.render(spec()),
                 lambda: backend.create_volume("data", size="1Gi")):
        cluster.requests.clear()
        with pytest.raises(ConflictError) as err:
            call()
        assert str(err.value) == GOING
    assert cluster.items("", "persistentvolumeclaims", NS)[0]["metadata"]["name"] == "held"  # nothing else made


def test_the_table_marks_a_terminating_project(capsys):
    class Projects:
        default_project = "lanes"

        def list_projects(self):
            return Listed([ProjectInfo(name="lanes", backend="kubernetes", gpu_quota=2, gpus_allocated=0, jobs=0,
                                       extra={"namespace": NS, "status": "Terminating"}, terminating=True),
                           ProjectInfo(name="team", backend="kubernetes", gpu_quota=None, gpus_allocated=0, jobs=1)])
    assert cmd_project(argparse.Namespace(action="list", json=False), Projects()) == 0
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [["lanes", "(default,", "Terminating)", "2", "0", "0"], ["team", "-", "0", "1"]]

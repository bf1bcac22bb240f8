"""The Kubernetes backend's leftovers of a tenth audit. The fake API server deleted a suspended job's pods
at once and wrote no Suspended condition, so what dtrain reads while a job stops was never exercised:
its pods now get their grace period (Terminating, then gone) and the job its Suspended condition, as
the Job controller and the Training Operator write them; a PyTorchJob suspended by someone else
(kubectl, a queue) reads Pending with the controller's reason, not Running. dtrain's RoleBinding deleted
to be made anew whose create then failed was said as if it were still there (a 403: the fix named deleting
it) or not at all (a 409)."""

from __future__ import annotations

import argparse

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.base import JobStatus  # noqa: E402
from dtrain.backends.kubernetes.fake import FakeKubeServer  # noqa: E402
from dtrain.backends.kubernetes.objects import PYTORCH_JOB  # noqa: E402
from dtrain.cli.listing import cmd_describe  # noqa: E402
from dtrain.client import Client  # noqa: E402

from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)


def _described(tmp_path, backend, name: str, capsys) -> str:
    client = Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    assert cmd_describe(argparse.Namespace(names=[name], json=False, project=None, verb="describe"), client) == 0
    return capsys.readouterr().out


def test_a_pytorchjob_suspended_with_kubectl_reads_pending_with_the_operators_reason(backend, cluster, tmp_path,
                                                                                    capsys):
    backend.submit(spec(launcher="torchrun", processes=2))
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Running")
    backend.api.patch(PYTORCH_JOB, NS, "train", {"spec": {"runPolicy": {"suspend": True}}})  # kubectl patch

    info = backend.get("train")
    assert info.status is JobStatus.PENDING and "PyTorchJobSuspended" in info.message
    assert {p.status for p in info.processes} == {"Terminating"}  # SIGTERM sent, the grace period running
    out = _described(tmp_path, backend, "train", capsys)
    assert "Status: Pending\nMessage: PyTorchJobSuspended: PyTorchJob train is suspended.\n" in out  # not Running
    assert "Pending  Suspended: PyTorchJobSuspended" in out  # the event of the condition
    cluster.finish_deletions()
    assert cluster.items("", "pods", NS) == [] and backend.get("train").status is JobStatus.PENDING

    backend.api.patch(PYTORCH_JOB, NS, "train", {"spec": {"runPolicy": {"suspend": False}}})  # resumed
    [cond] = [c for c in cluster.get("kubeflow.org", "pytorchjobs", NS, "train")["status"]["conditions"]
              if c["type"] == "Suspended"]
    assert (cond["status"], cond["reason"]) == ("False", "PyTorchJobResumed")


@pytest.mark.parametrize("status", [403, 409])
def test_a_rolebinding_deleted_for_repair_whose_create_fails_is_one_line_and_a_rerun_repairs_it(backend, cluster,
                                                                                               caplog, status):
    """dtrain's RoleBinding bound to another Role is deleted and made anew (a roleRef never changes); where
    the create is then refused (403) or answered 409 with none there, the RoleBinding is gone: the user is told
    so in one line naming it, the verb and the fix, and the next submit makes it."""
    import logging

    from test_k8s_leftovers9 import EDITOR, WATCHER, _binding, _bound, _submit_watched

    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    backend.create_volume("data", size="1Gi")
    _binding(cluster, [EDITOR], role="view")
    cluster.fail("POST", "/rolebindings", status, "no", after=1, once=True)  # submit's first create: 409, made
    with caplog.at_level(logging.WARNING):
        _submit_watched(backend, "one")
    assert cluster.get("batch", "jobs", NS, "one")  # the job runs all the same
    assert cluster.items("rbac.authorization.k8s.io", "rolebindings", NS) == []  # deleted, not made again
    (said,) = [r.getMessage() for r in caplog.records if "RoleBinding" in r.getMessage()]
    verb = ("this account may not create RoleBindings there (kubectl auth can-i create "
            f"rolebindings.rbac.authorization.k8s.io -n {NS})" if status == 403 else "its create failed: ")
    assert said.startswith(
        f"dtrain: warning: RoleBinding dtrain-snapshotter in namespace {NS}, labelled as made by dtrain, bound Role "
        f"view, not Role dtrain-snapshotter: it was deleted to be made anew, and {verb}"), said
    assert said.endswith(
        f"so the snapshot watcher may not read the job or take its snapshot until it is made: submit again once "
        f"allowed (that makes it), or ask an admin to run kubectl create rolebinding dtrain-snapshotter -n {NS} "
        f"--role=dtrain-snapshotter --serviceaccount={NS}:dtrain-snapshotter"), said
    assert "\n" not in said

    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _submit_watched(backend, "two")  # the refusal has passed: the rerun makes it
    assert [r.getMessage() for r in caplog.records if "RoleBinding" in r.getMessage()] == []
    made = _bound(cluster)
    assert made["roleRef"]["name"] == "dtrain-snapshotter" and WATCHER in made["subjects"]


def test_get_projects_carries_a_terminating_project_as_a_typed_field(tmp_path, backend, cluster):
    """The CLI marked a project whose namespace is being deleted; GET /projects passed `extra.status` through
    untyped, and the dashboard marked nothing. The record's `terminating` is in the OpenAPI schema."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain.server.app import create_app
    from test_k8s_terminating import _terminating

    client = Client(home=tmp_path / "sdk-home", backend="kubernetes", backends={"kubernetes": backend})
    http = TestClient(create_app(lambda: client), base_url="http://127.0.0.1:8000")
    backend.create_project("other")
    _terminating(backend, cluster)
    listed = {p["name"]: p for p in http.get("/api/v1/projects").json()}
    assert (listed["lanes"]["terminating"], listed["other"]["terminating"]) == (True, False)
    assert http.get("/api/v1/projects/lanes").json()["terminating"] is True
    schema = http.get("/api/v1/openapi.json").json()["components"]["schemas"]["Project"]["properties"]
    assert schema["terminating"]["type"] == "boolean"
    [lanes] = [p for p in client.list_projects() if p.name == "lanes"]
    assert lanes.terminating is True and lanes.extra["status"] == "Terminating"  # kept for one release


@pytest.mark.slow  # a browser and a server process: about 15 s
def test_the_dashboards_projects_page_marks_a_terminating_project(home, tmp_path, backend, cluster):
    from test_dashboard_browser import CHROMEDRIVER, CHROMIUM, WebDriverWait, chrome, no_errors, text_of
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are not installed (scripts/setup.sh installs them)")
    from server_util import ServerProcess
    from test_k8s_leftovers3 import _cli
    from test_k8s_terminating import _terminating

    backend.create_project("other")
    _terminating(backend, cluster)
    with FakeKubeServer(cluster) as kube:
        _cli(home, tmp_path, kube)  # config.yaml: that cluster, project lanes
        server = ServerProcess(home)
        try:
            with chrome() as browser:
                browser.get(server.url + "/#/projects")
                row = "#projects-table tr[data-project='{}'] td:first-child"
                WebDriverWait(browser, 60, poll_frequency=0.2).until(lambda d: text_of(d, row.format("lanes")))
                # config.yaml's project is lanes, so the page marks it (default) too
                assert text_of(browser, row.format("lanes")) == "lanes (Terminating) (default)"
                assert text_of(browser, row.format("other")) == "other"
                no_errors(browser)
        finally:
            server.stop()

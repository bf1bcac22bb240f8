"""The Kubernetes backend's warnings of `project list` and `nodes` (a GPU quota or pods this account
may not read) went through Python logging alone, once per process: the SDK's result had no notices,
GET /projects and GET /nodes no Warning header, and a dashboard never saw them. They now come back
with the call's result as `Notice`s ("quota-unknown", "gpus-unknown"), printed once by the CLI.

Every test drives the official `kubernetes` client against the shipped fake API server.
"""

from __future__ import annotations

import logging

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.kubernetes.fake import FakeKubeServer  # noqa: E402
from dtrain.client import Client  # noqa: E402

from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)
from test_k8s_leftovers3 import _cli, _running_job  # noqa: E402

NO_QUOTA_NO_PODS = {("", "pods"), ("", "resourcequotas"), ("", "namespaces")}


def _client(tmp_path, backend) -> Client:
    return Client(home=tmp_path / "sdk-home", backend="kubernetes", backends={"kubernetes": backend})


def test_the_sdk_reads_what_project_list_and_nodes_could_not_read_in_notices(tmp_path, backend, cluster, caplog):
    _running_job(backend, cluster)
    client = _client(tmp_path, backend)
    assert client.list_projects().notices == () and client.nodes().notices == ()
    cluster.forbidden |= NO_QUOTA_NO_PODS
    with caplog.at_level(logging.WARNING):
        for _ in range(2):  # every call says it, not the first of the process alone
            projects, nodes = client.list_projects(), client.nodes()
            assert [(p.name, p.gpu_quota, p.gpus_allocated) for p in projects] == [("lanes", None, 2)]
            assert [n.code for n in projects.notices] == ["quota-unknown", "gpus-unknown"]
            quota, gpus = (n.message for n in projects.notices)
            assert quota.startswith("project lanes: GPU quota unknown: cannot read ResourceQuota")
            assert "kubectl auth can-i get resourcequotas -n dtrain-lanes" in quota
            assert gpus.startswith("project lanes: GPUs allocated counted from the running jobs' requests")
            assert [(n.name, n.gpus_allocated) for n in nodes] == [("gpu-1", 0)]
            [notice] = nodes.notices
            assert notice.code == "gpus-unknown"
            assert notice.message.startswith("GPUs allocated unknown (shown as 0): cannot list Pods")
    assert not [r for r in caplog.records if "warning" in r.getMessage()]  # the result says it, logging does not


def test_nodes_counting_some_namespaces_pods_says_so_in_a_notice(tmp_path, backend, cluster):
    _running_job(backend, cluster)
    cluster.fail("GET", "/api/v1/pods", 403)  # pods across all namespaces only
    nodes = _client(tmp_path, backend).nodes()
    assert [(n.name, n.gpus_allocated) for n in nodes] == [("gpu-1", 2)]
    [notice] = nodes.notices
    assert (notice.code, notice.message.split(":")[0]) == ("gpus-unknown", f"GPUs allocated count only the pods "
                                                                           f"of namespace {NS}")


@pytest.mark.slow
def test_the_cli_prints_each_notice_once_on_stderr(home, tmp_path, backend, cluster):
    _running_job(backend, cluster)
    cluster.forbidden |= NO_QUOTA_NO_PODS
    expected = _client(tmp_path, backend)
    with FakeKubeServer(cluster) as server:
        dt = _cli(home, tmp_path, server)
        for args, said in ((("project", "list"), expected.list_projects().notices),
                           (("nodes",), expected.nodes().notices)):
            for json_flag in ((), ("--json",)):
                r = dt(*args, *json_flag)
                assert r.returncode == 0, r.stderr
                assert r.stderr.splitlines() == [f"dtrain: warning: {n.message}" for n in said], args
                assert said


def test_get_projects_and_nodes_send_the_notices_in_their_warning_header(tmp_path, backend, cluster):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain.server.app import create_app
    from dtrain.server.wire import warning_header

    _running_job(backend, cluster)
    client = _client(tmp_path, backend)
    http = TestClient(create_app(lambda: client), base_url="http://127.0.0.1:8000")
    for path in ("/api/v1/projects", "/api/v1/nodes"):
        r = http.get(path)
        assert r.status_code == 200 and "warning" not in r.headers, (path, r.headers)
    cluster.forbidden |= NO_QUOTA_NO_PODS
    for path, notices in (("/api/v1/projects", client.list_projects().notices), ("/api/v1/nodes", client.nodes().notices)):
        r = http.get(path)
        assert r.status_code == 200, r.text
        assert notices and r.headers["warning"] == ", ".join(warning_header(n.message) for n in notices), path
    assert r.json()[0]["gpus_allocated"] == 0
    spec_ = http.get("/api/v1/openapi.json").json()["paths"]
    for path in ("/api/v1/projects", "/api/v1/nodes"):
        assert "Warning" in spec_[path]["get"]["responses"]["200"]["headers"], path


@pytest.mark.slow  # a browser and a server process: about 15 s
def test_the_dashboards_projects_and_nodes_pages_show_the_warnings(home, tmp_path, backend, cluster):
    from test_dashboard_browser import CHROMEDRIVER, CHROMIUM, WebDriverWait, chrome, text_of
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are not installed (scripts/setup.sh installs them)")
    from server_util import ServerProcess

    _running_job(backend, cluster)
    cluster.forbidden |= NO_QUOTA_NO_PODS
    with FakeKubeServer(cluster) as kube:
        _cli(home, tmp_path, kube)  # config.yaml: that cluster, project lanes
        server = ServerProcess(home)
        try:
            with chrome() as browser:
                browser.get(server.url + "/#/projects")
                WebDriverWait(browser, 60, poll_frequency=0.2).until(lambda d: text_of(d, "#projects-warning"))
                lines = text_of(browser, "#projects-warning").splitlines()  # a line per warning
                assert [line.split(":")[1].strip() for line in lines] == [
                    "GPU quota unknown", "GPUs allocated counted from the running jobs' requests"]
                assert all(line.startswith("project lanes: ") and '\\"' not in line for line in lines)
                assert text_of(browser, "#projects-table tr[data-project='lanes'] .quota") == "none"
                browser.get(server.url + "/#/nodes")
                WebDriverWait(browser, 60, poll_frequency=0.2).until(lambda d: text_of(d, "#nodes-warning"))
                [line] = text_of(browser, "#nodes-warning").splitlines()
                assert line.startswith("GPUs allocated unknown (shown as 0): cannot list Pods")
                assert text_of(browser, "#gpu-alloc-gpu-1") == "0 / 8"
        finally:
            server.stop()

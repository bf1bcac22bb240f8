"""Audit 8, the dashboard and /metrics: ids unique on a page of several nodes, a finished job's page
that stops polling, and the GPU model as a label of the per-GPU metrics."""

from __future__ import annotations

import contextlib
import time

import pytest

from test_audit6_dash import nvml_env

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from server_util import ServerProcess, ThreadServer, wait_until  # noqa: E402

PER_GPU = ("dtrain_gpu_utilization_percent", "dtrain_gpu_memory_used_bytes", "dtrain_gpu_memory_total_bytes",
           "dtrain_gpu_allocated")


def per_gpu_samples(text: str) -> list:
    return [s for f in text_string_to_metric_families(text) if f.name in PER_GPU for s in f.samples]


def test_per_gpu_metrics_carry_the_gpu_model(home, tmp_path, monkeypatch):
    """/metrics named a GPU by node and index only: nothing said which model it was, so utilisation could
    not be grouped by model as dcgm-exporter's `modelName` groups it. Each per-GPU series now has the name
    NVML gives (the one `dtrain nodes` shows)."""
    monkeypatch.delenv("DTRAIN_GPUS", raising=False)
    server = ServerProcess(home, env=nvml_env(tmp_path), cwd=tmp_path)
    try:
        dt = server.dtrain()
        assert server.http.post("/api/v1/jobs", json={"name": "holds-gpu", "command": ["sleep", "300"],
                                                      "gpu": 1}).status_code == 201
        dt.wait_for("holds-gpu", {"Running"})
        [node] = server.http.get("/api/v1/nodes").json()
        names = {g["index"]: g["name"] for g in node["gpus"]}
        assert all(names.values())
        samples = per_gpu_samples(server.http.get("/metrics").text)
        assert {s.name for s in samples} == set(PER_GPU)
        for s in samples:
            assert s.labels["modelName"] == names[s.labels["gpu"]], s
            assert s.labels["node"] == node["name"]
    finally:
        server.stop()


# ---- the pages ------------------------------------------------------------------------------------------
@contextlib.contextmanager
def two_node_cluster(home):
    """A server over the Kubernetes backend and the shipped fake API server, with two GPU nodes."""
    from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
    from dtrain.client import Client
    from dtrain.server.app import create_app

    cluster = FakeCluster()
    for name, gpus, product in (("node-a", 2, "NVIDIA A100-SXM4-80GB"), ("node-b", 1, "NVIDIA H100 80GB HBM3")):
        allocatable = {"cpu": "16", "memory": "64Gi", "pods": "110", "nvidia.com/gpu": str(gpus)}
        cluster.create({"apiVersion": "v1", "kind": "Node",
                        "metadata": {"name": name, "labels": {"nvidia.com/gpu.product": product}},
                        "status": {"allocatable": allocatable, "capacity": dict(allocatable)}})
    fake = FakeKubeServer(cluster).start()
    apis = []

    def make_client() -> Client:
        api = fake.api_client()
        apis.append(api)
        backend = KubernetesBackend(KubernetesConfig(project="lanes", image="ghcr.io/example/lanes:1"), api_client=api)
        return Client(home=home, backend="kubernetes", backends={"kubernetes": backend})

    server = ThreadServer(create_app(make_client, sample_every=3600))
    try:
        yield server, cluster
    finally:
        server.stop()
        for api in apis:
            api.close()
        fake.close()


DUPLICATE_IDS = """const seen = {}; document.querySelectorAll('[id]').forEach(e => seen[e.id] = (seen[e.id] || 0) + 1);
                   return Object.keys(seen).filter(id => seen[id] > 1);"""


@pytest.mark.slow  # a browser: about 10 s
def test_the_nodes_page_of_several_nodes_repeats_no_id(home):
    """Each node's card had an element with id gpus-table and one with id gpu-alloc: with two nodes the
    page held each id twice, and document.getElementById('gpu-alloc') (a script's, a test's) read the first
    node's only. Each id is now suffixed with its node; the class keeps the common name."""
    pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
    browser_tests = pytest.importorskip("test_dashboard_browser")
    text_of = browser_tests.text_of
    with two_node_cluster(home) as (server, _), browser_tests.chrome() as browser:
        browser.get(server.url + "/#/nodes")
        wait_until(lambda: browser.execute_script("return document.querySelectorAll('.node table').length") == 2,
                   what="two nodes' GPU tables")
        assert browser.execute_script(DUPLICATE_IDS) == []
        for node, alloc, models in (("node-a", "0 / 2", ["NVIDIA A100-SXM4-80GB"] * 2),
                                    ("node-b", "0 / 1", ["NVIDIA H100 80GB HBM3"])):
            assert text_of(browser, f"#gpu-alloc-{node}") == alloc
            assert text_of(browser, f"[data-node='{node}'] .gpu-alloc") == alloc
            rows = browser.execute_script("return [...document.getElementById(arguments[0]).tBodies[0].rows]"
                                          ".map(r => r.cells[1].innerText)", f"gpus-table-{node}")
            assert rows == models


def job_reads(browser, name: str) -> int:
    """How many times the page has asked for the job's record (not its logs, metrics or snapshots)."""
    return browser.execute_script(
        "return performance.getEntriesByType('resource').filter(e => new URL(e.name).pathname === arguments[0]).length",
        f"/api/v1/jobs/{name}")


@pytest.mark.slow  # a browser, a server and two jobs: about 30 s
def test_a_finished_jobs_page_stops_polling_and_an_active_ones_does_not(home, tmp_path):
    """A finished job's page read the job every 4 s for as long as the tab was open. It now stops once it
    has read a final state (and shows it), while a Running job's page goes on; Delete on a finished job's
    page shows Deleted at once, though that page polls no more."""
    browser_tests = pytest.importorskip("test_dashboard_browser")
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    text_of = browser_tests.text_of
    server = ServerProcess(home, cwd=tmp_path)
    try:
        dt = server.dtrain()
        dt("submit", "done", "--", "sh", "-c", "echo finished")
        dt("submit", "runs", "--", "sleep", "300")
        dt.wait_for("done", {"Succeeded"})
        dt.wait_for("runs", {"Running"})
        with browser_tests.chrome() as browser:
            browser.execute_script("performance.setResourceTimingBufferSize(100000)")
            browser.get(server.url + "/#/job/done")
            browser.execute_script("performance.setResourceTimingBufferSize(100000)")
            wait_until(lambda: "no longer refreshed" in text_of(browser, "#updated"), what="the polling's end")
            assert text_of(browser, "#job-status") == "Succeeded" and "finished" in text_of(browser, "#logs")
            reads = job_reads(browser, "done")
            time.sleep(9)  # two polls' time and more
            assert job_reads(browser, "done") == reads
            assert text_of(browser, "#job-status") == "Succeeded"

            browser_tests.click(browser, "#job-head button.danger")  # Delete, confirmed
            WebDriverWait(browser, 30).until(expected_conditions.alert_is_present()).accept()
            wait_until(lambda: text_of(browser, "#job-status") == "Deleted", what="the deletion shown")
            assert not browser.find_elements("css selector", "#job-head button")

            browser.get(server.url + "/#/job/runs")
            wait_until(lambda: text_of(browser, "#job-status") == "Running", what="the running job")
            reads = job_reads(browser, "runs")
            time.sleep(9)
            assert job_reads(browser, "runs") >= reads + 2
            assert "no longer refreshed" not in text_of(browser, "#updated")
    finally:
        server.stop()


UNNAMED_CONTROLS = """return [...document.querySelectorAll('main select, main input, main textarea, main pre[tabindex]')]
  .filter(e => !e.getAttribute('aria-label') && !(e.id && document.querySelector(`label[for='${e.id}']`)))
  .map(e => e.outerHTML.slice(0, 80));"""


@pytest.mark.slow  # a browser and a job: about 15 s
def test_empty_tables_say_so_and_controls_and_charts_have_names(home, tmp_path):
    """The Volumes and Snapshots tables of a new install were bare headers (as if they had failed to fill),
    the jobs page's filters and the logs' rank picker had no label a screen reader could say, and the charts
    (SVG lines) said nothing. Each empty table now says what is missing and how to make one, every control
    has a name, and a chart's label gives each series' newest value."""
    browser_tests = pytest.importorskip("test_dashboard_browser")
    text_of = browser_tests.text_of
    server = ServerProcess(home, cwd=tmp_path)
    try:
        dt = server.dtrain()
        dt("submit", "curves", "--", "python", "-c",
           "import json, os\nwith open(os.environ['DTRAIN_METRICS_FILE'], 'a') as f:\n"
           "    for s in (1, 2): f.write(json.dumps({'step': s, 'loss': 1.0 / s}) + '\\n')\n")
        dt.wait_for("curves", {"Succeeded"})
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/storage")
            wait_until(lambda: "No snapshots yet" in text_of(browser, "main"), what="the empty snapshots table")
            assert "No volumes yet: make one with 'dtrain volume create" in text_of(browser, "main")
            assert not browser.find_elements("css selector", "#volumes-table, #snapshots-table")
            for page in ("#/jobs", "#/submit"):
                browser.get(server.url + "/" + page)
                wait_until(lambda: browser.find_elements("css selector", "main select"), what=page)
                assert browser.execute_script(UNNAMED_CONTROLS) == [], page
            browser.get(server.url + "/#/job/curves")
            wait_until(lambda: browser.find_elements("css selector", "[data-curve='loss'] path.line"), what="the curve")
            assert browser.execute_script(UNNAMED_CONTROLS) == []
            label = browser.execute_script(
                "return document.querySelector(\"[data-curve='loss'] svg\").getAttribute('aria-label')")
            assert label == "loss by step. newest loss: 0.500", label
            assert browser.execute_script("return document.querySelector(\"[data-curve='loss'] svg\")"
                                          ".getAttribute('role')") == "img"
    finally:
        server.stop()

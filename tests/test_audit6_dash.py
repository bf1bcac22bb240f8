"""Audit 6, the dashboard and GPU views: `dtrain nodes`, /metrics and the pages with GPUs that NVML
describes (a stand-in pynvml module), and the job page's layout with long messages."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import Dtrain, _cleanup

# nvidia-ml-py as a machine with two H100s answers it, the second in MIG mode: NVML gives no
# utilisation for a MIG-enabled GPU (NVMLError_NotSupported; nvidia-smi prints "[N/A]").
FAKE_PYNVML = '''
class NVMLError(Exception):
    pass
class NVMLError_NotSupported(NVMLError):
    pass
class _Mem:
    total, used = 80 * 2**30, 3 * 2**30
class _Util:
    gpu = 42
def nvmlInit(): pass
def nvmlShutdown(): pass
def nvmlDeviceGetCount(): return 2
def nvmlDeviceGetHandleByIndex(i): return i
def nvmlDeviceGetMemoryInfo(h): return _Mem()
def nvmlDeviceGetName(h): return "NVIDIA H100 80GB HBM3"
def nvmlDeviceGetUtilizationRates(h):
    if h == 1:
        raise NVMLError_NotSupported("Not Supported")
    return _Util()
'''


def nvml_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a machine whose GPUs NVML reports (no injected inventory)."""
    folder = tmp_path / "fake-nvml"
    folder.mkdir(exist_ok=True)
    (folder / "pynvml.py").write_text(FAKE_PYNVML)
    path = os.pathsep.join(p for p in (str(folder), os.environ.get("PYTHONPATH")) if p)
    return {"PYTHONPATH": path}


@pytest.fixture
def dt_nvml(home, tmp_path, monkeypatch):
    monkeypatch.delenv("DTRAIN_GPUS", raising=False)
    d = Dtrain(home, env=nvml_env(tmp_path))
    yield d
    _cleanup(d)


def test_a_gpu_without_utilisation_is_listed_with_what_nvml_knows(dt_nvml):
    """A MIG-enabled GPU's utilisation query raised NVMLError_NotSupported through `dtrain nodes`,
    `dtrain submit` and the dashboard (a traceback); now that value is unknown, the rest is shown."""
    gpus = dt_nvml.json("nodes")[0]["gpus"]
    assert [g["index"] for g in gpus] == ["0", "1"]
    assert gpus[0]["utilization"] == 42.0 and gpus[1]["utilization"] is None
    assert {g["memory_total"] for g in gpus} == {80 * 2**30} and gpus[1]["name"].startswith("NVIDIA")
    top = dt_nvml("top")
    assert "Traceback" not in top.stderr and "42%" in top.stdout
    dt_nvml("submit", "on-gpu", "-g", "2", "--", "true")
    assert dt_nvml.wait_for("on-gpu", {"Succeeded", "Failed"})["status"] == "Succeeded"


LONG = "a-very-long-job-name-that-uses-all-fifty-three-chars"[:53]


@pytest.mark.slow  # a browser, a server and two jobs: about 20 s
def test_pages_show_nvml_gpus_in_the_tables_units_and_long_messages_wrap(home, tmp_path, monkeypatch):
    """The nodes page's memory chart labelled its axis in decimal units ("3.2G") beside a table in
    GiB ("3.0 GiB"); a status event's message did not wrap, so a failed job's page scrolled sideways
    and cut the message off at the card's edge."""
    browser_tests = pytest.importorskip("test_dashboard_browser")
    from prometheus_client.parser import text_string_to_metric_families

    from server_util import ServerProcess, wait_until

    monkeypatch.delenv("DTRAIN_GPUS", raising=False)
    server = ServerProcess(home, env=nvml_env(tmp_path), cwd=tmp_path)
    try:
        http, dt = server.http, Dtrain(home, env=nvml_env(tmp_path))
        for body in ({"name": "holds-gpu", "command": ["sleep", "300"], "gpu": 1},
                     {"name": LONG, "command": ["sh", "-c", "exit 3"]}):
            assert http.post("/api/v1/jobs", json=body).status_code == 201
        dt.wait_for("holds-gpu", {"Running"})
        failed = dt.wait_for(LONG, {"Failed"})
        # /metrics: valid Prometheus text, with the values NVML gave and none it did not
        families = {f.name: f for f in text_string_to_metric_families(http.get("/metrics").text)}
        util = {s.labels["gpu"]: s.value for s in families["dtrain_gpu_utilization_percent"].samples}
        assert util == {"0": 42.0}
        assert {s.labels["gpu"] for s in families["dtrain_gpu_memory_total_bytes"].samples} == {"0", "1"}
        assert [s.labels["job_name"] for s in families["dtrain_gpu_allocated"].samples] == ["holds-gpu"]

        with browser_tests.chrome() as browser:
            browser.set_window_size(800, 900)
            text_of = browser_tests.text_of
            browser.get(server.url + "/#/job/" + LONG)
            # shown twice: the job's message, and the last status event's
            wait_until(lambda: text_of(browser, "main").count(failed["message"]) == 2, what="the failure's event")
            width = browser.execute_script("return [document.documentElement.scrollWidth, window.innerWidth]")
            assert width[0] <= width[1], f"the job page scrolls sideways: {width}"

            node = dt.json("nodes")[0]
            browser.get(server.url + "/#/nodes")
            wait_until(lambda: "holds-gpu" in text_of(browser, ".gpus-table"), what="the GPU table")
            assert text_of(browser, ".gpu-alloc") == f"{node['gpus_allocated']} / {node['gpus_allocatable']}"
            rows = browser.execute_script("return [...document.querySelectorAll('.gpus-table tbody tr')]"
                                          ".map(r => [...r.cells].map(c => c.innerText.trim()))")
            assert [r[4] for r in rows] == ["42%", "-"] and {r[5] for r in rows} == {"3Gi / 80Gi"}
            axis = """const card = [...document.querySelectorAll('.node .card')]
                        .find(c => c.querySelector('h2').innerText.startsWith('Memory used'));
                      return card ? [...card.querySelectorAll('svg text')].map(t => t.textContent) : [];"""
            wait_until(lambda: len(browser.execute_script(axis)) > 1, what="a GPU sample in the memory chart")
            labels = browser.execute_script(axis)
            assert labels[0] == "3Gi" and labels[1] == "0B", labels  # as the CLI writes sizes
            severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
            assert not severe, severe
    finally:
        server.stop()


@pytest.mark.slow
def test_metrics_count_the_gpus_a_queued_job_waits_for(home, tmp_path):
    """The dashboard shows a job's GPUs "allocated (requested)"; /metrics had only the allocated ones, so a
    job queued for GPUs (Run:AI's runai_job_requested_gpus) could not be seen or alerted on."""
    from prometheus_client.parser import text_string_to_metric_families

    from server_util import ServerProcess

    server = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    try:
        dt = server.dtrain()
        dt("submit", "holder", "-g", "1", "--", "sleep", "300")
        dt("submit", "waiter", "-g", "2", "--", "true")
        dt.wait_for("holder", {"Running"})
        assert dt.status("waiter") == "Pending"
        jobs = {j["name"]: j for j in dt.json("list")}
        families = {f.name: f for f in text_string_to_metric_families(server.http.get("/metrics").text)}
        for metric, field in (("dtrain_job_gpus_requested", "gpus_requested"),
                              ("dtrain_job_gpus_allocated", "gpus_allocated")):
            got = {s.labels["job_name"]: s.value for s in families[metric].samples}
            assert got == {name: j[field] for name, j in jobs.items()}, metric
        assert families["dtrain_job_gpus_requested"].type == "gauge"
    finally:
        server.stop()

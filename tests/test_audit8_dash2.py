"""Audit 8, the dashboard (second pass): a Projects page and a Notebooks page, as Run:AI's Projects view and
Kubeflow's Notebooks UI show them."""

from __future__ import annotations

import time

import pytest

from server_util import ServerProcess, wait_until

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")


def cells(browser, table: str, key: str) -> dict:
    """{row's data-KEY: [cell texts]} of a table, read in one script (the page re-renders on every poll)."""
    return browser.execute_script(
        "const t = document.getElementById(arguments[0]); if (!t) return {};"
        "return Object.fromEntries([...t.tBodies[0].rows].map(r => [r.dataset[arguments[1]],"
        " [...r.cells].map(c => c.innerText.trim())]));", table, key)


@pytest.mark.slow
def test_projects_api_counts_running_and_pending_jobs(home, tmp_path):
    """GET /projects gave a project's quota, GPUs held and job count, not how many of its jobs run and how many
    wait: the Projects page (Run:AI's running and pending workloads) had nothing to show them from."""
    server = ServerProcess(home, env={"DTRAIN_GPUS": "1"}, cwd=tmp_path)
    try:
        dt, http = server.dtrain(), server.http
        assert http.post("/api/v1/projects", json={"name": "team-f"}).status_code == 201
        dt("submit", "f1", "-p", "team-f", "--gpu", "1", "--", "sleep", "300")
        dt.wait_for("f1", {"Running"})
        dt("submit", "f2", "-p", "team-f", "--gpu", "1", "--", "sleep", "300")
        dt("submit", "f3", "-p", "team-f", "--", "true")
        dt.wait_for("f3", {"Succeeded"})
        [team] = [p for p in http.get("/api/v1/projects").json() if p["name"] == "team-f"]
        assert (team["running"], team["pending"], team["jobs"], team["gpus_allocated"]) == (1, 1, 3, 1), team
        made = http.post("/api/v1/projects", json={"name": "team-f", "gpu_quota": 1})  # the POST's answer too
        assert made.status_code == 200 and (made.json()["running"], made.json()["pending"]) == (1, 1), made.text
    finally:
        server.stop()


@pytest.mark.slow  # a browser, a server and three jobs: about 25 s
def test_the_projects_page_shows_quota_use_queues_and_over_quota(home, tmp_path):
    """The dashboard had no Projects page: a project's quota and use were in `dtrain project list` only, and
    nothing said which projects' jobs run over quota (preemptible by a project with a quota)."""
    browser_tests = pytest.importorskip("test_dashboard_browser")
    server = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    try:
        dt, http = server.dtrain(), server.http
        assert http.post("/api/v1/projects", json={"name": "team-q", "gpu_quota": 1}).status_code == 201
        assert http.post("/api/v1/projects", json={"name": "team-f"}).status_code == 201
        dt("submit", "q1", "-p", "team-q", "--gpu", "1", "--", "sleep", "300")
        dt.wait_for("q1", {"Running"})
        dt("submit", "f1", "-p", "team-f", "--gpu", "1", "--", "sleep", "300")
        dt.wait_for("f1", {"Running"})
        dt("submit", "f2", "-p", "team-f", "--gpu", "1", "--", "sleep", "300")  # no GPU left: waits
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/projects")
            wait_until(lambda: "team-f" in cells(browser, "projects-table", "project"), what="the projects table")
            rows = cells(browser, "projects-table", "project")
            assert rows["team-q"][1:] == ["1", "1", "1", "0", "1", "-", "-", "no", "local", "Delete"], rows
            assert rows["team-f"][1:] == ["none", "1", "1", "1", "2", "-", "-", "yes: no quota (preemptible)", "local",
                                        "Delete"], rows
            assert http.post("/api/v1/projects", json={"name": "team-q", "gpu_quota": 0}).status_code == 200
            wait_until(lambda: cells(browser, "projects-table", "project")["team-q"][-3].startswith("yes: 1 GPU over"),
                       what="a quota lowered below the project's use")
            assert browser.execute_script("return document.querySelector(\"nav a.active\").dataset.page") == "projects"
            browser_tests.click(browser, "tr[data-project='team-f'] a")  # its jobs
            wait_until(lambda: sorted(cells(browser, "jobs-table", "job")) == ["f1", "f2"], what="team-f's jobs")
    finally:
        server.stop()


@pytest.mark.slow  # a browser: about 10 s
def test_the_projects_page_without_projects_says_how_to_make_one(home):
    pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
    browser_tests = pytest.importorskip("test_dashboard_browser")
    from test_audit8_dash import two_node_cluster

    with two_node_cluster(home) as (server, _), browser_tests.chrome() as browser:
        browser.get(server.url + "/#/projects")
        wait_until(lambda: "No projects yet" in browser_tests.text_of(browser, "main"), what="the empty state")
        assert "'dtrain project create NAME --gpu-quota 2'" in browser_tests.text_of(browser, "main")


@pytest.mark.slow  # a browser and two real JupyterLabs: about 30 s
def test_the_notebooks_page_lists_notebooks_opens_a_running_one_and_says_why_one_waits(home, tmp_path):
    """The dashboard had no Notebooks page (Kubeflow's Notebooks UI): a notebook was a row of the Jobs table,
    with nothing saying why a queued one waited, and no place listing the notebooks alone."""
    pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server: pip install 'dtrain[notebook]'")
    browser_tests = pytest.importorskip("test_dashboard_browser")
    server = ServerProcess(home, env={"DTRAIN_GPUS": "1"}, cwd=tmp_path)
    try:
        dt, http = server.dtrain(), server.http
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/notebooks")
            wait_until(lambda: "No notebooks yet" in browser_tests.text_of(browser, "main"), what="the empty state")
            assert "'dtrain notebook start NAME" in browser_tests.text_of(browser, "main")
            dt("submit", "hold", "--gpu", "1", "--", "sleep", "300")
            dt.wait_for("hold", {"Running"})
            dt("notebook", "start", "nb", cwd=tmp_path)
            dt("notebook", "start", "nbq", "--gpu", "1", cwd=tmp_path)  # the one GPU is held: it waits
            wait_until(lambda: (r := http.get("/api/v1/notebooks/nb/url")).status_code == 200, timeout=90,
                       what="the notebook serving")
            wait_until(lambda: browser.find_elements("css selector", "tr[data-notebook='nb'] button.open-notebook"),
                       what="nb's Open button")
            rows = cells(browser, "notebooks-table", "notebook")
            assert sorted(rows) == ["nb", "nbq"], rows  # notebooks only: not the job 'hold'
            assert rows["nbq"][1] == "Pending" and "needs 1 GPU, 0 free" in rows["nbq"][6], rows
            assert rows["nbq"][5] == "0 (1)" and rows["nb"][1] == "Running", rows
            assert not browser.find_elements("css selector", "tr[data-notebook='nbq'] button.open-notebook")
            browser_tests.click(browser, "tr[data-notebook='nb'] button.open-notebook")
            wait_until(lambda: len(browser.window_handles) == 2, what="Jupyter's tab")
    finally:
        server.stop()


def test_every_gpu_has_an_info_series_naming_its_model(home, tmp_path):
    """A free GPU with no NVML values (the injected ones, a machine without NVML) had no per-GPU series at all,
    so nothing in /metrics carried its model: `count by (modelName)` of the fleet missed it. dtrain_gpu_info
    (dcgm-exporter's kind of info metric) is 1 for every GPU of the inventory, held or free."""
    from prometheus_client.parser import text_string_to_metric_families

    server = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    try:
        dt = server.dtrain()
        dt("submit", "one", "--gpu", "1", "--", "sleep", "300")
        dt.wait_for("one", {"Running"})
        [node] = server.http.get("/api/v1/nodes").json()
        families = {f.name: f for f in text_string_to_metric_families(server.http.get("/metrics").text)}
        info = {(s.labels["node"], s.labels["gpu"]): (s.labels.get("modelName"), s.value)
                for s in families["dtrain_gpu_info"].samples}
        assert info == {(node["name"], str(g["index"])): (g["name"], 1.0) for g in node["gpus"]}, info
        assert all(name for name, _ in info.values())  # 'injected': the label is there on a free GPU too
    finally:
        server.stop()


@pytest.mark.slow  # a server, two jobs, a suspension and a relaunch: about 20 s
def test_following_a_resumed_job_that_waits_shows_its_new_run_only(home, tmp_path):
    """`dtrain logs -f` and GET /logs/stream of a job resumed but still Pending sent the suspended run's lines
    first, then the new run's: every line of the run before came again, as if the job had printed it twice.
    kubectl -f follows the container that runs, and --previous reads the one before: both doors now follow
    the run to come (and say so); a read without -f still gives the last run's lines, `--previous` them once the
    new run has started."""
    import json
    import subprocess
    import threading

    from conftest import DTRAIN

    server = ServerProcess(home, env={"DTRAIN_GPUS": "1"}, cwd=tmp_path)
    try:
        dt, http = server.dtrain(), server.http
        dt("submit", "sr2", "--gpu", "1", "--", "sh", "-c", "echo run $$; sleep 300")
        wait_until(lambda: "run " in dt("logs", "sr2").stdout, what="the first run's line")
        old = dt("logs", "sr2").stdout.strip()
        dt("suspend", "sr2")
        dt.wait_for("sr2", {"Suspended"})
        dt("submit", "hold", "--gpu", "1", "--", "sleep", "300")  # takes the GPU: the resumed job waits
        dt.wait_for("hold", {"Running"})
        dt("resume", "sr2")
        assert dt.status("sr2") == "Pending"
        assert dt("logs", "sr2").stdout.strip() == old  # without -f: the last run's lines (why it stopped), as before

        events: list[str] = []

        def read():
            with http.stream("GET", "/api/v1/jobs/sr2/logs/stream") as resp:
                events.extend(resp.iter_lines())
        reader = threading.Thread(target=read, daemon=True)
        reader.start()
        cli = subprocess.Popen([DTRAIN, "logs", "-f", "sr2"], env=dt.env, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
        try:
            time.sleep(3)  # the stream and the CLI are open on the waiting job
            assert not [e for e in events if e.startswith("data: ")], events
            dt("delete", "hold")  # the GPU frees: the resumed job runs again
            dt.wait_for("sr2", {"Running"})
            wait_until(lambda: any(e.startswith("data: ") for e in events), what="the new run's line")
            new = dt("logs", "sr2").stdout.strip()
            assert new.startswith("run ") and new != old
            assert dt("logs", "sr2", "--previous").stdout.strip() == old
            dt("delete", "sr2")
            reader.join(60)
            out, err = cli.communicate(timeout=60)
        finally:
            if cli.poll() is None:
                cli.kill()
        texts = [json.loads(e[len("data: "):])["text"] for e in events if e.startswith('data: {"rank"')]
        assert texts == [new], events
        assert out.strip() == new, out
        assert "following its next run, which has not started; 'dtrain logs sr2' shows the last run's" in err, err
    finally:
        server.stop()


@pytest.mark.slow  # a browser, a server and a job: about 20 s
def test_a_purged_jobs_page_says_so_and_stops_polling(home, tmp_path):
    """The page of a job deleted with --purge kept asking for it, under a 404 banner, every 30 s for as long as
    the tab stayed open. A job that is not there now stops the polling and the page says why."""
    browser_tests = pytest.importorskip("test_dashboard_browser")
    from test_audit8_dash import job_reads

    text_of = browser_tests.text_of
    server = ServerProcess(home, cwd=tmp_path)
    try:
        dt = server.dtrain()
        dt("submit", "gone", "--", "sleep", "300")
        dt.wait_for("gone", {"Running"})
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/job/gone")
            browser.execute_script("performance.setResourceTimingBufferSize(100000)")
            wait_until(lambda: text_of(browser, "#job-status") == "Running", what="the running job")
            dt("delete", "gone", "--purge")
            wait_until(lambda: "no job named 'gone'" in text_of(browser, "#job-gone"), what="the job's end said")
            wait_until(lambda: "no longer refreshed" in text_of(browser, "#updated"), what="the polling's end")
            reads = job_reads(browser, "gone")
            time.sleep(9)  # two polls' time and more
            assert job_reads(browser, "gone") == reads
            assert browser.execute_script("return document.getElementById('banner').hidden")
    finally:
        server.stop()

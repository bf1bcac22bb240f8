"""Audit 13, the dashboard: the Projects page had no Delete, though `dtrain project delete` and DELETE
/api/v1/projects/{name} exist; a project still holding a job could only be found refused from the CLI."""

from __future__ import annotations

import re

import pytest

from server_util import ServerProcess, wait_until

browser_tests = pytest.importorskip("test_dashboard_browser")
text_of, attrs_of, click = browser_tests.text_of, browser_tests.attrs_of, browser_tests.click
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


in_browser = browser_tests.in_browser


def projects_shown(browser) -> list:
    return attrs_of(browser, "#projects-table tbody tr", "data-project")


@in_browser
def test_a_project_is_deleted_from_the_projects_page_and_a_refusal_is_shown_verbatim(home, tmp_path):
    """An empty project goes (confirmed, what went said above the table); one holding a job is refused in the API's
    own line, which stays on screen past the next poll; `default` has a disabled Delete saying why."""
    server = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    dt = server.dtrain()
    try:
        dt("project", "create", "scratch", "--gpu-quota", "2")
        dt("project", "create", "busy")
        dt("submit", "held", "-p", "busy", "--", "true")
        dt.wait_for("held", {"Succeeded"})
        refused = server.http.delete("/api/v1/projects/busy")  # the API's words, nothing changed by asking
        assert refused.status_code == 409, refused.text
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/projects")
            wait_until(lambda: projects_shown(browser) == ["busy", "default", "scratch"], what="the projects")
            disabled = attrs_of(browser, "tr[data-project='default'] button.delete-project", "disabled")
            assert disabled == [""], disabled
            title = attrs_of(browser, "tr[data-project='default'] button.delete-project", "title")
            assert title == ["project 'default' cannot be deleted: every job given no project runs in it"]

            click(browser, "tr[data-project='scratch'] button.delete-project")
            alert = WebDriverWait(browser, 30).until(expected_conditions.alert_is_present())
            assert alert.text.startswith("Delete project scratch?")
            alert.accept()
            wait_until(lambda: projects_shown(browser) == ["busy", "default"], what="scratch gone")
            assert text_of(browser, "#project-message") == "Project scratch deleted (removed: GPU quota 2)."
            assert "scratch" not in [p["name"] for p in server.http.get("/api/v1/projects").json()]

            click(browser, "tr[data-project='busy'] button.delete-project")
            WebDriverWait(browser, 30).until(expected_conditions.alert_is_present()).accept()
            wait_until(lambda: text_of(browser, "#banner") == refused.json()["error"], what="the refusal")
            assert text_of(browser, "#project-message") == ""  # the last delete's words are not this one's
            updated = text_of(browser, "#updated")
            wait_until(lambda: text_of(browser, "#updated") != updated, what="the next poll")
            assert text_of(browser, "#banner") == refused.json()["error"]  # a poll's success did not clear it
            assert projects_shown(browser) == ["busy", "default"]
    finally:
        server.stop()


USE = ("gpu-util", "gpu-memory")  # a row's cells of its GPUs' utilisation and memory


@in_browser
def test_a_jobs_gpu_utilisation_and_memory_are_shown_in_the_jobs_table_and_on_its_page(home, tmp_path, monkeypatch):
    """Run:AI's job list, job view and Projects view show GPU utilisation and memory by job and by project; here only
    the Nodes page did, by GPU: a user had to match GPUs to jobs there. The Jobs table, the job's head, a memory
    chart and the Projects table now say it, from the server's newest samples (a stand-in NVML: 42% and 3Gi of
    80Gi, the second GPU a MIG one without utilisation)."""
    from test_audit6_dash import nvml_env

    monkeypatch.delenv("DTRAIN_GPUS", raising=False)
    server = ServerProcess(home, env=nvml_env(tmp_path), cwd=tmp_path)
    try:
        http = server.http
        assert http.post("/api/v1/projects", json={"name": "team-b"}).status_code == 201
        project = {"first": "default", "second": "team-b", "cpu-only": "default"}
        for name, gpu in (("first", 1), ("second", 1), ("cpu-only", 0)):
            r = http.post("/api/v1/jobs", json={"name": name, "command": ["sleep", "300"], "gpu": gpu,
                                                "project": project[name]})
            assert r.status_code == 201, r.text
        wait_until(lambda: {j["name"]: j["status"] for j in http.get("/api/v1/jobs").json()}
                   == {"first": "Running", "second": "Running", "cpu-only": "Running"}, what="three jobs running")
        holder = {g["index"]: g["job"] for g in http.get("/api/v1/nodes").json()[0]["gpus"]}
        want = {holder["0"]: ("42%", "3Gi / 80Gi"), holder["1"]: ("-", "3Gi / 80Gi"), "cpu-only": ("-", "-")}
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/jobs")

            def shown():
                return {name: tuple(text_of(browser, f"tr[data-job='{name}'] td.{c}") for c in USE) for name in want}
            wait_until(lambda: shown() == want, what=f"each job's GPU use {want}")
            headers = attrs_of(browser, "#jobs-table th", "class")
            assert len(headers) == len(attrs_of(browser, "tr[data-job='first'] td", "class"))

            browser.get(server.url + "/#/projects")  # each project's jobs' GPUs together
            by_project = {project[holder["0"]]: want[holder["0"]], project[holder["1"]]: want[holder["1"]]}

            def projects():
                return {name: tuple(text_of(browser, f"tr[data-project='{name}'] td.{c}") for c in USE)
                        for name in by_project}
            wait_until(lambda: projects() == by_project, what=f"each project's GPU use {by_project}")

            browser.get(server.url + "/#/job/" + holder["0"])
            wait_until(lambda: text_of(browser, "#job-gpu-now") == "42% / 3Gi / 80Gi", what="the job's GPU use now")
            axis = "return [...document.querySelectorAll('[data-curve=gpu-memory] svg text')].map(t => t.textContent)"
            wait_until(lambda: "3Gi" in browser.execute_script(axis), what="the job's GPU memory chart")
            browser.get(server.url + "/#/job/cpu-only")
            wait_until(lambda: text_of(browser, "#job-gpu-now") == "- (no GPU held)", what="a CPU job's GPU use")
            browser_tests.no_errors(browser)
    finally:
        server.stop()


@in_browser
def test_the_nodes_page_names_a_gpus_job_project_and_a_jobs_head_its_cpu_and_memory_requests(home, tmp_path):
    """The Nodes page's GPU table named the job holding a GPU but not its project, and a job's CPU and memory
    requests were only in its Spec JSON, where Run:AI's job view has them in its head: the GPU's row has a Project
    cell ("-" for a free GPU), the job's head says its requests ("-" where unset)."""
    server = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    http = server.http
    try:
        assert http.post("/api/v1/projects", json={"name": "team-b"}).status_code == 201
        jobs = {"sized": {"gpu": 1, "cpu": 0.5, "memory": "1Gi", "project": "team-b"}, "bare": {}}
        for name, extra in jobs.items():
            r = http.post("/api/v1/jobs", json={"name": name, "command": ["sleep", "300"], **extra})
            assert r.status_code == 201, r.text
        wait_until(lambda: {j["name"]: j["status"] for j in http.get("/api/v1/jobs").json()}
                   == {"sized": "Running", "bare": "Running"}, what="both jobs running")
        held = {g["index"]: g["job"] for g in http.get("/api/v1/nodes").json()[0]["gpus"]}
        want = {index: ("sized", "team-b") if job == "sized" else ("free", "-") for index, job in held.items()}
        assert sorted(want.values()) == [("free", "-"), ("sized", "team-b")], held
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/nodes")

            def rows():
                return {i: (text_of(browser, f".gpus-table tr[data-gpu='{i}'] td.job"),
                            text_of(browser, f".gpus-table tr[data-gpu='{i}'] td.project")) for i in want}
            wait_until(lambda: rows() == want, what=f"each GPU's job and project {want}")
            headers = browser.execute_script("return [...document.querySelectorAll('.gpus-table th')]"
                                             ".map(t => t.textContent.trim())")
            assert headers[2:4] == ["Job", "Project"], headers

            browser.get(server.url + "/#/job/sized?project=team-b")
            wait_until(lambda: text_of(browser, "#job-requests") == "0.5 / 1Gi", what="the job's requests")
            browser.get(server.url + "/#/job/bare")
            wait_until(lambda: text_of(browser, "#job-requests") == "- / -", what="a job requesting neither")
            browser_tests.no_errors(browser)
    finally:
        server.stop()


@in_browser
def test_a_volume_and_a_snapshot_are_deleted_from_the_storage_page_and_a_refusal_is_shown_verbatim(home, tmp_path):
    """The Storage page had no Delete, though DELETE /volumes/{name} and /snapshots/{name} exist: a volume or a
    snapshot goes (confirmed, what went said in the CLI's words, the snapshot of a deleted volume kept); a volume a
    running job uses is refused in the API's own line, kept in the banner; a read-only server shows no Delete."""
    server = ServerProcess(home, cwd=tmp_path)
    dt = server.dtrain()
    try:
        for name in ("data", "scratch", "used"):
            dt("volume", "create", name, "--size", "1Gi")
        dt("snapshot", "create", "data", "--name", "first")
        dt("snapshot", "create", "data", "--name", "second")
        dt("submit", "user", "--pvc", "used:/mnt", "--", "sleep", "300")
        dt.wait_for("user", {"Running"})
        refused = server.http.delete("/api/v1/volumes/used")  # the API's words, nothing changed by asking
        assert refused.status_code == 409, refused.text

        def volumes():
            return attrs_of(browser, "#volumes-table tbody tr", "data-volume")

        def snapshots():
            return attrs_of(browser, "#snapshots-table tbody tr", "data-snapshot")

        def delete(row, start):
            click(browser, row)
            alert = WebDriverWait(browser, 30).until(expected_conditions.alert_is_present())
            assert alert.text.startswith(start), alert.text
            alert.accept()
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/storage")
            wait_until(lambda: volumes() == ["data", "scratch", "used"] and sorted(snapshots()) == ["first", "second"],
                       what="the volumes and snapshots")
            delete("tr[data-snapshot='second'] button.delete-snapshot", "Delete snapshot second?")
            wait_until(lambda: snapshots() == ["first"], what="second gone")
            said = text_of(browser, "#snapshot-message")
            assert re.fullmatch(r"Snapshot second deleted, \d+(\.\d)?[KMG]?i?B? freed\.", said), said

            delete("tr[data-volume='data'] button.delete-volume", "Delete volume data?")
            wait_until(lambda: volumes() == ["scratch", "used"], what="data gone")
            assert text_of(browser, "#snapshot-message") == "Volume data deleted."
            wait_until(lambda: "data (deleted)" in text_of(browser, "tr[data-snapshot='first']"), what="its snapshot kept")

            delete("tr[data-volume='used'] button.delete-volume", "Delete volume used?")
            force = WebDriverWait(browser, 30).until(expected_conditions.alert_is_present())
            assert force.text.startswith(refused.json()["error"] + "\n"), force.text  # --force offered, declined
            force.dismiss()
            wait_until(lambda: text_of(browser, "#banner") == refused.json()["error"], what="the refusal")
            assert text_of(browser, "#snapshot-message") == ""  # the last delete's words are not this one's
            updated = text_of(browser, "#updated")
            wait_until(lambda: text_of(browser, "#updated") != updated, what="the next poll")
            assert text_of(browser, "#banner") == refused.json()["error"]  # a poll's success did not clear it
            assert volumes() == ["scratch", "used"]
        assert [v["name"] for v in server.http.get("/api/v1/volumes").json()] == ["scratch", "used"]
    finally:
        server.stop()
    read_only = ServerProcess(home, args=("--read-only",), cwd=tmp_path)
    try:
        with browser_tests.chrome() as browser:
            browser.get(read_only.url + "/#/storage")
            wait_until(lambda: "scratch" in text_of(browser, "#volumes-table"), what="the volumes")
            wait_until(lambda: "first" in text_of(browser, "#snapshots-table"), what="the snapshots")
            buttons = "return document.querySelectorAll('button.delete-volume, button.delete-snapshot').length"
            assert browser.execute_script(buttons) == 0
    finally:
        read_only.stop()

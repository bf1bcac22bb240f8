"""Audit 9, the dashboard: what this round changed, as the page shows it: a stopping job's ranks read
Terminating, every backend's projects (and which backend holds each), and the API's Warning headers on
each page that reads them (the Projects and Notebooks pages, the Submit form's --image)."""

from __future__ import annotations

import threading

import pytest

import dtrain
from server_util import ServerProcess, ThreadServer, wait_until
from test_audit9_allproj import cluster  # noqa: F401  (a fixture: team-b on an in-memory Kubernetes)
from test_audit9_preempt import SLOW_STOP

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
browser_tests = pytest.importorskip("test_dashboard_browser")
pytestmark = browser_tests.pytestmark  # slow; chromium needed


def cells(browser, table: str, key: str) -> dict:
    """{row's data-KEY: [cell texts]} of a table, in one script (the page re-renders on every poll)."""
    return browser.execute_script(
        "const t = document.getElementById(arguments[0]); if (!t) return {};"
        "return Object.fromEntries([...t.tBodies[0].rows].map(r => [r.dataset[arguments[1]],"
        " [...r.cells].map(c => c.innerText.trim())]));", table, key)


def shown_warning(browser, css: str = "main [role=status].warning") -> str:
    return browser_tests.text_of(browser, css)


def test_a_stopping_jobs_ranks_read_terminating_on_its_page_and_in_the_jobs_table(home, tmp_path):
    """A job suspended while its process writes its checkpoint: the job page's Processes table reads the rank
    Terminating (coloured as such), the Jobs table counts it neither running nor pending, and once the process
    has exited the rank reads Stopped."""
    (tmp_path / "slow.py").write_text(SLOW_STOP)
    server = ServerProcess(home, cwd=tmp_path)
    try:
        dt, http = server.dtrain(), server.http
        dt("submit", "ckpt", "--working-dir", str(tmp_path), "--", "python", "slow.py")
        wait_until(lambda: "up" in dt("logs", "ckpt").stdout, what="the job started")
        answer = {}
        suspend = threading.Thread(target=lambda: answer.update(r=http.post("/api/v1/jobs/ckpt/suspend")))
        suspend.start()  # the suspension returns once the process has exited
        try:
            wait_until(lambda: "writing a checkpoint" in dt("logs", "ckpt").stdout, what="the job stopping")
            with browser_tests.chrome() as browser:
                browser.get(server.url + "/#/job/ckpt")
                rank = "#main .card table tbody tr td.status"
                wait_until(lambda: browser_tests.text_of(browser, rank) == "Terminating", what="the rank Terminating")
                assert browser_tests.attrs_of(browser, rank, "class")[0] == "status s-Terminating"  # the first: rank 0
                colour = browser.execute_script(f"return getComputedStyle(document.querySelector('{rank}')).color")
                assert colour == "rgb(180, 83, 9)", colour  # style.css's .s-Terminating, not the default text
                assert browser_tests.text_of(browser, "#job-status") == "Suspended"
                browser.get(server.url + "/#/jobs")
                wait_until(lambda: "ckpt" in cells(browser, "jobs-table", "job"), what="the jobs table")
                row = cells(browser, "jobs-table", "job")["ckpt"]
                assert (row[1], row[7]) == ("Suspended", "0 (0)"), row
                (tmp_path / "gate").write_text("x")  # the checkpoint is written: the process exits
                suspend.join(timeout=60)
                browser.get(server.url + "/#/job/ckpt")
                wait_until(lambda: browser_tests.text_of(browser, rank) == "Stopped", what="the rank Stopped")
        finally:
            (tmp_path / "gate").write_text("x")
            suspend.join(timeout=60)
        assert answer["r"].status_code == 200, answer["r"].text
    finally:
        server.stop()


@pytest.fixture
def page_server(cluster, home):  # noqa: F811
    from dtrain.server.app import create_app

    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    yield server
    server.stop()


def test_the_projects_page_names_each_projects_backend_and_says_which_backend_did_not_answer(
        cluster, page_server, home):  # noqa: F811
    """GET /projects lists every backend's projects now: the page had no Backend column, so team-b (a
    namespace on Kubernetes) read like a local project whose over-quota was '-'. A backend that did not
    answer was a Warning header the Projects page dropped: the list looked complete. The Notebooks page
    dropped GET /notebooks's the same way."""
    http = page_server
    import httpx

    assert httpx.post(http.url + "/api/v1/projects", json={"name": "team-b"}).status_code == 201
    with browser_tests.chrome() as browser:
        browser.get(http.url + "/#/projects")
        wait_until(lambda: "team-b" in cells(browser, "projects-table", "project"), what="team-b listed")
        rows = cells(browser, "projects-table", "project")
        assert rows["team-b"][-2] == "kubernetes" and rows["default"][-2] == "local", rows
        assert not shown_warning(browser)
        cluster.cluster.fail("GET", "", 503)  # the cluster stops answering
        wait_until(lambda: "not listed" in shown_warning(browser), what="the projects warning")
        assert shown_warning(browser).startswith("projects on the kubernetes backend (project team-b) not listed")
        assert list(cells(browser, "projects-table", "project")) == ["default"]
        browser.get(http.url + "/#/notebooks")
        wait_until(lambda: "not listed" in shown_warning(browser), what="the notebooks warning")
        assert shown_warning(browser).startswith("jobs on the kubernetes backend (project team-b) not listed")
        browser.get(http.url + "/#/jobs")
        wait_until(lambda: "not listed" in shown_warning(browser), what="the jobs warning")
        # a header with two warnings (RFC 7234: comma-separated) is two lines, each unquoted
        got = browser.execute_script("return warnings(arguments[0])", '299 dtrain "a, \\"b\\"", 299 dtrain "c\\\\d"')
        assert got == ['a, "b"', "c\\d"], got


def test_the_submit_forms_image_the_local_backend_does_not_use_is_said_on_the_jobs_page(home, tmp_path):
    """POST /jobs answers an --image the local backend does not use in its Warning header (the CLI's warning
    line): the Submit form went on to the job's page and the words were lost."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/submit")
            wait_until(lambda: browser.find_elements("id", "name"), what="the form")
            browser.find_element("id", "name").send_keys("img")
            browser.find_element("id", "command").send_keys("sleep 60")
            browser.find_element("id", "image").send_keys("pytorch/pytorch:2.5.1")
            browser.find_element("css selector", "#submit-form button[type=submit]").click()
            wait_until(lambda: browser_tests.text_of(browser, "#job-name") == "img", what="the job's page")
            wait_until(lambda: shown_warning(browser), what="the submit warning")
            assert shown_warning(browser).startswith("--image pytorch/pytorch:2.5.1 is not used by the local backend")
            browser.get(server.url + "/#/jobs")  # said once: another page does not repeat it
            wait_until(lambda: "img" in cells(browser, "jobs-table", "job"), what="the jobs table")
            assert not shown_warning(browser)
    finally:
        server.stop()

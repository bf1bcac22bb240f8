"""Audit 9, the dashboard: what this round changed, as the page shows it: a stopping job's ranks read
Terminating, every backend's projects (and which backend holds each), and the API's Warning headers on
each page that reads them (the Projects and Notebooks pages, the Submit form's --image)."""

from __future__ import annotations

import threading

import pytest

from server_util import ServerProcess, wait_until
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

"""Audit 13, the dashboard: the Projects page had no Delete, though `dtrain project delete` and DELETE
/api/v1/projects/{name} exist; a project still holding a job could only be found refused from the CLI."""

from __future__ import annotations

import pytest

from server_util import ServerProcess, wait_until

browser_tests = pytest.importorskip("test_dashboard_browser")
text_of, attrs_of, click = browser_tests.text_of, browser_tests.attrs_of, browser_tests.click
from selenium.webdriver.support import expected_conditions  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402


def in_browser(test):
    """Marked as the browser tests are: slow, and skipped without chromium."""
    for mark in browser_tests.pytestmark:
        test = mark(test)
    return test


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

"""Audit 10, the dashboard walked as a new user in a real browser: a job's page began with a stray "null", every
poll took the keyboard focus away, the unfiltered Jobs and Notebooks tables linked (and acted on) a Kubernetes
project's job without its project, and a lineage node's name ran past its box."""

from __future__ import annotations

import pytest

import conftest
import dtrain
from conftest import Dtrain
from server_util import ServerProcess, ThreadServer, wait_until

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
from dtrain.server.app import create_app  # noqa: E402

browser_tests = pytest.importorskip("test_dashboard_browser")
pytestmark = browser_tests.pytestmark  # slow; chromium needed
text_of = browser_tests.text_of

# The element that has the keyboard focus: its tag, class and words, and the data-job of its row
FOCUSED = ("const e = document.activeElement, row = e.closest('[data-job], [data-notebook]');"
           "return [e.tagName, e.className, e.textContent, row ? row.dataset.job || row.dataset.notebook : null];")


def redrawn(browser, css: str):
    """A check that the element `css` names now is another than the one there when this was called: the page's
    poll has drawn that part again."""
    browser.execute_script("window.__before = document.querySelector(arguments[0])", css)
    return lambda: browser.execute_script("const e = document.querySelector(arguments[0]);"
                                          "return !!e && e !== window.__before", css)


def test_a_jobs_page_starts_with_its_name_and_polls_keep_the_keyboard_focus(home, tmp_path):
    """The job page appended its Submit warning even when there was none: the page read "null" under the job's
    name. And every poll replaced the tables and the job's head: a keyboard user on a job's Suspend button was
    sent back to the page's top every 2-4 s. The focus now stays on the same control (the same job's row), and
    on the one in its place where it is gone (Suspend, once pressed, is Resume)."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        dt = server.dtrain()
        dt("submit", "focus-me", "--", "sh", "-c", "echo hi; sleep 120")
        dt("submit", "other", "--", "sh", "-c", "sleep 120")
        dt.wait_for("focus-me", {"Running"})
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/jobs")
            row = "tr[data-job='focus-me']"
            wait_until(lambda: text_of(browser, row + " td.status") == "Running", what="the jobs table")
            browser.execute_script("document.querySelector(arguments[0]).focus()", row + " button.suspend")
            wait_until(redrawn(browser, "#jobs-table"), what="the table drawn again")
            assert browser.execute_script(FOCUSED) == ["BUTTON", "suspend", "Suspend", "focus-me"]

            browser.get(server.url + "/#/job/focus-me")
            wait_until(lambda: text_of(browser, "#job-status") == "Running", what="the job's page")
            # nothing but elements between the title and the job's head: no "null" text
            assert browser.execute_script("return [...document.getElementById('main').childNodes]"
                                          ".filter(n => n.nodeType === Node.TEXT_NODE).map(n => n.textContent)") == []
            assert "null" not in text_of(browser, "main").split("\n")
            browser.execute_script("document.querySelector('#job-head button.suspend').focus()")
            wait_until(redrawn(browser, "#job-head .kv"), what="the head drawn again")
            assert browser.execute_script(FOCUSED)[:3] == ["BUTTON", "suspend", "Suspend job"]
            browser.switch_to.active_element.send_keys("\n")  # pressed from the keyboard
            wait_until(lambda: text_of(browser, "#job-status") == "Suspended", what="the suspension")
            wait_until(lambda: browser.execute_script(FOCUSED)[2] == "Resume job", what="the focus on Resume")
            assert dt.json("describe", "job", "focus-me")["status"] == "Suspended"
            assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        server.stop()


def test_the_unfiltered_tables_open_and_act_on_a_kubernetes_projects_job_with_its_project(home, tmp_path):
    """The Jobs table without a filter, and the Notebooks page, list every backend's jobs, but linked each one
    without its project: team-b's job (config.yaml sends team-b to Kubernetes) opened a page saying 'no job
    named', and its Suspend button was refused the same way."""
    cluster = conftest.team_b_on_kubernetes(home, tmp_path)
    dt = Dtrain(home)
    dt("submit", "kjob", "-p", "team-b", "--", "python", "t.py")
    dt("notebook", "start", "kbook", "-p", "team-b")
    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    try:
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/notebooks")
            wait_until(lambda: browser_tests.attrs_of(browser, "#notebooks-table a", "href"), what="the notebook")
            assert browser_tests.attrs_of(browser, "#notebooks-table a", "href") == ["#/job/kbook?project=team-b"]
            browser.get(server.url + "/#/jobs")
            row = "tr[data-job='kjob']"
            wait_until(lambda: text_of(browser, row + " td.status") == "Pending", what="kjob in the Jobs table")
            assert browser_tests.attrs_of(browser, row + " a", "href") == ["#/job/kjob?project=team-b"]
            browser_tests.click(browser, row + " a")
            wait_until(lambda: text_of(browser, "#job-status") == "Pending", what="the job's page")
            assert "team-b / kubernetes" in text_of(browser, "#job-head")
            browser.back()
            wait_until(lambda: text_of(browser, row + " td.status") == "Pending", what="the Jobs table again")
            browser_tests.click(browser, row + " button.suspend")
            wait_until(lambda: text_of(browser, row + " td.status") == "Suspended", what="the suspension")
            assert not text_of(browser, "#banner")
            assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        server.stop()
        cluster.close()


def test_a_lineage_nodes_name_stays_inside_its_box(home, tmp_path):
    """Names were cut at 22 characters whatever their letters: a volume 'data-aaaa...' ran past its box's
    right edge, over the edge leaving it. A name is cut to the box's width now, with the ellipsis."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/storage")
            wait_until(lambda: browser.execute_script("return typeof lineageGraph === 'function'"), what="the page")
            names = ["data-" + "a" * 48, "w" * 53, "snap-one", "i" * 40]
            out = browser.execute_script("""
                const svg = lineageGraph({nodes: arguments[0].map((n, i) => ({id: 'volume:' + n, kind: 'volume',
                                          name: n, status: null, count: null})), edges: []});
                document.getElementById('main').replaceChildren(svg);
                return [...svg.querySelectorAll('g.node')].map(g => {
                  const t = g.querySelectorAll('text')[1], b = t.getBBox();
                  return [t.firstChild.textContent, t.querySelector('title').textContent,
                          b.x + b.width <= g.querySelector('rect').width.baseVal.value - 4];
                });""", names)
            assert [full for _, full, _ in out] == names  # the whole name is the tooltip
            assert all(inside for _, _, inside in out), out
            shown = {full: label for label, full, _ in out}
            assert shown["snap-one"] == "snap-one"  # a short name is whole
            for name in names[:2]:
                assert shown[name].endswith("\u2026") and name.startswith(shown[name][:-1]), shown[name]
    finally:
        server.stop()


def test_the_page_of_a_job_that_is_not_there_shows_the_refusal_alone(home, tmp_path):
    """#/job/nope (a typo) said 'no job named' above empty Logs, Training curves, Processes, Status events,
    Snapshots and Spec cards, as if the job had not started yet; the refusal is the page now."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/job/nope")
            wait_until(lambda: text_of(browser, "#job-gone"), what="the refusal")
            assert text_of(browser, "#job-gone").startswith("no job named 'nope'; see 'dtrain list jobs'")
            assert text_of(browser, "main").split("\n") == ["Job nope", "", text_of(browser, "#job-gone")]
            assert not browser.find_elements("css selector", "#logs, #rank, #curves")
    finally:
        server.stop()

"""Audit 12, the dashboard and the API: behind a proxy that passes its prefix as the root path (uvicorn
--root-path), a name holding %2F answered the old 404 and a refused name was called 'name'; one very long log
line scrolled the log pane sideways; a purged job's snapshot was linked to the later job of its name; and a job's
page did not fit a phone's width."""

from __future__ import annotations

import re

import httpx
import pytest

import dtrain
from dtrain.errors import SpecError
from dtrain.names import check_name
from dtrain.spec import JobSpec
from server_util import ThreadServer, wait_until

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
from dtrain.server.app import create_app  # noqa: E402


# ---- fast: the API behind a root path ---------------------------------------------------------------------------
@pytest.fixture
def rooted(home):
    """The API as uvicorn --root-path /dtrain serves it: the scope's path and raw_path hold the prefix in front."""
    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600), root_path="/dtrain")
    try:
        with httpx.Client(base_url=server.url, timeout=30) as http:
            yield http
    finally:
        server.stop()


def _rule(name: str, what: str) -> str:
    with pytest.raises(SpecError) as refused:
        check_name(name, what)
    return str(refused.value)


def test_an_encoded_slash_behind_a_root_path_is_an_invalid_name(rooted):
    """`/jobs/a%2Fb` under --root-path answered 404 "no such path /dtrain/api/v1/jobs/a/b" and `/jobs/a%2F` a 307,
    as before the un-prefixed path was fixed: the raw path held the prefix, so no API path matched it."""
    for path, name, what in (("/api/v1/jobs/a%2Fb", "a/b", "job"), ("/api/v1/jobs/a%2F", "a/", "job"),
                             ("/api/v1/snapshots/a%2Fb/wait", "a/b", "snapshot")):
        r = rooted.get(path, follow_redirects=False)
        assert (r.status_code, r.json()["error"]) == (422, _rule(name, what)), (path, r.text)
    assert rooted.get("/api/v1/jobs").json() == []  # the rest is routed as before


def test_a_refused_name_behind_a_root_path_names_its_kind(rooted):
    """'invalid name name' for a snapshot or a volume body: the kind was read from the path with the prefix in front."""
    assert rooted.get("/api/v1/snapshots/Bad_/wait").json()["error"] == _rule("Bad_", "snapshot")
    r = rooted.post("/api/v1/volumes", json={"name": "Bad_", "size": "1Gi"})
    assert r.json()["error"] == _rule("Bad_", "volume")
    r = rooted.post("/api/v1/projects", json={"name": "p", "gpu_quota": -1})
    assert r.json()["error"].startswith("invalid --gpu-quota -1"), r.text


def test_no_such_path_behind_a_root_path_names_the_api_under_it(rooted):
    error = rooted.get("/nothere").json()["error"]
    assert re.search(r"the API is under /dtrain/api/v1/ \(its paths: /dtrain/api/v1/openapi.json\)", error), error


# ---- in a browser ----------------------------------------------------------------------------------------------
browser_tests = pytest.importorskip("test_dashboard_browser")
text_of = browser_tests.text_of


in_browser = browser_tests.in_browser


def finished(home, name: str, *command: str, statuses=("Succeeded",)) -> dtrain.Client:
    client = dtrain.Client(home=home)
    client.submit(JobSpec(name=name, command=command))
    wait_until(lambda: client.get(name).status.value in statuses, what=f"job {name} to end")
    return client


@in_browser
def test_one_very_long_log_line_wraps_in_the_pane_and_copies_as_one_line(home):
    """A line of 6000 characters without a space (a progress bar, a base64 blob) made the pane scroll sideways:
    pre-wrap breaks at spaces only. It wraps now, in monospace, and a copy of the pane holds it whole."""
    line = "".join(f"{i:05d}" for i in range(1200))
    finished(home, "blob", "python3", "-c", f"print('first'); print('{line}'); print('last')")
    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    try:
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/job/blob")
            wait_until(lambda: "last" in text_of(browser, "#logs"), what="the log")
            wide, shown, font = browser.execute_script(
                "const l = document.getElementById('logs');"
                "return [l.scrollWidth, l.clientWidth, getComputedStyle(l).fontFamily];")
            assert wide <= shown and "monospace" in font, (wide, shown, font)
            copied = browser.execute_script(
                "const r = document.createRange(); r.selectNodeContents(document.getElementById('logs'));"
                "const s = getSelection(); s.removeAllRanges(); s.addRange(r); return s.toString();")
            assert copied.splitlines()[:3] == ["first", line, "last"], copied[:200]
    finally:
        server.stop()


@in_browser
def test_a_snapshot_of_a_purged_job_is_an_earlier_runs_not_the_new_jobs_of_its_name(home):
    """A job purged and submitted again under its name: the Snapshots table linked the old run's snapshot to the
    new job's page, and that page listed it as its own. Both say "(earlier run)" now, as `dtrain snapshot list`."""
    client = dtrain.Client(home=home)
    client.create_volume("data", size="1Gi")
    client.submit(JobSpec(name="trainer", command=("true",), volumes=("data:/mnt",), snapshot_on_success="data"))
    wait_until(lambda: client.get("trainer").status.value == "Succeeded", what="the first run")
    [old] = client.list_snapshots()
    client.delete("trainer", purge=True)
    finished(home, "trainer", "true")
    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    # the cells of the row in TABLE whose first cell names the old snapshot, and whether it holds a link
    row = ("const r = [...document.querySelectorAll(arguments[0] + ' tbody tr')]"
           ".find(r => r.cells[0].innerText.startsWith(arguments[1]));"
           "return r ? [[...r.cells].map(c => c.innerText), !!r.querySelector('a')] : null;")
    try:
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/storage")
            cells, linked = wait_until(lambda: browser.execute_script(row, "#snapshots-table", old.name),
                                       what="the snapshots table")
            assert (cells[2], linked) == ("trainer (earlier run)", False), cells
            browser.get(server.url + "/#/job/trainer")
            cells, _ = wait_until(lambda: browser.execute_script(row, "#job-snapshots", old.name),
                                  what="the job's snapshots")
            assert cells[0] == old.name + " (earlier run)", cells
    finally:
        server.stop()


HALFWAY = ("import json, os, time\n"
           "with open(os.environ['DTRAIN_METRICS_FILE'], 'a') as f:\n"
           "    for step in range(1, 21): f.write(json.dumps({'time': time.time(), 'step': step, 'loss': 2 / step}) + '\\n')\n"
           "raise SystemExit('RuntimeError: CUDA out of memory at step 20')\n")


@in_browser
def test_a_failed_jobs_page_fits_a_phones_width(home):
    """At 375px the job page scrolled sideways (a chart's 460px, a card's 420px basis) and the details' 260px label
    column left each value a few pixels: 'Failed' read one letter a line. Labels stand above values now."""
    finished(home, "halfway", "python3", "-c", HALFWAY, statuses=("Failed",))
    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    try:
        with browser_tests.chrome() as browser:
            browser.set_window_size(375, 800)
            browser.get(server.url + "/#/job/halfway")
            wait_until(lambda: browser.execute_script("return document.querySelector('svg.chart path.line')"),
                       what="the loss curve")
            wide, window, status = browser.execute_script(
                "const d = document.documentElement, s = document.getElementById('job-status');"
                "return [d.scrollWidth, d.clientWidth, s.getBoundingClientRect().width];")
            assert wide <= window and status >= 200, (wide, window, status)
    finally:
        server.stop()

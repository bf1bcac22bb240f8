"""Audit 11, the dashboard: links to a job from the Nodes page, the Snapshots table and the lineage lost the job's
project (a job of another project opened as "no job named"); no button took a snapshot; the page broke behind a
path prefix (kubectl proxy, an ingress at /dtrain/): its addresses were absolute; and a live log whose pod was not
made yet (a 404) stopped, or was retried out of sight."""

from __future__ import annotations

import re

import httpx
import pytest

import dtrain
from conftest import Dtrain
from dtrain.errors import NotFoundError
from server_util import ServerProcess, ThreadServer, wait_until

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
from dtrain.server.app import STATIC, create_app  # noqa: E402

TOKEN = "t" * 43
TRAIN = "echo results > /mnt/model.pt; echo trained"


def team_a_trained(dt: Dtrain, *, gpu: bool = False) -> None:
    """Job `trainer` of project team-a, run on volume `data` (a local volume: every project's), snapshotted on
    success; the configured project is `default`."""
    dt("project", "create", "team-a")
    dt("volume", "create", "data", "--size", "1Gi")
    dt("submit", "trainer", "-p", "team-a", "--pvc", "data:/mnt", "--snapshot-on-success", "data",
       *(["--gpu", "1"] if gpu else []), "--", "sh", "-c", TRAIN)
    dt.wait_for("trainer", {"Succeeded"})


# ---- fast: the HTTP answers the links are made of, the page's addresses ----------------------------------------
@pytest.mark.slow
def test_a_gpus_job_and_a_lineage_job_carry_their_project_and_a_job_its_volumes(home, tmp_path, monkeypatch):
    """The Nodes page and the lineage had only a job's name to link: a GPU's holder and a lineage job node now say
    its project; a job says the volumes it mounts (its page's Snapshot buttons), a new one by its made name."""
    monkeypatch.setenv("DTRAIN_GPUS", "1")
    dt = Dtrain(home, env={"DTRAIN_GPUS": "1"})
    team_a_trained(dt)
    dt("submit", "holder", "-p", "team-a", "--gpu", "1", "--pvc", "local:1Gi:/scratch", "--", "sleep", "60")
    dt.wait_for("holder", {"Running"})
    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    try:
        with httpx.Client(base_url=server.url + "/api/v1", timeout=60) as http:
            gpus = [g for n in http.get("/nodes").json() for g in n["gpus"]]
            assert [(g["job"], g["project"]) for g in gpus] == [("holder", "team-a")]
            graph = http.get("/lineage", params={"project": "default"}).json()
            assert {n["name"]: n["project"] for n in graph["nodes"] if n["kind"] == "job"} == {"trainer": "team-a"}
            assert {n["project"] for n in graph["nodes"] if n["kind"] != "job"} == {None}
            assert http.get("/jobs/holder").json()["volumes"] == ["pvc-holder-0"]
            assert http.get("/jobs/trainer").json()["volumes"] == ["data"]
            snap = http.get("/snapshots", params={"project": "default"}).json()[0]
            assert (snap["job"], snap["job_spec"]["project"]) == ("trainer", "team-a")  # the Snapshots row's link
    finally:
        server.stop()
        dt("delete", "holder")


def test_the_page_names_its_files_and_the_api_relative_to_its_own_address():
    """'/static/app.js' and '/api/v1/...' went to the host's root: behind a path prefix, not to this server."""
    page = (STATIC / "index.html").read_text()
    assert re.findall(r'(?:src|href)="([^"#]*)"', page) == ["static/style.css", "data:,", "static/charts.js",
                                                              "static/app.js"]
    script = (STATIC / "app.js").read_text()
    assert 'const API = "api/v1";' in script
    for name in ("app.js", "charts.js"):
        assert not re.findall(r"""["'`]/(?:api|static)/""", (STATIC / name).read_text()), name


def ingress(app, prefix: str = "/dtrain"):
    """An ingress at PREFIX/ that strips it before the app (nginx's rewrite-target, kubectl proxy): the app sees
    '/...', the browser 'PREFIX/...'; anything else is another site's (404)."""
    async def route(scope, receive, send):
        if scope["type"] == "lifespan":
            return await app(scope, receive, send)
        if not scope["path"].startswith(prefix + "/"):
            await send({"type": "http.response.start", "status": 404, "headers": [(b"content-type", b"text/plain")]})
            return await send({"type": "http.response.body", "body": b"not this server's"})
        raw = scope.get("raw_path") or scope["path"].encode()
        return await app({**scope, "path": scope["path"][len(prefix):], "raw_path": raw[len(prefix):]},
                         receive, send)
    return route


def test_the_token_exchange_stays_under_the_prefix(home):
    """`?token=` answered a 303 to '/': behind an ingress at /dtrain/, the host's root, not the dashboard."""
    server = ThreadServer(ingress(create_app(lambda: dtrain.Client(home=home), token=TOKEN, sample_every=3600)))
    try:
        with httpx.Client(base_url=server.url, timeout=30, follow_redirects=True) as http:
            r = http.get("/dtrain/", params={"token": TOKEN, "x": "1"})
            assert r.status_code == 200 and str(r.url) == server.url + "/dtrain/?x=1"
            assert '<script src="static/app.js">' in r.text
            assert http.get("/dtrain/api/v1/jobs").json() == []  # the cookie holds under the prefix
    finally:
        server.stop()


# ---- in a browser ----------------------------------------------------------------------------------------------
browser_tests = pytest.importorskip("test_dashboard_browser")
text_of, attrs_of, click = browser_tests.text_of, browser_tests.attrs_of, browser_tests.click
from selenium.common.exceptions import NoAlertPresentException  # noqa: E402


in_browser = browser_tests.in_browser


def prompted(browser):
    """The page's prompt, once shown: the snapshot button asks after reading the names taken."""
    def shown():
        try:
            return browser.switch_to.alert.text is not None and browser.switch_to.alert
        except NoAlertPresentException:
            return False
    return wait_until(shown, what="the prompt")


no_errors = browser_tests.no_errors


@in_browser
def test_every_link_to_a_job_carries_its_project(home, tmp_path):
    """A GPU's job (Nodes), a snapshot's job and a lineage job node linked with no project or the page's filter:
    team-a's job from #/storage?project=default opened "no job named 'trainer' in project 'default'"."""
    server = ServerProcess(home, env={"DTRAIN_GPUS": "1"}, cwd=tmp_path)
    dt = server.dtrain()
    try:
        team_a_trained(dt)
        dt("submit", "holder", "-p", "team-a", "--gpu", "1", "--", "sleep", "120")
        dt.wait_for("holder", {"Running"})
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/nodes")
            wait_until(lambda: attrs_of(browser, ".gpus-table td.job a", "href"), what="the GPU's job")
            assert attrs_of(browser, ".gpus-table td.job a", "href") == ["#/job/holder?project=team-a"]
            browser.get(server.url + "/#/storage?project=default")
            wait_until(lambda: attrs_of(browser, "#snapshots-table a", "href"), what="the snapshots table")
            assert attrs_of(browser, "#snapshots-table a", "href") == ["#/job/trainer?project=team-a"]
            node = "#lineage-graph a.node-link"
            wait_until(lambda: attrs_of(browser, node, "href"), what="the lineage")
            assert attrs_of(browser, node, "href") == ["#/job/trainer?project=team-a"]
            click(browser, "#snapshots-table a")
            wait_until(lambda: text_of(browser, "#job-status") == "Succeeded", what="the job's page")
            assert not browser.execute_script("return document.getElementById('job-gone')")
            no_errors(browser)
    finally:
        server.stop()
        dt("delete", "holder", check=False)


@in_browser
def test_a_volume_row_and_a_finished_jobs_page_take_a_snapshot(home, tmp_path):
    """The API took snapshots (POST /snapshots) but no page did. A volume's row and a finished job's page (one
    button per volume it mounted, the snapshot linked to the job) ask for a name, offering a valid one, and say the
    snapshot taken, or the refusal; a read-only server shows no such button."""
    server = ServerProcess(home, cwd=tmp_path)
    dt = server.dtrain()
    try:
        team_a_trained(dt)
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/storage")
            row = "#volumes-table tr[data-volume='data']"
            wait_until(lambda: text_of(browser, row + " button.snapshot") == "Snapshot", what="the volume's button")
            # the default name offered is taken as it is
            browser.execute_script("document.querySelector(arguments[0]).click()", row + " button.snapshot")
            prompted(browser).accept()
            said = wait_until(lambda: text_of(browser, "#snapshot-message").startswith("Snapshot ")
                              and text_of(browser, "#snapshot-message"), what="the snapshot said")
            made = re.fullmatch(r"Snapshot (data-\d{8}-\d{6}) of volume data taken: (\d+) files, .+\.", said)
            assert made, said
            wait_until(lambda: made[1] in text_of(browser, "#snapshots-table"), what="the new snapshot listed")
            stored = dt.json("snapshot", "describe", made[1])
            assert (stored["volume"], stored["files"]) == ("data", int(made[2]))
            # a name that is taken: the server's refusal stays on screen, nothing is made
            browser.execute_script("document.querySelector(arguments[0]).click()", row + " button.snapshot")
            alert = prompted(browser)
            alert.send_keys(made[1])
            alert.accept()
            wait_until(lambda: "already exists" in text_of(browser, "#banner"), what="the refusal")
            assert not text_of(browser, "#snapshot-message")
            assert len(dt.json("snapshot", "list")) == 2

            browser.get(server.url + "/#/job/trainer?project=team-a")
            button = "#job-head button.snapshot[data-volume='data']"
            wait_until(lambda: text_of(browser, button) == "Snapshot data", what="the finished job's button")
            browser.execute_script("document.querySelector(arguments[0]).click()", button)
            alert = prompted(browser)
            alert.send_keys("after-the-fact")
            alert.accept()
            wait_until(lambda: text_of(browser, "#snapshot-message").startswith("Snapshot after-the-fact of volume "
                                                                               "data taken"), what="it said")
            wait_until(lambda: "after-the-fact" in text_of(browser, "#job-snapshots"), what="the job's snapshots")
            assert dt.json("snapshot", "describe", "after-the-fact")["job"] == "trainer"
            assert not text_of(browser, "#banner")
            no_errors(browser, but="409")  # the name taken
    finally:
        server.stop()
    read_only = ServerProcess(home, args=("--read-only",), cwd=tmp_path)
    try:
        with browser_tests.chrome() as browser:
            browser.get(read_only.url + "/#/storage")
            wait_until(lambda: text_of(browser, "#volumes-table"), what="the volumes")
            assert not browser.execute_script("return document.querySelectorAll('button.snapshot').length")
            browser.get(read_only.url + "/#/job/trainer")
            wait_until(lambda: text_of(browser, "#job-status") == "Succeeded", what="the job's page")
            assert not browser.execute_script("return document.querySelectorAll('button.snapshot').length")
    finally:
        read_only.stop()


@in_browser
def test_the_dashboard_works_under_a_path_prefix(home, tmp_path):
    """Behind an ingress at /dtrain/ (the prefix stripped), the page loaded '/static/app.js' and asked
    '/api/v1/...' of the host's root: a blank page. Its addresses are its own now, the token's redirect too."""
    dt = Dtrain(home)
    dt("submit", "prefixed", "--", "sh", "-c", "echo a line through the prefix; sleep 120")
    dt.wait_for("prefixed", {"Running"})
    server = ThreadServer(ingress(create_app(lambda: dtrain.Client(home=home), token=TOKEN, sample_every=3600)))
    try:
        with browser_tests.chrome() as browser:
            browser.get(f"{server.url}/dtrain/?token={TOKEN}#/jobs")
            wait_until(lambda: text_of(browser, "tr[data-job='prefixed'] td.status") == "Running", what="the jobs")
            assert browser.current_url == f"{server.url}/dtrain/#/jobs"
            click(browser, "tr[data-job='prefixed'] a")
            wait_until(lambda: "a line through the prefix" in text_of(browser, "#logs"), what="the live log")
            browser.get(f"{server.url}/dtrain/#/storage")
            wait_until(lambda: text_of(browser, "#updated").startswith("updated"), what="the storage page")
            assert not text_of(browser, "#banner")
            no_errors(browser)
    finally:
        server.stop()
        dt("delete", "prefixed")


class PodLater(dtrain.Client):
    """A cluster whose pods come late: a job's log is not found (as a pod not made yet) until the file
    `pods/NAME` exists; `eager`: refused before the stream begins (a 404 answer), else in it (`event: error`)."""

    pods = None
    eager = True

    def logs(self, name, **query):
        if (self.pods / name).exists():
            return super().logs(name, **query)
        missing = NotFoundError(f"pod {name}-worker-0 not found in namespace team-b")
        if self.eager:
            raise missing

        def refused():
            raise missing
            yield  # a generator: the refusal comes with the first line asked for

        return refused()


@in_browser
@pytest.mark.parametrize("eager", [True, False], ids=["404", "event-error"])
def test_a_live_log_waits_for_its_pod_until_the_job_ends(home, tmp_path, eager):
    """A log stream refused as not found (its pod not made yet) ended the pane's lines for good, or was retried
    unseen. It says it waits for the pod and tries again until the pod's lines come; once the job has ended, a
    refusal is said and no longer retried."""
    pods = tmp_path / "pods"
    pods.mkdir()
    made = type("Late", (PodLater,), {"pods": pods, "eager": eager})
    dt = Dtrain(home)
    stop = tmp_path / "stop"
    for name in ("late", "never"):
        dt("submit", name, "--", "sh", "-c", f"echo {name} started; while [ ! -e {stop} ]; do sleep 0.1; done")
    server = ThreadServer(create_app(lambda: made(home=home), sample_every=3600))
    try:
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/job/late")
            wait_until(lambda: "waiting for the pod: pod late-worker-0 not found" in text_of(browser, "#logs-waiting"),
                       what="the waiting line")
            (pods / "late").touch()
            wait_until(lambda: "late started" in text_of(browser, "#logs"), what="the pod's lines")
            assert not text_of(browser, "#logs-waiting") and not text_of(browser, "#logs-error")

            browser.get(server.url + "/#/job/never")
            wait_until(lambda: text_of(browser, "#logs-waiting"), what="the waiting line")
            stop.touch()
            wait_until(lambda: text_of(browser, "#job-status") == "Succeeded", what="the job's end")
            said = wait_until(lambda: text_of(browser, "#logs-error"), what="the stream given up")
            assert said.startswith("-- the job has ended; its log could not be read (pod never-worker-0 not found")
            assert not text_of(browser, "#logs-waiting")
            no_errors(browser, but="404")
    finally:
        server.stop()

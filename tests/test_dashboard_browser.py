"""The dashboard in a real browser: Debian's chromium, headless, driven by selenium through the
system chromedriver, against a real `dtrain server` running real jobs on two injected GPUs.

Screenshots of the pages land in the test's folder, and also in $DTRAIN_SCREENSHOTS when set
(docs/img/ was made that way: DTRAIN_SCREENSHOTS=docs/img pytest tests/test_dashboard_browser.py).
"""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from server_util import ServerProcess, wait_until

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
CHROMEDRIVER = shutil.which("chromedriver")
pytestmark = [pytest.mark.slow,  # a browser and three jobs: about 15-25 s
              pytest.mark.skipif(not (CHROMIUM and CHROMEDRIVER),
                                 reason="chromium and chromedriver are not installed (scripts/setup.sh installs them)")]
webdriver = pytest.importorskip("selenium.webdriver", reason="the 'dev' extra (selenium) is not installed")
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402
from dtrain.cli.format import size  # noqa: E402


def in_browser(test):
    """Marked as these tests are (slow, and skipped without chromium), for a browser test of another file."""
    for mark in pytestmark:
        test = mark(test)
    return test


def no_errors(browser, but: str | None = None) -> None:
    """No error in the page's console; `but`: one whose words hold it is expected (a 404 the page asked for)."""
    assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE" and not (but and but in e["message"])]

# A training-like job: logs a line, writes curves where the platform asks, waits for the test,
# then writes the line the browser must see arrive live, and saves a "model" on its volume.
JOB = ("import json, os, time\n"
       "print('epoch 1: starting', flush=True)\n"
       "with open(os.environ['DTRAIN_METRICS_FILE'], 'a') as f:\n"
       "    for step in range(1, 41):\n"
       "        rec = {'time': time.time(), 'step': step, 'loss': 2.0 / step ** 0.5, 'images_per_s': 30 + step % 7}\n"
       "        f.write(json.dumps(rec) + '\\n')\n"
       "while not os.path.exists(os.environ['GO']): time.sleep(0.1)\n"
       "print('live line written after the page opened', flush=True)\n"
       "open('/mnt/model.pt', 'w').write('weights')\n"
       "time.sleep(1)\n")


@contextlib.contextmanager
def chrome():
    """Headless chromium through the system chromedriver, quit at the end."""
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu",
                "--window-size=1360,1000", "--disable-extensions", "--no-first-run"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=webdriver.ChromeService(executable_path=CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()


@pytest.fixture
def browser():
    with chrome() as driver:
        yield driver


def shot(driver, tmp_path: Path, name: str) -> None:
    driver.set_window_size(1360, 700)  # measure the page, not the window left by the last shot
    height = driver.execute_script("return document.documentElement.scrollHeight")
    driver.set_window_size(1360, min(max(700, height + 140), 2400))  # + the window's own bars
    driver.execute_script("window.scrollTo(0, 0)")
    driver.save_screenshot(str(tmp_path / name))
    if os.environ.get("DTRAIN_SCREENSHOTS"):
        shutil.copy(tmp_path / name, Path(os.environ["DTRAIN_SCREENSHOTS"]) / name)


def text_of(driver, css: str) -> str:
    """The rendered text of the first match, read in one script: the dashboard re-renders on every
    poll, so an element found in one call may be gone (stale) by the next."""
    return driver.execute_script("const e = document.querySelector(arguments[0]); return e ? e.innerText : '';",
                                 css).strip()


def attrs_of(driver, css: str, attr: str, inner: str | None = None) -> list:
    """[attribute, inner element's text] of every match (or just the attributes), in one script."""
    return driver.execute_script(
        "return [...document.querySelectorAll(arguments[0])].map(e => arguments[2] === null ? e.getAttribute(arguments[1])"
        " : [e.getAttribute(arguments[1]), (e.querySelector(arguments[2]) || {innerText: ''}).innerText.trim()]);",
        css, attr, inner)


def click(driver, css: str) -> None:
    """Click the first match, found and clicked in one script (a re-rendered table or header may
    replace the element between a lookup and a separate click). The click runs after the script
    returns, so a confirm() it opens does not swallow the answer."""
    assert driver.execute_script(
        "const e = document.querySelector(arguments[0]); if (e) setTimeout(() => e.click(), 0); return !!e;", css)


def test_dashboard_shows_a_job_its_live_logs_and_the_gpus(browser, home, tmp_path):
    server = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    wait = WebDriverWait(browser, 90, poll_frequency=0.2)
    try:
        http = server.http
        assert http.post("/api/v1/projects", json={"name": "lane-detection"}).status_code == 201
        assert http.post("/api/v1/volumes", json={"name": "lanes-data", "size": "1Gi"}).status_code == 201
        assert http.post("/api/v1/snapshots", json={"volume": "lanes-data", "name": "data-v1"}).status_code == 201
        browser.get(server.url + "/#/jobs")
        wait.until(lambda d: "No jobs yet" in text_of(d, "main"))

        r = http.post("/api/v1/jobs", json={
            "name": "train-lanes", "command": ["python", "-c", JOB], "gpu": 1, "project": "lane-detection",
            "env": {"GO": str(tmp_path / "GO")}, "volumes": ["lanes-data:/mnt"], "snapshot_on_success": "lanes-data"})
        assert r.status_code == 201, r.text
        r = http.post("/api/v1/jobs", json={"name": "broken-config",
                                            "command": ["sh", "-c", "echo bad flag >&2; exit 3"]})
        assert r.status_code == 201, r.text
        row = "tr[data-job='train-lanes']"
        wait.until(lambda d: text_of(d, row + " td.status") == "Running")  # the table refreshes by itself
        assert "lane-detection" in text_of(browser, row) and text_of(browser, row + " td.gpus") == "1 (1)"

        browser.get(server.url + "/#/nodes")
        wait.until(lambda d: "train-lanes" in text_of(d, ".gpus-table"))
        gpus = dict(attrs_of(browser, ".gpus-table tbody tr", "data-gpu", "td.job"))
        assert sorted(gpus.values()) == ["free", "train-lanes"] and set(gpus) == {"0", "1"}
        assert text_of(browser, ".gpu-alloc") == "1 / 2"
        shot(browser, tmp_path, "dashboard-nodes.png")

        browser.get(server.url + "/#/jobs")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, row + " a"))
        click(browser, row + " a")
        wait.until(lambda d: "epoch 1: starting" in text_of(d, "#logs"))
        assert "live line" not in text_of(browser, "#logs")
        (tmp_path / "GO").touch()  # the job writes its next line only now, with the page open
        wait.until(lambda d: "live line written after the page opened" in text_of(d, "#logs"))
        wait.until(lambda d: text_of(d, "#job-status") == "Succeeded")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "[data-curve='loss'] path.line"))
        wait.until(lambda d: "lanes-data-" in text_of(d, "#job-snapshots"))  # the snapshot it made
        shot(browser, tmp_path, "dashboard-job.png")

        browser.get(server.url + "/#/jobs")
        wait.until(lambda d: text_of(d, row + " td.status") == "Succeeded")
        wait.until(lambda d: text_of(d, "tr[data-job='broken-config'] td.status") == "Failed")
        shot(browser, tmp_path, "dashboard-jobs.png")

        browser.get(server.url + "/#/storage")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#lineage-graph g[data-id='job:train-lanes']"))
        ids = set(attrs_of(browser, "#lineage-graph g.node", "data-id"))
        assert {"volume:lanes-data", "snapshot:data-v1", "job:train-lanes"} <= ids
        shot(browser, tmp_path, "dashboard-storage.png")
        # a deleted snapshot stays in the graph (the job started from it), drawn as a deleted volume is
        assert http.delete("/api/v1/snapshots/data-v1").status_code == 200
        gone = "#lineage-graph g.n-gone[data-id='snapshot:data-v1']"
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, gone))
        kind = browser.execute_script("return document.querySelector(arguments[0] + ' text').textContent", gone)
        assert kind == "snapshot \u00b7 gone"  # SVG text: no innerText
        # a job's node opens the job's page
        assert attrs_of(browser, "#lineage-graph a.node-link", "href") == ["#/job/train-lanes?project=lane-detection"]
        browser.execute_script("document.querySelector(\"#lineage-graph g[data-id='job:train-lanes']\")"
                               ".dispatchEvent(new MouseEvent('click', {bubbles: true}))")
        wait.until(lambda d: d.current_url.endswith("#/job/train-lanes?project=lane-detection")
                   and text_of(d, "#job-name") == "train-lanes")
        # the submit form and the delete button: the same API underneath
        browser.get(server.url + "/#/submit")
        wait.until(lambda d: d.find_elements(By.ID, "submit-form"))
        browser.find_element(By.ID, "name").send_keys("from-form")
        browser.find_element(By.ID, "command").send_keys("sh -c 'echo from the form; sleep 60'")
        browser.find_element(By.ID, "env").send_keys("GREETING=a=b\nBATCH_SIZE")  # a line without '='
        browser.find_element(By.CSS_SELECTOR, "#submit-form button[type=submit]").click()
        wait.until(lambda d: 'invalid environment line "BATCH_SIZE"' in text_of(d, "#submit-message"))
        assert http.get("/api/v1/jobs/from-form").status_code == 404  # nothing sent, nothing stored
        browser.find_element(By.ID, "env").clear()
        browser.find_element(By.ID, "env").send_keys("GREETING=a=b\nBATCH_SIZE=33")
        browser.find_element(By.ID, "project").send_keys("lane-detetion")  # a typo: refused, in one line
        browser.find_element(By.CSS_SELECTOR, "#submit-form button[type=submit]").click()
        wait.until(lambda d: "no project named 'lane-detetion'" in text_of(d, "#submit-message"))
        assert browser.current_url.endswith("#/submit") and http.get("/api/v1/jobs/from-form").status_code == 404
        refused = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]  # reading the log empties it
        assert all("/api/v1/jobs" in e["message"] and "404" in e["message"] for e in refused), refused
        browser.find_element(By.ID, "project").clear()
        browser.find_element(By.ID, "project").send_keys("lane-detection")
        browser.find_element(By.CSS_SELECTOR, "#submit-form button[type=submit]").click()
        wait.until(lambda d: text_of(d, "#job-status") == "Running")
        assert browser.current_url.endswith("#/job/from-form?project=lane-detection")
        wait.until(lambda d: "from the form" in text_of(d, "#logs"))
        # the stream's `event: error` (tests/test_server_logs.py makes the server send it: a stuck pod)
        # ends it with its line, instead of a reconnect every 3 s that repeats the last 500 lines
        browser.execute_script("stream.dispatchEvent(new MessageEvent('error', {data: JSON.stringify("
                               "{error: 'pod x-worker-0 cannot start (ImagePullBackOff)', kind: 'PodStuck'})}))")
        assert text_of(browser, "#logs-error") == "-- pod x-worker-0 cannot start (ImagePullBackOff) --"
        assert browser.execute_script("return stream.readyState") == 2  # EventSource.CLOSED
        spec = http.get("/api/v1/jobs/from-form").json()["spec"]
        assert spec["command"] == ["sh", "-c", "echo from the form; sleep 60"] and spec["project"] == "lane-detection"
        assert spec["env"] == {"GREETING": "a=b", "BATCH_SIZE": "33"}
        click(browser, "#job-head button.suspend")  # Run:AI's suspend and resume, from the job's page
        wait.until(lambda d: text_of(d, "#job-status") == "Suspended")
        assert not browser.find_elements(By.CSS_SELECTOR, "#job-head button.suspend")
        click(browser, "#job-head button.resume")
        wait.until(lambda d: text_of(d, "#job-status") == "Running")
        # followed again (the pane, which ended with the error above, anew): the resumed run's lines, a
        # new launch, as `dtrain logs` and kubectl show them
        wait.until(lambda d: not d.find_elements(By.ID, "logs-error") and "from the form" in text_of(d, "#logs"))
        assert text_of(browser, "#logs").count("from the form") == 1
        click(browser, "#job-head button.danger")
        wait.until(lambda d: d.switch_to.alert).accept()
        wait.until(lambda d: text_of(d, "#job-status") == "Deleted")
        assert http.get("/api/v1/jobs/from-form").json()["status"] == "Deleted"
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        server.stop()


def test_the_jobs_table_shows_fifty_jobs_a_page(browser, home, tmp_path):
    """55 jobs: the first page holds the newest 50, Next the other 5; the page stays in the hash."""
    server = ServerProcess(home, cwd=tmp_path)
    wait = WebDriverWait(browser, 90, poll_frequency=0.2)
    try:
        http = server.http
        names = [f"job-{i:02d}" for i in range(55)]
        for name in names:  # real jobs that end at once: cheap to run 55 of
            assert http.post("/api/v1/jobs", json={"name": name, "command": ["true"]}).status_code == 201
        newest_first = names[::-1]
        browser.get(server.url + "/#/jobs")
        wait.until(lambda d: text_of(d, "#jobs-range") == "1-50 of 55")
        assert attrs_of(browser, "#jobs-table tbody tr", "data-job") == newest_first[:50]
        assert buttons_disabled(browser) == [True, False]
        created = http.get("/api/v1/jobs/job-54").json()["created"]
        utc = datetime.fromtimestamp(created, timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        [title] = attrs_of(browser, "tr[data-job='job-54'] td.age", "title")
        assert title.startswith(f"created {utc} (") and title.endswith(")"), title  # UTC, then local with its zone
        assert "updated " in text_of(browser, "#updated")

        click(browser, "#jobs-next")
        wait.until(lambda d: text_of(d, "#jobs-range") == "51-55 of 55")
        assert attrs_of(browser, "#jobs-table tbody tr", "data-job") == newest_first[50:]
        assert browser.current_url.endswith("#/jobs?page=2")
        browser.refresh()  # the page is in the hash: a reload shows the same one
        wait.until(lambda d: text_of(d, "#jobs-range") == "51-55 of 55")
        assert buttons_disabled(browser) == [False, True]
        click(browser, "#jobs-prev")
        wait.until(lambda d: text_of(d, "#jobs-range") == "1-50 of 55")
        assert browser.current_url.endswith("#/jobs")

        # a filter starts again at page 1, and pages what it matched
        wait_until(lambda: http.get("/api/v1/jobs", params={"status": "Succeeded", "limit": 1})
                   .headers["x-total-count"] == "55", timeout=120, what="55 jobs Succeeded")
        browser.get(server.url + "/#/jobs?page=2")
        wait.until(lambda d: text_of(d, "#jobs-range") == "51-55 of 55")
        browser.execute_script("const s = document.getElementById('status-filter'); s.value = 'Succeeded';"
                               "s.dispatchEvent(new Event('change'))")
        wait.until(lambda d: text_of(d, "#jobs-range") == "1-50 of 55")
        assert browser.current_url.endswith("#/jobs?status=Succeeded")
        browser.get(server.url + "/#/jobs?page=9")  # past the end (jobs deleted since): says so, Prev leads back
        wait.until(lambda d: text_of(d, "#jobs-range") == "none on page 9 (55 in all)")
        assert "No jobs on this page" in text_of(browser, "main") and buttons_disabled(browser) == [False, True]
        assert not [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
    finally:
        server.stop()


def buttons_disabled(driver) -> list[bool]:
    """[Prev, Next] of the jobs table: disabled or not."""
    return driver.execute_script("return ['jobs-prev', 'jobs-next'].map(id => document.getElementById(id).disabled)")


# The lineage of the storage page's screenshot, whose snapshot edge skips a column (volume data ->
# snapshot s1, past the jobs' column) while another volume and job sit below its source.
LINEAGE = {"nodes": [{"id": f"{k}:{n}", "kind": k, "name": n, "status": None, "count": None}
                     for k, n in (("volume", "data"), ("volume", "scratch"), ("job", "train"), ("job", "other"),
                                  ("snapshot", "s1"), ("volume", "restored"))],
           "edges": [{"source": s, "target": t, "label": label} for s, t, label in (
               ("volume:data", "job:train", "mounted"), ("volume:scratch", "job:other", "mounted"),
               ("job:train", "snapshot:s1", "results"), ("volume:data", "snapshot:s1", "snapshot"),
               ("snapshot:s1", "volume:restored", "restored"))]}
# Two edges that cross in one gap (train -> s2 below, data -> s1 above): their midpoints are the
# crossing, where both labels were drawn, over each other ("snaresults").
CROSSED = {"nodes": [{"id": f"{k}:{n}", "kind": k, "name": n, "status": None, "count": None}
                     for k, n in (("job", "train"), ("volume", "data"), ("snapshot", "s1"), ("snapshot", "s2"))],
           "edges": [{"source": s, "target": t, "label": label} for s, t, label in (
               ("job:train", "snapshot:s2", "results"), ("volume:data", "snapshot:s1", "snapshot"))]}


def test_the_lineage_graph_draws_no_edge_or_label_under_a_node_or_another_label(browser, home, tmp_path):
    """An edge that skips a column ran from its source's bottom under the nodes below it and the ones
    it skipped: hidden behind them, it seemed to come out of another node (job 'other' -> s1), and its
    label was covered. Every edge and label now keeps off every node's box, and off every other label
    (two crossing edges drew theirs at the crossing, one over the other)."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        browser.get(server.url + "/#/storage")
        WebDriverWait(browser, 60, poll_frequency=0.2).until(lambda d: d.execute_script(
            "return typeof lineageGraph === 'function'"))
        draw_and_check = """
            const svg = lineageGraph(arguments[0]);
            document.getElementById('main').replaceChildren(svg);  // laid out, so that lengths and boxes are known
            const boxes = [...svg.querySelectorAll('g.node')].map(g => {
              const m = g.transform.baseVal.consolidate().matrix, r = g.querySelector('rect');
              return {id: g.dataset.id, x: m.e, y: m.f, w: r.width.baseVal.value, h: r.height.baseVal.value};
            });
            const inside = (x, y, b) => x > b.x + 1 && x < b.x + b.w - 1 && y > b.y + 1 && y < b.y + b.h - 1;
            const found = [];
            svg.querySelectorAll('path.edge').forEach((path, i) => {
              const length = path.getTotalLength();
              for (let s = 0; s <= length; s += 2) {
                const p = path.getPointAtLength(s), hit = boxes.find(b => inside(p.x, p.y, b));
                if (hit) { found.push(`edge ${i} crosses ${hit.id} at ${p.x.toFixed(0)},${p.y.toFixed(0)}`); break; }
              }
            });
            svg.querySelectorAll('text.elabel').forEach(t => {
              const r = t.getBBox(), hit = boxes.find(b => r.x < b.x + b.w && r.x + r.width > b.x
                                                           && r.y < b.y + b.h && r.y + r.height > b.y);
              if (hit) found.push(`label ${t.textContent} under ${hit.id}`);
            });
            const labels = [...svg.querySelectorAll('text.elabel')].map(t => [t.textContent, t.getBBox()]);
            labels.forEach(([a, r], i) => labels.slice(i + 1).forEach(([b, q]) => {
              if (r.x < q.x + q.width && q.x < r.x + r.width && r.y < q.y + q.height && q.y < r.y + r.height)
                found.push(`labels ${a} and ${b} overlap`);
            }));
            const height = svg.height.baseVal.value;
            svg.querySelectorAll('path.edge').forEach((path, i) => {
              const r = path.getBBox();
              if (r.y + r.height > height) found.push(`edge ${i} runs below the drawing (${height}px high)`);
            });
            return found;"""
        assert browser.execute_script(draw_and_check, LINEAGE) == []
        assert browser.execute_script(draw_and_check, CROSSED) == []
    finally:
        server.stop()


COMMAND_LINES = ["python train.py --epochs 2", "python train.py --name=\"my run\" --tag='a b'",
                 "sh -c 'echo \"hi there\"; exit 3'", "echo it\\'s a\\ b", "echo \"a \\\"q\\\" \\\\ \\$HOME \\x\"",
                 "printf '' x''y \"\"", "  python   -c \"print('a  b')\"  "]


def test_the_submit_form_splits_a_command_as_a_shell_does(browser, home, tmp_path):
    """The form's command line becomes the words a POSIX shell makes of it (shlex is the reference):
    quotes inside a word (--name="my run") kept the quotes and split the word in two. A quote left
    open is refused in the page, naming it, and nothing is sent."""
    server = ServerProcess(home, cwd=tmp_path)
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    try:
        browser.get(server.url + "/#/submit")
        wait.until(lambda d: d.find_elements(By.ID, "submit-form"))
        for line in COMMAND_LINES:
            assert browser.execute_script("return splitCommand(arguments[0])", line) == shlex.split(line), line
        browser.find_element(By.ID, "name").send_keys("from-form")
        browser.find_element(By.ID, "command").send_keys("python -c 'print(1)")
        browser.find_element(By.CSS_SELECTOR, "#submit-form button[type=submit]").click()
        wait.until(lambda d: "invalid command: the ' at character 11 is not closed" in text_of(d, "#submit-message"))
        assert server.http.get("/api/v1/jobs/from-form").status_code == 404  # nothing sent, nothing stored
    finally:
        server.stop()


def test_chart_axes_show_whole_numbers_without_decimals(browser, home, tmp_path):
    """A curve's first step and the nodes page's "held" chart (0 or 1) were labelled "1.00"."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        browser.get(server.url + "/#/nodes")
        WebDriverWait(browser, 60, poll_frequency=0.2).until(lambda d: d.execute_script(
            "return typeof fmtNum === 'function'"))
        shown = browser.execute_script("return arguments[0].map(fmtNum)", [1, 7, -3, 0, 49, 2.5, 0.0204, 1234])
        assert shown == ["1", "7", "-3", "0", "49", "2.50", "0.0204", "1.2k"]
        labels = browser.execute_script(
            "return [...lineChart([{name: 'loss', points: [[1, 1], [49, 0.02]]}], {}).querySelectorAll('text')]"
            ".map(t => t.textContent)")
        assert labels == ["1", "0.0200", "1", "49"]  # y top, y bottom, x start, x end
    finally:
        server.stop()


def test_a_suspended_jobs_page_says_its_lines_go_on_once_resumed_and_they_do(browser, home, tmp_path):
    """The log pane told a user to resume the job and then reload the page, which is to follow the
    resumed job's lines by itself (docs/dashboard.md). It did only when a poll (every 4 s) had seen
    the job Suspended: one suspended and resumed between two polls, as here, was not followed again.
    The stream's own end (Suspended) counts now, and the pane says the lines go on."""
    server = ServerProcess(home, cwd=tmp_path)
    wait = WebDriverWait(browser, 90, poll_frequency=0.2)
    try:
        http = server.http
        r = http.post("/api/v1/jobs", json={"name": "pausable", "command": ["sh", "-c", "echo run started; sleep 60"],
                                            "working_dir": str(tmp_path)})
        assert r.status_code == 201, r.text
        browser.get(server.url + "/#/job/pausable")
        wait.until(lambda d: "run started" in text_of(d, "#logs"))
        assert http.post("/api/v1/jobs/pausable/suspend").status_code == 200
        wait.until(lambda d: text_of(d, "#logs-end"))
        assert text_of(browser, "#logs-end") == "-- the job was suspended: its lines go on here once it is resumed --"
        assert http.post("/api/v1/jobs/pausable/resume").status_code == 200
        # no reload: the resumed run's lines (a new launch, as `dtrain logs` shows them) replace the pane's
        wait.until(lambda d: not d.find_elements(By.ID, "logs-end") and "run started" in text_of(d, "#logs"))
        assert text_of(browser, "#logs").count("run started") == 1
    finally:
        server.stop()


def test_a_job_address_that_is_not_url_encoded_shows_the_servers_refusal(browser, home, tmp_path):
    """#/job/50% (a '%' that starts no escape) threw in the page's routing: a blank page, no message."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        browser.get(server.url + "/#/job/50%")
        WebDriverWait(browser, 60, poll_frequency=0.2).until(lambda d: text_of(d, "#job-gone"))
        assert text_of(browser, "#job-name") == "50%"
        assert text_of(browser, "#job-gone").startswith("invalid job name '50%': use 1-53 lower-case letters")
        assert not [e for e in browser.get_log("browser") if "URIError" in e["message"]]
    finally:
        server.stop()


def test_the_volumes_table_shows_the_space_used_and_status_as_volume_list_does(browser, home, tmp_path):
    """`dtrain volume list` shows each volume's space used and status; the page showed neither."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        made = server.http.post("/api/v1/volumes", json={"name": "lanes-data", "size": "1Gi"}).json()
        (Path(made["extra"]["path"]) / "images.bin").write_bytes(b"x" * 100_000)
        [volume] = server.http.get("/api/v1/volumes").json()
        assert volume["used_bytes"] >= 100_000
        browser.get(server.url + "/#/storage")
        row = "#volumes-table tr[data-volume='lanes-data']"
        WebDriverWait(browser, 60, poll_frequency=0.2).until(lambda d: text_of(d, row))
        headers = browser.execute_script("return [...document.querySelectorAll('#volumes-table th')].map(e => e.textContent)")
        cells = dict(zip(headers, browser.execute_script(
            "return [...document.querySelectorAll(arguments[0] + ' td')].map(e => e.textContent)", row)))
        assert cells["Used"] == size(volume["used_bytes"]) and cells["Status"] == "Bound", cells  # as the CLI has it
    finally:
        server.stop()


def test_a_jobs_lines_of_every_rank_are_marked_with_their_rank_however_slow_the_job_answers(browser, home, tmp_path):
    """The log stream opened with the page, before the job's answer told how many ranks it has: the
    lines that came first lacked their "[rank N]". Here the job's answer is held back 1.5 s."""
    server = ServerProcess(home, cwd=tmp_path)
    wait = WebDriverWait(browser, 90, poll_frequency=0.2)
    try:
        r = server.http.post("/api/v1/jobs", json={"name": "two-ranks", "processes": 2, "launcher": "torchrun",
                                                   "command": ["sh", "-c", "echo hello from $RANK"],
                                                   "working_dir": str(tmp_path)})
        assert r.status_code == 201, r.text
        wait_until(lambda: server.http.get("/api/v1/jobs/two-ranks").json()["status"] == "Succeeded", timeout=60,
                   what="two-ranks to succeed")
        browser.get(server.url + "/#/jobs")
        wait.until(lambda d: text_of(d, "#jobs-table"))
        browser.execute_script("""
            const fetched = window.fetch;
            window.fetch = (url, opts) => String(url).endsWith('/jobs/two-ranks')
              ? new Promise(ok => setTimeout(ok, 1500)).then(() => fetched(url, opts)) : fetched(url, opts);
            location.hash = '#/job/two-ranks';""")
        wait.until(lambda d: "-- the job has stopped --" in text_of(d, "#logs"))
        lines = text_of(browser, "#logs").splitlines()[:-1]
        assert sorted(lines) == ["[rank 0] hello from 0", "[rank 1] hello from 1"], lines
    finally:
        server.stop()


def test_the_jobs_table_keeps_its_buttons_in_the_window_beside_a_long_name(browser, home, tmp_path):
    """A job name of the 53 characters allowed pushed the table past a 1360 px window: the page
    scrolled sideways and a running job's Delete button lay outside the window."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        for name, command in ((("a-very-long-job-name-that-fills-all-fifty-three-chars", ["true"]),
                               ("runs", ["sleep", "60"]))):
            r = server.http.post("/api/v1/jobs", json={"name": name, "command": command, "working_dir": str(tmp_path)})
            assert r.status_code == 201, r.text
        browser.set_window_size(1360, 1000)
        browser.get(server.url + "/#/jobs")
        WebDriverWait(browser, 60, poll_frequency=0.2).until(
            lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-job='runs'] button.danger"))
        fits = browser.execute_script("""
            const width = document.documentElement.clientWidth;
            return {width, page: document.documentElement.scrollWidth,
                    buttons: [...document.querySelectorAll('#jobs-table button')].map(b => b.getBoundingClientRect().right)};""")
        assert fits["page"] <= fits["width"] and all(right <= fits["width"] for right in fits["buttons"]), fits
    finally:
        server.stop()


def test_a_buttons_refusal_stays_on_screen_past_the_next_refresh(browser, home, tmp_path):
    """Suspend on a read-only server is refused (403): the banner said so, and the table's next
    refresh, 2 s later, cleared it. It now stays until the next button or page. (A read-only
    server's page shows no buttons: this one is a page loaded before the server was restarted
    read-only, its mark taken off.)"""
    server = ServerProcess(home, args=("--read-only",), cwd=tmp_path)
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    try:
        server.dtrain()("submit", "runs", "--", "sleep", "60", cwd=tmp_path)
        browser.get(server.url + "/#/jobs")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-job='runs']"))
        assert not browser.find_elements(By.CSS_SELECTOR, "tr[data-job='runs'] button")
        browser.execute_script("document.body.removeAttribute('data-read-only')")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-job='runs'] button.suspend"))
        click(browser, "tr[data-job='runs'] button.suspend")
        wait.until(lambda d: "this server is read-only (POST refused)" in text_of(d, "#banner"))
        refreshed = text_of(browser, "#updated")
        wait.until(lambda d: text_of(d, "#updated") not in ("", refreshed))  # the table was read again since
        assert "this server is read-only (POST refused)" in text_of(browser, "#banner")
        browser.get(server.url + "/#/nodes")  # another page: the refusal was the last one's
        wait.until(lambda d: d.find_elements(By.CLASS_NAME, "gpus-table") or "no GPUs" in text_of(d, "main"))
        wait.until(lambda d: text_of(d, "#banner") == "")
    finally:
        server.stop()


def test_a_finished_job_has_a_delete_button_that_takes_it_off_the_list(browser, home, tmp_path):
    """Run:AI's grid deletes a completed job too; the dashboard offered Delete only until a job
    ended, so finished jobs could be cleared with the CLI only."""
    server = ServerProcess(home, cwd=tmp_path)
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    try:
        dtrain = server.dtrain()
        dtrain("submit", "done", "--", "true", cwd=tmp_path)
        dtrain("wait", "done", cwd=tmp_path)
        browser.get(server.url + "/#/jobs")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-job='done'] button.danger"))
        assert not browser.find_elements(By.CSS_SELECTOR, "tr[data-job='done'] button.suspend")
        click(browser, "tr[data-job='done'] button.danger")
        alert = wait.until(lambda d: d.switch_to.alert)
        assert "leaves the list" in alert.text and "processes are stopped" not in alert.text
        alert.accept()
        wait.until(lambda d: not d.find_elements(By.CSS_SELECTOR, "tr[data-job='done']"))
        assert server.http.get("/api/v1/jobs/done").json()["status"] == "Deleted"
        browser.get(server.url + "/#/job/done")  # a Deleted job's page offers nothing more to delete
        wait.until(lambda d: text_of(d, "#job-status") == "Deleted")
        assert not browser.find_elements(By.CSS_SELECTOR, "#job-head button")
    finally:
        server.stop()


def test_a_read_only_servers_page_offers_no_button_it_would_refuse(browser, home, tmp_path):
    """A --read-only server refuses every change (403); its page still offered Suspend, Delete and
    the Submit form, each answered by a refusal."""
    server = ServerProcess(home, args=("--read-only",), cwd=tmp_path)
    wait = WebDriverWait(browser, 60, poll_frequency=0.2)
    try:
        dtrain = server.dtrain()
        dtrain("submit", "runs", "--", "sleep", "60", cwd=tmp_path)
        dtrain("submit", "done", "--", "true", cwd=tmp_path)
        dtrain("wait", "done", cwd=tmp_path)
        browser.get(server.url + "/#/jobs")
        wait.until(lambda d: len(d.find_elements(By.CSS_SELECTOR, "tr[data-job]")) == 2)
        assert not browser.find_elements(By.CSS_SELECTOR, "#jobs-table button")
        assert not browser.find_element(By.CSS_SELECTOR, "nav a[data-page=submit]").is_displayed()
        browser.get(server.url + "/#/job/runs")
        wait.until(lambda d: text_of(d, "#job-status") == "Running")
        assert not browser.find_elements(By.CSS_SELECTOR, "#job-head button")
        browser.get(server.url + "/#/submit")  # typed by hand: a line saying why, no form
        wait.until(lambda d: "read-only" in text_of(d, "#submit-message"))
        assert not browser.find_elements(By.ID, "submit-form")
        assert server.http.get("/").headers["cache-control"] == "no-store"
        dtrain("delete", "runs", cwd=tmp_path)
    finally:
        server.stop()
    plain = ServerProcess(home, cwd=tmp_path)  # the same page from a server that takes changes
    try:
        browser.get(plain.url + "/#/jobs")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-job='done'] button.danger"))
        assert browser.find_element(By.CSS_SELECTOR, "nav a[data-page=submit]").is_displayed()
    finally:
        plain.stop()


def test_a_running_notebook_has_an_open_button_that_opens_its_jupyter(browser, home, tmp_path):
    """A notebook's URL (with its token) came from `dtrain notebook open` only: the dashboard listed the
    notebook among the jobs with no way to open it."""
    pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server: pip install 'dtrain[notebook]'")
    server = ServerProcess(home, cwd=tmp_path)
    wait = WebDriverWait(browser, 90, poll_frequency=0.2)
    try:
        dtrain = server.dtrain()
        dtrain("notebook", "nb", cwd=tmp_path)
        dtrain("submit", "train", "--", "sleep", "60", cwd=tmp_path)
        url = wait_until(lambda: (r := server.http.get("/api/v1/notebooks/nb/url")).status_code == 200 and r.json(),
                         timeout=90, what="the notebook serving")["url"]
        browser.get(server.url + "/#/jobs")
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "tr[data-job='nb'] button.open-notebook"))
        assert not browser.find_elements(By.CSS_SELECTOR, "tr[data-job='train'] button.open-notebook")
        click(browser, "tr[data-job='nb'] button.open-notebook")
        wait.until(lambda d: len(d.window_handles) == 2)
        browser.switch_to.window(browser.window_handles[1])
        wait.until(lambda d: d.current_url.startswith(url.split("?")[0]) and "JupyterLab" in d.title)
        browser.switch_to.window(browser.window_handles[0])
        browser.get(server.url + "/#/job/nb")  # the notebook's page has it too
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "#job-head button.open-notebook"))
        dtrain("delete", "nb", cwd=tmp_path)
        dtrain("delete", "train", cwd=tmp_path)
    finally:
        server.stop()


def test_an_empty_project_opened_from_the_projects_page_says_how_to_start_a_job(browser, home, tmp_path):
    """The Projects page opens #/jobs?project=P; for a new project it said "No jobs match these
    filters.", as if a filter hid its jobs. It says how to start one, as `dtrain list -p P` does; a
    status filter that hides every job still says the filters match none, and a project whose jobs
    were all deleted says where they are."""
    server = ServerProcess(home, cwd=tmp_path)
    try:
        dtrain = server.dtrain()
        dtrain("project", "create", "team-new", cwd=tmp_path)
        browser.get(server.url + "/#/projects")
        wait = WebDriverWait(browser, 60, poll_frequency=0.2)
        wait.until(lambda d: d.find_elements(By.CSS_SELECTOR, "a[href='#/jobs?project=team-new']"))
        click(browser, "a[href='#/jobs?project=team-new']")
        wait.until(lambda d: "No jobs" in text_of(d, "main"))
        assert ("No jobs yet in project 'team-new': submit one from the Submit tab or with "
                "'dtrain submit NAME -p team-new -- COMMAND'.") in text_of(browser, "main")
        browser.execute_script("location.hash = '#/jobs?status=Running&project=team-new'")
        wait.until(lambda d: "No jobs match these filters." in text_of(d, "main"))
        dtrain("submit", "gone", "-p", "team-new", "--", "true", cwd=tmp_path)  # its one job, deleted
        dtrain("wait", "gone", "-p", "team-new", cwd=tmp_path)
        dtrain("delete", "gone", "-p", "team-new", cwd=tmp_path)
        browser.execute_script("location.hash = '#/jobs?project=team-new'")
        wait.until(lambda d: "No jobs in project 'team-new' (1 deleted: choose Deleted above to list them)."
                   in text_of(d, "main"))
    finally:
        server.stop()

"""The server and the dashboard against an adversarial client and an unreliable server: a token URL
whose path holds an encoded newline, unbounded history queries, polling a slow or failing server,
and a log stream whose server restarts (in a real browser, as tests/test_dashboard_browser.py)."""

from __future__ import annotations

import http.server
import threading
import time
from pathlib import Path

import httpx
import pytest

from server_util import ThreadServer, wait_until

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
from dtrain.backends.base import GpuInfo, Listed, LogLine, NodeInfo  # noqa: E402
from dtrain.client import Client  # noqa: E402
from dtrain.errors import EnvironmentError_  # noqa: E402
from dtrain.server.app import create_app  # noqa: E402
from dtrain.server.serve import bind  # noqa: E402

TOKEN = "t" * 43


def test_a_token_url_whose_path_holds_an_encoded_newline_is_redirected_not_dropped():
    """`?token=` answers 303 to the same path without it: the path went into the Location header
    decoded, so `/%0d%0a...` put a raw CR LF there; h11 refused the header, uvicorn logged a
    traceback and the client got a closed connection instead of an answer."""
    server = ThreadServer(create_app(lambda: None, token=TOKEN, sample_every=3600))
    try:
        r = httpx.get(f"{server.url}/%0d%0aX-Evil:%201?token={TOKEN}&tab=a%20b")
        assert r.status_code == 303, r.text
        assert r.headers["location"] == "./%0D%0AX-Evil%3A%201?tab=a+b" and "x-evil" not in r.headers
        r = httpx.get(f"{server.url}/caf%C3%A9?token={TOKEN}")
        assert r.status_code == 303 and r.headers["location"] == "./caf%C3%A9"  # ASCII, as it came
    finally:
        server.stop()


@pytest.mark.parametrize("since", ["nan", "inf", "-1", "1e400"])
def test_gpu_history_refuses_a_since_that_is_no_time(since):
    """`/nodes/history?since=nan` answered 200 and an empty list (every comparison with NaN is false),
    as if the server had no samples; the other time parameters (logs' since) are bounded already."""
    server = ThreadServer(create_app(lambda: None, sample_every=3600))
    try:
        r = httpx.get(f"{server.url}/api/v1/nodes/history", params={"since": since})
        assert r.status_code == 422 and r.json()["kind"] == "SpecError"
        assert "since" in r.json()["error"] and "\n" not in r.json()["error"]
        assert httpx.get(f"{server.url}/api/v1/nodes/history", params={"since": "0"}).json() == []
    finally:
        server.stop()


def test_a_diffs_bad_to_is_called_a_snapshot_name(home):
    """`?to=` of /snapshots/NAME/diff names the snapshot to compare with, but a bad one was refused
    as "invalid volume name" (the restore body's `to`, a new volume, gave the word)."""
    server = ThreadServer(create_app(lambda: Client(home=home), sample_every=3600))
    try:
        r = httpx.get(f"{server.url}/api/v1/snapshots/data-v1/diff", params={"to": "Data_V2"})
        assert r.status_code == 422 and r.json()["error"].startswith("invalid snapshot name 'Data_V2': ")
        r = httpx.post(f"{server.url}/api/v1/snapshots/data-v1/restore", json={"to": "Data_V2"})
        assert r.status_code == 422 and r.json()["error"].startswith("invalid volume name 'Data_V2': ")
    finally:
        server.stop()


# ---- the dashboard in a browser --------------------------------------------------------------------
browser_tests = pytest.mark.slow


@pytest.fixture
def browser():
    from test_dashboard_browser import CHROMEDRIVER, CHROMIUM
    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are not installed (scripts/setup.sh installs them)")
    pytest.importorskip("selenium.webdriver", reason="the 'dev' extra (selenium) is not installed")
    from test_dashboard_browser import chrome

    with chrome() as driver:
        yield driver


def text_of(driver, css: str) -> str:
    return driver.execute_script("const e = document.querySelector(arguments[0]); return e ? e.textContent : '';",
                                 css)


class Calls:
    """A Client whose page of the job list (what the Jobs table asks for) is the seam: counted, and
    held or refused as the test says."""

    def __init__(self):
        self.started = 0
        self.running = 0
        self.most = 0  # the most lists that were in progress at once
        self.release = threading.Event()
        self.fail = False
        self._lock = threading.Lock()

    def client(self, home: Path) -> Client:
        calls = self

        class Counted(Client):
            def page(self, **kw):
                with calls._lock:
                    calls.started += 1
                    calls.running += 1
                    calls.most = max(calls.most, calls.running)
                try:
                    calls.release.wait(120)
                    if calls.fail:
                        raise EnvironmentError_("the job store is unavailable (a test's failure)")
                    return super().page(**kw)
                finally:
                    with calls._lock:
                        calls.running -= 1
        return Counted(home=home)


@browser_tests
def test_the_job_list_waits_for_a_slow_server_instead_of_piling_up_requests(browser, home):
    """The page polled with setInterval: while the server took longer than 2 s to list the jobs, a new
    request went out every 2 s beside the ones still waiting: a stalled server got an ever-growing pile,
    sent all at once when it answered. (Chrome holds back a GET of a URL that it is fetching already
    until the first ends, so the pile grew in the page: the page's fetches are counted there.)"""
    calls = Calls()
    server = ThreadServer(create_app(lambda: calls.client(home), sample_every=3600))
    try:
        browser.get(server.url + "/#/jobs")
        wait_until(lambda: calls.started >= 1, what="the first list")
        browser.execute_script("window.fetches = 0; const f = window.fetch;"
                               "window.fetch = (...a) => { window.fetches++; return f(...a); };")
        time.sleep(7)  # three and a half of the page's 2 s periods
        assert browser.execute_script("return window.fetches") == 0
        assert calls.started == 1
        calls.release.set()
        wait_until(lambda: "No jobs yet" in text_of(browser, "main"), what="the answer drawn")
        wait_until(lambda: calls.started >= 3, what="the polls after it")  # it goes on once answered
        assert calls.most == 1
        browser.get(server.url + "/#/submit")  # another page: the job list is polled no more
        wait_until(lambda: "Submit a job" in text_of(browser, "main"), what="the submit page")
        seen = calls.started
        time.sleep(5)
        assert calls.started == seen
    finally:
        calls.release.set()
        server.stop()


@browser_tests
def test_the_job_list_backs_off_while_the_server_fails_and_recovers_after(browser, home):
    """A failing server was asked again every 2 s for as long as the page stayed open."""
    calls = Calls()
    calls.fail = True
    calls.release.set()
    server = ThreadServer(create_app(lambda: calls.client(home), sample_every=3600))
    try:
        browser.get(server.url + "/#/jobs")
        wait_until(lambda: "job store is unavailable" in text_of(browser, "#banner"), what="the banner")
        begun = calls.started
        time.sleep(14)  # seven 2 s periods: 4 + 8 s of backing off
        assert calls.started - begun <= 3, calls.started - begun
        calls.fail = False
        wait_until(lambda: "No jobs yet" in text_of(browser, "main"), timeout=60, what="the recovery")
        assert browser.execute_script("return document.getElementById('banner').hidden")
    finally:
        server.stop()


class Journal:
    """One job's log, shared by the servers the test starts (one after the other): a backend's
    logs() as the API sees it (`since` is 'at or after', `tail` the last lines, `follow` waits)."""

    def __init__(self):
        self.lines: list[LogLine] = []
        self.cond = threading.Condition()

    def add(self, *texts: str) -> None:
        with self.cond:
            self.lines += [LogLine(rank=0, time=time.time(), text=t) for t in texts]
            self.cond.notify_all()

    @staticmethod
    def running(home: Path) -> None:
        """A real job named 'train', running, in `home`: a job page follows the logs once the job's
        record has given its ranks (the log lines themselves come from the journal)."""
        from dtrain.spec import JobSpec

        client = Client(home=home)
        client.submit(JobSpec(name="train", command=["sleep", "600"]))
        wait_until(lambda: client.get("train").status.value == "Running", what="job train running")

    def read(self, *, rank=None, tail=None, since=None, follow=False, previous=False, limit_bytes=None, project=None,
             backend=None):
        assert limit_bytes is None and project is None and backend is None  # the page asks for none of them here
        with self.cond:
            got = [x for x in self.lines if since is None or x.time >= since]
            seen = len(self.lines)
        yield from (got[-tail:] if tail else [] if tail == 0 else got)
        while follow:
            with self.cond:
                self.cond.wait_for(lambda: len(self.lines) > seen, timeout=1)
                new, seen = self.lines[seen:], len(self.lines)
            yield from new

    def client(self, home: Path) -> Client:
        journal = self

        class Logged(Client):
            def logs(self, name, **kw):
                return journal.read(**kw)
        return Logged(home=home)


class Restartable:
    """An in-thread server that can be stopped and started again on the same port."""

    def __init__(self, make_app):
        self.make_app = make_app
        self.port = 0
        self.server: ThreadServer | None = None
        self.start()

    def start(self) -> None:
        import uvicorn

        server = ThreadServer.__new__(ThreadServer)  # its stop(), on a port kept from the first start
        server.sock = bind("127.0.0.1", self.port)
        self.port = server.sock.getsockname()[1]
        server.url = self.url
        server.server = uvicorn.Server(uvicorn.Config(self.make_app(), log_level="warning",
                                                      timeout_graceful_shutdown=1))
        server.thread = threading.Thread(target=server.server.run, kwargs={"sockets": [server.sock]}, daemon=True)
        server.thread.start()
        wait_until(lambda: server.server.started, what="the in-thread server")
        self.server = server

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
            self.server = None


def log_lines(driver) -> list[str]:
    return driver.execute_script("return document.getElementById('logs').textContent.split('\\n')")


@browser_tests
def test_a_log_stream_picks_up_where_it_was_after_the_server_restarts(browser, home):
    """The stream's connection drops when the server restarts; EventSource reconnected by itself to the
    same URL (`tail=500`), so the last 500 lines came again below the ones shown."""
    journal = Journal()
    journal.add("epoch 1", "epoch 2", "epoch 3")
    Journal.running(home)
    server = Restartable(lambda: create_app(lambda: journal.client(home), sample_every=3600))
    try:
        browser.get(server.url + "/#/job/train")
        wait_until(lambda: "epoch 3" in log_lines(browser), what="the first lines")
        server.stop()
        journal.add("epoch 4")  # written while the server was down
        server.start()
        journal.add("epoch 5")
        wait_until(lambda: "epoch 5" in log_lines(browser), what="the line written after the restart")
        assert [x for x in log_lines(browser) if x] == ["epoch 1", "epoch 2", "epoch 3", "epoch 4", "epoch 5"]
    finally:
        server.stop()
        Client(home=home).delete("train")


@browser_tests
def test_the_log_pane_keeps_the_newest_lines_of_a_chatty_job(browser, home):
    """Every line a followed job printed stayed in the page: a job that logs every step for hours
    grew the tab's memory (and each line's layout) without bound."""
    journal = Journal()
    Journal.running(home)
    server = Restartable(lambda: create_app(lambda: journal.client(home), sample_every=3600))
    try:
        browser.get(server.url + "/#/job/train")
        # The page shows a line once its stream follows the log: lines written before then would come as the
        # stream's first `tail=500` (an open EventSource object is no sign that the server has begun reading).
        journal.add("started")
        wait_until(lambda: "started" in log_lines(browser), what="the stream")
        journal.add(*(f"step {i}" for i in range(12_000)))
        wait_until(lambda: "step 11999" in log_lines(browser), what="the last line")
        shown = [x for x in log_lines(browser) if x]
        assert len(shown) == 5000 and shown[0] == "step 7000" and shown[-1] == "step 11999"
    finally:
        server.stop()
        Client(home=home).delete("train")


def gpu_nodes(home: Path, count: int) -> Client:
    """A Client whose nodes are the seam: `count` nodes of 8 busy GPUs each."""
    class Cluster(Client):
        def nodes(self):
            return Listed([NodeInfo(name=f"node-{n}", gpus_allocatable=8, gpus_allocated=0, cpus=64, memory=512 << 30,
                                    gpus=tuple(GpuInfo(index=str(i), name="H100", memory_total=80 << 30,
                                                       memory_used=(i + 1) << 30, utilization=10.0 * i) for i in range(8)))
                           for n in range(count)])
    return Cluster(home=home)


@browser_tests
def test_the_nodes_page_fetches_only_the_gpu_samples_it_has_not_got(browser, home):
    """Every poll (4 s) fetched the whole history again: each GPU of each node, ten minutes of samples
    (on 20 nodes of 8 GPUs about 2.6 MiB a poll, per open page); a page now asks for the new ones."""
    app = create_app(lambda: gpu_nodes(home, 20), sample_every=3600)
    server = ThreadServer(app)
    try:
        wait_until(lambda: app.state.history.samples(), what="the sampler's first sample")
        for _ in range(29):
            app.state.history.sample()  # 30 samples of 160 GPUs: the sampler's thread sleeps for an hour
        browser.get(server.url + "/#/nodes")
        sizes = "return performance.getEntriesByType('resource').filter(e => e.name.includes('/nodes/history'))" \
                ".map(e => e.decodedBodySize)"
        wait_until(lambda: len(browser.execute_script(sizes)) >= 3, what="three polls")
        first, *later = browser.execute_script(sizes)
        assert first > 500_000 and later and all(size == 2 for size in later)  # "[]": nothing new
        lines = "return document.querySelectorAll('[data-node=\"node-19\"] path.line, [data-node=\"node-19\"] line.free')" \
                ".length"
        assert browser.execute_script(lines) == 3 * 8  # utilisation, memory, and held's free row: one per GPU, kept
        app.state.history.sample()
        wait_until(lambda: any(2 < size < first / 10 for size in browser.execute_script(sizes)), what="the new sample")
    finally:
        server.stop()


@browser_tests
def test_the_token_link_opened_from_another_site_signs_in(browser, home):
    """The URL that `dtrain server` printed, pasted into a chat or a wiki and clicked there: the browser
    sends no SameSite=Strict cookie along a navigation another site began, so the 303 after `?token=`
    came to a 401 answer as JSON instead of the dashboard, and a reload did not help."""
    server = ThreadServer(create_app(lambda: Client(home=home), token=TOKEN, sample_every=3600))
    link = f"{server.url}/?token={TOKEN}#/nodes"

    class Wiki(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = f'<a id="dashboard" href="{link}">our cluster</a>'.encode()
            self.send_response(200)
            self.send_header("content-type", "text/html")
            self.send_header("content-length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    wiki = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Wiki)
    threading.Thread(target=wiki.serve_forever, daemon=True).start()
    try:
        browser.get(f"http://localhost:{wiki.server_address[1]}/")  # another site: localhost is not 127.0.0.1
        browser.execute_script("document.getElementById('dashboard').click()")
        wait_until(lambda: text_of(browser, "main h1") == "Nodes", what="the dashboard")
        assert browser.current_url == f"{server.url}/#/nodes"  # the token is out of the URL
        wait_until(lambda: text_of(browser, "#updated").startswith("updated"), what="an answer of the API")
        assert browser.execute_script("return document.getElementById('banner').hidden")
        r = httpx.get(f"{server.url}/?token={TOKEN}")  # a client that is no browser still gets the 303
        assert r.status_code == 303 and r.headers["location"] == "./"
    finally:
        wiki.shutdown()
        server.stop()

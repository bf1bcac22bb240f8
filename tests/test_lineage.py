"""The lineage graph (GET /api/v1/lineage, the Volumes and snapshots page) stays small and cheap
however long the history: it is drawn from a page of the newest jobs, not from every stored job,
and of the jobs that only mounted a volume each volume keeps its newest few, the older ones
counted in one node. Jobs that started from a snapshot or whose results a snapshot holds are
always drawn. The page is of the jobs that mount a volume (the local backend picks them in SQL): many jobs
mounting nothing, another project's, hid the one that mounted a volume ("103 older jobs not read")."""

from __future__ import annotations

import httpx
import pytest

from conftest import job_store
from server_util import ThreadServer, local_api

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
from dtrain import Client, JobSpec  # noqa: E402
from dtrain.backends.local.store import JobStore  # noqa: E402
from dtrain.server.app import create_app  # noqa: E402
from dtrain.backends.base import Backend  # noqa: E402
from dtrain.backends.local.backend import LocalBackend  # noqa: E402
from dtrain.spec import NewVolume, VolumeMount  # noqa: E402


def _stored(home, jobs: list[tuple[str, tuple[str, ...], str | None]], after: int = 0) -> None:
    """Finished jobs as (name, volumes mounted, snapshot its data started from), oldest first and
    newer than the `after` stored before, written into the job table as a submit and a run record
    them (no process runs)."""
    with job_store(home) as store:
        for i, (name, volumes, source) in enumerate(jobs):
            mounts = tuple(VolumeMount(volume=v, mount_path=f"/mnt/{v}") for v in volumes)
            store.insert_job(JobSpec(name=name, command=("true",), volumes=mounts), cwd="/", node="here")
            assert store.set_status(name, "Running", "test") and store.set_status(name, "Succeeded", "test")
            store.update(name, created=1_700_000_000.0 + after + i, source_snapshot=source)


@pytest.fixture
def home_with_history(home):
    c = Client(home=home)
    c.create_volume("data", size="1Gi")
    c.create_volume("other", size="1Gi")
    _stored(home, [("prepare", ("data",), None), ("retrain", ("data",), "data-v1")]
            + [(f"sweep-{i:02d}", ("data",), None) for i in range(20)]
            + [("both", ("data", "other"), None), ("plain", (), None)])
    c.create_snapshot("data", name="data-v1", job="prepare")  # the results of the oldest job
    return home


@pytest.fixture
def server(home_with_history, monkeypatch):
    monkeypatch.setattr(JobStore, "jobs", lambda self: pytest.fail("the lineage read every stored job"))
    server = ThreadServer(create_app(lambda: Client(home=home_with_history), sample_every=3600))
    yield server
    server.stop()


@pytest.fixture
def http(server):
    with httpx.Client(base_url=server.url, timeout=60) as client:
        yield client


def graph(http, **query) -> tuple[dict, set]:
    r = http.get("/api/v1/lineage", params=query)
    assert r.status_code == 200, r.text
    body = r.json()
    return body, {(e["source"], e["label"], e["target"]) for e in body["edges"]}


def test_jobs_that_only_mounted_a_volume_are_folded_past_the_newest_few(http):
    body, edges = graph(http, per_volume=3)
    nodes = {n["id"]: n for n in body["nodes"]}
    # the newest three of data's mounted-only jobs ("both" counts for data and for other)
    drawn = {n for n in nodes if n.startswith("job:")}
    assert drawn == {"job:both", "job:sweep-19", "job:sweep-18", "job:prepare", "job:retrain"}
    assert nodes["jobs:data"] == {"id": "jobs:data", "kind": "jobs", "name": "18 older jobs", "status": None,
                                  "project": None, "count": 18}
    assert "jobs:other" not in nodes and "job:plain" not in nodes  # nothing folded; mounted nothing
    assert {("volume:data", "mounted", "jobs:data"), ("volume:other", "mounted", "job:both"),
            ("volume:data", "mounted", "job:both"), ("job:prepare", "results", "snapshot:data-v1"),
            ("snapshot:data-v1", "started", "job:retrain"), ("volume:data", "snapshot", "snapshot:data-v1")} <= edges
    assert nodes["job:prepare"]["status"] == "Succeeded" and body["jobs_unread"] == 0

    body, edges = graph(http)  # the default: eight per volume
    assert next(n for n in body["nodes"] if n["id"] == "jobs:data")["count"] == 13
    body, _ = graph(http, per_volume=0)
    assert next(n for n in body["nodes"] if n["id"] == "jobs:data")["count"] == 21
    assert next(n for n in body["nodes"] if n["id"] == "jobs:other")["count"] == 1


def test_only_the_newest_jobs_are_read_and_a_snapshots_older_job_is_read_by_name(http):
    body, edges = graph(http, jobs=4)  # both, sweep-19, sweep-18, sweep-17 ("plain" mounts nothing: not read)
    nodes = {n["id"]: n for n in body["nodes"]}
    assert body["jobs_unread"] == 19
    assert {n for n in nodes if n.startswith("job")} == {"job:both", "job:sweep-19", "job:sweep-18", "job:sweep-17",
                                                         "job:prepare"}
    assert nodes["job:prepare"]["status"] == "Succeeded"  # outside the page, read by name: its results are drawn
    assert ("job:prepare", "results", "snapshot:data-v1") in edges
    assert not any(e[2] == "job:retrain" for e in edges)


@pytest.mark.parametrize("query, says", [
    ({"jobs": 0}, "jobs"), ({"jobs": 1001}, "jobs"), ({"jobs": "many"}, "jobs"),
    ({"per_volume": -1}, "per_volume"), ({"per_volume": 1001}, "per_volume"),
])
def test_bad_bounds_are_refused_in_one_line(http, query, says):
    r = http.get("/api/v1/lineage", params=query)
    assert r.status_code == 422 and says in r.json()["error"] and "\n" not in r.json()["error"], r.text


@pytest.mark.slow  # a browser
def test_the_storage_page_draws_the_folded_jobs_and_says_how_many_were_not_read(home_with_history, server, http):
    from test_dashboard_browser import CHROMEDRIVER, CHROMIUM, WebDriverWait, chrome, text_of

    if not (CHROMIUM and CHROMEDRIVER):
        pytest.skip("chromium and chromedriver are not installed (scripts/setup.sh installs them)")
    _stored(home_with_history, [(f"new-{i:02d}", ("data",), None) for i in range(90)], after=24)
    body, _ = graph(http)
    assert body["jobs_unread"] == 13  # 114 stored, 113 mount a volume, the newest 100 of them read
    folded = next(n for n in body["nodes"] if n["id"] == "jobs:data")
    assert folded["count"] == 91  # of the 100 read that mounted data, 9 drawn: 8, and "both" for other
    with chrome() as browser:
        browser.get(server.url + "/#/storage")
        node = "#lineage-graph g.n-jobs[data-id='jobs:data']"
        WebDriverWait(browser, 60).until(lambda d: text_of(d, "#lineage-unread"))
        texts = browser.execute_script("return [...document.querySelectorAll(arguments[0] + ' text')]"
                                       ".map(t => t.firstChild.textContent)", node)  # the label, not its <title>
        assert texts == ["jobs \u00b7 only mounted", "91 older jobs"]
        assert text_of(browser, "#lineage-unread").startswith("drawn from the newest jobs: 13 older jobs not read")
        drawn = browser.execute_script("return document.querySelectorAll('#lineage-graph g.n-job').length")
        assert drawn == len([n for n in body["nodes"] if n["kind"] == "job"]) == 10  # 8, both, prepare


def test_many_jobs_mounting_nothing_never_hide_the_job_that_mounts_a_volume(home, monkeypatch):
    """The newest 100 jobs of every project were read: 103 of another project that mount nothing hid 'train',
    and the graph drew the volume alone, "103 older jobs not read"."""
    c = Client(home=home)
    c.create_volume("data", size="1Gi")
    c.create_volume("pvc-prep-0", size="1Gi")  # as `--pvc local:1Gi:/out` makes it for job 'prep'
    with job_store(home) as store:
        store.insert_job(JobSpec(name="prep", command=("true",), volumes=(
            NewVolume(storage_class="local", size="1Gi", mount_path="/out"),)), cwd="/", node="here")
        store.update("prep", created=1_700_000_000.0)
    _stored(home, [("train", ("data",), None)], after=1)
    _stored(home, [(f"other-{i:03d}", (), None) for i in range(103)], after=2)
    monkeypatch.setattr(JobStore, "jobs", lambda self: pytest.fail("the lineage read every stored job"))
    with local_api(home) as http:
        body, edges = graph(http)
    assert {("volume:data", "mounted", "job:train"), ("volume:pvc-prep-0", "mounted", "job:prep")} <= edges
    assert body["jobs_unread"] == 0

    # a backend that cannot pick them pages every job: the notice stays
    monkeypatch.setattr(LocalBackend, "_mounting_page", Backend._mounting_page)
    page = Client(home=home).volume_jobs(limit=100, mounting={"data", "pvc-prep-0"})
    assert page.total == 105 and "train" not in {j.name for j in page.jobs}

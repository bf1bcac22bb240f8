"""The HTTP API (audit 10): the lineage joins a volume to the jobs of its own backend and takes
?project= (a local job and a Kubernetes job each mounting a volume 'data' mounted two volumes, not
one), as the dashboard's storage page now asks with the Jobs page's project filter; POST /projects
answers with the project it made for an account that may create projects but not read their jobs."""

from __future__ import annotations

import pytest

import conftest
import dtrain
from dtrain import JobSpec
from test_audit9_leftovers import jobless_account  # noqa: F401  (a fixture: an account that may list no job)

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
pytest.importorskip("fastapi", reason="the 'server' extra is not installed")


@pytest.fixture
def two_datas(home, tmp_path):
    """A volume 'data' on each backend: a local one, and team-b's PVC on Kubernetes (an in-memory API
    server config.yaml sends team-b to). Job ljob (project default, local) mounts the local one and
    its snapshot s1 holds ljob's results; job kjob (team-b) mounts the PVC; project team-x is local."""
    server = conftest.team_b_on_kubernetes(home, tmp_path)
    client = dtrain.Client(home=home)
    client.create_project("team-x")
    client.create_volume("data", size="1Gi")
    client.create_volume("data", size="1Gi", project="team-b")
    client.submit(JobSpec.from_dict({"name": "ljob", "command": ["true"], "volumes": ["data:/mnt"]}))
    client.wait("ljob", timeout=120)  # started before s1 was taken: s1 holds its results, not its data
    client.create_snapshot("data", name="s1", job="ljob")
    client.submit(JobSpec.from_dict({"name": "kjob", "project": "team-b", "command": ["python", "t.py"],
                                     "volumes": ["data:/mnt"]}))
    yield server
    server.close()


def _server(home):
    from dtrain.server.app import create_app
    from server_util import ThreadServer

    return ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))


@pytest.fixture
def http(home):
    """An API server on that home (a Client per worker thread), and an HTTP client to it."""
    import httpx

    server = _server(home)
    with httpx.Client(base_url=server.url + "/api/v1", timeout=60) as client:
        yield client
    server.stop()


def edges(graph: dict) -> set[tuple[str, str, str]]:
    return {(e["source"], e["target"], e["label"]) for e in graph["edges"]}


def test_the_lineage_joins_a_volume_to_the_jobs_of_its_own_backend_and_takes_a_project(two_datas, http, home):
    """GET /lineage read the jobs of every backend and the default backend's volumes, so kjob, which
    mounted team-b's PVC on Kubernetes, was drawn mounting the local 'data'; ?project= was ignored."""
    plain = http.get("/lineage").json()  # the configured project's backend: local, where ljob ran
    assert edges(plain) == {("volume:data", "job:ljob", "mounted"), ("volume:data", "snapshot:s1", "snapshot"),
                            ("job:ljob", "snapshot:s1", "results")}
    team_b = http.get("/lineage", params={"project": "team-b"}).json()
    assert edges(team_b) == {("volume:data", "job:kjob", "mounted")}
    assert {n["id"]: n["status"] for n in team_b["nodes"]} == {"volume:data": None, "job:kjob": "Pending"}
    # team-x shares the local store: its volumes and snapshots, and none of its jobs; the snapshot's job,
    # another project's there, is read by name and drawn with its status, not as purged
    team_x = http.get("/lineage", params={"project": "team-x"}).json()
    assert edges(team_x) == {("volume:data", "snapshot:s1", "snapshot"), ("job:ljob", "snapshot:s1", "results")}
    [ljob] = [n for n in team_x["nodes"] if n["id"] == "job:ljob"]
    assert ljob["status"] == dtrain.Client(home=home).get("ljob").status.value
    typo = http.get("/lineage", params={"project": "tem-b"})
    assert typo.status_code == 404 and typo.json()["error"].startswith("no project named 'tem-b'")
    bad = http.get("/lineage", params={"project": "Team_B"})
    assert bad.status_code == 422 and "project" in bad.json()["error"]


def test_the_lineage_schema_says_what_its_project_selects(http):
    op = http.get("/openapi.json").json()["paths"]["/api/v1/lineage"]["get"]
    [project] = [p for p in op["parameters"] if p["name"] == "project"]
    assert project["in"] == "query" and "-p" in project["description"]


def test_post_projects_answers_with_the_project_made_where_its_jobs_cannot_be_read(jobless_account, home):  # noqa: F811
    """The account may create namespaces and quotas but list no job: the project was made, and the
    answer, read back from every project with its jobs counted, was the list's refusal (a 502)."""
    import httpx

    from dtrain.backends.kubernetes.objects import GPU_RESOURCE
    from dtrain.backends.kubernetes.render_storage import QUOTA_NAME

    server = _server(home)
    try:
        with httpx.Client(base_url=server.url + "/api/v1", timeout=60) as http:
            made = http.post("/projects", json={"name": "p2", "gpu_quota": 2})
            assert made.status_code == 201, made.text
            body = made.json()
            assert (body["name"], body["backend"], body["gpu_quota"], body["jobs"]) == ("p2", "kubernetes", 2, 0)
            assert "could not be read" in body["extra"]["unknown"]
            assert made.headers["warning"].startswith('299 dtrain "project p2: it was created, but its jobs ')
            other = http.post("/projects", json={"name": "p3"})
            assert other.status_code == 201 and other.json()["gpu_quota"] is None
            again = http.post("/projects", json={"name": "p2", "gpu_quota": 3})
            assert again.status_code == 200 and again.json()["gpu_quota"] == 3
            assert "its GPU quota was set" in again.headers["warning"]
            kept = http.post("/projects", json={"name": "p2"})
            assert kept.status_code == 200 and "unchanged, but its jobs and GPU quota" in kept.headers["warning"]
    finally:
        server.stop()
    quota = jobless_account.get("", "resourcequotas", "dtrain-p2", QUOTA_NAME)
    assert quota["spec"]["hard"][f"requests.{GPU_RESOURCE}"] in ("3", 3)
    client = dtrain.Client(home=home)
    assert client.has_project("p2") and client.has_project("p3")


def test_post_projects_reads_the_project_back_where_it_can(http, home):
    made = http.post("/projects", json={"name": "team-y", "gpu_quota": 0})
    assert made.status_code == 201, made.text
    assert "warning" not in made.headers
    assert made.json() == next(p for p in http.get("/projects").json() if p["name"] == "team-y")


@pytest.mark.slow  # a browser: about 20 s
def test_the_storage_page_has_the_jobs_pages_project_filter(two_datas, home):
    """The Volumes and snapshots page read the configured project's backend only: team-b's PVC, its
    snapshots and its jobs' lineage could not be shown; a project filter now asks for them, as the
    Jobs page's does, and the job links it draws carry it."""
    browser_tests = pytest.importorskip("test_dashboard_browser")
    from server_util import wait_until

    by = browser_tests.By
    text_of = browser_tests.text_of
    server = _server(home)
    try:
        with browser_tests.chrome() as browser:
            browser.get(server.url + "/#/storage?project=team-b")
            wait_until(lambda: browser.find_elements(by.CSS_SELECTOR, "#lineage-graph g[data-id='job:kjob']"),
                       what="kjob in team-b's lineage")
            assert browser.find_element(by.ID, "project-filter").get_attribute("value") == "team-b"
            assert not browser.find_elements(by.CSS_SELECTOR, "#lineage-graph g[data-id='job:ljob']")
            assert browser_tests.attrs_of(browser, "#lineage-graph a.node-link", "href") == ["#/job/kjob?project=team-b"]
            assert "data" in text_of(browser, "#volumes-table")
            # team-b has no snapshot: the hint names its project, as the CLI needs it
            assert "'dtrain snapshot create -p team-b'" in text_of(browser, "main")
            browser.execute_script("const f = document.getElementById('project-filter'); f.value = '';"
                                   "f.dispatchEvent(new Event('change'))")
            wait_until(lambda: browser.find_elements(by.CSS_SELECTOR, "#lineage-graph g[data-id='job:ljob']"),
                       what="the configured project's lineage")
            assert browser.execute_script("return location.hash") == "#/storage"
            assert not browser.find_elements(by.CSS_SELECTOR, "#lineage-graph g[data-id='job:kjob']")
            assert "s1" in text_of(browser, "#snapshots-table")
            assert not text_of(browser, "#banner"), text_of(browser, "#banner")
            severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
            assert not severe, severe
    finally:
        server.stop()

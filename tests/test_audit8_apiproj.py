"""A job of a project that config.yaml's `project_backends` sends to another backend (Kubernetes,
here the shipped fake API server through a kubeconfig), as each door reaches it (audit 8): the
CLI's -p, the SDK's project=, the HTTP API's ?project= on every route on one job."""

from __future__ import annotations

import pytest

import conftest
import dtrain
from conftest import Dtrain, assert_usage_error
from dtrain.errors import NotFoundError

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")


@pytest.fixture
def team_b_on_kubernetes(home, tmp_path):
    """config.yaml maps project team-b to Kubernetes (an in-memory API server) and leaves the rest
    local; job kjob is team-b's, submitted there by the CLI (so no server thread's Client knows it)."""
    server = conftest.team_b_on_kubernetes(home, tmp_path)
    dt = Dtrain(home)
    dt("project", "create", "team-x")
    dt("submit", "kjob", "-p", "team-b", "--", "python", "t.py")
    yield dt
    server.close()


@pytest.mark.slow  # the CLI run per verb: about 20 s
def test_cli_job_verbs_reach_the_job_on_its_projects_backend_with_p(team_b_on_kubernetes):
    dt = team_b_on_kubernetes
    assert dt.json("describe", "job", "kjob", "-p", "team-b")["backend"] == "kubernetes"
    assert dt("logs", "kjob", "-p", "team-b").returncode == 0
    assert dt("wait", "kjob", "-p", "team-b", "--timeout", "0", check=False).returncode == 124
    assert "suspended" in dt("suspend", "kjob", "-p", "team-b").stdout
    assert "resumed" in dt("resume", "kjob", "-p", "team-b").stdout
    assert_usage_error(dt("describe", "job", "kjob", "-p", "team-x", check=False), "no job named 'kjob'")
    assert "deleted" in dt("delete", "kjob", "-p", "team-b").stdout


@pytest.mark.slow  # the CLI run per verb: about 25 s
def test_a_project_that_does_not_exist_is_named_by_every_door(team_b_on_kubernetes, home):
    """`dtrain logs kjob -p tem-b` said no job named 'kjob' (the job is there: the project is the typo)."""
    dt = team_b_on_kubernetes
    for argv in (["describe", "job", "kjob"], ["logs", "kjob"], ["wait", "kjob"], ["delete", "kjob"],
                 ["suspend", "kjob"], ["exec", "kjob", "-p", "tem-b", "--", "true"]):
        argv = argv if "-p" in argv else [*argv, "-p", "tem-b"]
        assert_usage_error(dt(*argv, check=False), "no project named 'tem-b' (did you mean 'team-x'? projects: ")
    with pytest.raises(NotFoundError, match=r"^no project named 'tem-b' \(did you mean 'team-x'\? projects: "):
        dtrain.Client(home=home).logs("kjob", project="tem-b")


@pytest.fixture
def http(team_b_on_kubernetes, home):
    """An API server on that home (a Client per worker thread), and an HTTP client to it."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    import httpx

    from dtrain.server.app import create_app
    from server_util import ThreadServer

    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    with httpx.Client(base_url=server.url + "/api/v1", timeout=60) as client:
        yield client
    server.stop()


@pytest.mark.slow
def test_every_route_on_a_job_takes_its_project_as_the_cli_takes_p(http):
    """GET /jobs/kjob found a job of a project mapped to Kubernetes only in the worker thread whose
    Client had submitted it; there was no ?project= to say where it is."""
    q = {"project": "team-b"}
    assert http.get("/jobs/kjob", params=q).json()["backend"] == "kubernetes"
    assert http.get("/jobs/kjob/logs", params=q).json() == []
    assert http.get("/jobs/kjob/metrics", params=q).json() == []
    assert http.get("/jobs/kjob/wait", params={**q, "timeout": 0}).status_code == 408
    assert http.post("/jobs/kjob/suspend", params=q).json()["status"] == "Suspended"
    assert http.post("/jobs/kjob/resume", params=q).json()["status"] == "Pending"
    assert http.get("/notebooks/kjob/url", params=q).json()["error"].startswith("job 'kjob' is not a notebook")
    other = http.get("/jobs/kjob", params={"project": "team-x"})
    assert other.status_code == 404 and other.json()["error"].startswith("no job named 'kjob'")
    with http.stream("GET", "/jobs/kjob/logs/stream", params={**q, "tail": 1}) as stream:
        assert stream.status_code == 200  # a job it did not find would be a 404 before any event
    assert http.delete("/jobs/kjob", params=q).json()["status"] == "Deleted"
    gone = http.delete("/jobs/kjob", params=q)
    assert gone.status_code == 404 and "already deleted" in gone.json()["error"]


@pytest.mark.slow  # a CLI run per case: about 10 s
def test_a_wrong_project_is_refused_over_http_with_the_clis_line(team_b_on_kubernetes, http):
    dt = team_b_on_kubernetes
    for project, status in (("tem-b", 404), ("Team_B", 422)):
        said = dt("describe", "job", "kjob", "-p", project, check=False)
        assert said.returncode == 2
        r = http.get("/jobs/kjob", params={"project": project})
        assert (r.status_code, r.json()["error"]) == (status, said.stderr.strip().removeprefix("dtrain: error: "))
    said = dt("describe", "job", "kjob", "-p", "team-x", check=False).stderr.strip().removeprefix("dtrain: error: ")
    assert http.get("/jobs/kjob", params={"project": "team-x"}).json()["error"] == said


@pytest.mark.slow
def test_the_schema_gives_every_route_on_a_job_its_project(http):
    paths = http.get("/openapi.json").json()["paths"]
    on_a_job = [(path, method, op) for path, methods in paths.items() if path.startswith(("/api/v1/jobs/{name}",
                "/api/v1/notebooks/{name}")) for method, op in methods.items()]
    assert len(on_a_job) >= 9  # get, delete, suspend, resume, wait, logs, its stream, metrics, a notebook's url
    for path, method, op in on_a_job:
        [project] = [p for p in op["parameters"] if p["name"] == "project"] or [None]
        assert project and project["in"] == "query" and "-p" in project["description"], (method, path)


@pytest.mark.slow  # a browser: about 20 s
def test_the_dashboard_opens_a_job_of_a_kubernetes_project_from_the_filtered_list(team_b_on_kubernetes, home):
    """The Jobs table filtered by project team-b listed kjob (from Kubernetes), and its link opened a
    page whose reads (GET /jobs/kjob, its logs, its metrics) had no project: 'no job named'."""
    browser_tests = pytest.importorskip("test_dashboard_browser")
    from dtrain.server.app import create_app
    from server_util import ThreadServer, wait_until

    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    try:
        with browser_tests.chrome() as browser:
            text_of = browser_tests.text_of
            browser.get(server.url + "/#/jobs?project=team-b")
            wait_until(lambda: "kjob" in text_of(browser, "main"), what="kjob in the Jobs table")
            link = browser.find_element(browser_tests.By.CSS_SELECTOR, "#jobs-table a")
            assert link.get_attribute("href").endswith("#/job/kjob?project=team-b")
            link.click()
            wait_until(lambda: text_of(browser, "#job-status") == "Pending", what="the job's page")
            assert "team-b / kubernetes" in text_of(browser, "#job-head")
            browser.find_element(browser_tests.By.CSS_SELECTOR, "#job-head button.suspend").click()
            wait_until(lambda: text_of(browser, "#job-status") == "Suspended", what="the suspension")
            assert not text_of(browser, "#banner"), text_of(browser, "#banner")
            severe = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
            assert not severe, severe
    finally:
        server.stop()


@pytest.mark.slow  # a CLI run per verb: about 15 s
def test_a_job_not_found_says_which_projects_are_elsewhere_in_each_doors_words(team_b_on_kubernetes, http, home):
    """'no job named kjob; see dtrain list jobs' said nothing of project team-b, whose jobs
    config.yaml keeps on Kubernetes: each door now says to give it, in its own spelling."""
    dt = team_b_on_kubernetes
    for argv in (["describe", "job", "kjob"], ["logs", "kjob"], ["wait", "kjob"], ["delete", "kjob"]):
        assert_usage_error(dt(*argv, check=False), "no job named 'kjob'", "with its project: -p team-b (kubernetes)")
    for verb in ("get", "wait", "logs", "delete", "suspend", "notebook_url"):
        with pytest.raises(NotFoundError, match=r"with its project: project='team-b' \(kubernetes\)$"):
            getattr(dtrain.Client(home=home), verb)("kjob")
    for method, path in (("GET", "/jobs/kjob"), ("GET", "/jobs/kjob/logs"), ("POST", "/jobs/kjob/suspend"),
                         ("DELETE", "/jobs/kjob")):
        r = http.request(method, path)
        assert r.status_code == 404 and r.json()["error"].endswith("with its project: ?project=team-b (kubernetes)")
    assert dt.json("describe", "job", "kjob", "-p", "team-b")["status"] == "Pending"  # nothing was changed
    plain = dt("describe", "job", "kjob", "-p", "default", check=False)  # a project given: no hint
    assert_usage_error(plain, "no job named 'kjob'")
    assert "with its project" not in plain.stderr


@pytest.mark.slow  # CLI runs: about 10 s
def test_submits_hint_and_notebook_open_reach_a_job_of_a_kubernetes_project(team_b_on_kubernetes):
    """`dtrain submit kjob -p team-b` said to run `dtrain --backend kubernetes describe job kjob`,
    which looked in the configured project's namespace ('not found'); `notebook open` took no -p."""
    dt = team_b_on_kubernetes
    said = dt("submit", "k2", "-p", "team-b", "--", "python", "t.py").stdout
    hint = said.split("You can run '")[1].split("'")[0]
    assert hint == "dtrain describe job k2 -p team-b"
    assert dt.json(*hint.split()[1:])["backend"] == "kubernetes"  # the command works as printed
    assert_usage_error(dt("notebook", "open", "k2", "-p", "team-b", check=False), "job 'k2' is not a notebook")
    assert_usage_error(dt("notebook", "open", "k2", check=False), "no notebook named 'k2'", "-p team-b")


@pytest.mark.slow
def test_a_jobs_snapshots_are_listed_on_its_projects_backend(team_b_on_kubernetes, home):
    """The job page listed /snapshots?job=kjob on the default backend, which (since such a listing
    refuses an unknown job) answered 404 for a job that is Kubernetes'; with project= it lists there."""
    from dtrain.server.app import create_app
    from server_util import ThreadServer

    c = dtrain.Client(home=home)
    with pytest.raises(NotFoundError, match="no job named 'kjob'"):
        c.list_snapshots(job="kjob")
    assert c.list_snapshots(job="kjob", project="team-b") == []
    with pytest.raises(NotFoundError, match="no job named 'kjob'"):
        c.list_snapshots(job="kjob", project="team-x")  # a job of another project is not found
    with pytest.raises(NotFoundError, match=r"^no project named 'tem-b'"):
        c.list_snapshots(job="kjob", project="tem-b")
    import httpx

    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    try:
        http = httpx.Client(base_url=server.url)
        assert http.get("/api/v1/snapshots", params={"job": "kjob", "project": "team-b"}).json() == []
        assert http.get("/api/v1/snapshots", params={"job": "kjob"}).status_code == 404
    finally:
        server.stop()

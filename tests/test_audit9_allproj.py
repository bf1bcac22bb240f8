"""Projects on different backends, read all at once (audit 9): `dtrain list -A`, the HTTP job list
without a project and `Client.list()` walk every backend config.yaml names (here a project mapped to
the shipped fake Kubernetes API server), and a backend that does not answer is a warning, not the end
of the listing; the hints a command prints for a job of another project carry its -p."""

from __future__ import annotations

import math
import re
import shlex
import time

import pytest
import yaml

import dtrain
from conftest import Dtrain, team_b_on_kubernetes

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")


@pytest.fixture
def cluster(home, tmp_path):
    """config.yaml maps project team-b to Kubernetes (an in-memory API server), the rest is local;
    the server is handed out so that a test can stop it."""
    server = team_b_on_kubernetes(home, tmp_path, request_timeout=5)
    yield server
    server.close()


@pytest.fixture
def two_backends(cluster, home):
    """Job ljob (local, default project, ended) and job kjob (team-b, on Kubernetes), in that order."""
    client = dtrain.Client(home=home)
    client.submit(dtrain.JobSpec(name="ljob", command=["true"]))
    created = client.wait("ljob", timeout=120).created
    # a Kubernetes creationTimestamp is whole seconds: kjob in the same second as ljob would sort first
    time.sleep(max(0.0, math.floor(created) + 1.05 - time.time()))
    client.submit(dtrain.JobSpec(name="kjob", project="team-b", command=["python", "t.py"]))
    return cluster


def test_the_sdk_lists_every_projects_jobs_on_every_backend(two_backends, home):
    """Client().list() read the default backend alone: team-b's job, on Kubernetes, was missing."""
    client = dtrain.Client(home=home)
    jobs = client.list()
    assert [(j.name, j.backend, j.spec.project) for j in jobs] == [
        ("ljob", "local", "default"), ("kjob", "kubernetes", "team-b")]  # in the order they were submitted
    assert jobs.notices == ()
    assert [j.name for j in client.list(status="Pending")] == ["kjob"]
    assert [j.name for j in client.list(project="default")] == ["ljob"]
    assert [j.name for j in dtrain.Client(home=home, backend="local").list()] == ["ljob"]  # one backend asked for
    page = client.page(limit=1)
    assert (page.total, [j.name for j in page.jobs]) == (2, ["kjob"])  # newest first, across both
    assert [j.name for j in client.page(limit=1, offset=1).jobs] == ["ljob"]
    counts = {(c.project, c.status.value): c.jobs for c in client.summary().counts}
    assert counts == {("default", "Succeeded"): 1, ("team-b", "Pending"): 1}


@pytest.mark.slow
def test_list_all_projects_shows_the_kubernetes_projects_jobs(two_backends, home):
    dt = Dtrain(home)
    out = dt("list", "-A")
    rows = [line.split() for line in out.stdout.splitlines()[1:]]
    assert [(r[0], r[5]) for r in rows] == [("ljob", "default"), ("kjob", "team-b")]  # the PROJECT column
    assert not out.stderr
    assert [j["name"] for j in dt.json("list", "-A", "--json")] == ["ljob", "kjob"]
    assert [line.split()[0] for line in dt("--backend", "local", "list", "-A").stdout.splitlines()[1:]] == ["ljob"]


def test_a_backend_that_does_not_answer_is_a_warning_and_the_others_are_listed(two_backends, home):
    two_backends.close()
    dt = Dtrain(home)
    out = dt("list", "-A")
    assert [line.split()[0] for line in out.stdout.splitlines()[1:]] == ["ljob"]
    assert "Traceback" not in out.stderr
    [warning] = out.stderr.strip().splitlines()
    assert warning.startswith("dtrain: warning: jobs on the kubernetes backend (project team-b) not listed")
    assert "cannot reach the Kubernetes API" in warning
    jobs = dtrain.Client(home=home).list()
    assert [j.name for j in jobs] == ["ljob"]
    assert [line.removeprefix("dtrain: warning: ") for line in out.stderr.splitlines()] == [
        n.message for n in jobs.notices]
    assert [n.code for n in jobs.notices] == ["jobs-unlisted"]
    page = dtrain.Client(home=home).page(limit=5)
    assert [n.message for n in page.notices] == [n.message for n in jobs.notices]


def test_when_no_backend_answers_the_listing_is_the_error(cluster, home):
    """An empty list would read as 'no jobs': with every backend unreachable the first one's error is the answer."""
    (home / "config.yaml").write_text(yaml.safe_dump({
        **yaml.safe_load((home / "config.yaml").read_text()), "backend": "kubernetes",
        "project_backends": {"team-b": "kubernetes"}}))
    cluster.close()
    with pytest.raises(dtrain.DtrainError, match="cannot reach the Kubernetes API"):
        dtrain.Client(home=home).list()


@pytest.fixture
def http(home):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    import httpx

    from dtrain.server.app import create_app
    from server_util import ThreadServer

    # remote_every=0: each list reads the cluster, so that its failure shows at once (cached: test_remotes_reads)
    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600, remote_every=0))
    with httpx.Client(base_url=server.url + "/api/v1", timeout=60) as client:
        yield client
    server.stop()


def test_the_http_list_without_a_project_has_every_backends_jobs(two_backends, http):
    listed = http.get("/jobs")
    assert [(j["name"], j["project"]) for j in listed.json()] == [("ljob", "default"), ("kjob", "team-b")]
    assert listed.headers["x-total-count"] == "2" and "warning" not in listed.headers
    paged = http.get("/jobs", params={"limit": 1})
    assert ([j["name"] for j in paged.json()], paged.headers["x-total-count"]) == (["kjob"], "2")
    two_backends.cluster.fail("GET", "", 503)  # the server's pooled connections outlive a close(): refused instead
    listed = http.get("/jobs")
    assert [j["name"] for j in listed.json()] == ["ljob"]
    assert "jobs on the kubernetes backend (project team-b) not listed" in listed.headers["warning"]
    assert "not listed" in http.get("/notebooks").headers["warning"]


def _run_hint(dt: Dtrain, hint: str, **kw):
    words = shlex.split(hint)
    assert words[0] == "dtrain", hint
    return dt(*words[1:], **kw)


@pytest.mark.slow  # CLI runs: about 25 s
def test_the_hints_for_a_job_of_a_kubernetes_project_work_as_written(cluster, home):
    """`notebook start -p team-b`, `wait -p team-b` and `delete -p team-b` named follow-up commands
    without -p, which looked in the default project (local: 'no job named', or, with a job of the same
    name there, that other job: `delete same --purge` would have forgotten the local one)."""
    dt = Dtrain(home)
    dt("submit", "same", "--", "true")
    dt("submit", "same", "-p", "team-b", "--", "python", "t.py")
    said = dt("notebook", "start", "nb", "-p", "team-b").stdout
    hints = re.findall(r"'(dtrain [^']*)'", said)
    assert len(hints) == 5 and all(h.endswith(" -p team-b") for h in hints), said
    describe, listing, opening, suspend, delete = hints
    assert "Pending" in _run_hint(dt, describe).stdout
    assert "nb" in _run_hint(dt, listing).stdout
    assert "no job named" not in _run_hint(dt, opening, check=False).stderr  # not Running yet: said so
    assert "suspended" in _run_hint(dt, suspend).stdout
    assert "deleted" in _run_hint(dt, delete).stdout

    waited = dt("wait", "same", "-p", "team-b", "--timeout", "0", check=False)
    assert waited.returncode == 124
    look = waited.stderr.split("'")[-2]  # a job still Pending: describe says why it waits (it has no logs yet)
    assert look == "dtrain describe job same -p team-b"
    assert "Pending" in _run_hint(dt, look).stdout
    waited = dt("wait", "same", "nb", "-p", "team-b", "--timeout", "0", check=False)
    assert waited.returncode == 124 and waited.stderr.split("'")[-2] == "dtrain describe job same -p team-b"

    dt("delete", "same", "-p", "team-b")
    again = dt("delete", "same", "-p", "team-b", check=False)
    purge = again.stderr.split("'")[-2]
    assert purge == "dtrain delete same --purge -p team-b"
    assert "purged" in _run_hint(dt, purge).stdout
    assert dt.json("describe", "job", "same")["backend"] == "local"  # the other project's job is untouched
    missing = dt("delete", "same", "nope", "-p", "team-b", check=False)
    assert _run_hint(dt, missing.stderr.split("'")[-2]).returncode == 0  # list jobs --show-deleted -p team-b


def test_the_sdk_and_http_hints_name_the_project_given(cluster, home, http):
    client = dtrain.Client(home=home)
    client.submit(dtrain.JobSpec(name="kjob", project="team-b", command=["python", "t.py"]))
    with pytest.raises(dtrain.client.TimeoutError_, match=r"check 'dtrain describe job kjob -p team-b'$"):
        dtrain.Client(home=home).wait("kjob", timeout=0, project="team-b")
    with pytest.raises(dtrain.client.TimeoutError_, match=r"check 'dtrain describe job kjob -p team-b'$"):
        client.wait("kjob", timeout=0)  # submitted by this client: found without project=, named with it
    client.delete("kjob")
    with pytest.raises(dtrain.errors.NotFoundError, match=r"delete\('kjob', purge=True, project='team-b'\)"):
        dtrain.Client(home=home).delete("kjob", project="team-b")
    gone = http.delete("/jobs/kjob", params={"project": "team-b"})
    assert gone.status_code == 404
    assert "DELETE /api/v1/jobs/kjob?purge=true&project=team-b also forgets it" in gone.json()["error"]
    assert http.delete("/jobs/kjob", params={"project": "team-b", "purge": "true"}).status_code == 200


@pytest.mark.slow
def test_snapshot_list_takes_the_project_as_the_sdk_and_http_do(cluster, home, http):
    """`dtrain snapshot list` had no -p: a Kubernetes project's snapshots (its namespace) could be
    listed by the SDK's project= and GET /snapshots?project=, not by the CLI."""
    from conftest import assert_usage_error

    client = dtrain.Client(home=home)
    team_b = client.backend(project="team-b")
    team_b.create_volume("data", size="1Gi")
    team_b.create_snapshot("data", name="snap-b")
    client.submit(dtrain.JobSpec(name="kjob", project="team-b", command=["python", "t.py"]))
    dt = Dtrain(home)
    assert [s["name"] for s in dt.json("snapshot", "list", "-p", "team-b", "--json")] == ["snap-b"]
    assert "snap-b" in dt("snapshot", "list", "--project", "team-b").stdout
    assert "snap-b" not in dt("snapshot", "list").stdout  # the default project's backend: local
    assert [s.name for s in client.list_snapshots(project="team-b")] == ["snap-b"]
    assert [s["name"] for s in http.get("/snapshots", params={"project": "team-b"}).json()] == ["snap-b"]
    assert dt.json("snapshot", "list", "--job", "kjob", "-p", "team-b", "--json") == []
    for argv, query in ((["-p", "tem-b"], {"project": "tem-b"}), (["--job", "kjob"], {"job": "kjob"}),
                        (["--job", "kjob", "-p", "Team_B"], {"job": "kjob", "project": "Team_B"})):
        said = dt("snapshot", "list", *argv, check=False)
        assert_usage_error(said)
        answer = http.get("/snapshots", params=query)
        assert answer.status_code in (404, 422)
        in_cli_words = answer.json()["error"].replace("?project=", "-p ")  # each door names the project its way
        assert in_cli_words == said.stderr.strip().removeprefix("dtrain: error: "), (argv, answer.text)


@pytest.mark.slow  # CLI runs: about 25 s
def test_project_list_shows_the_projects_of_every_backend(cluster, home, http):
    """`dtrain project create team-b` made the namespace on the cluster, and `project list` (the
    default backend's alone) did not show it."""
    dt = Dtrain(home)
    assert "created" in dt("project", "create", "team-b").stdout
    listed = {p["name"]: p["backend"] for p in dt.json("project", "list", "--json")}
    assert listed == {"default": "local", "team-b": "kubernetes"}
    rows = [line.split()[0] for line in dt("project", "list").stdout.splitlines()[1:]]
    assert rows == ["default", "team-b"]
    assert [p["name"] for p in http.get("/projects").json()] == ["default", "team-b"]
    assert "already exists" in dt("project", "create", "team-b").stdout  # found where it is
    cluster.cluster.fail("GET", "", 503)  # the cluster stops answering: the local projects still, and why not the rest
    out = dt("project", "list")
    assert [line.split()[0] for line in out.stdout.splitlines()[1:]] == ["default"]
    [warning] = out.stderr.strip().splitlines()
    assert warning.startswith("dtrain: warning: projects on the kubernetes backend (project team-b) not listed"), warning
    got = http.get("/projects")
    assert [p["name"] for p in got.json()] == ["default"]
    assert "projects on the kubernetes backend (project team-b) not listed" in got.headers["warning"]


@pytest.mark.slow
def test_the_kubernetes_backends_own_hints_carry_the_project(cluster, home):
    """A job name taken in team-b's namespace said "delete it with 'dtrain delete kb'", which looks in
    the default project (local here): the hint did not work as printed."""
    dt = Dtrain(home)
    dt("submit", "kb", "-p", "team-b", "--", "python", "t.py")
    taken = dt("submit", "kb", "-p", "team-b", "--", "python", "t.py", check=False)
    assert taken.returncode != 0
    hint = taken.stderr.split("'")[3]
    assert hint == "dtrain delete kb -p team-b", taken.stderr
    assert "deleted" in _run_hint(dt, hint).stdout

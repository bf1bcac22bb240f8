"""Hints across backends (audit 9): a command a message names works as printed where config.yaml
makes Kubernetes the default and sends a project to the local backend (the reverse of
conftest.team_b_on_kubernetes), and reads of every project walk each backend once."""

from __future__ import annotations

import re
import shlex

import pytest
import yaml

import dtrain
from conftest import Dtrain, assert_usage_error, team_b_on_kubernetes

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")


@pytest.fixture
def team_a_on_local(home, tmp_path):
    """config.yaml: Kubernetes (the shipped in-memory API server) the default, project team-a local."""
    server = team_b_on_kubernetes(home, tmp_path, backend="kubernetes", project_backends={"team-a": "local"})
    dt = Dtrain(home)
    dt("project", "create", "team-a")
    yield dt
    for job in dtrain.Client(home=home).list(project="team-a"):
        if job.status.value in ("Pending", "Running"):
            dt("delete", job.name, "-p", "team-a", check=False)
    server.close()


def _hinted(text: str, verb: str) -> list[str]:
    """The words of the `dtrain VERB ...` command quoted in `text`."""
    found = re.search(rf"'dtrain ([^']*\b{verb}\b[^']*)'", text)
    assert found, f"no 'dtrain ... {verb} ...' in {text!r}"
    return shlex.split(found.group(1))


@pytest.mark.slow
def test_local_backend_hints_carry_the_project_where_kubernetes_is_the_default(team_a_on_local, home):
    """Each said 'dtrain logs j2 --rank 0', 'dtrain delete j1', 'dtrain resume j1': run as printed,
    they looked on the default (Kubernetes) backend, where the job is not."""
    dt = team_a_on_local
    dt("submit", "fails", "-p", "team-a", "--", "python", "-c", "import sys; sys.exit(3)")
    dt("wait", "fails", "-p", "team-a", "--timeout", "60", check=False)
    message = dt.json("describe", "job", "fails", "-p", "team-a")["message"]
    assert dt(*_hinted(message, "logs")).returncode == 0  # the supervisor's message

    again = dt("submit", "fails", "-p", "team-a", "--", "python", "-c", "pass", check=False)
    assert_usage_error(again, "already exists")
    assert "deleted" in dt(*_hinted(again.stderr, "delete")).stdout  # the store's refusal

    dt("submit", "sleeps", "-p", "team-a", "--", "python", "-c", "import time; time.sleep(60)")
    dt.json("describe", "job", "sleeps", "-p", "team-a")
    dt("suspend", "sleeps", "-p", "team-a")
    message = dt.json("describe", "job", "sleeps", "-p", "team-a")["message"]
    assert "resumed" in dt(*_hinted(message, "resume")).stdout  # the backend's own message
    dt("delete", "sleeps", "-p", "team-a")


def test_local_backend_is_handed_the_clients_command(team_a_on_local, home):
    client = dtrain.Client(home=home)
    local = client.backend(project="team-a")
    assert local.name == "local"
    assert local.cmd("logs j", "team-a") == client.command_for("logs j", backend="local", project="team-a")
    assert local.cmd("logs j", "team-a") == "dtrain logs j -p team-a"
    assert local.cmd("logs j", "default") == "dtrain --backend local logs j"


def test_project_list_asks_a_backend_that_does_not_answer_once(home):
    """list_projects walked the backends twice (projects, then summary): a cluster that does not
    answer was asked twice, each ask its own timeout, for one `dtrain project list`."""
    from dtrain.backends.local.backend import LocalBackend
    from dtrain.errors import BackendError

    class Down(LocalBackend):
        name = "kubernetes"
        asked = 0

        def _ask(self, *args, **kwargs):
            Down.asked += 1
            raise BackendError("cannot reach the Kubernetes API server: timed out")

        list_projects = summary = page = list = _ask

    (home / "config.yaml").write_text(yaml.safe_dump({"project": "default", "backend": "local",
                                                      "project_backends": {"team-b": "kubernetes"}}))
    client = dtrain.Client(home=home, backends={"kubernetes": Down(home / "elsewhere")})
    listed = client.list_projects()
    assert [p.name for p in listed] == ["default"]
    assert [n.code for n in listed.notices] == ["projects-unlisted"]
    assert Down.asked == 1


def test_the_wait_routes_503_names_the_backend_the_server_looked_on(team_a_on_local, home):
    """`dtrain --backend local server` waits on the local backend: the 503's 'dtrain wait long' (-p
    added by hand, never --backend) looked on Kubernetes, the default."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from dtrain.server.routes_jobs import _again

    class Clients:  # the app's per-thread clients, as `dtrain --backend local server` makes them
        def get(self):
            return dtrain.Client(home=home, backend="local")

    assert _again(Clients(), "wait long", None) == "dtrain --backend local wait long"
    assert _again(Clients(), "wait long", "team-a") == "dtrain wait long -p team-a"


def test_a_submit_that_loses_the_race_for_its_name_names_the_project(team_a_on_local, home, monkeypatch):
    """Two submits of one name at once: the one whose insert came second was refused by the store's
    own check, whose 'dtrain delete race' looked on the default (Kubernetes) backend."""
    from dtrain.spec import JobSpec

    dt = team_a_on_local
    client = dtrain.Client(home=home)
    store = client.backend(project="team-a").store
    checked = store.check_free

    def then_the_other_submit(name, cmd=None):  # submit's own check passes, then the rival's insert lands
        free = checked(name, cmd)
        monkeypatch.setattr(store, "check_free", checked)
        dtrain.Client(home=home).submit(JobSpec(name=name, project="team-a", command=["sleep", "60"]))
        return free

    monkeypatch.setattr(store, "check_free", then_the_other_submit)
    with pytest.raises(dtrain.errors.ConflictError) as lost:
        client.submit(JobSpec(name="race", project="team-a", command=["true"]))
    assert str(lost.value).startswith("a job named 'race' already exists")
    assert "deleted" in dt(*_hinted(str(lost.value), "delete")).stdout


@pytest.mark.parametrize("verb", ["exec", "resume", "suspend"])
def test_a_verb_refused_for_a_jobs_state_names_the_list_that_shows_it(team_a_on_local, verb):
    """'see 'dtrain list'' listed the default project's jobs, on Kubernetes: not the job's."""
    dt = team_a_on_local
    dt("submit", "ended", "-p", "team-a", "--", "python", "-c", "pass")
    dt("wait", "ended", "-p", "team-a", "--timeout", "60")
    refused = dt(verb, "ended", "-p", "team-a", *(["--", "true"] if verb == "exec" else []), check=False)
    assert_usage_error(refused, "is Succeeded")
    assert "ended" in dt(*_hinted(refused.stderr, "list")).stdout


def test_logs_of_a_queued_job_names_the_follow_that_finds_it(team_a_on_local, home):
    dt = Dtrain(home, env={"DTRAIN_GPUS": "1"})
    dt("submit", "first", "-p", "team-a", "--gpu", "1", "--", "sleep", "60")
    dt("submit", "queued", "-p", "team-a", "--gpu", "1", "--", "true")
    assert dt.json("describe", "job", "queued", "-p", "team-a")["status"] == "Pending"
    said = dt("logs", "queued", "-p", "team-a").stderr
    assert "no logs yet" in said
    assert _hinted(said, "logs") == ["logs", "queued", "-f", "-p", "team-a"]


def test_notebook_opens_refusal_names_commands_that_find_the_notebook(team_a_on_local):
    """'notebook 'nb' is Suspended: start it again with 'dtrain resume nb'': the default backend
    (Kubernetes) answered that command 'not found'."""
    dt = team_a_on_local
    dt("notebook", "nb", "-p", "team-a")
    dt("suspend", "nb", "-p", "team-a")
    refused = dt("notebook", "open", "nb", "-p", "team-a", check=False)
    assert_usage_error(refused, "is Suspended")
    assert "resumed" in dt(*_hinted(refused.stderr, "resume")).stdout


@pytest.mark.slow
def test_a_job_not_in_its_projects_namespace_names_the_list_of_that_namespace(home, tmp_path):
    """'job 'nope' not found in namespace dtrain-team-b: see 'dtrain list'': that listed the
    default project's jobs (local), not the namespace looked in."""
    server = team_b_on_kubernetes(home, tmp_path)
    try:
        dt = Dtrain(home)
        dt("submit", "there", "-p", "team-b", "--", "python", "t.py")
        refused = dt("describe", "job", "nope", "-p", "team-b", check=False)
        assert_usage_error(refused, "not found in namespace")
        assert "there" in dt(*_hinted(refused.stderr, "list")).stdout
    finally:
        server.close()


def test_a_read_only_servers_notebook_url_refusal_names_the_open_that_finds_it(team_a_on_local, home):
    """The 403 said 'dtrain notebook open nb', which looked on Kubernetes (the default), not where
    the server had looked for project team-a's notebook."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    import httpx

    from dtrain.server.app import create_app
    from server_util import ThreadServer

    dt = team_a_on_local
    dt("notebook", "nb", "-p", "team-a")
    dt("suspend", "nb", "-p", "team-a")
    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), read_only=True, sample_every=3600))
    try:
        refused = httpx.get(f"{server.url}/api/v1/notebooks/nb/url", params={"project": "team-a"}, timeout=60)
    finally:
        server.stop()
    assert refused.status_code == 403
    opened = dt(*_hinted(refused.json()["error"], "open"), check=False)
    assert_usage_error(opened, "notebook 'nb' is Suspended")  # found: its state is the refusal, not 'not found'

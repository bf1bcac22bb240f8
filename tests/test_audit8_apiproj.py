"""A job of a project that config.yaml's `project_backends` sends to another backend (Kubernetes,
here the shipped fake API server through a kubeconfig), as each door reaches it (audit 8): the
CLI's -p, the SDK's project=, the HTTP API's ?project= on every route on one job."""

from __future__ import annotations

import pytest
import yaml

import dtrain
from conftest import Dtrain, assert_usage_error
from dtrain.errors import NotFoundError

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")


@pytest.fixture
def team_b_on_kubernetes(home, tmp_path):
    """config.yaml maps project team-b to Kubernetes (an in-memory API server) and leaves the rest
    local; job kjob is team-b's, submitted there by the CLI (so no server thread's Client knows it)."""
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer

    server = FakeKubeServer(FakeCluster()).start()
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(kubeconfig)
    (home / "config.yaml").write_text(yaml.safe_dump({
        "project": "default", "backend": "local", "project_backends": {"team-b": "kubernetes"},
        "kubernetes": {"kubeconfig": str(kubeconfig), "image": "img:1"}}))
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
        assert_usage_error(dt(*argv, check=False), "no project named 'tem-b' (projects: ")
    with pytest.raises(NotFoundError, match=r"^no project named 'tem-b' \(projects: "):
        dtrain.Client(home=home).logs("kjob", project="tem-b")

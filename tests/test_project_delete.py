"""`dtrain project delete NAME` (Backend.delete_project, Client.delete_project, DELETE /projects/{name}):
`project` had create, list and set but no delete (`project delete x` was argparse's 'invalid choice', and
`dtrain delete project x` said projects are not deleted). A project goes only once it holds nothing: jobs
not Deleted, notebooks, volumes and snapshots refuse it, naming the commands that delete them; `default`
and the configured default project are refused. Locally its row (the GPU quota) goes; on Kubernetes its
namespace where dtrain made it, else only dtrain's quota, watcher account and labels there.
"""

from __future__ import annotations

import pytest
from conftest import assert_usage_error

from dtrain.backends.checks import project_in_use
from dtrain.backends.local.backend import LocalBackend
from dtrain.client import Client
from dtrain.errors import ConflictError, NotFoundError, NotSupportedError
from dtrain.spec import JobSpec


def _done_job(backend, name: str, project: str) -> None:
    backend.submit(JobSpec(name=name, command=("true",), project=project))
    backend.wait(name, timeout=60)


# ---- the local backend ----------------------------------------------------------------------------
def test_a_local_project_goes_with_its_quota_once_its_jobs_are_deleted(home):
    local = LocalBackend(home)
    local.create_project("team-a", gpu_quota=0)
    _done_job(local, "j1", "team-a")  # Succeeded, not Deleted: still the project's
    with pytest.raises(ConflictError) as err:
        local.delete_project("team-a")
    assert str(err.value) == ("project 'team-a' still has 1 job (j1): delete it first ('dtrain delete j1'), "
                              "then the project")
    assert [p.name for p in local.list_projects()] == ["default", "team-a"]  # nothing removed
    local.delete("j1")
    gone = local.delete_project("team-a")
    assert (gone.name, gone.backend, gone.removed, gone.kept) == ("team-a", "local", ("GPU quota 0",), None)
    assert [p.name for p in local.list_projects()] == ["default"]
    assert local.get("j1").spec.project == "team-a"  # a Deleted job keeps its record
    local.create_project("team-a")  # made anew: no quota left over
    assert {p.name: p.gpu_quota for p in local.list_projects()}["team-a"] is None


def test_a_submit_whose_project_is_deleted_after_its_check_stores_no_job(home, monkeypatch):
    """submit checks the project, then inserts the job: a `project delete` between the two (another process)
    left a job in a project that was gone. The insert checks the row again in its own transaction."""
    local = LocalBackend(home)
    local.create_project("team-a")
    check_free, calls = local.store.check_free, []

    def deleted_meanwhile(name, cmd=None):  # the delete lands after submit's project check, before its insert
        if not calls:  # submit's own call (insert_job calls it again, in its transaction)
            LocalBackend(home).delete_project("team-a")
        calls.append(name)
        return check_free(name, cmd)
    monkeypatch.setattr(local.store, "check_free", deleted_meanwhile)
    with pytest.raises(NotFoundError, match=r"^no project named 'team-a'; create it first with 'dtrain project "
                                            r"create team-a' \(projects: default\)$"):
        local.submit(JobSpec(name="j1", command=("true",), project="team-a"))
    monkeypatch.undo()
    assert local.list() == [] and [p.name for p in local.list_projects()] == ["default"]
    local.submit(JobSpec(name="j2", command=("true",)))  # `default` needs no row


def test_default_and_unknown_projects_are_refused_in_one_line(home):
    local = LocalBackend(home)
    local.create_project("team-a")
    with pytest.raises(ConflictError, match="^project 'default' cannot be deleted: every job given no project runs "
                                            "in it; to drop its GPU quota use 'dtrain project create default "
                                            "--no-gpu-quota'$"):
        local.delete_project("default")
    with pytest.raises(NotFoundError, match=r"^no project named 'team-aa' \(did you mean 'team-a'\? projects: "
                                            r"default, team-a\); see 'dtrain project list'$"):
        local.delete_project("team-aa")


def test_the_refusal_names_each_kind_and_the_commands_that_delete_them():
    err = project_in_use("lanes", {"job": ["b", "a"], "notebook": ["nb"], "volume": ["data"], "snapshot": []},
                         lambda words: f"dtrain {words} -p lanes")
    assert str(err) == ("project 'lanes' still has 2 jobs (a b), 1 notebook (nb), 1 volume (data): delete them "
                        "first ('dtrain delete a b nb -p lanes', then 'dtrain volume delete data -p lanes'), then the "
                        "project")
    many = project_in_use("x", {"snapshot": [f"s{i}" for i in range(7)], "job": [f"j{i}" for i in range(6)]},
                          lambda words: f"dtrain {words} -p x")
    # the summary shortens; each command names every one, so that it runs as pasted (it ended in '...')
    assert str(many) == ("project 'x' still has 7 snapshots (s0 s1 s2 s3 s4 and 2 more), 6 jobs (j0 j1 j2 j3 j4 and "
                         "1 more): delete them first ('dtrain delete j0 j1 j2 j3 j4 j5 -p x', then 'dtrain snapshot "
                         "delete s0 s1 s2 s3 s4 s5 s6 -p x'), then the project")
    assert project_in_use("x", {"job": [], "volume": []}, str) is None


def test_the_sdk_refuses_the_configured_default_project(home):
    client = Client(home=home)
    client.create_project("team-a")
    client.set_default_project("team-a")
    with pytest.raises(ConflictError, match="^project 'team-a' is the default project .*'dtrain project set "
                                            "default'"):
        client.delete_project("team-a")
    client.set_default_project("default")
    assert client.delete_project("team-a").name == "team-a"
    assert not client.has_project("team-a")


def test_the_projects_config_yaml_entry_goes_with_it_or_is_said_kept(home):
    """config.yaml's project_backends entry outlived the project, and would send a new project of the name
    to that backend; it goes, unless config.yaml is a link, which is never written through."""
    from dtrain.config import UserConfig

    client = Client(home=home)
    for name in ("team-a", "team-b"):
        client.create_project(name)
        client.set_default_backend("local", project=name)
    gone = client.delete_project("team-a")
    assert gone.removed == ("config.yaml's project_backends entry team-a: local",) and gone.kept is None
    assert UserConfig.load(home).project_backends == {"team-b": "local"}
    real = home / "real.yaml"
    (home / "config.yaml").rename(real)
    (home / "config.yaml").symlink_to(real)
    kept = Client(home=home).delete_project("team-b")
    assert kept.removed == () and kept.kept.startswith(
        f"config.yaml's project_backends entry team-b: local stays: {home / 'config.yaml'} is a symbolic link")
    assert (home / "config.yaml").is_symlink() and UserConfig.load(home).project_backends == {"team-b": "local"}
    assert not Client(home=home).has_project("team-b")  # the project went all the same


def test_sagemaker_says_why_it_has_no_project_to_delete(home):
    pytest.importorskip("boto3", reason="the 'sagemaker' extra is not installed")
    from test_sagemaker_backend import CFG

    from dtrain.backends.sagemaker.backend import SageMakerBackend

    with pytest.raises(NotSupportedError, match="^SageMaker keeps no projects, so there is none to delete: a job's "
                                                "project is only its dtrain:project tag, set by submit -p "
                                                r"\('dtrain list -p team-b' lists its jobs\)$"):
        SageMakerBackend(CFG, home=home).delete_project("team-b")


# ---- the CLI --------------------------------------------------------------------------------------
def test_cli_project_delete(dt):
    dt("project", "create", "team-a", "--gpu-quota", "0")
    dt("submit", "j1", "-p", "team-a", "--", "true")
    dt("wait", "j1", "-p", "team-a")
    proc = dt("project", "delete", "team-a", check=False)
    assert_usage_error(proc, "project 'team-a' still has 1 job (j1): delete it first "
                             "('dtrain delete j1 -p team-a'), then the project")
    dt("delete", "j1", "-p", "team-a")
    assert dt("project", "delete", "team-a").stdout == "project 'team-a' deleted (removed: GPU quota 0)\n"
    assert [p["name"] for p in dt.json("project", "list")] == ["default"]
    dt("project", "create", "team-b")
    assert dt.json("project", "delete", "team-b") == {"name": "team-b", "backend": "local", "removed": [],
                                                      "kept": None}
    assert_usage_error(dt("project", "delete", "team-b", check=False), "no project named 'team-b'")
    assert_usage_error(dt("delete", "project", "team-a", check=False),
                       "'dtrain delete' is for jobs: use 'dtrain project delete NAME'")


# ---- the HTTP API ---------------------------------------------------------------------------------
def test_http_delete_project(home):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain.server.app import create_app

    local = LocalBackend(home)
    local.create_project("team-a", gpu_quota=0)
    _done_job(local, "j1", "team-a")
    http = TestClient(create_app(lambda: Client(home=home, backends={"local": local}), sample_every=3600),
                      base_url="http://127.0.0.1:8000")
    refused = http.delete("/api/v1/projects/team-a")
    assert refused.status_code == 409 and "still has 1 job (j1)" in refused.json()["error"]
    local.delete("j1")
    gone = http.delete("/api/v1/projects/team-a")
    assert gone.status_code == 200, gone.text
    assert gone.json() == {"name": "team-a", "backend": "local", "removed": ["GPU quota 0"], "kept": None}
    assert http.delete("/api/v1/projects/team-a").status_code == 404
    assert http.delete("/api/v1/projects/default").status_code == 409
    schema = http.get("/api/v1/openapi.json").json()
    answer = schema["paths"]["/api/v1/projects/{name}"]["delete"]["responses"]["200"]
    assert answer["content"]["application/json"]["schema"]["$ref"].endswith("/DeletedProject")

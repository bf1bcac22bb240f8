"""The HTTP API against the CLI: the same refusals (the right 4xx, never a 500, and the CLI's own
line), the same records for the same verbs, and a schema that lists the statuses the server sends."""

from __future__ import annotations

import json

import pytest

from conftest import Dtrain, usage_line
from server_util import ServerProcess

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")

BAD = {"name": "j", "command": ["true"]}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("api-home")
    (home / "config.yaml").write_text(f"storage_classes: {{fast: {tmp_path_factory.mktemp('fast-disk')}}}\n")
    srv = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path_factory.mktemp("api-work"))
    dt = srv.dtrain()
    dt("project", "create", "team", "--gpu-quota", "1")
    dt("volume", "create", "data", "--size", "1Mi")
    dt("snapshot", "create", "data", "--name", "data-s1")
    dt("submit", "taken", "--", "true")
    dt("wait", "taken")
    dt("submit", "gone", "--", "true")
    dt("wait", "gone")
    dt("delete", "gone")
    yield srv
    srv.stop()




JOB = "/api/v1/jobs"
NB = "/api/v1/notebooks"
# (CLI words, method, path, body, the API's status): the CLI refuses with exit 2 and one line, the API
# with that status and the same line, and nothing is stored by either
CASES = [
    (["submit", "Bad_Name", "--", "true"], "POST", JOB, {**BAD, "name": "Bad_Name"}, 422),
    (["submit", "j", "--gpu", "-1", "--", "true"], "POST", JOB, {**BAD, "gpu": -1}, 422),
    (["submit", "j", "--gpu", "17", "--", "true"], "POST", JOB, {**BAD, "gpu": 17}, 422),
    (["submit", "j", "--gpu", "0.5", "--", "true"], "POST", JOB, {**BAD, "gpu": 0.5}, 422),
    (["submit", "j", "--gpu", "3", "--", "true"], "POST", JOB, {**BAD, "gpu": 3}, 409),
    (["submit-dist", "j", "--processes", "0", "--", "true"], "POST", JOB,
     {**BAD, "processes": 0, "launcher": "torchrun"}, 422),
    (["submit-dist", "j", "--processes", "5000", "--", "true"], "POST", JOB,
     {**BAD, "processes": 5000, "launcher": "torchrun"}, 422),
    (["submit", "j", "--cpu", "0", "--", "true"], "POST", JOB, {**BAD, "cpu": 0}, 422),
    (["submit", "j", "--cpu", "2000", "--", "true"], "POST", JOB, {**BAD, "cpu": 2000}, 422),
    (["submit", "j", "--max-restarts", "-1", "--", "true"], "POST", JOB, {**BAD, "max_restarts": -1}, 422),
    (["submit", "j", "--max-restarts", "101", "--", "true"], "POST", JOB, {**BAD, "max_restarts": 101}, 422),
    (["submit", "j", "--memory", "8GB", "--", "true"], "POST", JOB, {**BAD, "memory": "8GB"}, 422),
    (["submit", "j", "--memory", "1", "--", "true"], "POST", JOB, {**BAD, "memory": "1"}, 422),
    (["submit", "j", "--memory", "500m", "--", "true"], "POST", JOB, {**BAD, "memory": "500m"}, 422),
    (["submit", "j", "--memory", "1e3", "--", "true"], "POST", JOB, {**BAD, "memory": "1e3"}, 422),
    (["submit", "j", "--backend", "sagemaker", "--channel", "d=fsx://fs-01234567/mnt/../x", "--", "true"], "POST",
     JOB, {**BAD, "backend": "sagemaker", "sagemaker": {"channels": ["d=fsx://fs-01234567/mnt/../x"]}}, 422),
    (["submit", "j", "--backend", "sagemaker", "--channel", "d=efs://fs-01234567/" + "a" * 4096, "--", "true"], "POST",
     JOB, {**BAD, "backend": "sagemaker", "sagemaker": {"channels": ["d=efs://fs-01234567/" + "a" * 4096]}}, 422),
    (["submit", "j", "--pvc", "nope:/mnt", "--", "true"], "POST", JOB, {**BAD, "volumes": ["nope:/mnt"]}, 404),
    (["submit", "j", "--pvc", "nope", "--", "true"], "POST", JOB, {**BAD, "volumes": ["nope"]}, 422),
    (["submit", "j", "-e", "ENABLE_SNAPSHOT=1", "--", "true"], "POST", JOB,
     {**BAD, "env": {"ENABLE_SNAPSHOT": "1"}}, 422),
    (["submit", "j", "-e", "ENABLE_SNAPSHOT=maybe", "--", "true"], "POST", JOB,
     {**BAD, "env": {"ENABLE_SNAPSHOT": "maybe"}}, 422),
    (["submit", "j", "--snapshot-on-success", "nope", "--", "true"], "POST", JOB,
     {**BAD, "snapshot_on_success": "nope"}, 404),
    (["submit", "j", "-p", "nope", "--", "true"], "POST", JOB, {**BAD, "project": "nope"}, 404),
    (["submit", "j", "-p", "team", "--gpu", "2", "--", "true"], "POST", JOB, {**BAD, "project": "team", "gpu": 2},
     409),
    (["submit", "j", "--", "no-such-command-x"], "POST", JOB, {**BAD, "command": ["no-such-command-x"]}, 422),
    (["submit", "j", "--working-dir", "rel", "--", "true"], "POST", JOB, {**BAD, "working_dir": "rel"}, 422),
    (["submit", "taken", "--", "true"], "POST", JOB, {**BAD, "name": "taken"}, 409),
    (["describe", "job", "nope"], "GET", f"{JOB}/nope", None, 404),
    (["project", "create", "p", "--gpu-quota", "-1"], "POST", "/api/v1/projects", {"name": "p", "gpu_quota": -1}, 422),
    (["project", "create", "p", "--gpu-quota", "3"], "POST", "/api/v1/projects", {"name": "p", "gpu_quota": 3}, 409),
    (["project", "create", "P_Q"], "POST", "/api/v1/projects", {"name": "P_Q"}, 422),
    (["volume", "create", "v", "--size", "10GB"], "POST", "/api/v1/volumes", {"name": "v", "size": "10GB"}, 422),
    (["volume", "create", "v", "--size", "0"], "POST", "/api/v1/volumes", {"name": "v", "size": "0"}, 422),
    (["volume", "create", "v", "--size", "100"], "POST", "/api/v1/volumes", {"name": "v", "size": "100"}, 422),
    (["volume", "create", "data"], "POST", "/api/v1/volumes", {"name": "data"}, 409),
    (["volume", "describe", "nope"], "GET", "/api/v1/volumes/nope", None, 404),
    (["volume", "delete", "nope"], "DELETE", "/api/v1/volumes/nope", None, 404),
    (["snapshot", "create", "nope"], "POST", "/api/v1/snapshots", {"volume": "nope"}, 404),
    (["snapshot", "create", "data", "--name", "data-s1"], "POST", "/api/v1/snapshots",
     {"volume": "data", "name": "data-s1"}, 409),
    (["snapshot", "describe", "nope"], "GET", "/api/v1/snapshots/nope", None, 404),
    (["snapshot", "restore", "nope", "--to", "x"], "POST", "/api/v1/snapshots/nope/restore", {"to": "x"}, 404),
    (["snapshot", "restore", "data-s1", "--to", "data"], "POST", "/api/v1/snapshots/data-s1/restore",
     {"to": "data"}, 409),
    # notebooks: `dtrain notebook start|list|open` and POST /notebooks, GET /notebooks, GET /notebooks/{name}/url
    (["notebook", "Bad_Name"], "POST", NB, {"name": "Bad_Name"}, 422),
    (["notebook", "nb", "--gpu", "-1"], "POST", NB, {"name": "nb", "gpu": -1}, 422),
    (["notebook", "nb", "--gpu", "3"], "POST", NB, {"name": "nb", "gpu": 3}, 409),
    (["notebook", "nb", "--cpu", "0"], "POST", NB, {"name": "nb", "cpu": 0}, 422),
    (["notebook", "nb", "--memory", "8GB"], "POST", NB, {"name": "nb", "memory": "8GB"}, 422),
    (["notebook", "nb", "--idle-timeout", "10"], "POST", NB, {"name": "nb", "idle_timeout": 10}, 422),
    (["notebook", "nb", "--pvc", "nope:/home/jovyan/work"], "POST", NB,
     {"name": "nb", "volumes": ["nope:/home/jovyan/work"]}, 404),
    (["notebook", "nb", "--pvc", "nope"], "POST", NB, {"name": "nb", "volumes": ["nope"]}, 422),
    (["notebook", "nb", "-p", "nope"], "POST", NB, {"name": "nb", "project": "nope"}, 404),
    (["notebook", "nb", "-p", "team", "--gpu", "2"], "POST", NB, {"name": "nb", "project": "team", "gpu": 2}, 409),
    (["notebook", "start", "taken"], "POST", NB, {"name": "taken"}, 409),
    (["notebook", "list", "-p", "nope"], "GET", f"{NB}?project=nope", None, 404),
    (["notebook", "open", "nope"], "GET", f"{NB}/nope/url", None, 404),
    (["notebook", "open", "taken"], "GET", f"{NB}/taken/url", None, 422),
]


def _stored(http) -> tuple:
    return tuple(http.get(p).json() for p in (JOB, f"{JOB}?status=Deleted", "/api/v1/volumes", "/api/v1/snapshots",
                                              "/api/v1/projects"))


@pytest.mark.slow  # a CLI run per case: about 40 s in all
@pytest.mark.parametrize("words, method, path, body, status", CASES, ids=[" ".join(c[0][:4]) for c in CASES])
def test_the_api_refuses_as_the_cli_does(server, words, method, path, body, status):
    before = _stored(server.http)
    said = usage_line(server.dtrain()(*words, check=False))
    r = server.http.request(method, path, json=body)
    assert r.status_code == status, r.text
    if said.startswith("invalid --pvc "):  # each door names what its user gave: the flag, the body's field
        flag, fix = said.split(": use ", 1)
        assert r.json()["error"] == flag.replace("--pvc", "volumes: entry") + ": use " + fix.replace("--pvc ", "")
    else:
        assert r.json()["error"] == said
    assert _stored(server.http) == before  # neither door stored anything


@pytest.mark.slow
def test_the_api_answers_the_cli_records(server):
    dt = server.dtrain()
    http = server.http
    for words, path in ((["describe", "job", "taken"], f"{JOB}/taken"), (["list", "-A"], JOB),
                        (["volume", "describe", "data"], "/api/v1/volumes/data"), (["volume", "list"], "/api/v1/volumes"),
                        (["snapshot", "describe", "data-s1"], "/api/v1/snapshots/data-s1"),
                        (["snapshot", "list"], "/api/v1/snapshots"), (["project", "list"], "/api/v1/projects"),
                        (["nodes"], "/api/v1/nodes")):
        assert http.get(path).json() == dt.json(*words), words


def test_the_api_lists_the_storage_classes_as_volume_classes_does(server):
    """GET /api/v1/storage-classes is `dtrain volume classes --json` (free space aside: other
    programs write to the disk between the two reads)."""
    def steady(classes):
        return [{k: v for k, v in c.items() if k != "free_bytes"} for c in classes]

    r = server.http.get("/api/v1/storage-classes")
    assert r.status_code == 200, r.text
    assert steady(r.json()) == steady(server.dtrain().json("volume", "classes"))
    assert [(c["name"], c["default"]) for c in r.json()][:2] == [("local", True), ("fast", False)]
    schema = server.http.get("/api/v1/openapi.json").json()
    [answer] = schema["paths"]["/api/v1/storage-classes"]["get"]["responses"]["200"]["content"].values()
    assert answer["schema"]["items"]["$ref"].endswith("/StorageClass")  # typed, not a free-form object


def test_a_deleted_snapshot_is_no_longer_the_volumes_head(server):
    """The volume's head_snapshot (what a job's data starts from, its lineage) named a deleted
    snapshot, and after a new snapshot of another volume took the name, that one."""
    http = server.http
    assert http.post("/api/v1/volumes", json={"name": "headed", "size": "1Mi"}).status_code == 201
    for name in ("headed-1", "headed-2"):
        assert http.post("/api/v1/snapshots", json={"volume": "headed", "name": name}).status_code == 201
    head = lambda: http.get("/api/v1/volumes/headed").json()["extra"]["head_snapshot"]  # noqa: E731
    assert head() == "headed-2"
    assert http.delete("/api/v1/snapshots/headed-1").status_code == 200  # not the head: it stays
    assert head() == "headed-2"
    assert http.delete("/api/v1/snapshots/headed-2").status_code == 200
    assert head() is None


def test_a_volume_moves_to_another_class_over_the_api_as_with_volume_update(server):
    http, dt = server.http, server.dtrain()
    dt("volume", "create", "moved", "--size", "1Mi")
    r = http.patch("/api/v1/volumes/moved", json={"storage_class": "fast"})
    assert r.status_code == 200, r.text
    assert r.json()["storage_class"] == "fast"
    assert http.get("/api/v1/volumes/moved").json() == dt.json("volume", "describe", "moved")
    for words, body, status in ((["volume", "update", "moved", "--class", "nope"], {"storage_class": "nope"}, 404),
                                (["volume", "update", "moved", "--class", "Bad_Class"], {"storage_class": "Bad_Class"},
                                 422)):
        said = usage_line(dt(*words, check=False))
        r = http.patch("/api/v1/volumes/moved", json=body)
        assert (r.status_code, r.json()["error"]) == (status, said)
    said = usage_line(dt("volume", "update", "nope", "--class", "fast", check=False))
    r = http.patch("/api/v1/volumes/nope", json={"storage_class": "fast"})
    assert (r.status_code, r.json()["error"]) == (404, said)


def test_the_store_is_verified_over_the_api_as_with_snapshot_verify(server):
    http, dt = server.http, server.dtrain()
    one = http.post("/api/v1/snapshots/data-s1/verify")
    assert one.status_code == 200, one.text
    assert one.json() == dt.json("snapshot", "verify", "data-s1")
    assert one.json()["ok"] and one.json()["snapshots"] == ["data-s1"]
    every = http.post("/api/v1/verify").json()
    assert every["ok"] and "data-s1" in every["snapshots"]
    said = usage_line(dt("snapshot", "verify", "nope", check=False))
    r = http.post("/api/v1/snapshots/nope/verify")
    assert (r.status_code, r.json()["error"]) == (404, said)


def test_the_schema_lists_every_status_a_route_answers(server):
    """A client generated from the schema met undocumented statuses: a notebook without JupyterLab
    (503), a failing store (507) or backend (502), a read-only server's 403."""
    paths = server.http.get("/api/v1/openapi.json").json()["paths"]
    for path, methods in paths.items():
        for method, op in methods.items():
            codes = set(op["responses"])
            assert {"401", "404", "422", "501", "502", "503", "507"} <= codes, (method, path, codes)
            if method != "get":
                assert {"403", "413"} <= codes, (method, path, codes)

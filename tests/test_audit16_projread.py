"""GET /projects/{name} and `create_project` read one project: GET /projects/{name} read the whole
project list (every project of every backend, each one's jobs counted; on Kubernetes every dtrain
namespace listed, each one's jobs, quota and pods read) to answer for one, and `create_project` read
that whole list back after each create (and, locally, once more before it, to ask whether the project
existed). They now read the project alone on the backend config.yaml sends it to
(`Backend.read_project`, the `_one_project` hook) and count its jobs on each backend, with the list's
answer and the list's notices of it; a project that backend does not have is read as before.
"""

from __future__ import annotations

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
pytest.importorskip("fastapi", reason="the 'server' extra is not installed")

from fastapi.testclient import TestClient  # noqa: E402

from dtrain.backends.local.backend import LocalBackend  # noqa: E402
from dtrain.client import Client  # noqa: E402

from test_audit9_knotice import NO_QUOTA_NO_PODS  # noqa: E402
from test_k8s_backend import backend, cluster, make_backend  # noqa: E402,F401  (their fixtures)
from test_k8s_leftovers3 import _running_job  # noqa: E402

LIST_NAMESPACES = ("GET", "/api/v1/namespaces?labelSelector=dtrain.io%2Fproject")


def _http(client: Client) -> TestClient:
    from dtrain.server.app import create_app

    return TestClient(create_app(lambda: client, sample_every=3600), base_url="http://127.0.0.1:8000")


def _read_namespaces(cluster) -> set[str]:
    """The namespaces the reads since the last clear read in (/namespaces/NS...), and '*' for a read
    across all of them (a list of namespaces, or of a kind's objects in every namespace)."""
    out = set()
    for method, path in cluster.requests:
        parts = path.split("?")[0].strip("/").split("/")
        at = parts.index("namespaces") if "namespaces" in parts else len(parts)
        if method == "GET":
            out.add(parts[at + 1] if len(parts) > at + 1 else "*")
    return out


def test_get_project_reads_that_projects_namespace_alone_and_answers_as_the_list(tmp_path, backend, cluster):
    _running_job(backend, cluster)  # lanes: a quota of 4 and a running job holding 2 GPUs
    backend.create_project("other", gpu_quota=1)
    client = Client(home=tmp_path / "home", backend="kubernetes", backends={"kubernetes": backend})
    http = _http(client)
    listed = http.get("/api/v1/projects").json()
    assert [(p["name"], p["jobs"], p["running"], p["gpus_allocated"]) for p in listed] == [
        ("lanes", 1, 1, 2), ("other", 0, 0, 0)]
    cluster.requests.clear()
    got = http.get("/api/v1/projects/lanes")
    assert got.status_code == 200 and "warning" not in got.headers, got.text
    assert got.json() == listed[0]  # the same body, field for field
    assert LIST_NAMESPACES not in cluster.requests  # the other projects are not looked for
    assert _read_namespaces(cluster) == {"dtrain-lanes"}, cluster.requests
    cluster.requests.clear()
    http.get("/api/v1/projects")
    assert LIST_NAMESPACES in cluster.requests and "dtrain-other" in _read_namespaces(cluster)


def test_get_project_carries_the_lists_notices_of_that_project(tmp_path, backend, cluster):
    from dtrain.server.wire import warning_header

    _running_job(backend, cluster)
    client = Client(home=tmp_path / "home", backend="kubernetes", backends={"kubernetes": backend})
    http = _http(client)
    cluster.forbidden |= NO_QUOTA_NO_PODS  # no quota, pods nor namespaces: the list counts GPUs from the jobs
    listed = client.list_projects()
    assert [n.code for n in listed.notices] == ["quota-unknown", "gpus-unknown"]
    one = client.read_project("lanes")
    assert one == listed and one.notices == listed.notices
    got = http.get("/api/v1/projects/lanes")
    assert got.status_code == 200, got.text
    assert got.headers["warning"] == ", ".join(warning_header(n.message) for n in listed.notices)
    assert got.json() == http.get("/api/v1/projects").json()[0]
    assert got.json()["gpu_quota"] is None and got.json()["gpus_allocated"] == 2


def test_create_project_reads_back_only_the_project_made(tmp_path, backend, cluster):
    _running_job(backend, cluster)
    client = Client(home=tmp_path / "home", backend="kubernetes", backends={"kubernetes": backend})
    cluster.requests.clear()
    made = client.create_project("other", gpu_quota=2)
    assert (made.name, made.gpu_quota, made.jobs, made.extra) == ("other", 2, 0, {"namespace": "dtrain-other"})
    assert LIST_NAMESPACES not in cluster.requests
    assert _read_namespaces(cluster) == {"dtrain-other"}, cluster.requests  # lanes' jobs and pods are not read
    assert made == next(p for p in client.list_projects() if p.name == "other")


class _Counting(LocalBackend):
    """The local backend, counting the project reads it is asked for."""

    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.reads: list[str] = []

    def _list_projects(self):
        self.reads.append("all")
        return super()._list_projects()

    def _one_project(self, name):
        self.reads.append(name)
        return super()._one_project(name)


def test_the_local_backend_is_asked_for_the_one_project(home):
    local = _Counting(home)
    local.create_project("team-a", gpu_quota=0)
    client = Client(home=home, backends={"local": local})
    http = _http(client)
    listed = http.get("/api/v1/projects").json()
    local.reads.clear()
    got = http.get("/api/v1/projects/team-a")
    assert got.status_code == 200 and got.json() == next(p for p in listed if p["name"] == "team-a")
    assert local.reads == ["team-a"]
    local.reads.clear()
    missing = http.get("/api/v1/projects/team-b")  # none: the list is read, and its answer given, as before
    assert missing.status_code == 404 and "no project named 'team-b'" in missing.json()["error"]
    assert local.reads[0] == "team-b" and "all" in local.reads


def test_a_project_the_configured_backend_lacks_reads_as_the_list_shows_it(home, tmp_path):
    from conftest import team_b_on_kubernetes

    server = team_b_on_kubernetes(home, tmp_path)  # config.yaml sends team-b to Kubernetes, which lacks it
    try:
        LocalBackend(home).create_project("team-b", gpu_quota=0)  # kept by the local backend only
        http = _http(Client(home=home))
        listed = http.get("/api/v1/projects").json()
        [row] = [p for p in listed if p["name"] == "team-b"]
        assert row["backend"] == "local"
        got = http.get("/api/v1/projects/team-b")
        assert got.status_code == 200 and got.json() == row
    finally:
        server.close()


def test_a_local_create_reads_only_the_project_made(home):
    local = _Counting(home)
    made = Client(home=home, backends={"local": local}).create_project("team-a", gpu_quota=0)
    assert (made.name, made.backend, made.gpu_quota, made.jobs) == ("team-a", "local", 0, 0)
    assert local.reads == ["team-a", "team-a"]  # whether it existed, then the record read back

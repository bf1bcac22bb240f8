"""`GET /api/v1/jobs?limit=&offset=` against a real `dtrain server`: pages of the filtered jobs,
newest first, the count before paging in `X-Total-Count`, and the list without `limit` unchanged."""

from __future__ import annotations

import pytest

from server_util import ServerProcess

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """Seven finished jobs, oldest first: a0..a3 in project team-a (a3 then deleted), d0..d2 in default."""
    home, work = tmp_path_factory.mktemp("paging-home"), tmp_path_factory.mktemp("paging-work")
    s = ServerProcess(home, cwd=work)
    try:
        assert s.http.post("/api/v1/projects", json={"name": "team-a"}).status_code == 201
        for name in ("a0", "d0", "a1", "d1", "a2", "d2", "a3"):
            fields = {"project": "team-a"} if name.startswith("a") else {}
            r = s.http.post("/api/v1/jobs", json={"name": name, "command": ["true"], **fields})
            assert r.status_code == 201, r.text
        for name in ("a0", "d0", "a1", "d1", "a2", "d2", "a3"):
            assert s.http.get(f"/api/v1/jobs/{name}/wait", params={"timeout": 120}).json()["status"] == "Succeeded"
        assert s.http.delete("/api/v1/jobs/a3").status_code == 200
        yield s
    finally:
        s.stop()


def page(server: ServerProcess, **query) -> tuple[list[str], int]:
    r = server.http.get("/api/v1/jobs", params=query)
    assert r.status_code == 200, r.text
    return [j["name"] for j in r.json()], int(r.headers["x-total-count"])


def test_without_limit_the_list_is_as_before_and_counted(server):
    assert page(server) == (["a0", "d0", "a1", "d1", "a2", "d2"], 6)  # oldest first, no Deleted
    assert page(server, project="team-a") == (["a0", "a1", "a2"], 3)
    assert page(server, status="Deleted") == (["a3"], 1)
    assert page(server, limit="", offset="") == page(server)  # empty values, as a form sends them: absent


def test_pages_are_newest_first_after_the_filters(server):
    assert page(server, limit=4) == (["d2", "a2", "d1", "a1"], 6)
    assert page(server, limit=4, offset=4) == (["d0", "a0"], 6)
    assert page(server, limit=4, offset=6) == ([], 6)  # past the end: empty, and still counted
    assert page(server, limit=1000, offset=10_000_000) == ([], 6)
    assert page(server, offset=3) == (["a1", "d0", "a0"], 6)  # offset alone: the rest, newest first
    assert page(server, limit=2, project="team-a") == (["a2", "a1"], 3)
    assert page(server, limit=2, offset=2, project="team-a") == (["a0"], 3)
    assert page(server, limit=5, status="Succeeded", project="default") == (["d2", "d1", "d0"], 3)
    assert page(server, limit=5, status="Deleted") == (["a3"], 1)
    assert server.http.get("/api/v1/jobs", params={"limit": 5, "project": "nobody"}).status_code == 404  # a typo
    assert page(server, limit=5, status="Running", project="team-a") == ([], 0)  # a project with none of them
    everything = [name for start in range(0, 6, 2) for name in page(server, limit=2, offset=start)[0]]
    assert everything == list(reversed(page(server)[0]))  # the pages together: every job once
    full = server.http.get("/api/v1/jobs").json()
    assert server.http.get("/api/v1/jobs", params={"limit": 1}).json() == [full[-1]]  # the same records
    head = server.http.head("/api/v1/jobs", params={"limit": 1, "project": "team-a"})
    assert head.status_code == 200 and head.headers["x-total-count"] == "3" and head.content == b""


@pytest.mark.parametrize(("query", "says"), [  # Client.page's words, not pydantic's
    ({"limit": 0}, "invalid limit 0: use a number of jobs from 1 to 1000"),
    ({"limit": 1001}, "invalid limit 1001: use a number of jobs from 1 to 1000"),
    ({"limit": -5}, "invalid limit -5: use a number of jobs from 1 to 1000"),
    ({"limit": "ten"}, "invalid limit 'ten': use a number of jobs from 1 to 1000"),
    ({"limit": 2.5}, "invalid limit 2.5: use a number of jobs from 1 to 1000"),
    ({"offset": -1}, "invalid offset -1: use a number of jobs from 0 to 10000000"),
    ({"offset": 10_000_001, "limit": 5}, "invalid offset 10000001: use a number of jobs from 0 to 10000000"),
    ({"offset": "1e8"}, "invalid offset 1e8: use a number of jobs from 0 to 10000000"),  # 1e3 is 1000, as --tail 1e3
    ({"offset": "1e400"}, "invalid offset 1e400: use a number of jobs from 0 to 10000000"),  # as typed, not inf
])
def test_bad_limits_and_offsets_are_refused_in_one_line(server, query, says):
    r = server.http.get("/api/v1/jobs", params=query)
    assert r.status_code == 422, r.text
    assert r.json()["kind"] == "SpecError" and says in r.json()["error"] and "\n" not in r.json()["error"], r.text


def test_the_schema_documents_the_page_parameters_and_the_count(server):
    op = server.http.get("/api/v1/openapi.json").json()["paths"]["/api/v1/jobs"]["get"]
    bounds = {p["name"]: p["schema"]["anyOf"][0] for p in op["parameters"]}
    assert bounds["limit"] == {"type": "integer", "minimum": 1, "maximum": 1000}
    assert bounds["offset"] == {"type": "integer", "minimum": 0, "maximum": 10_000_000}
    assert op["responses"]["200"]["headers"]["X-Total-Count"]["schema"]["type"] == "integer"
    assert "newest first" in op["description"]

"""`GET /api/v1/notebooks|volumes|snapshots?limit=&offset=`: pages newest first with the count before
paging in `X-Total-Count`, in the bounds and words of the job list's (the SDK's page verbs); and
`GET /api/v1/projects/{name}`, the read a made project's `Location` names."""

from __future__ import annotations

import pytest

import dtrain
from dtrain.errors import SpecError
from server_util import wait_until
from test_audit15_api import http, serve  # noqa: F401  (an API server on the test's home)

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")

LISTS = ("/api/v1/notebooks", "/api/v1/volumes", "/api/v1/snapshots")


def names(http, path: str, **query) -> tuple[list[str], int]:
    r = http.get(path, params=query)
    assert r.status_code == 200, r.text
    return [x["name"] for x in r.json()], int(r.headers["x-total-count"])


def newest_first(records: list[dict]) -> list[str]:
    return [r["name"] for r in sorted(records, key=lambda r: (r["created"], r["name"]), reverse=True)]


def test_volumes_and_snapshots_page_newest_first_and_are_counted(http):
    for name in ("v2", "v1", "v3"):
        assert http.post("/api/v1/volumes", json={"name": name, "size": "1Mi"}).status_code == 201
    for name, volume in (("s-b", "v1"), ("s-a", "v1"), ("s-c", "v2")):
        assert http.post("/api/v1/snapshots", json={"volume": volume, "name": name}).status_code == 201
    assert names(http, "/api/v1/volumes") == (["v1", "v2", "v3"], 3)  # without a page: as before, by name
    volumes = newest_first(http.get("/api/v1/volumes").json())
    assert names(http, "/api/v1/volumes", limit=2) == (volumes[:2], 3)
    assert names(http, "/api/v1/volumes", limit=2, offset=2) == (volumes[2:], 3)
    assert names(http, "/api/v1/volumes", offset=1) == (volumes[1:], 3)  # offset alone: the rest
    assert names(http, "/api/v1/volumes", limit=5, offset=3) == ([], 3)  # past the end: empty, still counted
    assert names(http, "/api/v1/volumes", limit="", offset="") == names(http, "/api/v1/volumes")  # a form's blanks

    everything = http.get("/api/v1/snapshots").json()
    assert [s["name"] for s in everything] == [s["name"] for s in sorted(everything, key=lambda s: (s["created"],
                                                                                                     s["name"]))]
    snaps = newest_first(everything)
    assert names(http, "/api/v1/snapshots") == ([s["name"] for s in everything], 3)
    pages = [n for start in (0, 2) for n in names(http, "/api/v1/snapshots", limit=2, offset=start)[0]]
    assert pages == snaps  # the pages together: every snapshot once
    assert names(http, "/api/v1/snapshots", volume="v1", limit=1) == ([n for n in snaps if n != "s-c"][:1], 2)
    assert http.get("/api/v1/snapshots", params={"volume": "nope", "limit": 1}).status_code == 404  # a typo still
    full = {s["name"]: s for s in everything}
    assert http.get("/api/v1/snapshots", params={"limit": 1}).json() == [full[snaps[0]]]  # the same records


def test_notebooks_page_after_the_status_filter(home, monkeypatch):
    """Three notebooks queued behind a job holding the one GPU (Pending: no JupyterLab started)."""
    monkeypatch.setenv("DTRAIN_GPUS", "1")
    c = dtrain.Client(home=home)
    c.submit(dtrain.JobSpec(name="hold", command=["sleep", "300"], gpu=1))
    server, http = serve(home)
    try:
        wait_until(lambda: c.get("hold").status.value == "Running", what="the job holding the GPU running")
        for name in ("nb-b", "nb-a", "nb-c"):
            made = http.post("/api/v1/notebooks", json={"name": name, "gpu": 1})
            assert made.status_code == 201, made.text
        assert http.delete("/api/v1/jobs/nb-c").status_code == 200
        listed = http.get("/api/v1/notebooks").json()
        assert [b["name"] for b in listed] == ["nb-b", "nb-a"] and int(http.get("/api/v1/notebooks").headers[
            "x-total-count"]) == 2
        books = newest_first(listed)
        assert names(http, "/api/v1/notebooks", limit=1) == (books[:1], 2)
        assert names(http, "/api/v1/notebooks", limit=1, offset=1) == (books[1:], 2)
        assert names(http, "/api/v1/notebooks", limit=5, status="Deleted") == (["nb-c"], 1)
        assert names(http, "/api/v1/notebooks", limit=5, status="Pending") == (books, 2)
        assert names(http, "/api/v1/notebooks", limit=5, status="Running") == ([], 0)
        page = c.page_notebooks(limit=1, offset=1)  # the SDK's verb the route calls
        assert (page.total, [b.name for b in page.items]) == (2, books[1:])
    finally:
        http.close()
        server.stop()
        for name in ("nb-a", "nb-b", "hold"):
            c.delete(name, purge=True)


@pytest.mark.parametrize("path", LISTS)
@pytest.mark.parametrize(("query", "says"), [  # the SDK's words, naming what the list holds
    ({"limit": 0}, "invalid limit 0: use a number of {} from 1 to 1000"),
    ({"limit": 1001}, "invalid limit 1001: use a number of {} from 1 to 1000"),
    ({"limit": "ten"}, "invalid limit 'ten': use a number of {} from 1 to 1000"),
    ({"limit": 2.5}, "invalid limit 2.5: use a number of {} from 1 to 1000"),
    ({"offset": -1}, "invalid offset -1: use a number of {} from 0 to 10000000"),
    ({"offset": "1e8", "limit": 5}, "invalid offset 1e8: use a number of {} from 0 to 10000000"),
])
def test_bad_limits_and_offsets_are_refused_in_one_line(http, path, query, says):
    r = http.get(path, params=query)
    assert r.status_code == 422, r.text
    what = path.rsplit("/", 1)[-1]
    assert r.json()["kind"] == "SpecError" and says.format(what) in r.json()["error"], r.text
    assert "\n" not in r.json()["error"]


def test_the_sdk_pages_refuse_what_the_api_refuses(home):
    c = dtrain.Client(home=home)
    for verb, what in ((c.page_volumes, "volumes"), (c.page_snapshots, "snapshots"), (c.page_notebooks, "notebooks")):
        with pytest.raises(SpecError, match=f"invalid limit 0: use a number of {what} from 1 to 1000"):
            verb(limit=0)
        with pytest.raises(SpecError, match=f"invalid offset True: use a number of {what} from 0"):
            verb(offset=True)
        assert (verb(limit=3).total, verb(limit=3).items) == (0, ())


def test_the_schema_documents_the_page_parameters_as_the_job_lists(home):
    from dtrain.server.app import create_app

    paths = create_app(lambda: dtrain.Client(home=home), sample_every=3600).openapi()["paths"]

    def page(path):
        op = paths[path]["get"]
        what = path.rsplit("/", 1)[-1]  # each parameter names what its list holds, in the same words
        return ({p["name"]: {**p["schema"], "description": p["schema"]["description"].replace(what, "X")}
                 for p in op["parameters"] if p["name"] in ("limit", "offset")},
                op["responses"]["200"]["headers"]["X-Total-Count"]["schema"])

    for path in LISTS:
        assert page(path) == page("/api/v1/jobs")
        assert page(path)[0]["limit"]["anyOf"][0] == {"type": "integer", "minimum": 1, "maximum": 1000}
        assert "newest first (by creation time, then name" in " ".join(paths[path]["get"]["description"].split())


def test_a_project_is_read_where_its_201_says(http):
    made = http.post("/api/v1/projects", json={"name": "team-a"})
    assert made.status_code == 201, made.text
    assert made.headers["location"] == "/api/v1/projects/team-a"
    got = http.get(made.headers["location"])
    assert got.status_code == 200 and got.json() == made.json()
    listed = http.get("/api/v1/projects").json()
    assert [http.get(f"/api/v1/projects/{p['name']}").json() for p in listed] == listed
    again = http.post("/api/v1/projects", json={"name": "team-a"})  # an existing one: 200, nothing made
    assert again.status_code == 200 and "location" not in again.headers
    missing = http.get("/api/v1/projects/team-b")
    assert missing.status_code == 404 and missing.json()["kind"] == "NotFoundError", missing.text
    assert "no project named 'team-b'" in missing.json()["error"] and "\n" not in missing.json()["error"]
    assert "did you mean 'team-a'?" in missing.json()["error"]
    assert http.get("/api/v1/projects/Bad_Name").status_code == 422


def test_the_schema_has_the_project_read_and_the_201s_location(home):
    from dtrain.server.app import create_app

    paths = create_app(lambda: dtrain.Client(home=home), sample_every=3600).openapi()["paths"]
    assert paths["/api/v1/projects"]["post"]["responses"]["201"]["headers"]["Location"]["required"] is True
    read = paths["/api/v1/projects/{name}"]["get"]
    assert "404" in read["responses"] and read["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/Project"}


def test_a_stopped_server_closes_its_clients_sqlite_connections(home):
    """An app built again and again in one process (as these tests do) kept every Client it made, each with its
    SQLite connections, until the process ended: the fast suite reached descriptor 1024, where select() fails.
    A server that stops now drops its Clients, and their connections close."""
    import gc
    import os
    import weakref

    made = []

    def make():
        client = dtrain.Client(home=home)
        made.append(weakref.ref(client))
        return client

    from dtrain.server.app import create_app
    from server_util import ThreadServer

    def opened():  # this home's database files this process holds open (other tests' homes are not counted)
        return sum(1 for f in os.listdir("/proc/self/fd")
                   if os.path.realpath(f"/proc/self/fd/{f}").startswith(str(home.resolve()) + os.sep))

    gc.collect()
    before = opened()
    for _ in range(3):
        server = ThreadServer(create_app(make, sample_every=3600))
        with httpx_client(server) as http:
            assert http.get("/api/v1/jobs").status_code == 200 and http.get("/metrics").status_code == 200
        server.stop()
        del server
        gc.collect()
    assert made and not any(ref() for ref in made)
    assert opened() == before


def httpx_client(server):
    import httpx

    return httpx.Client(base_url=server.url, timeout=60)

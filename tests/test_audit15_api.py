"""The HTTP API as a new user meets it (audit 15): a page of another site may not change jobs through
a loopback server, a query parameter given twice is refused rather than read as its last value, a bad
label selector is refused in the SDK's words, and a proxy that left a --root-path prefix on is named."""

from __future__ import annotations

import pytest

import dtrain

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")


def serve(home, **options):
    """An API server on that home (a Client per worker thread), and an HTTP client to it."""
    import httpx

    from dtrain.server.app import create_app
    from server_util import ThreadServer

    config = {"root_path": options.pop("root_path")} if "root_path" in options else {}
    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600, **options), **config)
    return server, httpx.Client(base_url=server.url, timeout=60)


@pytest.fixture
def http(home):
    server, client = serve(home)
    with client:
        yield client
    server.stop()


def test_a_page_of_another_site_may_not_change_a_job_on_a_loopback_server(http, home):
    """Loopback needs no token, and POST .../suspend with no body (or text/plain) is a 'simple' request a
    browser sends without a CORS preflight: any page the user opened suspended the job (200). Now 403;
    the server's own pages (same-origin), a typed address (none) and scripts (no header) still pass."""
    dtrain.Client(home=home).create_volume("data", size="1Mi")
    for site in ("cross-site", "same-site"):
        answer = http.post("/api/v1/verify", headers={"sec-fetch-site": site, "origin": "http://evil.example"})
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"].startswith(f"a POST sent by a page of another site (Sec-Fetch-Site: {site})")
        answer = http.delete("/api/v1/volumes/data", headers={"sec-fetch-site": site})
        assert answer.status_code == 403, answer.text
    assert [v.name for v in dtrain.Client(home=home).list_volumes()] == ["data"]  # nothing changed
    assert http.get("/api/v1/volumes", headers={"sec-fetch-site": "cross-site"}).status_code == 200  # reads pass
    for headers in ({"sec-fetch-site": "same-origin"}, {"sec-fetch-site": "none"}, {}):
        assert http.post("/api/v1/verify", headers=headers).json()["ok"] is True


def test_a_browser_without_sec_fetch_site_is_judged_by_its_origin(http, home):
    """Safari before 16.4 and older Firefox send no Sec-Fetch-Site, so a page of another site POSTing to a
    loopback server passed the guard above (200: the volume deleted). Where it is absent, an Origin other
    than the server's own scheme://host:port is refused, as Django and Jupyter refuse it; no Origin passes."""
    dtrain.Client(home=home).create_volume("data", size="1Mi")
    own = str(http.base_url).rstrip("/")  # http://127.0.0.1:PORT
    for origin in ("http://evil.example", "null", f"https://{own[7:]}", own + "0", "http://localhost:1"):
        answer = http.delete("/api/v1/volumes/data", headers={"origin": origin})
        assert answer.status_code == 403, answer.text
        assert answer.json()["error"] == (f"a DELETE sent by a page of another site (Origin: {origin}) is refused: "
                                          f"change jobs from this server's own dashboard, the CLI or a script "
                                          f"(curl, the SDK)")
    assert [v.name for v in dtrain.Client(home=home).list_volumes()] == ["data"]  # nothing changed
    assert http.get("/api/v1/volumes", headers={"origin": "http://evil.example"}).status_code == 200  # reads pass
    for headers in ({"origin": own}, {"origin": own.upper()}, {},  # its own page, a script
                    {"origin": "http://evil.example", "sec-fetch-site": "same-origin"}):  # the browser's word wins
        assert http.post("/api/v1/verify", headers=headers).json()["ok"] is True
    # a proxy on this machine (uvicorn trusts X-Forwarded-Proto from loopback) that ends TLS
    assert http.post("/api/v1/verify", headers={"origin": f"https://{own[7:]}",
                                                "x-forwarded-proto": "https"}).status_code == 200


def test_behind_a_root_path_the_origin_is_the_proxys_forwarded_host(home):
    """Behind `--root-path /dtrain` the browser's Origin is the proxy's address, which the proxy names in
    X-Forwarded-Host/Proto (the Host it sends may be the server's own): that passes, another site does not."""
    server, http = serve(home, root_path="/dtrain")
    proxied = {"host": "127.0.0.1:8500", "x-forwarded-host": "dtrain.example.org", "x-forwarded-proto": "https"}
    try:
        ok = http.post("/api/v1/verify", headers={**proxied, "origin": "https://dtrain.example.org"})
        assert ok.status_code == 200, ok.text
        for origin in ("https://evil.example", "http://dtrain.example.org", "https://dtrain.example.org:8443"):
            answer = http.post("/api/v1/verify", headers={**proxied, "origin": origin})
            assert answer.status_code == 403, answer.text
            assert answer.json()["error"].startswith(f"a POST sent by a page of another site (Origin: {origin})")
    finally:
        http.close()
        server.stop()


@pytest.mark.parametrize("query", ["status=Succeeded&status=Pending", "project=default&project=team-b",
                                   "limit=1&limit=2"])
def test_a_query_parameter_given_twice_is_refused_not_read_as_its_last(http, query):
    """?status=Succeeded&status=Pending listed the Pending jobs alone (FastAPI reads the last value), so a
    client asking for both got an empty list and a 200; a DELETE's ?project= given twice picked one."""
    answer = http.get(f"/api/v1/jobs?{query}")
    assert answer.status_code == 422, answer.text
    name = query.partition("=")[0]
    assert answer.json()["error"].startswith(f"query parameter '{name}' given more than once on GET /api/v1/jobs")
    assert http.get(f"/api/v1/jobs?{query.partition('&')[0]}&status=").status_code == 200  # an empty one is absent


@pytest.mark.parametrize("selector", ["team in (t1,t2)", "team=a=b", "x" * 1025])
def test_a_bad_label_selector_is_refused_in_the_sdks_words_with_the_apis_example(http, home, selector):
    """?label_selector=team in (t1,t2) was refused with "use the form the schema gives (/api/v1/openapi.json)"
    and one past 1024 characters with pydantic's "String should have at most 1024 characters", where
    Client.list(selector=...) and `dtrain list -l` name the term and the forms a selector takes."""
    with pytest.raises(dtrain.errors.SpecError) as sdk:
        dtrain.Client(home=home).list(selector=selector)
    answer = http.get("/api/v1/jobs", params={"label_selector": selector, "limit": 5})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == str(sdk.value).replace("(e.g. -l ", "(e.g. ?label_selector=")  # its own form


def test_a_request_that_still_holds_the_root_path_is_told_to_strip_it(home):
    """`dtrain server --root-path /dtrain` behind a proxy that forwards /dtrain/api/v1/jobs as it came (no
    rewrite), or asked directly at that path: the 404 named 'no such path /dtrain/dtrain/api/v1/jobs', a path
    no one sent, and said the API is under /dtrain/api/v1/, the very address asked for."""
    server, http = serve(home, root_path="/dtrain")
    try:
        answer = http.get("/dtrain/api/v1/jobs")
        assert answer.status_code == 404, answer.text
        said = answer.json()["error"]
        assert said.startswith("no such path /dtrain/api/v1/jobs: the server's --root-path /dtrain is a prefix"), said
        assert said.endswith("have the proxy strip /dtrain, or ask the server itself for /api/v1/jobs"), said
        assert http.get("/api/v1/jobs").status_code == 200  # what the proxy sends once it strips the prefix
        assert "/dtrain/api/v1/openapi.json" in http.get("/api/v2").json()["error"]  # another path: as before
    finally:
        http.close()
        server.stop()


@pytest.mark.parametrize("field, raw, said", [
    ("env", '{"STEPS": 3}', 'invalid env.STEPS 3: env.STEPS takes a JSON string, not a number: send "3"'),
    ("env", '{"LR": 1e-3}', 'invalid env.LR 1e-3: env.LR takes a JSON string, not a number: send "1e-3"'),
    ("command", '["sleep", 5]', 'invalid command.1 5: command.1 takes a JSON string, not a number: send "5"'),
    ("labels", '{"run": 7}', 'invalid labels.run 7: labels.run takes a JSON string, not a number: send "7"'),
])
def test_a_number_inside_a_list_or_mapping_of_strings_says_to_send_a_string(http, field, raw, said):
    """A job file loaded with yaml.safe_load and POSTed (`env: {STEPS: 3}`, which `dtrain submit -f` takes)
    was refused in pydantic's words, "env.STEPS: Input should be a valid string", where a top-level field's
    number ("size": 5) says which JSON to send."""
    body = f'{{"name": "x", "command": ["true"], "{field}": {raw}}}'
    if field == "command":
        body = f'{{"name": "x", "command": {raw}}}'
    answer = http.post("/api/v1/jobs", content=body, headers={"content-type": "application/json"})
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"] == said


def test_a_server_bound_to_every_address_prints_this_machines_name():
    """`dtrain server --host 0.0.0.0` printed http://0.0.0.0:PORT/?token=...: opened on another machine (the
    reason to bind there) that goes to the other machine itself, or nowhere."""
    import socket

    from dtrain.server.serve import url_of

    name = socket.gethostname()
    assert url_of("0.0.0.0", 8500) == url_of("::", 8500) == f"http://{name}:8500/"
    assert url_of("127.0.0.1", 8500) == "http://127.0.0.1:8500/"
    assert url_of("::1", 8500) == "http://[::1]:8500/"
    assert url_of("10.1.2.3", 80) == "http://10.1.2.3:80/"


@pytest.mark.slow
def test_schema_valid_submits_get_the_answers_the_schema_documents(tmp_path):
    """The fuzz test sends POST /api/v1/jobs only bodies that break the schema (a valid random spec would run
    a random command). Here schemathesis makes valid ones, the command made `true` and the backend local, and
    every answer (201, or a refusal across fields: a quota, a volume not there) must be one the schema
    documents, in its status, headers, content type and body."""
    schemathesis = pytest.importorskip("schemathesis", reason="the 'dev' extra (schemathesis) is not installed")
    from hypothesis import HealthCheck, Phase, given, settings
    from schemathesis import GenerationMode
    from schemathesis.specs.openapi import checks

    from server_util import ServerProcess

    (tmp_path / "home").mkdir()
    server = ServerProcess(tmp_path / "home", env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    try:
        schema = schemathesis.openapi.from_url(server.url + "/api/v1/openapi.json")
        op = schema["/api/v1/jobs"]["POST"]
        conformance = [checks.response_schema_conformance, checks.status_code_conformance,
                       checks.content_type_conformance, checks.response_headers_conformance]
        statuses = set()

        @settings(max_examples=25, deadline=None, derandomize=True, database=None,
                  phases=[Phase.explicit, Phase.generate], suppress_health_check=list(HealthCheck))
        @given(case=op.as_strategy(generation_mode=GenerationMode.POSITIVE))
        def check(case):
            case.body.update(command=["true"], backend="local", processes=min(case.body.get("processes") or 1, 2))
            for unsafe in ("working_dir", "sagemaker"):  # a folder the job would create; AWS
                case.body.pop(unsafe, None)
            response = case.call(base_url=server.url, timeout=60)
            case.validate_response(response, checks=conformance)
            statuses.add(response.status_code)
        check()
        assert 201 in statuses, statuses
    finally:
        server.stop()


def test_the_schema_names_every_refusal_and_the_201s_location(home):
    """A loopback server's 421 (a Host that is no loopback name) was in no route's responses, and a 201 carried
    no Location, so a client generated from the schema knew neither."""
    from dtrain.server.app import create_app

    paths = create_app(lambda: dtrain.Client(home=home), sample_every=3600).openapi()["paths"]
    for path, method in (("/api/v1/jobs", "post"), ("/api/v1/notebooks", "post"), ("/api/v1/volumes", "post"),
                         ("/api/v1/snapshots", "post"), ("/api/v1/snapshots/{name}/restore", "post")):
        assert paths[path][method]["responses"]["201"]["headers"]["Location"]["required"] is True
    assert all("421" in op["responses"] for ops in paths.values() for op in ops.values())


@pytest.mark.slow
def test_a_201_says_where_the_new_record_is(home):
    """A POST that made a volume or a snapshot answered 201 with no Location, so a client had to rebuild the
    record's address. Location is the record's GET, behind --root-path under it."""
    server, http = serve(home, root_path="/dtrain")
    try:
        made = http.post("/api/v1/volumes?project=default", json={"name": "data", "size": "1Mi"})
        assert made.status_code == 201, made.text
        assert made.headers["location"] == "/dtrain/api/v1/volumes/data?project=default"
        assert http.get(made.headers["location"][len("/dtrain"):]).json()["name"] == "data"
        snap = http.post("/api/v1/snapshots", json={"volume": "data", "name": "s1"})
        assert snap.headers["location"] == "/dtrain/api/v1/snapshots/s1"
        copy = http.post("/api/v1/snapshots/s1/restore", json={"to": "copy"})
        assert (copy.status_code, copy.headers["location"]) == (201, "/dtrain/api/v1/volumes/copy")
        assert http.post("/api/v1/volumes", json={"name": "data", "size": "1Mi"}).headers.get("location") is None  # 409
    finally:
        http.close()
        server.stop()


@pytest.mark.slow
def test_a_submitted_job_says_where_it_is(home):
    """POST /jobs answered 201 with no Location; now the job's GET, with its project."""
    server, http = serve(home)
    try:
        job = http.post("/api/v1/jobs", json={"name": "j1", "command": ["true"], "backend": "local"})
        assert job.status_code == 201, job.text
        assert job.headers["location"] == "/api/v1/jobs/j1?project=default"
        assert http.get(job.headers["location"]).json()["name"] == "j1"
        dtrain.Client(home=home).wait("j1", timeout=60)
    finally:
        http.close()
        server.stop()

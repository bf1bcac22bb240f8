"""The token: refused (401) on every route without it or with a wrong one when the server is bound
off loopback; the token file is private. The app is configured as a non-loopback bind would
configure it, but the test server listens on 127.0.0.1 only."""

from __future__ import annotations

import os
import stat

import httpx
import pytest

from server_util import ThreadServer

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
from starlette.routing import Route  # noqa: E402

from dtrain.client import Client  # noqa: E402
from dtrain.errors import ConflictError  # noqa: E402
from dtrain.server import routes_cluster, routes_jobs, routes_notebooks, routes_storage  # noqa: E402
from dtrain.server.app import API, create_app  # noqa: E402
from dtrain.server.auth import COOKIE, is_loopback, load_or_create_token  # noqa: E402
from dtrain.server.serve import banner  # noqa: E402


@pytest.fixture
def guarded(home):
    token, created = load_or_create_token(home)
    assert created
    app = create_app(lambda: Client(home=home), token=token, sample_every=3600)
    server = ThreadServer(app)
    yield server, token, app
    server.stop()


def every_request(app) -> list[tuple[str, str]]:
    """(method, path) for every route the app serves, path parameters filled in."""
    out = [("GET", "/static/app.js"), ("GET", "/static/style.css")]
    routes = [r for r in app.routes if isinstance(r, Route)]  # the app's own: /, /metrics, the schema
    routes += [r for module in (routes_jobs, routes_cluster, routes_storage, routes_notebooks) for r in module.router.routes]
    for route in routes:
        path = route.path.replace("{name}", "some-name")
        path = path if path.startswith(("/api/", "/metrics")) or path == "/" else API + path
        out += [(m, path) for m in sorted(route.methods - {"HEAD"})]
    assert len({p for _, p in out if p.startswith(API)}) == len(app.openapi()["paths"]) + 1  # + the schema
    return out


def test_every_route_refuses_a_missing_or_wrong_token(guarded, home):
    server, token, app = guarded
    requests = every_request(app)
    paths = {p for _, p in requests}
    assert {"/", "/metrics", "/api/v1/openapi.json", "/api/v1/jobs/some-name/logs/stream", "/api/v1/jobs"} <= paths
    assert {m for m, _ in requests} >= {"GET", "POST", "DELETE"}
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")
    with httpx.Client(base_url=server.url, timeout=30) as http:
        for method, path in requests:
            for headers in ({}, {"authorization": f"Bearer {wrong}"}, {"authorization": "Basic abc"},
                            {"cookie": f"{COOKIE}={wrong}"}, {"authorization": "Bearer x"}):
                r = http.request(method, path, headers=headers, json={})
                assert r.status_code == 401, (method, path, headers, r.status_code)
                assert r.headers["www-authenticate"].startswith("Bearer")
                assert "token" in r.json()["error"]
            r = http.request(method, path, headers={"authorization": f"Bearer {token}"}, json={})
            assert r.status_code != 401, (method, path)
        assert http.get("/", params={"token": wrong}).status_code == 401
    assert not (home / "jobs").exists()  # nothing refused reached the client


def test_token_in_the_url_once_sets_a_private_cookie(guarded):
    server, token, _ = guarded
    with httpx.Client(base_url=server.url, timeout=30) as http:
        r = http.get("/", params={"token": token, "x": "1"})
        assert r.status_code == 303 and r.headers["location"] == "./?x=1"  # the token leaves the URL
        cookie = r.headers["set-cookie"]
        assert f"{COOKIE}={token}" in cookie and "HttpOnly" in cookie and "SameSite=Strict" in cookie
        assert http.get("/api/v1/jobs").status_code == 200  # the cookie jar now carries it
        assert "access-control-allow-origin" not in {k.lower() for k in r.headers}
        raw = httpx.URL(server.url).copy_with(raw_path=f"//evil.example/x?token={token}".encode())
        elsewhere = http.get(raw)
        assert elsewhere.status_code == 303 and elsewhere.headers["location"] == "./x"


def test_token_file_is_private_and_kept(home):
    token, created = load_or_create_token(home)
    path = home / "server-token"
    assert created and len(token) >= 40
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert load_or_create_token(home) == (token, False)
    path.chmod(0o644)
    with pytest.raises(ConflictError, match="chmod 600"):
        load_or_create_token(home)


def test_token_file_is_never_read_or_written_through_a_symlink(home, tmp_path):
    target = tmp_path / "elsewhere"
    target.write_text("x" * 50)
    target.chmod(0o600)
    os.symlink(target, home / "server-token")
    with pytest.raises(ConflictError, match="server token"):
        load_or_create_token(home)
    assert target.read_text() == "x" * 50


def test_which_addresses_need_a_token():
    assert all(is_loopback(h) for h in ("127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"))
    assert not any(is_loopback(h) for h in ("0.0.0.0", "::", "10.0.0.5", "192.168.1.2", "example.com", ""))


def test_the_token_is_printed_once_inside_the_url(home):
    token, created = load_or_create_token(home)
    first = banner("http://10.0.0.5:8500/", home / "server-token", token=token, created=created, read_only=False)
    assert first.startswith(f"dtrain server: http://10.0.0.5:8500/?token={token}\n")
    again = banner("http://10.0.0.5:8500/", home / "server-token", token=token, created=False, read_only=True)
    assert token not in again and str(home / "server-token") in again and "(read-only)" in again
    assert banner("http://127.0.0.1:8500/", home / "x", token=None, created=None, read_only=False) == \
        "dtrain server: http://127.0.0.1:8500/"


"""`dtrain server --root-path PREFIX`: the app answered behind a proxy's prefix (uvicorn's root_path: its 404s
and OpenAPI name PREFIX/api/v1), but the command had no way to set it; only a hand-built uvicorn could."""

from __future__ import annotations

import pytest

from conftest import Dtrain
from server_util import ServerProcess

from dtrain.names import shown

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")


@pytest.mark.slow  # a real server process
def test_a_server_behind_a_proxys_prefix_names_it(home):
    server = ServerProcess(home, args=("--root-path", "/dtrain"))
    try:
        http = server.http
        assert http.get("/api/v1/jobs").json() == []  # what the proxy forwards, the prefix stripped
        assert http.get("/api/v1/openapi.json").json()["servers"] == [{"url": "/dtrain"}]
        error = http.get("/nothere").json()["error"]
        assert "the API is under /dtrain/api/v1/ (its paths: /dtrain/api/v1/openapi.json)" in error, error
    finally:
        server.stop()


@pytest.mark.parametrize("bad", ["dtrain", "/dtrain/", "/", "/a//b", "/a b", "/é", "/" + "a" * 200])
def test_a_bad_root_path_is_one_line_before_anything_listens(home, bad):
    proc = Dtrain(home)("server", "--port", "0", "--root-path", bad, check=False, timeout=60)
    assert proc.returncode == 2 and proc.stdout == "", proc
    assert proc.stderr.startswith(f"dtrain: error: invalid --root-path {shown(bad)}: use the proxy's path prefix, ")
    assert proc.stderr.count("\n") == 1 and proc.stderr.rstrip().endswith("e.g. --root-path /dtrain"), proc.stderr

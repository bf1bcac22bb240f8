"""`dtrain server` starting and stopping as a user meets it: a failed bind leaves no token behind,
and Ctrl-C stops the server at once even while waits and log streams are open."""

from __future__ import annotations

import signal
import socket
import threading
import time

import httpx
import pytest

from conftest import Dtrain
from server_util import ServerProcess

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")

NOT_HERE = "192.0.2.1"  # TEST-NET-1 (RFC 5737): never an address of this machine


def test_ctrl_c_ends_open_waits_and_streams_and_stops_at_once(home, tmp_path):
    """uvicorn waits for open requests before it stops: a wait of 25 s held Ctrl-C for 25 s, then
    was cancelled with a traceback and a 500. Now each ends when shutdown begins."""
    server = ServerProcess(home, cwd=tmp_path)
    answers: dict[str, object] = {}
    streaming = threading.Event()

    def wait() -> None:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            answers["wait"] = http.get("/api/v1/jobs/long/wait", params={"timeout": 25})

    def follow() -> None:
        with httpx.stream("GET", server.url + "/api/v1/jobs/long/logs/stream", timeout=60) as resp:
            streaming.set()
            answers["stream"] = (resp.status_code, list(resp.iter_lines()))  # raises if cut off mid-stream

    try:
        r = server.http.post("/api/v1/jobs", json={"name": "long", "command": ["sleep", "100"],
                                                   "working_dir": str(tmp_path)})
        assert r.status_code == 201, r.text
        readers = [threading.Thread(target=wait, daemon=True), threading.Thread(target=follow, daemon=True)]
        for t in readers:
            t.start()
        assert streaming.wait(30), "the log stream did not open"
        time.sleep(0.5)  # the wait's request is in the server by now: it was sent before the stream's
        sent = time.monotonic()
        server.proc.send_signal(signal.SIGINT)
        server.proc.wait(timeout=30)
        took = time.monotonic() - sent
        for t in readers:
            t.join(10)
        stderr = server.proc.stderr.read()
        assert took < 6, f"the server took {took:.1f}s to stop after Ctrl-C"
        assert "Traceback" not in stderr and "Cancel" not in stderr, stderr
        refused = answers["wait"]
        assert refused.status_code == 503 and "shutting down" in refused.json()["error"], refused.text
        assert answers["stream"][0] == 200  # ended, not cut off
    finally:
        server.stop()


def test_a_failed_bind_names_the_address_and_leaves_no_token(home):
    with socket.socket() as probe:
        try:
            probe.bind((NOT_HERE, 0))
            pytest.skip("this machine binds non-local addresses (net.ipv4.ip_nonlocal_bind)")
        except OSError:
            pass
    failed = Dtrain(home)("server", "--host", NOT_HERE, "--port", "0", check=False, timeout=60)
    assert failed.returncode == 2 and failed.stderr.count("\n") == 1, failed
    line = failed.stderr.strip()
    assert line.startswith(f"dtrain: error: cannot listen on {NOT_HERE}:0 ") and "--host" in line, line
    assert "--port" not in line, line
    # the token is printed only when made: a failed start must not make (and so hide) it
    assert not (home / "server-token").exists()

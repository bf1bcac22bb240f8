"""Long requests (log streams, waits) are bounded, counting the threads that outlive a client."""

from __future__ import annotations

import httpx
import pytest

from conftest import Dtrain, _cleanup
from server_util import ThreadServer, wait_until

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
from dtrain.client import Client  # noqa: E402
from dtrain.server.app import create_app  # noqa: E402


def test_log_streams_are_bounded_until_their_threads_end(home, tmp_path):
    """A stream's slot is held by its reading thread: after a disconnect, until the job's next
    line or its end; a stream or wait beyond the limit is refused with 503 meanwhile."""
    app = create_app(lambda: Client(home=home), max_streams=1, sample_every=3600)
    server = ThreadServer(app)
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            script = "echo first; while [ ! -e GO ]; do sleep 0.1; done; echo second"
            r = http.post("/api/v1/jobs", json={"name": "quiet", "command": ["sh", "-c", script],
                                                "working_dir": str(tmp_path)})
            assert r.status_code == 201, r.text
            with http.stream("GET", "/api/v1/jobs/quiet/logs/stream") as resp:
                assert resp.status_code == 200
                next(line for line in resp.iter_lines() if '"first"' in line)
            # the client has gone; the job is quiet, so the reading thread still holds the slot
            refused = http.get("/api/v1/jobs/quiet/logs/stream")
            assert refused.status_code == 503 and "too many open log streams" in refused.json()["error"]
            assert http.get("/api/v1/jobs/quiet/wait", params={"timeout": 1}).status_code == 503
            (tmp_path / "GO").touch()
            ok = wait_until(lambda: (r := http.get("/api/v1/jobs/quiet/logs/stream")).status_code == 200 and r,
                            what="the slot given back")
            assert '"second"' in ok.text and "event: end" in ok.text
    finally:
        _cleanup(Dtrain(home))
        server.stop()

"""`dtrain snapshot wait` / `snapshot create --wait` / Client.wait_snapshot: Kubernetes takes a
VolumeSnapshot asynchronously (status.readyToUse), so a restore right after `create` would refuse
or a script would poll by hand; the local backend's snapshots are ready once taken."""

from __future__ import annotations

import json
import time

import pytest

import dtrain
from conftest import wait_through
from dtrain.backends.base import TimeoutError_
from dtrain.errors import ConflictError, NotFoundError, SpecError
from tests.test_k8s_backend import NS, backend, cluster, make_backend  # noqa: F401 - fixtures


def test_a_kubernetes_snapshot_is_waited_for_until_its_controller_marks_it_ready(backend, cluster):
    backend.create_volume("data", size="1Gi")
    assert backend.create_snapshot("data", name="s1").ready is False
    started = time.monotonic()
    snap = wait_through(cluster.ready_snapshots, lambda: backend.wait_snapshot("s1", timeout=30, poll=0.05))
    assert snap.ready is True and snap.name == "s1" and snap.bytes == 2**30
    assert time.monotonic() - started >= 0.3  # it did wait for the controller


def test_a_wait_that_runs_out_names_describe_and_one_that_errors_says_why(backend, cluster):
    backend.create_volume("data", size="1Gi")
    backend.create_snapshot("data", name="s1")
    with pytest.raises(TimeoutError_, match=r"snapshot 's1' is still not ready after 0.2s; .*"
                                            r"'dtrain snapshot describe s1'") as err:
        backend.wait_snapshot("s1", timeout=0.2, poll=0.05)
    assert err.value.look == "dtrain snapshot describe s1"
    snap = cluster.get("snapshot.storage.k8s.io", "volumesnapshots", NS, "s1")
    snap["status"] = {"readyToUse": False, "error": {"message": "rpc error: code = Internal"}}
    with pytest.raises(ConflictError, match=r"s1.*reports 'rpc error: code = Internal'.*'dtrain snapshot delete s1'"):
        backend.wait_snapshot("s1")  # no timeout: it ends at once, not never
    with pytest.raises(NotFoundError, match="snapshot 'nosuch' not found"):
        backend.wait_snapshot("nosuch", timeout=1)
    with pytest.raises(SpecError, match="timeout"):
        backend.wait_snapshot("s1", timeout=-1)


def test_the_cli_waits_for_local_snapshots_at_once(dt):
    dtrain = dt
    dtrain("volume", "create", "v")
    out = dtrain("snapshot", "create", "v", "--name", "s1", "--wait", "--json")
    assert json.loads(out.stdout)["ready"] is True
    out = dtrain("snapshot", "wait", "s1", "s1", "--timeout", "10m")
    assert out.stdout == "s1: Ready\n"
    assert json.loads(dtrain("snapshot", "wait", "s1", "--json").stdout)["name"] == "s1"
    bad = dtrain("snapshot", "wait", "s1", "nosuch", check=False)
    assert bad.returncode != 0 and bad.stdout == "" and "no snapshot named 'nosuch'" in bad.stderr
    bad = dtrain("snapshot", "wait", "s1", "--timeout", "soon", check=False)
    assert bad.returncode == 2 and "invalid --timeout 'soon'" in bad.stderr and len(bad.stderr.splitlines()) == 1


def test_the_http_api_waits_for_a_snapshot_and_answers_408_then_409(make_backend, cluster, tmp_path):
    """GET /api/v1/snapshots/{name}/wait: the CLI's `snapshot wait` through the server (a Kubernetes
    backend on the fake API server, whose snapshots become ready when its controller says so)."""
    import requests

    import dtrain
    from dtrain.server.app import create_app
    from server_util import ThreadServer

    backend = make_backend()
    backend.create_volume("data", size="1Gi")
    backend.create_snapshot("data", name="s1")
    server = ThreadServer(create_app(lambda: dtrain.Client(home=tmp_path, backend="kubernetes",
                                                           backends={"kubernetes": backend}), sample_every=3600))
    try:
        url = f"{server.url}/api/v1/snapshots/s1/wait"
        late = requests.get(url, params={"timeout": 0.2}, timeout=30)
        assert late.status_code == 408 and "still not ready after 0.2s" in late.json()["error"]
        assert requests.get(url, params={"timeout": 601}, timeout=30).status_code == 422
        ready = wait_through(cluster.ready_snapshots, lambda: requests.get(url, params={"timeout": 30}, timeout=60))
        assert ready.status_code == 200 and ready.json()["ready"] is True and ready.json()["name"] == "s1"
        backend.create_snapshot("data", name="s2")
        snap = cluster.get("snapshot.storage.k8s.io", "volumesnapshots", NS, "s2")
        snap["status"] = {"readyToUse": False, "error": {"message": "rpc error: code = Internal"}}
        failed = requests.get(f"{server.url}/api/v1/snapshots/s2/wait", timeout=30)
        assert failed.status_code == 409 and "code = Internal" in failed.json()["error"]
    finally:
        server.stop()


def test_a_volume_or_snapshot_wait_ends_with_503_when_the_server_stops(home):
    """Both storage waits run in a thread the server's shutdown ends (routes_storage._waited): a 503
    naming the command that waits (or looks) again, not a wait held until its timeout."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    import threading

    import httpx
    import uvicorn

    from dtrain.server.app import create_app
    from dtrain.server.serve import Server, bind

    release = threading.Event()
    began = {"volume": threading.Event(), "snapshot": threading.Event()}

    class Slow(dtrain.Client):  # a storage system that has not finished: the seam is the client
        def wait_volume(self, name, **kw):
            began["volume"].set()
            release.wait(60)
            return super().wait_volume(name, **kw)

        def wait_snapshot(self, name, **kw):
            began["snapshot"].set()
            release.wait(60)
            return super().wait_snapshot(name, **kw)

    dtrain.Client(home=home).create_volume("data", size="1Mi")
    app = create_app(lambda: Slow(home=home), sample_every=3600)
    sock = bind("127.0.0.1", 0)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}/api/v1"
    server = Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=5), app.state.stopping)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    answers: dict[str, httpx.Response] = {}

    def ask(path: str) -> None:
        answers[path] = httpx.get(url + path, params={"timeout": 50}, timeout=60)

    askers = [threading.Thread(target=ask, args=(p,), daemon=True) for p in ("/volumes/data/wait",
                                                                            "/snapshots/snap/wait")]
    try:
        while not server.started:
            assert thread.is_alive()
            threading.Event().wait(0.05)
        for t in askers:
            t.start()
        assert all(e.wait(30) for e in began.values()), "the waits did not begin"
        server.should_exit = True
        for t in askers:
            t.join(20)
        said = {p: (r.status_code, r.json()["error"]) for p, r in answers.items()}
        assert said["/volumes/data/wait"] == (503, "the server is shutting down; wait for volume 'data' again once "
                                                   "it is back (or with 'dtrain volume describe data')")
        assert said["/snapshots/snap/wait"] == (503, "the server is shutting down; wait for snapshot 'snap' again "
                                                     "once it is back (or with 'dtrain snapshot wait snap')")
    finally:
        release.set()
        server.should_exit = True
        thread.join(20)
        sock.close()


def test_a_wait_for_several_that_runs_out_counts_the_later_ones_ready_now(backend, cluster, tmp_path, capsys):
    """Reproduced: `dtrain snapshot wait s2 s1 --timeout 2s` with s1 ready and s2 not said '(0 of 2
    ready)': it counted only the snapshots waited for before the one that ran out."""
    import argparse

    from dtrain.cli.storage import _wait_snapshots
    from dtrain.cli.watch import EXIT_TIMEOUT

    backend.create_volume("data", size="1Gi")
    backend.create_snapshot("data", name="s1")
    cluster.ready_snapshots()
    backend.create_snapshot("data", name="s2")
    client = dtrain.Client(home=tmp_path, backend="kubernetes", backends={"kubernetes": backend})
    capsys.readouterr()
    args = argparse.Namespace(names=["s2", "s1"], timeout="0.2", project=None, json=False)
    assert _wait_snapshots(args, client) == EXIT_TIMEOUT
    assert capsys.readouterr().err == (
        "dtrain: --timeout 0.2 ran out waiting for snapshot 's2' (1 of 2 ready); wait longer (--timeout) or check "
        "'dtrain --backend kubernetes snapshot describe s2'\n")

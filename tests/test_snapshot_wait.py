"""`dtrain snapshot wait` / `snapshot create --wait` / Client.wait_snapshot: Kubernetes takes a
VolumeSnapshot asynchronously (status.readyToUse), so a restore right after `create` would refuse
or a script would poll by hand; the local backend's snapshots are ready once taken."""

from __future__ import annotations

import json
import threading
import time

import pytest

from dtrain.backends.base import TimeoutError_
from dtrain.errors import ConflictError, NotFoundError, SpecError
from tests.test_k8s_backend import NS, backend, cluster, make_backend  # noqa: F401 - fixtures


def test_a_kubernetes_snapshot_is_waited_for_until_its_controller_marks_it_ready(backend, cluster):
    backend.create_volume("data", size="1Gi")
    assert backend.create_snapshot("data", name="s1").ready is False
    timer = threading.Timer(0.3, cluster.ready_snapshots)
    timer.start()
    started = time.monotonic()
    try:
        snap = backend.wait_snapshot("s1", timeout=30, poll=0.05)
    finally:
        timer.join()
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

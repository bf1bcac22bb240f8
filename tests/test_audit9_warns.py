"""Audit 9, warnings: a backend's warnings (a source it could not read, lines that may be missing)
travel with the call's own result, not in attributes of a backend that threads share."""

from __future__ import annotations

import threading

import pytest
from test_audit8_classes import _k8s_cluster


class _Gated:
    """The backend's Kubernetes API, whose first StorageClass listing waits for `go`."""

    def __init__(self, api):
        self._api, self.inside, self.go, self._first = api, threading.Event(), threading.Event(), True

    def list(self, resource, namespace, *args, **kwargs):
        if resource.plural == "storageclasses" and self._first:
            self._first = False
            self.inside.set()
            assert self.go.wait(30)
        return self._api.list(resource, namespace, *args, **kwargs)

    def __getattr__(self, name):
        return getattr(self._api, name)


def test_a_warning_stays_with_the_request_it_belongs_to(home):
    """Two requests at once on one backend (the HTTP server's threads share an injected one): the
    one that could read every class got the other's warning (`classes_unlisted`, an attribute of the
    backend, was read after the other request had set it)."""
    pytest.importorskip("kubernetes")
    pytest.importorskip("fastapi")
    import httpx
    from server_util import ThreadServer

    from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
    from dtrain.backends.kubernetes.fake import FakeKubeServer
    from dtrain.client import Client
    from dtrain.server.app import create_app

    cluster = _k8s_cluster()
    with FakeKubeServer(cluster) as server:
        api = server.api_client()
        backend = KubernetesBackend(KubernetesConfig(project="lanes", image="i:1"), api_client=api)
        gate = backend._api = _Gated(backend.api)
        http_server = ThreadServer(create_app(lambda: Client(
            home=home, backend="kubernetes", backends={"kubernetes": backend}), sample_every=3600))
        try:
            with httpx.Client(base_url=http_server.url, timeout=60) as http:
                got = {}
                whole = threading.Thread(target=lambda: got.setdefault("whole", http.get("/api/v1/storage-classes")))
                whole.start()  # reads every class, once the other request is done
                assert gate.inside.wait(30)
                cluster.forbidden.add(("storage.k8s.io", "volumeattributesclasses"))
                part = http.get("/api/v1/storage-classes")  # may not read the VolumeAttributesClasses
                cluster.forbidden.clear()
                gate.go.set()
                whole.join(60)
            assert [c["name"] for c in part.json()] == ["standard"] and "VolumeAttributesClasses" in part.headers["warning"]
            assert [c["name"] for c in got["whole"].json()] == ["standard", "ultra"]
            assert "warning" not in got["whole"].headers, got["whole"].headers["warning"]
        finally:
            gate.go.set()
            http_server.stop()
        api.close()


def test_a_log_streams_notice_is_kept_with_the_stream_and_counts_no_bytes(caplog):
    """A `_logs` hook's notice is the stream's (not the backend's), logged once at once, never a line."""
    from dtrain.backends.base import Listed, LogLine, LogStream, Notice, newest_first

    closed = []

    def hook():
        try:
            yield Notice(code="logs-incomplete", message="rank 1 has not started again")
            yield LogLine(rank=0, time=None, text="abc")
            yield LogLine(rank=0, time=None, text="defgh")
            yield LogLine(rank=0, time=None, text="never read")
        finally:
            closed.append(True)

    with caplog.at_level("WARNING"):
        stream = LogStream(hook(), limit_bytes=6)
        assert stream.notices == ()  # known as it is read
        assert [ln.text for ln in stream] == ["abc", "d"]  # 4 bytes and 1 + its newline
    assert [n.message for n in stream.notices] == ["rank 1 has not started again"] and closed == [True]
    assert [r.getMessage() for r in caplog.records] == ["dtrain: warning: rank 1 has not started again"]
    # a listing's notices stay with it through filters and pages; it is still a list to every caller
    listed = Listed([], [Notice(code="jobs-unlisted", message="m")])
    assert listed == [] and newest_first(listed, None, 0).notices == listed.notices

"""An in-memory Kubernetes API server for tests and demos, served over real HTTP on 127.0.0.1.

No cluster runs on a developer's machine or in CI, so the backend's tests drive the official
`kubernetes` client (ApiClient, urllib3, chunked log streams) against this server instead.
`FakeCluster` stores objects and answers the REST paths the backend uses; its helper methods
play the controllers (operators create replica pods, conditions change, PVCs bind, snapshots
become ready) so a test can replay a job's life step by step. `FakeKubeServer` serves it. The store
is fake_cluster.py (its controllers fake_controllers.py), the words of its answers fake_wire.py; this
module serves them, and tests import every name from it.

Not a conformance fake: no admission, no schema validation (the render tests check schemas),
no watches; a followed log ends when its pod ends, or when its client has gone while it is idle
(`FakeCluster.streams` counts those being sent); PATCH takes a JSON Patch (a list: add, replace,
remove, on members and array elements, `/-` appending, as RFC 6902 says) or a merge patch (a mapping).
Where dtrain relies on a controller's move right after a write, the fake makes it then: a suspended job's
(or stopped Notebook's) running pods are deleted with their grace period (Terminating until
`finish_deletions`) and the job gets a Suspended condition; a deleted namespace is Terminating, its objects are deleted and
it goes once empty (one with a finalizer left holds it; nothing new may be created there meanwhile).
Faults are injected with `FakeCluster.fail`: an error status for matching requests, or a dropped
connection. `exec` speaks the API server's websocket channel protocol once `FakeCluster.on_exec`
says what a command writes (without it, the upgrade is answered as a proxy that drops it would).
"""
from __future__ import annotations

import base64
import hashlib
import os
import select
import socket
import struct
import threading
from collections.abc import Iterable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

# the store and its answers live apart (fake_cluster.py, fake_wire.py); tests import them from here
from .fake_cluster import CORE, CRDS, JOB_PLURALS, FakeCluster  # noqa: F401
from .fake_wire import DROP, UPGRADE, USER, Fault, exec_writes, rfc3339  # noqa: F401

_WEBSOCKET_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"  # RFC 6455's key suffix


def _client_gone(sock: socket.socket) -> bool:
    """The client closed (or shut down) its side: its socket reads as ended without waiting."""
    readable, _, _ = select.select([sock], [], [], 0)
    if not readable:
        return False
    try:
        return sock.recv(1, socket.MSG_PEEK) == b""
    except OSError:
        return True


def _frame(opcode: int, payload: bytes) -> bytes:
    """One final, unmasked websocket frame (RFC 6455 5.2), as a server sends it."""
    size = len(payload)
    if size < 126:
        head = struct.pack("!BB", 0x80 | opcode, size)
    elif size < 1 << 16:
        head = struct.pack("!BBH", 0x80 | opcode, 126, size)
    else:
        head = struct.pack("!BBQ", 0x80 | opcode, 127, size)
    return head + payload


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # chunked streams for `logs -f`
    disable_nagle_algorithm = True  # headers and body go out at once, not 40 ms apart

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        status, payload = self.server.cluster.handle(self.command, self.path, body)  # type: ignore[attr-defined]
        if status == DROP:  # an API server that went away mid-request
            self.close_connection = True
            return
        if status == UPGRADE:
            self._exec_session(payload)  # type: ignore[arg-type]
            return
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        try:
            if isinstance(payload, bytes):
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
                return
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            self._send_chunks(payload)
        except (BrokenPipeError, ConnectionResetError):  # the client stopped reading a stream
            self.close_connection = True

    def _send_chunks(self, chunks: Iterator[bytes]) -> None:
        """A stream, chunk by chunk; an empty chunk marks an idle stream, which ends, as the API
        server's does, once the client has closed its connection."""
        cluster: FakeCluster = self.server.cluster  # type: ignore[attr-defined]
        cluster.count_stream(+1)
        try:
            for chunk in chunks:
                if not chunk:
                    if _client_gone(self.connection):
                        self.close_connection = True
                        return
                    continue
                self.wfile.write(f"{len(chunk):x}\r\n".encode() + chunk + b"\r\n")
                self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
        finally:
            cluster.count_stream(-1)

    def _exec_session(self, writes: Iterable[tuple[int, bytes]]) -> None:
        """The websocket handshake, one binary frame per write (its first byte the channel), a close
        frame, and the client's close frame read before the connection ends."""
        key = self.headers.get("Sec-WebSocket-Key", "").encode()
        accept = base64.b64encode(hashlib.sha1(key + _WEBSOCKET_GUID).digest()).decode()
        self.send_response(101, "Switching Protocols")
        self.send_header("Upgrade", "websocket")
        self.send_header("Connection", "Upgrade")
        self.send_header("Sec-WebSocket-Accept", accept)
        self.send_header("Sec-WebSocket-Protocol", "v4.channel.k8s.io")
        self.end_headers()
        for channel, data in writes:
            self.wfile.write(_frame(0x2, bytes([channel]) + data))
        self.wfile.write(_frame(0x8, struct.pack("!H", 1000)))
        self.wfile.flush()
        self.connection.settimeout(10.0)  # a client that went away must not hold this thread
        try:
            self.rfile.read(2)  # the start of the client's answering close frame
        except OSError:
            pass
        self.close_connection = True

    do_GET = do_POST = do_DELETE = do_PUT = do_PATCH = _serve

    def log_message(self, format: str, *args: Any) -> None:  # keep test output clean
        pass


class FakeKubeServer:
    """Serves a FakeCluster on 127.0.0.1:<free port> from a background thread."""

    def __init__(self, cluster: FakeCluster | None = None):
        self.cluster = cluster or FakeCluster()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
        self._server.daemon_threads = True
        self._server.cluster = self.cluster  # type: ignore[attr-defined]
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.02},
                                        name="fake-kube-api", daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> "FakeKubeServer":
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def api_client(self):
        """An official kubernetes.client.ApiClient pointed at this server (no proxy, no retries)."""
        from kubernetes import client

        config = client.Configuration(host=self.url)
        config.proxy = None
        config.no_proxy = "*"
        config.retries = 0
        return client.ApiClient(config)

    def write_kubeconfig(self, path: os.PathLike[str] | str) -> None:
        """A kubeconfig whose current context ('fake') reaches this server with no credentials, as
        the real `dtrain` command (a process of its own) reads one."""
        import yaml

        Path(path).write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": "fake",
            "clusters": [{"name": "fake", "cluster": {"server": self.url}}],
            "users": [{"name": "fake", "user": {}}],
            "contexts": [{"name": "fake", "context": {"cluster": "fake", "user": "fake"}}]}))

    def __enter__(self) -> "FakeKubeServer":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.close()

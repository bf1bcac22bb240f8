"""Real `dtrain server` processes (and in-thread uvicorn servers) on free loopback ports, for tests."""

from __future__ import annotations

import contextlib
import os
import select
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import uvicorn

from conftest import DTRAIN, Dtrain, _cleanup


class ServerProcess:
    """`dtrain server --port 0` as a user starts it; the URL is read from its first line."""

    def __init__(self, home: Path, *, args: tuple[str, ...] = (), env: dict[str, str] | None = None,
                 cwd: Path | None = None):
        self.home = home
        self.env = {**os.environ, **(env or {}), "DTRAIN_HOME": str(home)}  # the home always wins: CI exports one
        self.proc = subprocess.Popen([DTRAIN, "server", "--port", "0", *args], env=self.env, cwd=cwd,
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.banner = self._first_line(timeout=60)
        self.url = self.banner.split()[2].split("?")[0].rstrip("/")
        self.http = httpx.Client(base_url=self.url, timeout=60)

    def _first_line(self, timeout: float) -> str:
        poll = select.poll()  # select() refuses a descriptor past 1023, which a long test process reaches
        poll.register(self.proc.stdout, select.POLLIN)
        ready = poll.poll(timeout * 1000)
        if not ready:
            self.proc.kill()
            raise AssertionError(f"dtrain server printed nothing in {timeout}s: {self.proc.stderr.read()}")
        line = self.proc.stdout.readline()
        if not line.startswith("dtrain server: http://"):
            self.proc.kill()
            raise AssertionError(f"unexpected first line {line!r}: {self.proc.stderr.read()}")
        return line.strip()

    def dtrain(self) -> Dtrain:
        """The CLI against the same DTRAIN_HOME and environment."""
        return Dtrain(self.home, env={k: v for k, v in self.env.items() if k == "DTRAIN_GPUS"})

    def stop(self) -> None:
        self.http.close()
        _cleanup(self.dtrain())
        self.proc.terminate()
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


class ThreadServer:
    """A uvicorn server for an app built in the test (e.g. with a token), in a background thread."""

    def __init__(self, app, **config):
        """`config`: more of uvicorn.Config's settings (root_path="/dtrain": behind a proxy's prefix)."""
        from dtrain.server.serve import bind

        self.sock = bind("127.0.0.1", 0)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.server = uvicorn.Server(uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=2, **config))
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]}, daemon=True)
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise AssertionError("the in-thread server did not start")
            time.sleep(0.05)

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=20)
        self.sock.close()


@contextlib.contextmanager
def local_api(home: Path) -> Iterator[httpx.Client]:
    """A client of the HTTP API over home's local backend, served by a ThreadServer (the nodes not sampled),
    stopped at the end."""
    from dtrain.client import Client
    from dtrain.server.app import create_app

    server = ThreadServer(create_app(lambda: Client(home=home), sample_every=3600))
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            yield http
    finally:
        server.stop()


def wait_until(check, timeout: float = 60, what: str = "condition"):
    """Poll `check()` until it returns something truthy (the value is returned)."""
    deadline = time.monotonic() + timeout
    last = None
    while time.monotonic() < deadline:
        last = check()
        if last:
            return last
        time.sleep(0.2)
    raise AssertionError(f"{what} not reached in {timeout}s (last: {last!r})")

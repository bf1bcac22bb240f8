"""`dtrain server`: bind, print where to go (and the token, the first time), serve until Ctrl-C."""

from __future__ import annotations

import asyncio
import errno
import ipaddress
import socket
from pathlib import Path
from typing import Callable

import uvicorn

from dtrain.errors import ConflictError, SpecError
from dtrain.names import check_port
from dtrain.server.auth import TOKEN_FILE, is_loopback, load_or_create_token


def bind(host: str, port: int) -> socket.socket:
    """Bind before uvicorn starts, so that port 0 works and the printed URL has the real port."""
    check_port(port)
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as err:
        raise SpecError(f"invalid --host {host!r} ({err.strerror}); use an address such as 127.0.0.1") from None
    family, _, proto, _, address = infos[0]
    # With its protocol named (IPPROTO_TCP, not 0), asyncio sets TCP_NODELAY on every accepted
    # connection, as it does for a socket it makes itself; without it a response written in two
    # parts (headers, then body) waited for the client's delayed ACK: 40 ms a request.
    sock = socket.socket(family, socket.SOCK_STREAM, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as err:
        sock.close()
        raise ConflictError(f"cannot listen on {host}:{port} ({err.strerror}); {_bind_hint(err, host)}") from None
    sock.listen(128)
    sock.set_inheritable(False)  # jobs the server starts must not hold the port open
    return sock


def _bind_hint(err: OSError, host: str) -> str:
    """What to change: the port when it is taken, the address when it is not this machine's."""
    if err.errno == errno.EADDRNOTAVAIL:
        return f"{host} is not an address of this machine: pick another --host, e.g. 127.0.0.1 or 0.0.0.0"
    if err.errno == errno.EACCES:
        return "ports below 1024 need root: pick another --port, e.g. 8500"
    return "pick another --port"


class Server(uvicorn.Server):
    """uvicorn's server, which sets `stopping` as soon as it begins to shut down.

    uvicorn waits for open requests before it tells the app (the lifespan's shutdown comes last),
    so waits and log streams watch this event to end at once rather than when they time out."""

    def __init__(self, config: uvicorn.Config, stopping: asyncio.Event):
        super().__init__(config)
        self.stopping = stopping

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        self.stopping.set()
        await super().shutdown(sockets)


def run(make_client: Callable[[], object], home: Path, *, host: str, port: int, read_only: bool,
        root_path: str = "") -> int:
    from dtrain.server.app import create_app

    # Bind first: a failed bind must not use up the token, which is printed only when it is made.
    sock = bind(host, port)
    try:
        token = created = None
        if not is_loopback(host):
            token, created = load_or_create_token(home)
    except BaseException:
        sock.close()
        raise
    print(banner(url_of(host, sock.getsockname()[1]), home / TOKEN_FILE, token=token, created=created,
                 read_only=read_only), flush=True)
    app = create_app(make_client, token=token, read_only=read_only)
    config = uvicorn.Config(app, log_level="warning", timeout_graceful_shutdown=3, access_log=False,
                            root_path=root_path)  # a proxy's prefix: the app's 404s and OpenAPI name it
    Server(config, app.state.stopping).run(sockets=[sock])
    return 0


def url_of(host: str, port: int) -> str:
    """The address to open: bound to every address (0.0.0.0, ::), this machine's name, as Jupyter prints it;
    http://0.0.0.0:8500/ opened on another machine goes to that machine itself, or nowhere."""
    try:
        if ipaddress.ip_address(host).is_unspecified:
            host = socket.gethostname()
    except ValueError:
        pass  # a name: as given
    return f"http://{f'[{host}]' if ':' in host else host}:{port}/"


def banner(url: str, token_file: Path, *, token: str | None, created: bool | None, read_only: bool) -> str:
    """What `dtrain server` prints first: the URL; a new token only once, inside the URL to open."""
    mode = " (read-only)" if read_only else ""
    if token is None:
        return f"dtrain server: {url}{mode}"
    if created:
        return (f"dtrain server: {url}?token={token}{mode}\n  (a new token, kept in {token_file}; "
                f"it is printed only this once)")
    return f"dtrain server: {url}{mode}  token: the one in {token_file} (open {url}?token=TOKEN once)"

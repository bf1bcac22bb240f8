"""The socket `dtrain server` binds lets asyncio (so uvicorn) turn Nagle's algorithm off on every
connection it accepts. A socket made with protocol 0 did not: each response, written as headers
then body, waited for the client's delayed ACK, 40 ms on every request (the dashboard's, a log
stream's lines). Checked here on the connection asyncio accepts, as uvicorn serves it."""

from __future__ import annotations

import asyncio
import socket

import pytest

from dtrain.server.serve import bind


def _ipv6() -> bool:
    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.parametrize("host", ["127.0.0.1", pytest.param("::1", marks=pytest.mark.skipif(
    not _ipv6(), reason="no IPv6 loopback here"))])
def test_accepted_connections_send_without_waiting_for_an_ack(host):
    async def accepted_nodelay() -> int:
        got: asyncio.Future = asyncio.get_running_loop().create_future()

        class Probe(asyncio.Protocol):
            def connection_made(self, transport):
                sock = transport.get_extra_info("socket")
                got.set_result(sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
                transport.close()

        sock = bind(host, 0)
        server = await asyncio.get_running_loop().create_server(Probe, sock=sock)  # as uvicorn does
        try:
            _, writer = await asyncio.open_connection(host, sock.getsockname()[1])
            value = await asyncio.wait_for(got, 10)
            writer.close()
            return value
        finally:
            server.close()
            await server.wait_closed()

    assert asyncio.run(accepted_nodelay()) != 0

"""One Client per worker thread: a Client holds SQLite connections, which threads must not share
mid-transaction; separate connections lock against each other as separate CLI processes do."""

from __future__ import annotations

import threading
from typing import Callable

from fastapi import Request


class Clients:
    """One Client per worker thread, made on first use."""

    def __init__(self, make: Callable[[], object]):
        self._make = make
        self._local = threading.local()

    def get(self):
        client = self._local.__dict__.get("client")
        if client is None:
            client = self._local.client = self._make()
        return client


def client(request: Request):
    """This thread's Client; call it inside a route's body (sync routes run in worker threads)."""
    return request.app.state.clients.get()

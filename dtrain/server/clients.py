"""One Client per worker thread: a Client holds SQLite connections, which threads must not share
mid-transaction; separate connections lock against each other as separate CLI processes do."""

from __future__ import annotations

import threading
from typing import Callable

from fastapi import Request


class Clients:
    """One Client per worker thread, made on first use.

    Kept in a plain dict keyed by thread, not in a `threading.local`: a child forked from Python
    clears every other thread's `threading.local`. When a submit forked that way (before
    procs.spawn_detached used subprocess), that freed their Clients in the child, whose finalizers
    closed SQLite connections there; a close needs SQLite's global mutex, which another thread of
    the server may have held at the fork, so under concurrent requests the child hung for ever and
    the submit with it. A dict is left alone by a fork; the Clients of threads that have ended are
    dropped here instead."""

    def __init__(self, make: Callable[[], object]):
        self._make = make
        self._clients: dict[threading.Thread, object] = {}
        self._lock = threading.Lock()

    def get(self):
        me = threading.current_thread()
        with self._lock:
            client = self._clients.get(me)
        if client is None:
            client = self._make()
            with self._lock:
                ended = [self._clients.pop(t) for t in list(self._clients) if not t.is_alive()]
                self._clients[me] = client
            del ended  # their connections close here, outside the lock
        return client

    def clear(self) -> None:
        """Drop every thread's Client (the server stops): their SQLite connections close then, not whenever
        the app is collected (an app built again and again in one process, as tests do, kept them all)."""
        with self._lock:
            dropped = list(self._clients.values())
            self._clients.clear()
        del dropped


def client(request: Request):
    """This thread's Client; call it inside a route's body (sync routes run in worker threads)."""
    return request.app.state.clients.get()

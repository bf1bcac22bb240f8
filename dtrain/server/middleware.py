"""ASGI wrappers that make the API answer as the docs say, whatever FastAPI's defaults.

- `HeadAsGet`: HEAD wherever GET (the docs call HEAD a read method; FastAPI's routes answer
  only the methods they name, and naming HEAD on each would put HEAD operations, with bodies
  they never send, into the schema).
- `EmptyQuery`: `?project=&status=` (what an HTML form sends for "any") means no filter, as an
  absent parameter does, rather than a 422 for an empty name.
- `BodyLimit`: a request body past MAX_BODY is refused (413) before it is read whole; FastAPI
  reads any body into memory, a 245 MB one too.
- `EncodedSlash`: a name holding an encoded '/' (`/jobs/a%2Fb`) is refused as an invalid name
  rather than routed as the decoded path.
"""

from __future__ import annotations

import json

from dtrain.spec import MAX_ARGS_ENV

HEAD = "dtrain.head"  # in the scope of a HEAD request served as GET, for the 405's message


class HeadAsGet:
    """Serve HEAD as GET and send the headers only; the response ends at its first body message,
    so that a HEAD of a log stream ends at once rather than following the job."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or scope["method"] != "HEAD":
            return await self.app(scope, receive, send)
        ended = False

        async def headers_only(message):
            nonlocal ended
            if message["type"] == "http.response.body":
                if ended:
                    return
                ended = True
                message = {"type": "http.response.body", "body": b"", "more_body": False}
            await send(message)
        # uvicorn keeps its own scope, still HEAD: it sends no body and keeps the GET's content-length
        await self.app({**scope, "method": "GET", HEAD: True}, receive, headers_only)


class EmptyQuery:
    """Drop query parameters whose value is empty (`a=` or a bare `a`), keeping the others' bytes as sent."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        query = scope.get("query_string", b"") if scope["type"] == "http" else b""
        if query:
            kept = b"&".join(p for p in query.split(b"&") if p.partition(b"=")[2])
            if kept != query:
                scope = {**scope, "query_string": kept}
        return await self.app(scope, receive, send)


class EncodedSlash:
    """A path segment holding %2F: Starlette routes the decoded path, so `GET /jobs/a%2Fb` answered 404 "no
    such path /api/v1/jobs/a/b" and `/jobs/a%2F` a 307 to job a. Where `refusal(scope)` finds that the
    segment stands for a route's name it says why the name is invalid, a 422 as any invalid name gets."""

    def __init__(self, app, refusal):
        self.app, self.refusal = app, refusal

    async def __call__(self, scope, receive, send):
        raw = scope.get("raw_path") or b"" if scope["type"] == "http" else b""
        said = self.refusal(scope) if b"%2f" in raw.lower() else None
        if said is None:
            return await self.app(scope, receive, send)
        await _answer(send, 422, {"error": said, "kind": "SpecError"})


async def _answer(send, status: int, answer: dict, headers: tuple = ()) -> None:
    body = json.dumps(answer).encode()
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                            *headers]})
    await send({"type": "http.response.body", "body": body})


# The largest body any route takes: a job whose command and environment hold MAX_ARGS_ENV bytes,
# JSON-escaped (a control character takes six), with room for the rest of its fields.
MAX_BODY = 8 * MAX_ARGS_ENV


class BodyTooLarge(Exception):
    """Raised in the reading of a body past the limit (FastAPI reads it for the route, and keeps
    this as the cause of the 400 it makes of any failed read: app.py answers 413 for it)."""


def too_large(limit: int, length: int | None = None) -> tuple[int, dict]:
    size = f"{length} bytes" if length is not None else f"more than {limit // 2**20} MiB"
    return 413, {"error": f"the request body is {size}: the API takes at most {limit // 2**20} MiB (a job's "
                          f"command and environment at most 1 MiB; put large data in a file on a volume)",
                 "kind": "SpecError"}


class BodyLimit:
    """413 and one line for a body over `limit` bytes: at once by its Content-Length, else (a
    chunked body) as soon as the bytes received pass it, which stops reading it."""

    def __init__(self, app, limit: int = MAX_BODY):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        length = dict(scope["headers"]).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            return await self._refuse(send, int(length))
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.limit:
                    raise BodyTooLarge
            return message

        # FastAPI reads a route's body itself and turns the raise into a 400 caused by it, which
        # app.py answers with this same 413; only a read outside FastAPI's comes back here.
        try:
            await self.app(scope, counted, send)
        except BodyTooLarge:
            await self._refuse(send, None)

    async def _refuse(self, send, length: int | None) -> None:
        status, answer = too_large(self.limit, length)
        await _answer(send, status, answer, ((b"connection", b"close"),))

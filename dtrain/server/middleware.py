"""Two ASGI wrappers that make the API answer as the docs say, whatever FastAPI's defaults.

- `HeadAsGet`: HEAD wherever GET (the docs call HEAD a read method; FastAPI's routes answer
  only the methods they name, and naming HEAD on each would put HEAD operations, with bodies
  they never send, into the schema).
- `EmptyQuery`: `?project=&status=` (what an HTML form sends for "any") means no filter, as an
  absent parameter does, rather than a 422 for an empty name.
"""

from __future__ import annotations

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

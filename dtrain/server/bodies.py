"""Request bodies read as the user wrote them: every JSON number keeps its text.

Python's json reads `1e9` as 1000000000.0, `1e400` as inf and `-0` as 0, and a refusal then quoted
what Python read, where `dtrain submit --cpu 1e9` is refused as "1e9". Each route of the API is a
`TypedRoute`, whose body is read with names.written: a number that Python writes back otherwise is a
WrittenInt or WrittenFloat, so a refusal (app.py's, the spec's) quotes it as typed. Pydantic hands
the fields plain numbers, so what is stored and answered never holds the text.
"""

from __future__ import annotations

import json
import re

from fastapi.routing import APIRoute
from starlette.requests import Request

from dtrain.errors import SpecError
from dtrain.names import SHOWN, WrittenFloat, cut, shown, written

# What a user may mean as a number that JSON does not take: 017, +5, .5, 5., 1.e3
_NEAR_NUMBER = re.compile(r"[-+]?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][-+]?[0-9]+)?")
_KEY_BEFORE = re.compile(r'"((?:[^"\\]|\\.){1,200})"\s*:\s*$')


class BodyRefused(ValueError):
    """A body this module refuses as it reads it: its message is the one line app.py answers with (a
    422, as any body of the wrong shape)."""


class NotJsonNumber(BodyRefused):
    """A body whose JSON holds a number that JSON does not write that way (017, +5, .5)."""


class DuplicateKey(BodyRefused):
    """A body with a key twice in one object: Python's json keeps the last, so `{"name": "x", "name": "y"}`
    created job y; which one the user meant is not for the server to guess (RFC 8259: names SHOULD be unique)."""


def _int(text: str):
    return written(int(text), text)  # past 4300 digits int() refuses: app.py names that bound


def _float(text: str):
    return written(float(text), text)


def _constant(text: str) -> WrittenFloat:
    return WrittenFloat(float(text), text)  # NaN, Infinity, -Infinity: Python's json takes them, JSON has none


def typed_json(body: bytes | str):
    """`body` as json.loads reads it, each number as written (names.written)."""
    try:
        return json.loads(body, parse_int=_int, parse_float=_float, parse_constant=_constant,
                          object_pairs_hook=_object)
    except json.JSONDecodeError as err:
        said = _not_a_number(err.doc, err.pos)
        if said is None:
            raise
        raise NotJsonNumber(said) from None


def _object(pairs: list[tuple[str, object]]) -> dict:
    """One JSON object (at any depth: json calls this for each), refused where a key comes twice."""
    made: dict = {}
    for key, value in pairs:
        if key in made:
            raise DuplicateKey(f"invalid request: the body's JSON gives the key {shown(key)} twice in one object: "
                               f"send each key once")
        made[key] = value
    return made


def _not_a_number(doc: str, pos: int) -> str | None:
    """The line for a JSON error at `pos` that lies in a number JSON does not take, else None."""
    start = pos
    while start > 0 and doc[start - 1] in "0123456789+-.eE":
        start -= 1
    match = _NEAR_NUMBER.match(doc, start)
    if match is None or match.end() <= pos or not re.search(r"[0-9]", match.group()):
        return None
    before = doc[:start].rstrip()
    if before and before[-1] not in ":,[":  # not where a value begins (inside a word, say)
        return None
    key = _KEY_BEFORE.search(before) if before.endswith(":") else None
    name = "field " + shown(json.loads('"' + key.group(1) + '"')) if key else "a value"
    typed = match.group()
    return (f"invalid request: the body's {name} holds {cut(typed, SHOWN)}, which is not a JSON number (JSON "
            f"writes no leading zero, no '+', and a digit on each side of a '.'): write {cut(_as_json(typed), SHOWN)}")


def _as_json(typed: str) -> str:
    """`typed` (017, +5, .5, 5., -01.e3) as JSON writes that number: 17, 5, 0.5, 5.0, -1.0e3."""
    sign = "-" if typed.startswith("-") else ""
    mantissa, e, exponent = typed.lstrip("+-").replace("E", "e").partition("e")
    whole, point, fraction = mantissa.partition(".")
    text = sign + (whole.lstrip("0") or "0") + (point and "." + (fraction or "0"))
    return text + (typed[len(typed) - len(exponent) - 1] + exponent if e else "")


class TypedRequest(Request):
    async def json(self):
        if not hasattr(self, "_json"):
            self._json = typed_json(await self.body())
        return self._json


class TypedRoute(APIRoute):
    """An API route whose JSON body keeps each number's text (FastAPI reads the body with
    `request.json()`, which this route's requests answer with typed_json), and which refuses a
    query parameter it does not take (FastAPI ignores one, so `DELETE /jobs/x?projet=team-a`
    deleted job x of the default project, and `?stauts=Failed` listed every job) or gets twice."""

    def get_route_handler(self):
        handle = super().get_route_handler()
        takes = sorted(_query_names(self.dependant))
        # a body sent where none is read was ignored: POST /jobs/x/suspend {"project": "team-a"} suspended x of
        # the default project
        reads_body = bool(self.dependant.body_params) or self.methods <= {"GET", "HEAD"}

        async def typed(request: Request):
            unknown = [k for k in request.query_params if k not in takes and k != "token"]  # auth.Guard's
            if unknown:
                raise SpecError(_unknown_query(request, unknown[0], takes))
            # FastAPI reads the last of a parameter given twice: ?status=Running&status=Pending listed the Pending
            # jobs alone, as if the first were not there
            if twice := next((k for k in request.query_params if len(request.query_params.getlist(k)) > 1), None):
                raise SpecError(_query_twice(request, twice))
            typed_request = TypedRequest(request.scope, request.receive)
            if not reads_body and (await typed_request.body()).strip() not in (b"", b"{}"):
                raise SpecError(_unread_body(request, takes))
            return await handle(typed_request)
        return typed


def _query_names(dependant) -> set[str]:
    """The query parameters a route reads, its dependencies' too."""
    return {p.alias for p in dependant.query_params}.union(*map(_query_names, dependant.dependencies))


def _unread_body(request: Request, takes: list[str]) -> str:
    said = f"{request.method} {request.url.path} takes no body: leave it out"
    return f"{said}; its parameters go in the query ({', '.join(f'?{t}=' for t in takes)})" if takes else said


def _query_twice(request: Request, name: str) -> str:
    given = ", ".join(shown(v) for v in request.query_params.getlist(name))
    return (f"query parameter {shown(name)} given more than once on {request.method} {request.url.path} ({given}): "
            f"give it once")


def _unknown_query(request: Request, name: str, takes: list[str]) -> str:
    path = f"{request.method} {request.url.path}"
    said = f"unknown query parameter {shown(name)} on {path}"
    if not takes:
        return f"{said}: it takes none; leave it out"
    return f"{said}: it takes {', '.join(takes)} (see /api/v1/openapi.json)"

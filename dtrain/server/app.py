"""The FastAPI application: the HTTP API under /api/v1, /metrics and the dashboard.

    app = create_app(lambda: Client(home=...), token=None, read_only=False)

Every route calls `dtrain.Client`, the same door the CLI goes through. The app takes a way to
make a Client rather than one Client because a Client holds SQLite connections, and one
connection shared by the server's worker threads would mix their transactions; each worker
thread gets its own Client (SQLite then locks between them as it does between CLI processes).
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import sqlite3
from pathlib import Path
from typing import Callable, get_args
from urllib.parse import unquote_to_bytes

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException
from starlette.routing import Match, Mount

from dtrain import db, errors
from dtrain.names import (WrittenFloat, WrittenInt, check_gpu_quota, check_limit_bytes, check_mounted_volume,
                          check_name, check_page, check_since, check_storage_class, check_tail, parse_least_size,
                          near_name, parse_volume_size, rank_refusal, shown, status_refusal, wait_refusal)
from dtrain.numbers import whole_number
from dtrain.remotes import REMOTE_TTL_S, RemoteReads
from dtrain.server import routes_cluster, routes_jobs, routes_notebooks, routes_storage, wire
from dtrain.server.auth import Guard
from dtrain.server.bodies import BodyRefused
from dtrain.server.clients import Clients
from dtrain.server.history import GpuHistory
from dtrain.server.metrics import metrics_route
from dtrain.server.middleware import (HEAD, MAX_BODY, BodyLimit, BodyTooLarge, EmptyQuery, EncodedSlash, HeadAsGet,
                                      too_large)
from dtrain.spec import MEMORY_EXAMPLE, MIN_MEMORY, JobSpec, parse_selector

STATIC = Path(__file__).parent / "static"
API = "/api/v1"

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")  # in the order a 405's Allow lists them
SEND_JSON = "send a JSON object with the header 'Content-Type: application/json'"
# The one place where an error class becomes an HTTP status.
STATUS = ((errors.NotFoundError, 404), (errors.ConflictError, 409), (errors.QuotaError, 409),
          (errors.SpecError, 422), (errors.DataError, 422), (TimeoutError, 408), (errors.NotSupportedError, 501),
          (errors.SetupError, 503), (errors.BackendError, 502), (errors.StorageError, 507))


def http_status(err: errors.DtrainError) -> int:
    return next((code for cls, code in STATUS if isinstance(err, cls)), 400)


def create_app(make_client: Callable[[], object], *, token: str | None = None, read_only: bool = False,
               sample_every: float = 5.0, max_streams: int = 200, remote_every: float = REMOTE_TTL_S) -> FastAPI:
    """`token`: required on every route when set (bound off loopback); `read_only`: GET only;
    `remote_every`: seconds a remote backend's job counts (/metrics) and job list (GET /jobs of every
    project) are used before they are read again."""
    first: list = []
    remote_reads = RemoteReads(remote_every)  # one for every thread: a scrape does not reach AWS each time

    def make_http_client():
        made = make_client()
        made.door = "http"  # a refusal names ?project=, not the SDK's project= or the CLI's -p
        made.share_submitted(first[0] if first else made)  # every thread finds a job POSTed to another backend
        made.share_remote_reads(remote_reads)
        first[:] = first or [made]
        return made

    clients = Clients(make_http_client)
    sampling = Clients(make_client)
    history = GpuHistory(sampling, every=sample_every)

    async def lifespan(app):
        history.start()
        yield
        history.stop()
        first.clear()  # the server stops: its Clients' SQLite connections close now
        clients.clear()
        sampling.clear()

    app = FastAPI(title="dtrain", version="1", lifespan=lifespan, openapi_url=f"{API}/openapi.json",
                  docs_url=None, redoc_url=None,
                  description="Jobs, logs, notebooks, nodes, projects, volumes and snapshots: the dtrain Client "
                              "over HTTP.")
    app.state.clients = clients
    app.state.history = history
    app.state.streams = routes_jobs.Streams(max_streams)
    app.state.read_only = read_only
    app.state.stopping = asyncio.Event()  # set by serve.Server when shutdown begins: waits and streams end then
    for module in (routes_jobs, routes_notebooks, routes_cluster, routes_storage):
        app.include_router(module.router, prefix=API)
    app.add_api_route("/metrics", metrics_route(clients), include_in_schema=False)
    _errors(app)
    _pages(app)
    app.add_middleware(EncodedSlash, refusal=_slash_in_name)
    app.add_middleware(EmptyQuery)
    app.add_middleware(HeadAsGet)
    app.add_middleware(BodyLimit)  # inside Guard: a request without the token is refused unread
    app.add_middleware(Guard, token=token, read_only=read_only)  # the outermost: it sees every request first
    return app


def _errors(app: FastAPI) -> None:
    @app.exception_handler(errors.DtrainError)
    async def dtrain_error(_request, err: errors.DtrainError):
        return JSONResponse({"error": str(err), "kind": errors.kind_of(err)}, status_code=http_status(err))

    @app.exception_handler(sqlite3.Error)
    @app.exception_handler(OSError)
    async def machine_error(_request, err: Exception):
        """What the machine refused (the state database locked past its busy timeout, a full or
        read-only disk): the CLI's one line, as a 503 (locked: retry) or a 507; anything else a 500."""
        refused = db.machine_refused(err)
        if refused is None:
            raise err
        locked = db.lock_refused(err) is not None
        return JSONResponse({"error": refused, "kind": "StorageError"}, status_code=503 if locked else 507)

    @app.exception_handler(RequestValidationError)
    async def bad_request(request, err: RequestValidationError):
        return _refused(_one_line(request, err.errors()))

    @app.exception_handler(HTTPException)
    async def http_error(request, err: HTTPException):
        if isinstance(err.__cause__, BodyTooLarge):  # middleware.BodyLimit stopped the reading
            status, answer = too_large(MAX_BODY)
            return JSONResponse(answer, status_code=status, headers={"connection": "close"})
        if err.status_code == 400 and isinstance(err.__cause__, Exception):  # FastAPI could not read the body
            return _refused(_unreadable(err.__cause__))
        detail, headers = str(err.detail), err.headers
        if err.status_code == 404 and detail == "Not Found":  # no route: Starlette's bare words
            root, route = request.scope.get("root_path", ""), _route_path(request)
            api = root + API  # behind a proxy's --root-path, the address a client uses
            detail = f"no such path {request.url.path}: the API is under {api}/ (its paths: {api}/openapi.json)"
            if root and (route == root or route.startswith(root + "/")):  # said as /dtrain/dtrain/api/v1/jobs
                detail = (f"no such path {route}: the server's --root-path {root} is a prefix that the proxy in front "
                          f"strips, and this request still holds it: have the proxy strip {root}, or ask the "
                          f"server itself for {route[len(root):] or '/'}")
        if err.status_code == 405:
            detail, headers = _not_allowed(request, headers or {})
        return JSONResponse({"error": detail, "kind": "HTTPError"}, status_code=err.status_code, headers=headers)


def _slash_in_name(scope) -> str | None:
    """The name rule's line for a path's {name} segment sent holding an encoded '/' (/jobs/a%2Fb), as
    `GET /jobs/Bad_` is answered; None where no path of the API has a name where that segment is."""
    raw, root = scope["raw_path"], scope.get("root_path", "").encode()
    raw = raw[len(root):] if root and raw.startswith(root + b"/") else raw  # uvicorn --root-path puts it in front
    segments = [unquote_to_bytes(s).decode("utf-8", "replace") for s in raw.split(b"/")]
    for path in scope["app"].openapi()["paths"]:  # /api/v1/jobs/{name}/logs
        parts = path.split("/")
        if len(parts) != len(segments) or not all(p.startswith("{") or p == s for p, s in zip(parts, segments)):
            continue
        area = parts[3] if len(parts) > 3 else ""  # jobs: a job's name
        for part, segment in zip(parts, segments):
            if part.startswith("{") and "/" in segment:
                try:
                    check_name(segment, wire.NAMED.get(area, part.strip("{}")))
                except errors.SpecError as refused:
                    return str(refused)
    return None


def _route_path(request) -> str:
    """The path the routes match: past the root path (a proxy's prefix, uvicorn's --root-path), which
    the ASGI scope's path holds in front."""
    path, root = request.url.path, request.scope.get("root_path", "")
    return path[len(root):] if root and path.startswith(root + "/") else path


def _refused(message: str) -> JSONResponse:
    """A request of the wrong shape: 422 and one line, as dtrain's own SpecError."""
    return JSONResponse({"error": message, "kind": "SpecError"}, status_code=422)


def _unreadable(cause: Exception) -> str:
    """A body FastAPI's JSON reading gave up on (it answers a bare 400 'error parsing the body')."""
    if isinstance(cause, BodyRefused):  # bodies.py's line: 017, +5, .5 where a number is due; a key twice
        return str(cause)
    if isinstance(cause, UnicodeDecodeError):
        return "invalid request: the body is not UTF-8 text; send JSON encoded as UTF-8"
    if isinstance(cause, ValueError) and "digits" in str(cause):  # int('9' * 5000): Python's bound
        return ("invalid request: the body holds a number of more than 4300 digits, which no field takes; "
                "send the object the schema describes")
    if isinstance(cause, RecursionError):
        return "invalid request: the body's JSON is nested too deeply to read; send the object the schema describes"
    return f"invalid request: the body could not be read as JSON ({type(cause).__name__}); {SEND_JSON}"


def _not_allowed(request, headers: dict[str, str]) -> tuple[str, dict[str, str]]:
    """A 405's line and its Allow header, listing every method of the path: Starlette's names only
    the methods of the first route that matched (GET for /api/v1/jobs, which POST also takes)."""
    def takes(method: str) -> bool:
        scope = {**request.scope, "method": method}
        return any(not isinstance(r, Mount) and r.matches(scope)[0] == Match.FULL for r in request.app.routes)
    found = [m for m in METHODS if m != "HEAD" and takes(m)]
    if "GET" in found:
        found.insert(1, "HEAD")  # middleware.HeadAsGet
    kept = {k: v for k, v in headers.items() if k.lower() != "allow"}
    allow = ", ".join(found) or next((v for k, v in headers.items() if k.lower() == "allow"), "")  # a Mount's own
    method = "HEAD" if request.scope.get(HEAD) else request.method
    return f"{method} is not allowed on {request.url.path}: use {allow}", {**kept, "allow": allow}


class _Revalidated(StaticFiles):
    """The dashboard's files, checked again at every load (`no-cache`: a 304 while unchanged). Without a
    Cache-Control a browser keeps a file for a share of its age unasked, so a page loaded after an upgrade
    ran the old JavaScript (index.html is never stored) against the new API."""

    async def get_response(self, path: str, scope):
        response = await super().get_response(path, scope)
        response.headers["cache-control"] = "no-cache"
        return response


def _pages(app: FastAPI) -> None:
    """The dashboard: static files, no build step; the page's JavaScript calls /api/v1."""
    app.mount("/static", _Revalidated(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def index():
        if not app.state.read_only:
            return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})
        # a read-only server's page offers no button it would refuse (app.js reads the mark)
        page = (STATIC / "index.html").read_text(encoding="utf-8").replace("<body>", "<body data-read-only>", 1)
        return HTMLResponse(page, headers={"cache-control": "no-store"})


def _one_line(request, problems) -> str:
    """Pydantic's findings as one line: a value refused by a pattern gets names.py's message (the
    CLI's), never the pattern; a body that was not read as JSON says which header to send."""
    given = request.headers.get("content-type")
    if given and not _is_json(given) and any(tuple(e.get("loc", ()))[:1] == ("body",) for e in problems):
        return f"invalid request: the body was not read as JSON (Content-Type {shown(given)}); {SEND_JSON}"
    parts = []
    in_place = [tuple(e.get("loc", ()))[-2:] for e in problems if "RestoreInPlace" in e.get("loc", ())]
    if ("RestoreInPlace", "storage_class") in in_place and ("RestoreInPlace", "in_place") not in in_place:
        return wire.IN_PLACE_CLASS  # {"in_place": true} with a class: as `restore --in-place --class C` is refused
    if any("RestoreInPlace" in e.get("loc", ()) for e in problems) and not any(
            e.get("type") == "string_pattern_mismatch" for e in problems):  # neither member of the union fits
        return f"invalid request: {wire.RESTORE_BODY}"
    for e in problems[:5]:
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        if said := (_number_refusal(request, e) or _query_refusal(request, e) or _number_for_text(request, e)
                     or _text_for_list(e)):
            return said
        if e.get("type") == "string_pattern_mismatch":
            return _pattern_refusal(request, e.get("ctx", {}).get("pattern"), e.get("input"), loc)
        if e.get("type") == "json_invalid":
            return (f"invalid request: the body is not valid JSON ({e.get('ctx', {}).get('error', 'unreadable')} "
                    f"at character {loc[-1] if loc else 0}); {SEND_JSON}")
        parts.append(f"{'.'.join(x if x.isprintable() else ascii(x) for x in loc) or 'body'}: "
                     f"{e.get('msg', 'invalid')}{_near_field(request, e)}")  # a made-up name may hold a newline
    return "invalid request: " + "; ".join(parts)


# Body fields holding a number, and what says why one is refused: the spec's (and the CLI's) own check,
# so that `"gpu": -1` reads as `--gpu -1` does, not as pydantic's "Input should be greater than or equal to 0".
_NUMBERS = {("jobs", "processes"), ("jobs", "gpu"), ("jobs", "cpu"), ("jobs", "max_restarts"),
            ("jobs", "idle_timeout"), ("notebooks", "gpu"), ("notebooks", "cpu"), ("notebooks", "idle_timeout"),
            ("projects", "gpu_quota")}


def _number_refusal(request, problem) -> str | None:
    """The CLI's line for a number field of a body that pydantic refused (out of range, a fraction,
    another type); None for anything else, or where dtrain's check would take the value."""
    loc = tuple(problem.get("loc", ()))
    if len(loc) != 2 or loc[0] != "body" or problem.get("type") in ("missing", "extra_forbidden"):
        return None
    area = _route_path(request).removeprefix(API + "/").split("/")[0]
    if request.method != "POST" or (area, loc[1]) not in _NUMBERS:
        return None
    value = problem.get("input")
    try:
        if area == "projects":
            check_gpu_quota(value)
        else:  # a spec holding only that field (a notebook's for a notebook): its check is the one that speaks
            JobSpec(name="probe", command=("probe",), notebook=area == "notebooks", **{loc[1]: value})
    except errors.Worded as refused:  # in the HTTP body's words (the CLI's), not the SDK's
        return str(refused.in_words("http"))
    except errors.SpecError as refused:
        return str(refused)
    return None


def _number_for_text(request, problem) -> str | None:
    """A number where a body field takes a string ("size": 1e9): the field's pattern's refusal of
    that text (naming the range) where it refuses it, else how to send it; None for anything else."""
    loc, value = tuple(problem.get("loc", ())), problem.get("input")
    if (problem.get("type") != "string_type" or len(loc) not in (2, 3) or loc[0] != "body"
            or isinstance(value, bool) or not isinstance(value, (int, float))):
        return None
    text = value.text if isinstance(value, (WrittenInt, WrittenFloat)) else str(value)  # bodies.py kept it
    pattern = _body_pattern(request, loc[1]) if len(loc) == 2 else None
    if pattern is not None and not re.fullmatch(pattern, text):
        return _pattern_refusal(request, pattern, text, [str(loc[1])])
    # an item of a list or a mapping (a job file's `env: {STEPS: 3}`, which YAML reads as a number): env.STEPS
    field = ".".join(str(x) if str(x).isprintable() else ascii(x) for x in loc[1:])
    return f"invalid {field} {shown(value)}: {field} takes a JSON string, not a number: send \"{text}\""


def _text_for_list(problem) -> str | None:
    """A string where a body field takes a list of strings ("command": "python train.py"): the job file's
    line (`dtrain submit -f`) with the JSON to send; None for anything else."""
    loc, value = tuple(problem.get("loc", ())), problem.get("input")
    if problem.get("type") != "list_type" or len(loc) != 2 or loc[0] != "body" or not isinstance(value, str):
        return None
    words = value.split() if loc[1] == "command" else [value]
    return (f"invalid {loc[1]} {shown(value)}: must be a list of strings, not one string: "
            f"send {json.dumps(words or [value])}")


def _near_field(request, problem) -> str:
    """' (did you mean 'name'?)' for a body's unknown top-level field one slip from one the route's body takes
    ("nme"), or naming a word of one ("gpus": gpu_quota); '' otherwise. The schema stays as it is."""
    loc = tuple(problem.get("loc", ()))
    if problem.get("type") != "extra_forbidden" or len(loc) != 2 or loc[0] != "body" or not isinstance(loc[1], str):
        return ""
    fields = [name for param in getattr(getattr(request.scope.get("route"), "dependant", None), "body_params", ())
              for name in getattr(param.field_info.annotation, "model_fields", {})]
    key = loc[1].strip().lower()
    near = near_name(key, fields) or next(
        (f for f in fields if key.removesuffix("s") in f.split("_")[:1]), None)  # gpus: gpu_quota, not no_gpu_quota
    return f" (did you mean {near!r}?)" if near else ""


def _body_pattern(request, name: str) -> str | None:
    """The pattern that the route's body model gives field `name`, if any."""
    for param in getattr(getattr(request.scope.get("route"), "dependant", None), "body_params", ()):
        field = getattr(param.field_info.annotation, "model_fields", {}).get(name)
        for rule in getattr(field, "metadata", ()):
            if getattr(rule, "pattern", None):
                return rule.pattern
    return None


def _since(value, typed) -> None:
    """`since` as the SDK refuses it, with the bounds of the schema (a unix time from 0 to MAX_TIME)."""
    try:
        seconds = float(typed)
    except (TypeError, ValueError):
        seconds = math.nan
    check_since(seconds, value)  # the SDK's own check, naming the value as typed


def _status(_value, typed) -> None:
    if typed not in get_args(wire.STATUSES):
        raise status_refusal(typed, get_args(wire.STATUSES))  # Client.list's line


def _rank(_value, typed) -> None:
    raise rank_refusal(typed, "http")  # past MAX_PROCESSES too: no job's rank, and the job is not read


def _wait(_value, typed) -> None:
    raise wait_refusal(typed, "http")  # named as typed, as `dtrain wait --timeout` names it


# Query parameters whose refusal is the SDK's (and the CLI's) own line, not pydantic's "Input should be ...":
# each is given the value as a number where it is one, and as typed.
_QUERY = {"limit_bytes": lambda v, _: check_limit_bytes(v, "http"), "tail": lambda v, _: check_tail(v, "http"),
          "rank": _rank, "since": _since, "timeout": _wait,
          "status": _status,
          "label_selector": lambda _, typed: parse_selector(typed, "?label_selector=")}  # as typed: 1e3 is a key
# A page's bounds, in the words of the SDK's page verb of the list asked for (Client.page, page_volumes, ...)
_PAGE = {"limit": lambda v, what: check_page(v, 0, what), "offset": lambda v, what: check_page(None, v, what)}
# what pydantic says of a number out of its bounds or not a number at all
_NOT_IN_BOUNDS = {"greater_than_equal", "less_than_equal", "greater_than", "less_than", "int_parsing", "int_from_float",
                  "float_parsing", "finite_number", "int_type", "float_type"}


def _query_refusal(request, problem) -> str | None:
    """The SDK's line for a query parameter of _QUERY that the schema refused (out of range, no
    number, no status); for another query number (one only the API takes: a chart's `last`), its
    name and the schema's bounds in the words of the CLI's number refusals. Each is read by the CLI
    flags' rule (wire.QueryWhole: ?tail=1E3 is 1000) and named as typed (the query's own text)."""
    loc = tuple(problem.get("loc", ()))
    if len(loc) != 2 or loc[0] != "query" or problem.get("type") == "missing":
        return None
    typed = request.query_params.get(loc[1], problem.get("input"))  # the input is the rule's number, not the text
    value = whole_number(typed) if isinstance(typed, str) else typed
    if loc[1] in _PAGE:  # the records the route lists: GET /api/v1/volumes's are volumes
        what = getattr(request.scope.get("route"), "path", "/jobs").rsplit("/", 1)[-1]
        try:
            _PAGE[loc[1]](value, what)
        except errors.SpecError as refused:
            return str(refused)
        return None
    if loc[1] in _QUERY:
        try:
            _QUERY[loc[1]](value, typed)
        except errors.SpecError as refused:
            return str(refused)
        return None
    if problem.get("type") not in _NOT_IN_BOUNDS:
        return None
    low, high = _bounds(request, loc[1])
    if low is None or high is None:
        return None
    return f"invalid {loc[1]} {shown(value)}: use a whole number from {low} to {high}"


def _bounds(request, name: str) -> tuple[int | None, int | None]:
    """The minimum and maximum that the route's schema gives query parameter `name`."""
    low = high = None
    for field in getattr(getattr(request.scope.get("route"), "dependant", None), "query_params", ()):
        if field.alias == name:
            for rule in field.field_info.metadata:
                low, high = getattr(rule, "ge", low), getattr(rule, "le", high)
    return low, high


def _is_json(content_type: str) -> bool:
    """What FastAPI reads as JSON: application/json or application/*+json, with any parameters."""
    kind = content_type.split(";")[0].strip().lower()
    return kind == "application/json" or (kind.startswith("application/") and kind.endswith("+json"))


def _pattern_refusal(request, pattern: str | None, value, loc: list[str]) -> str:
    """The CLI's message for a value that a schema pattern refused: names.py's checks say why."""
    field = loc[-1] if loc else "value"
    area = _route_path(request).removeprefix(API + "/").split("/")[0]  # jobs, volumes, snapshots...
    named = wire.NAMED.get(field, wire.NAMED.get(area, field))
    if loc == ["query", "to"]:  # a diff's ?to= names a snapshot (a restore body's "to" is the new volume)
        named = "snapshot"
    checks = {wire.NAME: lambda v: check_name(v, named),
              wire.VOLUME_SIZE: parse_volume_size,
              wire.SIZE: lambda v: parse_least_size(v, "--memory", minimum=MIN_MEMORY, example=MEMORY_EXAMPLE),
              wire.CLASS: check_storage_class, wire.CLAIM: check_mounted_volume}
    try:
        checks.get(pattern, lambda v: None)(value)
    except errors.SpecError as refused:
        return str(refused)
    # names.py takes it but the API's narrower pattern does not (an API volume size has no 1e3 or 1000m)
    if pattern == wire.VOLUME_SIZE:
        return (f"invalid volume size {shown(value)}: the API takes a quantity from 1Mi to 1Ei without an "
                f"exponent, a milli suffix or leading zeros, its whole part at least 1Mi (1048576, 1049k, 1024Ki, "
                f"2M), such as 512Mi, 100Gi or 2G")
    return f"invalid {'.'.join(loc) or 'value'} {shown(value)}: use the form the schema gives (/api/v1/openapi.json)"

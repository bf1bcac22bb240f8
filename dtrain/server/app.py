"""The FastAPI application: the HTTP API under /api/v1, /metrics and the dashboard.

    app = create_app(lambda: Client(home=...), token=None, read_only=False)

Every route calls `dtrain.Client`, the same door the CLI goes through. The app takes a way to
make a Client rather than one Client because a Client holds SQLite connections, and one
connection shared by the server's worker threads would mix their transactions; each worker
thread gets its own Client (SQLite then locks between them as it does between CLI processes).
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.responses import FileResponse, JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException

from dtrain import errors
from dtrain.names import check_name
from dtrain.server import routes_cluster, routes_jobs, routes_storage, wire
from dtrain.server.auth import Guard
from dtrain.server.clients import Clients
from dtrain.server.history import GpuHistory
from dtrain.server.metrics import metrics_route

STATIC = Path(__file__).parent / "static"
API = "/api/v1"

# The one place where an error class becomes an HTTP status.
STATUS = ((errors.NotFoundError, 404), (errors.ConflictError, 409), (errors.QuotaError, 409),
          (errors.SpecError, 422), (errors.DataError, 422), (TimeoutError, 408), (errors.NotSupportedError, 501),
          (errors.EnvironmentError_, 503), (errors.BackendError, 502), (errors.StorageError, 507))


def http_status(err: errors.DtrainError) -> int:
    return next((code for cls, code in STATUS if isinstance(err, cls)), 400)


def create_app(make_client: Callable[[], object], *, token: str | None = None, read_only: bool = False,
               sample_every: float = 5.0, max_streams: int = 200) -> FastAPI:
    """`token`: required on every route when set (bound off loopback); `read_only`: GET only."""
    clients = Clients(make_client)
    history = GpuHistory(Clients(make_client), every=sample_every)

    async def lifespan(app):
        history.start()
        yield
        history.stop()

    app = FastAPI(title="dtrain", version="1", lifespan=lifespan, openapi_url=f"{API}/openapi.json",
                  docs_url=None, redoc_url=None,
                  description="Jobs, logs, nodes, projects, volumes and snapshots: the dtrain Client over HTTP.")
    app.state.clients = clients
    app.state.history = history
    app.state.streams = routes_jobs.Streams(max_streams)
    app.state.read_only = read_only
    for module in (routes_jobs, routes_cluster, routes_storage):
        app.include_router(module.router, prefix=API)
    app.add_api_route("/metrics", metrics_route(clients), include_in_schema=False)
    _errors(app)
    _pages(app)
    app.add_middleware(Guard, token=token, read_only=read_only)
    return app


def _errors(app: FastAPI) -> None:
    @app.exception_handler(errors.DtrainError)
    async def dtrain_error(_request, err: errors.DtrainError):
        return JSONResponse({"error": str(err), "kind": type(err).__name__.rstrip("_")}, status_code=http_status(err))

    @app.exception_handler(RequestValidationError)
    async def bad_request(request, err: RequestValidationError):
        return JSONResponse({"error": _one_line(request, err.errors()), "kind": "SpecError"}, status_code=422)

    @app.exception_handler(HTTPException)
    async def http_error(_request, err: HTTPException):
        return JSONResponse({"error": str(err.detail), "kind": "HTTPError"}, status_code=err.status_code,
                            headers=err.headers)


def _pages(app: FastAPI) -> None:
    """The dashboard: static files, no build step; the page's JavaScript calls /api/v1."""
    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    @app.get("/", include_in_schema=False)
    def index():
        return FileResponse(STATIC / "index.html", headers={"cache-control": "no-store"})


def _one_line(request, problems) -> str:
    """Pydantic's findings as one line; a name refused by names.py's pattern gets names.py's message."""
    parts = []
    for e in problems[:5]:
        loc = [str(x) for x in e.get("loc", ()) if x != "body"]
        if e.get("type") == "string_pattern_mismatch" and e.get("ctx", {}).get("pattern") == wire.NAME:
            field = loc[-1] if loc else "name"
            area = request.url.path.removeprefix(API + "/").split("/")[0]  # jobs, volumes, snapshots...
            try:
                check_name(e.get("input"), wire.NAMED.get(field, wire.NAMED.get(area, field)))
            except errors.SpecError as refused:
                return str(refused)
        parts.append(f"{'.'.join(loc) or 'body'}: {e.get('msg', 'invalid')}")
    return "invalid request: " + "; ".join(parts)

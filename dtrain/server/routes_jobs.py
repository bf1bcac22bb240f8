"""Jobs and their logs: list, submit, get, delete, wait, logs (tail or a live stream), curves."""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import threading
from typing import Annotated, Any, Awaitable, Callable, TypeVar

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import StreamingResponse
from pydantic import WithJsonSchema

from dtrain import JobStatus
from dtrain.errors import DtrainError, NotFoundError, kind_of
from dtrain.names import MAX_HTTP_WAIT, MAX_LIMIT_BYTES, MAX_PROCESSES, MAX_TAIL
from dtrain.server import curves, wire
from dtrain.server.bodies import TypedRoute
from dtrain.server.clients import client
from dtrain.spec import MAX_SELECTOR, SELECTOR_PATTERN, JobSpec, sagemaker_backend

router = APIRouter(tags=["jobs"], route_class=TypedRoute)
ERRORS, CHANGES = wire.ERRORS, wire.CHANGES
LONG = ERRORS  # a request that holds a thread (Streams): refused (503, in ERRORS) when too many do
KEEPALIVE_S = 15.0  # an SSE comment this often keeps proxies from closing a quiet stream
GONE_AFTER_S = 60.0  # a reader that takes no line for this long (1,000 queued) is dropped
BATCH = 1000  # lines of a log read handed over at a time: one hop between threads costs ~50 us a put
LOG = logging.getLogger("dtrain.server")
T = TypeVar("T")


LIMIT, OFFSET = wire.page_limit("jobs"), wire.page_offset("jobs")


@router.get("/jobs", response_model=list[wire.Job],
            responses={**ERRORS, 200: {"headers": {**wire.TOTAL_COUNT, **wire.JOBS_WARNING}}})
def list_jobs(request: Request, response: Response, project: Annotated[str | None, Query(pattern=wire.NAME)] = None,
              status: wire.STATUS_FILTER = None, limit: LIMIT = None, offset: OFFSET = None,
              label_selector: Annotated[str | None, Query(max_length=MAX_SELECTOR, pattern=SELECTOR_PATTERN, description=(
                  "only jobs whose labels match, as `dtrain list -l` (kubectl's -l): KEY=VALUE, KEY!=VALUE, KEY, "
                  "!KEY, comma-separated"))] = None):
    """Every job (of one project with `project`), oldest first; `status` filters. Deleted jobs are
    listed only when asked for (`status=Deleted`), as `dtrain list jobs` needs --show-deleted.

    `limit` and `offset` ask for a page instead, of the filtered jobs newest first (by creation
    time, then name, so that pages never overlap while nothing is submitted), the order the
    dashboard shows. Either one alone pages too (no `limit`: every job from `offset` on). The
    `X-Total-Count` header counts the filtered jobs before paging, with or without a page. A
    `Warning` header says when a source of jobs could not be read (SageMaker without AWS
    credentials: the --local jobs only), as `dtrain list` warns. `label_selector` keeps the jobs
    whose labels match it (`dtrain list -l`), before `status`, the count and the page."""
    c = client(request)  # a project that is a typo: c.list / c.page raise NotFoundError, a 404
    if limit is not None or offset is not None:  # without a selector, only the page's jobs are read
        page = c.page(project=project, status=status, limit=limit, offset=offset or 0, selector=label_selector)
        jobs, total, notices = list(page.jobs), page.total, page.notices
    else:
        jobs = c.list(project=project, show_deleted=False, status=status, selector=label_selector)
        total, notices = len(jobs), jobs.notices
    response.headers["x-total-count"] = str(total)
    wire.warn(response, notices)
    return [wire.job_out(j) for j in jobs]


@router.post("/jobs", response_model=wire.Job, status_code=201,
             responses={**CHANGES, 201: {"headers": {**wire.SUBMIT_WARNING, **wire.LOCATION}}})
def submit(request: Request, response: Response, body: wire.SpecIn):
    """Submit a job: the body holds the fields of `dtrain submit` (and of a -f YAML file). A `Warning`
    header says what of it the backend does not use (an image on the local backend), as the CLI's
    warning line."""
    c = client(request)
    data = body.model_dump(exclude_unset=True)
    data["project"] = data.get("project") or c.default_project
    options = data.get("sagemaker") if data.get("backend") is None else None  # they choose the backend
    sagemaker_backend(data)  # SageMaker options: that backend, as with `dtrain submit --instance-type`
    if data.get("backend") is None:  # the configured one (of the project), as `dtrain submit` and the job list use
        data["backend"] = c.backend(project=data["project"]).name
    spec = JobSpec.from_dict(data, door="http")
    if isinstance(options, dict):  # AWS not configured: the refusal says the options chose SageMaker
        c.check_aws_ready(spec, options=tuple(sorted(k for k, v in options.items() if v not in (None, False, [], {}))))
    info = c.submit(spec)
    wire.warn(response, c.submit_notices(info.spec))
    wire.locate(request, response, "jobs", info.name, info.spec.project)
    return wire.job_out(info)


@router.get("/jobs/{name}", response_model=wire.Job, responses=ERRORS)
def get_job(request: Request, name: wire.JobName, project: wire.JobProject = None, backend: wire.JobBackend = None):
    """The job's record (`dtrain describe job NAME`; with `project`, `-p PROJECT`; with `backend`, `--backend`)."""
    return wire.job_out(client(request).get(name, project=project, backend=backend))


@router.delete("/jobs/{name}", response_model=wire.Job, responses=CHANGES)
def delete_job(request: Request, name: wire.JobName, purge: bool = False, project: wire.JobProject = None,
               backend: wire.JobBackend = None):
    """Stop the job's processes and mark it Deleted (`dtrain delete`); with `purge` also forget it
    (record, events, logs). A job already Deleted is not found, as with kubectl, unless purged."""
    c = client(request)
    if not purge and c.get(name, project=project, backend=backend).status == JobStatus.DELETED:
        given = "".join(f"&{k}={v}" for k, v in (("project", project), ("backend", backend)) if v)
        raise NotFoundError(f"job {name!r} was already deleted; nothing was deleted (DELETE "
                            f"/api/v1/jobs/{name}?purge=true{given} also forgets it)")
    return wire.job_out(c.delete(name, purge=purge, project=project, backend=backend))


@router.post("/jobs/{name}/suspend", response_model=wire.Job, responses=CHANGES)
def suspend_job(request: Request, name: wire.JobName, project: wire.JobProject = None,
                backend: wire.JobBackend = None):
    """Stop a Pending or Running job for now (`dtrain suspend`): it checkpoints, frees its GPUs and
    reads Suspended until resumed. 409 for a job in another state."""
    return wire.job_out(client(request).suspend(name, project=project, backend=backend))


@router.post("/jobs/{name}/resume", response_model=wire.Job, responses=CHANGES)
def resume_job(request: Request, name: wire.JobName, project: wire.JobProject = None,
               backend: wire.JobBackend = None):
    """Queue a Suspended job again (`dtrain resume`); it goes on from its last checkpoint. 409 for a
    job in another state. A job whose processes are still stopping (a rank Terminating: writing its
    checkpoint) holds the request until they have exited, locally up to the grace period and 5 s
    (35 s), with no word meanwhile; 409 if they have not exited by then."""
    return wire.job_out(client(request).resume(name, project=project, backend=backend))


@router.get("/jobs/{name}/wait", response_model=wire.Job,
            responses={**LONG, 408: {"model": wire.Error}})
async def wait_job(request: Request, name: wire.JobName,
                   timeout: Annotated[float, Query(ge=0, le=MAX_HTTP_WAIT, allow_inf_nan=False), wire.QueryReal] = 60,
                   project: wire.JobProject = None, backend: wire.JobBackend = None):
    """Block until the job ends (408 when `timeout` seconds pass first, 503 when the server stops first)."""
    clients = request.app.state.clients
    waiting = _in_thread(request.app.state.streams, lambda: clients.get().wait(name, timeout=timeout, project=project,
                                                                                backend=backend),
                         f"wait-{name}")
    try:
        info = await unless_stopping(waiting, request.app.state.stopping)
    except Stopping:
        raise HTTPException(503, f"the server is shutting down; wait for job {name!r} again once it is back "
                                 f"(or with '{_again(clients, f'wait {name}', project, backend)}')") from None
    return wire.job_out(info)


# the bounds of `dtrain logs` and Client.logs (names.py's), so that each door takes and refuses the same numbers
# A rank past any job's (MAX_PROCESSES - 1, the schema's maximum) is read as the CLI and the SDK read it: the
# job's own line names its ranks ("job 'x' has 3 processes, ranks 0 to 2"), where a general line did.
RANK = Annotated[Annotated[int, WithJsonSchema({"type": "integer", "minimum": 0, "maximum": MAX_PROCESSES - 1})] | None,
                 Query(ge=0, description="one rank's lines (default: every rank's)"), wire.QueryTyped]
TAIL = Annotated[int | None, Query(ge=0, le=MAX_TAIL, description="only the last lines"), wire.QueryWhole]
SINCE = Annotated[float | None, Query(ge=0, le=wire.MAX_TIME, allow_inf_nan=False,
                                      description="only lines written at or after this unix time (seconds)"),
                  wire.QueryReal]
LIMIT_BYTES = Annotated[int | None, Query(ge=1, le=MAX_LIMIT_BYTES, description=(
    "at most this many bytes of the lines (kubectl logs --limit-bytes), each counted as its UTF-8 text and a "
    "newline, the last one cut short to fit")), wire.QueryWhole]
PREVIOUS = Annotated[bool, Query(description="the lines of the attempt before the current one (kubectl logs "
                                             "--previous): after a restart (--max-restarts)")]


@router.get("/jobs/{name}/logs", response_model=list[wire.LOG_ITEM], responses=LONG)
async def logs(request: Request, name: wire.JobName, rank: RANK = None, tail: TAIL = None, since: SINCE = None,
               previous: PREVIOUS = False, limit_bytes: LIMIT_BYTES = None, project: wire.JobProject = None,
               backend: wire.JobBackend = None):
    """The lines written so far (of one rank with `rank`), oldest first: of the job's current
    (latest) attempt, or with `previous` of the attempt before it (404 when it never restarted).

    The list is sent as it is read, so a long log costs the server a few blocks, never the whole log.
    A read that fails after some lines were read (a pod that cannot start, beside pods that wrote
    lines) keeps them: the last item is then `{error, kind}`, as `dtrain logs` prints the lines and
    then the error. A failure before any line (an unknown job: 404) is the answer's status."""
    pump = _Pump(request.app.state, name, rank, tail, since, follow=False, previous=previous, limit_bytes=limit_bytes,
                 project=project, backend=backend)
    first = await pump.start()

    async def items():
        try:
            yield "[" + ",".join(map(_line_json, first))
            sep = "," if first else ""
            async for kind, value in pump.items():
                if kind == "lines":
                    yield sep + ",".join(map(_line_json, value))
                    sep = ","
                elif kind == "failed":
                    yield sep + json.dumps(_failure(value))
                elif kind in ("stopped", "dropped"):  # the lines sent are not all: say so, as a failed read does
                    yield sep + json.dumps(_cut_off(pump, kind))
            yield "]"
        finally:
            pump.stop()
    return StreamingResponse(items(), media_type="application/json", headers={"cache-control": "no-store"})


@router.get("/jobs/{name}/logs/stream", responses={**LONG, 200: {"content": {"text/event-stream": {}}}},
            response_class=StreamingResponse)
async def follow_logs(request: Request, name: wire.JobName, rank: RANK = None, tail: TAIL = None,
                      since: SINCE = None, limit_bytes: LIMIT_BYTES = None, project: wire.JobProject = None,
                      backend: wire.JobBackend = None):
    """Server-sent events: one `data: {rank, time, text}` per line, then `event: end` with `data:
    {status}` when the job stops (it ended, or was suspended: `Suspended`; a resumed job's lines are
    read by a new stream), or `event: error` with `data: {error, kind}` when reading fails on the way
    (a pod that cannot start)."""
    pump = _Pump(request.app.state, name, rank, tail, since, follow=True, limit_bytes=limit_bytes, project=project,
                 backend=backend)
    await pump.start()  # 404 and friends are raised here, before any event is sent

    async def events():
        try:
            async for kind, value in pump.items(keepalive=KEEPALIVE_S):
                if kind == "lines":
                    yield "".join(f"data: {_line_json(line)}\n\n" for line in value)
                elif kind == "keepalive":
                    yield ": keepalive\n\n"
                elif kind == "failed":
                    yield f"event: error\ndata: {json.dumps(_failure(value))}\n\n"
                elif kind == "dropped":
                    yield f"event: error\ndata: {json.dumps(_cut_off(pump, kind))}\n\n"
                elif kind == "end":  # what stopped it: an end, or a suspension (a resume starts anew)
                    yield f"event: end\ndata: {json.dumps({'status': value})}\n\n"
                # "stopped": the stream ends quietly, and an EventSource reconnects to the server once it is back
        finally:
            pump.stop()
    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})


def _again(clients, words: str, project: str | None, backend: str | None = None) -> str:
    """`dtrain WORDS` as a 503 names it for a job of `project` (None: where a bare name looks) on `backend`
    (None: the server's or the project's): with -p and --backend where the CLI needs them to look where this
    server looked (Client.command_for; `dtrain --backend B server` looks on B)."""
    c = clients.get()
    return c.command_for(words, backend=backend or c.backend(project=project).name, project=project)


def _stopping(name: str, when: str, logs: str) -> str:
    """`logs`: the `dtrain logs` command that reads them (`_again`)."""
    return (f"the server is shutting down {when}; read job {name!r}'s logs again once it is back "
            f"(or with '{logs}')")


def _cut_off(pump: "_Pump", why: str) -> dict[str, str]:
    """Why the lines sent end before the log does: the server stopped, or the reader took none for too long."""
    name = pump.name
    if why == "stopped":
        return {"error": _stopping(name, "before all its lines were sent", pump.again()), "kind": "HTTPError"}
    return {"error": f"the lines of job {name!r} were not read for {GONE_AFTER_S:g}s, so the server stopped "
                     f"sending them; read them again (with tail or since for fewer)", "kind": "HTTPError"}


def _line_json(line) -> str:
    return json.dumps({"rank": line.rank, "time": line.time, "text": line.text})


def _failure(err: Exception) -> dict[str, str]:
    """A read that failed after the answer began, as every refusal reads: the error's line and class."""
    if not isinstance(err, DtrainError):  # a defect, not a user's mistake: its traceback goes to the server's log
        LOG.error("reading logs failed", exc_info=err)
    return {"error": " ".join(str(err).split()) or type(err).__name__, "kind": kind_of(err)}


@router.get("/jobs/{name}/metrics", response_model=list[dict[str, Any]], responses=ERRORS)
def job_metrics(request: Request, name: wire.JobName,
                last: Annotated[int, Query(ge=1, le=20_000), wire.QueryWhole] = 2000,
                project: wire.JobProject = None, backend: wire.JobBackend = None):
    """The job's training metrics, one record per logged step (step, loss, images_per_s, ...)."""
    return curves.curve(client(request).get(name, project=project, backend=backend), last=last)


class Streams:
    """Counts the long requests (log reads and streams, waits) so that they cannot take every thread.

    Each runs in a daemon thread of its own, which holds its slot until it ends: not in anyio's
    worker threads, which a process joins before it exits, so that a wait of up to 600 s (or a
    stream of a quiet job) cannot hold a Ctrl-C'd server open."""

    def __init__(self, limit: int):
        self.limit = limit
        self.open = 0
        self._lock = threading.Lock()

    def acquire(self) -> None:
        with self._lock:
            if self.open >= self.limit:
                raise HTTPException(503, f"too many open log streams and waits ({self.limit}); "
                                         f"close some and try again")
            self.open += 1

    def release(self) -> None:
        with self._lock:
            self.open -= 1


class Stopping(Exception):
    """The server began to shut down while a long request waited."""


async def unless_stopping(work: Awaitable[T], stopping: asyncio.Event, timeout: float | None = None) -> T:
    """`work`'s result; Stopping when the server begins to shut down first, TimeoutError after `timeout` s.

    uvicorn waits for open requests before it stops, so a wait or a stream that did not watch for
    this held Ctrl-C until it ended, and was then cancelled with a traceback and a 500."""
    task, stop = asyncio.ensure_future(work), asyncio.ensure_future(stopping.wait())
    try:
        done, _ = await asyncio.wait((task, stop), timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    finally:
        task.cancel()  # a finished one ignores it; an unfinished queue.get() gives up its place
        stop.cancel()
    if task in done:
        return task.result()
    if stop in done:
        raise Stopping
    raise TimeoutError


def _in_thread(streams: Streams, call: Callable[[], T], name: str) -> asyncio.Future:
    """`call()` in a daemon thread that holds one of `streams`' slots until it returns; its result as a future."""
    loop = asyncio.get_running_loop()
    future = loop.create_future()

    def deliver(ok: bool, value) -> None:
        if future.done():  # nobody waits any more: the request ended first
            return
        if ok:
            future.set_result(value)
        else:
            future.set_exception(value)

    def run() -> None:
        try:
            outcome = (True, call())
        except Exception as err:  # noqa: BLE001  raised in the request: 404, 408 and friends
            outcome = (False, err)
        finally:
            streams.release()
        with contextlib.suppress(RuntimeError):  # the event loop has closed: the server is gone
            loop.call_soon_threadsafe(deliver, *outcome)

    streams.acquire()
    try:
        threading.Thread(target=run, name=name, daemon=True).start()
    except BaseException:
        streams.release()
        raise
    return future


class _Pump:
    """Reads `client.logs()` in its own thread (it blocks) and hands lines to the event loop.

    The thread has its own Client, used by it alone for the whole read. After a disconnect it
    stops at the next line or when the job ends, whichever comes first: a blocked read cannot be
    interrupted. So the slot (`Streams`) is held by the thread, not by the response, and is given
    back when the thread ends: lingering threads count against the limit too.

    A follower gets each line as it comes; a read of the lines so far gets them BATCH at a time
    from a short queue, so that the server holds a few batches of a long log, never all of it.
    """

    def __init__(self, state, name: str, rank: int | None, tail: int | None, since: float | None, *, follow: bool,
                 previous: bool = False, limit_bytes: int | None = None, project: str | None = None,
                 backend: str | None = None):
        """`state`: the app's (its clients, streams and stopping event)."""
        self.clients, self.streams, self.stopping, self.name = state.clients, state.streams, state.stopping, name
        self.project, self.backend = project, backend
        self.query = {"rank": rank, "tail": tail, "since": since, "follow": follow, "previous": previous,
                      "limit_bytes": limit_bytes, "project": project, "backend": backend}
        self.batch = 1 if follow else BATCH
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=1000 if follow else 4)
        self.loop = asyncio.get_running_loop()
        self._stop = threading.Event()

    def again(self) -> str:
        """The `dtrain logs` command that reads these lines from the CLI (`_again`)."""
        return _again(self.clients, f"logs {self.name}", self.project, self.backend)

    async def start(self) -> list:
        """The first lines read (none when following); raises what the read raised before any line,
        or 503 when the server begins to shut down first (a read blocked on a pod's log, say)."""
        self.streams.acquire()
        try:
            threading.Thread(target=self._run, name=f"logs-{self.name}", daemon=True).start()
        except BaseException:
            self.streams.release()
            raise
        try:
            kind, value = await unless_stopping(self.queue.get(), self.stopping)
        except Stopping:
            self.stop()
            raise HTTPException(503, _stopping(self.name, "before the first lines were read", self.again())) from None
        except BaseException:  # the client left before the first answer
            self.stop()
            raise
        if kind == "error":
            raise value
        return value

    def stop(self) -> None:
        self._stop.set()

    def _put(self, item) -> bool:
        """Hand one item to the response; False when nobody will read it any more."""
        waited = 0.0
        while not self._stop.is_set() and waited < GONE_AFTER_S:
            try:
                future = asyncio.run_coroutine_threadsafe(self.queue.put(item), self.loop)
                future.result(timeout=1.0)
                return True
            except TimeoutError:
                future.cancel()  # the queue is full: check for a disconnect, then retry
                waited += 1.0
            except RuntimeError:  # the event loop is closing
                break
        self.stop()
        return False

    def _run(self) -> None:
        try:
            self._read()
        finally:
            self.streams.release()

    def _read(self) -> None:
        try:
            lines = iter(self.clients.get().logs(self.name, **self.query))
            first, failed = ([], None) if self.query["follow"] else self._next(lines)
        except Exception as err:  # noqa: BLE001  raised in the request: 404 and friends
            self._put(("error", err))
            return
        if failed is not None and not first:  # nothing read, so nothing lost: the answer's status says it
            self._put(("error", failed))
            return
        if not self._put(("ok", first)):
            return
        while failed is None:
            batch, failed = self._next(lines)
            if not batch and failed is None:
                self._put(("end", self._status()))
                return
            if batch and (self._stop.is_set() or not self._put(("lines", batch))):
                return
        self._put(("failed", failed))

    def _status(self) -> str | None:
        """The job's status once its lines have ended (None where it cannot be read: purged)."""
        try:
            return self.clients.get().get(self.name, project=self.project, backend=self.backend).status.value
        except DtrainError:
            return None

    def _next(self, lines) -> tuple[list, Exception | None]:
        """Up to `batch` lines, and what the read raised after them (a pod that cannot start)."""
        batch: list = []
        try:
            for line in lines:
                batch.append(line)
                if len(batch) >= self.batch:
                    break
        except Exception as err:  # noqa: BLE001  reported after the lines read before it
            return batch, err
        return batch, None

    async def items(self, keepalive: float | None = None):
        """(kind, value) to send: "lines", "keepalive" every `keepalive` s without a line, and last
        "end", "failed" (the error), "stopped" (the server began to shut down) or "dropped" (the
        thread gave up on a reader that took nothing for GONE_AFTER_S: it put nothing more)."""
        while True:
            if self.queue.empty() and self._stop.is_set():
                yield "dropped", None
                return
            try:
                kind, value = await unless_stopping(self.queue.get(), self.stopping, keepalive)
            except TimeoutError:
                yield "keepalive", None
                continue
            except Stopping:
                yield "stopped", None
                return
            yield kind, value
            if kind in ("end", "failed"):
                return

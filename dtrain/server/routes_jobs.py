"""Jobs and their logs: list, submit, get, delete, wait, logs (tail or a live stream), curves."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Annotated, Any, Awaitable, Callable, TypeVar

from fastapi import APIRouter, HTTPException, Query, Request
from fastapi.responses import StreamingResponse

from dtrain.server import curves, wire
from dtrain.server.clients import client
from dtrain.spec import JobSpec

router = APIRouter(tags=["jobs"])
ERRORS: dict[int | str, dict[str, Any]] = {code: {"model": wire.Error} for code in (401, 404, 409, 422)}
KEEPALIVE_S = 15.0  # an SSE comment this often keeps proxies from closing a quiet stream
GONE_AFTER_S = 60.0  # a reader that takes no line for this long (1,000 queued) is dropped
T = TypeVar("T")


@router.get("/jobs", response_model=list[wire.Job], responses=ERRORS)
def list_jobs(request: Request, project: Annotated[str | None, Query(pattern=wire.NAME)] = None,
              status: wire.STATUSES | None = None):
    """Every job (of one project with `project`), oldest first; `status` filters. Deleted jobs are
    listed only when asked for (`status=Deleted`), as `dtrain list jobs` needs --show-deleted."""
    jobs = client(request).list(project=project, show_deleted=status == "Deleted")
    return [wire.job_out(j) for j in jobs if status is None or j.status.value == status]


@router.post("/jobs", response_model=wire.Job, status_code=201, responses=ERRORS)
def submit(request: Request, body: wire.SpecIn):
    """Submit a job: the body holds the fields of `dtrain submit` (and of a -f YAML file)."""
    c = client(request)
    data = body.model_dump(exclude_unset=True)
    data["project"] = data.get("project") or c.default_project
    if data.get("backend") is None:  # the configured one (of the project), as `dtrain submit` and the job list use
        data["backend"] = c.backend(project=data["project"]).name
    return wire.job_out(c.submit(JobSpec.from_dict(data)))


@router.get("/jobs/{name}", response_model=wire.Job, responses=ERRORS)
def get_job(request: Request, name: wire.JobName):
    return wire.job_out(client(request).get(name))


@router.delete("/jobs/{name}", response_model=wire.Job, responses=ERRORS)
def delete_job(request: Request, name: wire.JobName):
    """Stop the job's processes and mark it Deleted."""
    return wire.job_out(client(request).delete(name))


@router.get("/jobs/{name}/wait", response_model=wire.Job,
            responses={**ERRORS, 408: {"model": wire.Error}, 503: {"model": wire.Error}})
async def wait_job(request: Request, name: wire.JobName, timeout: Annotated[float, Query(ge=0, le=600)] = 60):
    """Block until the job ends (408 when `timeout` seconds pass first, 503 when the server stops first)."""
    clients = request.app.state.clients
    waiting = _in_thread(request.app.state.streams, lambda: clients.get().wait(name, timeout=timeout), f"wait-{name}")
    try:
        info = await unless_stopping(waiting, request.app.state.stopping)
    except Stopping:
        raise HTTPException(503, f"the server is shutting down; wait for job {name!r} again once it is back "
                                 f"(or with 'dtrain wait {name}')") from None
    return wire.job_out(info)


@router.get("/jobs/{name}/logs", response_model=list[wire.LogLine], responses=ERRORS)
def logs(request: Request, name: wire.JobName, rank: Annotated[int | None, Query(ge=0, le=100_000)] = None,
         tail: Annotated[int | None, Query(ge=0, le=100_000)] = None, since: float | None = None):
    """The lines written so far (of one rank with `rank`), oldest first."""
    lines = client(request).logs(name, rank=rank, tail=tail, since=since)
    return [wire.LogLine(rank=ln.rank, time=ln.time, text=ln.text) for ln in lines]


@router.get("/jobs/{name}/logs/stream", responses={**ERRORS, 200: {"content": {"text/event-stream": {}}}},
            response_class=StreamingResponse)
async def follow_logs(request: Request, name: wire.JobName, rank: Annotated[int | None, Query(ge=0, le=100_000)] = None,
                      tail: Annotated[int | None, Query(ge=0, le=100_000)] = None):
    """Server-sent events: one `data: {rank, time, text}` per line, then `event: end` when the job ends."""
    pump = _Pump(request.app.state.clients, request.app.state.streams, name, rank, tail)
    await pump.start()  # 404 and friends are raised here, before any event is sent

    async def events():
        try:
            async for item in pump.items(request.app.state.stopping):
                yield item
        finally:
            pump.stop()
    return StreamingResponse(events(), media_type="text/event-stream",
                             headers={"cache-control": "no-store", "x-accel-buffering": "no"})


@router.get("/jobs/{name}/metrics", response_model=list[dict[str, Any]], responses=ERRORS)
def job_metrics(request: Request, name: wire.JobName, last: Annotated[int, Query(ge=1, le=20_000)] = 2000):
    """The job's training metrics, one record per logged step (step, loss, images_per_s, ...)."""
    return curves.curve(client(request).get(name), last=last)


class Streams:
    """Counts the long requests (log streams, waits) so that they cannot take every thread.

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
    """Reads `client.logs(follow=True)` in its own thread (it blocks) and hands lines to the event loop.

    The thread has its own Client. After a disconnect it stops at the next line or when the
    job ends, whichever comes first: a blocked read cannot be interrupted. So the stream's slot
    (`Streams`) is held by the thread, not by the response, and is given back when the thread
    ends: lingering threads count against the limit too.
    """

    def __init__(self, clients, streams: Streams, name: str, rank: int | None, tail: int | None):
        self.clients, self.streams, self.name, self.rank, self.tail = clients, streams, name, rank, tail
        self.queue: asyncio.Queue = asyncio.Queue(maxsize=1000)
        self.loop = asyncio.get_running_loop()
        self._stop = threading.Event()

    async def start(self) -> None:
        self.streams.acquire()
        try:
            threading.Thread(target=self._run, name=f"logs-{self.name}", daemon=True).start()
        except BaseException:
            self.streams.release()
            raise
        try:
            kind, value = await self.queue.get()
        except BaseException:  # the client left before the first answer
            self.stop()
            raise
        if kind == "error":
            raise value

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
            self._follow()
        finally:
            self.streams.release()

    def _follow(self) -> None:
        try:
            lines = self.clients.get().logs(self.name, rank=self.rank, tail=self.tail, follow=True)
        except Exception as err:  # noqa: BLE001  raised in the request: 404 and friends
            self._put(("error", err))
            return
        if not self._put(("ok", None)):
            return
        for line in lines:
            data = json.dumps({"rank": line.rank, "time": line.time, "text": line.text})
            if self._stop.is_set() or not self._put(("line", f"data: {data}\n\n")):
                return
        self._put(("end", "event: end\ndata: {}\n\n"))

    async def items(self, stopping: asyncio.Event):
        """The events to send; they end when the job does, or quietly when the server stops."""
        while True:
            try:
                kind, text = await unless_stopping(self.queue.get(), stopping, KEEPALIVE_S)
            except TimeoutError:
                yield ": keepalive\n\n"
                continue
            except Stopping:
                return
            yield text
            if kind == "end":
                return

"""Notebooks (`dtrain notebook start|list|open`): JupyterLab as an interactive job on a volume.

A notebook is a job: GET/DELETE /jobs/{name}, its suspend and resume, and its logs serve it too.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response

from dtrain.server import wire
from dtrain.server.bodies import TypedRoute
from dtrain.server.clients import client

router = APIRouter(tags=["notebooks"], route_class=TypedRoute)
ERRORS, CHANGES = wire.ERRORS, wire.CHANGES


@router.post("/notebooks", response_model=wire.Job, status_code=201,
             responses={**CHANGES, 201: {"headers": wire.LOCATION}})
def start_notebook(request: Request, response: Response, body: wire.NotebookIn):
    """Start a notebook (`dtrain notebook start`): JupyterLab as a job rooted at the first volume,
    queued like any job (Pending until the scheduler gives it its GPUs: the record's `message` says
    why it waits). Open it with GET /notebooks/{name}/url once it is Running."""
    fields = body.model_dump(exclude_none=True)  # null: the default, as an absent field
    name, volumes = fields.pop("name"), fields.pop("volumes", ())
    book = client(request).notebook(name, volumes=volumes, **fields)
    wire.locate(request, response, "jobs", book.name, book.spec.project)  # a notebook is a job
    return wire.job_out(book)


LIMIT, OFFSET = wire.page_limit("notebooks"), wire.page_offset("notebooks")


@router.get("/notebooks", response_model=list[wire.Job],
            responses={**ERRORS, 200: {"headers": wire.total_count("notebooks")}})
def list_notebooks(request: Request, response: Response,
                   project: Annotated[str | None, Query(pattern=wire.NAME)] = None, status: wire.STATUS_FILTER = None,
                   limit: LIMIT = None, offset: OFFSET = None):
    """The notebooks (of one project with `project`; every project's without, as GET /jobs), oldest
    first; `status` filters, and Deleted ones are listed only when asked for (`status=Deleted`). A
    `Warning` header says when a source of jobs could not be read, as GET /jobs's.

    `limit` and `offset` ask for a page instead, as GET /jobs's: of the filtered notebooks newest
    first (by creation time, then name, so that pages never overlap while nothing is started); either
    one alone pages too. `X-Total-Count` counts the filtered notebooks before paging, paged or not."""
    c = client(request)
    if limit is not None or offset is not None:
        page = c.page_notebooks(project=project, status=status, limit=limit, offset=offset or 0)
        books, total, notices = list(page.items), page.total, page.notices
    else:
        listed = c.list_notebooks(project=project, show_deleted=False, status=status)  # Deleted: listed
        books = list(listed)
        total, notices = len(books), listed.notices
    response.headers["x-total-count"] = str(total)
    wire.warn(response, notices)
    return [wire.job_out(b) for b in books]


@router.get("/notebooks/{name}/url", response_model=wire.NotebookUrl,
            responses={**ERRORS, 403: {"model": wire.Error, "description": "a --read-only server: the URL's "
                                                                           "token runs code"}})
def notebook_url(request: Request, response: Response, name: wire.NotebookName, project: wire.JobProject = None,
                 backend: wire.JobBackend = None):
    """Where to open a Running notebook (`dtrain notebook open`), with its Jupyter token: locally
    `http://127.0.0.1:PORT/?token=...`, an address of the server's machine (reach it there, or
    through an SSH tunnel to that port); on Kubernetes the Kubeflow gateway's path (no token).
    409 while it is not Running (the line says what to do); a read-only server refuses it (403),
    since the token lets its holder run code as the notebook's user."""
    if request.app.state.read_only:
        c = client(request)  # the command looks where this server would have (-p, --backend)
        if backend is not None:
            c.check_backend(backend)
        opened = c.command_for(f"notebook open {name}", backend=backend or c.backend(project=project).name,
                               project=project)
        raise HTTPException(403, f"this server is read-only, and a notebook's URL carries a token that runs "
                                 f"code: open it with '{opened}' on the server's machine, "
                                 f"or restart 'dtrain server' without --read-only")
    response.headers["cache-control"] = "no-store"  # a credential: kept by no cache
    return wire.NotebookUrl(name=name, url=client(request).notebook_url(name, project=project, backend=backend))

"""Nodes (GPUs, their allocation and recent use) and projects."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Query, Request, Response

from dtrain.errors import NotFoundError
from dtrain.server import wire
from dtrain.server.bodies import TypedRoute
from dtrain.server.clients import client

router = APIRouter(tags=["cluster"], route_class=TypedRoute)
ERRORS, CHANGES = wire.ERRORS, wire.CHANGES


@router.get("/nodes", response_model=list[wire.Node], responses={**ERRORS, 200: {"headers": wire.NODES_WARNING}})
def nodes(request: Request, response: Response):
    """Each node with its GPUs: which job holds each, utilisation and memory now. A `Warning` header
    says when the pods holding GPUs could not all be read (GPUs allocated count some or none)."""
    listed = client(request).nodes()
    wire.warn(response, listed.notices)
    return [wire.node_out(n) for n in listed]


SINCE = Annotated[float, Query(ge=0, le=wire.MAX_TIME, allow_inf_nan=False,
                               description="only samples taken after this unix time (seconds)"), wire.QueryReal]


@router.get("/nodes/history", response_model=list[wire.GpuSample], responses=ERRORS)
def gpu_history(request: Request, since: SINCE = 0.0):
    """GPU samples of the last ten minutes (taken by the server every few seconds)."""
    return request.app.state.history.samples(since)


@router.get("/projects", response_model=list[wire.Project],
            responses={**ERRORS, 200: {"headers": wire.PROJECTS_WARNING}})
def projects(request: Request, response: Response):
    """Each project, of every backend config.yaml names: its GPU quota, the GPUs its jobs hold, its
    jobs (all but Deleted), and how many of them run and wait now. A `Warning` header says when a
    backend could not be read and the others' projects are listed, or a project's GPU quota or pods
    could not be (Kubernetes RBAC: the quota shown as null, GPUs counted from the jobs' requests)."""
    c = client(request)
    listed = c.list_projects()
    wire.warn(response, listed.notices)
    return [wire.project_out(p, c.default_project) for p in listed]


ProjectName = Annotated[str, Path(pattern=wire.NAME, description="a project name")]


@router.get("/projects/{name}", response_model=wire.Project,
            responses={**ERRORS, 200: {"headers": wire.PROJECTS_WARNING}})
def get_project(request: Request, response: Response, name: ProjectName):
    """One project, as GET /projects lists it (`dtrain project list`'s row): 404 for a project no
    backend config.yaml names has. A `Warning` header says what could not be read, as the list's."""
    c = client(request)
    listed = c.read_project(name)
    found = next(iter(listed), None)
    if found is None:
        c.check_project(name)  # the local backend's line, naming a near name ('defualt')
        raise NotFoundError(f"no project named {name!r}; see 'dtrain project list' for the projects, or "
                            f"GET /api/v1/projects")
    wire.warn(response, listed.notices)
    return wire.project_out(found, c.default_project)


@router.post("/projects", response_model=wire.Project, status_code=201,
             responses={**CHANGES, 201: {"headers": {**wire.PROJECT_MADE_WARNING, **wire.LOCATION}},
                        200: {"model": wire.Project, "description": "An existing project, its quota set",
                              "headers": wire.PROJECT_MADE_WARNING}})
def create_project(request: Request, response: Response, body: wire.ProjectIn):
    """Create a project (201), or change an existing one's GPU quota (200; `no_gpu_quota` removes it).
    The record is read back from the projects; an account that may create a project but not read its
    jobs (Kubernetes RBAC) gets what was set, with a `Warning` header, as the CLI leaves out its notes."""
    c = client(request)
    made, existed, unknown = c.made_project(body.name, gpu_quota=body.gpu_quota,
                                                          no_gpu_quota=body.no_gpu_quota)
    if existed:
        response.status_code = 200
    else:
        wire.locate(request, response, "projects", body.name, None)
    if unknown is not None:
        response.headers["warning"] = wire.warning_header(unknown)
    return wire.project_out(made, c.default_project)


@router.delete("/projects/{name}", response_model=wire.DeletedProject, responses=CHANGES)
def delete_project(request: Request, name: ProjectName):
    """Delete a project (`dtrain project delete`): what creating it made goes (its GPU quota; Kubernetes: its
    namespace where it was made by dtrain, else dtrain's objects and labels there, `kept` saying why). 409 while it
    holds jobs not deleted, notebooks, volumes or snapshots, and for `default` or the configured default
    project; 404 for none of that name; 501 on a backend without projects (SageMaker)."""
    return wire.DeletedProject.model_validate(client(request).delete_project(name))


BackendName = Annotated[str, Path(pattern=wire.NAME, description="a backend `submit` sent jobs to: kubernetes, sagemaker")]


@router.post("/backends/{name}/forget", response_model=wire.ForgotBackend, responses=CHANGES)
def forget_backend(request: Request, name: BackendName):
    """Stop a list of every project asking backend `name` where only a submit to it (state.db's sent_to)
    made it ask: a cluster that is gone warned at each list (`dtrain config forget-backend NAME`). Its
    jobs are not touched. `still_asked` says why it is asked still; 404 for a backend not remembered."""
    return wire.ForgotBackend(**client(request).forget_backend(name).to_dict())

"""Volumes and snapshots: create, list, describe, delete; snapshot restore and diff; lineage."""

from __future__ import annotations

import os
from typing import Annotated

from fastapi import APIRouter, HTTPException, Query, Request, Response
from fastapi.responses import JSONResponse

from dtrain.errors import NotFoundError
from dtrain.names import MAX_HTTP_WAIT
from dtrain.server import wire
from dtrain.server.bodies import TypedRoute
from dtrain.server.clients import client
from dtrain.server.lineage import PER_VOLUME, lineage
from dtrain.server.routes_jobs import LONG, Stopping, _again, _in_thread, unless_stopping

router = APIRouter(tags=["storage"], route_class=TypedRoute)
ERRORS, CHANGES = wire.ERRORS, wire.CHANGES
VOLUMES_LIMIT, VOLUMES_OFFSET = wire.page_limit("volumes"), wire.page_offset("volumes")
SNAPSHOTS_LIMIT, SNAPSHOTS_OFFSET = wire.page_limit("snapshots"), wire.page_offset("snapshots")


@router.get("/volumes", response_model=list[wire.Volume],
            responses={**ERRORS, 200: {"headers": wire.total_count("volumes")}})
def list_volumes(request: Request, response: Response, project: wire.StorageProject = None,
                 limit: VOLUMES_LIMIT = None, offset: VOLUMES_OFFSET = None):
    """The volumes (`dtrain volume list`), by name. `limit` and `offset` ask for a page instead, as
    GET /jobs's: newest first (by creation time, then name, so that pages never overlap while nothing
    is made); either one alone pages too. `X-Total-Count` counts the volumes before paging, paged or not."""
    c = client(request)
    if limit is not None or offset is not None:
        page = c.page_volumes(project=project, limit=limit, offset=offset or 0)
        volumes, total = list(page.items), page.total
    else:
        volumes = c.list_volumes(project=project)
        total = len(volumes)
    response.headers["x-total-count"] = str(total)
    return [wire.Volume.model_validate(v) for v in volumes]


@router.post("/volumes", response_model=wire.Volume, status_code=201,
             responses={**CHANGES, 201: {"headers": wire.LOCATION}})
def create_volume(request: Request, response: Response, body: wire.VolumeIn, project: wire.StorageProject = None):
    made = client(request).create_volume(body.name, size=body.size, storage_class=body.storage_class,
                                         project=project)
    wire.locate(request, response, "volumes", made.name, project)
    return wire.Volume.model_validate(made)


@router.get("/volumes/{name}", response_model=wire.Volume, responses=ERRORS)
def get_volume(request: Request, name: wire.ClaimName, project: wire.StorageProject = None):
    return wire.Volume.model_validate(client(request).get_volume(name, project=project))


@router.delete("/volumes/{name}", status_code=204, responses={
    **CHANGES, 204: {"description": "deleted: it is gone"},
    202: {"model": wire.VolumeDeleting, "description": "being deleted, kept a while (Kubernetes: a claim pods still "
                                                       "use, Terminating until they stop)"}})
def delete_volume(request: Request, name: wire.VolumeName, force: bool = False,
                  project: wire.StorageProject = None):
    """Delete a volume (409 while a job uses it, unless `force`): 204 once it is gone; 202 with what keeps it
    where it is kept a while (`force` of a Kubernetes claim pods still use: Terminating until they stop, as
    Kubernetes answers a delete its finalizers hold with the object still there)."""
    kept = client(request).delete_volume(name, force=force, project=project)
    if kept is None:
        return Response(status_code=204)
    return JSONResponse(wire.VolumeDeleting(name=name, status="Terminating", kept=kept).model_dump(), status_code=202)


@router.patch("/volumes/{name}", response_model=wire.Volume, responses=CHANGES)
def update_volume(request: Request, name: wire.VolumeName, body: wire.VolumeUpdate,
                  project: wire.StorageProject = None):
    """Move a volume to another storage class in place (`dtrain volume update NAME --class C`): its
    name, snapshots and lineage stay; 409 while a job uses it."""
    return wire.Volume.model_validate(client(request).update_volume(name, storage_class=body.storage_class,
                                                                            project=project))


# a wait's seconds, read by the CLI flag's rule (`--timeout 1E3`)
WAIT_TIMEOUT = Annotated[float, Query(ge=0, le=MAX_HTTP_WAIT, allow_inf_nan=False), wire.QueryReal]


@router.get("/volumes/{name}/wait", response_model=wire.Volume, responses={**LONG, 408: {"model": wire.Error}})
async def wait_volume(request: Request, name: wire.VolumeName, timeout: WAIT_TIMEOUT = 60,
                      project: wire.StorageProject = None):
    """Block until the storage class set by `PATCH /volumes/{name}` is in effect (`dtrain volume update
    --wait`; Kubernetes: the CSI driver changes the tier asynchronously): 408 when `timeout` seconds pass
    first, 409 when the storage system refused the class, 503 when the server stops first."""
    volume = await _waited(request, "volume", name, f"volume describe {name}", project,
                           lambda c: c.wait_volume(name, timeout=timeout, project=project))
    return wire.Volume.model_validate(volume)


async def _waited(request: Request, kind: str, name: str, again: str, project: str | None, wait):
    """`wait(client)` in a thread the server's shutdown ends (503, naming the command `again` that
    waits or looks once it is back): a volume's class change, a snapshot's readiness."""
    clients = request.app.state.clients
    waiting = _in_thread(request.app.state.streams, lambda: wait(clients.get()), f"wait-{kind}-{name}")
    try:
        return await unless_stopping(waiting, request.app.state.stopping)
    except Stopping:
        raise HTTPException(503, f"the server is shutting down; wait for {kind} {name!r} again once it is back "
                                 f"(or with '{_again(clients, again, project)}')") from None


@router.get("/storage-classes", response_model=list[wire.StorageClass], responses=ERRORS)
def list_storage_classes(request: Request, response: Response, project: wire.StorageProject = None):
    """The storage classes (performance tiers) volumes can use, the default first (`dtrain volume classes`); a
    kind of class the account may not read (Kubernetes: VolumeAttributesClasses) is named in a Warning header."""
    c = client(request)
    classes = c.list_storage_classes(project=project)
    wire.warn(response, classes.notices)
    return [wire.StorageClass.model_validate(s) for s in classes]


@router.get("/snapshots", response_model=list[wire.Snapshot],
            responses={**ERRORS, 200: {"headers": wire.total_count("snapshots")}})
def list_snapshots(request: Request, response: Response, volume: Annotated[str | None, Query(  # a dotted claim's too, as the CLI's
                       pattern=wire.CLAIM, max_length=253, description="only this volume's snapshots: a volume "
                       "name, or on Kubernetes an existing claim's full name ('data.v1')")] = None,
                   job: Annotated[str | None, Query(pattern=wire.NAME)] = None,
                   project: wire.SnapshotProject = None,
                   limit: SNAPSHOTS_LIMIT = None, offset: SNAPSHOTS_OFFSET = None):
    """The snapshots (of `volume`, of `job`: `dtrain snapshot list`), oldest first. `limit` and
    `offset` ask for a page instead, as GET /jobs's: newest first (by creation time, then name, so
    that pages never overlap while none is taken); either one alone pages too. `X-Total-Count`
    counts the matching snapshots before paging, paged or not."""
    c = client(request)
    if limit is not None or offset is not None:
        page = c.page_snapshots(volume=volume, job=job, project=project, limit=limit, offset=offset or 0)
        snaps, total = list(page.items), page.total
    else:
        snaps = c.list_snapshots(volume=volume, job=job, project=project)
        total = len(snaps)
    response.headers["x-total-count"] = str(total)
    return [wire.Snapshot.model_validate(s) for s in snaps]


@router.post("/snapshots", response_model=wire.Snapshot, status_code=201,
             responses={**CHANGES, 201: {"headers": wire.LOCATION}})
def create_snapshot(request: Request, response: Response, body: wire.SnapshotIn, project: wire.StorageProject = None):
    """Take a point-in-time snapshot of a volume, linked to a job when `job` is given."""
    made = client(request).create_snapshot(body.volume, name=body.name, job=body.job, project=project)
    wire.locate(request, response, "snapshots", made.name, project)
    return wire.Snapshot.model_validate(made)


@router.get("/snapshots/{name}", response_model=wire.Snapshot, responses=ERRORS)
def get_snapshot(request: Request, name: wire.SnapshotName, project: wire.StorageProject = None):
    return wire.Snapshot.model_validate(client(request).get_snapshot(name, project=project))


@router.get("/snapshots/{name}/wait", response_model=wire.Snapshot,
            responses={**LONG, 408: {"model": wire.Error}})
async def wait_snapshot(request: Request, name: wire.SnapshotName, timeout: WAIT_TIMEOUT = 60,
                        project: wire.StorageProject = None):
    """Block until the snapshot is ready to use (`dtrain snapshot wait`; Kubernetes takes one
    asynchronously): 408 when `timeout` seconds pass first, 409 when the storage system reports it
    failed to take it, 503 when the server stops first."""
    snap = await _waited(request, "snapshot", name, f"snapshot wait {name}", project,
                         lambda c: c.wait_snapshot(name, timeout=timeout, project=project))
    return wire.Snapshot.model_validate(snap)


@router.delete("/snapshots/{name}", response_model=wire.Freed, responses=CHANGES)
def delete_snapshot(request: Request, name: wire.SnapshotName, project: wire.StorageProject = None):
    """Delete a snapshot and free the content no other snapshot shares."""
    return wire.Freed.model_validate(client(request).delete_snapshot(name, project=project))


@router.post("/snapshots/{name}/restore", response_model=wire.Volume,
             responses={**CHANGES, 201: {"model": wire.Volume, "description": "The new volume (`to`)",
                                         "headers": wire.LOCATION}})
def restore_snapshot(request: Request, response: Response, name: wire.SnapshotName,
                     body: wire.RestoreTo | wire.RestoreInPlace, project: wire.StorageProject = None):
    """Into a new volume (`{"to": NAME}`: 201; `"storage_class"` puts it in another class than the
    snapshot's volume was in) or over the snapshot's own volume (`{"in_place": true}`: 200)."""
    to = body.to if isinstance(body, wire.RestoreTo) else None
    if to is not None:
        response.status_code = 201
        wire.locate(request, response, "volumes", to, project)
    return wire.Volume.model_validate(client(request).restore_snapshot(name, to=to, in_place=to is None,
                                                                       storage_class=body.storage_class,
                                                                       project=project))


@router.post("/snapshots/{name}/verify", response_model=wire.VerifyReport, responses=CHANGES)
def verify_snapshot(request: Request, name: wire.SnapshotName, project: wire.StorageProject = None):
    """Re-hash one snapshot's stored data (`dtrain snapshot verify NAME`): 200 with `ok` false when
    something is damaged (what the CLI's exit status 1 says). A POST: it first removes the leftovers
    of interrupted snapshots."""
    return wire.VerifyReport.model_validate(client(request).verify_snapshot(name, project=project).to_dict())


@router.post("/verify", response_model=wire.VerifyReport, responses=CHANGES)
def verify_store(request: Request, project: wire.StorageProject = None):
    """Re-hash every snapshot's stored data (`dtrain snapshot verify`), as for one snapshot."""
    return wire.VerifyReport.model_validate(client(request).verify_snapshot(None, project=project).to_dict())


@router.get("/snapshots/{name}/diff", response_model=list[wire.Change], responses=ERRORS)
def diff_snapshots(request: Request, name: wire.SnapshotName,
                   to: Annotated[str | None, Query(pattern=wire.NAME)] = None, project: wire.StorageProject = None):
    """Paths added, removed or modified from snapshot `name` to snapshot `to`, or without `to` to the
    snapshot's volume as it is now (`dtrain snapshot diff NAME`)."""
    changes = client(request).diff_snapshots(name, to, project=project)
    return [wire.Change(path=_utf8(c.path), kind=c.kind, fields=list(c.fields)) for c in changes]


def _utf8(path: str) -> str:
    """A file name as JSON can carry it: bytes that are not UTF-8 (a job names its files as it
    likes; Python keeps them as lone surrogates, which no JSON encoder takes) written '\\xff'.
    Such a name made the whole diff an Internal Server Error."""
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return os.fsencode(path).decode("utf-8", "backslashreplace")
    return path


LINKED_READ = 100  # snapshots' jobs outside the page of jobs, read by name for the lineage


@router.get("/lineage", response_model=wire.Lineage, responses=ERRORS)
def get_lineage(request: Request,
                jobs: Annotated[int, Query(ge=1, le=wire.MAX_PAGE, description="the newest jobs read"),
                                wire.QueryWhole] = 100,
                per_volume: Annotated[int, Query(ge=0, le=wire.MAX_PAGE, description=(
                    "jobs drawn per volume of those that only mounted it")), wire.QueryWhole] = PER_VOLUME,
                project: wire.LineageProject = None):
    """Volumes, snapshots and the jobs between them, as nodes and edges: of the `jobs` newest jobs
    (not the Deleted ones), those that only mounted a volume are drawn `per_volume` per volume,
    the older ones folded into one node per volume. Volumes and jobs are joined on one backend (one
    namespace on Kubernetes): a job elsewhere that names a volume of the same name mounted another."""
    c = client(request)
    volumes = c.list_volumes(project=project)  # a project that does not exist: a 404, before the rest is read
    snapshots = c.list_snapshots(project=project)
    # the jobs that mount these volumes (or one a snapshot's, since deleted): many that mount none, another
    # project's, never hide them; a backend that cannot pick them pages every job, its older ones told as unread
    page = c.volume_jobs(project=project, limit=jobs,
                         mounting={v.name for v in volumes} | {s.volume for s in snapshots if s.volume})
    # a snapshot's job the page left out (Deleted, older, or another project's on a shared store): read
    # by name, so it is drawn with its status (a deleted job read as unknown as an unread one); at most
    # LINKED_READ of them (a cluster's backend asks its API once for each)
    apart = sorted({s.job for s in snapshots if s.job} - {j.name for j in page.jobs})[:LINKED_READ]
    linked, forgotten = [], set()
    for name in apart:
        try:
            linked.append(c.volume_job(name, project=project))
        except NotFoundError:
            forgotten.add(name)  # purged: no record of it is left
    return lineage(page.jobs, volumes, snapshots, per_volume=per_volume,
                   unread=page.total - len(page.jobs), linked=linked, forgotten=forgotten)

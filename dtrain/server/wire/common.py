"""What every HTTP payload shares: the name patterns in the schema, the path and query parameters,
the validators that read numbers as the CLI flags do, the request and response bases, the
refusal (`Error`) and the statuses every route may answer, and the `Warning` header."""

from __future__ import annotations

from typing import Annotated, Any, Literal, get_args

from fastapi import Path, Query
from pydantic import BaseModel, BeforeValidator, ConfigDict, WrapValidator

from dtrain.names import (CLAIM_RE, CLASS_RE, MAX_OFFSET, MAX_PAGE, MAX_TIME, NAME_RE, SIZE_RE,  # noqa: F401
                          WrittenFloat, WrittenInt)
from dtrain.numbers import real_number, whole, whole_number

STATUSES = Literal["Pending", "Running", "Succeeded", "Failed", "Deleted", "Suspended"]
# The ?status= filter: one of STATUSES in any case, or SageMaker's word (InProgress: Pending and Running; Completed,
# Stopping, Stopped); the client's check_statuses reads it, so the HTTP API, the SDK and the CLI take the same words
STATUS_FILTER_WORDS = (*get_args(STATUSES), "InProgress", "Completed", "Stopping", "Stopped")
# each word in any case, as check_status reads it (str.lower), in a pattern the schema shows (ECMA 262 has no (?i))
STATUS_FILTER_PATTERN = "^(?:" + "|".join("".join(f"[{c.upper()}{c.lower()}]" for c in word)
                                          for word in STATUS_FILTER_WORDS) + ")$"
STATUS_FILTER = Annotated[str | None, Query(max_length=32, pattern=STATUS_FILTER_PATTERN, description=(
    "only the jobs in this status: Pending, Running, Succeeded, Failed, Deleted or Suspended, in any case; "
    "SageMaker's InProgress reads as Pending and Running, Stopping as Running, Completed as Succeeded, "
    "Stopped as Deleted"))]
NAME = NAME_RE.pattern  # names.py's rule, in the schema so that clients see it
SIZE = SIZE_RE.pattern
CLASS = CLASS_RE.pattern
CLAIM = CLAIM_RE.pattern

JobName = Annotated[str, Path(pattern=NAME, description="a job name")]
NotebookName = Annotated[str, Path(pattern=NAME, description="a notebook name")]
VolumeName = Annotated[str, Path(pattern=NAME, description="a volume name")]
# what GET /volumes/{name} reads: also another tool's Kubernetes claim, by its full name ('data.v1')
ClaimName = Annotated[str, Path(pattern=CLAIM, max_length=253, description="a volume name, or on Kubernetes an "
                                "existing claim's full name (dots and all), as --pvc NAME:MOUNT takes it")]
SnapshotName = Annotated[str, Path(pattern=NAME, description="a snapshot name")]
# A route on one job: the job's project, as the CLI's -p on a job verb (`dtrain logs NAME -p team`)
SnapshotProject = Annotated[str | None, Query(pattern=NAME, description=(
    "list on that project's backend (config.yaml's project_backends; its namespace on Kubernetes), "
    "where its jobs keep their snapshots; with `job`, a job of another project is not found. Without "
    "it: the configured project's backend"))]
# A route on volumes or snapshots: the -p of `dtrain volume ...` and `dtrain snapshot ...`
StorageProject = Annotated[str | None, Query(pattern=NAME, description=(
    "on that project's backend (config.yaml's project_backends; its namespace on Kubernetes), where its "
    "volumes and its jobs' snapshots are, as `-p` on the CLI's volume and snapshot verbs. Without it: "
    "the configured project's backend"))]
# The lineage's: the volumes and snapshots of that backend (as StorageProject) and the jobs there that mount them
LineageProject = Annotated[str | None, Query(pattern=NAME, description=(
    "that project's lineage: the volumes and snapshots of its backend (config.yaml's project_backends; its "
    "namespace on Kubernetes), as `-p` on the CLI's volume and snapshot verbs, and its jobs there. Without "
    "it: the configured project's backend, with the jobs there that share its volumes (every project's "
    "locally, the namespace's on Kubernetes); a job of another backend is never joined to a volume here"))]
JobProject = Annotated[str | None, Query(pattern=NAME, description=(
    "the job's project, as `-p` on the CLI's job verbs: the job is looked for on that project's backend "
    "(config.yaml's project_backends; its namespace on Kubernetes), and a job of another project is not "
    "found. Without it: the configured project's backend, where a job of a project that config.yaml "
    "sends to another backend is not found"))]
JobBackend = Annotated[Literal["local", "kubernetes", "sagemaker"] | None, Query(description=(
    "the backend that holds the job, as `--backend` on the CLI's job verbs and `backend=` on the SDK's: local, "
    "kubernetes or sagemaker (422 for another name). Without it: "
    "the server's backend, else the job's project's, else the one backend a submit sent a job of that name to"))]
# what a name field names, for check_name's message when the pattern refuses it
NAMED = {"project": "project", "volume": "volume", "job": "job", "to": "volume", "snapshot_on_success": "volume",
         "jobs": "job", "notebooks": "notebook", "volumes": "volume", "snapshots": "snapshot", "projects": "project",
         "backends": "backend"}


def _as_typed(value, number):
    """`number` (the schema's reading of `value`) as `value` was typed where bodies.py kept its text
    (1e3, 1E3, 2.50): the spec's checks made across fields, and a backend's once the spec is built, name
    it so ("--processes 1e3 needs a launcher"); the stored spec holds the plain number."""
    return value if isinstance(value, (WrittenInt, WrittenFloat)) and value == number else number


def _count(value, handler):
    """JSON has one kind of number: 2.0 is the integer 2 (as JSON Schema's "integer" says, and as the
    flags read `--processes 2.0`: numbers.whole), 2.5 and 2.0000000000000001 are not."""
    value = whole(value)
    return _as_typed(value, handler(value))


Count = Annotated[int, WrapValidator(_count)]  # a count in a request body
MaybeCount = Annotated[int | None, WrapValidator(_count)]  # (its bounds reach the schema only so)
Real = WrapValidator(lambda value, handler: _as_typed(value, handler(value)))  # a body's cpu, kept as typed


def _query_whole(value):
    """A query's whole number read by the CLI flags' rule (numbers.whole_number): ?tail=1E3 is 1000, ?rank=1_0
    is 10, ?offset=5. is 5, as `--tail 1E3`, `--rank 1_0`, `--offset 5.`; what it refuses goes on as typed,
    for the check that names the parameter (app.py's _QUERY)."""
    return whole_number(value) if isinstance(value, str) else value


def _query_real(value):
    """A query's seconds read by the CLI flags' rule (numbers.real_number): float()'s, kept as typed."""
    return real_number(value) if isinstance(value, str) else value


def _query_typed(value, number):
    """A query's whole number that the schema took, as typed where it was typed otherwise (?rank=1E3): a
    refusal made once the job is read names it so, as it names `--rank 1E3`."""
    typed = _query_whole(value)
    return typed if isinstance(typed, int) and typed == number else number


QueryWhole = BeforeValidator(_query_whole)  # the metadata of every whole-number query parameter
QueryReal = BeforeValidator(_query_real)  # and of every one in seconds
QueryTyped = WrapValidator(lambda value, handler: _query_typed(value, handler(_query_whole(value))))  # ?rank=


def page_limit(what: str) -> Any:
    """The `limit` query parameter of a list of `what` (jobs, notebooks, volumes, snapshots) that pages."""
    return Annotated[int | None, Query(ge=1, le=MAX_PAGE, description=f"a page of at most this many {what}, "
                                                                     "newest first"), QueryWhole]


def page_offset(what: str) -> Any:
    """The `offset` query parameter of a list of `what` that pages: a page's start."""
    return Annotated[int | None, Query(ge=0, le=MAX_OFFSET, description=f"skip this many {what} of the newest-first "
                                                                       "list (a page's start)"), QueryWhole]


def total_count(what: str) -> dict:
    """The OpenAPI entry of a paging list's `X-Total-Count` response header."""
    return {"X-Total-Count": {"description": f"the {what} that matched the filters, before `limit` and `offset`",
                              "required": True, "schema": {"type": "integer", "minimum": 0}}}


class _In(BaseModel):
    """A request body: no unknown field, and no value converted from another type ("yes" is not a
    boolean, 1 not one either, "2" not a number), as a job file is read (dtrain.spec)."""

    model_config = ConfigDict(extra="forbid", strict=True)  # but a Count takes 2.0 for 2


class Error(BaseModel):
    """Every refusal: the CLI's one-line message and the error class."""

    error: str
    kind: str


# The statuses any route may answer (app.STATUS and auth.Guard), in every route's schema: a client
# generated from the schema knows them all (a missing tool is a 503, a broken store a 507).
ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"model": Error, "description": "no token, or a wrong one (a server bound off loopback)"},
    421: {"model": Error, "description": "a Host header that is not a loopback name, on a loopback server"},
    404: {"model": Error}, 409: {"model": Error}, 422: {"model": Error},
    501: {"model": Error, "description": "the backend has no such verb"},
    502: {"model": Error, "description": "the backend (a cluster, AWS) failed"},
    503: {"model": Error, "description": "a tool missing here, too many open waits and streams, or the state "
                                         "database locked by another process for longer than its busy timeout"},
    507: {"model": Error, "description": "the volume store failed, or the disk refused a write (full, read-only)"}}
# ... and those of a route that changes something
CHANGES: dict[int | str, dict[str, Any]] = {
    **ERRORS, 403: {"model": Error, "description": "a --read-only server, or a change sent by a page of another site"},
    413: {"model": Error, "description": "a body over 8 MiB"}}


def _warning_header(description: str) -> dict:
    """The OpenAPI entry of a route's `Warning` response header (`wire.warn` sets it), present when
    `description` says."""
    return {"Warning": {"description": description, "schema": {"type": "string"}}}


def warning_header(text: str) -> str:
    """An RFC 7234 Warning header value (code 299, persistent) carrying `text` on one line, in the
    ASCII a header can hold (the same words `dtrain list` prints as its warning)."""
    line = " ".join(text.split()).replace("\\", "\\\\").replace('"', '\\"')
    return '299 dtrain "' + line.encode("ascii", "replace").decode() + '"'


def warn(response, notices) -> None:
    """A call's notices (the warnings it returned with its result) in the response's Warning header,
    one warning-value each, comma-separated (RFC 7234); none: no header."""
    if notices:
        response.headers["warning"] = ", ".join(warning_header(n.message) for n in notices)


class _Out(BaseModel):
    model_config = ConfigDict(from_attributes=True)  # built straight from the client's frozen records


LOCATION = {"Location": {"description": "the new record's address, to GET: /api/v1/KIND/NAME?project=PROJECT "
                                        "(behind --root-path, under it)", "required": True, "schema": {"type": "string"}}}


def locate(request, response, kind: str, name: str, project: str | None) -> None:
    """A 201's Location: where the record made is read back (RFC 9110 15.3.2)."""
    query = f"?project={project}" if project else ""  # names and projects are URL-safe (the name rule)
    response.headers["location"] = f"{request.scope.get('root_path', '')}/api/v1/{kind}/{name}{query}"

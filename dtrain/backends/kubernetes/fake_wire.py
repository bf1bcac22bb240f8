"""What the fake API server says: the Status bodies of its answers (a refusal worded as the API
server words it, for the verb RBAC saw), the faults a test injects, and the selectors it matches."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any, NamedTuple

USER = "test"  # who a refusal says asked: the fake takes no credentials
DROP = 0  # a fault's status that closes the connection without an answer
UPGRADE = 101  # an exec session: the answer is the (channel, bytes) writes of the command
_REASONS = {400: "BadRequest", 401: "Unauthorized", 403: "Forbidden", 404: "NotFound", 409: "AlreadyExists",
            410: "Expired", 422: "Invalid", 429: "TooManyRequests", 500: "InternalError",
            503: "ServiceUnavailable", 504: "Timeout"}


class Fault(NamedTuple):
    """How the fake answers matching requests instead of carrying them out (see FakeCluster.fail)."""

    method: str  # 'GET', 'POST', ... or '*'
    path: str  # a part of the request's path
    status: int  # the HTTP status of the answer; DROP: no answer, the connection closes
    message: str
    carried_out: bool  # the request takes effect first: its answer is lost after the write
    after: int = 0  # this many matching requests are carried out first, as if no fault were there
    once: bool = False  # the fault answers one request, then is gone


def rfc3339(t: float, *, nanos: bool = False) -> str:
    stamp = datetime.fromtimestamp(t, tz=timezone.utc)
    if nanos:
        return stamp.strftime("%Y-%m-%dT%H:%M:%S.") + f"{stamp.microsecond:06d}000Z"
    return stamp.strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str, details: dict | None = None) -> tuple[int, bytes]:
    body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "details": details or {}, "code": code}
    return code, json.dumps(body).encode()


def exec_writes(stdout: str = "", stderr: str = "", *, exit_code: int = 0) -> list[tuple[int, bytes]]:
    """What the kubelet relays of a command that ran (channel 1 stdout, 2 stderr), then its end on
    channel 3: a metav1.Status, Success, or NonZeroExitCode with an ExitCode cause."""
    writes = [(channel, text.encode()) for channel, text in ((1, stdout), (2, stderr)) if text]
    status: dict[str, Any] = {"metadata": {}, "status": "Success"}
    if exit_code:
        status = {"metadata": {}, "status": "Failure", "reason": "NonZeroExitCode",
                  "message": f"command terminated with non-zero exit code: exit status {exit_code}",
                  "details": {"causes": [{"reason": "ExitCode", "message": str(exit_code)}]}}
    return writes + [(3, json.dumps(status).encode())]


def _verb(method: str, name: str | None, query: dict[str, str]) -> str:
    """The RBAC verb of a request, as the API server's RequestInfo names it: a GET of a collection
    is a list (a watch with ?watch), of one object a get; a DELETE of a collection a deletecollection."""
    if method == "GET":
        return "get" if name is not None else ("watch" if _go_bool(query.get("watch")) else "list")
    if method == "DELETE" and name is None:
        return "deletecollection"
    return {"POST": "create", "PUT": "update", "PATCH": "patch", "DELETE": "delete"}.get(method, method.lower())


def _forbidden(group: str, plural: str, sub: str, namespace: str | None, name: str | None,
               verb: str) -> tuple[int, bytes]:
    """A 403 worded as the API server words it: errors.NewForbidden's `<resource>[ "<name>"] is
    forbidden: ` (the resource qualified by its group, not the core group's) around the authorizer's
    forbiddenMessage, which names the verb, the resource with its subresource, and the namespace or
    the cluster scope (a namespace's own path is in that namespace, as RequestInfo reads it)."""
    resource = f"{plural}.{group}" if group else plural
    if plural == "namespaces" and namespace is None and name is not None:
        namespace = name
    where = f'in the namespace "{namespace}"' if namespace else "at the cluster scope"
    said = f'{resource} "{name}"' if name is not None else resource
    return _status(403, "Forbidden", f'{said} is forbidden: User "{USER}" cannot {verb} resource "{sub}" '
                                     f'in API group "{group}" {where}',
                   {"group": group, "kind": plural, **({"name": name} if name is not None else {})})


def _not_found(group: str, plural: str, name: str) -> tuple[int, bytes]:
    return _status(404, "NotFound", f'{plural}.{group} "{name}" not found',
                   {"name": name, "group": group, "kind": plural})



def _go_bool(value: str | None) -> bool:
    """A boolean query parameter as the API server reads it (Go's strconv.ParseBool): the
    official client sends 'True' in some versions and 'true' in others."""
    return value in ("1", "t", "T", "true", "TRUE", "True")

def _matches(labels: dict[str, str], selector: str | None) -> bool:
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            key, value = term.split("!=", 1)
            if labels.get(key) == value:
                return False
        elif "=" in term:
            key, value = term.replace("==", "=").split("=", 1)
            if labels.get(key) != value:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _field(obj: dict, path: str) -> Any:
    for part in path.split("."):
        obj = obj.get(part) if isinstance(obj, dict) else None
    return obj


def _fields_match(obj: dict, selector: str | None) -> bool:
    for term in filter(None, (selector or "").split(",")):
        negate = "!=" in term
        path, value = term.split("!=" if negate else "=", 1)
        if (str(_field(obj, path) or "") == value) == negate:
            return False
    return True

"""The thin I/O layer: dict manifests in, dicts out, through the official `kubernetes` client.

Every call goes through the generated API classes (CoreV1Api, BatchV1Api, RbacAuthorizationV1Api,
CustomObjectsApi) with `_preload_content=False`, so one JSON shape (the wire's) flows through the
backend whatever the kind, and every API error becomes a dtrain error here, in one place.
The ApiClient under them comes from kubeconfig.py (the kubeconfig, else the in-cluster account).
"""

from __future__ import annotations

import json
import re
import socket
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any, Iterator

from dtrain.errors import BackendError, ConflictError, NotFoundError, UnavailableError

# finding and loading the kubeconfig lives apart (kubeconfig.py); its names are still importable from here
from .kubeconfig import (_config_fix, _config_problem, _incluster_problem, _no_kubeconfig,  # noqa: F401
                         _PluginErrors, client_from_config, import_kubernetes, kubeconfig_at)
from .logs import LogLines
from .objects import Resource

NAMESPACE = Resource("", "v1", "namespaces", "Namespace", "", namespaced=False)
NODE = Resource("", "v1", "nodes", "Node", "", namespaced=False)
POD = Resource("", "v1", "pods", "Pod", "")
EVENT = Resource("", "v1", "events", "Event", "")
PVC = Resource("", "v1", "persistentvolumeclaims", "PersistentVolumeClaim", "")
RESOURCE_QUOTA = Resource("", "v1", "resourcequotas", "ResourceQuota", "")
SERVICE = Resource("", "v1", "services", "Service", "")
SERVICE_ACCOUNT = Resource("", "v1", "serviceaccounts", "ServiceAccount", "")
ROLE = Resource("rbac.authorization.k8s.io", "v1", "roles", "Role", "")
ROLE_BINDING = Resource("rbac.authorization.k8s.io", "v1", "rolebindings", "RoleBinding", "")
CRD = Resource("apiextensions.k8s.io", "v1", "customresourcedefinitions", "CustomResourceDefinition", "",
               namespaced=False)
_TYPED_APIS = {"": "core", "batch": "batch", "rbac.authorization.k8s.io": "rbac"}


class Missing(NotFoundError):
    """A 404: the object is absent, or (api_missing) the cluster does not serve its type at all."""

    def __init__(self, message: str, *, api_missing: bool, resource: Resource | None = None):
        super().__init__(message)
        self.api_missing = api_missing
        self.resource = resource  # set by KubeApi.call, which knows what it asked for

    def no_api(self) -> BackendError:
        """The one error for a kind the cluster does not serve (its CRD is not installed),
        naming what to install."""
        r = self.resource
        if r is None:
            return BackendError(f"{self}: the cluster does not serve this API")
        return BackendError(f"the cluster does not serve {r.full_name} ({r.kind}): "
                            f"{r.install_hint or 'check the API group and version'}")


class Forbidden(BackendError):
    """A 401/403: credentials or RBAC refused the call."""


class Unauthenticated(Forbidden):
    """A 401: the cluster did not accept the credentials at all (expired, wrong), whatever was asked."""


class Unanswered(UnavailableError):
    """No clear answer (a dropped connection, a timeout, a 5xx): the request may have taken effect."""


class Hangup:
    """Ends follow streams from another thread. The caller that stopped reading hangs up, and every
    stream opened with this is shut down at once: a reader blocked on a silent pod's socket wakes,
    and the API server sees its stream's connection end. A stream that opens after the hang-up is
    closed as it opens; a reader between tries sleeps in wait(), which the hang-up ends."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: set[Any] = set()
        self._done = threading.Event()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def wait(self, seconds: float) -> bool:
        """Sleep `seconds` unless hung up meanwhile; True once hung up."""
        return self._done.wait(seconds)

    def opened(self, resp: Any) -> bool:
        """Track a stream's response; False (and not tracked) once hung up."""
        with self._lock:
            if self.done:
                return False
            self._open.add(resp)
            return True

    def closed(self, resp: Any) -> None:
        with self._lock:
            self._open.discard(resp)

    def hang_up(self) -> None:
        with self._lock:
            self._done.set()
            responses = list(self._open)
        for resp in responses:
            # The socket, not the response: close() from this thread would race the reader's own
            # read of it. shutdown() wakes that read (end of stream) and sends the server a FIN;
            # the reader then closes the response itself. The plain socket's shutdown, also under
            # TLS: SSLSocket.shutdown drops the TLS state that the reader's read is using.
            conn = resp.connection
            sock = conn.sock if conn is not None else None
            if sock is not None:
                try:
                    socket.socket.shutdown(sock, socket.SHUT_RDWR)
                except OSError:
                    pass  # closed by its reader meanwhile


def _shown_body(data: bytes | str) -> str:
    """The start of an answer that is not JSON (an HTML page of a proxy or a web server)."""
    data = data.encode() if isinstance(data, str) else data
    text = " ".join(data[:80].decode("utf-8", errors="replace").split())
    return f"{text!r}" + ("..." if len(data) > 80 else "")


def _exit_code(status_text: bytes | str, namespace: str, pod: str, command: list[str]) -> int:
    """A command's exit code from the metav1.Status that ends an exec session: Success is 0,
    NonZeroExitCode carries an ExitCode cause. Anything else is one line: the command could not
    be started (an InternalError: executable not found), or the session ended without a status."""
    try:
        status = json.loads(status_text) if status_text.strip() else None
    except ValueError:
        status = None
    if not isinstance(status, dict):
        raise BackendError(f"the exec session in pod {pod} ended without the command's exit status: the command "
                           f"may still run there; check with 'kubectl -n {namespace} get pod {pod}'")
    if status.get("status") == "Success":
        return 0
    causes = (status.get("details") or {}).get("causes") or []
    codes = [str(c.get("message")) for c in causes if isinstance(c, dict) and c.get("reason") == "ExitCode"]
    if status.get("reason") == "NonZeroExitCode" and codes and codes[0].isdigit():
        return int(codes[0])
    message = " ".join(str(status.get("message") or status.get("reason") or "no reason given").split())
    raise BackendError(f"cannot run {command[0]!r} in pod {pod}: {message}")


def _snake(kind: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()


# Our verbs as the API's authorization verbs (what `kubectl auth can-i` takes).
_CAN_I = {"create": "create", "read": "get", "list": "list", "replace": "update", "patch": "patch",
          "delete": "delete"}
CONNECT_TIMEOUT = 30.0  # seconds to open a connection (client-go's dial timeout)
LOG_CHUNK = 1 << 16  # bytes of a pod log read at a time (`logs` without -f)
STDOUT, STDERR, ERROR = 1, 2, 3  # exec's channels (v4.channel.k8s.io): the first byte of each frame
MAX_STATUS = 1 << 16  # bytes of the session's closing metav1.Status kept; a real one is a few hundred


@dataclass
class KubeApi:
    """The official API objects over one ApiClient, and the error mapping."""

    api_client: Any
    timeout: float = 90.0  # seconds for one answer; a log stream that follows waits without bound

    def __post_init__(self):
        k8s = import_kubernetes()
        self.core = k8s.client.CoreV1Api(self.api_client)
        self.batch = k8s.client.BatchV1Api(self.api_client)
        self.rbac = k8s.client.RbacAuthorizationV1Api(self.api_client)
        self.custom = k8s.client.CustomObjectsApi(self.api_client)
        self._api_exception = k8s.client.exceptions.ApiException

    @property
    def host(self) -> str:
        return self.api_client.configuration.host

    # ---------------------------------------------------------------- generic verbs

    def create(self, obj: dict, resource: Resource) -> dict:
        meta = obj["metadata"]
        return self.call("create", resource, meta.get("namespace"), meta["name"], body=obj)

    def read(self, resource: Resource, namespace: str | None, name: str) -> dict:
        return self.call("read", resource, namespace, name)

    def list(self, resource: Resource, namespace: str | None, **query: Any) -> list[dict]:
        return list(self.call("list", resource, namespace, **query).get("items") or [])

    def replace(self, obj: dict, resource: Resource) -> dict:
        meta = obj["metadata"]
        return self.call("replace", resource, meta.get("namespace"), meta["name"], body=obj)

    def patch(self, resource: Resource, namespace: str | None, name: str, patch: list[dict]) -> dict:
        """A JSON Patch (the content type the generated client sends for a list body)."""
        return self.call("patch", resource, namespace, name, body=patch)  # type: ignore[arg-type]

    def delete(self, resource: Resource, namespace: str | None, name: str, *, propagation: str = "Background") -> dict:
        return self.call("delete", resource, namespace, name, propagation_policy=propagation)

    def call(self, verb: str, resource: Resource, namespace: str | None, name: str | None = None, *,
             body: dict | None = None, **query: Any) -> dict:
        if resource.group in _TYPED_APIS:
            api = getattr(self, _TYPED_APIS[resource.group])
            scope = "namespaced_" if namespace else ""
            method = f"{verb}_{scope}{_snake(resource.kind)}"
            if verb == "list" and resource.namespaced and not namespace:
                method += "_for_all_namespaces"
            args: tuple = (name,) if verb in ("read", "delete", "replace", "patch") else ()
            args += (namespace,) if namespace else ()
        else:
            api = self.custom
            method = f"{'get' if verb == 'read' else verb}_{'namespaced' if namespace else 'cluster'}_custom_object"
            args = (resource.group, resource.version, *((namespace,) if namespace else ()), resource.plural)
            args += (name,) if verb in ("read", "delete", "replace", "patch") else ()
        if body is not None:
            args += (body,)
        where = f" in namespace {namespace}" if namespace else ""
        plural = "es" if resource.kind.endswith("s") else "s"  # StorageClasses, VolumeAttributesClasses
        what = f"{verb} {resource.kind}{' ' + repr(name) if name else plural}{where}"
        scope = f"-n {namespace}" if namespace else "-A" if resource.namespaced else ""
        access = " ".join(x for x in (_CAN_I[verb], resource.full_name, scope) if x)
        try:
            return self.send(what, getattr(api, method), *args, access=access, **query)
        except Missing as err:
            err.resource = resource
            raise

    def send(self, what: str, method, *args: Any, access: str, **kwargs: Any) -> dict:
        resp = self.raw(what, method, *args, access=access, **kwargs)
        with self.answering(what):
            data = resp.data
        if not data:
            return {}
        try:
            answer = json.loads(data)
        except ValueError:
            answer = None
        if not isinstance(answer, dict):
            raise BackendError(f"the server at {self.host} is not a Kubernetes API server: it answered the "
                               f"request to {what} with {_shown_body(data)}; check the server address of "
                               f"the kubeconfig context")
        return answer

    def raw(self, what: str, method, *args: Any, access: str, **kwargs: Any):
        """The urllib3 response of one API call (a stream when the call asks to follow); `access`:
        the `kubectl auth can-i` arguments that check this call's permission."""
        kwargs.setdefault("_request_timeout", (min(CONNECT_TIMEOUT, self.timeout), self.timeout))
        with self.answering(what):
            try:
                return method(*args, _preload_content=False, **kwargs)
            except self._api_exception as err:
                raise self._error(what, err, access) from None

    @contextmanager
    def answering(self, what: str) -> Iterator[None]:
        """Turns a request or a read of its answer that broke off (refused, reset, timed out) into
        one BackendError line."""
        import urllib3

        try:
            yield
        except urllib3.exceptions.HTTPError as err:
            raise self.unreachable(what, err) from None

    def unreachable(self, what: str, err: Exception) -> Unanswered:
        """One line for a request that got no answer: refused, reset, timed out."""
        import urllib3

        reason = getattr(err, "reason", None) or err  # MaxRetryError wraps the cause
        if isinstance(reason, urllib3.exceptions.ReadTimeoutError):
            return Unanswered(f"the Kubernetes API at {self.host} did not answer within {self.timeout:g}s to "
                                f"{what}: check that the cluster is up, or raise request_timeout in the "
                                f"kubernetes settings")
        # urllib3 names the pool first ("HTTPSConnectionPool(host=..., port=...): "): keep the cause
        text = " ".join(str(reason).split()).rsplit("): ", 1)[-1]
        return Unanswered(f"cannot reach the Kubernetes API at {self.host} to {what}: {text}; check the "
                          f"kubeconfig context and that the cluster is up")

    def _error(self, what: str, err, access: str) -> Exception:
        try:
            status = json.loads(err.body or "{}")
        except ValueError:
            status = {}
        if not isinstance(status, dict):
            status = {}
        if status.get("kind") != "Status" and err.status not in (401, 403, 502, 503, 504):
            # Every answer of an API server is a metav1.Status; a web server's 404 or 501 (no such
            # path, no POST) is not, and advice about CRDs, jobs or load would mislead. Credentials
            # refused and a gateway's 502-504 mean the same whoever says them: mapped below.
            return BackendError(f"the server at {self.host} does not look like a Kubernetes API server: it answered "
                                f"the request to {what} with HTTP {err.status} {_shown_body(err.body or b'')}; check "
                                f"the server address of the kubeconfig context")
        message = " ".join(str(status.get("message") or err.reason or "no message").split())
        details = status.get("details") or {}
        if err.status == 404:
            # An absent object names itself in details; an absent API type (no CRD) does not.
            return Missing(f"cannot {what}: {message}", api_missing=not details.get("name"))
        if err.status == 409:
            return ConflictError(f"cannot {what}: {message}")
        if err.status == 401:
            return Unauthenticated(f"cannot {what}: {message}; the cluster did not accept the credentials of the "
                             f"kubeconfig context (expired or wrong): log in again, then retry")
        if err.status == 403:
            return Forbidden(f"cannot {what}: {message}; check your credentials and RBAC "
                             f"(kubectl auth can-i {access})")
        if err.status in (400, 422):
            return BackendError(f"the cluster rejected the request to {what}: {message}")
        if err.status == 429 or err.status >= 500:
            kind = Unanswered if err.status >= 500 else UnavailableError  # a 429 was not carried out
            return kind(f"cannot {what}: HTTP {err.status} {message}; the API server is overloaded or "
                        f"failing: retry in a minute, and if it persists ask the cluster's admin")
        return BackendError(f"cannot {what}: HTTP {err.status} {message}")

    # ---------------------------------------------------------------- pods and nodes

    def pods(self, namespace: str | None, selector: str) -> list[dict]:
        """Pods matching a label selector in one namespace (None: every namespace)."""
        return self.list(POD, namespace, label_selector=selector)

    def exec(self, namespace: str, pod: str, command: list[str]) -> int:
        """Run a command in a pod's first container through the websocket exec API, copying its
        output to ours as it arrives; the command's exit code."""
        import sys

        from kubernetes.stream import stream
        from websocket import ABNF, WebSocketException

        # stream() swaps the `request` of the ApiClient under the API object for a websocket call
        # until the handshake ends: the exec gets an ApiClient of its own (same configuration and
        # headers), so another thread's plain request in that window stays one
        own = type(self.api_client)(configuration=self.api_client.configuration)
        own.default_headers.update(self.api_client.default_headers)
        core = type(self.core)(own)
        # binary: the output's bytes as the command wrote them (the text mode decodes each frame on
        # its own, so a file copied out with `cat` came back with U+FFFD where its bytes were not UTF-8)
        try:
            session = stream(core.connect_get_namespaced_pod_exec, pod, namespace, command=command, stdin=False,
                             stdout=True, stderr=True, tty=False, _preload_content=False, binary=True)
        except self._api_exception as err:
            own.close()
            raise self._exec_error(namespace, pod, err) from None
        except BaseException:
            own.close()
            raise
        sys.stdout.flush()
        sys.stderr.flush()
        outs = {STDOUT: sys.stdout.buffer, STDERR: sys.stderr.buffer}
        status = b""
        # Frames are read off the session's socket here, one at a time, never through the client's
        # update(): that also appends every byte of stdout and stderr to a buffer kept for read_all()
        # until the session ends (capture_all, which stream() cannot turn off), so a long
        # `dtrain exec JOB -- tail -f log` grew without bound.
        try:
            while True:
                opcode, frame = session.sock.recv_data_frame()
                if opcode == ABNF.OPCODE_CLOSE:
                    break
                channel, data = (frame.data[0], frame.data[1:]) if frame.data else (None, b"")
                if channel in outs and data:
                    outs[channel].write(data)
                    outs[channel].flush()
                elif channel == ERROR and len(status) < MAX_STATUS:
                    status += data
        except (WebSocketException, OSError) as err:
            cause = " ".join(str(err).split())
            raise BackendError(f"the exec session in pod {pod} broke off ({cause}): the command may still run "
                               f"there; check with 'kubectl -n {namespace} get pod {pod}'") from None
        finally:
            session.close()
            own.close()
        return _exit_code(status, namespace, pod, command)

    def _exec_error(self, namespace: str, pod: str, err) -> Exception:
        """The websocket client reports a refused upgrade as status 0 and a reason holding the
        status line, every header and the body: keep the status line, map 401/403 like any call."""
        if err.status:
            return self._error(f"exec into pod {pod}", err, f"create pods/exec -n {namespace}")
        text = str(err.reason or "")
        line = " ".join(text.split("-+-+-")[0].split())
        code = re.search(r"Handshake status (\d{3})", line)
        if code and code.group(1) in ("401", "403"):
            return Forbidden(f"cannot exec into pod {pod}: the API server refused it ({line}); check your "
                             f"credentials and RBAC (kubectl auth can-i create pods/exec -n {namespace})")
        return BackendError(f"cannot exec into pod {pod} through the Kubernetes API at {self.host}: {line}; check "
                            f"that the cluster is up and that a proxy between lets websockets through")

    def pod_log(self, namespace: str, pod: str, *, follow: bool = False, hangup: Hangup | None = None,
                tags: str | None = None, **query: Any) -> Iterator[str]:
        """Lines of one pod's log ('<RFC 3339 time> <text>' with timestamps=True), a line longer than
        MAX_LINE bytes in pieces (LogLines; `tags`: the rank tags of a packed pod's lines, which each
        piece repeats). A stream that follows ends quietly once `hangup` hangs up; one left
        unfinished closes its connection."""
        what = f"read the log of pod {pod!r}"
        # A stream that follows may stay silent for hours while the job computes: no read timeout.
        timeout = (min(CONNECT_TIMEOUT, self.timeout), None if follow else self.timeout)
        resp = self.raw(what, self.core.read_namespaced_pod_log, pod, namespace, follow=follow,
                        _request_timeout=timeout, access=f"get pods/log -n {namespace}", **query)
        import urllib3

        lines = LogLines(stamped=bool(query.get("timestamps")), tags=tags)
        if hangup is not None and not hangup.opened(resp):
            resp.close()
            return
        # Followed, the API server streams chunks as the container writes; else the log is read 64 KiB
        # at a time, never whole in memory. Either way the chunks are split into lines.
        chunks = resp.stream(amt=None, decode_content=False) if follow else resp.stream(LOG_CHUNK)
        ended = False
        try:
            for chunk in chunks:
                for line in lines.feed(chunk):
                    yield line.decode("utf-8", errors="replace")
            if hangup is not None and hangup.done:
                return  # the shut-down socket read as the stream's end: a cut line is not the pod's
            for line in lines.end():
                yield line.decode("utf-8", errors="replace")
            ended = True
        except urllib3.exceptions.HTTPError as err:
            if hangup is not None and hangup.done:
                return  # the shut-down socket broke the read off
            if not follow:
                raise self.unreachable(what, err) from None
            cause = " ".join(str(getattr(err, "reason", None) or err).split())
            raise BackendError(f"the log stream of pod {pod!r} from {self.host} broke off ({cause}): "
                               f"follow the logs again to go on") from None
        finally:
            if hangup is not None:
                hangup.closed(resp)
            if ended:
                resp.release_conn()
            else:  # left mid-stream (the caller closed us, a hang-up, an error): the connection goes too,
                resp.close()  # else the server streams on into it until its next use finds it unread

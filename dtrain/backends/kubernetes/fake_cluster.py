"""The fake API server's store (see fake.py): objects and pod logs behind one lock, and the REST paths
the backend uses; the moves of the operators, provisioner and snapshot controller are fake_controllers.py's."""

from __future__ import annotations

import itertools
import json
import threading
import time
import uuid
from collections.abc import Callable, Iterable, Iterator
from urllib.parse import parse_qs, unquote, urlsplit

from .fake_controllers import FakeControllers, _restarts
from .fake_wire import (_REASONS, DROP, UPGRADE, Fault, _fields_match, _forbidden, _go_bool, _matches, _not_found,
                        _status, _verb, rfc3339)
from .objects import PVC_PROTECTION
from .patches import apply_patch

CORE = {  # (group, plural) -> (kind, namespaced)
    ("", "namespaces"): ("Namespace", False), ("", "nodes"): ("Node", False), ("", "pods"): ("Pod", True), ("", "events"): ("Event", True),
    ("", "persistentvolumeclaims"): ("PersistentVolumeClaim", True), ("", "services"): ("Service", True),
    ("", "serviceaccounts"): ("ServiceAccount", True), ("", "resourcequotas"): ("ResourceQuota", True),
    ("batch", "jobs"): ("Job", True),
    ("rbac.authorization.k8s.io", "roles"): ("Role", True),
    ("rbac.authorization.k8s.io", "rolebindings"): ("RoleBinding", True),
    # storage.k8s.io/v1 (VolumeAttributesClass is v1 from Kubernetes 1.34; the fake answers any version's path)
    ("storage.k8s.io", "storageclasses"): ("StorageClass", False),
    ("storage.k8s.io", "volumeattributesclasses"): ("VolumeAttributesClass", False),
}
CRDS = {
    ("kubeflow.org", "pytorchjobs"): ("PyTorchJob", True), ("kubeflow.org", "mpijobs"): ("MPIJob", True),
    ("trainer.kubeflow.org", "trainjobs"): ("TrainJob", True),
    ("kubeflow.org", "notebooks"): ("Notebook", True),
    ("snapshot.storage.k8s.io", "volumesnapshots"): ("VolumeSnapshot", True),
    ("snapshot.storage.k8s.io", "volumesnapshotclasses"): ("VolumeSnapshotClass", False),
}
JOB_PLURALS = (("batch", "jobs"), ("kubeflow.org", "pytorchjobs"), ("kubeflow.org", "mpijobs"),
               ("trainer.kubeflow.org", "trainjobs"), ("kubeflow.org", "notebooks"))


class FakeCluster(FakeControllers):
    """Objects, pod logs and the controllers' moves, behind one lock."""

    def __init__(self, *, crds: dict | None = None, namespaces: tuple[str, ...] = ("default",)):
        self.lock = threading.RLock()
        self.served = {**CORE, **(CRDS if crds is None else crds)}
        self.objects: dict[tuple[str, str, str, str], dict] = {}
        # (time, text, end, starts a line) per write of a pod's container
        self.logs: dict[tuple[str, str], list[tuple[float, str, str, bool]]] = {}
        self.forbidden: set[tuple[str, str]] = set()  # (group, plural or plural/subresource) answered with 403
        self.namespaced_only = False  # True: 403 for namespaced kinds read across all namespaces
        self.requests: list[tuple[str, str]] = []  # (method, path?query) in arrival order
        # each object as a create, replace or patch left it (tests validate what dtrain sent)
        self.written: list[dict] = []
        self.on_follow_idle: Callable[[str, str], None] | None = None  # a follow stream caught up
        # exec (namespace, pod, command) -> the (channel, bytes) writes of the session (exec_writes); an
        # iterator is framed write by write, as it yields, so a session may carry more than memory holds
        self.on_exec: Callable[[str, str, list[str]], Iterable[tuple[int, bytes]]] | None = None
        self.faults: list[Fault] = []  # see fail()
        self.streams = 0  # chunked answers (followed logs) being sent now; see wait_streams()
        self._streams_changed = threading.Condition(self.lock)
        self._rv = itertools.count(1)
        for ns in namespaces:
            self.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})

    # ---------------------------------------------------------------- store

    def _key(self, obj: dict) -> tuple[str, str, str, str]:
        group = obj["apiVersion"].rpartition("/")[0]
        plural = next(p for (g, p), (k, _) in self.served.items() if g == group and k == obj["kind"])
        return group, plural, obj["metadata"].get("namespace", ""), obj["metadata"]["name"]

    def create(self, obj: dict) -> dict:
        """Store a new object as the API server would (uid, timestamps); raises KeyError on a clash."""
        with self.lock:
            obj = json.loads(json.dumps(obj))
            meta = obj.setdefault("metadata", {})
            key = self._key(obj)
            if key in self.objects:
                raise KeyError(key)
            meta.update(uid=str(uuid.uuid4()), creationTimestamp=rfc3339(time.time()),
                        resourceVersion=str(next(self._rv)), generation=1)
            if obj["kind"] == "PersistentVolumeClaim":
                obj["status"] = {"phase": "Pending"}
                # the StorageObjectInUseProtection admission plugin: deleted, it stays while a pod uses it
                meta["finalizers"] = [*(meta.get("finalizers") or []), PVC_PROTECTION]
                spec = obj.setdefault("spec", {})
                if spec.get("storageClassName") is None:  # the DefaultStorageClass admission plugin
                    default = [c["metadata"]["name"] for c in self.items("storage.k8s.io", "storageclasses")
                               if (c["metadata"].get("annotations") or {}).get(
                                   "storageclass.kubernetes.io/is-default-class") == "true"]
                    if default:
                        spec["storageClassName"] = default[-1]
            self.objects[key] = obj
            return obj

    def get(self, group: str, plural: str, namespace: str, name: str) -> dict:
        with self.lock:
            return self.objects[(group, plural, namespace or "", name)]

    def find_job(self, namespace: str, name: str) -> dict:
        with self.lock:
            for group, plural in JOB_PLURALS:
                obj = self.objects.get((group, plural, namespace, name))
                if obj is not None:
                    return obj
        raise KeyError(name)

    def items(self, group: str, plural: str, namespace: str | None = None) -> list[dict]:
        with self.lock:
            return [o for (g, p, ns, _), o in sorted(self.objects.items())
                    if g == group and p == plural and (namespace is None or ns == namespace)]

    def _remove(self, key: tuple[str, str, str, str]) -> None:
        obj = self.objects.pop(key)
        uid = obj["metadata"]["uid"]
        for other_key, other in list(self.objects.items()):  # garbage-collect dependents
            owners = other["metadata"].get("ownerReferences") or []
            if any(o.get("uid") == uid for o in owners) and other_key in self.objects:
                self._remove(other_key)
        if obj["kind"] == "Pod":
            self.logs.pop((key[2], key[3]), None)

    def finish_deletions(self) -> None:
        """Let foreground deletions complete: objects marked deleted go, with their dependents (those whose
        last finalizer a test removed too), and a namespace being terminated goes once nothing is left in it."""
        with self.lock:
            for key in [k for k, o in self.objects.items() if o["metadata"].get("deletionTimestamp") and (
                        "foregroundDeletion" in (o["metadata"].get("finalizers") or [])
                        or not o["metadata"].get("finalizers"))]:  # (a test removed the last finalizer)
                if key in self.objects:
                    self._remove(key)
            self._protect_claims()
            self._empty_namespaces()

    def fail(self, method: str, path: str, status: int, message: str = "", *, carried_out: bool = False,
             after: int = 0, once: bool = False) -> None:
        """Answer every later `method` request ('*': any) whose path holds `path` with `status` and
        a Status body, as the API server answers a refused request; DROP closes the connection instead.
        carried_out: the request takes effect first, as when an answer is lost after the write; after: the
        first `after` such requests are answered as usual; once: only one is refused (a refusal that passes)."""
        with self.lock:
            self.faults.append(Fault(method, path, status, message or f"injected {_REASONS.get(status, status)}",
                                     carried_out, after, once))

    def wait_streams(self, predicate: Callable[[int], bool], timeout: float) -> bool:
        """Block until predicate(streams being sent) holds, e.g. until every follow has ended;
        False if it still does not after `timeout` seconds."""
        with self._streams_changed:
            return self._streams_changed.wait_for(lambda: predicate(self.streams), timeout)

    def count_stream(self, change: int) -> None:
        with self._streams_changed:
            self.streams += change
            self._streams_changed.notify_all()

    # ---------------------------------------------------------------- REST

    def handle(self, method: str, url: str, body: bytes) -> tuple[int, bytes | Iterator[bytes]]:
        with self.lock:
            self.requests.append((method, url))
            fault = next((f for f in self.faults if f.method in ("*", method) and f.path in url.split("?")[0]), None)
            if fault is not None and (fault.after or fault.once):
                at = self.faults.index(fault)
                if fault.after:  # this one passes
                    self.faults[at], fault = fault._replace(after=fault.after - 1), None
                else:
                    del self.faults[at]
        if fault is not None:
            if fault.carried_out:
                self._answer(method, url, body)
            if fault.status == DROP:
                return DROP, b""
            return _status(fault.status, _REASONS.get(fault.status, "Failure"), fault.message)
        code, answer = self._answer(method, url, body)
        if method in ("POST", "PUT", "PATCH") and code in (200, 201) and isinstance(answer, bytes):
            with self.lock:
                self.written.append(json.loads(answer))
        return code, answer

    def _answer(self, method: str, url: str, body: bytes) -> tuple[int, bytes | Iterator[bytes]]:
        parts = urlsplit(url)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        segs = [unquote(s) for s in parts.path.strip("/").split("/")]
        if segs[0] == "api":
            group, rest = "", segs[2:]
        elif segs[0] == "apis" and len(segs) > 2:
            group, rest = segs[1], segs[3:]
        else:
            return _status(404, "NotFound", "the server could not find the requested resource")
        namespace = None
        if len(rest) >= 3 and rest[0] == "namespaces":
            namespace, rest = rest[1], rest[2:]
        if not rest or (group, rest[0]) not in self.served:
            return _status(404, "NotFound", "the server could not find the requested resource")
        plural, name = rest[0], (rest[1] if len(rest) > 1 else None)
        across = namespace is None and self.served[(group, plural)][1]
        sub = f"{plural}/{rest[2]}" if len(rest) > 2 else plural  # RBAC grants a subresource (pods/log) apart
        if {(group, plural), (group, sub)} & self.forbidden or (self.namespaced_only and across):
            return _forbidden(group, plural, sub, namespace, name, _verb(method, name, query))
        if len(rest) > 2 and rest[2] == "exec" and method == "GET" and self.on_exec is not None:
            with self.lock:
                if ("", "pods", namespace, name) not in self.objects:
                    return _not_found(group, plural, name)
            writes = self.on_exec(namespace, name, parse_qs(parts.query).get("command", []))
            return UPGRADE, writes  # type: ignore[return-value]  # the handler frames them
        with self.lock:
            if len(rest) > 2 and rest[2] == "log" and method == "GET":
                return self._log(namespace, name, query)
            if method == "GET":
                return self._read(group, plural, namespace, name, query)
            if method == "PATCH" and name is not None:
                return self._patch(group, plural, namespace, name, json.loads(body or b"null"))
            if method == "POST" and name is None:
                return self._post(group, plural, namespace, json.loads(body or b"{}"))
            if method == "PUT" and name is not None:
                return self._put(group, plural, namespace, name, json.loads(body or b"{}"))
            if method == "DELETE" and name is not None:
                options = {**query, **json.loads(body or b"{}")}
                return self._delete(group, plural, namespace, name, options)
        return _status(405, "MethodNotAllowed", f"{method} {parts.path} is not supported by the fake")

    def _read(self, group, plural, namespace, name, query) -> tuple[int, bytes]:
        kind = self.served[(group, plural)][0]
        if name is not None:
            obj = self.objects.get((group, plural, namespace or "", name))
            if obj is None:
                return _not_found(group, plural, name)
            return 200, json.dumps(obj).encode()
        items = [o for o in self.items(group, plural, namespace)
                 if _matches(o["metadata"].get("labels") or {}, query.get("labelSelector"))
                 and _fields_match(o, query.get("fieldSelector"))]
        api_version = f"{group}/{self._version(group)}" if group else "v1"
        body = {"kind": f"{kind}List", "apiVersion": api_version, "metadata": {"resourceVersion": "1"},
                "items": items}
        return 200, json.dumps(body).encode()

    def _version(self, group: str) -> str:
        return {"batch": "v1", "kubeflow.org": "v1", "trainer.kubeflow.org": "v1alpha1"}.get(group, "v1")

    def _post(self, group, plural, namespace, obj) -> tuple[int, bytes]:
        namespaced = self.served[(group, plural)][1]
        if namespaced:
            if ("", "namespaces", "", namespace) not in self.objects:
                return _status(404, "NotFound", f'namespaces "{namespace}" not found',
                               {"name": namespace, "kind": "namespaces"})
            if self.objects[("", "namespaces", "", namespace)]["metadata"].get("deletionTimestamp"):
                name = (obj.get("metadata") or {}).get("name", "")  # the NamespaceLifecycle admission plugin
                return _status(403, "Forbidden", f'{plural}{"." + group if group else ""} "{name}" is forbidden: '
                                                 f'unable to create new content in namespace {namespace} because it '
                                                 f'is being terminated', {"name": name, "group": group, "kind": plural})
            obj.setdefault("metadata", {})["namespace"] = namespace
        try:
            return 201, json.dumps(self.create(obj)).encode()
        except KeyError:
            name = obj["metadata"]["name"]
            return _status(409, "AlreadyExists", f'{plural}.{group} "{name}" already exists',
                           {"name": name, "group": group, "kind": plural})

    def _put(self, group, plural, namespace, name, obj) -> tuple[int, bytes]:
        key = (group, plural, namespace or "", name)
        old = self.objects.get(key)
        if old is None:
            return _not_found(group, plural, name)
        meta = obj.setdefault("metadata", {})
        for field in ("uid", "creationTimestamp", "namespace"):
            if field in old["metadata"]:
                meta[field] = old["metadata"][field]
        meta["resourceVersion"] = str(next(self._rv))
        obj.setdefault("status", old.get("status", {}))
        self.objects[key] = obj
        answer = json.dumps(obj).encode()  # as stored: the controllers act after the answer
        self._stop_suspended(obj)
        return 200, answer

    def _patch(self, group, plural, namespace, name, patch) -> tuple[int, bytes]:
        key = (group, plural, namespace or "", name)
        if key not in self.objects:
            return _not_found(group, plural, name)
        try:
            obj = apply_patch(self.objects[key], patch)
        except (KeyError, IndexError, TypeError, ValueError) as err:
            return _status(422, "Invalid", f"the patch cannot be applied: {err}")
        obj["metadata"]["resourceVersion"] = str(next(self._rv))
        self.objects[key] = obj
        answer = json.dumps(obj).encode()
        self._stop_suspended(obj)
        return 200, answer

    def _delete(self, group, plural, namespace, name, options) -> tuple[int, bytes]:
        key = (group, plural, namespace or "", name)
        obj = self.objects.get(key)
        if obj is None:
            return _not_found(group, plural, name)
        meta = obj["metadata"]
        if obj["kind"] == "Namespace":  # Terminating, its content deleted, then gone (the namespace controller)
            meta.setdefault("deletionTimestamp", rfc3339(time.time()))
            obj["status"] = {**(obj.get("status") or {}), "phase": "Terminating"}
            answer = json.dumps(obj).encode()
            self._terminate(name)
            return 200, answer
        if options.get("propagationPolicy") == "Foreground":
            meta["finalizers"] = [*(meta.get("finalizers") or []), "foregroundDeletion"]
        if meta.get("finalizers"):  # marked deleted, kept until its finalizers are removed
            meta.setdefault("deletionTimestamp", rfc3339(time.time()))
        else:
            self._remove(key)
        answer = json.dumps(obj).encode()  # as marked: the controllers act after the answer
        self._protect_claims()  # a claim no pod uses goes; a pod gone may free one deleted before
        return 200, answer

    def _protect_claims(self) -> None:
        """The pvc-protection controller: a claim marked deleted loses its finalizer once no pod that
        has not ended mounts it, and then goes (as does any object marked deleted with no finalizer left)."""
        for key, obj in list(self.objects.items()):
            meta = obj["metadata"]
            if obj["kind"] != "PersistentVolumeClaim" or not meta.get("deletionTimestamp"):
                continue
            if not any((v.get("persistentVolumeClaim") or {}).get("claimName") == key[3]
                       for pod in self.items("", "pods", key[2])
                       if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
                       for v in (pod.get("spec") or {}).get("volumes") or []):
                meta["finalizers"] = [f for f in meta.get("finalizers") or [] if f != PVC_PROTECTION]
            if not meta["finalizers"] and key in self.objects:
                self._remove(key)

    def _log(self, namespace, name, query) -> tuple[int, bytes | Iterator[bytes]]:
        pod = self.objects.get(("", "pods", namespace, name))
        if pod is None:
            return _status(404, "NotFound", f'pods "{name}" not found', {"name": name, "kind": "pods"})
        if pod["status"].get("phase") == "Pending":
            container = pod["spec"]["containers"][0]["name"]
            return _status(400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: '
                                              f'ContainerCreating')
        stamps = _go_bool(query.get("timestamps"))
        lines = self.logs.get((namespace, name), [])
        if _go_bool(query.get("previous")):  # the kubelet keeps the container's instance before this one
            instance = _restarts(pod) - 1
            if instance < 0 or _go_bool(query.get("follow")):
                container = pod["spec"]["containers"][0]["name"]
                return _status(400, "BadRequest", f'previous terminated container "{container}" in pod "{name}" '
                                                  f'not found')
            lines = [x for x in lines if x[4] == instance]
        if "sinceSeconds" in query:
            cutoff = time.time() - int(query["sinceSeconds"])
            lines = [x for x in lines if x[0] >= cutoff]
        if "tailLines" in query:
            lines = lines[-int(query["tailLines"]):] if int(query["tailLines"]) else []

        def render(t: float, text: str, end: str, starts: bool, _instance: int = 0) -> bytes:
            return ((rfc3339(t, nanos=True) + " " if stamps and starts else "") + text + end).encode()

        if not _go_bool(query.get("follow")):
            return 200, b"".join(render(*x) for x in lines)
        # what is there now, taken under the lock: the stream's body runs later, as it is sent
        done, restarts = len(self.logs.get((namespace, name), [])), _restarts(pod)
        return 200, self._follow(namespace, name, list(lines), render, done, restarts, pod["metadata"]["uid"])

    def _follow(self, namespace, name, first, render, done: int, restarts: int, uid: str) -> Iterator[bytes]:
        """As the kubelet streams: until the container exits, which a restart in place (a
        restartCount that grows) is too, and so is its pod's deletion (another pod made under
        its name has a stream of its own); then the client opens a new stream."""
        for x in first:
            yield render(*x)
        for _ in range(10_000):  # bounded: a test whose hook never ends the pod cannot hang
            with self.lock:
                pod = self.objects.get(("", "pods", namespace, name))
                gone = pod is None or pod["metadata"]["uid"] != uid  # (its log went with it)
                lines = [] if gone else self.logs.get((namespace, name), [])
                fresh, done = lines[done:], len(lines)
                finished = gone or pod["status"].get("phase") in ("Succeeded", "Failed") or _restarts(pod) != restarts
            for x in fresh:
                yield render(*x)
            if finished and not fresh:
                return
            if not fresh:
                if self.on_follow_idle is None:
                    return
                yield b""  # idle: the server looks whether its client is still there
                self.on_follow_idle(namespace, name)  # unlocked: the hook may wait for the client

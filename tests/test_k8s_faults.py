"""The Kubernetes backend when the cluster or its API server misbehaves: every fault is one line,
and a submit that fails leaves nothing of the job behind.

Faults come from the shipped fake API server (`FakeCluster.fail`: an error status or a dropped
connection, before or after the request takes effect), from real sockets on 127.0.0.1 that never
answer or answer HTML, and from broken kubeconfig files read by the real `dtrain` command.
"""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from conftest import Dtrain, assert_usage_error  # noqa: E402
from dtrain.backends.base import JobStatus  # noqa: E402
from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig  # noqa: E402
from dtrain.backends.kubernetes.client import Forbidden  # noqa: E402
from dtrain.backends.kubernetes.fake import DROP, FakeCluster, FakeKubeServer  # noqa: E402
from dtrain.errors import BackendError, ConflictError, SpecError  # noqa: E402
from dtrain.spec import JobSpec, parse_pvc  # noqa: E402

from test_k8s_backend import IMAGE, NS, cluster  # noqa: E402,F401  (one fake cluster per test, as there)


@pytest.fixture
def backend(cluster):  # noqa: F811
    server = FakeKubeServer(cluster).start()
    client = server.api_client()
    yield KubernetesBackend(KubernetesConfig(project="lanes", image=IMAGE), api_client=client)
    client.close()
    server.close()


def spec(**kw) -> JobSpec:
    return JobSpec(**{"name": "train", "command": ("python", "train.py"), "project": "lanes", **kw})


def _left(cluster: FakeCluster) -> list[str]:
    """Every object in the project's namespace (the namespace itself is not in it)."""
    return sorted(f"{kind}/{name}" for (_, kind, ns, name) in cluster.objects if ns == NS)


def _client_at(port: int, *, timeout: float = 90.0) -> KubernetesBackend:
    from kubernetes import client

    config = client.Configuration(host=f"http://127.0.0.1:{port}")
    config.proxy = None
    config.retries = 0
    return KubernetesBackend(KubernetesConfig(project="lanes", image=IMAGE, request_timeout=timeout),
                             api_client=client.ApiClient(config))


# ------------------------------------------------------------------------- no answer, a wrong answer


@pytest.mark.timeout(60)
def test_an_api_server_that_never_answers_times_out_in_one_line():
    """A server that accepts and stays silent (a dead port-forward, a black-holed load balancer)
    used to hang every verb for good: the client set no timeout."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    held: list[socket.socket] = []
    threading.Thread(target=lambda: [held.append(listener.accept()[0]) for _ in range(8)], daemon=True).start()
    backend = _client_at(listener.getsockname()[1], timeout=0.5)
    try:
        for verb in (backend.list, backend.list_volumes, lambda: backend.get("train")):
            with pytest.raises(BackendError, match=r"did not answer within 0\.5s to .*raise request_timeout") as err:
                verb()
            assert "\n" not in str(err.value)
    finally:
        for conn in held:
            conn.close()
        listener.close()


def test_a_server_that_is_not_kubernetes_is_named_in_one_line():
    """A kubeconfig pointing at a web server (a proxy's login page) used to end in a JSONDecodeError."""

    class Html(BaseHTTPRequestHandler):
        def do_GET(self):
            body = b"<html><body>\n<h1>Welcome to nginx!</h1>\n</body></html>"
            self.send_response(200)
            self.send_header("Content-Type", "text/html")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Html)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        backend = _client_at(server.server_address[1])
        for verb in (backend.list, backend.list_volumes, lambda: backend.submit(spec())):
            with pytest.raises(BackendError, match="is not a Kubernetes API server.*Welcome to nginx") as err:
                verb()
            assert "\n" not in str(err.value)
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("status", [500, 503, 429])
def test_an_overloaded_api_server_says_to_retry(backend, cluster, status):
    cluster.fail("GET", "/pytorchjobs", status)
    with pytest.raises(BackendError, match=f"HTTP {status} .*retry in a minute") as err:
        backend.list()
    assert "\n" not in str(err.value)


def test_a_dropped_connection_is_one_line_for_every_verb(backend, cluster):
    backend.submit(spec(launcher="torchrun", processes=2))
    backend.create_volume("data", size="1Gi")
    cluster.fail("*", "", DROP)
    verbs = {"get": lambda: backend.get("train"), "list": backend.list, "delete": lambda: backend.delete("train"),
             "logs": lambda: list(backend.logs("train")), "volume list": backend.list_volumes,
             "volume delete": lambda: backend.delete_volume("data"),
             "snapshot": lambda: backend.create_snapshot("data"),
             "restore": lambda: backend.restore_snapshot("s1", to="r1"), "nodes": backend.nodes}
    for verb, call in verbs.items():
        with pytest.raises(BackendError, match="cannot reach the Kubernetes API") as err:
            call()
        assert "\n" not in str(err.value), verb


# ------------------------------------------------------------------------- submit leaves nothing behind


def test_a_job_created_despite_a_lost_answer_is_rolled_back(backend, cluster):
    """The PyTorchJob was stored but its answer was lost: the old rollback removed the job's new
    volume and left the job, whose pods then waited forever for that volume."""
    cluster.fail("POST", "/pytorchjobs", DROP, carried_out=True)
    with pytest.raises(BackendError, match="cannot reach the Kubernetes API"):
        backend.submit(spec(launcher="torchrun", processes=2, volumes=(parse_pvc("fast:1Gi:/mnt"),)))
    assert _left(cluster) == []
    cluster.faults.clear()
    assert backend.submit(spec(launcher="torchrun", processes=2)).name == "train"  # the name is free again


def test_a_job_created_despite_a_5xx_is_rolled_back(backend, cluster):
    cluster.fail("POST", "/mpijobs", 504, "the server was unable to return a response in the time allotted",
                 carried_out=True)
    with pytest.raises(BackendError, match="HTTP 504"):
        backend.submit(spec(launcher="mpi", processes=2))
    assert _left(cluster) == []


def test_a_refused_job_leaves_another_jobs_object_alone(backend, cluster):
    """Only a create with no clear answer is read back; a job of the same name made by someone else
    meanwhile (the 409) is not deleted."""
    cluster.fail("POST", "/pytorchjobs", 409, 'pytorchjobs.kubeflow.org "train" already exists')
    with pytest.raises(ConflictError):
        backend.submit(spec(launcher="torchrun", processes=2, volumes=(parse_pvc("fast:1Gi:/mnt"),)))
    assert _left(cluster) == []


def test_a_leftover_mpi_master_service_is_refused_before_anything_is_made(backend, cluster):
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cluster.create({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "train-mpi-master", "namespace": NS},
                    "spec": {"clusterIP": "None"}})
    with pytest.raises(ConflictError, match=f"kubectl delete service train-mpi-master -n {NS}"):
        backend.submit(spec(launcher="mpi", processes=2))
    assert not [path for method, path in cluster.requests if method == "POST"]


# ------------------------------------------------------------------------- logs, snapshots


def _running_pods(backend, cluster, processes: int) -> list[str]:
    backend.submit(spec(launcher="torchrun", processes=processes) if processes > 1 else spec())
    pods = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    for pod in pods:
        cluster.append_log(NS, pod, f"hello from {pod}")

    def api_server_restarts(namespace: str, pod: str) -> None:
        raise ConnectionResetError("the API server restarted")

    cluster.on_follow_idle = api_server_restarts
    return pods


@pytest.mark.timeout(60)
@pytest.mark.parametrize("processes", [1, 2])
def test_a_log_stream_that_breaks_off_is_one_line(backend, cluster, processes):
    """One pod: the stream's urllib3 ProtocolError was a traceback. Several pods: the reader
    thread died with a traceback and `logs -f` ended as if the job had stopped writing."""
    pods = _running_pods(backend, cluster, processes)
    lines = []
    with pytest.raises(BackendError, match="log stream of pod .* broke off.*follow the logs again") as err:
        for line in backend.logs("train", follow=True):
            lines.append(line.text)
    assert "\n" not in str(err.value)
    assert set(lines) <= {f"hello from {pod}" for pod in pods}  # what came before the break was shown
    if processes == 1:
        assert lines == [f"hello from {pods[0]}"]


def test_restoring_a_failed_snapshot_is_refused(backend, cluster):
    """A PVC whose dataSource is a snapshot the controller could not take stays Pending for good."""
    backend.create_volume("data", size="1Gi")
    cluster.bind_volumes()
    backend.create_snapshot("data", name="s1")
    snap = cluster.get("snapshot.storage.k8s.io", "volumesnapshots", NS, "s1")
    snap["status"] = {"readyToUse": False, "error": {"time": "2026-01-01T00:00:00Z", "message":
                                                     "Failed to create snapshot: rpc error: code = Internal"}}
    with pytest.raises(ConflictError, match="s1.*reports an error .*code = Internal.*take a new one"):
        backend.restore_snapshot("s1", to="restored")
    assert cluster.objects.get(("", "persistentvolumeclaims", NS, "restored")) is None
    cluster.ready_snapshots()  # the controller's retry succeeded: the error no longer blocks
    assert backend.restore_snapshot("s1", to="restored").name == "restored"


# ------------------------------------------------------------------------- what pods say


def _set_container(cluster: FakeCluster, pod: str, state: dict, **status) -> None:
    stored = cluster.get("", "pods", NS, pod)
    stored["status"]["containerStatuses"][0]["state"] = state
    stored["status"].update(status)


def test_a_failed_job_says_why_its_pod_failed(backend, cluster):
    """The operator's condition says only that a replica failed; describe used to stop there."""
    backend.submit(spec(memory="1Gi"))
    pod = cluster.run_pods(NS, "train")[0]["metadata"]["name"]
    _set_container(cluster, pod, {"terminated": {"exitCode": 137, "reason": "OOMKilled"}}, phase="Failed")
    cluster.transition(NS, "train", "Failed", reason="BackoffLimitExceeded", message="Job has reached the limit")
    info = backend.get("train")
    assert info.status is JobStatus.FAILED
    assert info.message == f"BackoffLimitExceeded: Job has reached the limit; pod {pod}: OOMKilled (exit code 137)"


def test_a_container_killed_before_its_restart_in_place_is_named(backend, cluster):
    """restartPolicy OnFailure (--max-restarts): the pod stays, the kill is in lastState."""
    backend.submit(spec(launcher="torchrun", processes=2, max_restarts=1))
    cluster.run_pods(NS, "train")
    stored = cluster.get("", "pods", NS, "train-master-0")["status"]["containerStatuses"][0]
    stored.update(restartCount=1, state={"waiting": {"reason": "CrashLoopBackOff"}},
                  lastState={"terminated": {"exitCode": 137, "reason": "OOMKilled"}})
    cluster.transition(NS, "train", "Failed", reason="PyTorchJobFailed")
    assert backend.get("train").message == "PyTorchJobFailed; pod train-master-0: OOMKilled (exit code 137)"


def test_an_evicted_replica_is_named_in_the_failure(backend, cluster):
    backend.submit(spec(launcher="torchrun", processes=2))
    cluster.run_pods(NS, "train")
    _set_container(cluster, "train-worker-0", {"terminated": {"exitCode": 137, "reason": "Error"}}, phase="Failed",
                   reason="Evicted", message="The node was low on resource: memory.")
    cluster.transition(NS, "train", "Failed", reason="PyTorchJobFailed", message="1 Worker replica(s) failed")
    message = backend.get("train").message
    assert message.endswith("pod train-worker-0: Evicted: The node was low on resource: memory.")


def test_a_running_job_names_a_replica_that_cannot_start(backend, cluster):
    """The master runs and the operator says Running; a worker's image pull fails for good."""
    backend.submit(spec(launcher="torchrun", processes=2))
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Running", reason="PyTorchJobRunning")
    _set_container(cluster, "train-worker-0", {"waiting": {"reason": "ImagePullBackOff",
                                                           "message": 'Back-off pulling image "ghcr.io/x:1"'}},
                   phase="Pending")
    info = backend.get("train")
    assert info.status is JobStatus.RUNNING
    assert info.message == 'PyTorchJobRunning; ImagePullBackOff: Back-off pulling image "ghcr.io/x:1"'


@pytest.mark.timeout(60)
def test_following_a_pod_that_cannot_pull_its_image_ends_in_one_line(backend, cluster):
    """`logs -f` (and a pipeline step, which follows the logs before it waits) used to poll a
    pod in ImagePullBackOff for good: the job stays Pending while the kubelet retries."""
    backend.poll_interval = 0.01
    backend.submit(spec())
    pod = cluster.run_pods(NS, "train", phase="Pending")[0]["metadata"]["name"]
    _set_container(cluster, pod, {"waiting": {"reason": "ImagePullBackOff", "message": "Back-off pulling image"}})
    with pytest.raises(BackendError, match=f"pod {pod} of job 'train' cannot start \\(ImagePullBackOff") as err:
        list(backend.logs("train", follow=True))
    assert "\n" not in str(err.value)


@pytest.mark.timeout(60)
def test_following_a_pod_that_is_only_starting_waits_for_it(backend, cluster):
    """ContainerCreating is on its way: `logs -f` waits, then streams."""
    backend.poll_interval = 0.01
    backend.submit(spec())
    pod = cluster.run_pods(NS, "train", phase="Pending")[0]["metadata"]["name"]

    def kubelet() -> None:  # starts the container once the client has asked for its log
        while not any(method == "GET" and "/log" in path for method, path in list(cluster.requests)):
            threading.Event().wait(0.005)
        cluster.set_pod_phase(NS, pod, "Running")
        cluster.append_log(NS, pod, "done")
        cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)

    started = threading.Thread(target=kubelet, daemon=True)
    started.start()
    assert [line.text for line in backend.logs("train", follow=True)] == ["done"]
    started.join()


# ------------------------------------------------------------------------- exec


def _running_job(backend, cluster) -> None:
    backend.submit(spec(launcher="torchrun", processes=2))
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Running")


def test_exec_refused_by_rbac_says_which_permission(backend, cluster):
    """The websocket client reports a refused upgrade as 'HTTP 0' with every header and the body."""
    _running_job(backend, cluster)
    cluster.fail("GET", "/exec", 403)
    with pytest.raises(Forbidden, match=f"refused it \\(Handshake status 403 Forbidden\\); .*"
                                        f"kubectl auth can-i create pods/exec -n {NS}\\)$"):
        backend.exec("train", ["ls"])


def test_exec_through_a_server_without_websockets_is_one_short_line(backend, cluster):
    _running_job(backend, cluster)  # the fake answers the upgrade with the pod itself, as a proxy might
    with pytest.raises(BackendError, match="Handshake status 200 OK; check that .* lets websockets through") as err:
        backend.exec("train", ["ls"])
    assert "\n" not in str(err.value) and "HTTP 0" not in str(err.value) and "containerStatuses" not in str(err.value)


# ------------------------------------------------------------------------- numbers forwarded to the cluster


@pytest.mark.parametrize("field, value", [
    ("master_port", 70000), ("master_port", 0), ("ttl_seconds_after_finished", True),
    ("ttl_seconds_after_finished", 2**31), ("elastic_min_replicas", 2**31), ("gpus_per_node", 2**40),
    ("request_timeout", 0), ("request_timeout", float("nan")), ("request_timeout", 1e9), ("request_timeout", "90"),
])
def test_config_numbers_the_api_server_would_refuse_are_refused_here(field, value):
    with pytest.raises(SpecError, match=f"invalid Kubernetes {field}"):
        KubernetesConfig(**{field: value})


# ------------------------------------------------------------------------- kubeconfig, through the CLI

_EXEC_PLUGIN = """apiVersion: v1
kind: Config
current-context: eks
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {exec: {apiVersion: client.authentication.k8s.io/v1beta1,
                                command: dtrain-no-such-aws, args: [eks, get-token]}}}]
contexts: [{name: eks, context: {cluster: c, user: u}}]
"""


@pytest.mark.parametrize("text, needles", [
    ("apiVersion: v1\nclusters: [\n  {name: c", ("kubeconfig is not valid YAML", "at line 3")),  # was a traceback
    ("- just\n- a list\n", ("kubeconfig is not a kubeconfig: it must be a YAML mapping",)),  # was a traceback
    (None, ("no kubeconfig at", "kubeconfig)")),
    # was the client's 'ERROR:root:' line, urllib3's retry warnings, then a refused connection
    (_EXEC_PLUGIN, ("credential plugin (users[].user.exec) failed", "dtrain-no-such-aws")),
])
def test_a_broken_kubeconfig_is_one_line(home, tmp_path, text, needles):
    kubeconfig = tmp_path / "kubeconfig"
    if text is not None:
        kubeconfig.write_text(text)
    (home / "config.yaml").write_text(json.dumps({"backend": "kubernetes",
                                                 "kubernetes": {"kubeconfig": str(kubeconfig)}}))
    assert_usage_error(Dtrain(home)("volume", "list", check=False), *needles)


def test_a_context_the_kubeconfig_has_not_names_the_setting_and_its_contexts(home, tmp_path):
    """Reproduced: `dtrain config kubernetes --context prod` (a typo, or another machine's) gave the
    client's 'Invalid kube-config file. Expected object with name prod in .../contexts list' and the
    fix 'fix that file', where the file is fine and config.yaml's context is what to change."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(_EXEC_PLUGIN)
    (home / "config.yaml").write_text(json.dumps({"backend": "kubernetes", "kubernetes": {
        "kubeconfig": str(kubeconfig), "context": "prod"}}))
    proc = Dtrain(home)("volume", "list", check=False)
    assert_usage_error(proc)
    assert proc.stderr.strip() == (
        f"dtrain: error: no usable Kubernetes configuration (context 'prod', config.yaml's kubernetes.context, is "
        f"not in {kubeconfig}): choose one of its contexts with 'dtrain config kubernetes --context NAME' (it has "
        f"eks), or its current-context with 'dtrain config kubernetes --unset context'")

"""The Kubernetes backend's leftovers of a third audit: `logs -f` of several pods that read ahead
without bound and kept its connections after the caller left, and `project list` / `nodes` for an
account that may read the Kubeflow jobs but not pods.

Every test drives the official `kubernetes` client against the shipped fake API server.
"""

from __future__ import annotations

import json
import threading
import time
from typing import TYPE_CHECKING

import pytest

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from conftest import Dtrain  # noqa: E402
from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig  # noqa: E402
from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer  # noqa: E402

if TYPE_CHECKING:
    from dtrain.backends.kubernetes.logs import ReadAhead

from test_k8s_backend import IMAGE, NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)

WAIT = 30.0  # seconds a test waits for a state before it fails (never reached when the code is right)


class Watched(KubernetesBackend):
    """The backend, keeping each multi-pod follow's read-ahead so that a test can look at it."""

    read_ahead = 4

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.backlogs: list[ReadAhead] = []

    def _read_ahead(self) -> ReadAhead:  # the factory the backend's follow calls
        backlog = super()._read_ahead()
        self.backlogs.append(backlog)
        return backlog


@pytest.fixture
def watched(cluster):
    server = FakeKubeServer(cluster).start()
    client = server.api_client()
    yield Watched(KubernetesConfig(project="lanes", image=IMAGE), api_client=client)
    client.close()
    server.close()


def _two_pods(backend, cluster: FakeCluster, lines: int) -> list[str]:
    backend.submit(spec(launcher="torchrun", processes=2))
    pods = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    for step in range(lines):
        for pod in pods:
            cluster.append_log(NS, pod, f"{pod} step {step}")
    return pods


def _readers(pods: list[str], before: set[threading.Thread]) -> list[threading.Thread]:
    """The reader threads of these pods started since `before` (an earlier test's may still run)."""
    return [t for t in threading.enumerate() if t.name in {f"logs-{pod}" for pod in pods} and t not in before]


# ------------------------------------------------------------------------- logs -f: bounded, and ends


@pytest.mark.timeout(120)
def test_following_several_pods_reads_ahead_a_bounded_number_of_lines(watched, cluster):
    """`dtrain logs -f` of a two-pod job, its reader stalled (a CLI writing to a slow pipe): each
    pod's reader thread put every line into a queue without a bound, so memory grew with the log."""
    pods = _two_pods(watched, cluster, 300)
    for pod in pods:
        cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)
    before = set(threading.enumerate())
    lines = watched.logs("train", follow=True)
    got = [next(lines)]  # then the caller stalls
    assert len(watched.backlogs) == 1
    backlog = watched.backlogs[0]
    # Both readers wait for room: nothing more is read off the streams until the caller reads.
    # (Both at once, on a full backlog: `waiting` alone can read 2 for a moment after the caller's
    # first get() made room, before the reader it woke takes that room: then 3 are held.)
    assert backlog.wait_for(lambda b: b.waiting == 2 and b.held == 4, WAIT)
    time.sleep(0.2)
    assert (backlog.waiting, backlog.held) == (2, 4)  # and stays: 4 held + a line per waiting reader, not 599
    got += list(lines)  # the caller reads on: every line comes, each pod's in its order
    assert len(got) == 600
    for pod in pods:
        assert [x.text for x in got if x.text.startswith(pod)] == [f"{pod} step {i}" for i in range(300)]
    for reader in _readers(pods, before):
        reader.join(WAIT)
        assert not reader.is_alive()


@pytest.mark.timeout(120)
def test_closing_a_follow_of_silent_pods_ends_its_readers_and_connections(backend, cluster):
    """The caller leaves while the pods compute and write nothing: the reader threads stayed blocked
    on their sockets, the API server's streams open, until each pod's next line or its end."""
    pods = _two_pods(backend, cluster, 1)
    job_ended = threading.Event()
    cluster.on_follow_idle = lambda namespace, pod: job_ended.wait(0.01)  # silent, and still running
    before = set(threading.enumerate())
    lines = backend.logs("train", follow=True)
    assert next(lines).text.endswith("step 0")
    readers = _readers(pods, before)
    assert len(readers) == 2
    lines.close()
    try:
        for reader in readers:
            reader.join(WAIT)
        assert not any(reader.is_alive() for reader in readers)
        assert cluster.wait_streams(lambda n: n == 0, WAIT)  # the server saw both connections end
    finally:
        job_ended.set()
        for pod in pods:
            cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)


@pytest.mark.timeout(120)
def test_a_follow_whose_caller_stalls_then_leaves_ends_its_waiting_readers(watched, cluster):
    """A stalled caller that then leaves: readers waiting for room must not wait for good."""
    pods = _two_pods(watched, cluster, 50)
    before = set(threading.enumerate())
    lines = watched.logs("train", follow=True)
    next(lines)
    backlog = watched.backlogs[0]
    assert backlog.wait_for(lambda b: b.waiting == 2, WAIT)
    lines.close()
    assert backlog.held == 0
    for reader in _readers(pods, before):
        reader.join(WAIT)
        assert not reader.is_alive()
    assert cluster.wait_streams(lambda n: n == 0, WAIT)


def test_a_read_ahead_gives_what_was_put_in_order_and_refuses_after_close():
    from dtrain.backends.kubernetes.logs import ReadAhead

    backlog = ReadAhead(2)
    assert backlog.put("a") and backlog.put("b")
    assert backlog.held == 2 and [backlog.get(), backlog.get()] == ["a", "b"]
    backlog.close()
    assert backlog.put("c") is False and backlog.held == 0
    with pytest.raises(ValueError, match="holds nothing"):
        ReadAhead(0)


# ------------------------------------------------------------------------- project list and nodes without pods


def _cli(home, tmp_path, server: FakeKubeServer) -> Dtrain:
    kubeconfig = tmp_path / "kubeconfig"
    server.write_kubeconfig(kubeconfig)
    (home / "config.yaml").write_text(json.dumps({"backend": "kubernetes", "project": "lanes", "kubernetes": {
        "kubeconfig": str(kubeconfig), "image": IMAGE}}))
    return Dtrain(home)


def _running_job(backend, cluster: FakeCluster) -> None:
    """lanes: GPU quota 4, a two-pod PyTorchJob of 1 GPU a pod running on gpu-1."""
    cluster.add_node("gpu-1", gpus=8)
    backend.create_project("lanes", gpu_quota=4)
    backend.submit(spec(launcher="torchrun", processes=2, gpu=1))
    cluster.run_pods(NS, "train", nodes=("gpu-1",))
    cluster.transition(NS, "train", "Running")


def _kubeflow_rights_only(cluster: FakeCluster) -> None:
    """An account whose RBAC grants the Kubeflow jobs and nodes: no pods, quotas, namespaces, Jobs."""
    cluster.forbidden |= {("", "pods"), ("", "resourcequotas"), ("", "namespaces"), ("batch", "jobs"),
                          ("trainer.kubeflow.org", "trainjobs"), ("kubeflow.org", "notebooks")}


def test_project_list_of_an_account_that_may_not_read_pods_counts_from_the_jobs(backend, cluster):
    """`dtrain project list` failed with a Forbidden line for an account that may list the jobs
    (`dtrain list` works) but not pods."""
    _running_job(backend, cluster)
    assert [(p.gpu_quota, p.gpus_allocated, p.jobs) for p in backend.list_projects()] == [(4, 2, 1)]
    cluster.forbidden.add(("", "pods"))
    [lanes] = backend.list_projects()
    assert (lanes.name, lanes.gpu_quota, lanes.gpus_allocated, lanes.jobs) == ("lanes", 4, 2, 1)
    assert lanes.extra["unknown"].startswith("GPUs allocated counted from the running jobs' requests: "
                                             "cannot list Pods in namespace dtrain-lanes")
    _kubeflow_rights_only(cluster)  # nor quotas, nor namespaces: the project it is set up for
    [lanes] = backend.list_projects()
    assert (lanes.name, lanes.gpu_quota, lanes.gpus_allocated, lanes.jobs) == ("lanes", None, 2, 1)
    assert lanes.extra["unknown"].startswith("GPU quota unknown: cannot read ResourceQuota")
    cluster.transition(NS, "train", "Succeeded")
    assert backend.list_projects()[0].gpus_allocated == 0


@pytest.mark.slow
def test_project_list_and_nodes_without_pods_through_the_cli_warn_in_one_line(home, tmp_path, backend, cluster):
    _running_job(backend, cluster)
    _kubeflow_rights_only(cluster)
    with FakeKubeServer(cluster) as server:
        dt = _cli(home, tmp_path, server)
        projects = dt("project", "list")
        nodes = dt("nodes")
    assert projects.stdout.splitlines()[1].split() == ["lanes", "(default)", "-", "2", "1"]
    quota, gpus = projects.stderr.splitlines()  # one line a notice: quota-unknown, gpus-unknown
    assert quota.startswith("dtrain: warning: project lanes: GPU quota unknown: cannot read ResourceQuota")
    assert gpus.startswith("dtrain: warning: project lanes: GPUs allocated counted from the running jobs' requests")
    assert nodes.stdout.splitlines()[1].split()[:3] == ["gpu-1", "8", "0"]
    [warning] = nodes.stderr.splitlines()
    assert warning.startswith("dtrain: warning: GPUs allocated unknown (shown as 0): cannot list Pods")


def test_nodes_of_an_account_that_may_read_pods_only_in_its_namespaces(backend, cluster):
    """`dtrain nodes` failed for an account that may list pods in its projects' namespaces only:
    the GPUs of those pods are counted, the other tenants' are not (said on stderr)."""
    _running_job(backend, cluster)
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "theirs", "namespace": "other"},
                    "spec": {"nodeName": "gpu-1", "containers": [
                        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                    "status": {"phase": "Running"}})
    assert [(n.name, n.gpus_allocated) for n in backend.nodes()] == [("gpu-1", 3)]
    cluster.fail("GET", "/api/v1/pods", 403)  # pods across all namespaces only
    assert [(n.name, n.gpus_allocated) for n in backend.nodes()] == [("gpu-1", 2)]
    cluster.forbidden.add(("", "pods"))
    assert [(n.name, n.gpus_allocatable, n.gpus_allocated) for n in backend.nodes()] == [("gpu-1", 8, 0)]


def test_gpus_of_a_pod_bound_to_a_node_count_while_it_starts(backend, cluster):
    """A pod the scheduler bound to a node holds its GPUs while it pulls its image (minutes for a
    training image): `nodes` and `project list` showed them free, though `list` counted them."""
    _running_job(backend, cluster)
    for pod in ("train-master-0", "train-worker-0"):
        cluster.set_pod_phase(NS, pod, "Pending")
    assert backend.get("train").gpus_allocated == 2
    assert [(n.name, n.gpus_allocated) for n in backend.nodes()] == [("gpu-1", 2)]
    assert backend.list_projects()[0].gpus_allocated == 2
    for pod in ("train-master-0", "train-worker-0"):
        cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)  # ended pods hold nothing
    assert [(n.name, n.gpus_allocated) for n in backend.nodes()] == [("gpu-1", 0)]
    assert backend.list_projects()[0].gpus_allocated == 0


# ------------------------------------------------------------------------- logs -f across a restart in place


@pytest.mark.timeout(120)
@pytest.mark.parametrize("processes", [1, 2])
def test_following_a_job_whose_container_restarts_goes_on_with_the_next_attempt(make_backend, cluster, processes):
    """--max-restarts on a PyTorchJob restarts a failed container in its pod (restartPolicy
    OnFailure), and the kubelet ends the log stream as the container exits: `logs -f` ended there,
    exit 0, while the job ran on, and the lines of the next attempt were never shown."""
    backend = make_backend()
    backend.poll_interval = 0.01
    backend.submit(spec(launcher="torchrun", processes=processes, max_restarts=2))
    pods = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    cluster.transition(NS, "train", "Running")
    for pod in pods:
        cluster.append_log(NS, pod, f"{pod} attempt 1")
    master = pods[0]
    calls = {pod: 0 for pod in pods}

    def training(namespace: str, pod: str) -> None:  # the master's container fails once, then all succeed
        calls[pod] += 1
        if pod != master:
            if cluster.logs[(NS, master)][-1][1].endswith("attempt 2"):
                cluster.set_pod_phase(namespace, pod, "Succeeded", exit_code=0)
            threading.Event().wait(0.005)
        elif calls[pod] == 1:  # the container exits and restarts in place: the kubelet ends this stream
            cluster.set_pod_phase(namespace, pod, "Running", restart_count=1)
            cluster.transition(NS, "train", "Restarting")
            cluster.transition(NS, "train", "Running")
        elif calls[pod] == 2:  # idle in a stream opened after the restart
            cluster.append_log(namespace, pod, f"{pod} attempt 2")
        else:
            cluster.set_pod_phase(namespace, pod, "Succeeded", exit_code=0)

    cluster.on_follow_idle = training
    got = [x.text for x in backend.logs("train", follow=True)]
    assert sorted(got) == sorted([f"{pod} attempt 1" for pod in pods] + [f"{master} attempt 2"])  # none twice
    assert got.index(f"{master} attempt 1") < got.index(f"{master} attempt 2")


@pytest.mark.timeout(120)
def test_following_a_pod_whose_stream_ends_while_it_runs_goes_on(make_backend, cluster):
    """The kubelet ends a log stream that stayed idle for its streaming timeout (4 h by default),
    the pod still computing: `logs -f` ended, exit 0, and the job's later lines were not shown."""
    backend = make_backend()
    backend.poll_interval = 0.01
    backend.submit(spec())
    [pod] = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    cluster.append_log(NS, pod, "epoch 1")  # the fake ends an idle stream at once (no on_follow_idle)

    def log_reads() -> int:
        return sum(method == "GET" and f"/pods/{pod}/log" in path for method, path in list(cluster.requests))

    def training() -> None:  # writes on once the first stream has ended and another is open
        while log_reads() < 3:
            threading.Event().wait(0.005)
        cluster.append_log(NS, pod, "epoch 2")
        while log_reads() < 5:
            threading.Event().wait(0.005)
        cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)

    writer = threading.Thread(target=training, daemon=True)
    writer.start()
    assert [x.text for x in backend.logs("train", follow=True)] == ["epoch 1", "epoch 2"]
    writer.join()

"""KubernetesBackend driving the official `kubernetes` client against an in-memory API server.

The fake (dtrain.backends.kubernetes.fake) listens on 127.0.0.1 and speaks HTTP/1.1, so the real
CoreV1Api/BatchV1Api/CustomObjectsApi code, ApiClient and urllib3 run on every call, and log
streams arrive chunk by chunk as from a real API server. Tests replay what the operators and
controllers would do (pods appear, conditions change, snapshots become ready) step by step.
"""

from __future__ import annotations

import threading
import time

import pytest

from dtrain.backends.base import JobStatus, ProjectInfo, TimeoutError_
from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
from dtrain.backends.kubernetes.client import Forbidden
from dtrain.backends.kubernetes.fake import CRDS, FakeCluster, FakeKubeServer
from dtrain.errors import BackendError, ConflictError, NotFoundError, SpecError
from dtrain.spec import JobSpec, parse_pvc

NS = "dtrain-lanes"
IMAGE = "ghcr.io/example/lanes:1"


@pytest.fixture
def cluster():
    return FakeCluster()


@pytest.fixture
def make_backend(cluster):
    servers, clients = [], []

    def make(config: KubernetesConfig | None = None, fake: FakeCluster | None = None) -> KubernetesBackend:
        server = FakeKubeServer(fake or cluster).start()
        client = server.api_client()
        servers.append(server)
        clients.append(client)
        config = config or KubernetesConfig(project="lanes", image=IMAGE, notebook_image=IMAGE)
        return KubernetesBackend(config, api_client=client)

    yield make
    for client in clients:
        client.close()
    for server in servers:
        server.close()


@pytest.fixture
def backend(make_backend):
    return make_backend()


def spec(**kw) -> JobSpec:
    return JobSpec(**{"name": "train", "command": ("python", "train.py"), "project": "lanes", **kw})


def posts(cluster: FakeCluster) -> list[str]:
    return [path.split("?")[0] for method, path in cluster.requests if method == "POST"]


def pod_names(cluster: FakeCluster) -> list[str]:
    return sorted(p["metadata"]["name"] for p in cluster.items("", "pods", NS))


# ------------------------------------------------------------------------- submit


def test_submit_creates_namespace_then_volumes_then_the_job(backend, cluster):
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                    "metadata": {"name": "tusimple", "namespace": NS},
                    "spec": {"resources": {"requests": {"storage": "5Gi"}}, "accessModes": ["ReadWriteMany"]}})
    info = backend.submit(spec(launcher="torchrun", processes=2, volumes=(parse_pvc("tusimple:/data:ro"),
                                                                          parse_pvc("fast:1Gi:/mnt"))))
    assert info.status is JobStatus.PENDING and info.backend == "kubernetes" and info.extra["kind"] == "PyTorchJob"
    assert posts(cluster) == [f"/api/v1/namespaces/{NS}/persistentvolumeclaims",
                              f"/apis/kubeflow.org/v1/namespaces/{NS}/pytorchjobs"]
    job = cluster.get("kubeflow.org", "pytorchjobs", NS, "train")
    assert job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] == 1
    assert cluster.get("", "persistentvolumeclaims", NS, "pvc-train-0")["spec"]["storageClassName"] == "fast"
    assert backend.get("train").spec == info.spec == spec(launcher="torchrun", processes=2, volumes=(
        parse_pvc("tusimple:/data:ro"), parse_pvc("fast:1Gi:/mnt")))


def test_submit_creates_the_project_namespace(backend, cluster):
    backend.submit(spec())
    ns = cluster.get("", "namespaces", "", NS)
    assert ns["metadata"]["labels"]["dtrain.io/project"] == "lanes"
    assert posts(cluster)[0] == "/api/v1/namespaces"


def test_submit_refuses_a_taken_name_without_creating_anything(backend, cluster):
    backend.submit(spec(launcher="mpi", processes=2))
    before = len(posts(cluster))
    with pytest.raises(ConflictError, match="job 'train' already exists"):
        backend.submit(spec(volumes=(parse_pvc("fast:1Gi:/mnt"),)))
    assert len(posts(cluster)) == before


def test_submit_refuses_a_missing_volume(backend, cluster):
    with pytest.raises(NotFoundError, match="volume 'tusimple' not found"):
        backend.submit(spec(volumes=(parse_pvc("fast:1Gi:/out"), parse_pvc("tusimple:/data"))))
    assert cluster.items("", "persistentvolumeclaims") == [] and cluster.items("batch", "jobs") == []


def test_submit_without_the_training_operator_says_how_to_install_it(make_backend):
    bare = FakeCluster(crds={})
    backend = make_backend(fake=bare)
    with pytest.raises(BackendError, match="Training Operator") as err:
        backend.submit(spec(launcher="torchrun", processes=2, volumes=(parse_pvc("fast:1Gi:/mnt"),)))
    assert "kubectl apply --server-side -k" in str(err.value)
    assert bare.items("", "persistentvolumeclaims") == []  # the PVC made for the job was rolled back


def test_submit_forbidden_custom_resource_mentions_the_operator(make_backend, cluster):
    cluster.forbidden.add(("kubeflow.org", "mpijobs"))
    with pytest.raises(Forbidden, match="Training Operator"):
        make_backend().submit(spec(launcher="mpi", processes=2))


def test_submit_requires_an_image(make_backend):
    with pytest.raises(SpecError, match="--image"):
        make_backend(KubernetesConfig(project="lanes")).submit(spec())


def test_unreachable_cluster_is_a_backend_error():
    from kubernetes import client

    config = client.Configuration(host="http://127.0.0.1:9")  # discard port: nothing listens
    config.retries = 0
    config.proxy = None
    backend = KubernetesBackend(KubernetesConfig(project="lanes", image=IMAGE), api_client=client.ApiClient(config))
    with pytest.raises(BackendError, match="cannot reach the Kubernetes API"):
        backend.list()


# ------------------------------------------------------------------------- status


def test_pytorchjob_created_running_succeeded(backend, cluster):
    backend.submit(spec(launcher="torchrun", processes=3, gpu=1))
    cluster.transition(NS, "train", "Created")
    assert backend.get("train").status is JobStatus.PENDING
    cluster.run_pods(NS, "train", phase="Pending")
    info = backend.get("train")
    assert info.status is JobStatus.PENDING and info.processes_pending == 3
    for pod in pod_names(cluster):
        cluster.set_pod_phase(NS, pod, "Running")
    cluster.transition(NS, "train", "Running")
    info = backend.get("train")
    assert info.status is JobStatus.RUNNING and info.processes_running == 3 and info.gpus_allocated == 3
    assert [p.rank for p in info.processes] == [0, 1, 2] and info.node == "node-1"
    for pod in pod_names(cluster):
        cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)
    cluster.transition(NS, "train", "Succeeded", reason="PyTorchJobSucceeded")
    info = backend.wait("train", timeout=5, poll=0.01)
    assert info.status is JobStatus.SUCCEEDED and info.finished is not None and info.gpus_allocated == 0
    assert [e.status for e in info.events] == ["Pending", "Running", "Succeeded"]
    assert all(p.exit_code == 0 and p.status == "Succeeded" for p in info.processes)


def test_pytorchjob_running_restarting_running_failed(backend, cluster):
    backend.submit(spec(launcher="torchrun", processes=2, max_restarts=1))
    cluster.run_pods(NS, "train")
    seen = []
    for ctype in ("Running", "Restarting", "Running", "Failed"):
        cluster.transition(NS, "train", ctype, message=f"now {ctype}")
        if ctype == "Restarting":
            cluster.set_pod_phase(NS, "train-worker-0", "Running", restart_count=1)
        if ctype == "Failed":
            cluster.set_pod_phase(NS, "train-worker-0", "Failed", exit_code=3)
        seen.append(backend.get("train").status)
    assert seen == [JobStatus.RUNNING, JobStatus.RUNNING, JobStatus.RUNNING, JobStatus.FAILED]
    info = backend.get("train")
    assert info.restarts == 1 and info.message.endswith("now Failed")
    assert info.processes[1].status == "Failed" and info.processes[1].exit_code == 3


def test_batch_job_pending_with_reason_then_complete(backend, cluster):
    backend.submit(spec(gpu=1))
    pod = cluster.run_pods(NS, "train", phase="Pending")[0]["metadata"]["name"]
    stored = cluster.get("", "pods", NS, pod)
    stored["status"]["containerStatuses"][0]["state"] = {"waiting": {"reason": "ImagePullBackOff",
                                                                     "message": "no such image"}}
    info = backend.get("train")
    assert info.status is JobStatus.PENDING and info.message == "ImagePullBackOff: no such image"
    cluster.set_pod_phase(NS, pod, "Running")
    assert backend.get("train").status is JobStatus.RUNNING
    cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)
    cluster.transition(NS, "train", "Complete")
    assert backend.get("train").status is JobStatus.SUCCEEDED


def test_batch_job_failed_after_retries(backend, cluster):
    backend.submit(spec(max_restarts=1))
    first = cluster.run_pods(NS, "train")[0]["metadata"]["name"]
    cluster.set_pod_phase(NS, first, "Failed", exit_code=1)
    second = cluster.run_pods(NS, "train")[0]["metadata"]["name"]
    assert backend.get("train").processes[0].status == "Running"  # the newest pod is rank 0
    cluster.set_pod_phase(NS, second, "Failed", exit_code=2)
    cluster.transition(NS, "train", "Failed", reason="BackoffLimitExceeded")
    info = backend.get("train")
    assert info.status is JobStatus.FAILED and info.restarts == 1 and info.processes[0].exit_code == 2


def test_mpijob_ranks_follow_the_launcher(backend, cluster):
    backend.submit(spec(launcher="mpi", processes=4))
    cluster.run_pods(NS, "train", nodes=("node-a", "node-b"))
    cluster.transition(NS, "train", "Running")
    info = backend.get("train")
    assert info.status is JobStatus.RUNNING and len(info.processes) == 4 and info.node == "node-a,node-b"
    cluster.set_pod_phase(NS, "train-launcher", "Failed", exit_code=137)
    cluster.transition(NS, "train", "Failed")
    info = backend.get("train")
    assert info.status is JobStatus.FAILED and {p.exit_code for p in info.processes} == {137}
    assert cluster.get("", "services", NS, "train-mpi-master")["metadata"]["ownerReferences"][0]["kind"] == "MPIJob"


def test_trainjob_status_comes_from_pods_and_conditions(make_backend, cluster):
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, trainer="v2", gpus_per_node=2))
    backend.submit(spec(launcher="torchrun", processes=4, gpu=1))
    assert backend.get("train").status is JobStatus.PENDING
    cluster.run_pods(NS, "train")
    info = backend.get("train")
    assert info.status is JobStatus.RUNNING and info.extra["procs_per_pod"] == 2 and info.gpus_allocated == 4
    assert [p.status for p in info.processes] == ["Running"] * 4
    cluster.transition(NS, "train", "Complete")
    assert backend.get("train").status is JobStatus.SUCCEEDED


def test_list_returns_every_kind_and_filters_by_project(backend, cluster):
    backend.submit(spec(name="a"))
    backend.submit(spec(name="b", launcher="torchrun", processes=2))
    backend.submit(spec(name="c", launcher="mpi", processes=2, snapshot_on_success="pvc-c-0",
                        volumes=(parse_pvc("fast:1Gi:/mnt"),)))
    backend.submit(spec(name="d", project="vision"))
    jobs = backend.list()
    assert [(j.name, j.extra["kind"]) for j in jobs] == [("a", "Job"), ("b", "PyTorchJob"), ("c", "MPIJob"),
                                                         ("d", "Job")]
    assert [j.name for j in backend.list(project="vision")] == ["d"]
    assert jobs[3].extra["namespace"] == "dtrain-vision" and backend.list(project="other") == []
    cluster.run_pods("dtrain-vision", "d")
    assert backend.list(project="vision")[0].status is JobStatus.RUNNING  # pods matched by namespace too
    cluster.namespaced_only = True  # an account that may only read its own project's namespace
    assert [j.name for j in backend.list()] == ["a", "b", "c"]


def test_objects_not_made_by_dtrain_are_not_jobs(backend, cluster):
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cluster.create({"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": "theirs", "namespace": NS},
                    "spec": {"template": {"spec": {"containers": []}}}})
    with pytest.raises(NotFoundError, match="job 'theirs' not found"):
        backend.get("theirs")
    assert backend.list() == []


def test_wait_times_out_on_a_running_job(backend, cluster):
    backend.submit(spec())
    cluster.run_pods(NS, "train")
    with pytest.raises(TimeoutError_, match="still Running"):
        backend.wait("train", timeout=0.05, poll=0.01)


# ------------------------------------------------------------------------- delete


def test_delete_reads_deleted_until_the_pods_are_gone(backend, cluster):
    backend.submit(spec(launcher="mpi", processes=2, snapshot_on_success="pvc-train-0",
                        volumes=(parse_pvc("fast:1Gi:/mnt"),)))
    cluster.run_pods(NS, "train")
    info = backend.delete("train")
    assert info.status is JobStatus.DELETED
    assert backend.get("train").status is JobStatus.DELETED
    cluster.finish_deletions()
    with pytest.raises(NotFoundError):
        backend.get("train")
    assert pod_names(cluster) == [] and cluster.items("", "services") == []
    assert [j["metadata"]["name"] for j in cluster.items("batch", "jobs")] == []  # the watcher went too
    assert cluster.get("", "persistentvolumeclaims", NS, "pvc-train-0")  # volumes outlive jobs
    with pytest.raises(NotFoundError):
        backend.delete("nope")


# ------------------------------------------------------------------------- logs


def _run_with_logs(backend, cluster, **kw) -> list[str]:
    backend.submit(spec(**kw))
    pods = [p["metadata"]["name"] for p in cluster.run_pods(NS, "train")]
    cluster.transition(NS, "train", "Running")
    return pods


def test_logs_all_ranks_tail_rank_and_since(backend, cluster):
    pods = _run_with_logs(backend, cluster, launcher="torchrun", processes=2)
    now = time.time()
    for i, text in enumerate(["m1", "m2", "m3"]):
        cluster.append_log(NS, "train-master-0", text, at=now - 100 + i)
        cluster.append_log(NS, "train-worker-0", "w" + text[1], at=now - 50 + i)
    lines = list(backend.logs("train"))
    assert [(x.rank, x.text) for x in lines] == [(0, "m1"), (0, "m2"), (0, "m3"), (1, "w1"), (1, "w2"), (1, "w3")]
    assert abs(lines[0].time - (now - 100)) < 1e-3
    assert [x.text for x in backend.logs("train", rank=1, tail=2)] == ["w2", "w3"]
    assert [x.text for x in backend.logs("train", tail=1)] == ["w3"]
    assert [x.text for x in backend.logs("train", since=now - 60)] == ["w1", "w2", "w3"]
    with pytest.raises(SpecError, match="ranks 0 to 1"):
        backend.logs("train", rank=2)
    assert sorted(pods) == ["train-master-0", "train-worker-0"]


def test_logs_of_packed_pods_and_mpi_are_split_by_rank(make_backend, cluster):
    backend = make_backend(KubernetesConfig(project="lanes", image=IMAGE, gpus_per_node=2))
    _run_with_logs(backend, cluster, launcher="torchrun", processes=4, gpu=1)
    cluster.append_log(NS, "train-worker-0", "[2]:two")
    cluster.append_log(NS, "train-worker-0", "[3]:three")
    cluster.append_log(NS, "train-worker-0", "torchrun: starting")  # torchrun's own line
    assert [(x.rank, x.text) for x in backend.logs("train", rank=3)] == [(3, "three")]
    assert [x.rank for x in backend.logs("train")] == [2, 3, 2]

    other = FakeCluster()
    mpi = make_backend(fake=other)
    mpi.submit(spec(name="m", launcher="mpi", processes=2))
    other.run_pods(NS, "m")
    for line in ("[1,0]<stdout>:loss 0.9", "[1,1]<stderr>:warn", "[1,1]<stdout>:loss 0.8", "mpirun done"):
        other.append_log(NS, "m-launcher", line)
    assert [(x.rank, x.text) for x in mpi.logs("m")] == [(0, "loss 0.9"), (1, "warn"), (1, "loss 0.8"),
                                                        (0, "mpirun done")]
    assert [x.text for x in mpi.logs("m", rank=1, tail=1)] == ["loss 0.8"]


def test_logs_follow_streams_lines_as_they_are_written(backend, cluster):
    """The server only writes line 2 once the client has yielded line 1: no buffering to the end."""
    _run_with_logs(backend, cluster)
    pod = pod_names(cluster)[0]
    cluster.append_log(NS, pod, "epoch 1")
    received: list[str] = []
    got_first = threading.Event()
    calls = []

    def idle(namespace, name):
        calls.append(name)
        if len(calls) == 1:
            assert got_first.wait(5), "line 1 was not delivered while the stream was open"
            cluster.append_log(namespace, name, "epoch 2")
        else:
            cluster.set_pod_phase(namespace, name, "Succeeded", exit_code=0)

    cluster.on_follow_idle = idle
    for line in backend.logs("train", follow=True):
        received.append(line.text)
        got_first.set()
    assert received == ["epoch 1", "epoch 2"] and len(calls) == 2


def test_logs_follow_all_ranks_merges_pods(backend, cluster):
    _run_with_logs(backend, cluster, launcher="torchrun", processes=3)
    for pod in pod_names(cluster):
        cluster.append_log(NS, pod, f"hello from {pod}")

    def idle(namespace, name):
        cluster.set_pod_phase(namespace, name, "Succeeded", exit_code=0)

    cluster.on_follow_idle = idle
    lines = list(backend.logs("train", follow=True))
    assert sorted((x.rank, x.text) for x in lines) == [
        (0, "hello from train-master-0"), (1, "hello from train-worker-0"), (2, "hello from train-worker-1")]


def test_logs_of_an_unknown_job(backend):
    with pytest.raises(NotFoundError):
        backend.logs("ghost")


# ------------------------------------------------------------------------- volumes and snapshots


def test_volume_verbs(backend, cluster):
    vol = backend.create_volume("tusimple", size="20Gi", storage_class="fast")
    assert (vol.name, vol.size, vol.storage_class, vol.status) == ("tusimple", "20Gi", "fast", "Pending")
    assert vol.extra["access_modes"] == ["ReadWriteMany"]
    cluster.bind_volumes()
    assert backend.get_volume("tusimple").status == "Bound"
    with pytest.raises(ConflictError, match="already exists"):
        backend.create_volume("tusimple")
    assert [v.name for v in backend.list_volumes()] == ["tusimple"]
    backend.submit(spec(volumes=(parse_pvc("tusimple:/data:ro"),)))
    cluster.run_pods(NS, "train")
    with pytest.raises(ConflictError, match="in use by job 'train'"):
        backend.delete_volume("tusimple")
    (pod,) = pod_names(cluster)
    # kept while its pod runs (the pvc-protection finalizer), gone once it stops
    assert backend.delete_volume("tusimple", force=True) == f"Terminating: Kubernetes keeps it until pod {pod} stops"
    assert backend.get_volume("tusimple").status == "Terminating"
    cluster.set_pod_phase(NS, pod, "Succeeded")
    with pytest.raises(NotFoundError, match="volume 'tusimple' not found"):
        backend.get_volume("tusimple")


def test_snapshot_create_list_restore_delete(backend, cluster):
    backend.create_volume("data", size="7Gi", storage_class="fast")
    snap = backend.create_snapshot("data", name="data-v1", job="prep")
    assert (snap.volume, snap.job, snap.ready, snap.error) == ("data", "prep", False, None)
    auto = backend.create_snapshot("data")
    assert auto.name.startswith("data-") and auto.name != "data-v1"
    cluster.ready_snapshots()
    assert backend.get_snapshot("data-v1").ready is True and backend.get_snapshot("data-v1").bytes == 7 * 2**30
    assert [s.name for s in backend.list_snapshots(job="prep")] == ["data-v1"]
    assert len(backend.list_snapshots(volume="data")) == 2 and backend.list_snapshots(volume="other") == []
    restored = backend.restore_snapshot("data-v1", to="data-copy")
    assert (restored.name, restored.size, restored.storage_class) == ("data-copy", "7Gi", "fast")
    pvc = cluster.get("", "persistentvolumeclaims", NS, "data-copy")
    assert pvc["spec"]["dataSource"] == {"apiGroup": "snapshot.storage.k8s.io", "kind": "VolumeSnapshot",
                                         "name": "data-v1"}
    assert restored.origin_snapshot == "data-v1"
    with pytest.raises(ConflictError, match="'data-copy' already exists"):
        backend.restore_snapshot("data-v1", to="data-copy")
    with pytest.raises(SpecError, match="--to"):
        backend.restore_snapshot("data-v1")
    with pytest.raises(SpecError, match="in-place"):
        backend.restore_snapshot("data-v1", in_place=True)
    with pytest.raises(ConflictError):
        backend.create_snapshot("data", name="data-v1")
    freed = backend.delete_snapshot("data-v1")
    assert (freed.snapshot, freed.bytes) == ("data-v1", None)  # the storage system frees the space
    with pytest.raises(NotFoundError, match="snapshot 'data-v1' not found"):
        backend.get_snapshot("data-v1")
    with pytest.raises(NotFoundError, match="volume 'nope'"):
        backend.create_snapshot("nope")


def test_restore_before_ready_uses_the_recorded_source_size(backend, cluster):
    backend.create_volume("data", size="3Gi", storage_class="fast")
    backend.create_snapshot("data", name="s1")
    backend.delete_volume("data")
    restored = backend.restore_snapshot("s1", to="back")
    assert (restored.size, restored.storage_class) == ("3Gi", "fast")


def test_snapshots_without_the_snapshot_crds(make_backend):
    backend = make_backend(fake=FakeCluster(crds={k: v for k, v in CRDS.items() if k[0] == "kubeflow.org"}))
    backend.create_volume("data")
    with pytest.raises(BackendError, match="external-snapshotter"):
        backend.create_snapshot("data")
    with pytest.raises(BackendError, match="external-snapshotter"):
        backend.list_snapshots()
    with pytest.raises(BackendError, match="volumesnapshots.snapshot.storage.k8s.io .*external-snapshotter"):
        backend.get_snapshot("data-v1")  # not "snapshot not found": the whole API is missing


def test_snapshot_on_success_is_taken_once_and_linked_to_the_job(backend, cluster):
    backend.submit(spec(launcher="torchrun", processes=2, snapshot_on_success="pvc-train-0",
                        volumes=(parse_pvc("fast:2Gi:/mnt"),)))
    job = cluster.get("kubeflow.org", "pytorchjobs", NS, "train")
    watcher = cluster.get("batch", "jobs", NS, "train-snap")
    assert watcher["metadata"]["ownerReferences"][0]["uid"] == job["metadata"]["uid"]
    assert watcher["spec"]["template"]["spec"]["serviceAccountName"] == "dtrain-snapshotter"
    assert cluster.get("rbac.authorization.k8s.io", "roles", NS, "dtrain-snapshotter")
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Running")
    assert backend.get("train").snapshot is None
    assert cluster.items("snapshot.storage.k8s.io", "volumesnapshots") == []
    cluster.transition(NS, "train", "Succeeded")
    info = backend.wait("train", timeout=5, poll=0.01)
    assert info.snapshot == "train-success"
    backend.get("train")
    backend.list()
    snaps = cluster.items("snapshot.storage.k8s.io", "volumesnapshots")
    assert len(snaps) == 1 and snaps[0]["spec"]["source"]["persistentVolumeClaimName"] == "pvc-train-0"
    assert snaps[0]["metadata"]["labels"]["dtrain.io/job"] == "train"
    assert snaps[0]["metadata"]["annotations"]["dtrain.io/source-size"] == "2Gi"
    assert backend.list_snapshots(job="train")[0].name == "train-success"
    # A second job reuses the namespace's snapshotter account instead of failing on it.
    backend.submit(spec(name="again", snapshot_on_success="pvc-train-0", volumes=(parse_pvc("pvc-train-0:/mnt"),)))
    assert len(cluster.items("", "serviceaccounts", NS)) == 1


def test_snapshot_on_success_of_a_failed_job_takes_nothing(backend, cluster):
    backend.create_volume("data")
    backend.submit(spec(snapshot_on_success="data", volumes=(parse_pvc("data:/mnt"),)))
    cluster.transition(NS, "train", "Failed")
    assert backend.get("train").snapshot is None
    assert cluster.items("snapshot.storage.k8s.io", "volumesnapshots") == []


def test_snapshot_on_success_of_a_missing_volume_is_refused_at_submit(backend):
    with pytest.raises(NotFoundError, match="volume 'data' not found"):
        backend.submit(spec(snapshot_on_success="data"))


# ------------------------------------------------------------------------- nodes


def test_nodes_report_allocatable_and_allocated_gpus(backend, cluster):
    node = cluster.add_node("gpu-1", gpus=8)
    node["metadata"]["labels"] = {"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"}
    cluster.add_node("cpu-1", cpu="32", memory="128Gi")
    backend.submit(spec(launcher="torchrun", processes=2, gpu=2))
    cluster.run_pods(NS, "train", nodes=("gpu-1",))
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "other"}})
    cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "theirs", "namespace": "other"},
                    "spec": {"nodeName": "gpu-1", "containers": [
                        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]},
                    "status": {"phase": "Running"}})
    cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waiting", "namespace": "other"},
                    "spec": {"containers": [  # not scheduled yet: it holds no node's GPUs
                        {"name": "c", "resources": {"limits": {"nvidia.com/gpu": "4"}}}]},
                    "status": {"phase": "Pending"}})
    nodes = {n.name: n for n in backend.nodes()}  # the pod of another namespace counts too
    assert (nodes["gpu-1"].gpus_allocatable, nodes["gpu-1"].gpus_allocated) == (8, 5)
    assert nodes["gpu-1"].gpus[0].name == "NVIDIA-H100-80GB-HBM3" and len(nodes["gpu-1"].gpus) == 8
    assert (nodes["cpu-1"].gpus_allocatable, nodes["cpu-1"].cpus, nodes["cpu-1"].memory) == (0, 32, 128 * 2**30)


# ------------------------------------------------------------------------- projects


def test_projects_are_namespaces_with_a_gpu_quota(backend, cluster):
    backend.create_project("lanes", gpu_quota=4)
    backend.create_project("vision")
    backend.create_project("lanes", gpu_quota=8)  # an existing project: its quota changes
    quota = cluster.get("", "resourcequotas", NS, "dtrain-quota")
    assert quota["spec"]["hard"] == {"requests.nvidia.com/gpu": "8"}
    backend.submit(spec(launcher="torchrun", processes=2, gpu=1))
    cluster.run_pods(NS, "train")
    projects = {p.name: p for p in backend.list_projects()}
    assert projects["lanes"] == ProjectInfo(name="lanes", backend="kubernetes", gpu_quota=8, gpus_allocated=2, jobs=1,
                                            extra={"namespace": NS})
    assert projects["vision"].extra["namespace"] == "dtrain-vision" and projects["vision"].gpu_quota is None
    assert "default" not in projects  # namespaces dtrain did not make are not projects


def test_a_job_being_deleted_is_not_counted_in_its_projects_jobs(backend, cluster):
    """Reproduced: `dtrain project list` counted a job whose foreground delete waits for its pods
    (`list` hides it, and the local backend counts none Deleted)."""
    backend.create_project("lanes")
    backend.submit(spec())
    backend.submit(spec(name="other"))
    cluster.run_pods(NS, "train")
    backend.delete("train")  # its pods hold it: the object stays, marked deleted
    assert cluster.get("batch", "jobs", NS, "train")["metadata"]["deletionTimestamp"]
    assert [(p.name, p.jobs) for p in backend.list_projects()] == [("lanes", 1)]
    assert {j.name: j.status for j in backend.list(project="lanes")}["train"] is JobStatus.DELETED  # hidden by list


def test_a_projects_gpu_quota_can_be_removed_and_a_bare_create_keeps_it(backend, cluster):
    """A quota, once set, could not be removed (the ResourceQuota stayed for good)."""
    backend.create_project("lanes", gpu_quota=4)
    backend.create_project("lanes")  # neither given: the quota stays
    assert cluster.get("", "resourcequotas", NS, "dtrain-quota")["spec"]["hard"] == {"requests.nvidia.com/gpu": "4"}
    backend.create_project("lanes", no_gpu_quota=True)
    with pytest.raises(KeyError):
        cluster.get("", "resourcequotas", NS, "dtrain-quota")
    backend.create_project("lanes", no_gpu_quota=True)  # none to remove: still fine
    assert {p.name: p.gpu_quota for p in backend.list_projects()}["lanes"] is None
    with pytest.raises(SpecError, match="^gpu_quota and no_gpu_quota contradict each other: give one of them$"):
        backend.create_project("lanes", gpu_quota=1, no_gpu_quota=True)

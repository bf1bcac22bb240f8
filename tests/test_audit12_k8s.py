"""The Kubernetes backend's leftovers of a twelfth audit, each driven through the official
`kubernetes` client against the shipped fake API server:

- `submit --dry-run` made no cluster call, so a volume missing, a name taken or an unknown
  StorageClass passed the dry run and only `submit` refused them. It now makes submit's lookups
  (GET only) and refuses in submit's words; what it cannot look up is one warning line, and the
  manifests are printed all the same.
- An account that may not read pods saw each rank of `describe` Pending: they are Unknown.
- `nodes` (GET /nodes, the dashboard's Nodes page) named no job on a Kubernetes GPU.
"""

from __future__ import annotations

import json
import logging

import pytest
import yaml

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig  # noqa: E402
from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer  # noqa: E402
from dtrain.backends.kubernetes.objects import watcher_name  # noqa: E402
from dtrain.errors import ConflictError, NotFoundError  # noqa: E402
from dtrain.spec import parse_pvc  # noqa: E402

from test_k8s_backend import NS, backend, cluster, make_backend, spec  # noqa: E402,F401  (their fixtures)
from test_k8s_leftovers3 import _cli  # noqa: E402

WARNED = "dtrain: warning: dry run not checked on the cluster: "


def _refusal(call) -> tuple[type, str]:
    with pytest.raises((NotFoundError, ConflictError)) as refused:
        call()
    return type(refused.value), str(refused.value)


def _writes(cluster: FakeCluster, since: int = 0) -> list[tuple[str, str]]:
    return [(method, path) for method, path in cluster.requests[since:] if method != "GET"]


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("dtrain: warning:")]


# ------------------------------------------------------------------------- the dry run looks up what submit would


@pytest.mark.parametrize("case", ["volume missing", "name taken", "class unknown", "new volume taken"])
def test_the_dry_run_refuses_what_submit_refuses_in_its_words(backend, cluster, case):
    cluster.create({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "metadata": {"name": "fast"}})
    backend.create_volume("data", size="1Gi")
    job = {"volume missing": spec(volumes=(parse_pvc("nosuch:/data"),)),
           "name taken": spec(name="taken"),
           "class unknown": spec(volumes=(parse_pvc("slow:1Gi:/mnt"),)),
           "new volume taken": spec(volumes=(parse_pvc("fast:1Gi:/mnt"),))}[case]
    if case == "name taken":
        backend.submit(spec(name="taken"))
    if case == "new volume taken":
        backend.create_volume(job.new_volumes()[0][0], size="1Gi")
    before = len(cluster.requests)
    dry = _refusal(lambda: backend.render(job))
    assert _writes(cluster, before) == []  # GET only
    assert dry == _refusal(lambda: backend.submit(job))  # the same error, the same one line
    assert "\n" not in dry[1]


def test_a_dry_run_that_passes_creates_nothing_and_prints_what_submit_creates(backend, cluster, caplog):
    backend.create_volume("data", size="3Gi")
    job = spec(volumes=(parse_pvc("data:/data"),), snapshot_on_success="data")
    before = len(cluster.requests)
    with caplog.at_level(logging.WARNING):
        objects = backend.render(job)
    assert _writes(cluster, before) == [] and _warnings(caplog) == []
    assert len(cluster.requests) > before  # it did look
    backend.submit(job)
    made = {(o["kind"], o["metadata"]["name"]): o for o in objects}
    watcher = cluster.get("batch", "jobs", NS, watcher_name("train"))
    # the watcher records the volume's size and class, as submit's does; submit's also records the job's
    # uid on the snapshot (dtrain.io/job-uid), which no dry run can know: the job is made by submit, and
    # the dry run's watcher reads it from the job's object (test_job_uid_k8s runs that script)
    uid = cluster.get("batch", "jobs", NS, "train")["metadata"]["uid"]
    sent, dry = (json.dumps(w["spec"]).split("done\\n", 1) for w in (watcher, made[("Job", watcher_name("train"))]))
    assert dry[0] == sent[0]  # the same wait for the job's success
    assert json.dumps(made[("Job", watcher_name("train"))]["spec"]).split("done\\n", 1)[1].split('"], ')[1] == \
        json.dumps(watcher["spec"]).split("done\\n", 1)[1].split('"], ')[1]  # the same past its command
    assert sent[1].count(f'\\"dtrain.io/job-uid\\": \\"{uid}\\"') == 1
    assert '\\"dtrain.io/job-uid\\": \\"@JOB_UID@\\"' in dry[1] and "jsonpath={.metadata.uid}" in dry[1]
    # what the dry run prints says which name the real run's snapshot takes
    assert "train-success, or train-success-<the first 8 characters of the job's uid> where an earlier run of " \
           "train left train-success" in dry[1]


def test_a_dry_run_without_rbac_for_volumes_names_what_it_did_not_check(backend, cluster, caplog):
    backend.submit(spec(name="taken"))
    cluster.forbidden.add(("", "persistentvolumeclaims"))
    job = spec(volumes=(parse_pvc("data:/data"),))
    with caplog.at_level(logging.WARNING):
        assert [o["kind"] for o in backend.render(job)][-1] == "Job"
    [warning] = _warnings(caplog)
    assert warning.startswith(WARNED + "volume 'data' exists (cannot read PersistentVolumeClaim 'data'")
    assert "\n" not in warning
    # what it may read is still checked
    assert _refusal(lambda: backend.render(spec(name="taken", volumes=job.volumes)))[0] is ConflictError


def test_cli_dry_run_without_a_cluster_prints_the_yaml_and_one_line(home, tmp_path):
    """No API server answers: the manifests are printed, exit 0, one warning line on stderr."""
    kubeconfig = tmp_path / "kubeconfig"
    with FakeKubeServer(FakeCluster()) as server:
        server.write_kubeconfig(kubeconfig)
    dt = _cli(home, tmp_path, server)  # its kubeconfig names a port nothing listens on now
    proc = dt("submit", "train", "--pvc", "data:/data", "--dry-run", "--", "python", "t.py")
    kinds = [o["kind"] for o in yaml.safe_load_all(proc.stdout) if o]
    assert kinds == ["Namespace", "Job"]
    [line] = proc.stderr.strip().splitlines()
    assert line.startswith(WARNED + f"namespace {NS} exists, job name 'train' free, volume 'data' exists (")
    assert "Traceback" not in proc.stderr


@pytest.mark.slow
def test_cli_dry_run_of_a_missing_volume_is_submits_line(home, tmp_path, cluster):
    with FakeKubeServer(cluster) as server:
        dt = _cli(home, tmp_path, server)
        dry = dt("submit", "train", "--pvc", "nosuch:/data", "--dry-run", "--", "python", "t.py", check=False)
        real = dt("submit", "train", "--pvc", "nosuch:/data", "--", "python", "t.py", check=False)
    assert dry.returncode == real.returncode != 0 and dry.stdout == ""
    assert dry.stderr == real.stderr and len(dry.stderr.strip().splitlines()) == 1
    assert "volume 'nosuch' not found in namespace dtrain-lanes" in dry.stderr


# ------------------------------------------------------------------------- ranks of pods not readable


def _http(tmp_path, backend):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain.client import Client
    from dtrain.server.app import create_app

    client = Client(home=tmp_path / "sdk-home", backend="kubernetes", backends={"kubernetes": backend})
    return TestClient(create_app(lambda: client), base_url="http://127.0.0.1:8000")


def _processes(text: str) -> list[list[str]]:
    lines = text.split("Processes:\n", 1)[1].split("Events:\n", 1)[0].splitlines()
    return [line.split() for line in lines[1:]]


@pytest.mark.slow
def test_ranks_whose_pods_cannot_be_read_are_unknown_at_every_door(home, tmp_path, backend, cluster):
    """They were each Pending, which is false for a Running job; the RBAC hint stays in the message."""
    backend.submit(spec(launcher="torchrun", processes=2))
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Running")
    cluster.forbidden.add(("", "pods"))
    info = backend.get("train")
    assert [(p.rank, p.status, p.node) for p in info.processes] == [(0, "Unknown", None), (1, "Unknown", None)]
    assert info.processes_pending == 0 and "kubectl create role dtrain-pod-reader" in info.message
    [listed] = backend.list()
    assert listed.processes == info.processes
    with FakeKubeServer(cluster) as server:
        dt = _cli(home, tmp_path, server)
        text = dt("describe", "job", "train").stdout
        as_json = json.loads(dt("describe", "job", "train", "--json").stdout)
    assert [row[:2] for row in _processes(text)] == [["0", "Unknown"], ["1", "Unknown"]]
    assert "kubectl create role dtrain-pod-reader" in text
    over_http = _http(tmp_path, backend).get("/api/v1/jobs/train").json()
    for record in (as_json, over_http):
        assert [(p["rank"], p["status"]) for p in record["processes"]] == [(0, "Unknown"), (1, "Unknown")]
        assert record["processes_pending"] == 0 and record["message"] == info.message
    cluster.forbidden.clear()  # readable again: the pods' own phases
    assert [p.status for p in backend.get("train").processes] == ["Running", "Running"]


# ------------------------------------------------------------------------- nodes name each GPU's job


@pytest.mark.slow
def test_nodes_give_each_allocated_gpu_its_job_and_project(home, tmp_path, backend, cluster):
    cluster.add_node("gpu-1", gpus=4)
    cluster.add_node("gpu-2", gpus=2)
    backend.submit(spec(launcher="torchrun", processes=2, gpu=1))
    backend.submit(spec(name="solo", project="vision", gpu=2))
    cluster.run_pods(NS, "train", nodes=("gpu-1",))
    cluster.run_pods("dtrain-vision", "solo", nodes=("gpu-2",))
    cluster.create({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": "default"},
                    "spec": {"nodeName": "gpu-1", "containers": [{"name": "c", "resources": {
                        "requests": {"nvidia.com/gpu": "1"}}}]}, "status": {"phase": "Running"}})
    nodes = {n.name: n for n in backend.nodes()}
    assert [(g.index, g.job, g.project) for g in nodes["gpu-1"].gpus] == [
        ("0", "train", "lanes"), ("1", "train", "lanes"), ("2", None, None), ("3", None, None)]
    assert nodes["gpu-1"].gpus_allocated == 3  # the pod not dtrain's holds one, with no job of ours
    assert [(g.job, g.project) for g in nodes["gpu-2"].gpus] == [("solo", "vision")] * 2
    with FakeKubeServer(cluster) as server:
        as_json = json.loads(_cli(home, tmp_path, server)("nodes", "--json").stdout)
        text = _cli(home, tmp_path, server)("nodes").stdout
    assert as_json == _http(tmp_path, backend).get("/api/v1/nodes").json()
    assert [g["job"] for n in as_json for g in n["gpus"]] == ["train", "train", None, None, "solo", "solo"]
    assert "gpu-2  0    " in text and text.count(" solo ") == 2


def test_nodes_without_pods_readable_name_no_job_and_say_why(tmp_path, backend, cluster):
    cluster.add_node("gpu-1", gpus=2)
    backend.submit(spec(gpu=1))
    cluster.run_pods(NS, "train", nodes=("gpu-1",))
    cluster.forbidden.add(("", "pods"))
    nodes = backend.nodes()
    assert [(g.job, g.project) for n in nodes for g in n.gpus] == [(None, None)] * 2
    assert [n.code for n in nodes.notices] == ["gpus-unknown"]
    r = _http(tmp_path, backend).get("/api/v1/nodes")
    assert [g["job"] for g in r.json()[0]["gpus"]] == [None, None] and "GPUs allocated unknown" in r.headers["warning"]


def test_a_dry_run_shows_the_namespace_only_where_submit_would_create_it(backend, cluster):
    """Reproduced: the project's Namespace was shown where it existed (a Kubeflow profile's, or one
    an earlier `project create` made), which submit creates none of: kubectl apply -f of the output
    relabelled the profile's namespace dtrain's."""
    assert [o["kind"] for o in backend.render(spec())] == ["Namespace", "Job"]  # missing: submit creates it
    cluster.create({"apiVersion": "v1", "kind": "Namespace",
                    "metadata": {"name": NS, "labels": {"app.kubernetes.io/part-of": "kubeflow-profile"}}})
    assert [o["kind"] for o in backend.render(spec())] == ["Job"]
    backend.submit(spec())
    assert cluster.get("", "namespaces", "", NS)["metadata"]["labels"] == {"app.kubernetes.io/part-of":
                                                                          "kubeflow-profile"}

"""A fourteenth audit: one job file taken, unchanged, from the local backend to Kubernetes (the
shipped fake API server), through the CLI, the HTTP API and the SDK:

- `dtrain list --backend kubernetes` (as `submit ... --backend kubernetes` takes it) was refused
  naming only the verb's help; the line now gives the command with --backend before the verb.
- A job submitted with `--backend kubernetes` (the default backend unchanged, as the docs say) was
  then "no job named ...; see 'dtrain list jobs'" from `describe`, `logs` and the SDK, which list
  nothing: the line now names the listing of the other configured backend, in each door's words.
- The HTTP API found a job POSTed with `"backend": "kubernetes"` on some requests and not others
  (GET /jobs/NAME 200, its /logs 404: each worker thread's Client knew only its own submits), and
  neither it nor an SDK Client listed such a job: the clients of one server share what they
  submitted, and a client's list reads the backends it submitted to.
- On Kubernetes a volume or snapshot name in use (`volume create`, `snapshot create --name`,
  `snapshot restore --to`) said "delete it first" without the command, which the local backend names.
- A Kubernetes `--snapshot-on-success` snapshot had `job_spec` None where the local one records the
  job's spec (sdk.md's `snap.job_spec["command"]` failed on a cluster): the VolumeSnapshot, taken by
  the backend or by the in-cluster watcher, carries the spec as its job object does.
"""

from __future__ import annotations

import json
import threading

import pytest
import yaml

import dtrain
from conftest import assert_usage_error
from dtrain.errors import NotFoundError

pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from test_k8s_backend import NS, backend, cluster, make_backend  # noqa: E402,F401  (their fixtures)
from test_k8s_backend import spec as k8s_spec  # noqa: E402


@pytest.fixture
def kube(home, tmp_path):
    """config.yaml with Kubernetes settings (the fake API server) and the local backend the default."""
    pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
    server = FakeKubeServer(FakeCluster()).start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    (home / "config.yaml").write_text(yaml.safe_dump({"kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig"),
                                                                     "image": "img:1"}}))
    yield server
    server.close()


@pytest.mark.parametrize("words, fixed", [
    (["list", "--backend", "kubernetes"], "dtrain --backend kubernetes list"),
    (["describe", "job", "cifar", "--backend=kubernetes"], "dtrain --backend=kubernetes describe job cifar"),
    (["wait", "cifar", "--backend", "local", "--timeout", "1s"], "dtrain --backend local wait cifar --timeout 1s"),
    (["logs", "cifar", "-f", "--backend"], "dtrain --backend BACKEND logs cifar -f"),
])
def test_a_backend_after_a_verb_that_takes_it_before_names_the_command(dt, words, fixed):
    proc = dt(*words, check=False)
    assert_usage_error(proc, f"takes --backend before the verb: {fixed} (see 'dtrain {words[0]} --help')")


@pytest.mark.slow
def test_a_job_submitted_to_kubernetes_is_named_there_when_looked_for_on_the_default_backend(dt, home, kube):
    job = dtrain.JobSpec(name="cifar", processes=2, launcher="torchrun", command=["python", "train.py"])
    assert dtrain.Client(home=home, backend="kubernetes").submit(job).backend == "kubernetes"
    for verb in (["describe", "job", "nope"], ["logs", "nope"]):  # on no backend: where else to look is named
        assert_usage_error(dt(*verb, check=False), "no job named 'nope'",
                           "a job submitted to another backend is listed there: dtrain --backend kubernetes list")
    assert [j["name"] for j in dt.json("--backend", "kubernetes", "list")] == ["cifar"]  # the command it names
    with pytest.raises(NotFoundError, match=r"listed there: dtrain\.Client\(backend='kubernetes'\)\.list\(\)$"):
        dtrain.Client(home=home).get("nope")
    # the submit is remembered (state.db's sent_to): a bare name reaches the one backend that has it
    assert dtrain.Client(home=home).get("cifar").backend == "kubernetes"
    assert "kubernetes" in dt("describe", "job", "cifar").stdout
    with pytest.raises(NotFoundError) as chosen:  # the backend was chosen: nothing else to name
        dtrain.Client(home=home, backend="local").get("cifar")
    assert "another backend" not in str(chosen.value)


def test_the_http_api_finds_and_lists_a_job_posted_to_kubernetes_from_every_thread(home, kube):
    from fastapi.testclient import TestClient

    from dtrain.server.app import create_app
    app = create_app(lambda: dtrain.Client(home=home), sample_every=3600)
    http = TestClient(app, base_url="http://127.0.0.1:8000")
    posted = http.post("/api/v1/jobs", json={"name": "h1", "command": ["python", "t.py"], "backend": "kubernetes"})
    assert posted.status_code == 201 and posted.json()["backend"] == "kubernetes"
    seen = {}

    def look():  # a worker thread of its own: a Client made for it
        client = app.state.clients.get()
        seen["get"], seen["list"] = client.get("h1").backend, [j.name for j in client.list()]
    for _ in range(2):
        thread = threading.Thread(target=look)
        thread.start()
        thread.join()
        assert seen.pop("get") == "kubernetes" and seen.pop("list") == ["h1"]
    assert [j["name"] for j in http.get("/api/v1/jobs").json()] == ["h1"]
    assert http.get("/api/v1/jobs/h1/logs").status_code == 200


def test_an_sdk_client_lists_the_job_it_submitted_to_kubernetes(home, kube):
    client = dtrain.Client(home=home)
    client.submit(dtrain.JobSpec(name="s1", command=["python", "t.py"], backend="kubernetes"))
    assert [(j.name, j.backend) for j in client.list()] == [("s1", "kubernetes")]


@pytest.mark.slow
def test_a_kubernetes_name_in_use_names_the_delete_to_type_as_locally(dt, home, kube):
    def refused(*words):
        return dt(*words, "--backend", "kubernetes", check=False)
    dt("volume", "create", "data", "--size", "1Gi", "--backend", "kubernetes")
    dt("snapshot", "create", "data", "--name", "data-v1", "--backend", "kubernetes")
    assert_usage_error(refused("volume", "create", "data", "--size", "1Gi"),
                       "volume 'data' already exists", "'dtrain --backend kubernetes volume delete data'")
    assert_usage_error(refused("snapshot", "create", "data", "--name", "data-v1"),
                       "snapshot 'data-v1' already exists", "'dtrain --backend kubernetes snapshot delete data-v1'")
    assert_usage_error(refused("snapshot", "restore", "data-v1", "--to", "data"),
                       "volume 'data' already exists", "'dtrain --backend kubernetes volume delete data'")


def test_a_kubernetes_success_snapshot_records_the_job_spec_as_a_local_one_does(backend, cluster):
    from dtrain.backends.kubernetes import KubernetesConfig
    from dtrain.backends.kubernetes.render import resource_for
    from dtrain.backends.kubernetes.render_storage import render_snapshot_watcher
    from dtrain.spec import parse_pvc
    job = k8s_spec(launcher="torchrun", processes=2, snapshot_on_success="pvc-train-0",
                   volumes=(parse_pvc("fast:2Gi:/mnt"),))
    backend.submit(job)
    cluster.run_pods(NS, "train")
    cluster.transition(NS, "train", "Succeeded")
    stored = backend.wait("train", timeout=5, poll=0.01)
    snap = backend.get_snapshot(stored.snapshot)
    assert snap.job == "train" and snap.job_spec == stored.spec.to_dict()
    assert snap.job_spec["command"] == list(job.command)
    assert [s.job_spec for s in backend.list_snapshots(job="train")] == [snap.job_spec]
    config = KubernetesConfig(project="lanes", image="img:1")  # the in-cluster watcher's snapshot: the same
    watcher = render_snapshot_watcher(stored.spec, config, resource_for(stored.spec, config))
    script = watcher["spec"]["template"]["spec"]["containers"][0]["command"][-1]
    manifest = json.loads("{" + script.split("\n{", 1)[1].split("\nEOF", 1)[0])  # the here-document
    assert json.loads(manifest["metadata"]["annotations"]["dtrain.io/spec"]) == stored.spec.to_dict()

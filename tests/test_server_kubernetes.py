"""The same HTTP API over the Kubernetes backend: `create_app` is given Clients whose backend
drives the official client against the shipped fake API server. Nothing in the server knows
which backend it talks to."""

from __future__ import annotations

import httpx
import pytest

from server_util import ThreadServer

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
from prometheus_client.parser import text_string_to_metric_families  # noqa: E402

from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig  # noqa: E402
from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer  # noqa: E402
from dtrain.client import Client  # noqa: E402
from dtrain.server.app import create_app  # noqa: E402

NS = "dtrain-lanes"
IMAGE = "ghcr.io/example/lanes:1"


@pytest.fixture
def k8s_api(home):
    cluster = FakeCluster()
    cluster.add_node("node-1", gpus=4)
    fake = FakeKubeServer(cluster).start()
    api_clients = []

    def make_client() -> Client:  # one per server thread, each with its own API connection pool
        api = fake.api_client()
        api_clients.append(api)
        backend = KubernetesBackend(KubernetesConfig(project="lanes", image=IMAGE), api_client=api)
        return Client(home=home, backend="kubernetes", backends={"kubernetes": backend})

    server = ThreadServer(create_app(make_client, sample_every=3600))
    yield server, cluster
    server.stop()
    for api in api_clients:
        api.close()
    fake.close()


def test_jobs_nodes_and_metrics_over_the_kubernetes_backend(k8s_api):
    server, cluster = k8s_api
    with httpx.Client(base_url=server.url, timeout=60) as http:
        r = http.post("/api/v1/jobs", json={"name": "train", "command": ["python", "train.py"], "project": "lanes",
                                            "launcher": "torchrun", "processes": 2, "gpu": 1,
                                            "backend": "kubernetes"})
        assert r.status_code == 201, r.text
        assert r.json()["backend"] == "kubernetes" and r.json()["status"] == "Pending"
        cluster.transition(NS, "train", "Created")
        for pod in cluster.run_pods(NS, "train", phase="Running"):
            cluster.set_pod_phase(NS, pod["metadata"]["name"], "Running")
        cluster.transition(NS, "train", "Running")
        job = http.get("/api/v1/jobs/train").json()
        assert job["status"] == "Running" and job["processes_running"] == 2 and job["gpus_allocated"] == 2
        assert [j["name"] for j in http.get("/api/v1/jobs", params={"status": "Running"}).json()] == ["train"]
        assert http.get("/api/v1/jobs/train/metrics").json() == []  # no job folder: no curves
        [node] = http.get("/api/v1/nodes").json()
        assert node["name"] == "node-1" and node["gpus_allocatable"] == 4

        samples = {(s.name, tuple(sorted(s.labels.items()))): s.value
                   for f in text_string_to_metric_families(http.get("/metrics").text) for s in f.samples}
        assert samples[("dtrain_jobs", (("project", "lanes"), ("status", "Running")))] == 1
        assert samples[("dtrain_job_processes", (("job_name", "train"), ("project", "lanes"), ("state", "running")))] == 2

        missing = http.get("/api/v1/jobs/nope")
        assert missing.status_code == 404 and missing.json()["kind"] == "NotFoundError"
        unsupported = http.get("/api/v1/snapshots/a/diff", params={"to": "b"})
        assert unsupported.status_code == 501 and unsupported.json()["kind"] == "NotSupportedError"

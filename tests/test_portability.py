"""One job across backends (local, Kubernetes, SageMaker), through the CLI, the SDK and the HTTP API:

- `dtrain list -A` in a new process showed a job submitted with `--backend kubernetes` only where
  config.yaml's `project_backends` sent a project there: what a client submitted was kept in its
  memory alone. Every backend config.yaml has settings for is now read, the table has a BACKEND
  column, and one that does not answer is one warning line.
"""

from __future__ import annotations

import logging
import socket

import pytest
import yaml

import dtrain


def _closed_port() -> int:
    """A local port nothing listens on (bound, then closed): a connection there is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def kube(home, tmp_path):
    """config.yaml with Kubernetes settings (the shipped fake API server); the local backend the default."""
    pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
    server = FakeKubeServer(FakeCluster()).start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    (home / "config.yaml").write_text(yaml.safe_dump({"kubernetes": {"kubeconfig": str(tmp_path / "kubeconfig"),
                                                                     "image": "img:1"}}))
    yield server
    server.close()


@pytest.mark.slow
def test_list_all_in_a_new_process_shows_a_job_submitted_with_backend_kubernetes(dt, home, kube):
    job = dtrain.JobSpec(name="cifar", command=["python", "train.py"], backend="kubernetes")
    dtrain.Client(home=home).submit(job)  # this client, and what it remembers, end here
    proc = dt("list", "-A")
    header, row = proc.stdout.splitlines()
    assert header.split()[:7] == ["NAME", "STATUS", "AGE", "NODE", "TYPE", "PROJECT", "BACKEND"]
    assert row.split()[0] == "cifar" and row.split()[6] == "kubernetes" and proc.stderr == ""
    assert [(j["name"], j["backend"]) for j in dt.json("list", "-A")] == [("cifar", "kubernetes")]
    assert "BACKEND" not in dt("list").stdout.splitlines()[0]  # one project's list: one backend, as before
    assert [(j.name, j.backend) for j in dtrain.Client(home=home).list()] == [("cifar", "kubernetes")]

    from fastapi.testclient import TestClient

    from dtrain.server.app import create_app
    http = TestClient(create_app(lambda: dtrain.Client(home=home), sample_every=3600), base_url="http://127.0.0.1:8000")
    listed = http.get("/api/v1/jobs")
    assert [(j["name"], j["backend"]) for j in listed.json()] == [("cifar", "kubernetes")]
    assert "warning" not in listed.headers


@pytest.mark.slow
def test_a_configured_backend_that_does_not_answer_is_one_warning_line(dt, home, tmp_path):
    pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": f"http://127.0.0.1:{_closed_port()}"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}], "users": [{"name": "u", "user": {}}]}))
    (home / "config.yaml").write_text(yaml.safe_dump({"kubernetes": {"kubeconfig": str(kubeconfig),
                                                                     "request_timeout": 5}}))
    proc = dt("list", "-A")  # the local jobs (none) are listed still: exit 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "dtrain: warning: jobs on the kubernetes backend (config.yaml's kubernetes: settings) not listed"), proc.stderr
    assert dtrain.Client(home=home).list().notices[0].code == "jobs-unlisted"


"""`dtrain logs` shows the current attempt's lines, `--previous` the attempt before's (kubectl logs
--previous): locally, over the SDK and the HTTP API, and on the Kubernetes fake API server."""

from __future__ import annotations

import time

import pytest

from dtrain import Client
from dtrain.backends.kubernetes import KubernetesBackend, KubernetesConfig
from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
from dtrain.backends.local.logfiles import LogFiles
from dtrain.errors import NotFoundError, SpecError
from dtrain.spec import JobSpec

from server_util import local_api

RETRY = "echo attempt $DTRAIN_ATTEMPT rank $RANK; [ $DTRAIN_ATTEMPT -ge 1 ]"


@pytest.fixture
def restarted(dt):
    """A 2-process job whose first attempt fails and whose second succeeds (--max-restarts 1)."""
    dt("submit-dist", "retry", "--processes", "2", "--max-restarts", "1", "--", "sh", "-c", RETRY)
    info = dt.wait_for("retry", {"Succeeded", "Failed"})
    assert info["status"] == "Succeeded" and info["restarts"] == 1, info
    return dt


def _texts(proc) -> list[str]:
    return proc.stdout.splitlines()


@pytest.mark.slow
def test_logs_shows_the_current_attempt_and_previous_the_one_before(restarted):
    dt = restarted
    assert sorted(_texts(dt("logs", "retry"))) == ["[rank 0] attempt 1 rank 0", "[rank 1] attempt 1 rank 1"]
    assert sorted(_texts(dt("logs", "retry", "--previous"))) == ["[rank 0] attempt 0 rank 0",
                                                                  "[rank 1] attempt 0 rank 1"]
    assert _texts(dt("logs", "retry", "--previous", "--rank", "1")) == ["attempt 0 rank 1"]
    assert _texts(dt("logs", "retry", "--rank", "0", "-t", "1")) == ["attempt 1 rank 0"]
    assert len(_texts(dt("logs", "retry", "--previous", "-t", "1"))) == 1
    assert _texts(dt("logs", "retry", "--previous", "-t", "0")) == []
    assert sorted(_texts(dt("logs", "retry", "--previous", "--since", "1h"))) == ["[rank 0] attempt 0 rank 0",
                                                                               "[rank 1] attempt 0 rank 1"]
    # -f of an ended job: the current attempt's lines, then it ends
    assert sorted(_texts(dt("logs", "retry", "-f", "--rank", "0"))) == ["attempt 1 rank 0"]


@pytest.mark.slow
def test_previous_cannot_be_followed(restarted):
    proc = restarted("logs", "retry", "--previous", "-f", check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1 and "--previous cannot be followed" in proc.stderr


def test_previous_of_a_job_that_never_restarted_is_refused_in_one_line(dt):
    dt("submit", "once", "--", "echo", "hello")
    dt.wait_for("once", {"Succeeded"})
    assert _texts(dt("logs", "once")) == ["hello"]
    proc = dt("logs", "once", "--previous", check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "no previous attempt (previous terminated container not found)" in proc.stderr


@pytest.mark.slow
def test_sdk_and_http_api_take_previous(restarted, home):
    client = Client(home=home)
    assert sorted(ln.text for ln in client.logs("retry")) == ["attempt 1 rank 0", "attempt 1 rank 1"]
    assert [ln.text for ln in client.logs("retry", previous=True, rank=0)] == ["attempt 0 rank 0"]
    with pytest.raises(SpecError, match="cannot be followed"):
        client.logs("retry", previous=True, follow=True)
    with local_api(home) as http:
        now = http.get("/api/v1/jobs/retry/logs", params={"rank": 0})
        before = http.get("/api/v1/jobs/retry/logs", params={"rank": 0, "previous": "true"})
        assert [x["text"] for x in now.json()] == ["attempt 1 rank 0"]
        assert [x["text"] for x in before.json()] == ["attempt 0 rank 0"]


def test_a_window_reads_only_its_part_of_a_rank_log(tmp_path):
    logs = tmp_path / "logs"
    logs.mkdir()
    first = "".join(f"2026-01-01T00:00:0{i}.000000Z old {i}\n" for i in range(3)).encode()
    second = "".join(f"2026-01-01T00:01:0{i}.000000Z new {i}\n" for i in range(2)).encode()
    (logs / "rank-0.log").write_bytes(first + second)
    cut = len(first)
    assert [ln.text for ln in LogFiles(logs, rank=None, since=None, window={0: (cut, None)}).read()] == ["new 0",
                                                                                                       "new 1"]
    assert [ln.text for ln in LogFiles(logs, rank=None, since=None, window={0: (0, cut)}).read(last=2)] == [
        "old 1", "old 2"]
    # a log cut short (by hand) since the attempt began: what it holds is read, not nothing
    (logs / "rank-0.log").write_bytes(second)
    assert [ln.text for ln in LogFiles(logs, rank=None, since=None, window={0: (cut, None)}).read()] == ["new 0",
                                                                                                       "new 1"]


NS = "dtrain-lanes"


@pytest.fixture
def k8s():
    cluster = FakeCluster()
    server = FakeKubeServer(cluster).start()
    client = server.api_client()
    backend = KubernetesBackend(KubernetesConfig(project="lanes", image="ghcr.io/example/lanes:1"), api_client=client)
    yield cluster, backend
    client.close()
    server.close()


def test_kubernetes_previous_reads_the_container_before_its_restart(k8s):
    cluster, backend = k8s
    backend.submit(JobSpec(name="train", command=("python", "train.py"), project="lanes", max_restarts=1))
    pod = cluster.run_pods(NS, "train")[0]["metadata"]["name"]
    cluster.transition(NS, "train", "Running")
    cluster.append_log(NS, pod, "first try", at=time.time() - 5)
    with pytest.raises(NotFoundError, match="no previous attempt"):  # not restarted yet
        list(backend.logs("train", previous=True))
    cluster.set_pod_phase(NS, pod, "Running", restart_count=1)
    cluster.append_log(NS, pod, "second try")
    assert [ln.text for ln in backend.logs("train", previous=True)] == ["first try"]
    with pytest.raises(SpecError, match="cannot be followed"):
        backend.logs("train", previous=True, follow=True)

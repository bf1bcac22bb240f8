"""Several backends from one home: a job verb on a bare name reads a remote job once, state.db's
sent_to is opened once per Client, the server's job list keeps a remote backend's read a while, and
`config forget-backend` over HTTP."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import dtrain
from dtrain import JobStatus
from dtrain.errors import NotFoundError
from dtrain.remotes import SentTo


class Counting:
    """A remote backend that holds the jobs named, counting each read of one (a cluster's GET)."""

    def __init__(self, name: str, jobs: tuple[str, ...] = ("cifar",)):
        self.name = name
        self.jobs = set(jobs)
        self.gets = 0
        self.deleted: list[str] = []

    def get(self, job):
        self.gets += 1
        if job not in self.jobs:
            raise NotFoundError(f"no job named {job!r}")
        return SimpleNamespace(name=job, status=JobStatus.RUNNING)

    def delete(self, job, *, purge=False):
        self.deleted.append(job)
        return job


def test_a_verb_on_a_bare_name_reads_a_sent_to_job_once(home):
    """`_holder` found the job on the remote backend with a read, and `_found` read it again: each verb
    on a bare name of a job sent elsewhere was two GETs of the cluster (or DescribeTrainingJob)."""
    remote = Counting("kubernetes")
    client = dtrain.Client(home=home, backends={"kubernetes": remote})
    SentTo(home).record("kubernetes", "default")
    assert client.get("cifar").name == "cifar" and remote.gets == 1
    assert client.delete("cifar") == "cifar" and remote.gets == 2 and remote.deleted == ["cifar"]


def test_sent_to_is_opened_once_per_client_and_sees_other_processes_records(home):
    client = dtrain.Client(home=home, backends={"kubernetes": Counting("kubernetes")})
    assert client._sent_to.read() == [] and client._sent_to.opened == 0  # no database: none is made
    SentTo(home).record("kubernetes", "default")  # another process's record
    for _ in range(5):
        client.get("cifar")
    assert client._sent_to.opened == 1
    SentTo(home).record("sagemaker", "default")
    assert client._sent_to.read() == [("kubernetes", "default"), ("sagemaker", "default")]
    SentTo(home).forget("sagemaker")
    assert client._sent_to.read() == [("kubernetes", "default")] and client._sent_to.opened == 1


@pytest.fixture
def serve(home):
    """`serve(**create_app's options)`: an API server on that home, stopped at the end; its URL."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from dtrain.server.app import create_app
    from server_util import ThreadServer

    servers = []

    def start(**options):
        servers.append(ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600, **options)))
        return servers[-1].url + "/api/v1"

    yield start
    for server in servers:
        server.stop()


@pytest.mark.slow
def test_forget_backend_over_http_as_the_sdk_with_the_servers_guard(home, serve):
    import httpx

    url = serve()
    missing = httpx.post(f"{url}/backends/kubernetes/forget")
    assert missing.status_code == 404 and missing.json()["error"] == (
        "backend 'kubernetes' is not one this home's submit --backend sent jobs to (those remembered: none); "
        "nothing was forgotten")
    bad = httpx.post(f"{url}/backends/Kube_rnetes/forget")
    assert bad.status_code == 422 and "backend" in bad.json()["error"], bad.text
    SentTo(home).record("kubernetes", "default")
    SentTo(home).record("sagemaker", "default")
    done = httpx.post(f"{url}/backends/kubernetes/forget")
    assert done.status_code == 200 and done.json() == {"backend": "kubernetes", "still_asked": []}
    assert SentTo(home).read() == [("sagemaker", "default")]
    assert httpx.post(f"{serve(read_only=True)}/backends/sagemaker/forget").status_code == 403
    token = "t" * 40
    guarded = serve(token=token)
    assert httpx.post(f"{guarded}/backends/sagemaker/forget").status_code == 401
    assert SentTo(home).read() == [("sagemaker", "default")]  # refused: nothing forgotten
    assert httpx.post(f"{guarded}/backends/sagemaker/forget",
                      headers={"Authorization": f"Bearer {token}"}).json()["backend"] == "sagemaker"
    assert SentTo(home).read() == []


def test_a_gone_sent_to_backend_names_the_http_route_to_forget_it(home, serve):
    """The list's warning over HTTP names the route, not the CLI's command."""
    import httpx

    class Gone:
        name = "kubernetes"

        def list(self, project=None):
            from dtrain.errors import BackendError
            raise BackendError("connection refused")

    SentTo(home).record("kubernetes", "default")
    client = dtrain.Client(home=home, backends={"kubernetes": Gone()})
    client.door = "http"
    listed = client.list()
    assert [n.message.rsplit(": ", 1)[-1] for n in listed.notices] == ["POST /api/v1/backends/kubernetes/forget"]

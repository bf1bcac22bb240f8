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


def test_a_gone_sent_to_backend_names_the_http_route_to_forget_it(home):
    """The list's warning over HTTP names the route, not the CLI's command."""
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


class Listing:
    """A remote backend's job list, counting its reads; `down`: it does not answer (a gone cluster)."""

    def __init__(self, name: str, *, down: bool = False):
        self.name, self.down, self.lists = name, down, 0

    def list(self, project=None):
        from dtrain.backends.base import Listed
        from dtrain.errors import BackendError
        self.lists += 1
        if self.down:
            raise BackendError(f"the {self.name} cluster did not answer in 10 s")
        return Listed([SimpleNamespace(name="cifar", status=JobStatus.RUNNING, created=1.0)])


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self):
        return self.now


def test_the_servers_list_of_every_project_reads_a_remote_backend_once_a_while(home):
    """Each dashboard refresh (GET /jobs) asked every remote backend, and one that did not answer made each
    wait for its timeout: the server's clients share its answer, or its error, for RemoteReads' ttl, and
    say when rows are of an earlier read; the SDK and the CLI read live."""
    from dtrain.remotes import RemoteReads
    SentTo(home).record("kubernetes", "default")
    SentTo(home).record("sagemaker", "default")
    up, gone = Listing("kubernetes"), Listing("sagemaker", down=True)
    clock = Clock()
    reads = RemoteReads(30, clock=clock)
    servers = []
    for _ in range(2):  # two of the server's threads
        c = dtrain.Client(home=home, backends={"kubernetes": up, "sagemaker": gone})
        c.share_remote_reads(reads)
        servers.append(c)
    first = servers[0].list()
    assert up.lists == 1 and gone.lists == 1
    assert [n.code for n in first.notices] == ["jobs-unlisted"]
    clock.now += 12
    again = servers[1].list()
    assert up.lists == 1 and gone.lists == 1  # not asked again: no wait for the one that does not answer
    assert [n.message for n in again.notices if n.code == "jobs-cached"] == [
        "jobs on the kubernetes backend as read 12 s ago (the server reads a remote backend at most once each 30 s)"]
    assert [n.code for n in again.notices if n.code == "jobs-unlisted"] == ["jobs-unlisted"]  # missing, said still
    clock.now += 30
    servers[0].list()
    assert up.lists == 2 and gone.lists == 2
    live = dtrain.Client(home=home, backends={"kubernetes": up, "sagemaker": gone})
    live.list()
    live.list()
    assert up.lists == 4 and gone.lists == 4


def test_a_bare_name_on_two_sent_to_backends_names_each_in_the_doors_words(home):
    """The SDK was told backend='kubernetes', which only get() takes, and the HTTP API a body field: each
    door names what reaches the job with any verb there, and the SDK's words do."""
    from dtrain.errors import ConflictError
    SentTo(home).record("kubernetes", "default")
    SentTo(home).record("sagemaker", "default")
    both = {"kubernetes": Counting("kubernetes"), "sagemaker": Counting("sagemaker")}
    said = {}
    for door in ("sdk", "http", "cli"):
        client = dtrain.Client(home=home, backends=both)
        client.door = door
        with pytest.raises(ConflictError) as err:
            client.delete("cifar")
        said[door] = str(err.value).split(": give ")[1]
    assert said == {
        "sdk": "dtrain.Client(backend='kubernetes') or dtrain.Client(backend='sagemaker'); nothing was changed",
        "http": "the job routes of `dtrain --backend kubernetes server` or the job routes of `dtrain --backend "
                "sagemaker server`; nothing was changed",
        "cli": "--backend kubernetes or --backend sagemaker; nothing was changed"}
    assert not both["kubernetes"].deleted and not both["sagemaker"].deleted
    dtrain.Client(home=home, backend="sagemaker", backends=both).delete("cifar")  # what the SDK's words say
    assert both["sagemaker"].deleted == ["cifar"] and not both["kubernetes"].deleted

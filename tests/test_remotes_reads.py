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
        "sdk": "backend='kubernetes' or backend='sagemaker'; nothing was changed",
        "http": "?backend=kubernetes or ?backend=sagemaker; nothing was changed",
        "cli": "--backend kubernetes or --backend sagemaker; nothing was changed"}
    assert not both["kubernetes"].deleted and not both["sagemaker"].deleted
    dtrain.Client(home=home, backends=both).delete("cifar", backend="sagemaker")  # what the SDK's words say
    assert both["sagemaker"].deleted == ["cifar"] and not both["kubernetes"].deleted


class Holding:
    """A remote backend holding job 'cifar' (of project default), recording each verb that reached it."""

    def __init__(self, name: str):
        self.name = name
        self.did: list[str] = []

    def _info(self, status=JobStatus.RUNNING):
        from dtrain.backends.base import JobInfo
        spec = dtrain.JobSpec(name="cifar", command=("python", "t.py"), backend=self.name)
        return JobInfo(name="cifar", spec=spec, status=status, backend=self.name, created=1.0)

    def get(self, job):
        if job != "cifar":
            raise NotFoundError(f"no job named {job!r}")
        return self._info()

    def _verb(self, verb, status=JobStatus.RUNNING):
        self.did.append(verb)
        return self._info(status)

    def delete(self, job, *, purge=False):
        return self._verb("delete", JobStatus.DELETED)

    def suspend(self, job):
        return self._verb("suspend", JobStatus.SUSPENDED)

    def resume(self, job, *, waiting=None):
        return self._verb("resume")

    def wait(self, job, *, timeout=None, command=None, door="sdk"):
        return self._verb("wait", JobStatus.SUCCEEDED)

    def logs(self, job, **query):
        from dtrain.backends.base import LogLine
        self.did.append("logs")
        return [LogLine(rank=0, time=1.0, text=f"on {self.name}")]


@pytest.fixture
def two(home):
    """Job 'cifar' on two backends this home sent jobs to: a bare name is refused."""
    SentTo(home).record("kubernetes", "default")
    SentTo(home).record("sagemaker", "default")
    return {"kubernetes": Holding("kubernetes"), "sagemaker": Holding("sagemaker")}


def test_every_sdk_job_verb_takes_the_backend_the_several_holders_refusal_names(home, two):
    """Only get() took backend=: a job on two backends could be read but not deleted, suspended,
    resumed, waited for or its logs read without a second Client."""
    client = dtrain.Client(home=home, backends=two)
    assert client.get("cifar", backend="sagemaker").backend == "sagemaker"
    assert client.suspend("cifar", backend="sagemaker").status == JobStatus.SUSPENDED
    assert client.resume("cifar", backend="sagemaker").backend == "sagemaker"
    assert client.wait("cifar", backend="sagemaker").status == JobStatus.SUCCEEDED
    assert [line.text for line in client.logs("cifar", backend="sagemaker")] == ["on sagemaker"]
    assert client.delete("cifar", backend="sagemaker").status == JobStatus.DELETED
    assert two["sagemaker"].did == ["suspend", "resume", "wait", "logs", "delete"] and two["kubernetes"].did == []


def test_a_job_verbs_backend_that_names_no_backend_is_refused_naming_those_that_exist(home, monkeypatch):
    """An unknown name is one line; a backend with no settings here is used all the same (SageMaker's
    --local jobs need none, a cluster behind the default kubeconfig none), refused only where it cannot
    be opened (no kubeconfig), quoting why."""
    from dtrain.errors import NotFoundError, SpecError
    client = dtrain.Client(home=home)
    with pytest.raises(SpecError, match=r"^unknown backend 'kube'; use one of local, kubernetes, sagemaker$"):
        client.delete("cifar", backend="kube")
    with pytest.raises(NotFoundError, match=r"SageMaker job 'cifar' not found .*AWS is not configured"):
        client.suspend("cifar", backend="sagemaker")
    monkeypatch.setenv("KUBECONFIG", str(home) + "/no-kubeconfig")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    with pytest.raises(NotFoundError, match=r"^backend 'kubernetes' cannot be used from this home: no usable Kubernetes "
                                        r"configuration \(no kubeconfig at KUBECONFIG="):
        client.wait("cifar", backend="kubernetes")


def test_the_http_job_routes_take_a_backend_query_checked_and_guarded(home, two):
    """No job route read a backend: a job on two backends was out of reach but from a server started for one."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    import httpx
    from dtrain.server.app import create_app
    from server_util import ThreadServer

    servers = []

    def serve(**options):
        servers.append(ThreadServer(create_app(lambda: dtrain.Client(home=home, backends=two), sample_every=3600,
                                               **options)))
        return servers[-1].url + "/api/v1/jobs/cifar"

    try:
        url = serve()
        bare = httpx.get(url)
        assert bare.status_code == 409 and bare.json()["error"].endswith(
            "give ?backend=kubernetes or ?backend=sagemaker; nothing was changed"), bare.text
        q = {"backend": "sagemaker"}
        assert httpx.get(url, params=q).json()["backend"] == "sagemaker"
        assert httpx.get(f"{url}/logs", params=q).json() == [{"rank": 0, "time": 1.0, "text": "on sagemaker"}]
        stream = httpx.get(f"{url}/logs/stream", params=q)
        assert 'data: {"rank": 0, "time": 1.0, "text": "on sagemaker"}' in stream.text
        assert httpx.post(f"{url}/suspend", params=q).json()["status"] == "Suspended"
        assert httpx.post(f"{url}/resume", params=q).json()["status"] == "Running"
        assert httpx.get(f"{url}/wait", params=q).json()["status"] == "Succeeded"
        assert httpx.delete(url, params=q).json()["status"] == "Deleted"
        assert two["sagemaker"].did == ["logs", "logs", "suspend", "resume", "wait", "delete"]
        assert two["kubernetes"].did == []
        unknown = httpx.delete(url, params={"backend": "kube"})
        assert unknown.status_code == 422 and unknown.json()["error"] == (  # the schema's enum: fuzzers keep to it
            "invalid request: query.backend: Input should be 'local', 'kubernetes' or 'sagemaker'"), unknown.text
        assert httpx.delete(serve(read_only=True), params=q).status_code == 403
        token = "t" * 40
        guarded = serve(token=token)
        assert httpx.post(f"{guarded}/suspend", params=q).status_code == 401
        assert two["sagemaker"].did[-1] == "delete"  # refused: not reached
        assert httpx.post(f"{guarded}/suspend", params=q,
                          headers={"Authorization": f"Bearer {token}"}).json()["status"] == "Suspended"
    finally:
        for server in servers:
            server.stop()


def test_a_kept_error_says_how_old_it_is_as_a_kept_answer_does(home):
    """The server gives a remote backend's error again for RemoteReads' ttl, as it gives an answer: the
    answer's notice said how old it was, the error's "not listed" did not (a cluster back up for 25 s still
    read as down now)."""
    from dtrain.remotes import RemoteReads
    SentTo(home).record("kubernetes", "default")
    SentTo(home).record("sagemaker", "default")
    up, gone = Listing("kubernetes"), Listing("sagemaker", down=True)
    clock = Clock()
    reads = RemoteReads(30, clock=clock)
    client = dtrain.Client(home=home, backends={"kubernetes": up, "sagemaker": gone})
    client.share_remote_reads(reads)
    fresh = [n.message for n in client.list().notices if n.code == "jobs-unlisted"]
    assert fresh == ["jobs on the sagemaker backend (where this home's submit --backend sagemaker sent jobs) not "
                     "listed, the others are: the sagemaker cluster did not answer in 10 s; to stop asking it (a "
                     "cluster that is gone): dtrain.Client().forget_backend('sagemaker')"]
    clock.now += 12
    kept = [n.message for n in client.list().notices if n.code == "jobs-unlisted"]
    assert gone.lists == 1 and kept == [
        "jobs on the sagemaker backend (where this home's submit --backend sagemaker sent jobs) not listed as read "
        "12 s ago (the server reads a remote backend at most once each 30 s), the others are: the sagemaker "
        "cluster did not answer in 10 s; to stop asking it (a cluster that is gone): "
        "dtrain.Client().forget_backend('sagemaker')"]
    live = dtrain.Client(home=home, backends={"kubernetes": up, "sagemaker": gone})  # the SDK reads live: no age
    assert [n.message for n in live.list().notices if n.code == "jobs-unlisted"] == fresh


def test_volume_job_takes_the_backend_every_job_verb_takes(home, two):
    """The lineage's look-up of a snapshot's job took no backend=, unlike every other SDK job verb: a
    job on another backend than the project's was out of its reach."""
    from dtrain.errors import SpecError
    client = dtrain.Client(home=home, backends=two)
    assert client.volume_job("cifar", backend="sagemaker").backend == "sagemaker"
    assert client.volume_job("cifar", backend="kubernetes").backend == "kubernetes"
    with pytest.raises(SpecError, match=r"^unknown backend 'kube'; use one of "):
        client.volume_job("cifar", backend="kube")
    with pytest.raises(NotFoundError, match=r"^no job named 'other'"):
        client.volume_job("other", backend="sagemaker")


def test_each_backend_says_whether_it_can_be_opened_and_the_client_asks_it(home, monkeypatch):
    """check_backend reached past the interface (a Kubernetes backend's `api`, by name) to tell a backend that
    cannot be opened from one that can: each backend says it (Backend.opened_problem), and the client asks
    whichever backend a job verb names."""
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    from dtrain.errors import NotFoundError
    monkeypatch.setenv("KUBECONFIG", str(home) + "/no-kubeconfig")
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    client = dtrain.Client(home=home)
    assert client.backend("local").opened_problem() is None
    assert client.backend("sagemaker").opened_problem() is None  # no AWS: its --local jobs are there still
    assert client.backend("kubernetes").opened_problem().startswith(
        "no usable Kubernetes configuration (no kubeconfig at KUBECONFIG=")
    monkeypatch.setattr(SageMakerBackend, "_opened_problem", lambda self: "no AWS here")
    with pytest.raises(NotFoundError, match=r"^backend 'sagemaker' cannot be used from this home: no AWS here$"):
        dtrain.Client(home=home).suspend("cifar", backend="sagemaker")


def test_a_kubernetes_backend_with_a_usable_configuration_can_be_opened(home):
    pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
    from kubernetes import client as k8s

    from dtrain.backends.kubernetes.backend import KubernetesBackend
    from dtrain.backends.kubernetes.config import KubernetesConfig
    made = KubernetesBackend(KubernetesConfig(), api_client=k8s.ApiClient(k8s.Configuration()))
    assert made.opened_problem() is None  # the client is made; nothing is asked of a cluster yet

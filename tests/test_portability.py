"""One job across backends (local, Kubernetes, SageMaker), through the CLI, the SDK and the HTTP API:

- `dtrain list -A` in a new process showed a job submitted with `--backend kubernetes` only where
  config.yaml's `project_backends` sent a project there: what a client submitted was kept in its
  memory alone. Every backend config.yaml has settings for is now read, the table has a BACKEND
  column, and one that does not answer is one warning line.
- A SageMaker dry run whose endpoint did not answer waited botocore's 60 s connect timeout and its
  retries (5 attempts, with backoff) on each read-only check: the dry run's clients now connect
  within 5 s and do not retry, and the one warning names the endpoint and $AWS_ENDPOINT_URL when set.
- SageMaker not configured told the SDK and the HTTP API to "submit with --local" (the CLI's flag), and
  an HTTP body whose `sagemaker` options chose SageMaker on a local project did not say they had: each
  door now names its own fix (sagemaker={'local': True}, "sagemaker": {"local": true}, "backend").
- With no `kubernetes:` settings (the default kubeconfig), a job sent with `--backend kubernetes` was
  missed by `list -A` in a new process: state.db's `sent_to` table now remembers where submits went.
- Each /metrics scrape read the cluster (or AWS) anew: a remote backend's counts are kept 30 s for every
  server thread, and one that cannot be read is one warning, again only when its error changes.
"""

from __future__ import annotations

import logging
import socket

import pytest
import yaml

import dtrain
from test_audit14_portable import kube  # noqa: F401  (its fixture: config.yaml with the fake API server)


def _closed_port() -> int:
    """A local port nothing listens on (bound, then closed): a connection there is refused at once."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


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


@pytest.mark.slow  # botocore's models load: seconds
def test_a_dry_run_asks_an_endpoint_that_does_not_answer_once_and_names_it(tmp_path, caplog, monkeypatch):
    """A closed local port stands for an unreachable endpoint (nothing goes on the network): each
    read-only check asks once, with a short connect timeout, and the one warning names the endpoint
    and the variable that sent the calls there."""
    boto3 = pytest.importorskip("boto3", reason="the 'sagemaker' extra is not installed")
    from test_sagemaker_backend import CFG, spec
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    (tmp_path / "train.py").write_text("print('training')\n")
    nowhere = f"http://127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("AWS_ENDPOINT_URL", nowhere)
    monkeypatch.delenv("AWS_RETRY_MODE", raising=False)
    monkeypatch.delenv("AWS_MAX_ATTEMPTS", raising=False)
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                    region_name=CFG.region)
    sent = []
    session.events.register("before-send", lambda request, **_: sent.append(request.url))
    be = SageMakerBackend(CFG, session=session, cwd=str(tmp_path))
    with caplog.at_level(logging.WARNING):
        requests = be.render(spec("dry-nowhere", sm={"channels": (f"training=s3://{CFG.bucket}/a",)}))
    assert len(sent) == 1 and sent[0].startswith(nowhere), sent  # the first check, once: no retry, no other check
    from dtrain.backends.sagemaker.clients import QUICK_CONNECT_TIMEOUT
    assert {c.meta.config.connect_timeout for c in (be.quick_aws.sagemaker, be.quick_aws.s3)} == {QUICK_CONNECT_TIMEOUT}
    [warned] = [r.getMessage() for r in caplog.records if r.getMessage().startswith("dtrain: warning:")]
    assert f'cannot reach AWS (Could not connect to the endpoint URL: "{nowhere}/")' in warned, warned
    assert f"check the network, or $AWS_ENDPOINT_URL ({nowhere}; unset it to call AWS itself)" in warned
    assert requests[-1]["SageMaker.CreateTrainingJob"]["TrainingJobName"] == "dry-nowhere"


UNCONFIGURED = ("SageMaker is not configured (--role and --bucket missing): run 'dtrain config sagemaker --role "
                "arn:aws:iam::ACCOUNT:role/ROLE --bucket BUCKET --region REGION', or submit with {} to run here")


@pytest.mark.slow  # the HTTP app: seconds
def test_sagemaker_not_configured_names_the_sdk_argument_and_the_json_field(home):
    from fastapi.testclient import TestClient

    from dtrain.errors import SpecError
    from dtrain.server.app import create_app
    job = dtrain.JobSpec(name="sm", command=["python", "t.py"], backend="sagemaker",
                         sagemaker={"instance_type": "ml.m5.xlarge"})
    client = dtrain.Client(home=home)
    for call in (client.submit, client.render):
        with pytest.raises(SpecError) as refused:
            call(job)
        assert str(refused.value) == UNCONFIGURED.format("sagemaker={'local': True}")
    http = TestClient(create_app(lambda: dtrain.Client(home=home), sample_every=3600), base_url="http://127.0.0.1:8000")
    body = {"name": "sm", "command": ["python", "t.py"], "sagemaker": {"instance_type": "ml.m5.xlarge"}}
    posted = http.post("/api/v1/jobs", json=body)  # the options chose SageMaker: said, in the body's words
    assert posted.status_code == 422 and posted.json()["error"] == (
        'the SageMaker options (instance_type) need "backend": "sagemaker" (this project\'s backend is local), and '
        + UNCONFIGURED.format('"sagemaker": {"local": true}') + " (or leave them out to run on backend local)")
    posted = http.post("/api/v1/jobs", json={**body, "backend": "sagemaker"})
    assert posted.json()["error"] == UNCONFIGURED.format('"sagemaker": {"local": true}')
    local = http.post("/api/v1/jobs", json={**body, "sagemaker": {"local": True}})  # the fix it names is taken
    assert "not configured" not in local.text


@pytest.fixture
def kubeconfig_only(dt, tmp_path, monkeypatch):
    """The shipped fake API server behind the default kubeconfig ($KUBECONFIG, here and in `dt`'s commands),
    with no `kubernetes:` settings in config.yaml."""
    pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
    server = FakeKubeServer(FakeCluster()).start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    dt.env["KUBECONFIG"] = str(tmp_path / "kubeconfig")
    yield server
    server.close()


@pytest.mark.slow
def test_list_all_shows_a_job_sent_to_kubernetes_without_kubernetes_settings(dt, home, kubeconfig_only):
    """No `kubernetes:` in config.yaml (the default kubeconfig, $KUBECONFIG): the home's state.db remembers
    where `submit --backend` sent jobs, so a new process lists them; a backend that lists none is forgotten."""
    from dtrain.remotes import SentTo
    cluster = kubeconfig_only.cluster
    job = dtrain.JobSpec(name="cifar", command=["python", "train.py"], backend="kubernetes", image="img:1")
    dtrain.Client(home=home).submit(job)  # this client, and what it remembers, end here
    assert not (home / "config.yaml").exists() or "kubernetes" not in (home / "config.yaml").read_text()
    proc = dt("list", "-A")
    assert [(r.split()[0], r.split()[6]) for r in proc.stdout.splitlines()[1:]] == [("cifar", "kubernetes")]
    assert proc.stderr == ""
    assert [(j.name, j.backend) for j in dtrain.Client(home=home).list()] == [("cifar", "kubernetes")]

    missed = dt("delete", "nope", "--purge", check=False)  # a bare name found nowhere: the hint names where to look
    assert "dtrain --backend kubernetes list" in missed.stderr
    assert "cifar" in dt("describe", "cifar").stdout  # a bare name: the one sent_to backend that has it
    dt("delete", "cifar", "--purge")
    cluster.finish_deletions()
    assert dtrain.Client(home=home).list() == [] and SentTo(home).read() == []  # forgotten: not walked
    cluster.requests.clear()
    dt("list", "-A")
    assert cluster.requests == []


def test_an_old_home_without_the_sent_to_table_lists_and_records(home):
    """A state.db of before (no `sent_to` table) is read as 'nothing sent elsewhere', then gains the table."""
    import sqlite3

    from dtrain.remotes import SentTo
    dtrain.Client(home=home).list()  # makes state.db as an older dtrain did: the job tables only
    with sqlite3.connect(home / "state.db") as conn:
        conn.execute("DROP TABLE IF EXISTS sent_to")
    assert SentTo(home).read() == []
    SentTo(home).record("kubernetes", "team-a")
    SentTo(home).record("kubernetes", "team-b")
    assert SentTo(home).read() == [("kubernetes", "team-b")]


@pytest.mark.slow
def test_metrics_scrapes_read_the_cluster_once_per_ttl(home, kube):
    """/metrics read the cluster's five job kinds at each scrape (every 15 s): a remote backend's counts are
    now kept REMOTE_TTL_S for every thread of the server, the local ones read at each scrape."""
    from fastapi.testclient import TestClient

    from dtrain.server.app import create_app
    dtrain.Client(home=home).submit(dtrain.JobSpec(name="cifar", command=["python", "train.py"], backend="kubernetes"))
    http = TestClient(create_app(lambda: dtrain.Client(home=home), sample_every=3600), base_url="http://127.0.0.1:8000")
    kube.cluster.requests.clear()
    scrapes = [http.get("/metrics").text for _ in range(3)]
    assert all('dtrain_jobs{project="default",status="Pending"} 1.0' in s for s in scrapes)
    first = len(kube.cluster.requests)
    assert 0 < first <= 6  # one read: the job kinds' lists (and the unfinished job's pods), not three
    assert http.get("/api/v1/jobs").json()[0]["name"] == "cifar"  # the lists are read live, as before
    assert len(kube.cluster.requests) > first


def test_remote_reads_are_kept_for_the_ttl_and_an_error_is_logged_once_then_on_change(caplog):
    from dtrain.errors import BackendError
    from dtrain.remotes import RemoteReads
    now = [0.0]
    reads = RemoteReads(30, clock=lambda: now[0])
    calls = []

    def failing(message):
        def read():
            calls.append(message)
            raise BackendError(message)
        return read

    with caplog.at_level(logging.WARNING, logger="dtrain.server"):
        for step in range(4):  # a scrape each 15 s: read at 0 s and 30 s only, logged once
            now[0] = step * 15.0
            with pytest.raises(BackendError):
                reads.get("sagemaker", failing("Unable to locate credentials"))
        assert calls == ["Unable to locate credentials"] * 2
        assert len(caplog.records) == 1 and "Unable to locate credentials" in caplog.records[0].getMessage()
        now[0] = 60.0
        with pytest.raises(BackendError):
            reads.get("sagemaker", failing("ExpiredToken"))  # another error: said
        now[0] = 90.0
        assert reads.get("sagemaker", lambda: "counted") == "counted"  # answering again: said
        now[0] = 100.0
        assert reads.get("sagemaker", lambda: "not read") == "counted"
    assert [r.getMessage().split(": ")[-1] for r in caplog.records][1:] == [
        "ExpiredToken", "jobs on the sagemaker backend are counted in /metrics again"]


@pytest.mark.slow
def test_a_bare_name_reaches_the_job_sent_to_kubernetes_and_a_local_one_first(dt, home, kubeconfig_only):
    """describe/logs/wait/delete NAME in a new process, of a job sent with --backend kubernetes (no
    `kubernetes:` settings): the one recorded backend that has it is used; a local job of that name first."""
    cluster = kubeconfig_only.cluster
    for name in ("cifar", "both"):
        dtrain.Client(home=home).submit(dtrain.JobSpec(name=name, command=["python", "train.py"],
                                                      backend="kubernetes", image="img:1"))
    described = dt("describe", "cifar")
    assert "kubernetes" in described.stdout and described.stderr == ""
    assert dt("logs", "cifar", check=False).returncode == 0
    waited = dt("wait", "cifar", "--timeout", "0.1", check=False)
    assert "no job named" not in waited.stderr and "dtrain --backend kubernetes describe job cifar" in waited.stderr
    dt("submit", "both", "--", "python", "-c", "pass")  # the local backend's job of that name
    dt("wait", "both")
    assert "Succeeded" in dt("describe", "both").stdout  # the local one, not the cluster's (Pending there)
    dt("delete", "cifar")
    assert cluster.requests and any(r[0] == "DELETE" and "cifar" in r[1] for r in cluster.requests)


def test_a_bare_name_on_several_sent_to_backends_is_refused_naming_each(home):
    """A job of that name on two backends `submit --backend` sent jobs to: one line naming each --backend form."""
    from dtrain.errors import ConflictError
    from dtrain.remotes import SentTo

    class Holds:
        def __init__(self, name):
            self.name = name

        def get(self, job):
            return job

    client = dtrain.Client(home=home, backends={"kubernetes": Holds("kubernetes"), "sagemaker": Holds("sagemaker")})
    SentTo(home).record("kubernetes", "default")
    assert client.get("cifar") == "cifar"  # one holds it: used
    SentTo(home).record("sagemaker", "default")
    with pytest.raises(ConflictError) as err:
        client.get("cifar")
    assert str(err.value) == ("job 'cifar' is on 2 backends this home sent jobs to: give "
                              "backend='kubernetes' or backend='sagemaker'; nothing was changed")


@pytest.mark.slow
def test_a_sent_to_cluster_that_is_gone_warns_naming_how_to_forget_it(dt, home, tmp_path, monkeypatch):
    """A backend only `submit --backend` made list -A ask, whose cluster is gone, warned at each list until
    it answered: the warning names `dtrain config forget-backend kubernetes`, which stops it."""
    pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")
    from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
    from dtrain.remotes import SentTo
    server = FakeKubeServer(FakeCluster()).start()
    server.write_kubeconfig(tmp_path / "kubeconfig")
    monkeypatch.setenv("KUBECONFIG", str(tmp_path / "kubeconfig"))
    dt.env["KUBECONFIG"] = str(tmp_path / "kubeconfig")
    try:
        dtrain.Client(home=home).submit(dtrain.JobSpec(name="cifar", command=["python", "train.py"],
                                                      backend="kubernetes", image="img:1"))
    finally:
        server.close()  # the cluster is gone
    dt("submit", "here", "--", "python", "-c", "pass")
    warned = dt("list", "-A")
    assert "here" in warned.stdout and warned.stderr.count("\n") == 1, warned.stderr
    assert warned.stderr.startswith("dtrain: warning: jobs on the kubernetes backend (where this home's submit "
                                    "--backend kubernetes sent jobs) not listed")
    assert warned.stderr.rstrip().endswith("; to stop asking it (a cluster that is gone): "
                                           "dtrain config forget-backend kubernetes"), warned.stderr
    assert "Forgot backend kubernetes" in dt("config", "forget-backend", "kubernetes").stdout
    assert SentTo(home).read() == []
    quiet = dt("list", "-A")
    assert "here" in quiet.stdout and quiet.stderr == ""
    assert "nothing was forgotten" in dt("config", "forget-backend", "kubernetes", check=False).stderr


def test_forget_backend_drops_a_sent_to_backend_and_says_what_still_asks_it(home):
    from dtrain.errors import NotFoundError
    from dtrain.remotes import SentTo
    client = dtrain.Client(home=home)
    with pytest.raises(NotFoundError, match=r"^backend 'kubernetes' is not one this home's submit --backend sent jobs "
                                            r"to \(those remembered: none\); nothing was forgotten$"):
        client.forget_backend("kubernetes")
    SentTo(home).record("kubernetes", "default")
    SentTo(home).record("sagemaker", "default")
    assert client.forget_backend("kubernetes").still_asked == () and SentTo(home).read() == [("sagemaker", "default")]
    (home / "config.yaml").write_text("project_backends:\n  team-b: sagemaker\n")
    assert dtrain.Client(home=home).forget_backend("sagemaker").still_asked == (
        "project team-b's backend (config.yaml's project_backends)",)

"""The SageMaker backend through boto3: a real moto server on 127.0.0.1 for S3, training jobs and
CloudWatch Logs; botocore's Stubber for what moto lacks (StopTrainingJob, status sequences, errors).
Clients are injected through the constructor."""

from __future__ import annotations

import io
import json
import socket
import tarfile
import time
from datetime import datetime, timedelta, timezone

import pytest

boto3 = pytest.importorskip("boto3")
from botocore.stub import Stubber  # noqa: E402
from moto.server import ThreadedMotoServer  # noqa: E402

from dtrain.backends.base import JobStatus  # noqa: E402
from dtrain.backends.sagemaker.backend import Clients, SageMakerBackend  # noqa: E402
from dtrain.backends.sagemaker.config import SageMakerConfig  # noqa: E402
from dtrain.errors import BackendError, ConflictError, DataError, DtrainError, NotFoundError, SpecError  # noqa: E402
from dtrain.spec import JobSpec  # noqa: E402
from dtrain.spec_sagemaker import SageMakerOptions  # noqa: E402

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
CFG = SageMakerConfig(role=ROLE, bucket="dtrain-test", region="us-east-1")
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def moto_url():
    port = _free_port()
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    yield f"http://127.0.0.1:{port}"
    server.stop()


def session():
    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                 region_name="us-east-1")


@pytest.fixture(scope="module")  # making clients loads botocore's models: seconds each, so once
def clients(moto_url):
    s = session()
    c = Clients(*(s.client(n, endpoint_url=moto_url) for n in ("sagemaker", "s3", "logs")))
    try:
        c.s3.create_bucket(Bucket=CFG.bucket)
    except c.s3.exceptions.BucketAlreadyOwnedByYou:
        pass
    return c


@pytest.fixture
def code(tmp_path):
    src = tmp_path / "code"
    (src / ".git").mkdir(parents=True)
    (src / ".git" / "HEAD").write_text("ref")
    for secret in (".env", ".aws/credentials", ".ssh/id_rsa", "conf/.netrc"):  # where keys live
        (src / secret).parent.mkdir(parents=True, exist_ok=True)
        (src / secret).write_text("secret")
    (src / "train.py").write_text("print('hi')\n")
    return src


def spec(name: str, **kw) -> JobSpec:
    sm = kw.pop("sm", {})
    return JobSpec(name=name, command=("python", "train.py", "--epochs", "2"), backend="sagemaker",
                   sagemaker=SageMakerOptions(**sm), **kw)


def test_submit_uploads_code_and_creates_the_job(clients, code):
    be = SageMakerBackend(CFG, clients=clients, cwd=str(code))
    s = spec("moto-submit", processes=2, launcher="torchrun", sm=dict(spot=True, max_runtime=600))
    info = be.submit(s)
    assert info.name == "moto-submit" and info.spec == s  # the spec comes back from S3
    body = clients.s3.get_object(Bucket=CFG.bucket, Key="dtrain/moto-submit/source/sourcedir.tar.gz")["Body"].read()
    with tarfile.open(fileobj=io.BytesIO(body)) as tar:
        assert tar.getnames() == ["train.py"]  # hidden files (.git, .env, .aws, .ssh) are never shipped
    desc = clients.sagemaker.describe_training_job(TrainingJobName="moto-submit")
    assert json.loads(desc["HyperParameters"]["epochs"]) == "2"
    assert desc["ResourceConfig"]["InstanceCount"] == 2 and desc["EnableManagedSpotTraining"] is True
    assert info.extra["model_artifacts"] == "s3://dtrain-test/dtrain/moto-submit/output/model.tar.gz"
    assert "moto-submit" in [j.name for j in be.list()]
    assert be.get("moto-submit").spec.processes == 2
    with pytest.raises(NotFoundError, match="dtrain list"):
        be.get("no-such-job")
    before = clients.s3.get_object(Bucket=CFG.bucket, Key="dtrain/moto-submit/dtrain-spec.json")["Body"].read()
    with pytest.raises(ConflictError, match=r"free the name with 'dtrain delete moto-submit --purge'"):
        be.submit(spec("moto-submit"))
    assert clients.s3.get_object(Bucket=CFG.bucket, Key="dtrain/moto-submit/dtrain-spec.json")["Body"].read() == before


def _job_with_a_log_group(clients, name: str, hosts: int) -> str:
    """A training job of `hosts` hosts created on moto, and SageMaker's log group; the group's name."""
    from dtrain.backends.sagemaker.render import training_job_request

    clients.sagemaker.create_training_job(**training_job_request(spec(name, processes=hosts, launcher="torchrun"),
                                                                 CFG))
    group = "/aws/sagemaker/TrainingJobs"
    try:
        clients.logs.create_log_group(logGroupName=group)
    except clients.logs.exceptions.ResourceAlreadyExistsException:
        pass
    return group


def test_logs_one_stream_per_host(clients):
    be = SageMakerBackend(CFG, clients=clients)
    group = _job_with_a_log_group(clients, "moto-logs", 3)  # three hosts; two of them have logged
    t = int(time.time() * 1000) - 60_000  # CloudWatch (and moto) drop events older than 14 days
    for host, lines in ((1, ["a1", "a2"]), (2, ["b1"])):
        stream = f"moto-logs/algo-{host}-1767225600"
        clients.logs.create_log_stream(logGroupName=group, logStreamName=stream)
        clients.logs.put_log_events(logGroupName=group, logStreamName=stream,
                                    logEvents=[{"timestamp": t + 10 * i + host, "message": m}
                                               for i, m in enumerate(lines)])
    assert [(ln.rank, ln.text) for ln in be.logs("moto-logs")] == [(0, "a1"), (1, "b1"), (0, "a2")]
    assert [ln.text for ln in be.logs("moto-logs", rank=1)] == ["b1"]
    assert [ln.text for ln in be.logs("moto-logs", tail=1)] == ["a2"]
    with pytest.raises(NotFoundError, match="no host for --rank 2"):
        list(be.logs("moto-logs", rank=2))
    with pytest.raises(SpecError, match="invalid rank 5"):  # beyond the job's processes: refused before AWS
        list(be.logs("moto-logs", rank=5))


def test_logs_before_the_log_group_exists_are_no_lines_yet(moto_url):
    """A fresh account: no job has logged, so CloudWatch has no /aws/sagemaker/TrainingJobs group.
    A region of its own on the shared moto server is such an account (log groups are per region)."""
    s = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="eu-west-1")
    fresh = Clients(*(s.client(n, endpoint_url=moto_url) for n in ("sagemaker", "s3", "logs")))
    be = SageMakerBackend(CFG, clients=fresh)
    fresh.sagemaker.create_training_job(**__import__("dtrain.backends.sagemaker.render", fromlist=["x"])
                                        .training_job_request(spec("moto-nogroup"), CFG))
    assert fresh.logs.describe_log_groups()["logGroups"] == []  # the case under test, not an empty stream
    assert list(be.logs("moto-nogroup")) == []
    assert list(be.logs("moto-nogroup", follow=True)) == []  # the job is Completed in moto: following ends


def test_following_waits_for_the_group_then_prints_its_lines(clients, stubbed):
    from dtrain.backends.sagemaker.logs import Pace
    stubbed_sm, sm = stubbed
    logs = session().client("logs")
    with Stubber(logs) as cw:
        be = SageMakerBackend(CFG, clients=Clients(stubbed_sm.aws.sagemaker, clients.s3, logs),
                              pace=Pace(first=1, most=1, status=2), sleep=lambda seconds: None)
        sm.add_response("describe_training_job", _desc("early", "InProgress", "Starting"), {"TrainingJobName": "early"})
        cw.add_client_error("describe_log_streams", service_error_code="ResourceNotFoundException",
                            service_message="The specified log group does not exist.")
        sm.add_response("describe_training_job", _desc("early", "InProgress", "Starting"), {"TrainingJobName": "early"})
        stream = {"logStreams": [{"logStreamName": "early/algo-1-1767225600"}]}
        cw.add_response("describe_log_streams", stream)  # 1 s waited
        # the first stream seen: the status is asked (is the stream this attempt's?), and counts as the follower's ask
        sm.add_response("describe_training_job", _desc("early", "InProgress", "Training"), {"TrainingJobName": "early"})
        cw.add_response("get_log_events", {"events": [{"timestamp": 1767225600000, "message": "hello\n"}],
                                           "nextForwardToken": "f/1"})
        cw.add_response("get_log_events", {"events": [], "nextForwardToken": "f/1"})
        cw.add_response("describe_log_streams", stream)  # 1 s since that ask
        cw.add_response("get_log_events", {"events": [], "nextForwardToken": "f/1"})
        cw.add_response("describe_log_streams", stream)  # 2 s since it: the status is asked again
        cw.add_response("get_log_events", {"events": [], "nextForwardToken": "f/1"})
        sm.add_response("describe_training_job", _desc("early", "Completed", "Completed"), {"TrainingJobName": "early"})
        cw.add_response("describe_log_streams", stream)  # one read after the end
        cw.add_response("get_log_events", {"events": [], "nextForwardToken": "f/1"})
        assert [(ln.rank, ln.text) for ln in be.logs("early", follow=True)] == [(0, "hello")]
        cw.assert_no_pending_responses()


def _model_tar(members) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for info, data in members:
            tar.addfile(info, io.BytesIO(data) if data is not None else None)
    return buf.getvalue()


def _file(name: str, data: bytes):
    info = tarfile.TarInfo(name)
    info.size = len(data)
    return info, data


def test_artifacts_download_and_unpack_safely(clients, code, tmp_path):
    be = SageMakerBackend(CFG, clients=clients, cwd=str(code))
    be.submit(spec("moto-art"))
    key = "dtrain/moto-art/output/model.tar.gz"
    clients.s3.put_object(Bucket=CFG.bucket, Key=key, Body=_model_tar([_file("model.pth", b"weights"),
                                                                       _file("sub/metrics.jsonl", b"{}")]))
    out = be.artifacts("moto-art", to=tmp_path / "out")
    assert (out / "model.pth").read_bytes() == b"weights" and (out / "sub" / "metrics.jsonl").exists()
    link = tarfile.TarInfo("evil")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
    hard = tarfile.TarInfo("hard")
    hard.type, hard.linkname = tarfile.LNKTYPE, "../../outside"
    for bad in ([_file("../escape", b"x")], [(link, None)], [(hard, None)]):
        clients.s3.put_object(Bucket=CFG.bucket, Key=key, Body=_model_tar(bad))
        with pytest.raises(DataError, match="refusing"):
            be.artifacts("moto-art", to=tmp_path / "bad")
        assert not (tmp_path / "bad").exists() and not (tmp_path / "escape").exists()
        assert not [p for p in tmp_path.iterdir() if p.name.startswith(".bad")]  # no staging left over
    # an absolute member name is kept inside the target, never written at /
    clients.s3.put_object(Bucket=CFG.bucket, Key=key, Body=_model_tar([_file("/abs-dtrain-test", b"x")]))
    assert (be.artifacts("moto-art", to=tmp_path / "abs") / "abs-dtrain-test").read_bytes() == b"x"


# ---------------------------------------------------------------- Stubber: what moto lacks


def _desc(name: str, primary: str, secondary: str, **kw) -> dict:
    transitions = [{"Status": s, "StartTime": T0 + timedelta(minutes=i), "StatusMessage": f"{s} msg"}
                   for i, s in enumerate(kw.pop("history", [secondary]))]
    return {"TrainingJobName": name, "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{name}",
            "TrainingJobStatus": primary, "SecondaryStatus": secondary, "CreationTime": T0,
            "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "img"},
            "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600, "MaxWaitTimeInSeconds": 1200},
            "ModelArtifacts": {"S3ModelArtifacts": f"s3://b/dtrain/{name}/output/model.tar.gz"},
            "SecondaryStatusTransitions": transitions, **kw}


@pytest.fixture(scope="module")
def stub_client():
    return session().client("sagemaker")  # never reaches AWS: every call is answered by the Stubber


@pytest.fixture
def stubbed(clients, stub_client):
    sm = stub_client
    with Stubber(sm) as stub:
        yield SageMakerBackend(CFG, clients=Clients(sm, clients.s3, clients.logs)), stub
        stub.assert_no_pending_responses()


def test_spot_job_interrupted_then_completed(stubbed):
    be, stub = stubbed
    seq = [("InProgress", "Starting", {}), ("InProgress", "Training", {}),
           ("InProgress", "Interrupted", {}), ("InProgress", "Training", {}),
           ("Completed", "Completed", {"BillableTimeInSeconds": 120, "TrainingTimeInSeconds": 400,
                                       "EnableManagedSpotTraining": True, "TrainingEndTime": T0 + timedelta(hours=1)})]
    history = []
    for primary, secondary, extra in seq:
        history.append(secondary)
        stub.add_response("describe_training_job", _desc("spot", primary, secondary, history=list(history), **extra),
                          {"TrainingJobName": "spot"})
    seen = [be.get("spot").status for _ in range(4)]
    assert seen == [JobStatus.PENDING, JobStatus.RUNNING, JobStatus.PENDING, JobStatus.RUNNING]
    info = be.wait("spot", poll=0)
    assert info.status == JobStatus.SUCCEEDED
    assert [e.status for e in info.events] == ["Created", "Starting", "Training", "Interrupted", "Training", "Completed"]
    assert info.extra["billable_seconds"] == 120 and info.extra["training_seconds"] == 400
    assert info.extra["spot_saving_percent"] == 70.0
    assert info.processes[1].node == "algo-2"


def test_failed_job_carries_the_failure_reason(stubbed):
    be, stub = stubbed
    stub.add_response("describe_training_job",
                      _desc("bad", "Failed", "Failed", FailureReason="AlgorithmError: exit code 1"),
                      {"TrainingJobName": "bad"})
    info = be.get("bad")
    assert info.status == JobStatus.FAILED and info.message == "AlgorithmError: exit code 1"


def test_delete_stops_the_training_job(stubbed):
    be, stub = stubbed
    stub.add_response("describe_training_job", _desc("run", "InProgress", "Training"), {"TrainingJobName": "run"})
    stub.add_response("stop_training_job", {}, {"TrainingJobName": "run"})
    stub.add_response("describe_training_job", _desc("run", "Stopping", "Stopping"), {"TrainingJobName": "run"})
    info = be.delete("run")
    assert info.status == JobStatus.RUNNING and info.message == "stopping"
    assert {p.status for p in info.processes} == {"Terminating"}  # as a local rank or a pod being stopped
    stub.add_response("describe_training_job", _desc("run", "Stopped", "Stopped"), {"TrainingJobName": "run"})
    stopped = be.get("run")
    assert stopped.status == JobStatus.DELETED and {p.status for p in stopped.processes} == {"Stopped"}
    stub.add_response("describe_training_job", _desc("run", "Stopped", "MaxRuntimeExceeded"),
                      {"TrainingJobName": "run"})
    assert "raise --max-runtime" in be.get("run").message


@pytest.mark.parametrize("code", ["AccessDeniedException", "ResourceLimitExceeded", "ValidationException"])
def test_aws_errors_name_their_code_and_the_fix(stubbed, code, tmp_path):
    be, stub = stubbed
    (tmp_path / "train.py").write_text("")
    be.cwd = str(tmp_path)
    stub.add_client_error("describe_training_job", service_error_code="ValidationException",
                          service_message="Requested resource not found.")
    stub.add_client_error("create_training_job", service_error_code=code, service_message="nope")
    with pytest.raises(BackendError, match=f"CreateTrainingJob: {code}: nope; "):
        be.submit(spec(f"err-{code.lower()[:10]}"))


def test_bad_input_fails_before_any_call(stubbed, tmp_path):
    be, _ = stubbed  # the Stubber holds no responses: any AWS call would fail the test
    with pytest.raises(SpecError, match="dtrain config sagemaker --role"):
        SageMakerBackend(SageMakerConfig(), clients=be.aws).submit(spec("x"))
    with pytest.raises(SpecError, match="--subnets"):
        be.submit(spec("x", sm=dict(channels=("d=efs://fs-0123456789abcdef0/x",))))
    with pytest.raises(DtrainError, match="sagemaker backend does not support volumes and snapshots"):
        be.list_volumes()


class CountingLogs:
    """The CloudWatch Logs client, with its GetLogEvents calls counted (a seam: the backend takes
    its clients through the constructor)."""

    def __init__(self, logs):
        self._logs = logs
        self.gets = 0

    def get_log_events(self, **kw):
        self.gets += 1
        return self._logs.get_log_events(**kw)

    def __getattr__(self, name):
        return getattr(self._logs, name)


@pytest.mark.slow
def test_logs_are_read_a_page_at_a_time_as_they_are_printed(clients):
    """`dtrain logs` read every page of every host's stream (10,000 events a page) before the first
    line, holding a long job's whole log; now each host is read a page ahead of the merge."""
    name, per_host = "moto-pages", 25_000
    group = _job_with_a_log_group(clients, name, 2)
    t = int(time.time() * 1000) - 3_600_000
    for host in (1, 2):
        stream = f"{name}/algo-{host}-1767225600"
        clients.logs.create_log_stream(logGroupName=group, logStreamName=stream)
        for start in range(0, per_host, 10_000):
            clients.logs.put_log_events(logGroupName=group, logStreamName=stream, logEvents=[
                {"timestamp": t + 2 * i + host, "message": f"host {host} line {i}"}
                for i in range(start, min(per_host, start + 10_000))])
    counting = CountingLogs(clients.logs)
    be = SageMakerBackend(CFG, clients=Clients(clients.sagemaker, clients.s3, counting))
    lines = be.logs(name)
    assert next(lines).text == "host 1 line 0"
    assert counting.gets == 2  # a page of each host, not all five of them
    rest = [(ln.rank, ln.text) for ln in lines]
    assert len(rest) == 2 * per_host - 1
    assert rest[:3] == [(1, "host 2 line 0"), (0, "host 1 line 1"), (1, "host 2 line 1")]
    assert rest[-1] == (1, f"host 2 line {per_host - 1}")
    assert [ln.text for ln in be.logs(name, tail=2)] == [f"host 1 line {per_host - 1}", f"host 2 line {per_host - 1}"]
    assert list(be.logs(name, tail=0)) == []


def test_an_aws_job_may_not_take_the_name_of_a_local_one(clients, code, tmp_path):
    """describe, logs and delete reach a --local job first: an AWS job of its name could not be
    reached by name (nor stopped), so it is refused before anything is uploaded."""
    be = SageMakerBackend(CFG, clients=clients, home=tmp_path / "home", cwd=str(code))
    done = be.submit(spec("twin", sm=dict(local=True)))
    assert be.wait("twin", timeout=120).status == JobStatus.SUCCEEDED, done.message
    with pytest.raises(ConflictError) as err:
        be.submit(spec("twin"))
    assert str(err.value) == ("a --local SageMaker job named 'twin' exists, and describe, logs and delete would reach "
                              "it rather than this one: submit under a new name")
    assert clients.s3.list_objects_v2(Bucket=CFG.bucket, Prefix="dtrain/twin/").get("KeyCount") == 0
    assert "twin" not in [j["TrainingJobName"] for j in clients.sagemaker.list_training_jobs()["TrainingJobSummaries"]]


def test_logs_previous_is_a_hosts_stream_before_its_newest(clients):
    """A retry (RetryStrategy, --max-restarts) starts the container again: a new stream per host;
    `logs --previous` reads the one before each host's newest, as kubectl's --previous."""
    be = SageMakerBackend(CFG, clients=clients)
    group = _job_with_a_log_group(clients, "moto-retry", 1)
    t = int(time.time() * 1000) - 60_000
    with pytest.raises(NotFoundError, match="no previous attempt"):
        clients.logs.create_log_stream(logGroupName=group, logStreamName="moto-retry/algo-1-1767225600")
        clients.logs.put_log_events(logGroupName=group, logStreamName="moto-retry/algo-1-1767225600",
                                    logEvents=[{"timestamp": t, "message": "try 0"}])
        list(be.logs("moto-retry", previous=True))
    clients.logs.create_log_stream(logGroupName=group, logStreamName="moto-retry/algo-1-1767225700")
    clients.logs.put_log_events(logGroupName=group, logStreamName="moto-retry/algo-1-1767225700",
                                logEvents=[{"timestamp": t + 10, "message": "try 1"}])
    assert [ln.text for ln in be.logs("moto-retry", previous=True)] == ["try 0"]

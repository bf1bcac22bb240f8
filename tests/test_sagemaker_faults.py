"""What a SageMaker user sees when AWS or the job misbehaves: every refusal is one DtrainError line.

AWS's side: boto3 against moto's server on 127.0.0.1 (what it lacks answers a real 500), a TCP
server that hangs up (a connection closed midway), botocore's own configuration errors from real
config files, and botocore's Stubber (checked against the service model) for statuses moto never
reaches. The job's side: `--local` jobs whose scripts fail, write their own failure file, or leave
links in /opt/ml.
"""

from __future__ import annotations

import json
import socket
import tarfile
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

import pytest

boto3 = pytest.importorskip("boto3")
from botocore.config import Config  # noqa: E402
from botocore.stub import Stubber  # noqa: E402

import dtrain  # noqa: E402
from dtrain.backends.base import JobStatus  # noqa: E402
from dtrain.backends.sagemaker.backend import Clients, SageMakerBackend  # noqa: E402
from dtrain.backends.sagemaker.clients import aws_call  # noqa: E402
from dtrain.backends.sagemaker.config import SageMakerConfig  # noqa: E402
from dtrain.errors import BackendError, NotFoundError  # noqa: E402
from dtrain.spec import JobSpec  # noqa: E402
from dtrain.spec_sagemaker import SageMakerOptions  # noqa: E402

CFG = SageMakerConfig(role="arn:aws:iam::123456789012:role/SageMakerRole", bucket="dtrain-faults")
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)
# The toolkit's FailureReason for a script that raised: its errors.py, as DescribeTrainingJob returns it.
TOOLKIT_REASON = ('AlgorithmError: ExecuteUserScriptError:\nExitCode 1\nErrorMessage "Traceback (most recent call '
                  'last):\n  File \\"train.py\\", line 3, in <module>\n    main()\nValueError: bad lr"\n'
                  'Command "/opt/conda/bin/python3.10 train.py --lr -1", exit code: 1')


def _session(**kw):
    return boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                 region_name="us-east-1", **kw)


def _one_line(err: BaseException) -> str:
    text = str(err)
    assert "\n" not in text and "Traceback" not in text, text
    return text


from test_sagemaker_backend import moto_url  # noqa: E402,F401  (a moto server for this module, as there)


# ---------------------------------------------------------------- AWS refuses or fails


def test_a_5xx_page_from_aws_is_one_line_with_the_status(moto_url):
    """moto has no StopTrainingJob: it answers HTTP 500 with an HTML page, as a failing proxy would."""
    sm = _session().client("sagemaker", endpoint_url=moto_url, config=Config(retries={"max_attempts": 1}))
    with pytest.raises(BackendError) as err:
        aws_call("SageMaker StopTrainingJob", sm.stop_training_job, TrainingJobName="any")
    line = _one_line(err.value)
    assert line.startswith("SageMaker StopTrainingJob: 500: ") and "retry in a few minutes" in line
    assert len(line) < 600


def test_a_connection_closed_midway_is_one_line(tmp_path):
    """A server that accepts and hangs up: botocore raises ConnectionClosedError, not a ClientError."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)

    def hang_up():
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.close()

    threading.Thread(target=hang_up, daemon=True).start()
    url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    s3 = _session().client("s3", endpoint_url=url, config=Config(retries={"max_attempts": 1}))
    try:
        with pytest.raises(BackendError) as err:
            aws_call("S3 upload of the code", s3.put_object, Bucket=CFG.bucket, Key="k", Body=b"x")
    finally:
        listener.close()
    assert "S3 upload of the code: cannot reach AWS" in _one_line(err.value)


@pytest.mark.parametrize("config_text, expected", [
    ("[default]\nregion = us-east-1\n", "ProfileNotFound"),  # AWS_PROFILE names a profile that is not there
    ("[default\nregion = us-east-1\n", "ConfigParseError"),  # a hand-edited ~/.aws/config that does not parse
])
def test_aws_configuration_errors_are_one_line(tmp_path, monkeypatch, config_text, expected):
    config = tmp_path / "aws-config"
    config.write_text(config_text)
    monkeypatch.setenv("AWS_CONFIG_FILE", str(config))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-credentials"))
    monkeypatch.setenv("AWS_PROFILE", "no-such-profile" if expected == "ProfileNotFound" else "default")
    with pytest.raises(BackendError) as err:
        SageMakerBackend(CFG).get("any-job")
    line = _one_line(err.value)
    assert expected in line and "aws configure list" in line


def test_a_missing_profile_reaches_the_cli_as_one_line(home, tmp_path):
    from conftest import Dtrain
    d = Dtrain(home, env={"AWS_CONFIG_FILE": str(tmp_path / "none"), "AWS_PROFILE": "no-such-profile"})
    d("config", "sagemaker", "--role", CFG.role, "--bucket", CFG.bucket)
    d("config", "backend", "sagemaker")
    r = d("describe", "job", "any-job", check=False)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "ProfileNotFound" in r.stderr, r.stderr


@pytest.fixture(scope="module")
def moto_clients(moto_url):
    s = _session()
    c = Clients(*(s.client(n, endpoint_url=moto_url) for n in ("sagemaker", "s3", "logs")))
    c.s3.create_bucket(Bucket=CFG.bucket)
    try:  # moto's servers in one process share their state: another test module may have made it
        c.logs.create_log_group(logGroupName="/aws/sagemaker/TrainingJobs")
    except c.logs.exceptions.ResourceAlreadyExistsException:
        pass
    return c


def _create(clients: Clients, name: str, **kw) -> None:
    from dtrain.backends.sagemaker.render import training_job_request
    clients.sagemaker.create_training_job(**training_job_request(
        JobSpec(name=name, command=("python", "train.py"), backend="sagemaker", **kw), CFG))


def test_logs_read_a_restarted_hosts_current_stream_and_previous_the_one_before(moto_clients):
    """A spot interruption or a retry starts the host's container again, under a new stream name:
    the lines before the restart are in the older stream. `logs` shows the current container start
    (as local and Kubernetes show the current attempt), `previous` the one before: none is lost."""
    _create(moto_clients, "restarted", processes=2, launcher="torchrun")
    group, t = "/aws/sagemaker/TrainingJobs", int(time.time() * 1000) - 60_000
    for stream, lines, at in (("restarted/algo-1-1767225600", ["step 1", "step 2"], t),
                              ("restarted/algo-1-1767229200", ["resumed from step 2", "step 3"], t + 1000),
                              ("restarted/algo-2-1767225600", ["worker up"], t + 500)):
        moto_clients.logs.create_log_stream(logGroupName=group, logStreamName=stream)
        moto_clients.logs.put_log_events(logGroupName=group, logStreamName=stream,
                                         logEvents=[{"timestamp": at + i, "message": m} for i, m in enumerate(lines)])
    be = SageMakerBackend(CFG, clients=moto_clients)
    assert [ln.text for ln in be.logs("restarted", rank=0)] == ["resumed from step 2", "step 3"]
    assert [ln.text for ln in be.logs("restarted", rank=0, previous=True)] == ["step 1", "step 2"]
    assert [(ln.rank, ln.text) for ln in be.logs("restarted", tail=3)] == [
        (1, "worker up"), (0, "resumed from step 2"), (0, "step 3")]


def test_artifacts_of_a_job_that_uploaded_none_say_so(moto_clients, tmp_path):
    """moto completes a job at once and names its model.tar.gz, which nothing uploaded."""
    _create(moto_clients, "no-model")
    with pytest.raises(NotFoundError) as err:
        SageMakerBackend(CFG, clients=moto_clients).artifacts("no-model", to=tmp_path / "m")
    line = _one_line(err.value)
    assert "job 'no-model' is Succeeded and s3://dtrain-faults/dtrain/no-model/output/model.tar.gz does not " \
           "exist" in line and "dtrain list" not in line
    assert not (tmp_path / "m").exists()


@pytest.fixture
def stubbed():
    sm = _session().client("sagemaker")  # never reaches AWS: the Stubber answers every call
    s3 = _session().client("s3")
    with Stubber(sm) as stub, Stubber(s3) as s3_stub:
        yield SageMakerBackend(CFG, clients=Clients(sm, s3, None)), stub, s3_stub
        stub.assert_no_pending_responses()


@pytest.mark.parametrize("code, hint", [
    ("ExpiredTokenException", "refresh them"),
    ("UnrecognizedClientException", "check AWS_ACCESS_KEY_ID"),
    ("InternalFailure", "retry in a few minutes"),
])
def test_credential_and_server_errors_say_what_to_do(stubbed, code, hint):
    be, stub, _ = stubbed
    stub.add_client_error("describe_training_job", service_error_code=code, service_message="The security token "
                          "included in the request is expired\n(request id 1)", http_status_code=400)
    with pytest.raises(BackendError) as err:
        be.get("job")
    line = _one_line(err.value)
    assert f"SageMaker job 'job': {code}: " in line and hint in line


@pytest.mark.parametrize("code, message, hint", [
    ("NoSuchBucket", "The specified bucket does not exist", f"aws s3 mb s3://{CFG.bucket}"),
    ("PermanentRedirect", "The bucket you are attempting to access must be addressed using the specified endpoint.",
     "the bucket is in another region"),
])
def test_bucket_errors_say_which_bucket_and_why(stubbed, tmp_path, code, message, hint):
    be, stub, s3 = stubbed
    (tmp_path / "train.py").write_text("")
    be.cwd = str(tmp_path)
    stub.add_client_error("describe_training_job", service_error_code="ValidationException",
                          service_message="Requested resource not found.")
    s3.add_client_error("put_object", service_error_code=code, service_message=message, http_status_code=404)
    with pytest.raises(BackendError) as err:
        be.submit(JobSpec(name="nb", command=("python", "train.py"), backend="sagemaker"))
    assert f"S3 upload of the code: {code}: " in _one_line(err.value) and hint in str(err.value)


@pytest.mark.parametrize("call", ["describe_log_streams", "get_log_events"])
def test_cloudwatch_refusals_are_one_line(moto_clients, call):
    """A policy without logs:GetLogEvents is common: `logs` says so on one line, no traceback."""
    _create(moto_clients, f"denied-{call[:3]}")
    logs = _session().client("logs")
    with Stubber(logs) as cw:
        if call == "get_log_events":
            cw.add_response("describe_log_streams", {"logStreams": [{"logStreamName": f"denied-{call[:3]}/algo-1-1"}]})
        cw.add_client_error(call, service_error_code="AccessDeniedException",
                            service_message=f"User: arn:aws:iam::123456789012:user/u is not authorized to perform: "
                                            f"logs:{call.title().replace('_', '')}")
        be = SageMakerBackend(CFG, clients=Clients(moto_clients.sagemaker, moto_clients.s3, logs))
        with pytest.raises(BackendError) as err:
            list(be.logs(f"denied-{call[:3]}"))
    line = _one_line(err.value)
    assert line.startswith("CloudWatch Logs ") and "AccessDeniedException: User: " in line


def test_jobs_other_tools_started_do_not_break_list(moto_url):
    """SageMaker names may hold capitals and run to 63 characters; dtrain's may not. A region of its
    own on the shared moto server is an account holding such jobs besides dtrain's."""
    from dtrain.errors import NotSupportedError
    s = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name="ap-south-1")
    account = Clients(*(s.client(n, endpoint_url=moto_url) for n in ("sagemaker", "s3", "logs")))
    theirs = ["XGBoost-Churn", "huggingface-pytorch-training-2026-01-01-12-34-56-789-finetune"]
    for name in theirs:
        account.sagemaker.create_training_job(
            TrainingJobName=name, AlgorithmSpecification={"TrainingImage": "img", "TrainingInputMode": "File"},
            RoleArn=CFG.role, OutputDataConfig={"S3OutputPath": "s3://their-bucket/out"},
            ResourceConfig={"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
            StoppingCondition={"MaxRuntimeInSeconds": 60})
    _create(account, "ours")
    be = SageMakerBackend(CFG, clients=account)
    assert [j.name for j in be.list()] == ["ours"]
    with pytest.raises(NotSupportedError) as err:
        be.get("XGBoost-Churn")
    line = _one_line(err.value)
    assert "was started by another tool" in line and "aws sagemaker describe-training-job --training-job-name " \
        "XGBoost-Churn" in line


@pytest.mark.parametrize("setting", ["region", "prefix", "instance_type"])
def test_an_empty_setting_in_config_yaml_is_refused_on_one_line(setting):
    """`region:` left empty in config.yaml reads as None: it named no region (an image URI with 'None' in
    it, a NoRegionError), and an empty prefix crashed the S3 key join."""
    from dtrain.errors import SpecError
    with pytest.raises(SpecError, match=f"invalid SageMaker --{setting.replace('_', '-')} None: use a value like"):
        SageMakerConfig.from_dict({"role": CFG.role, "bucket": CFG.bucket, setting: None})


def test_local_jobs_are_refused_what_sagemaker_would_refuse(home, tmp_path):
    """--local is where an entry point is tried before paying for instances: a request AWS would
    refuse must not run here first. file:// channels still pass (as the s3:// URIs they stand for)."""
    from dtrain.errors import SpecError
    (tmp_path / "train.py").write_text("")
    client = dtrain.Client(home=home, backend="sagemaker")

    def spec(name: str, **sm) -> JobSpec:
        return JobSpec(name=name, command=("python", "train.py"), backend="sagemaker",
                       sagemaker=SageMakerOptions(local=True, source_dir=str(tmp_path), **sm))

    with pytest.raises(SpecError, match=r"hyperparameter prompt is 3002 characters as the request carries it "
                                        r"\(JSON-encoded\), more than SageMaker's 2500"):
        client.submit(spec("long-hp", hyperparameters={"prompt": "x" * 3000}))
    with pytest.raises(SpecError, match=r"HyperParameters\['prompt'\] has 3002 characters, more than 2500"):
        client.submit(JobSpec(name="long-flag", command=("python", "train.py", "--prompt", "x" * 3000),
                              backend="sagemaker", sagemaker=SageMakerOptions(local=True, source_dir=str(tmp_path))))
    with pytest.raises(SpecError, match="Environment has 101 entries, more than 100"):
        client.submit(JobSpec(name="many-env", command=("python", "train.py"), backend="sagemaker",
                              env={f"V{i}": "1" for i in range(99)},
                              sagemaker=SageMakerOptions(local=True, source_dir=str(tmp_path))))
    assert not (home / "sagemaker-local" / "jobs").exists()  # nothing stored, nothing started
    request = client.render(spec("data", channels=(f"training=file://{tmp_path}",)))[-1]
    assert request["SageMaker.CreateTrainingJob"]["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == \
        f"file://{tmp_path}"


# ---------------------------------------------------------------- statuses


def _desc(primary: str, secondary: str, name: str = "job", **kw) -> dict:
    return {"TrainingJobName": name, "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{name}",
            "TrainingJobStatus": primary, "SecondaryStatus": secondary, "CreationTime": T0,
            "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "img"},
            "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600}, "ModelArtifacts": {"S3ModelArtifacts": "s3://b/k"},
            "SecondaryStatusTransitions": [{"Status": secondary, "StartTime": T0,
                                            "StatusMessage": kw.pop("status_message", "msg")}], **kw}


def test_a_multi_line_failure_reason_is_one_line_and_kept_whole(stubbed):
    be, stub, _ = stubbed
    stub.add_response("describe_training_job", _desc("Failed", "Failed", FailureReason=TOOLKIT_REASON,
                                                     status_message="Training job failed.\nSee the logs."),
                      {"TrainingJobName": "job"})
    info = be.get("job")
    assert info.status == JobStatus.FAILED
    assert "\n" not in info.message and info.message.startswith("AlgorithmError: ExecuteUserScriptError: ExitCode 1")
    assert "ValueError: bad lr" in info.message and info.message.endswith("exit code: 1")
    assert all("\n" not in e.message for e in info.events) and info.events[-1].message.endswith("See the logs.")
    assert info.extra["failure_reason"] == TOOLKIT_REASON  # --json keeps SageMaker's text as it is


def test_stopping_a_job_that_ended_meanwhile_reports_how_it_ended(stubbed):
    be, stub, _ = stubbed
    stub.add_response("describe_training_job", _desc("InProgress", "Uploading"), {"TrainingJobName": "job"})
    stub.add_client_error("stop_training_job", service_error_code="ValidationException",
                          service_message="The request was rejected because the training job is in status Completed.")
    stub.add_response("describe_training_job", _desc("Completed", "Completed"), {"TrainingJobName": "job"})
    assert be.delete("job").status == JobStatus.SUCCEEDED


def test_stopping_a_running_job_that_aws_refuses_is_still_an_error(stubbed):
    be, stub, _ = stubbed
    stub.add_response("describe_training_job", _desc("InProgress", "Training"), {"TrainingJobName": "job"})
    stub.add_client_error("stop_training_job", service_error_code="AccessDeniedException", service_message="no")
    stub.add_response("describe_training_job", _desc("InProgress", "Training"), {"TrainingJobName": "job"})
    with pytest.raises(BackendError, match="StopTrainingJob: AccessDeniedException: no; "):
        be.delete("job")


@pytest.mark.parametrize("hyperparameters, ours", [(None, True), ({"epochs": '"9"'}, False)])
def test_a_create_that_made_the_job_before_failing_returns_that_job(moto_clients, tmp_path, hyperparameters, ours):
    """botocore retried CreateTrainingJob after a lost answer: the retry meets ResourceInUse, from the
    job the first attempt made. That job is the submitted one, not a reason to submit again (and pay
    twice); a job with the name that runs another request still is a refusal."""
    from dtrain.backends.sagemaker.render import training_job_request
    (tmp_path / "train.py").write_text("")
    spec = JobSpec(name=f"retried-{ours}".lower(), command=("python", "train.py"), backend="sagemaker")
    req = training_job_request(spec, CFG)
    desc = _desc("InProgress", "Starting", name=spec.name, RoleArn=req["RoleArn"],
                 HyperParameters=hyperparameters or req["HyperParameters"])
    sm = _session().client("sagemaker")
    with Stubber(sm) as stub:
        be = SageMakerBackend(CFG, clients=Clients(sm, moto_clients.s3, moto_clients.logs), cwd=str(tmp_path))
        stub.add_client_error("describe_training_job", service_error_code="ValidationException",
                              service_message="Requested resource not found.")
        stub.add_client_error("create_training_job", service_error_code="ResourceInUse",
                              service_message="Training job names must be unique within an AWS account and region, "
                                              "and a training job with this name already exists")
        stub.add_response("describe_training_job", desc, {"TrainingJobName": spec.name})
        if ours:
            info = be.submit(spec)
            assert info.status == JobStatus.PENDING and info.spec == spec
        else:
            with pytest.raises(BackendError, match="ResourceInUse"):
                be.submit(spec)
        stub.assert_no_pending_responses()


def test_a_job_being_deleted_is_not_running(stubbed):
    """TrainingJobStatus 'Deleting' (DeleteTrainingJob) keeps the SecondaryStatus it had, e.g. Completed."""
    be, stub, _ = stubbed
    stub.add_response("describe_training_job", _desc("Deleting", "Completed"), {"TrainingJobName": "job"})
    info = be.wait("job", timeout=0)
    assert info.status == JobStatus.DELETED and info.message == "deleting"


# ---------------------------------------------------------------- --local: the job misbehaves


def _local_job(home: Path, tmp_path: Path, name: str, script: str, **sm) -> tuple[dtrain.Client, Path]:
    code = tmp_path / f"code-{name}"
    code.mkdir()
    (code / "train.py").write_text(script)
    client = dtrain.Client(home=home, backend="sagemaker")
    client.submit(JobSpec(name=name, command=("python", "train.py"), backend="sagemaker",
                          sagemaker=SageMakerOptions(local=True, source_dir=str(code), **sm)))
    return client, home / "sagemaker-local" / "jobs" / name / "hosts" / "algo-1"


def test_a_failed_script_leaves_the_toolkits_failure_file(home, tmp_path):
    client, host = _local_job(home, tmp_path, "fails", "import sys\nprint('disk full', file=sys.stderr)\n"
                                                       "sys.exit(4)\n")
    info = client.wait("fails", timeout=60)
    assert info.status == JobStatus.FAILED and 'ErrorMessage "disk full"' in info.message
    assert info.message.startswith("AlgorithmError: ExecuteUserScriptError:") and info.message.endswith("exit code: 1")  # the container's
    note = (host / "output" / "failure").read_text()
    assert note.startswith('ExecuteUserScriptError:\nExitCode 4\nErrorMessage "disk full"\nCommand "')
    assert note.rstrip('"').endswith("train.py")


def test_the_jobs_own_failure_file_is_kept_and_shown_on_one_line(home, tmp_path):
    script = ("import os, sys\nopen('/opt/ml/output/failure', 'w').write('bad data:\\nrow 7 has 3 columns\\n')\n"
              "sys.exit(2)\n")
    client, host = _local_job(home, tmp_path, "own", script)
    info = client.wait("own", timeout=60)
    assert info.message == "AlgorithmError: bad data: row 7 has 3 columns, exit code: 1"  # the container's
    assert (host / "output" / "failure").read_text() == "bad data:\nrow 7 has 3 columns\n"  # not overwritten


def test_a_failure_file_that_is_a_link_is_neither_read_nor_written_through(home, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("SECRET-TOKEN")
    victim = tmp_path / "victim.txt"  # a dangling link's target: writing the failure file would create it
    script = (f"import os, sys\nos.symlink({str(secret)!r}, '/opt/ml/output/failure')\n"
              f"os.makedirs('/opt/ml/output/data', exist_ok=True)\nprint('last words', flush=True)\nsys.exit(5)\n")
    client, host = _local_job(home, tmp_path, "link", script)
    info = client.wait("link", timeout=60)
    assert "SECRET" not in info.message and info.message.endswith("exit code: 1")
    assert (host / "output" / "failure").is_symlink() and secret.read_text() == "SECRET-TOKEN"
    script = (f"import os, sys\nos.symlink({str(victim)!r}, '/opt/ml/output/failure')\nsys.exit(6)\n")
    client, host = _local_job(home, tmp_path, "dangling", script)
    assert client.wait("dangling", timeout=60).status == JobStatus.FAILED
    assert not victim.exists()


def _members(client: dtrain.Client, name: str, home: Path) -> dict[str, str]:
    info = client.wait(name, timeout=60)
    assert info.status == JobStatus.SUCCEEDED, info.message
    path = home / "sagemaker-local" / "s3" / "dtrain-local" / "dtrain" / name / "output" / "model.tar.gz"
    with tarfile.open(path) as tar:
        return {m.name: m.linkname if m.issym() else "" for m in tar.getmembers()}


def test_a_model_folder_replaced_by_a_link_is_not_followed(home, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "private.key").write_text("key")
    script = f"import os, shutil\nshutil.rmtree('/opt/ml/model')\nos.symlink({str(outside)!r}, '/opt/ml/model')\n"
    client, _ = _local_job(home, tmp_path, "swap", script)
    assert _members(client, "swap", home) == {}
    assert any("model.tar.gz: left out model/: it is a link" in ln.text for ln in client.logs("swap"))


def test_links_in_the_model_folder_stay_links_and_those_leaving_it_are_left_out(home, tmp_path):
    script = ("import os\nos.chdir('/opt/ml/model')\nos.makedirs('ckpt')\nopen('ckpt/step-9.pt', 'w').write('w')\n"
              "os.symlink('ckpt/step-9.pt', 'latest.pt')\nos.symlink('/opt/ml/checkpoints/x.pt', 'abs.pt')\n"
              "os.symlink('../../../etc/passwd', 'ckpt/up.pt')\n")
    client, _ = _local_job(home, tmp_path, "links", script)
    assert _members(client, "links", home) == {"ckpt": "", "ckpt/step-9.pt": "", "latest.pt": "ckpt/step-9.pt"}
    left_out = [ln.text for ln in client.logs("links") if "left out" in ln.text]
    assert left_out == ["model.tar.gz: left out abs.pt -> /opt/ml/checkpoints/x.pt: the link leaves the folder",
                        "model.tar.gz: left out ckpt/up.pt -> ../../../etc/passwd: the link leaves the folder"]
    out = client.artifacts("links", to=tmp_path / "model")  # the archive unpacks: no link in it leaves
    assert (out / "latest.pt").read_text() == "w" and (out / "latest.pt").is_symlink()


def test_an_archive_with_a_fifo_is_left_without_it(tmp_path):
    """A pure check of what the runner packs: special files never enter model.tar.gz."""
    import os

    from dtrain.backends.sagemaker.runner import archive_entries
    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "w.bin").write_bytes(b"x")
    os.mkfifo(tmp_path / "m" / "pipe")
    assert [(name, why) for _, name, why in archive_entries(tmp_path / "m")] == [
        ("pipe", "pipe: not a regular file"), ("w.bin", "")]


SAVES_ON_SIGTERM = """import signal, sys, time
def stop(*_):
    open('/opt/ml/model/partial.txt', 'w').write('saved on SIGTERM')
    sys.exit(0)
signal.signal(signal.SIGTERM, stop)
print('ready', flush=True)
while True:
    time.sleep(0.05)
"""


def test_a_job_past_its_max_runtime_keeps_what_it_saved_on_sigterm(home, tmp_path):
    """SageMaker sends SIGTERM at MaxRuntimeInSeconds and uploads /opt/ml/model after the grace period."""
    client, _ = _local_job(home, tmp_path, "overtime", SAVES_ON_SIGTERM, max_runtime=1)
    info = client.wait("overtime", timeout=60)
    assert info.status == JobStatus.FAILED and info.message.startswith("MaxRuntimeExceeded")
    assert (client.artifacts("overtime", to=tmp_path / "m") / "partial.txt").read_text() == "saved on SIGTERM"


def test_a_stopped_job_keeps_what_it_saved_on_sigterm(home, tmp_path):
    client, _ = _local_job(home, tmp_path, "stopped", SAVES_ON_SIGTERM)
    deadline = time.monotonic() + 60
    while "ready" not in [ln.text for ln in client.logs("stopped")] and time.monotonic() < deadline:
        time.sleep(0.1)
    client.delete("stopped")
    assert client.wait("stopped", timeout=60).status == JobStatus.DELETED
    assert (client.artifacts("stopped", to=tmp_path / "m") / "partial.txt").read_text() == "saved on SIGTERM"


def test_artifacts_of_a_failed_local_job_say_none_were_uploaded(home, tmp_path):
    client, _ = _local_job(home, tmp_path, "crashed", "raise SystemExit(1)\n")
    assert client.wait("crashed", timeout=60).status == JobStatus.FAILED
    with pytest.raises(NotFoundError) as err:
        client.artifacts("crashed", to=tmp_path / "m")
    assert "job 'crashed' is Failed and s3://dtrain-local/dtrain/crashed/output/model.tar.gz does not exist" \
        in _one_line(err.value)


def test_a_code_link_leading_out_of_the_folder_is_left_out_and_the_job_runs(home, tmp_path):
    """`settings.cfg -> /elsewhere/settings.cfg` in the code folder: tarfile's 'data' filter refuses an
    archive holding it, so a --local job failed before it started; on SageMaker it leads nowhere."""
    import os

    elsewhere = tmp_path / "elsewhere.cfg"
    elsewhere.write_text("lr=1")
    code = tmp_path / "code-linked"
    (code / "conf").mkdir(parents=True)
    (code / "train.py").write_text("import os\nprint(sorted(os.listdir('.')), sorted(os.listdir('conf-latest')))\n")
    (code / "conf" / "base.cfg").write_text("x")
    os.symlink(elsewhere, code / "settings.cfg")
    os.symlink("../../up.cfg", code / "conf" / "up.cfg")
    os.symlink("base.cfg", code / "conf" / "same.cfg")
    os.symlink("conf", code / "conf-latest")  # a link to a folder inside: it travels as a link
    os.symlink(tmp_path, code / "outside")  # a link to a folder outside: left out like a file's
    client = dtrain.Client(home=home, backend="sagemaker")
    client.submit(JobSpec(name="linked", command=("python", "train.py"), backend="sagemaker",
                          sagemaker=SageMakerOptions(local=True, source_dir=str(code))))
    info = client.wait("linked", timeout=60)
    assert info.status == JobStatus.SUCCEEDED, info.message
    assert "['conf', 'conf-latest', 'train.py'] ['base.cfg', 'same.cfg']" in [ln.text for ln in client.logs("linked")]


@pytest.mark.slow
def test_a_stopped_job_has_sagemakers_two_minutes_to_save(home, tmp_path):
    """SageMaker waits 120 s after SIGTERM before it ends a stopped job; a save that takes 15 s
    (a large checkpoint) must land in model.tar.gz, not be cut off by SIGKILL."""
    script = SAVES_ON_SIGTERM.replace("def stop(*_):\n", "def stop(*_):\n    time.sleep(15)\n")
    client, _ = _local_job(home, tmp_path, "slow-save", script, max_runtime=1)
    assert client.wait("slow-save", timeout=120).status == JobStatus.FAILED
    assert (client.artifacts("slow-save", to=tmp_path / "m") / "partial.txt").read_text() == "saved on SIGTERM"


def test_wait_asks_again_while_aws_throttles_or_fails_on_its_side(stubbed):
    """As on Kubernetes (UnavailableError): a throttled or failed DescribeTrainingJob (botocore's
    retries spent) ended an hours-long `dtrain wait` (a pipeline step's) at the first one."""
    be, stub, _ = stubbed

    def desc(state: str) -> dict:
        return {"TrainingJobName": "j", "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/j",
                "TrainingJobStatus": state, "SecondaryStatus": state, "CreationTime": T0,
                "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "img"},
                "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
                "StoppingCondition": {"MaxRuntimeInSeconds": 600},
                "ModelArtifacts": {"S3ModelArtifacts": "s3://b/dtrain/j/output/model.tar.gz"}}

    stub.add_response("describe_training_job", desc("Stopping"), {"TrainingJobName": "j"})
    stub.add_client_error("describe_training_job", service_error_code="ThrottlingException",
                          service_message="Rate exceeded", http_status_code=400)
    stub.add_client_error("describe_training_job", service_error_code="InternalFailure",
                          service_message="We encountered an internal error", http_status_code=500)
    stub.add_response("describe_training_job", desc("Stopped"), {"TrainingJobName": "j"})  # the poll that answers
    assert be.wait("j", poll=0).status is JobStatus.DELETED
    stub.assert_no_pending_responses()


def test_wait_ends_at_a_refusal_that_asking_again_would_not_change(stubbed):
    be, stub, _ = stubbed
    stub.add_response("describe_training_job", {
        "TrainingJobName": "j", "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/j",
        "TrainingJobStatus": "Stopping", "SecondaryStatus": "Stopping", "CreationTime": T0,
        "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "img"},
        "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
        "StoppingCondition": {"MaxRuntimeInSeconds": 600},
        "ModelArtifacts": {"S3ModelArtifacts": "s3://b/dtrain/j/output/model.tar.gz"}}, {"TrainingJobName": "j"})
    stub.add_client_error("describe_training_job", service_error_code="AccessDeniedException",
                          service_message="not authorized", http_status_code=400)
    with pytest.raises(BackendError, match="AccessDeniedException") as err:
        be.wait("j", poll=0)
    assert not isinstance(err.value, dtrain.errors.UnavailableError)


def test_a_local_job_finds_its_checkpoint_config_where_sagemaker_writes_it(home, tmp_path):
    """SageMaker writes the job's CheckpointConfig to /opt/ml/input/config/checkpointconfig.json
    (LocalPath, S3Uri; SageMaker Debugger and rank0.checkpoint_local_path read LocalPath from it): a
    --local job finds it there too, naming the checkpoint URI it was given."""
    script = ("import json, pathlib\nfrom dtrain.workloads import rank0\n"
              "config = json.loads(pathlib.Path('/opt/ml/input/config/checkpointconfig.json').read_text())\n"
              "pathlib.Path('/opt/ml/model/seen.json').write_text(json.dumps({**config, "
              "'read': str(rank0.checkpoint_local_path())}))\n")
    client, host = _local_job(home, tmp_path, "ckptcfg", script, checkpoint_uri="s3://ckpt-bucket/runs/a")
    info = client.wait("ckptcfg", timeout=60)
    assert info.status == JobStatus.SUCCEEDED, info.message
    seen = json.loads((host / "model" / "seen.json").read_text())
    assert seen == {"LocalPath": "/opt/ml/checkpoints", "S3Uri": "s3://ckpt-bucket/runs/a",
                    "read": "/opt/ml/checkpoints"}


def test_the_checkpoint_config_file_follows_the_request():
    """LocalPath defaults to the API's /opt/ml/checkpoints/ where a request gives none; a request without a
    CheckpointConfig gets no file, as on SageMaker."""
    from dtrain.backends.sagemaker import contract
    assert contract.checkpoint_config({"CheckpointConfig": {"S3Uri": "s3://b/c"}}) == \
        {"LocalPath": "/opt/ml/checkpoints/", "S3Uri": "s3://b/c"}
    assert contract.checkpoint_config({}) is None

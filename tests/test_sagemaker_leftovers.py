"""What the SageMaker backend costs in AWS calls, and the code it uploads.

`list` lists pages and describes only jobs that may be dtrain's and that changed since it last
looked (the facts it keeps under $DTRAIN_HOME); `logs -f` asks for the status every few tens of
seconds and backs off CloudWatch reads of quiet streams; the generated dtrain_entry.py replaces
nothing of the user's. Calls are counted with botocore's event hooks on the injected clients,
against moto's server (and botocore's Stubber for statuses moto never reaches)."""

from __future__ import annotations

import io
import json
import os
import tarfile
import time
from collections import Counter
from datetime import timedelta

import pytest

boto3 = pytest.importorskip("boto3")
from botocore.stub import Stubber  # noqa: E402

from test_sagemaker_backend import CFG, T0, _desc, clients, code, moto_url, session, spec  # noqa: E402,F401

from dtrain.backends.sagemaker import render  # noqa: E402
from dtrain.backends.sagemaker.archive import pack_source  # noqa: E402
from dtrain.backends.sagemaker.backend import Clients, SageMakerBackend  # noqa: E402
from dtrain.backends.sagemaker.logs import GROUP  # noqa: E402
from dtrain.errors import ConflictError, SpecError  # noqa: E402
from dtrain.spec import JobSpec  # noqa: E402


def counted(*clients) -> Counter:
    """Operation name -> calls made through these clients (Stubber-answered calls included)."""
    calls: Counter = Counter()
    for client in clients:
        client.meta.events.register("before-parameter-build.*.*",
                                    lambda model, **_: calls.update([model.name]))
    return calls


def account(moto_url: str, region: str) -> Clients:
    """A region of its own on the shared moto server: an account holding only this test's jobs."""
    s = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing", region_name=region)
    return Clients(*(s.client(n, endpoint_url=moto_url) for n in ("sagemaker", "s3", "logs")))


# ---------------------------------------------------------------- list


def test_list_describes_only_jobs_that_changed_and_reads_each_spec_once(moto_url, clients, code, tmp_path):
    acct = account(moto_url, "ca-central-1")
    home = tmp_path / "home"
    home.mkdir()
    be = SageMakerBackend(CFG, clients=acct, home=home, cwd=str(code))
    for i in range(3):
        be.submit(spec(f"ours-{i}", processes=2, launcher="torchrun"))
    base = dict(AlgorithmSpecification={"TrainingImage": "img", "TrainingInputMode": "File"}, RoleArn=CFG.role,
                OutputDataConfig={"S3OutputPath": "s3://their-bucket/out"},
                ResourceConfig={"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 10},
                StoppingCondition={"MaxRuntimeInSeconds": 60})
    acct.sagemaker.create_training_job(TrainingJobName="XGBoost-Churn", **base)  # never a dtrain name
    acct.sagemaker.create_training_job(  # a dtrain-like name and code in S3, but no spec beside it
        TrainingJobName="their-job", HyperParameters={
            "sagemaker_submit_directory": json.dumps(f"s3://{CFG.bucket}/theirs/their-job/source/sourcedir.tar.gz"),
            "sagemaker_program": json.dumps("fit.py")}, **base)

    reference = SageMakerBackend(CFG, clients=acct)  # nothing remembered: every job described, every spec read
    calls = counted(reference.aws.sagemaker, reference.aws.s3)
    expected = reference.list()
    assert sorted(j.name for j in expected) == ["ours-0", "ours-1", "ours-2", "their-job"]
    assert calls == {"ListTrainingJobs": 1, "DescribeTrainingJob": 4, "GetObject": 4}

    for n in range(2):  # a new process each time: `dtrain list` twice, with what the first kept
        fresh = account(moto_url, "ca-central-1")
        calls = counted(fresh.sagemaker, fresh.s3)
        assert SageMakerBackend(CFG, clients=fresh, home=home).list() == expected
        # Submit remembered its own jobs; the first list described the one job it had not seen.
        assert calls == ({"ListTrainingJobs": 1, "DescribeTrainingJob": 1, "GetObject": 1} if n == 0
                         else {"ListTrainingJobs": 1}), n
    assert sorted(os.listdir(home / "sagemaker-facts" / "ca-central-1-123456789012")) == [
        "ours-0.json", "ours-1.json", "ours-2.json", "their-job.json"]


def _summary(name: str, status: str, modified, **kw) -> dict:
    return {"TrainingJobName": name, "TrainingJobArn": f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{name}",
            "CreationTime": T0, "LastModifiedTime": modified, "TrainingJobStatus": status, **kw}


def test_list_describes_again_when_the_summary_says_the_job_changed(clients, tmp_path):
    """InProgress jobs are described at every list; an ended one once, until ListTrainingJobs shows
    another status or modification time (DeleteTrainingJob's Deleting, a late change)."""
    sm = session().client("sagemaker")
    be = SageMakerBackend(CFG, clients=Clients(sm, clients.s3, clients.logs), home=tmp_path)
    end = T0 + timedelta(hours=1)
    rounds = [  # (summary, the description a list must ask for, or None)
        (_summary("run", "InProgress", T0), _desc("run", "InProgress", "Training")),
        (_summary("run", "Completed", end, TrainingEndTime=end),
         _desc("run", "Completed", "Completed", LastModifiedTime=end, TrainingEndTime=end)),
        (_summary("run", "Completed", end, TrainingEndTime=end), None),
        (_summary("run", "Completed", end, TrainingEndTime=end), None),
        (_summary("run", "Deleting", end + timedelta(minutes=1), TrainingEndTime=end),
         _desc("run", "Deleting", "Completed", LastModifiedTime=end + timedelta(minutes=1), TrainingEndTime=end)),
    ]
    seen = []
    with Stubber(sm) as stub:
        for summary, desc in rounds:
            stub.add_response("list_training_jobs", {"TrainingJobSummaries": [summary]})
            if desc is not None:
                stub.add_response("describe_training_job", desc, {"TrainingJobName": "run"})
            [info] = be.list()
            seen.append((info.status.value, info.finished))
            stub.assert_no_pending_responses()
    assert seen == [("Running", None)] + [("Succeeded", end.timestamp())] * 3 + [("Deleted", end.timestamp())]


def test_a_job_deleted_between_list_and_describe_is_left_out(clients):
    """DeleteTrainingJob between ListTrainingJobs and DescribeTrainingJob: the others still list."""
    sm = session().client("sagemaker")
    be = SageMakerBackend(CFG, clients=Clients(sm, clients.s3, clients.logs))
    with Stubber(sm) as stub:
        stub.add_response("list_training_jobs", {"TrainingJobSummaries": [_summary("gone", "Completed", T0),
                                                                          _summary("kept", "Completed", T0)]})
        stub.add_client_error("describe_training_job", service_error_code="ValidationException",
                              service_message="Requested resource not found.",
                              expected_params={"TrainingJobName": "gone"})
        stub.add_response("describe_training_job", _desc("kept", "Completed", "Completed"), {"TrainingJobName": "kept"})
        assert [j.name for j in be.list()] == ["kept"]


def test_kept_facts_are_never_written_through_a_link_nor_trusted_when_damaged(moto_url, clients, code, tmp_path):
    acct = account(moto_url, "sa-east-1")
    home, elsewhere = tmp_path / "home", tmp_path / "elsewhere"
    home.mkdir()
    elsewhere.mkdir()
    SageMakerBackend(CFG, clients=acct, cwd=str(code)).submit(spec("kept-facts"))
    os.symlink(elsewhere, home / "sagemaker-facts")
    [expected] = SageMakerBackend(CFG, clients=acct, home=home).list()
    assert os.listdir(elsewhere) == []
    os.unlink(home / "sagemaker-facts")
    SageMakerBackend(CFG, clients=acct, home=home).list()
    entry = home / "sagemaker-facts" / "sa-east-1-123456789012" / "kept-facts.json"
    stored = json.loads(entry.read_text())
    assert stored["spec"]["name"] == "kept-facts" and "Environment" not in stored["desc"]
    for damaged in (b"{not json", json.dumps({**stored, "created": 0.0}).encode(),
                    json.dumps({**stored, "spec": {"name": "Not A Spec"}}).encode()):
        entry.write_bytes(damaged)
        calls = counted(acct.sagemaker)
        assert SageMakerBackend(CFG, clients=acct, home=home).list() == [expected]
        assert calls["ListTrainingJobs"] == 1


# ---------------------------------------------------------------- logs -f


def test_following_asks_for_the_status_rarely_and_backs_off_quiet_streams(moto_url, clients):
    """The job runs (Stubber: moto's jobs complete at once); its lines are in moto's CloudWatch,
    where the injected sleep writes a new line during the third wait."""
    from dtrain.backends.sagemaker.logs import Pace  # how following polls, injected
    name, host = "paced", "paced/algo-1-1767225600"
    logs, s3 = session().client("logs", endpoint_url=moto_url), session().client("s3", endpoint_url=moto_url)
    try:
        logs.create_log_group(logGroupName=GROUP)
    except logs.exceptions.ResourceAlreadyExistsException:
        pass
    logs.create_log_stream(logGroupName=GROUP, logStreamName=host)
    now = int(time.time() * 1000) - 60_000
    logs.put_log_events(logGroupName=GROUP, logStreamName=host, logEvents=[{"timestamp": now, "message": "step 1"}])
    stored = spec(name)
    s3.put_object(Bucket=CFG.bucket, Key=f"dtrain/{name}/{render.SPEC_FILE}", Body=json.dumps(stored.to_dict()))
    hps = {"sagemaker_submit_directory": json.dumps(f"s3://{CFG.bucket}/dtrain/{name}/source/sourcedir.tar.gz")}
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        if len(slept) == 3:
            logs.put_log_events(logGroupName=GROUP, logStreamName=host,
                                logEvents=[{"timestamp": now + 1, "message": "step 2"}])

    sm = session().client("sagemaker")
    calls = counted(logs, s3, sm)

    def last_words(**_) -> None:  # the job's last line lands just before the status says it ended
        if calls["DescribeTrainingJob"] == 3:
            logs.put_log_events(logGroupName=GROUP, logStreamName=host,
                                logEvents=[{"timestamp": now + 2, "message": "saved"}])

    sm.meta.events.register("before-parameter-build.sagemaker.DescribeTrainingJob", last_words)
    be = SageMakerBackend(CFG, clients=Clients(sm, s3, logs), pace=Pace(first=1, most=4, status=10), sleep=sleep)
    with Stubber(sm) as stub:
        for primary, secondary in (("InProgress", "Training"), ("InProgress", "Training"), ("Completed", "Completed")):
            stub.add_response("describe_training_job", _desc(name, primary, secondary, HyperParameters=hps),
                              {"TrainingJobName": name})
        lines = [ln.text for ln in be.logs(name, follow=True)]
        stub.assert_no_pending_responses()
    assert lines == ["step 1", "step 2", "saved"]  # every line, once, the last one too
    # reads: line, quiet (wait 2), quiet (wait 4, a line comes), line (wait 1 again), quiet (2: 10 s waited,
    # the status is asked: Completed), at once a read after the end ("saved", wait 1), then one finding none
    assert slept == [1, 2, 4, 1, 2, 1]
    assert calls["DescribeLogStreams"] == 8
    assert calls["DescribeTrainingJob"] == 3  # `logs` checks the job exists, then at 0 s and 10 s of waiting
    assert calls["GetObject"] == 1  # the stored spec, once


# ---------------------------------------------------------------- the uploaded code


def _names(archive: bytes) -> dict[str, bytes]:
    with tarfile.open(fileobj=io.BytesIO(archive)) as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers() if m.isfile()}


def test_a_users_dtrain_entry_py_below_the_top_is_shipped(clients, tmp_path):
    src = tmp_path / "code"
    (src / "pkg").mkdir(parents=True)
    (src / "pkg" / "dtrain_entry.py").write_text("USER = 1\n")
    (src / "pkg" / "__init__.py").write_text("")
    be = SageMakerBackend(CFG, clients=clients, cwd=str(src))
    job = JobSpec(name="entry-nested", command=("python", "-m", "pkg"), backend="sagemaker")
    be.submit(job)
    body = clients.s3.get_object(Bucket=CFG.bucket, Key="dtrain/entry-nested/source/sourcedir.tar.gz")["Body"].read()
    files = _names(body)
    assert files["pkg/dtrain_entry.py"] == b"USER = 1\n"
    assert files["dtrain_entry.py"].startswith(b'"""Written by dtrain')


def test_a_users_top_level_dtrain_entry_py_is_refused_on_one_line_before_any_upload(clients, tmp_path):
    src = tmp_path / "code"
    src.mkdir()
    (src / "dtrain_entry.py").write_text("MINE = 1\n")
    be = SageMakerBackend(CFG, clients=clients, cwd=str(src))
    job = JobSpec(name="entry-clash", command=("torchrun", "--nproc-per-node", "2", "train.py"), backend="sagemaker")
    for verb in (be.render, be.submit):
        with pytest.raises(SpecError) as err:
            verb(job)
        line = str(err.value)
        assert "\n" not in line and f"{src}/dtrain_entry.py clashes with the dtrain_entry.py generated into the uploaded code" in line
        assert line.endswith("rename your file")
    listed = clients.s3.list_objects_v2(Bucket=CFG.bucket, Prefix="dtrain/entry-clash/")
    assert listed.get("KeyCount") == 0
    # `python dtrain_entry.py` runs the user's own file: nothing is generated, nothing clashes
    be.submit(JobSpec(name="entry-own", command=("python", "dtrain_entry.py"), backend="sagemaker"))
    body = clients.s3.get_object(Bucket=CFG.bucket, Key="dtrain/entry-own/source/sourcedir.tar.gz")["Body"].read()
    assert _names(body) == {"dtrain_entry.py": b"MINE = 1\n"}
    buf = io.BytesIO()
    with pytest.raises(SpecError, match="clashes"):  # the archive writer refuses on its own too
        pack_source(src, {"dtrain_entry.py": "generated"}, buf)


# ---------------------------------------------------------------- artifacts


def test_artifacts_refuse_a_used_target_before_downloading_and_download_beside_it(
        moto_url, clients, code, tmp_path, monkeypatch):
    """A model.tar.gz may be gigabytes: `--to` that cannot take it is refused before the download,
    and the download lands beside the target, not in $TMPDIR (often a RAM-backed tmpfs)."""
    import tempfile

    s3 = session().client("s3", endpoint_url=moto_url)  # its own: counted below
    be = SageMakerBackend(CFG, clients=Clients(clients.sagemaker, s3, clients.logs), cwd=str(code))
    be.submit(spec("art-beside"))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        info = tarfile.TarInfo("model.pth")
        info.size = 7
        tar.addfile(info, io.BytesIO(b"weights"))
    clients.s3.put_object(Bucket=CFG.bucket, Key="dtrain/art-beside/output/model.tar.gz", Body=buf.getvalue())
    used = tmp_path / "used"
    used.mkdir()
    (used / "keep.txt").write_text("mine")
    keys: list[str] = []
    s3.meta.events.register("before-parameter-build.s3.GetObject", lambda params, **_: keys.append(params["Key"]))
    with pytest.raises(ConflictError) as err:
        be.artifacts("art-beside", to=used)
    assert "exists and is not an empty folder: pick a new --to folder" in str(err.value)
    assert not [k for k in keys if k.endswith("model.tar.gz")] and sorted(os.listdir(used)) == ["keep.txt"]
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "no-tmpdir"))  # $TMPDIR gone: unusable
    out = be.artifacts("art-beside", to=tmp_path / "models" / "m")
    assert (out / "model.pth").read_bytes() == b"weights"
    assert os.listdir(tmp_path / "models") == ["m"]  # nothing left beside it


def test_wait_asks_aws_for_the_status_every_few_seconds_and_never_past_its_timeout(clients, monkeypatch):
    """DescribeTrainingJob is throttled: `dtrain wait` asks every 5 s (the old loop: every 0.5 s), and
    the last pause ends at the timeout instead of a whole poll after it."""
    now, pauses = [1000.0], []

    def sleep(seconds: float) -> None:
        pauses.append(seconds)
        now[0] += seconds

    monkeypatch.setattr(time, "sleep", sleep)
    monkeypatch.setattr(time, "monotonic", lambda: now[0])
    sm = session().client("sagemaker")
    be = SageMakerBackend(CFG, clients=Clients(sm, clients.s3, clients.logs))
    with Stubber(sm) as stub:
        for status in ("InProgress", "InProgress", "Completed"):
            stub.add_response("describe_training_job", _desc("slow", status, "Training"), {"TrainingJobName": "slow"})
        assert be.wait("slow").status.terminal
        stub.assert_no_pending_responses()
    assert pauses == [5.0, 5.0]
    pauses.clear()
    with Stubber(sm) as stub:
        for _ in range(4):
            stub.add_response("describe_training_job", _desc("slow", "InProgress", "Training"),
                              {"TrainingJobName": "slow"})
        with pytest.raises(Exception, match="is still Running after 12s"):
            be.wait("slow", timeout=12)
        stub.assert_no_pending_responses()
    assert pauses == [5.0, 5.0, 2.0]  # then the status at the deadline

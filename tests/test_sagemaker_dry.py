"""SageMaker, what a new user meets before and after a run:

- `submit --dry-run` made no AWS call, so an empty or missing S3 channel, a taken name or a missing
  bucket passed it and only `submit` refused them. It now makes submit's read-only checks and refuses
  in submit's words; what AWS does not answer is one warning line, and the requests are printed.
- A `--local` job's s3:// channel (read from the local S3 folder) that is not there, or an EFS/FSx
  channel, was taken and failed at download: refused at submit, as a missing file:// folder is.
- A finished job read "Succeeded (Preparing the instances for training)": its message is the final
  transition's (Completed for Completed), or none, never a stale step's.
"""

from __future__ import annotations

import json
import logging

import pytest

from conftest import Dtrain, assert_usage_error
from test_sagemaker_backend import CFG, clients, code, moto_url, spec  # noqa: F401  (a moto server for this module)

from dtrain.backends.base import JobStatus
from dtrain.backends.sagemaker import status
from dtrain.backends.sagemaker.backend import Clients, SageMakerBackend
from dtrain.backends.sagemaker.config import SageMakerConfig
from dtrain.errors import DtrainError, SpecError


# ---- a --local job's channel that is not on this machine ----------------------------------------------------

def test_a_local_job_with_a_missing_local_s3_channel_is_refused_at_submit(home, tmp_path):
    """It was taken, and failed as it downloaded ("channel training: s3://... does not exist on this machine")."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    d = Dtrain(home)
    job = ["--backend", "sagemaker", "--local", "--channel", "training=s3://dtrain-local/cifar10", "--",
           "python", "train.py"]
    folder = home / "sagemaker-local" / "s3" / "dtrain-local" / "cifar10"
    for how in ([], ["--dry-run"]):
        r = d("submit", "nodata", *how, *job, cwd=str(tmp_path), check=False)
        assert_usage_error(r, "channel training=s3://dtrain-local/cifar10: a --local job reads s3:// from the local "
                              f"S3 folder, and {folder} does not exist", "--channel training=file:///PATH")
        assert r.stdout == ""
    assert json.loads(d("--backend", "sagemaker", "list", "--json").stdout) == []
    folder.mkdir(parents=True)
    (folder / "data_batch_1").write_bytes(b"-")
    d("submit", "nodata", *job, cwd=str(tmp_path))
    assert d("--backend", "sagemaker", "wait", "nodata", "--timeout", "120").stdout.startswith("nodata: Succeeded")


def test_a_local_job_with_an_efs_channel_is_refused_at_submit(home, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    r = Dtrain(home)("submit", "onefs", "--backend", "sagemaker", "--local", "--channel",
                     "training=efs://fs-0123abcd/data", "--", "python", "train.py", cwd=str(tmp_path), check=False)
    assert_usage_error(r, "channel training: --local cannot reach EFS or FSx", "--channel training=file:///PATH")


# ---- a finished job's message ---------------------------------------------------------------------------------

def test_a_job_moto_finishes_reads_succeeded_without_a_stale_step(clients, code):  # noqa: F811
    """moto fills one Starting transition ("Preparing the instances for training") for a Completed job."""
    info = SageMakerBackend(CFG, clients=clients, cwd=str(code)).submit(spec("dry-done"))
    desc = clients.sagemaker.describe_training_job(TrainingJobName="dry-done")
    assert desc["TrainingJobStatus"] == "Completed"
    assert desc["SecondaryStatusTransitions"][-1]["Status"] != "Completed"  # what moto gives
    assert (info.status, info.message) == (JobStatus.SUCCEEDED, "")


def _t(step: str, message: str) -> dict:
    return {"Status": step, "StatusMessage": message}


@pytest.mark.parametrize("primary, steps, reason, expected", [
    ("Completed", [_t("Starting", "Preparing the instances for training"), _t("Training", "Training in progress."),
                   _t("Uploading", "Uploading generated training model"), _t("Completed", "Training job completed")],
     None, (JobStatus.SUCCEEDED, "Training job completed")),
    ("Completed", [_t("Starting", "Preparing the instances for training")], None, (JobStatus.SUCCEEDED, "")),
    ("Completed", [], None, (JobStatus.SUCCEEDED, "")),
    ("Failed", [_t("Starting", "Preparing the instances for training")], None, (JobStatus.FAILED, "failed")),
    ("Failed", [_t("Training", "Training in progress."), _t("Failed", "Training job failed")], None,
     (JobStatus.FAILED, "Training job failed")),
    ("Failed", [_t("Failed", "Training job failed")], "AlgorithmError: boom", (JobStatus.FAILED, "AlgorithmError: boom")),
])
def test_an_ended_jobs_message_is_its_final_steps_or_none(primary, steps, reason, expected):
    """botocore's model: Completed and Failed are the final secondary statuses of Completed and Failed jobs."""
    desc = {"TrainingJobStatus": primary, "SecondaryStatus": primary, "SecondaryStatusTransitions": steps}
    if reason:
        desc["FailureReason"] = reason
    assert status.job_status(desc) == expected


def test_a_running_job_still_shows_its_step():
    desc = {"TrainingJobStatus": "InProgress", "SecondaryStatus": "Training",
            "SecondaryStatusTransitions": [_t("Starting", "Preparing the instances for training"),
                                           _t("Training", "Training image download completed. Training in progress.")]}
    assert status.job_status(desc) == (JobStatus.RUNNING,
                                       "Training: Training image download completed. Training in progress.")


# ---- the dry run makes submit's read-only checks --------------------------------------------------------------

WARNED = "dtrain: warning: dry run not checked on AWS: "


def _warnings(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("dtrain: warning:")]


@pytest.fixture
def calls(clients):  # noqa: F811
    """The AWS operations the clients send during the test (botocore's before-call event)."""
    seen: list[str] = []

    def record(model, **_):
        seen.append(model.name)

    for client in (clients.sagemaker, clients.s3):
        client.meta.events.register("before-call", record, unique_id="dry-calls")
    yield seen
    for client in (clients.sagemaker, clients.s3):
        client.meta.events.unregister("before-call", unique_id="dry-calls")


def _refusal(call) -> tuple[type, str]:
    with pytest.raises(DtrainError) as refused:
        call()
    return type(refused.value), str(refused.value)


@pytest.mark.parametrize("case", ["channel empty", "channel bucket missing", "name taken", "bucket missing"])
def test_the_dry_run_refuses_what_submit_refuses_in_its_words(clients, code, calls, case):  # noqa: F811
    clients.s3.put_object(Bucket=CFG.bucket, Key="dry-data/train/x", Body=b"-")
    config = CFG if case != "bucket missing" else SageMakerConfig(role=CFG.role, bucket="dry-no-such-bucket",
                                                                   region=CFG.region)
    be = SageMakerBackend(config, clients=clients, cwd=str(code))
    uri = {"channel empty": f"s3://{CFG.bucket}/dry-empty", "channel bucket missing": "s3://dry-no-such-bucket/data"
           }.get(case, f"s3://{CFG.bucket}/dry-data")
    job = spec(f"dry-{case.replace(' ', '-')}", sm={"channels": (f"training={uri}",)})
    if case == "name taken":
        be.submit(job)
    calls.clear()
    dry = _refusal(lambda: be.render(job))
    assert calls and not {"PutObject", "CreateTrainingJob"} & set(calls)  # it asked, and made nothing
    submitted = _refusal(lambda: be.submit(job))
    if case == "bucket missing":  # submit's upload is refused (NoSuchBucket) before anything is made: the same hint
        assert dry[1].startswith("S3 bucket dry-no-such-bucket (dtrain config sagemaker --bucket): NoSuchBucket: ")
        assert submitted[1].startswith("S3 upload of the code: NoSuchBucket: ")
        assert dry[1].split("; ")[-1] == submitted[1].split("; ")[-1]
    else:
        assert dry == submitted  # the same error, the same one line
    assert "\n" not in dry[1]


def test_a_dry_run_that_passes_makes_nothing_and_prints_what_submit_sends(clients, code, calls, caplog):  # noqa: F811
    clients.s3.put_object(Bucket=CFG.bucket, Key="dry-ok/x", Body=b"-")
    be = SageMakerBackend(CFG, clients=clients, cwd=str(code))
    job = spec("dry-ok", sm={"channels": (f"training=s3://{CFG.bucket}/dry-ok",)})
    calls.clear()
    with caplog.at_level(logging.WARNING):
        requests = be.render(job)
    assert _warnings(caplog) == []
    assert sorted(calls) == ["DescribeTrainingJob", "ListObjectsV2", "ListObjectsV2"]  # the name, the bucket, the channel
    assert "dry-ok" not in [j["TrainingJobName"] for j in clients.sagemaker.list_training_jobs()["TrainingJobSummaries"]]
    assert requests[-1]["SageMaker.CreateTrainingJob"]["TrainingJobName"] == "dry-ok"
    be.submit(job)


def test_without_an_answer_from_aws_the_dry_run_warns_once_and_prints_the_requests(code, caplog):  # noqa: F811
    """A closed port stands for no network: one warning naming every check, and no check asked twice."""
    from test_sagemaker_backend import _free_port, session
    from botocore.config import Config
    s, once = session(), Config(retries={"total_max_attempts": 1}, connect_timeout=2)
    nowhere = f"http://127.0.0.1:{_free_port()}"
    be = SageMakerBackend(CFG, clients=Clients(*(s.client(n, endpoint_url=nowhere, config=once)
                                                 for n in ("sagemaker", "s3", "logs"))), cwd=str(code))
    job = spec("dry-offline", sm={"channels": (f"training=s3://{CFG.bucket}/a", f"test=s3://{CFG.bucket}/b")})
    with caplog.at_level(logging.WARNING):
        requests = be.render(job)
    [warned] = _warnings(caplog)
    assert warned.startswith(WARNED + f"job name 'dry-offline' free, bucket {CFG.bucket} exists, channel "
                             f"training=s3://{CFG.bucket}/a holds objects, channel test=s3://{CFG.bucket}/b holds "
                             "objects (SageMaker job 'dry-offline': cannot reach AWS ("), warned
    assert warned.endswith("); the requests are shown all the same, and submit checks them")
    assert requests[-1]["SageMaker.CreateTrainingJob"]["TrainingJobName"] == "dry-offline"


def test_a_channel_these_credentials_may_not_list_is_named_and_the_rest_checked(clients, code, caplog):  # noqa: F811
    """AccessDenied leaves that channel to SageMaker at submit (the role may read it); the dry run says so."""
    from botocore.exceptions import ClientError

    class Guarded:  # S3 refusing one bucket's listing to these credentials
        def __getattr__(self, name):
            return getattr(clients.s3, name)

        def list_objects_v2(self, **kw):
            if kw["Bucket"] == "dry-guarded":
                raise ClientError({"Error": {"Code": "AccessDenied", "Message": "Access Denied"}}, "ListObjectsV2")
            return clients.s3.list_objects_v2(**kw)

    be = SageMakerBackend(CFG, clients=Clients(clients.sagemaker, Guarded(), clients.logs), cwd=str(code))
    job = spec("dry-guarded", sm={"channels": ("training=s3://dry-guarded/data", f"test=s3://{CFG.bucket}/dry-none")})
    with pytest.raises(SpecError, match=f"channel test=s3://{CFG.bucket}/dry-none: no S3 objects under it"):
        be.render(job)  # the channel after the refused one is still checked
    clients.s3.put_object(Bucket=CFG.bucket, Key="dry-none/x", Body=b"-")
    with caplog.at_level(logging.WARNING):
        be.render(job)
    assert _warnings(caplog) == [WARNED + "channel training=s3://dry-guarded/data holds objects (S3 listing of channel "
                                 "training: AccessDenied: Access Denied; check the role ARN and your credentials (aws "
                                 "sts get-caller-identity) and the bucket policy); the requests are shown all the "
                                 "same, and submit checks them"]


def test_the_cli_dry_run_without_credentials_prints_the_requests_and_one_warning(home, tmp_path, code):  # noqa: F811
    d = Dtrain(home, env={"AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"), "AWS_CONFIG_FILE":
                          str(tmp_path / "none"), "AWS_EC2_METADATA_DISABLED": "true"})
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        d.env.pop(var, None)
    d("config", "sagemaker", "--role", CFG.role, "--bucket", CFG.bucket)
    r = d("submit", "dry-cli", "--backend", "sagemaker", "--dry-run", "--channel", f"training=s3://{CFG.bucket}/d",
          "--", "python", "train.py", cwd=str(code))
    assert json.loads(r.stdout)[-1]["SageMaker.CreateTrainingJob"]["TrainingJobName"] == "dry-cli"
    assert r.stderr.startswith(WARNED + "job name 'dry-cli' free, bucket dtrain-test exists, channel training="
                               f"s3://{CFG.bucket}/d holds objects (SageMaker job 'dry-cli': no AWS credentials found")
    assert len(r.stderr.splitlines()) == 1, r.stderr


def test_the_cli_dry_run_asks_aws_where_the_endpoint_answers(home, clients, code, moto_url):  # noqa: F811
    """Through boto3's standard chain (AWS_ENDPOINT_URL names moto's server): the empty channel is one line, exit 2."""
    d = Dtrain(home, env={"AWS_ENDPOINT_URL": moto_url, "AWS_ACCESS_KEY_ID": "testing",
                          "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"})
    d("config", "sagemaker", "--role", CFG.role, "--bucket", CFG.bucket, "--region", CFG.region)
    r = d("submit", "dry-cli2", "--backend", "sagemaker", "--dry-run", "--channel",
          f"training=s3://{CFG.bucket}/dry-cli-empty", "--", "python", "train.py", cwd=str(code), check=False)
    assert_usage_error(r, f"channel training=s3://{CFG.bucket}/dry-cli-empty: no S3 objects under it")
    assert r.stdout == ""


# ---- spot: --max-wait against a --max-runtime the user never typed -------------------------------------------

def test_spot_max_wait_below_the_default_runtime_names_both_fixes(home, tmp_path):
    """`--spot --max-wait 7200` met the default --max-runtime (a day) and offered only a 24-hour wait."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    d = Dtrain(home)
    job = ["--backend", "sagemaker", "--local", "--spot", "--dry-run"]
    r = d("submit", "spot", *job, "--max-wait", "7200", "--", "python", "train.py", cwd=str(tmp_path), check=False)
    assert_usage_error(r, "--max-wait 7200 is below --max-runtime 86400 (the default): SageMaker needs the spot wait "
                          "to cover the run; raise --max-wait to at least 86400, or pass --max-runtime 7200 or less")
    r = d("submit", "spot", *job, "--max-runtime", "3600", "--max-wait", "1800", "--", "python", "train.py",
          cwd=str(tmp_path), check=False)
    assert_usage_error(r, "--max-wait 1800 is below --max-runtime 3600: SageMaker", "or pass --max-runtime 1800 or less")
    out = d("submit", "spot", *job, "--max-runtime", "7200", "--max-wait", "7200", "--", "python", "train.py",
            cwd=str(tmp_path)).stdout
    stopping = json.loads(out)[-1]["SageMaker.CreateTrainingJob"]["StoppingCondition"]
    assert stopping == {"MaxRuntimeInSeconds": 7200, "MaxWaitTimeInSeconds": 7200}

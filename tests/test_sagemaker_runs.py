"""SageMaker, what a run meets after its first one:

- `submit --output-path s3://OTHER/...` checked the configured bucket but not OTHER: SageMaker took the job,
  trained it and failed it as it uploaded the model. OTHER is now asked as the configured bucket is, at submit
  and in the dry run, and a missing one is one line naming the bucket and both fixes; so is --checkpoint-s3-uri's.
- A job's uid was its TrainingJobArn, which SageMaker builds from the name alone: a name freed by
  `delete --purge` and submitted again gave the new run the old run's uid. It is now the ARN with the
  CreationTime, the same whether read from DescribeTrainingJob (datetimes) or remembered (unix seconds).
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest

from test_sagemaker_backend import CFG, clients, code, moto_url, spec  # noqa: F401  (a moto server for this module)

from dtrain.backends.sagemaker.backend import SageMakerBackend
from dtrain.backends.sagemaker.facts import plain
from dtrain.backends.sagemaker.status import job_info
from dtrain.errors import SpecError


# ---- --output-path / --checkpoint-s3-uri in a bucket that does not exist -----------------------------------

@pytest.mark.parametrize("field, flag, bucket", [
    ("output_path", "--output-path", "out-no-such-bucket"),
    # only --output-path's bucket was asked: SageMaker took the job and failed it as it uploaded a checkpoint
    ("checkpoint_uri", "--checkpoint-s3-uri", "ckpt-no-such-bucket"),
])
def test_a_flags_uri_in_a_missing_bucket_is_refused_before_anything_is_made(clients, code, field, flag,  # noqa: F811
                                                                          bucket):
    be = SageMakerBackend(CFG, clients=clients, cwd=str(code))
    name = f"{field.replace('_', '-')}-no-bucket"
    job = spec(name, sm={field: f"s3://{bucket}/models"})
    line = (f"{flag} s3://{bucket}/models: the bucket {bucket} does not exist: create it "
            f"(aws s3 mb s3://{bucket}) or pass another {flag}")
    for call in (be.render, be.submit):  # the dry run refuses as submit does
        with pytest.raises(SpecError) as refused:
            call(job)
        assert str(refused.value) == line
    names = [j["TrainingJobName"] for j in clients.sagemaker.list_training_jobs()["TrainingJobSummaries"]]
    assert name not in names
    assert clients.s3.list_objects_v2(Bucket=CFG.bucket, Prefix=f"dtrain/{name}/").get("KeyCount") == 0


def test_an_output_path_in_a_bucket_that_exists_is_taken(clients, code):  # noqa: F811
    clients.s3.create_bucket(Bucket="out-models")
    be = SageMakerBackend(CFG, clients=clients, cwd=str(code))
    job = spec("out-bucket-ok", sm={"output_path": "s3://out-models/runs"})
    assert be.render(job)[-1]["SageMaker.CreateTrainingJob"]["OutputDataConfig"]["S3OutputPath"] == \
        "s3://out-models/runs"
    be.submit(job)
    desc = clients.sagemaker.describe_training_job(TrainingJobName="out-bucket-ok")
    assert desc["OutputDataConfig"]["S3OutputPath"] == "s3://out-models/runs"


# ---- a name purged and submitted again is a new uid --------------------------------------------------------

ARN = "arn:aws:sagemaker:us-east-1:123456789012:training-job/again"


def _desc(created: datetime) -> dict:
    return {"TrainingJobName": "again", "TrainingJobArn": ARN, "TrainingJobStatus": "Completed",
            "SecondaryStatus": "Completed", "CreationTime": created}


def test_a_name_purged_and_submitted_again_has_a_new_uid_read_alike_from_aws_and_from_memory():
    first = datetime(2026, 5, 1, 10, 0, 0, 123000, tzinfo=timezone.utc)
    again = first + timedelta(milliseconds=1)  # the same ARN, a millisecond later
    one, two = (job_info(_desc(t), spec("again")).uid for t in (first, again))
    assert one != two and one.startswith(ARN + "@") and two.startswith(ARN + "@")
    assert one == f"{ARN}@2026-05-01T10:00:00.123Z"
    assert job_info(plain(_desc(first)), spec("again")).uid == one  # what `list` remembers reads the same uid


@pytest.mark.slow  # two --local runs
def test_a_local_job_purged_and_submitted_again_has_a_new_uid(home, tmp_path):
    """The whole path through the --local contract: describe's CreationTime after DeleteTrainingJob."""
    import dtrain
    from dtrain.spec_sagemaker import SageMakerOptions
    (tmp_path / "train.py").write_text("print('done')\n")
    client = dtrain.Client(home=str(home), backend="sagemaker")
    job = dtrain.JobSpec(name="again", command=("python", "train.py"), backend="sagemaker",
                         sagemaker=SageMakerOptions(local=True, source_dir=str(tmp_path)))
    first = client.submit(job)
    assert client.wait("again", timeout=60).uid == first.uid
    client.delete("again", purge=True)
    second = client.submit(job)
    assert second.uid != first.uid and client.get("again").uid == second.uid
    client.wait("again", timeout=60)


# ---- --checkpoint-s3-uri in a bucket that exists -----------------------------------------------------------

def test_a_checkpoint_uri_in_a_bucket_that_exists_is_taken(clients, code):  # noqa: F811
    clients.s3.create_bucket(Bucket="ckpt-store")
    be = SageMakerBackend(CFG, clients=clients, cwd=str(code))
    be.submit(spec("ckpt-bucket-ok", sm={"checkpoint_uri": "s3://ckpt-store/runs"}))
    desc = clients.sagemaker.describe_training_job(TrainingJobName="ckpt-bucket-ok")
    assert desc["CheckpointConfig"]["S3Uri"] == "s3://ckpt-store/runs"

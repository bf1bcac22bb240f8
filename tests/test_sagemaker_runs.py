"""SageMaker, what a run meets after its first one:

- `submit --output-path s3://OTHER/...` checked the configured bucket but not OTHER: SageMaker took the job,
  trained it and failed it as it uploaded the model. OTHER is now asked as the configured bucket is, at submit
  and in the dry run, and a missing one is one line naming the bucket and both fixes.
"""

from __future__ import annotations

import pytest

from test_sagemaker_backend import CFG, clients, code, moto_url, spec  # noqa: F401  (a moto server for this module)

from dtrain.backends.sagemaker.backend import SageMakerBackend
from dtrain.errors import SpecError


# ---- --output-path in a bucket that does not exist ---------------------------------------------------------

def test_an_output_path_in_a_missing_bucket_is_refused_before_anything_is_made(clients, code):  # noqa: F811
    be = SageMakerBackend(CFG, clients=clients, cwd=str(code))
    job = spec("out-no-bucket", sm={"output_path": "s3://out-no-such-bucket/models"})
    line = ("--output-path s3://out-no-such-bucket/models: the bucket out-no-such-bucket does not exist: create it "
            "(aws s3 mb s3://out-no-such-bucket) or pass another --output-path")
    for call in (be.render, be.submit):  # the dry run refuses as submit does
        with pytest.raises(SpecError) as refused:
            call(job)
        assert str(refused.value) == line
    names = [j["TrainingJobName"] for j in clients.sagemaker.list_training_jobs()["TrainingJobSummaries"]]
    assert "out-no-bucket" not in names
    assert clients.s3.list_objects_v2(Bucket=CFG.bucket, Prefix="dtrain/out-no-bucket/").get("KeyCount") == 0


def test_an_output_path_in_a_bucket_that_exists_is_taken(clients, code):  # noqa: F811
    clients.s3.create_bucket(Bucket="out-models")
    be = SageMakerBackend(CFG, clients=clients, cwd=str(code))
    job = spec("out-bucket-ok", sm={"output_path": "s3://out-models/runs"})
    assert be.render(job)[-1]["SageMaker.CreateTrainingJob"]["OutputDataConfig"]["S3OutputPath"] == \
        "s3://out-models/runs"
    be.submit(job)
    desc = clients.sagemaker.describe_training_job(TrainingJobName="out-bucket-ok")
    assert desc["OutputDataConfig"]["S3OutputPath"] == "s3://out-models/runs"

"""Audit 6, SageMaker backend: what a new SageMaker user still hit."""

from __future__ import annotations

import shlex

import pytest

from conftest import Dtrain


def test_the_submit_hint_names_the_backend_the_job_went_to(dt: Dtrain, tmp_path):
    """`submit --backend sagemaker` with local as the default: the printed `describe` command must
    find the job (it used to ask the local backend, which answers 'no job named ...')."""
    (tmp_path / "t.py").write_text("print('ok')\n")
    out = dt("submit", "hint", "--backend", "sagemaker", "--local", "--", "python", "t.py", cwd=tmp_path).stdout
    hint = out.split("You can run '")[1].split("'")[0]
    assert hint.startswith("dtrain ")
    shown = dt(*shlex.split(hint)[1:], check=False)
    assert shown.returncode == 0, shown.stderr
    assert "Name: hint" in shown.stdout
    dt("--backend", "sagemaker", "wait", "hint", "--timeout", "60")


def test_the_submit_hint_stays_plain_on_the_default_backend(dt: Dtrain, tmp_path):
    out = dt("submit", "plain", "--", "python", "-c", "print(1)", cwd=tmp_path).stdout
    assert "'dtrain describe job plain'" in out
    dt("wait", "plain", "--timeout", "60")


@pytest.mark.slow
def test_purge_forgets_an_ended_local_job_and_frees_its_name(dt: Dtrain, tmp_path):
    """`delete --purge` said 'purged' and forgot nothing: the job stayed in `list` and its name taken.
    Now it is SageMaker's DeleteTrainingJob: the job is gone and the name may be used again."""
    (tmp_path / "t.py").write_text("print('ok')\n")
    sm = ("--backend", "sagemaker")
    dt(*sm, "submit", "gone", "--local", "--", "python", "t.py", cwd=tmp_path)
    dt(*sm, "wait", "gone", "--timeout", "60")
    assert "purged" in dt(*sm, "delete", "gone", "--purge").stdout
    assert "gone" not in dt(*sm, "list", "--show-deleted").stdout
    assert dt(*sm, "describe", "job", "gone", check=False).returncode != 0
    dt(*sm, "submit", "gone", "--local", "--", "python", "t.py", cwd=tmp_path)
    assert dt(*sm, "wait", "gone", "--timeout", "60").returncode == 0


def test_purge_of_a_running_local_job_stops_it_and_says_it_is_not_forgotten(dt: Dtrain, tmp_path):
    (tmp_path / "t.py").write_text("import time\ntime.sleep(60)\n")
    sm = ("--backend", "sagemaker")
    dt(*sm, "submit", "busy", "--local", "--", "python", "t.py", cwd=tmp_path)
    r = dt(*sm, "delete", "busy", "--purge", check=False)
    assert r.returncode != 0 and "purged" not in r.stdout
    assert len(r.stderr.strip().splitlines()) == 1 and "again once" in r.stderr
    dt(*sm, "wait", "busy", "--timeout", "60", check=False)
    assert "busy" in dt(*sm, "list", "--show-deleted").stdout  # stopped, still known
    dt(*sm, "delete", "busy", "--purge")
    assert "busy" not in dt(*sm, "list", "--show-deleted").stdout


def test_purge_on_aws_calls_delete_training_job():
    boto3 = pytest.importorskip("boto3")
    from datetime import datetime, timezone

    from botocore.stub import Stubber

    from dtrain.backends.sagemaker.backend import Clients, SageMakerBackend
    from dtrain.backends.sagemaker.config import SageMakerConfig
    from dtrain.errors import ConflictError

    cfg = SageMakerConfig(role="arn:aws:iam::123456789012:role/R", bucket="dtrain-test", region="us-east-1")
    sm = boto3.session.Session(aws_access_key_id="x", aws_secret_access_key="x",
                               region_name="us-east-1").client("sagemaker")

    def desc(state, secondary):
        return {"TrainingJobName": "j", "TrainingJobArn": "arn:aws:sagemaker:us-east-1:123456789012:training-job/j",
                "TrainingJobStatus": state, "SecondaryStatus": secondary,
                "CreationTime": datetime(2026, 1, 1, tzinfo=timezone.utc),
                "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "img"},
                "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
                "StoppingCondition": {"MaxRuntimeInSeconds": 600},
                "ModelArtifacts": {"S3ModelArtifacts": "s3://b/dtrain/j/output/model.tar.gz"}}

    be = SageMakerBackend(cfg, clients=Clients(sm, None, None))
    with Stubber(sm) as stub:
        stub.add_response("describe_training_job", desc("Completed", "Completed"), {"TrainingJobName": "j"})
        stub.add_response("describe_training_job", desc("Completed", "Completed"), {"TrainingJobName": "j"})
        stub.add_response("describe_training_job", desc("Completed", "Completed"), {"TrainingJobName": "j"})
        stub.add_response("delete_training_job", {}, {"TrainingJobName": "j"})
        be.delete("j", purge=True)
        stub.assert_no_pending_responses()
        stub.add_response("describe_training_job", desc("Stopping", "Stopping"), {"TrainingJobName": "j"})
        stub.add_response("describe_training_job", desc("Stopping", "Stopping"), {"TrainingJobName": "j"})
        stub.add_response("describe_training_job", desc("Stopping", "Stopping"), {"TrainingJobName": "j"})
        with pytest.raises(ConflictError, match="deletes only an ended job"):
            be.delete("j", purge=True)
        stub.assert_no_pending_responses()

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

import pytest

from conftest import Dtrain, assert_usage_error
from test_sagemaker_backend import CFG, clients, code, moto_url, spec  # noqa: F401  (a moto server for this module)

from dtrain.backends.base import JobStatus
from dtrain.backends.sagemaker import status
from dtrain.backends.sagemaker.backend import SageMakerBackend


# ---- a --local job's channel that is not on this machine ----------------------------------------------------

def test_a_local_job_with_a_missing_local_s3_channel_is_refused_at_submit(home, tmp_path):
    """It was taken, and failed as it downloaded ("channel training: s3://... does not exist on this machine")."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    d = Dtrain(home)
    job = ["--backend", "sagemaker", "--local", "--channel", "training=s3://dtrain-local/cifar10", "--",
           "python", "train.py"]
    folder = home / "sagemaker-local" / "s3" / "dtrain-local" / "cifar10"
    for how in ([],):
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

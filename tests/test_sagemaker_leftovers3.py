"""A SageMaker user's third round with `--local`: two jobs given one checkpoint URI (the second one refused
while the first runs, by a lock file both take, no flock of a folder: NFS takes none), and the channel's
ContentType in inputdataconfig.json, as SageMaker writes it. The runner prepares the hosts' folders from a CreateTrainingJob request in a job folder
of the local SageMaker root, as LocalSageMaker.create_training_job leaves it."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from dtrain.backends.sagemaker.checkpoint_lock import CheckpointsInUse
from dtrain.backends.sagemaker.runner import Runner


def _job(root: Path, name: str, *, channels: list[dict] = (), checkpoint: dict | None = None) -> dict:
    """A request for job `name` under the local root `root`: its code in the local S3, one host."""
    code = root / "s3" / "bucket" / "code" / "sourcedir.tar.gz"
    code.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(code, "w:gz") as tar:
        info = tarfile.TarInfo("train.py")
        info.size = 5
        tar.addfile(info, io.BytesIO(b"pass\n"))
    req = {"TrainingJobName": name,
           "HyperParameters": {"sagemaker_submit_directory": json.dumps("s3://bucket/code/sourcedir.tar.gz"),
                               "sagemaker_program": json.dumps("train.py")},
           "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 1, "VolumeSizeInGB": 30},
           "OutputDataConfig": {"S3OutputPath": "s3://bucket/out"},
           "StoppingCondition": {"MaxRuntimeInSeconds": 600},
           "CheckpointConfig": checkpoint or {"S3Uri": f"s3://bucket/{name}/checkpoints"}}
    if channels:
        req["InputDataConfig"] = list(channels)
    d = root / "jobs" / name
    (d / "logs").mkdir(parents=True, exist_ok=True)
    (d / "request.json").write_text(json.dumps(req))
    return req


def test_inputdataconfig_names_a_channels_content_type(tmp_path):
    """inputdataconfig.json had no ContentType, where SageMaker writes the channel's from the request."""
    data = tmp_path / "data"
    data.mkdir()
    uri = {"S3DataSource": {"S3DataType": "S3Prefix", "S3Uri": f"file://{data}"}}
    _job(tmp_path, "j1", channels=[{"ChannelName": "train", "DataSource": uri, "ContentType": "text/csv"},
                                   {"ChannelName": "test", "DataSource": uri}])
    hosts = Runner(tmp_path, "j1").prepare()
    written = json.loads((hosts["algo-1"] / "input" / "config" / "inputdataconfig.json").read_text())
    assert written == {"train": {"ContentType": "text/csv", "TrainingInputMode": "File",
                                 "S3DistributionType": "FullyReplicated", "RecordWrapperType": "None"},
                       "test": {"TrainingInputMode": "File", "S3DistributionType": "FullyReplicated",
                                "RecordWrapperType": "None"}}


# The first job's runner, in a process of its own (a POSIX lock is the process's): it prepares the job, says
# so, and holds what it took until its stdin closes.
HOLDER = ("import sys; from pathlib import Path; from dtrain.backends.sagemaker.runner import Runner; "
          "Runner(Path(sys.argv[1]), sys.argv[2]).prepare(); print('ready', flush=True); sys.stdin.read()")


@pytest.mark.parametrize("where", ["s3", "file"])
def test_a_second_local_job_given_a_running_jobs_checkpoint_uri_is_refused(tmp_path, where):
    """Each job locked a file of its own host's /opt/ml where the checkpoint folder took no flock (NFS), so two
    --local jobs given one checkpoint URI both ran, writing the same checkpoints."""
    uri = "s3://bucket/shared/ckpt" if where == "s3" else f"file://{tmp_path / 'nfs' / 'ckpt'}"
    for name in ("j1", "j2"):
        _job(tmp_path, name, checkpoint={"S3Uri": uri})
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), "j1"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        with pytest.raises(CheckpointsInUse) as refused:
            Runner(tmp_path, "j2").prepare()
        assert str(refused.value) == (f"the checkpoint folder of {uri} is in use by the local job j1, which writes "
                                      f"its checkpoints there: wait for it to end, or give this job another "
                                      f"--checkpoint-s3-uri")
        assert not (tmp_path / "jobs" / "j2" / "hosts").exists()  # refused before anything was laid out
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    Runner(tmp_path, "j2").prepare()  # the first job has ended: its lock went with it
    assert not list((tmp_path / "s3").rglob("*.training.lock"))  # no object of the local S3


def test_the_runner_fails_the_second_job_with_the_refusal_as_its_reason(tmp_path):
    """The refusal is the job's FailureReason, one line, as `dtrain status` shows it."""
    for name in ("j1", "j2"):
        _job(tmp_path, name, checkpoint={"S3Uri": "s3://bucket/shared/ckpt"})
    (tmp_path / "jobs" / "j2" / "state.json").write_text(json.dumps(
        {"TrainingJobStatus": "InProgress", "SecondaryStatus": "Starting", "CreationTime": 0.0,
         "transitions": [{"Status": "Starting", "StartTime": 0.0, "StatusMessage": "Preparing"}]}))
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, str(tmp_path), "j1"], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline() == "ready\n"
        run = subprocess.run([sys.executable, "-m", "dtrain.backends.sagemaker.runner", str(tmp_path), "j2"],
                             timeout=120)
        assert run.returncode == 0
    finally:
        holder.stdin.close()
        assert holder.wait(timeout=60) == 0
    state = json.loads((tmp_path / "jobs" / "j2" / "state.json").read_text())
    assert state["TrainingJobStatus"] == "Failed"
    assert state["FailureReason"] == ("ClientError: the checkpoint folder of s3://bucket/shared/ckpt is in use by "
                                      "the local job j1, which writes its checkpoints there: wait for it to end, or "
                                      "give this job another --checkpoint-s3-uri")

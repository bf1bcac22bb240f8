"""A SageMaker user's third round with `--local`: the channel's ContentType in inputdataconfig.json, as
SageMaker writes it. The runner prepares the hosts' folders from a CreateTrainingJob request in a job folder
of the local SageMaker root, as LocalSageMaker.create_training_job leaves it."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path

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

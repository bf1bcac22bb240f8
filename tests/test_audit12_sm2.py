"""SageMaker, a new user's second audit: the checkpoint refusals in SageMaker's words, a --local job's
missing file:// folder and one hyperparameter in two spellings refused at submit, and the hybrid
pipeline's pre-run check looking inside data_uri (the train step refused it after the earlier steps ran)."""

from __future__ import annotations

import json

import pytest
import torch

from conftest import Dtrain, assert_usage_error
from test_sagemaker_backend import CFG, clients, code, moto_url  # noqa: F401  (a moto server for this module)

from dtrain.client import Client
from dtrain.errors import SpecError
from dtrain.pipelines import steps
from dtrain.training import resume as resume_mod
from dtrain.training.dist import DistInfo
from dtrain.training.resume import Checkpointer
from dtrain.workloads.cifar10 import train as cifar_train
from dtrain.workloads.cifar10.model import Net

SM_ENV = {"SM_CURRENT_HOST": "algo-1", "SM_TRAINING_ENV": "{}"}


# ---- 1. a checkpoint refusal names what the user changes where the job runs ------------------------------

def _other_models_checkpoint(folder) -> Checkpointer:
    ckpt = Checkpointer(folder, every=1)
    other = torch.nn.Linear(3, 2)
    ckpt.save(5, model=other, optimizer=torch.optim.SGD(other.parameters(), lr=0.1))
    return ckpt


def _one_process() -> DistInfo:
    return DistInfo(rank=0, local_rank=0, world_size=1, local_world_size=1, device=torch.device("cpu"),
                    backend=None, runtime="single")


def test_on_sagemaker_a_checkpoint_of_another_model_names_the_hyperparameter_and_the_s3_uri(tmp_path, monkeypatch):
    """On SageMaker there is no command line to add --no-resume to, and the checkpoint folder is the one
    SageMaker restores from --checkpoint-s3-uri: the line named both plain-torchrun flags."""
    for var, value in SM_ENV.items():
        monkeypatch.setenv(var, value)
    ckpt = _other_models_checkpoint(tmp_path / "ckpt")
    net = Net()
    with pytest.raises(SpecError) as err:
        cifar_train._resume(ckpt, net, torch.optim.SGD(net.parameters(), lr=0.1), _one_process(), {})
    said = str(err.value)
    assert "does not fit the CIFAR10 network" in said and "\n" not in said
    assert said.endswith("give this run another --checkpoint-s3-uri, or the hyperparameter resume=false "
                         "(--hp resume=false) to start over"), said
    assert "--no-resume" not in said and "--checkpoint-dir" not in said


def test_under_plain_torchrun_the_checkpoint_refusal_keeps_its_flags(tmp_path, monkeypatch):
    for var in (*SM_ENV, "SM_OUTPUT_DIR"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(resume_mod, "SAGEMAKER_RESOURCE_CONFIG", tmp_path / "no-such-file")
    ckpt = _other_models_checkpoint(tmp_path / "ckpt")
    net = Net()
    with pytest.raises(SpecError) as err:
        cifar_train._resume(ckpt, net, torch.optim.SGD(net.parameters(), lr=0.1), _one_process(), {})
    assert str(err.value).endswith("give this run another --checkpoint-dir, or --no-resume to start over")
    assert resume_mod.start_over() == "--no-resume, or another --checkpoint-dir"


def test_a_sagemaker_container_without_the_toolkit_is_told_sagemakers_words(tmp_path, monkeypatch):
    """The script's other test for SageMaker: the resource config in /opt/ml, without SM_* variables."""
    for var in (*SM_ENV, "SM_OUTPUT_DIR"):
        monkeypatch.delenv(var, raising=False)
    config = tmp_path / "resourceconfig.json"
    config.write_text(json.dumps({"current_host": "algo-1", "hosts": ["algo-1"]}))
    monkeypatch.setattr(resume_mod, "SAGEMAKER_RESOURCE_CONFIG", config)
    assert resume_mod.start_over() == ("the hyperparameter resume=false (--hp resume=false), "
                                       "or another --checkpoint-s3-uri")


def test_the_hyperparameter_the_line_names_starts_over():
    """What the line tells the user to set reaches the script as SageMaker passes it: `--resume false`."""
    assert cifar_train.parse_args(["--data-dir", "d", "--resume", "false"]).resume is False


# ---- 2. a --local job's file:// channel that is not there ------------------------------------------------

def test_a_local_job_with_a_missing_file_channel_is_refused_at_submit(home, tmp_path):
    """It was taken, and the job failed as it downloaded ("file:///... does not exist on this machine")."""
    (tmp_path / "train.py").write_text("print('hi')\n")
    d = Dtrain(home)
    missing = tmp_path / "no" / "such"
    r = d("submit", "nodata", "--backend", "sagemaker", "--local", "--channel", f"training=file://{missing}", "--",
          "python", "train.py", cwd=str(tmp_path), check=False)
    assert_usage_error(r, f"channel training=file://{missing}: the folder {missing} does not exist on this machine",
                       "--channel training=file:///PATH")
    assert json.loads(d("--backend", "sagemaker", "list", "--json").stdout) == []
    missing.mkdir(parents=True)
    d("submit", "nodata", "--backend", "sagemaker", "--local", "--channel", f"training=file://{missing}", "--",
      "python", "train.py", cwd=str(tmp_path))


# ---- 3. one hyperparameter in two spellings -------------------------------------------------------------

def test_the_cifar10_script_reads_both_spellings_as_one_option():
    """Why the submit refuses: the later spelling silently won."""
    assert cifar_train.parse_args(["--data-dir", "d", "--batch-size", "16", "--batch_size", "8"]).batch_size == 8


@pytest.mark.parametrize("how", [["--hp", "batch_size=8", "--", "python", "train.py", "--batch-size", "16"],
                                 ["--hp", "batch-size=16", "--hp", "batch_size=8", "--", "python", "train.py"],
                                 ["--", "python", "train.py", "--batch_size", "8", "--batch-size", "16"]])
def test_one_hyperparameter_in_two_spellings_is_refused_at_submit(home, tmp_path, how):
    (tmp_path / "train.py").write_text("print('hi')\n")
    d = Dtrain(home)
    r = d("submit", "twice", "--backend", "sagemaker", "--local", "--dry-run", *how, cwd=str(tmp_path), check=False)
    assert_usage_error(r, "hyperparameter batch_size is given twice", "--batch-size", "--batch_size",
                       "give it once")
    assert r.stdout == ""


def test_two_spellings_with_one_value_pass(home, tmp_path):
    (tmp_path / "train.py").write_text("print('hi')\n")
    out = Dtrain(home)("submit", "once", "--backend", "sagemaker", "--local", "--dry-run", "--hp", "batch_size=16",
                       "--", "python", "train.py", "--batch-size", "16", cwd=str(tmp_path)).stdout
    assert json.loads(out)


# ---- 4. the hybrid pipeline's pre-run check looks inside data_uri ---------------------------------------

def _hybrid(**over) -> dict:
    return {"training_runtime": "sagemaker", "processes": 1, "epochs": 1, "batch_size": 16, "lr": 0.001,
            "backend": "gloo", "data_volume": "cifar10", "max_steps": 0, "job_name": "audit12-sm2",
            "job_image": "", "data_uri": f"s3://{CFG.bucket}/audit12-sm2-empty", "sagemaker_role_arn": "",
            "sagemaker_bucket": "", "sagemaker_region": "", "sagemaker_instance_type": "",
            "image": "registry.example.com/dtrain:1", **over}


def test_the_pre_run_check_refuses_an_empty_data_uri(home, clients, code, tmp_path):  # noqa: F811
    """It asked AWS about the job's name and went on: the train step refused the empty prefix (exit 1)
    after the earlier steps had run."""
    pytest.importorskip("kfp")
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    from dtrain.pipelines import hybrid

    be = SageMakerBackend(CFG, clients=clients, home=tmp_path / "sm-home", cwd=str(code))
    client = Client(home=home, backend="sagemaker", backends={"sagemaker": be})
    uri = f"s3://{CFG.bucket}/audit12-sm2-empty"
    with pytest.raises(SpecError) as err:
        steps.check_plan(hybrid.NAME, hybrid.plan(_hybrid()), client=client)
    assert str(err.value) == (f"pipeline 'hybrid-cifar10' cannot submit job 'audit12-sm2' to the sagemaker backend: "
                              f"--param data_uri={uri}: no S3 objects under it, and SageMaker would fail the job "
                              f"once its instances started: upload the data first (aws s3 sync DATA {uri}) or pass "
                              f"another --param data_uri")
    with pytest.raises(SpecError, match=r"--param data_uri=s3://no-such-bucket-sm2/cifar10: the bucket "):
        steps.check_plan(hybrid.NAME, hybrid.plan(_hybrid(data_uri="s3://no-such-bucket-sm2/cifar10")),
                         client=client)
    clients.s3.put_object(Bucket=CFG.bucket, Key="audit12-sm2-data/cifar-10-batches-py/data_batch_1", Body=b"-")
    steps.check_plan(hybrid.NAME, hybrid.plan(_hybrid(data_uri=f"s3://{CFG.bucket}/audit12-sm2-data")),
                     client=client)
    assert "audit12-sm2" not in [j["TrainingJobName"] for j in
                                 clients.sagemaker.list_training_jobs()["TrainingJobSummaries"]]

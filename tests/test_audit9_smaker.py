"""SageMaker, ninth audit: `delete` of a running job says it is Stopping (not Running), and `--backend
nccl` on an instance type without GPUs (the configured one too, not only a pipeline's parameter) is
refused before anything is uploaded or created: at submit, in `dtrain pipeline run`'s check, in the
KFP train step."""

from __future__ import annotations

import json
import time

import pytest

from conftest import Dtrain, assert_usage_error

from dtrain.errors import SpecError

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"


def _running(d: Dtrain, name: str, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        info = d.json("describe", "job", name)
        if info["extra"].get("secondary_status") == "Training" and info["status"] == "Running":
            return
        time.sleep(0.3)
    raise AssertionError(f"{name} never ran: {info['status']} {info['message']}")


@pytest.mark.slow
def test_delete_of_a_running_job_says_it_is_stopping(home, tmp_path):
    """StopTrainingJob leaves the job Stopping while its programs save (up to 120 s): the line said
    'deleted (Running)', as if the stop had not been taken."""
    (tmp_path / "train.py").write_text(
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, lambda *a: (time.sleep(3), sys.exit(0)))\n"  # saves for a while
        "print('up', flush=True)\ntime.sleep(120)\n")
    d = Dtrain(home)
    d("config", "backend", "sagemaker")
    d("submit", "stopme", "--local", "--", "python", "train.py", cwd=str(tmp_path))
    try:
        _running(d, "stopme")
        out = d("delete", "stopme").stdout
        assert out == "The job 'stopme' has been deleted (Stopping: 'dtrain wait stopme' returns once it has stopped)\n"
        d("wait", "stopme", "--timeout", "60", check=False)
        assert d.status("stopme") == "Deleted"
    finally:
        d("delete", "stopme", check=False)


@pytest.mark.parametrize("how", [["--", "python", "-m", "dtrain.workloads.cifar10", "train", "--backend", "nccl"],
                                 ["--", "python", "-m", "dtrain.workloads.cifar10", "train", "--backend=nccl"],
                                 ["--hp", "backend=nccl", "--", "python", "train.py"]])
def test_nccl_on_the_configured_cpu_type_is_refused_at_submit(home, tmp_path, how):
    (tmp_path / "train.py").write_text("print('hi')\n")
    d = Dtrain(home)
    r = d("submit-dist", "nccl-cpu", "--backend", "sagemaker", "--local", "--processes", "2", "--dry-run", *how,
          cwd=str(tmp_path), check=False)
    assert_usage_error(r, "nccl", "ml.m5.xlarge has no GPUs", "--backend gloo", "--instance-type ml.g5.xlarge")
    assert r.stdout == ""
    ok = d("submit-dist", "nccl-gpu", "--backend", "sagemaker", "--local", "--processes", "2", "--instance-type",
           "ml.g5.xlarge", "--dry-run", *how, cwd=str(tmp_path))
    assert json.loads(ok.stdout)  # a GPU type takes it
    gloo = [a.replace("nccl", "gloo") for a in how]
    assert json.loads(d("submit-dist", "gloo-cpu", "--backend", "sagemaker", "--local", "--processes", "2",
                        "--dry-run", *gloo, cwd=str(tmp_path)).stdout)


def _hybrid(**over) -> dict:
    return {"training_runtime": "sagemaker", "processes": 2, "epochs": 1, "batch_size": 16, "lr": 0.001,
            "backend": "nccl", "data_volume": "cifar10", "max_steps": 0, "job_name": "cifar10-hybrid",
            "job_image": "", "data_uri": "s3://my-bucket/cifar10", "sagemaker_role_arn": "", "sagemaker_bucket": "",
            "sagemaker_region": "", "sagemaker_instance_type": "", "image": "registry.example.com/dtrain:1", **over}


def test_the_hybrid_pipeline_checks_nccl_against_the_configured_instance_type(home, monkeypatch):
    """With no sagemaker_instance_type the job gets config.yaml's type (ml.m5.xlarge by default), which the
    pipeline's own check never looked at: the run asked AWS about the job's name and went on to create it."""
    pytest.importorskip("kfp")
    from dtrain.client import Client
    from dtrain.pipelines import hybrid, steps

    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE"):
        monkeypatch.delenv(var, raising=False)  # any AWS call would fail on credentials, not on nccl
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(home / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(home / "none"))
    params = _hybrid()
    hybrid.check(params)  # no instance type given: the parameters alone say nothing
    plan = hybrid.plan(params)
    client = Client(home=home, backend="sagemaker", sagemaker={"role": ROLE, "bucket": "my-bucket"})
    with pytest.raises(SpecError) as err:
        steps.check_plan(hybrid.NAME, plan, client=client)
    said = str(err.value)
    assert "ml.m5.xlarge has no GPUs" in said and "--param backend=gloo" in said
    assert "--param sagemaker_instance_type=ml.g5.xlarge" in said and "\n" not in said
    # on a KFP server no such check runs first: the train step refuses before it uploads or creates anything
    with pytest.raises(SpecError, match=r"--param backend=gloo.*--param sagemaker_instance_type=ml\.g5\.xlarge"):
        steps.run_job(plan.jobs[0], backend="sagemaker", client=client, echo=lambda _: None)
    # a GPU type from config.yaml passes the check
    gpu = Client(home=home, backend="sagemaker",
                 sagemaker={"role": ROLE, "bucket": "my-bucket", "instance_type": "ml.g5.xlarge"})
    gpu.render(steps.job_spec(plan.jobs[0], backend="sagemaker", client=gpu))

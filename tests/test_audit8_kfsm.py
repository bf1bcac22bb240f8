"""The hybrid pipeline's SageMaker branch as a KFP server runs it: its step pods have no
config.yaml, so the SageMaker settings (role, bucket, region, instance type) are pipeline
parameters passed into the `train` step, and the region follows $AWS_REGION / $AWS_DEFAULT_REGION
(set in EKS pods by IRSA) where nothing else sets it. Before, a step read them from config.yaml
only, and `training_runtime=sagemaker` failed in the pod with "SageMaker is not configured"."""

from __future__ import annotations

import json
import socket

import pytest

from conftest import Dtrain
from dtrain.client import Client
from dtrain.config import BACKENDS
from dtrain.errors import SpecError
from dtrain.pipelines import steps
from test_pipelines import SHORT, branches, cli, compiled

kfp = pytest.importorskip("kfp", reason="pipelines need the KFP SDK: pip install 'dtrain[pipelines]'")

ROLE = "arn:aws:iam::123456789012:role/sm"
SM = ("sagemaker_role_arn", "sagemaker_bucket", "sagemaker_region", "sagemaker_instance_type")


def test_the_compiled_pipeline_takes_the_sagemaker_settings_and_passes_them_to_the_sagemaker_train(home, tmp_path):
    ir = compiled(home, tmp_path, "hybrid-cifar10")  # KFP's own compiler
    params = ir["root"]["inputDefinitions"]["parameters"]
    for name in SM:
        assert params[name]["parameterType"] == "STRING" and params[name]["defaultValue"] == "", name
    group = ir["root"]["dag"]["tasks"]["condition-branches-1"]["componentRef"]["name"]
    for runtime, (task, _backend) in branches(ir).items():
        branch = next(t for t in ir["components"][group]["dag"]["tasks"].values()
                      if f"== '{runtime}'" in t["triggerPolicy"]["condition"])
        inputs = ir["components"][branch["componentRef"]["name"]]["dag"]["tasks"][task]["inputs"]["parameters"]
        given = {k for k in inputs if k.startswith("sagemaker_")}
        assert given == (set(SM) if runtime == "sagemaker" else set()), runtime
        if runtime == "sagemaker":  # each from the run's argument of the same name
            assert inputs["sagemaker_role_arn"] == {"componentInputParameter": "pipelinechannel--sagemaker_role_arn"}
    # loaded back by KFP's loader, the parameters are there with their defaults
    loaded = kfp.components.load_component_from_file(str(tmp_path / "hybrid-cifar10.yaml"))
    assert all(loaded.component_spec.inputs[name].default == "" for name in SM)


@pytest.mark.parametrize("param, value, words", [
    ("sagemaker_role_arn", "arn:aws:iam::12:role/x", "use an IAM role ARN such as arn:aws:iam::123456789012:role/"),
    ("sagemaker_role_arn", "SageMakerRole", "use an IAM role ARN such as "),
    ("sagemaker_bucket", "s3://my-bucket", "(the bucket's name alone, without s3://)"),
    ("sagemaker_bucket", "My_Bucket", "use an S3 bucket's name such as my-training-bucket"),
    ("sagemaker_region", "us-east", "use an AWS region such as us-east-1"),
    ("sagemaker_instance_type", "m5.xlarge", "use a SageMaker instance type such as ml.m5.xlarge"),
])
def test_a_malformed_sagemaker_setting_is_refused_in_one_line_before_any_step(home, capsys, param, value, words):
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "training_runtime=sagemaker",
                          "--param", "data_uri=s3://bkt/cifar10", "--param", f"{param}={value}")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"dtrain: error: invalid {param} {value!r}: "), err
    assert words in err, err
    assert not (home / "pipelines").exists()


def test_nccl_on_a_sagemaker_type_without_gpus_is_refused(home, capsys):
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "training_runtime=sagemaker",
                          "--param", "data_uri=s3://bkt/cifar10", "--param", "backend=nccl",
                          "--param", "sagemaker_instance_type=ml.m5.xlarge")
    assert code == 2 and err.count("\n") == 1, err
    assert "nccl needs one per process: pick a GPU type" in err, err


def test_unconfigured_sagemaker_names_the_pipeline_parameters(home, capsys):
    """An empty home (a step pod's): the fix is the run's parameters, not a config.yaml there is none of."""
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "training_runtime=sagemaker",
                          "--param", "data_uri=s3://bkt/cifar10", "--param", f"sagemaker_role_arn={ROLE}")
    assert code == 2 and err.count("\n") == 1, err
    assert ("SageMaker is not configured (sagemaker_bucket missing): pass --param sagemaker_role_arn=arn:aws:iam::"
            "ACCOUNT:role/ROLE --param sagemaker_bucket=BUCKET (on a KFP server: the run's arguments)") in err, err


def test_the_train_step_in_a_pod_without_config_names_the_parameters_too(home, monkeypatch):
    """What the `train` component raises on a KFP server when the run was given no settings."""
    monkeypatch.setenv("DTRAIN_HOME", str(home))
    spec, _model = steps.cifar10_spec(runtime="sagemaker", job_name="pod-job", processes=1, epochs=1, batch_size=4,
                                      lr=0.1, backend="gloo", data_volume="cifar10", data_uri="s3://bkt/cifar10")
    with pytest.raises(SpecError, match=r"^SageMaker is not configured \(sagemaker_role_arn and sagemaker_bucket "
                                        r"missing\): pass --param sagemaker_role_arn="):
        steps.train(spec, backend="sagemaker", sagemaker={})


def test_sagemaker_settings_precedence_parameter_then_config_then_environment(home, monkeypatch):
    monkeypatch.delenv("AWS_REGION", raising=False)
    monkeypatch.delenv("AWS_DEFAULT_REGION", raising=False)
    assert Client(home=home).sagemaker_config().region == "us-east-1"  # nothing set anywhere
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert Client(home=home).sagemaker_config().region == "eu-west-1"
    monkeypatch.setenv("AWS_REGION", "eu-west-2")  # the AWS CLI's order: AWS_REGION first
    assert Client(home=home).sagemaker_config().region == "eu-west-2"
    Client(home=home).configure_sagemaker(role=ROLE, bucket="saved-bucket", region="ap-south-1")
    cfg = Client(home=home).sagemaker_config()
    assert (cfg.role, cfg.bucket, cfg.region) == (ROLE, "saved-bucket", "ap-south-1")  # config.yaml over the env
    given = steps.sagemaker_settings(sagemaker_role_arn="", sagemaker_bucket="run-bucket",
                                     sagemaker_region="us-west-2", sagemaker_instance_type="")
    cfg = Client(home=home, sagemaker=given).sagemaker_config()
    assert (cfg.role, cfg.bucket, cfg.region) == (ROLE, "run-bucket", "us-west-2")  # the run's over both
    assert "bucket: saved-bucket" in (home / "config.yaml").read_text()  # never saved


def test_a_bad_aws_region_in_the_environment_is_one_line(home, monkeypatch):
    monkeypatch.setenv("AWS_REGION", "Europe")
    with pytest.raises(SpecError, match=r"^invalid \$AWS_REGION 'Europe': use an AWS region such as us-east-1"):
        Client(home=home).sagemaker_config()


def test_data_uri_on_a_local_run_is_said_to_be_ignored(home, capsys):
    """It was dropped without a word; the local branch reads data_volume."""
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "data_uri=s3://bkt/cifar10",
                          "--param", "sagemaker_bucket=bkt", "--param", "data_volume=nothere")
    lines = err.splitlines()
    assert lines[0] == ("dtrain: warning: --param data_uri, sagemaker_bucket are read only with "
                        "training_runtime=sagemaker: this local run ignores them (its data is the volume "
                        "data_volume='nothere')"), err
    assert code == 2 and lines[1].startswith("dtrain: error: pipeline 'hybrid-cifar10' mounts volume 'nothere'"), err
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "data_volume=nothere")
    assert "warning" not in err, err  # nothing given that the run ignores: nothing said


@pytest.mark.skipif("sagemaker" not in BACKENDS, reason="needs the SageMaker backend")
@pytest.mark.slow
def test_a_home_without_config_runs_the_sagemaker_branch_from_parameters_and_aws_region(tmp_path):
    """As a step pod on EKS: no config.yaml, role and bucket as the run's parameters, the region
    from $AWS_REGION (IRSA sets it). The training job is made in that region, with that role."""
    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port, verbose=False)
    server.start()
    region = "eu-west-2"
    home = tmp_path / "pod-home"
    try:
        aws = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_REGION": region}
        session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                        region_name=region)
        make = lambda name: session.client(name, endpoint_url=aws["AWS_ENDPOINT_URL"])  # noqa: E731
        make("s3").create_bucket(Bucket="pod-bucket", CreateBucketConfiguration={"LocationConstraint": region})
        make("s3").put_object(Bucket="pod-bucket", Key="cifar10/cifar-10-batches-py/data_batch_1", Body=b"-")
        dt = Dtrain(home, env=aws)
        proc = dt("pipeline", "run", "hybrid-cifar10", "--param", "training_runtime=sagemaker", *SHORT,
                  "--param", "job_name=cifar10-hybrid",
                  "--param", "data_uri=s3://pod-bucket/cifar10", "--param", f"sagemaker_role_arn={ROLE}",
                  "--param", "sagemaker_bucket=pod-bucket", "--param", "sagemaker_instance_type=ml.c5.xlarge",
                  timeout=300, cwd=tmp_path)
        desc = make("sagemaker").describe_training_job(TrainingJobName="cifar10-hybrid")
    finally:
        server.stop()
    assert not (home / "config.yaml").exists()  # configured by nothing but the run and the environment
    assert "pipeline 'hybrid-cifar10' succeeded" in proc.stdout, proc.stdout + proc.stderr
    assert "warning" not in proc.stderr, proc.stderr
    assert desc["RoleArn"] == ROLE and f":{region}:" in desc["TrainingJobArn"]
    assert desc["ResourceConfig"]["InstanceType"] == "ml.c5.xlarge"
    assert f".dkr.ecr.{region}.amazonaws.com/" in desc["AlgorithmSpecification"]["TrainingImage"]
    assert desc["ModelArtifacts"]["S3ModelArtifacts"].startswith("s3://pod-bucket/")
    assert desc["InputDataConfig"][0]["DataSource"]["S3DataSource"]["S3Uri"] == "s3://pod-bucket/cifar10"
    (run,) = (home / "pipelines").glob("hybrid-cifar10-*")
    assert {p.parent.name for p in run.glob("*/executor_output.json")} == {"check-condition", "cifar10-job",
                                                                           "train-3"}
    assert json.loads((run / "train-3" / "executor_output.json").read_text())["parameterValues"]["model"] \
        == desc["ModelArtifacts"]["S3ModelArtifacts"]

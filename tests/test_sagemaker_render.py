"""SageMaker requests are pure functions of the spec, and every one passes botocore's model."""

from __future__ import annotations

import json

import pytest

from dtrain.backends.sagemaker import render
from dtrain.backends.sagemaker.config import SageMakerConfig
from dtrain.backends.sagemaker.validate import check_request
from dtrain.errors import SpecError
from dtrain.spec import JobSpec
from dtrain.spec_sagemaker import SageMakerOptions, parse_channel, parse_hyperparameters

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
VPC = dict(subnets=("subnet-0abc1234",), security_groups=("sg-0abc1234",))
CIFAR = ("python", "-m", "dtrain.workloads.cifar10", "train", "--batch-size", "16", "--lr=0.05")


def cfg(**kw) -> SageMakerConfig:
    return SageMakerConfig(**{"role": ROLE, "bucket": "my-bucket", "region": "eu-west-1", **kw})


def spec(**kw) -> JobSpec:
    sm = kw.pop("sm", {})
    return JobSpec(**{"name": "cifar", "command": CIFAR, "backend": "sagemaker", **kw}, sagemaker=SageMakerOptions(**sm))


MATRIX = [
    pytest.param(dict(), {}, id="1-instance"),
    pytest.param(dict(processes=4, launcher="torchrun"), {}, id="4-instances-torchrun"),
    pytest.param(dict(processes=8, launcher="torchrun", gpu=1), dict(instance_type="ml.g5.12xlarge"), id="gpu-torchrun"),
    pytest.param(dict(processes=4, launcher="mpi"), dict(instance_count=2), id="mpi-2x2"),
    pytest.param(dict(), dict(channels=("training=s3://data/cifar10",)), id="s3-channel"),
    pytest.param(dict(processes=2, launcher="torchrun"),
                 dict(channels=("training=efs://fs-0123456789abcdef0/cifar", "extra=fsx://fs-01234567/mnt/x")),
                 id="efs-fsx-channels-vpc"),
    pytest.param(dict(), dict(spot=True, max_runtime=3600), id="spot"),
    pytest.param(dict(processes=2, launcher="mpi"), dict(spot=True, max_runtime=600, max_wait=1200,
                                                          network_isolation=True, encrypt_inter_container=True),
                 id="spot-mpi-isolated"),
]


@pytest.mark.parametrize("vpc", [False, True], ids=["no-vpc", "vpc"])
@pytest.mark.parametrize("fields, sm", MATRIX)
def test_every_request_passes_botocore_validation(fields, sm, vpc):
    c = cfg(**(VPC if vpc else {}))
    s = spec(**fields, sm=sm)
    if any("://fs-" in ch for ch in sm.get("channels", ())) and not vpc:
        with pytest.raises(SpecError, match="EFS and FSx channels are reached through a VPC"):
            render.training_job_request(s, c)
        return
    req = render.training_job_request(s, c)
    check_request("sagemaker", "CreateTrainingJob", req)
    for put in render.upload_plan(s, c, cwd="/tmp").requests():
        check_request("s3", "PutObject", put)
    assert ("VpcConfig" in req) == vpc
    assert req["EnableManagedSpotTraining"] == s.sagemaker.spot
    if s.sagemaker.spot:
        stop = req["StoppingCondition"]
        assert stop["MaxWaitTimeInSeconds"] >= stop["MaxRuntimeInSeconds"]
    count, per_host = render.instances(s, c)
    assert req["ResourceConfig"]["InstanceCount"] * per_host == s.processes


def test_the_checker_catches_what_the_server_would_refuse():
    req = render.training_job_request(spec(), cfg())
    for bad, match in ((dict(TrainingJobName="no_underscores"), "TrainingJobName"),
                       (dict(RoleArn="arn:aws:iam::12:role/x"), "RoleArn"),
                       (dict(EnableManagedSpotTraining="yes"), "EnableManagedSpotTraining"),
                       (dict(Environment={f"K{i}": "v" for i in range(101)}), "more than 100"),
                       (dict(Bogus=1), "Unknown parameter")):
        with pytest.raises(SpecError, match=match):
            check_request("sagemaker", "CreateTrainingJob", {**req, **bad})


def test_names_are_the_sdk_names_and_values_json():
    s = spec(processes=2, launcher="torchrun", env={"A": "1"})
    req = render.training_job_request(s, cfg())
    hps = {k: json.loads(v) for k, v in req["HyperParameters"].items()}
    assert hps["sagemaker_program"] == "dtrain_entry.py"
    assert hps["sagemaker_submit_directory"] == "s3://my-bucket/dtrain/cifar/source/sourcedir.tar.gz"
    assert hps["sagemaker_torch_distributed_enabled"] is True
    assert hps["sagemaker_instance_type"] == "ml.m5.xlarge"
    assert (hps["batch-size"], hps["lr"]) == ("16", "0.05")
    assert req["Environment"] == {"DTRAIN_JOB_NAME": "cifar", "DTRAIN_PROJECT": "default", "A": "1"}
    assert req["OutputDataConfig"]["S3OutputPath"] == "s3://my-bucket/dtrain"
    assert req["CheckpointConfig"] == {"S3Uri": "s3://my-bucket/dtrain/cifar/checkpoints",
                                       "LocalPath": "/opt/ml/checkpoints"}
    mpi = render.training_job_request(spec(processes=4, launcher="mpi", sm=dict(instance_count=2)), cfg())
    assert json.loads(mpi["HyperParameters"]["sagemaker_mpi_enabled"]) is True
    assert json.loads(mpi["HyperParameters"]["sagemaker_mpi_num_of_processes_per_host"]) == 2
    assert "sagemaker_torch_distributed_enabled" not in mpi["HyperParameters"]


@pytest.mark.parametrize("fields, itype, count, per_host", [
    (dict(processes=2, gpu=1), "ml.g5.12xlarge", 1, 2),  # 4 GPUs: both processes on one instance
    (dict(processes=8, gpu=1), "ml.g6.12xlarge", 2, 4),
    (dict(processes=4, gpu=2), "ml.p3.16xlarge", 1, 4),
    (dict(processes=4, gpu=4), "ml.p3.16xlarge", 2, 2),
    (dict(processes=3, gpu=1), "ml.g5.2xlarge", 3, 1),
    (dict(processes=3), "ml.m5.xlarge", 3, 1),  # no GPUs: one process per instance
    (dict(processes=16, gpu=1), "ml.p2.16xlarge", 1, 16),
    (dict(processes=16, gpu=1), "ml.p6-b200.48xlarge", 2, 8),
])
@pytest.mark.parametrize("launcher", ["torchrun", "mpi"])
def test_processes_per_instance_are_sent_for_both_launchers(fields, itype, count, per_host, launcher):
    """The toolkit starts sagemaker_mpi_num_of_processes_per_host processes on each host for torchrun
    as for mpirun (else one per GPU of the type), so the request always names it: the job has
    exactly --processes ranks, one per --gpu G GPUs, on whatever type."""
    s = spec(**fields, launcher=launcher, sm=dict(instance_type=itype))
    req = render.training_job_request(s, cfg())
    check_request("sagemaker", "CreateTrainingJob", req)
    assert req["ResourceConfig"]["InstanceCount"] == count
    assert json.loads(req["HyperParameters"]["sagemaker_mpi_num_of_processes_per_host"]) == per_host


@pytest.mark.parametrize("itype, processor", [("ml.m5.xlarge", "cpu"), ("ml.c7i.large", "cpu"),
                                              ("ml.g5.12xlarge", "gpu"), ("ml.p4d.24xlarge", "gpu"),
                                              ("ml.g7e.2xlarge", "gpu")])
def test_the_default_image_is_the_one_for_the_types_processor(itype, processor):
    """A GPU type gets the GPU image (the CPU one would train on the CPU of a GPU instance)."""
    req = render.training_job_request(spec(sm=dict(instance_type=itype)), cfg(region="us-east-1"))
    assert req["AlgorithmSpecification"]["TrainingImage"] == \
        f"763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-{processor}-py311"
    mine = render.training_job_request(spec(image="my/image:1", sm=dict(instance_type=itype)), cfg())
    assert mine["AlgorithmSpecification"]["TrainingImage"] == "my/image:1"


@pytest.mark.parametrize("region, registry", [
    ("eu-west-1", "763104351884.dkr.ecr.eu-west-1.amazonaws.com"),
    ("af-south-1", "626614931356.dkr.ecr.af-south-1.amazonaws.com"),
    ("cn-north-1", "727897471807.dkr.ecr.cn-north-1.amazonaws.com.cn"),
    ("us-gov-west-1", "442386744353.dkr.ecr.us-gov-west-1.amazonaws.com"),
])
def test_the_default_image_comes_from_the_regions_registry(region, registry):
    req = render.training_job_request(spec(), cfg(region=region))
    assert req["AlgorithmSpecification"]["TrainingImage"].startswith(registry + "/pytorch-training:")


@pytest.mark.parametrize("fields, itype, says", [
    (dict(processes=3, gpu=1), "ml.m5.xlarge", "ml.m5.xlarge has no GPUs, and the job asks for --gpu 1: pick a GPU type"),
    (dict(processes=2, gpu=1), "ml.trn1.2xlarge", "ml.trn1.2xlarge has no GPUs"),
    (dict(processes=4, gpu=1), "ml.g7.12xlarge", "the number of GPUs of an ml.g7.12xlarge is not known here: set "
                                                 "--instance-count"),
    (dict(processes=1), "ml.trn1.2xlarge", "ml.trn1.2xlarge runs AWS Neuron (Trainium), not CUDA or a CPU: give a "
                                           "Neuron training image with --image"),
])
def test_types_that_cannot_run_the_job_as_asked_are_refused(fields, itype, says):
    launcher = "torchrun" if fields["processes"] > 1 else "none"
    with pytest.raises(SpecError) as err:
        render.training_job_request(spec(**fields, launcher=launcher, sm=dict(instance_type=itype)), cfg())
    assert says in str(err.value) and "\n" not in str(err.value)
    with pytest.raises(SpecError, match="no AWS PyTorch training image is known for region xx-fake-9: give one with --image"):
        render.training_job_request(spec(), cfg(region="xx-fake-9"))
    # with an image or a count of instances, the same types are taken
    s = spec(processes=4, gpu=1, launcher="torchrun", sm=dict(instance_type="ml.g7.12xlarge", instance_count=2))
    assert render.training_job_request(s, cfg())["ResourceConfig"]["InstanceCount"] == 2


def test_a_hyperparameter_given_twice_is_refused():
    s = spec(command=("python", "train.py", "--lr", "0.3"), sm=dict(hyperparameters={"lr": 0.2}))
    with pytest.raises(SpecError, match=r"hyperparameter lr is given twice, as --lr 0.3 in the command and as "
                                        r"--hp lr=0.2: give it once"):
        render.training_job_request(s, cfg())
    same = spec(command=("python", "train.py", "--lr", "0.3"), sm=dict(hyperparameters={"lr": "0.3"}))
    assert json.loads(render.training_job_request(same, cfg())["HyperParameters"]["lr"]) == "0.3"
    # the same argument for the script (`--lr 0.3`, `--amp true`): the typed --hp value is sent
    typed = spec(command=("python", "train.py", "--lr", "0.3", "--amp", "true"),
                 sm=dict(hyperparameters={"lr": 0.3, "amp": True}))
    hps = render.training_job_request(typed, cfg())["HyperParameters"]
    assert (hps["lr"], hps["amp"]) == ("0.3", "true")


@pytest.mark.parametrize("launcher, toolkit", [("none", 5), ("torchrun", 8), ("mpi", 7)])
def test_too_many_hyperparameters_count_the_toolkits_own(launcher, toolkit):
    """101 --hp read 'HyperParameters has 106 entries, more than 100': five the user never gave."""
    processes = 1 if launcher == "none" else 2
    fits = {f"h{i}": "1" for i in range(100 - toolkit - 2)}  # CIFAR's command gives --batch-size and --lr
    request = render.training_job_request(spec(processes=processes, launcher=launcher, sm=dict(hyperparameters=fits)), cfg())
    check_request("sagemaker", "CreateTrainingJob", request)
    over = spec(processes=processes, launcher=launcher, sm=dict(hyperparameters={**fits, "one_more": "1"}))
    with pytest.raises(SpecError, match=rf"^{101 - toolkit} hyperparameters .* and the {toolkit} sagemaker_\* ones the "
                                        rf"training toolkit needs make 101, more than SageMaker's 100: pass at most "
                                        rf"{100 - toolkit} "):
        render.training_job_request(over, cfg())


def test_more_instances_than_the_bound_are_refused():
    s = spec(processes=1001, launcher="torchrun")
    with pytest.raises(SpecError, match="would take 1001 instances, more than 1000"):
        render.training_job_request(s, cfg())


def test_gpu_table_names_real_training_types():
    import botocore.session

    known = set(botocore.session.get_session().get_service_model("sagemaker").shape_for("TrainingInstanceType").enum)
    assert set(render.GPUS_PER_INSTANCE) <= known


def test_max_restarts_is_the_retry_strategy():
    assert "RetryStrategy" not in render.training_job_request(spec(), cfg())
    req = render.training_job_request(spec(max_restarts=3), cfg())
    check_request("sagemaker", "CreateTrainingJob", req)
    assert req["RetryStrategy"] == {"MaximumRetryAttempts": 3}


def test_command_split():
    p = render.split_command(("python", "train.py", "--epochs", "2", "--lr=0.1"))
    assert (p.program, p.entry_argv, p.hyperparameters) == ("train.py", (), {"epochs": "2", "lr": "0.1"})
    p = render.split_command(CIFAR)
    assert p.program == render.ENTRY
    assert p.entry_argv == ("python", "-m", "dtrain.workloads.cifar10", "train")
    # a bare flag cannot be a hyperparameter: the whole command stays in the entry file
    p = render.split_command(("python", "train.py", "--fast", "--epochs", "2"))
    assert p.entry_argv == ("python", "train.py", "--fast", "--epochs", "2") and p.hyperparameters == {}
    # a repeated flag, or one named like the toolkit's own parameters, cannot be one either
    # and a one-letter flag comes back from the training toolkit as `-k 1`, which a script that
    # defines only `--k` refuses (sagemaker-training-toolkit's mapping.to_cmd_args)
    for argv in (("python", "train.py", "--tag", "a", "--tag", "b", "--lr", "0.1"),
                 ("python", "train.py", "--sagemaker_program", "x.py"),
                 ("python", "train.py", "--lr", "0.1", "--k", "1"), ("python", "train.py", "--k=1")):
        p = render.split_command(argv)
        assert (p.program, p.entry_argv, p.hyperparameters) == (render.ENTRY, argv, {})
    script = render.entry_script(p.entry_argv)
    compile(script, "dtrain_entry.py", "exec")
    assert "os.execvp" in script


def test_efs_needs_a_vpc():
    s = spec(sm=dict(channels=("training=efs://fs-0123456789abcdef0/cifar",)))
    with pytest.raises(SpecError, match="--subnets subnet-... --security-groups sg-"):
        render.training_job_request(s, cfg())
    ch = render.training_job_request(s, cfg(**VPC))["InputDataConfig"][0]["DataSource"]["FileSystemDataSource"]
    assert ch == {"FileSystemId": "fs-0123456789abcdef0", "FileSystemAccessMode": "ro", "FileSystemType": "EFS",
                  "DirectoryPath": "/cifar"}


@pytest.mark.parametrize("make, match", [
    (lambda: SageMakerOptions(instance_type="p3.2xlarge"), "start with 'ml.'"),
    (lambda: SageMakerOptions(spot=True, max_runtime=3600, max_wait=600), "max_wait 600 is below max_runtime 3600"),
    (lambda: SageMakerOptions(max_wait=600), "spot training only"),
    (lambda: SageMakerOptions(max_runtime=10**9), "invalid max_runtime"),  # the SDK's field, not the CLI's flag
    (lambda: SageMakerOptions(volume_size=0), "invalid volume_size"),
    (lambda: parse_channel("training"), "NAME=URI"),
    (lambda: parse_channel("training=http://x"), "s3://BUCKET"),
    (lambda: parse_channel("t=efs://nope/x"), "file system by its id"),
    (lambda: parse_channel("t=s3://My_Bucket/x"), "the S3 URI's bucket name must be 3-63 lower-case letters"),
    (lambda: parse_channel("t=s3://b/x"), "the S3 URI's bucket name must be 3-63"),
    (lambda: SageMakerOptions(channels=("a=s3://bkt/x", "a=s3://bkt/y")), "repeat"),
    (lambda: parse_hyperparameters(["epochs"]), "KEY=VALUE"),
    (lambda: SageMakerConfig(role="not-an-arn"), "--role"),
    (lambda: SageMakerConfig(subnets=("subnet-0abc1234",)), "both"),
    (lambda: render.training_job_request(spec(sm=dict(channels=("t=file:///data",))), cfg()), "only --local"),
    (lambda: render.training_job_request(spec(processes=3, launcher="mpi", sm=dict(instance_count=2)), cfg()),
     "split evenly"),
    (lambda: render.training_job_request(spec(snapshot_on_success="data"), cfg()), "drop --snapshot-on-success"),
    (lambda: render.training_job_request(spec(env={"ENABLE_SNAPSHOT": "true", "PVC_NAME": "data"}), cfg()),
     "no volumes to snapshot"),
    (lambda: render.training_job_request(spec(max_restarts=31), cfg()), "at most 30 times"),
    (lambda: render.training_job_request(spec(processes=16, launcher="torchrun", gpu=1, sm=dict(
        instance_type="ml.g5.12xlarge", instance_count=2)), cfg()), "exceed the 4 GPUs of ml.g5.12xlarge"),
    (lambda: SageMakerConfig(prefix="/runs"), "--prefix"),
    (lambda: SageMakerConfig(prefix="runs/"), "--prefix"),
    (lambda: SageMakerConfig(prefix="a//b"), "--prefix"),
    (lambda: SageMakerConfig(role=ROLE + "\n"), "--role"),
    (lambda: SageMakerConfig(subnets=("subnet-0abc1234",), security_groups=tuple(f"sg-{i}" for i in range(6))),
     "up to 5 ids"),
    (lambda: SageMakerConfig(subnets=("subnet-" + "a" * 26,), security_groups=("sg-1",)), "at most 32 characters"),
    (lambda: render.training_job_request(JobSpec.from_dict(dict(name="x", command=["python", "t.py"], volumes=["data:/mnt"])),
                                         cfg()), "--channel"),
    (lambda: SageMakerConfig().require_aws(), "dtrain config sagemaker --role"),
])
def test_bad_input_names_the_fix(make, match):
    with pytest.raises(SpecError, match=match):
        make()


def test_spec_round_trips_with_sagemaker_options():
    s = spec(sm=dict(spot=True, channels=("training=s3://bkt/x",), hyperparameters={"epochs": 2}))
    assert JobSpec.from_dict(json.loads(json.dumps(s.to_dict()))) == s
    assert JobSpec.from_dict({**spec().to_dict(), "sagemaker": None}).sagemaker is None


def test_a_mistyped_instance_type_is_not_saved(tmp_path):
    """`dtrain config sagemaker --instance-type` is checked as the requests that will use it are (the SDK's
    refusal names its argument, instance_type=)."""
    import dtrain

    client = dtrain.Client(home=tmp_path)
    with pytest.raises(SpecError, match=r"^instance_type='ml.m5.xlarg' is not one of its \d+ values: did you mean "
                                        r"ml.m5.xlarge"):
        client.configure_sagemaker(instance_type="ml.m5.xlarg")
    assert not (tmp_path / "config.yaml").exists()
    assert client.configure_sagemaker(instance_type="ml.g5.xlarge").settings["instance_type"] == "ml.g5.xlarge"

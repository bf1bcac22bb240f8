"""Eleventh audit, config: `dtrain config kubernetes`, config.yaml rewrites that keep the user's
comments, config.yaml's numbers refused in one line, SageMaker's Stopping shown as such by `list`,
and dry runs that look up what a submit would refuse."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest
import yaml

from conftest import Dtrain, assert_usage_error

from dtrain.cli import format as fmt
from dtrain.cli.main import build_parser
from dtrain.client import Client

ROLE = "arn:aws:iam::123456789012:role/SageMakerRole"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


# ---------------------------------------------------------------- SageMaker: Stopping in `list`

def _stopping(name: str) -> tuple[dict, dict]:
    """ListTrainingJobs' summary and DescribeTrainingJob's answer for a job StopTrainingJob was sent
    to: TrainingJobStatus and SecondaryStatus both Stopping (botocore's enums for each)."""
    arn = f"arn:aws:sagemaker:us-east-1:123456789012:training-job/{name}"
    summary = {"TrainingJobName": name, "TrainingJobArn": arn, "CreationTime": T0, "LastModifiedTime": T0,
               "TrainingJobStatus": "Stopping", "SecondaryStatus": "Stopping"}
    desc = {"TrainingJobName": name, "TrainingJobArn": arn, "TrainingJobStatus": "Stopping",
            "SecondaryStatus": "Stopping", "CreationTime": T0, "LastModifiedTime": T0,
            "AlgorithmSpecification": {"TrainingInputMode": "File", "TrainingImage": "img"},
            "ResourceConfig": {"InstanceType": "ml.m5.xlarge", "InstanceCount": 2, "VolumeSizeInGB": 30},
            "StoppingCondition": {"MaxRuntimeInSeconds": 600},
            "ModelArtifacts": {"S3ModelArtifacts": f"s3://dtrain-test/dtrain/{name}/output/model.tar.gz"},
            "SecondaryStatusTransitions": [
                {"Status": "Training", "StartTime": T0, "StatusMessage": "Training image download completed."},
                {"Status": "Stopping", "StartTime": T0, "StatusMessage": "Stopping the training job"}]}
    return summary, desc


def test_list_and_describe_show_a_stopping_sagemaker_job_as_stopping(tmp_path, capsys):
    """A job AWS reports Stopping (its programs given SIGTERM and time to save) read Running in
    `dtrain list`'s STATUS column and `describe`'s Status, as if the stop had not been taken."""
    boto3 = pytest.importorskip("boto3")
    from botocore.stub import Stubber

    from dtrain.backends.sagemaker.backend import Clients, SageMakerBackend
    from dtrain.backends.sagemaker.config import SageMakerConfig

    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                    region_name="us-east-1")
    sm = session.client("sagemaker")
    summary, desc = _stopping("stopme")
    with Stubber(sm) as stub:  # the Stubber checks both answers against botocore's service model
        stub.add_response("list_training_jobs", {"TrainingJobSummaries": [summary]})
        stub.add_response("describe_training_job", desc, {"TrainingJobName": "stopme"})
        stub.add_response("describe_training_job", desc, {"TrainingJobName": "stopme"})
        be = SageMakerBackend(SageMakerConfig(role=ROLE, bucket="dtrain-test"),
                              clients=Clients(sm, session.client("s3"), session.client("logs")))
        client = Client(home=tmp_path / "home", backend="sagemaker", backends={"sagemaker": be})
        for argv in (["list"], ["describe", "job", "stopme"]):
            args = build_parser(argv[0]).parse_args(argv)
            assert args.handler(args, client) == 0
        stub.assert_no_pending_responses()
    listed, described = capsys.readouterr().out.split("\n", 2)[1:]
    assert listed.split()[:2] == ["stopme", "Stopping"]
    assert "Status:" in described and described.split("Status:")[1].split()[0] == "Stopping"


@pytest.mark.parametrize("primary", ["Stopping", "InProgress"])
def test_the_stop_taken_maps_to_terminating_hosts(primary):
    """DescribeTrainingJob may say SecondaryStatus Stopping while TrainingJobStatus still reads
    InProgress: that job is stopping too, not Running as before."""
    from dtrain.backends.sagemaker.status import job_info, spec_from_description

    _, desc = _stopping("stopme")
    desc = {**desc, "TrainingJobStatus": primary}
    info = job_info(desc, spec_from_description(desc))
    assert info.message == "stopping" and {p.status for p in info.processes} == {"Terminating"}
    assert fmt.status_word(info) == "Stopping" and info.to_dict()["status"] == "Running"


def test_status_word_is_the_status_unless_every_process_is_terminating():
    from dtrain.backends.base import JobInfo, JobStatus, ProcessInfo
    from dtrain.spec import JobSpec

    spec = JobSpec(name="j", command=("python", "t.py"), processes=2, launcher="torchrun")

    def info(status, *procs):
        return JobInfo(name="j", spec=spec, status=status, backend="sagemaker", created=0.0,
                       processes=tuple(ProcessInfo(rank=i, status=s) for i, s in enumerate(procs)))

    assert fmt.status_word(info(JobStatus.RUNNING, "Terminating", "Terminating")) == "Stopping"
    assert fmt.status_word(info(JobStatus.RUNNING, "Running", "Terminating")) == "Running"
    assert fmt.status_word(info(JobStatus.RUNNING)) == "Running"
    assert fmt.status_word(info(JobStatus.DELETED, "Stopped", "Stopped")) == "Deleted"


# ---------------------------------------------------------------- dry runs look things up

@pytest.mark.parametrize("how, needles", [
    (["--pvc", "nosuch:/data"], ["no volume named 'nosuch'"]),
    (["--pvc", "fast:1Gi:/data"], ["unknown storage class 'fast'", "storage_classes:"]),
    (["-p", "nosuchproject"], ["nosuchproject"]),
])
def test_a_dry_run_refuses_what_the_submit_would_and_creates_nothing(home, tmp_path, how, needles):
    d = Dtrain(home)
    for dry in (["--dry-run"], []):  # the same refusal, dry or not
        r = d("submit", "j1", *dry, *how, "--", "python", "-c", "1", cwd=str(tmp_path), check=False)
        assert_usage_error(r, *needles)
        assert r.stdout == ""
    assert d.json("volume", "list", "--json") == [] and d.json("list", "--json", "-A") == []


def test_a_dry_run_refuses_a_name_in_use_and_a_new_volume_that_exists(home, tmp_path):
    d = Dtrain(home)
    d("volume", "create", "pvc-j2-0", "--size", "1Mi")
    r = d("submit", "j2", "--dry-run", "--pvc", "local:1Mi:/data", "--", "python", "-c", "1", cwd=str(tmp_path),
          check=False)
    assert_usage_error(r, "volume 'pvc-j2-0'", "already exists")
    plan = yaml.safe_load(d("submit", "j3", "--dry-run", "--pvc", "pvc-j2-0:/data", "--", "python", "-c", "1",
                            cwd=str(tmp_path)).stdout)
    assert plan["name"] == "j3"


# ---------------------------------------------------------------- dtrain config kubernetes

def test_config_kubernetes_sets_shows_and_unsets_its_settings(home, tmp_path):
    d = Dtrain(home)
    assert d("config", "kubernetes").stdout.startswith("Kubernetes settings: none")
    out = d("config", "kubernetes", "--context", "prod", "--namespace", "team-a", "--kubeconfig", "kc",
            "--gpus-per-node", "8", "--image", "reg.example.com/dtrain:1", cwd=str(tmp_path)).stdout
    assert out.startswith("Kubernetes settings saved: ")
    saved = yaml.safe_load((home / "config.yaml").read_text())["kubernetes"]
    assert saved == {"context": "prod", "namespace": "team-a", "kubeconfig": str(tmp_path / "kc"),  # made absolute
                     "gpus_per_node": 8, "image": "reg.example.com/dtrain:1"}
    shown = d("config", "kubernetes").stdout
    assert "context=prod" in shown and "namespace=team-a" in shown and "gpus_per_node=8" in shown
    client = Client(home=home)  # what the backend reads
    assert client.kubernetes_config().namespace_of("x") == "team-a"
    d("config", "kubernetes", "--unset", "namespace", "gpus-per-node")
    assert set(yaml.safe_load((home / "config.yaml").read_text())["kubernetes"]) == {"context", "kubeconfig", "image"}
    # one not set is said so (it read as saved, as if it had been removed)
    again = d("config", "kubernetes", "--unset", "namespace").stdout
    assert again == (f"Kubernetes settings saved: context=prod, kubeconfig={tmp_path / 'kc'}, "
                     f"image=reg.example.com/dtrain:1 (namespace was not set)\n")


@pytest.mark.parametrize("flags, needles", [
    (["--namespace", "Team_A"], ["invalid namespace 'Team_A'", "lower-case"]),
    (["--gpus-per-node", "0"], ["gpus_per_node 0", "from 1"]),
    (["--trainer", "v3"], ["trainer 'v3'", "v1, v2"]),
    (["--scheduler-name", "Bad Name"], ["scheduler_name"]),
    (["--context", ""], ["empty Kubernetes context", "--unset context"]),
    (["--unset", "bogus"], ["--unset 'bogus'", "not a Kubernetes setting"]),
    (["--role", "arn:aws:iam::123456789012:role/R"], ["--role is for 'dtrain config sagemaker'"]),
    (["--namespace", "a", "--unset", "namespace"], ["namespace is both set and unset"]),
])
def test_config_kubernetes_refuses_what_the_backend_would_and_writes_nothing(home, flags, needles):
    d = Dtrain(home)
    d("config", "kubernetes", "--context", "prod")
    before = (home / "config.yaml").read_bytes()
    assert_usage_error(d("config", "kubernetes", *flags, check=False), *needles)
    assert (home / "config.yaml").read_bytes() == before


def test_kubernetes_flags_elsewhere_are_refused(home):
    d = Dtrain(home)
    assert_usage_error(d("config", "project", "--namespace", "x", check=False),
                       "--namespace is for 'dtrain config kubernetes'")
    assert_usage_error(d("config", "sagemaker", "--context", "x", check=False),
                       "--context is for 'dtrain config kubernetes'")


def test_config_kubernetes_names_a_bad_saved_setting(home):
    (home / "config.yaml").write_text("kubernetes:\n  namespce: team-a\n")
    assert_usage_error(Dtrain(home)("config", "kubernetes", check=False), "config.yaml", "namespce",
                       "did you mean 'namespace'")


# ---------------------------------------------------------------- config.yaml rewrites keep comments

COMMENTED = """\
# my dtrain settings
backend: local   # for now
project: default # the usual

kubernetes:
  # the prod cluster
  context: prod
  image_pull_secrets:
  - regcred        # registry login
  request_timeout: 90  # seconds
# trailing note
"""


def test_config_rewrites_keep_comments_and_the_order_of_keys(home, tmp_path):
    """Every `dtrain config` that saves rewrote config.yaml from scratch: the user's comments went,
    and the keys came back in dtrain's order."""
    (home / "config.yaml").write_text(COMMENTED)
    d = Dtrain(home)
    d("config", "kubernetes", "--context", "staging", "--namespace", "team-a")
    d("config", "backend", "kubernetes")
    d("config", "storage-class", "fast", str(tmp_path / "fast"))
    text = (home / "config.yaml").read_text()
    assert text == COMMENTED.replace("context: prod", "context: staging").replace(
        "backend: local   # for now", "backend: kubernetes   # for now").replace(
        "  request_timeout: 90  # seconds\n",
        "  request_timeout: 90  # seconds\n  namespace: team-a\n"
        f"storage_classes:\n  fast: {tmp_path / 'fast'}\n")
    d("config", "kubernetes", "--unset", "namespace")
    d("config", "storage-class", "--unset", "fast")
    assert "namespace" not in (home / "config.yaml").read_text()
    assert (home / "config.yaml").read_text().startswith("# my dtrain settings\nbackend: kubernetes   # for now\n")
    cfg = Client(home=home).config
    assert cfg.kubernetes == {"context": "staging", "image_pull_secrets": ["regcred"], "request_timeout": 90}


@pytest.mark.parametrize("text", [
    "{project: default, backend: local}\n",  # a flow mapping
    "'backend': local\nkubernetes: {context: prod}\n",  # a quoted key, a flow value
    "kubernetes: &k\n  context: prod\nsagemaker: {}\n",  # an anchor
    "backend: local\r\nkubernetes:\r\n  context: prod\r\n",  # CRLF
])
def test_a_form_the_line_edit_does_not_read_is_rewritten_whole_and_means_the_same(home, text):
    (home / "config.yaml").write_bytes(text.encode())
    d = Dtrain(home)
    d("config", "kubernetes", "--namespace", "team-a")
    saved = yaml.safe_load((home / "config.yaml").read_text())
    assert saved["kubernetes"]["namespace"] == "team-a" and saved.get("backend", "local") == "local"
    assert d("config", "kubernetes").stdout.count("namespace=team-a") == 1


def test_config_yaml_is_never_written_through_a_symbolic_link(home, tmp_path):
    real = tmp_path / "dotfiles.yaml"
    real.write_text("# mine\nproject: default\n")
    (home / "config.yaml").symlink_to(real)
    r = Dtrain(home)("config", "kubernetes", "--context", "prod", check=False)
    assert_usage_error(r, "symbolic link", "by hand")
    assert real.read_text() == "# mine\nproject: default\n" and (home / "config.yaml").is_symlink()


# ---------------------------------------------------------------- config.yaml's numbers

NUMBERS = [  # (section, key, bad value as YAML, what the fix says)
    *[("kubernetes", "request_timeout", v, "seconds above 0 and at most 3600")
      for v in ("true", "1.0e+400", ".nan", "'90'", "0", "-1", "100000")],
    *[("kubernetes", k, v, "whole number from") for k in ("gpus_per_node", "elastic_min_replicas")
      for v in ("true", "8.0", "1.0e+400", "'8'", "0", "10000000000")],
    *[("kubernetes", "master_port", v, "whole number from 1 to 65535") for v in ("false", "70000", "'29500'", "1.0e+3")],
    *[("kubernetes", "ttl_seconds_after_finished", v, "whole number from 0") for v in ("-1", "true", "1.5")],
    *[("kubernetes", "shm_size", v, k) for v, k in (("16", "use a string"), ("'16'", "from 1Mi"), ("true", "use a string"))],
    *[("sagemaker", "master_port", v, "use 1..65535") for v in ("true", "1.0e+400", "'7777'", "0", "7777.0", "65536")],
    *[(None, "deleted_job_ttl", v, "use a duration such as 30m") for v in ("7", "true", "1.0e+400", "'7.5d'", "9999999d")],
]


@pytest.mark.parametrize("section, key, value, fix", NUMBERS,
                         ids=[f"{s or 'top'}.{k}={v}" for s, k, v, _ in NUMBERS])
def test_a_bad_number_in_config_yaml_is_one_line_naming_the_file_the_key_and_the_fix(home, section, key, value, fix):
    """A bool where a number is due, a number too large for a float (1.0e+400 reads as inf), NaN, a
    quoted number, a float where a whole number is due, and values out of bounds: each refused in
    one line naming config.yaml, the key and what to write, before the setting is used."""
    text = f"{key}: {value}\n" if section is None else f"{section}:\n  {key}: {value}\n"
    (home / "config.yaml").write_text(text)
    shown = {"kubernetes": ("config", "kubernetes"), "sagemaker": ("config", "sagemaker")}.get(section,
                                                                                            ("config", "project"))
    r = Dtrain(home)(*shown, check=False)
    assert_usage_error(r, str(home / "config.yaml"), key, fix)
    assert (home / "config.yaml").read_text() == text  # read, never rewritten


def test_a_kubernetes_job_without_an_image_names_the_command_that_sets_one():
    from dtrain.backends.kubernetes.config import KubernetesConfig
    from dtrain.backends.kubernetes.render import image_of
    from dtrain.errors import SpecError
    from dtrain.spec import JobSpec

    with pytest.raises(SpecError, match="dtrain config kubernetes --image IMAGE"):
        image_of(JobSpec(name="j", command=("python", "t.py")), KubernetesConfig())

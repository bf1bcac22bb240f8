"""Pipelines, audit 6: the jobs a run's steps submit carry the run (labels, SageMaker tags), and a
failed run's line names the step and branch in the pipeline's own words, not KFP's made-up ones."""

import pytest

from dtrain.backends.kubernetes import KubernetesConfig, render_job
from dtrain.backends.sagemaker import render as sm_render
from dtrain.backends.sagemaker.config import SageMakerConfig
from dtrain.backends.sagemaker.validate import check_request
from dtrain.errors import SpecError
from dtrain.spec import JobSpec

kfp = pytest.importorskip("kfp", reason="pipelines need the KFP SDK: pip install 'dtrain[pipelines]'")

from dtrain.pipelines import steps  # noqa: E402
from dtrain.pipelines.runner import _task_words  # noqa: E402

RUN = {steps.RUN_ID_LABEL: "8f0c2a8e-4d5e-4b7a-9f1e-0123456789ab",
       steps.RUN_NAME_LABEL: "hybrid-cifar10-2026-12-05-14-13-03-890188"}


def test_run_labels_are_label_values_and_skip_what_kfp_did_not_fill_in():
    assert steps.run_labels("hybrid-cifar10-2026-12-05-14-13-03-890188", "11243772") == {
        steps.RUN_ID_LABEL: "11243772", steps.RUN_NAME_LABEL: "hybrid-cifar10-2026-12-05-14-13-03-890188"}
    named = steps.run_labels("My run: nightly / CIFAR " + "x" * 80, "")
    assert list(named) == [steps.RUN_NAME_LABEL]
    JobSpec(name="a", command=["x"], labels=named)  # a valid label value, however the run was named
    assert steps.run_labels("{{$.pipeline_job_name}}", "{{$.pipeline_job_uuid}}") == {}
    assert steps.with_labels({"name": "a", "labels": {"team": "v"}}, {"k": "1"})["labels"] == {"team": "v", "k": "1"}


@pytest.mark.parametrize("labels, message", [
    ({"a b": "x"}, "invalid label key 'a b'"),
    ({"dtrain.io/job": "x"}, "invalid label key dtrain.io/job: the prefix is dtrain's"),
    ({"team": 1}, "invalid value 1 of label team"),
    ({"team": "-x"}, "invalid value '-x' of label team"),
    ("team=x", "invalid labels 'team=x': must be a mapping"),
])
def test_bad_labels_are_one_line(labels, message):
    with pytest.raises(SpecError, match=message.replace("(", r"\(")):
        JobSpec(name="a", command=["x"], labels=labels)


def test_labels_round_trip_through_the_spec_dict():
    spec = JobSpec(name="a", command=["x"], labels=RUN)
    assert JobSpec.from_dict(spec.to_dict()) == spec and spec.to_dict()["labels"] == RUN
    assert JobSpec.from_dict({"name": "a", "command": ["x"], "labels": None}).labels == {}


def test_kubernetes_objects_and_pods_carry_the_labels():
    from test_k8s_render import pod_templates, validate

    spec = JobSpec(name="train", command=["python", "t.py"], launcher="torchrun", processes=2, labels=RUN,
                   image="ghcr.io/example/cifar10:1")
    objects = render_job(spec, KubernetesConfig(), with_namespace=True)
    workload = next(o for o in objects if o["kind"] == "PyTorchJob")
    for obj in objects:
        validate(obj)
    assert RUN.items() <= workload["metadata"]["labels"].items()
    assert workload["metadata"]["labels"]["dtrain.io/job"] == "train"
    for template in pod_templates(workload):
        assert RUN.items() <= template["metadata"]["labels"].items()


def test_sagemaker_request_tags_the_job_with_the_labels():
    cfg = SageMakerConfig(role="arn:aws:iam::123456789012:role/SageMakerRole", bucket="my-bucket", region="eu-west-1")
    spec = JobSpec(name="cifar", command=["python", "t.py"], backend="sagemaker", labels=RUN)
    req = sm_render.training_job_request(spec, cfg)
    check_request("sagemaker", "CreateTrainingJob", req)
    tags = {t["Key"]: t["Value"] for t in req["Tags"]}
    assert RUN.items() <= tags.items() and tags["dtrain:project"] == "default"


def test_a_failed_steps_place_is_said_in_the_pipelines_words():
    from kfp import dsl

    from dtrain.pipelines.components import check_condition
    from dtrain.pipelines.hybrid import hybrid_cifar10
    from dtrain.pipelines.lanes import lane_detection

    said = _task_words(hybrid_cifar10.pipeline_spec, "'train' inside 'condition-2' inside 'condition-branches-1'")
    assert said == "'train' (train-local) in branch 'runtime-local'"
    assert _task_words(lane_detection.pipeline_spec, "'restore' inside 'condition-1'") == \
        "'restore' in branch 'accurate-enough'"
    assert _task_words(hybrid_cifar10.pipeline_spec, "'cifar10-job'") == "'cifar10-job'"

    @dsl.pipeline(name="mine")
    def mine(runtime: str = "local"):
        first = check_condition(training_runtime=runtime)
        with dsl.If(first.output == "local"):
            check_condition(training_runtime=runtime)

    said = _task_words(mine.pipeline_spec, "'check-condition-2' inside 'condition-1'")
    assert said == "'check-condition-2' in the branch where check-condition-Output == 'local'"
    assert "condition-1" not in said


def test_each_steps_output_is_kept_in_its_folder_and_the_run_says_where(home, capsys, tmp_path):
    """kfp.local only printed a step's output: once the terminal scrolled, it was gone."""
    from test_audit6_pipe import FAILING
    from test_pipelines import cli

    from dtrain.pipelines.runner import STEP_LOG

    module = tmp_path / "failing.py"
    module.write_text(FAILING)
    code, out, err = cli(home, capsys, "run", "--module", f"{module}:failing", "--param", "n=2")
    assert code == 0, err
    (run,) = (home / "pipelines").glob("failing-*")
    for step in ("check", "check-2"):
        kept = (run / step / STEP_LOG).read_text()
        assert "checking 2" in kept and "checking 2" in out  # kept, and still shown
    assert out.strip().splitlines()[-1] == f"each step's log: {run}/STEP/{STEP_LOG}"
    code, out, err = cli(home, capsys, "run", "--module", f"{module}:failing", "--param", "n=7")
    assert code == 1
    (failed,) = set((home / "pipelines").glob("failing-*")) - {run}
    log = failed / "check" / STEP_LOG
    assert "ValueError: n=7 is too large" in log.read_text()
    assert err.strip().splitlines()[-1].endswith(f"; the step's log: {log}")

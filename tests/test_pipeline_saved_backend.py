"""A default backend saved with `dtrain config backend NAME` is where `dtrain pipeline run` sends a shipped
pipeline's steps, as `dtrain --backend NAME` does: it ran them on the local backend (the parameter's default)."""

from __future__ import annotations

import pytest

pytest.importorskip("kfp", reason="pipelines need the KFP SDK: pip install 'dtrain[pipelines]'")

from dtrain.cli.main import main  # noqa: E402
from dtrain.pipelines import runner  # noqa: E402

NO_IMAGE = "to the kubernetes backend (a pipeline's --image for its jobs is --param job_image)"
URLS = "urls=https://example.com/a.tgz"


@pytest.fixture
def dt(home, capsys):
    def run(*args: str) -> tuple[int, str]:
        code = main(["--home", str(home), *args])
        return code, capsys.readouterr().err
    return run


def test_a_saved_default_backend_is_where_a_shipped_pipelines_steps_run(home, dt):
    """Reproduced: after 'dtrain config backend kubernetes', 'dtrain pipeline run hybrid-cifar10' went to the
    local backend. The run is a kubernetes one now: refused by the Kubernetes backend's dry run (no image
    configured) before any step, as 'dtrain --backend kubernetes pipeline run' is."""
    assert dt("config", "backend", "kubernetes")[0] == 0
    code, err = dt("pipeline", "run", "hybrid-cifar10")
    assert code == 2 and NO_IMAGE in err, err
    code, err = dt("pipeline", "run", "lane-detection", "--param", URLS)
    assert code == 2 and NO_IMAGE in err and "'lanes-" in err, err
    assert not (home / "pipelines").exists()  # no step ran


def test_a_param_naming_the_backend_wins_over_the_saved_default(home, dt):
    """--param training_runtime=sagemaker goes to SageMaker's checks (no data_uri), not refused as a
    disagreement: only the --backend flag and a --param contradict each other."""
    assert dt("config", "backend", "kubernetes")[0] == 0
    code, err = dt("pipeline", "run", "hybrid-cifar10", "--param", "training_runtime=sagemaker")
    assert code == 2 and "training_runtime=sagemaker needs the CIFAR10 data in S3" in err, err
    code, err = dt("--backend", "local", "pipeline", "run", "hybrid-cifar10", "--param", "training_runtime=kubernetes")
    assert code == 2 and "dtrain --backend local and --param training_runtime='kubernetes' disagree" in err, err


def test_a_saved_default_the_pipeline_cannot_use_is_refused_naming_where_it_came_from(home, dt):
    assert dt("config", "backend", "sagemaker")[0] == 0
    code, err = dt("pipeline", "run", "lane-detection", "--param", URLS)
    assert code == 2 and err == (
        "dtrain: error: invalid backend 'sagemaker': use local or kubernetes (its steps make volumes and snapshots, "
        "which SageMaker does not have); sagemaker is the default backend saved with 'dtrain config backend "
        "sagemaker': give --param backend=BACKEND to run this pipeline elsewhere\n"), err
    code, err = dt("pipeline", "run", "lane-detection", "--param", URLS, "--param", "backend=kubernetes")
    assert code == 2 and NO_IMAGE in err, err  # the --param wins: a kubernetes run


def test_the_saved_default_sets_only_a_shipped_pipelines_backend_parameter():
    lanes = runner.load("lane-detection")
    assert runner.with_backend(lanes, [URLS], None, saved="kubernetes") == [URLS, "backend=kubernetes"]
    assert runner.with_backend(lanes, [URLS, "backend=local"], None, saved="kubernetes") == [URLS, "backend=local"]
    assert runner.with_backend(lanes, [URLS], "local", saved="kubernetes") == [URLS, "backend=local"]  # the flag's
    mine = runner.Pipeline(info=lanes.info, func=lanes.func)  # a --module pipeline: no backend parameter
    assert runner.with_backend(mine, ["runtime=local"], None, saved="kubernetes") == ["runtime=local"]


def test_a_backend_saved_for_the_project_is_the_one_named(home, dt):
    from dtrain.client import Client

    Client(home=home, backend="local").create_project("vision")
    assert dt("config", "project", "vision")[0] == 0
    assert dt("config", "backend", "sagemaker", "-p", "vision")[0] == 0
    code, err = dt("pipeline", "run", "lane-detection", "--param", URLS)
    assert code == 2 and "sagemaker is the default backend saved with 'dtrain config backend sagemaker -p vision'" \
        in err, err


def test_the_saved_defaults_refusal_is_known_by_its_type_not_its_words(home, dt):
    """The CLI told the refusal of the backend it set from the saved default by the start of the message
    ('invalid PARAM VALUE'): a refusal worded otherwise went without the note naming where the value came
    from, and another parameter's refusal that happened to start so got the note. A BackendRefused
    carrying the value is the signal now."""
    from argparse import Namespace

    from dtrain.cli.pipeline import _params
    from dtrain.client import Client
    from dtrain.errors import SpecError

    assert dt("config", "backend", "sagemaker")[0] == 0
    lanes = runner.load("lane-detection")
    args = Namespace(default_backend=None, param=[URLS])

    def refusing(err: Exception):
        def check(params: dict) -> None:
            raise err
        return runner.Pipeline(info=lanes.info, func=lanes.func, check=check, backend_param="backend")

    worded_otherwise = runner.BackendRefused("the steps make volumes, which sagemaker has none of", value="sagemaker")
    with pytest.raises(SpecError) as said:
        _params(refusing(worded_otherwise), args, Client(home=home))
    assert str(said.value) == ("the steps make volumes, which sagemaker has none of; sagemaker is the default backend "
                               "saved with 'dtrain config backend sagemaker': give --param backend=BACKEND to run this "
                               "pipeline elsewhere")
    not_the_backend = SpecError("invalid backend 'sagemaker' for the data job's own tool: use gloo")
    with pytest.raises(SpecError) as said:
        _params(refusing(not_the_backend), args, Client(home=home))
    assert said.value is not_the_backend
    assert runner.BackendRefused("m", value="x").value == "x" and isinstance(runner.BackendRefused("m"), SpecError)


# ------------------------------------------------------------------------- the SDK: dtrain.pipelines.run_pipeline


def test_the_sdk_run_takes_the_saved_default_backend_and_a_param_still_wins(home, dt):
    """Reproduced: after 'dtrain config backend kubernetes', dtrain.pipelines.run_pipeline('hybrid-cifar10')
    ran its steps on the local backend (the parameter's default), where `dtrain pipeline run` sends them to
    kubernetes. Now it is a kubernetes run too: refused by the Kubernetes backend's dry run (no image
    configured) before any step."""
    from dtrain import pipelines
    from dtrain.errors import DtrainError

    assert dt("config", "backend", "kubernetes")[0] == 0
    with pytest.raises(DtrainError, match=r"to the kubernetes backend \(a pipeline's --image for its jobs is "
                                          r"--param job_image\)"):
        pipelines.run_pipeline("hybrid-cifar10", home=home)
    with pytest.raises(DtrainError, match="training_runtime=sagemaker needs the CIFAR10 data in S3"):
        pipelines.run_pipeline("hybrid-cifar10", params={"training_runtime": "sagemaker"}, home=home)
    assert not (home / "pipelines").exists()  # no step ran


def test_the_sdk_run_refuses_a_saved_default_the_pipeline_cannot_use_naming_where_it_came_from(home, dt):
    from dtrain import pipelines
    from dtrain.errors import DtrainError, SpecError

    assert dt("config", "backend", "sagemaker")[0] == 0
    with pytest.raises(SpecError) as said:
        pipelines.run_pipeline("lane-detection", params={"urls": "https://example.com/a.tgz"}, home=home)
    assert str(said.value) == (
        "invalid backend 'sagemaker': use local or kubernetes (its steps make volumes and snapshots, which SageMaker "
        "does not have); sagemaker is the default backend saved with 'dtrain config backend sagemaker': give "
        "params={'backend': BACKEND} to run this pipeline elsewhere")
    with pytest.raises(SpecError) as said:  # named in params: refused as the parameter's own, no note
        pipelines.run_pipeline("lane-detection", params={"urls": "https://example.com/a.tgz", "backend": "sagemaker"},
                               home=home)
    assert "default backend saved" not in str(said.value)
    with pytest.raises(DtrainError, match=r"to the kubernetes backend"):  # the params entry wins: a kubernetes run
        pipelines.run_pipeline("lane-detection", params={"urls": "https://example.com/a.tgz", "backend": "kubernetes"},
                               home=home)

"""What a pipeline run refuses before its first step: image parameters that are no image reference,
and jobs the chosen backend would refuse at submit (no image on Kubernetes, SageMaker not
configured, a channel SageMaker cannot read), which failed steps later with a traceback. And what
an interrupted run says and leaves: the jobs that go on, no program folders of its steps."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
from dtrain.client import Client
from dtrain.errors import SpecError
from dtrain.pipelines import steps
from test_pipelines import NS, cli
from test_sagemaker_backend import clients, code, moto_url  # noqa: F401  (a moto server for this module)

kfp = pytest.importorskip("kfp", reason="pipelines need the KFP SDK: pip install 'dtrain[pipelines]'")

REFERENCE = ("use an image reference such as registry.example.com/team/image:1.0 ([HOST/]PATH[:TAG][@sha256:DIGEST], "
             "PATH lower-case, HOST/PATH at most 255 characters)")
DIGEST = "sha256:" + "0123456789abcdef" * 4


def hybrid_params(**given) -> dict:
    """The hybrid pipeline's parameters as `pipeline run` passes them: its defaults, then `given`."""
    from dtrain.pipelines import runner

    return {**runner.parse_params(runner.load("hybrid-cifar10"), []), **given}


def hybrid_plan(params: dict) -> steps.Plan:
    from dtrain.pipelines import hybrid  # kfp loads with it

    return hybrid.plan(params)


# ---------------------------------------------------------------- image parameters


@pytest.mark.parametrize("value", [
    "ghcr.io/example/cifar10:1", "busybox", "localhost:5000/team/x", "Registry.Example.com/x:latest",
    "pytorch/pytorch:2.5.1-cuda12.4-cudnn9-runtime", "[::1]:5000/x:1", f"x@{DIGEST}", f"a__b/c--d.e_f:1@{DIGEST}",
    "763104351884.dkr.ecr.us-east-1.amazonaws.com/pytorch-training:2.3.0-cpu-py311", "a" * 255,
])
def test_image_references_registries_take_pass(value):
    assert steps.check_image(value, "job_image") == value
    assert steps.check_image(value, "image", required=True) == value


@pytest.mark.parametrize("value", [
    "Reg/X:1", " reg/x:1", "reg/x:1 ", "reg/x y", "reg/x:", "reg//x", "-x", "x/", "x@sha256:abc", "UPPER",
    "reg/x\n", "caf\u00e9", "x:" + "a" * 129, "a" * 256, "a/" + "b" * 254, 7, None,
])
def test_what_no_registry_takes_is_one_line_naming_the_parameter(value):
    with pytest.raises(SpecError) as err:
        steps.check_image(value, "job_image")
    message = str(err.value)
    assert message.startswith("invalid job_image ") and message.endswith(
        f"{REFERENCE}, or '' for the backend's configured image") and "\n" not in message
    # the job image of every step's spec is checked where the step makes it (a KFP server's run)
    with pytest.raises(SpecError, match="^invalid job_image "):
        steps.cifar10_spec(runtime="kubernetes", job_name="c", processes=1, epochs=1, batch_size=1, lr=0.1,
                           backend="gloo", data_volume="d", image=value)
    with pytest.raises(SpecError, match="^invalid job_image "):
        steps.lanes_train_spec(job_name="t", volume="v", image=value)


def test_an_empty_job_image_is_the_backends_but_the_component_image_is_needed():
    assert steps.check_image("", "job_image") == ""
    with pytest.raises(SpecError) as err:
        steps.check_image("", "image", required=True)
    assert str(err.value) == f"invalid image '': {REFERENCE}"


@pytest.mark.parametrize("pipeline, param, value", [
    ("hybrid-cifar10", "job_image", "Registry/Team/Image:1"),
    ("hybrid-cifar10", "job_image", "reg.example.com/x :1"),
    ("hybrid-cifar10", "image", "not an image"),
    ("hybrid-cifar10", "image", ""),
    ("lane-detection", "job_image", "reg.example.com/x:"),
    ("lane-detection", "image", "ghcr.io/dtrain/dtrain:0.1.0 "),
])
def test_a_bad_image_parameter_is_refused_before_any_step(dt, home, capsys, pipeline, param, value):
    """A bad job_image went into the job (a Kubernetes pod that never starts, a SageMaker job that
    fails minutes later); a bad component image was never looked at by `pipeline run`."""
    dt("volume", "create", "cifar10", "--size", "1Gi")
    dt("volume", "create", "lanes-candidate", "--size", "1Gi")  # a run before left it: refused after the image
    urls = ["--param", "urls=https://example.com/a.tgz"] if pipeline == "lane-detection" else []
    code, _out, err = cli(home, capsys, "run", pipeline, *urls, "--param", f"{param}={value}")
    assert code == 2 and err.count("\n") == 1, err
    empty = "" if param == "image" else ", or '' for the backend's configured image"
    assert err == f"dtrain: error: invalid {param} {value!r}: {REFERENCE}{empty}\n"
    assert not (home / "pipelines").exists()  # no step ran


def test_a_bad_job_name_is_refused_in_the_pipelines_words(home, capsys):
    """It said 'the job has no name: use dtrain submit NAME [options] -- COMMAND', a command no
    pipeline user typed."""
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "job_name=-")
    assert code == 2 and err.startswith("dtrain: error: invalid job name '-': use 1-53 lower-case letters"), err
    assert err.count("\n") == 1 and "submit" not in err


@pytest.mark.parametrize("runtime", ["local", "kubernetes"])
def test_nccl_without_gpus_is_refused_before_any_step(home, capsys, runtime):
    """The job asks for no GPUs (the pipeline has no GPU parameter): with nccl it always failed after starting."""
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", f"training_runtime={runtime}",
                          "--param", "backend=nccl")
    assert code == 2 and err == (f"dtrain: error: invalid backend 'nccl' with training_runtime={runtime}: the "
                                 "pipeline's job gets no GPUs there (it has no GPU parameter), and nccl needs one per "
                                 "process: use --param backend=gloo\n"), err
    assert not (home / "pipelines").exists()
    spec, _model = steps.cifar10_spec(runtime="sagemaker", job_name="sm", processes=1, epochs=1, batch_size=8, lr=0.1,
                                      backend="nccl", data_volume="", data_uri="s3://bkt/cifar10")
    assert "nccl" in spec["command"]  # a SageMaker GPU instance type gives the ranks their GPUs


# ---------------------------------------------------------------- jobs the backend would refuse


def test_a_kubernetes_run_without_a_job_image_is_refused_before_any_step(home, capsys, tmp_path):
    """It ran check-condition and cifar10-job, then the train step's submit failed with a traceback."""
    cluster = FakeCluster()
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "cifar10", "namespace": NS},
                    "spec": {"resources": {"requests": {"storage": "1Gi"}}, "accessModes": ["ReadWriteMany"]}})
    with FakeKubeServer(cluster) as server:
        kubeconfig = tmp_path / "kubeconfig"
        server.write_kubeconfig(kubeconfig)
        (home / "config.yaml").write_text(yaml.safe_dump({"kubernetes": {"kubeconfig": str(kubeconfig)}}))
        code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "training_runtime=kubernetes",
                              "--param", "job_name=cifar10-hybrid")
        assert code == 2 and err.count("\n") == 1, err
        assert err.startswith("dtrain: error: pipeline 'hybrid-cifar10' cannot submit job 'cifar10-hybrid' to the "
                              "kubernetes backend (a pipeline's --image for its jobs is --param job_image): job "
                              "'cifar10-hybrid' needs a container image on Kubernetes: pass --image"), err
        assert not (home / "pipelines").exists()
        # with the image given, the dry run passes and still sends nothing to the cluster
        client = Client(home=home, backend="kubernetes")
        params = hybrid_params(training_runtime="kubernetes", job_image="registry.example.com/cifar10:1")
        steps.check_plan("hybrid-cifar10", hybrid_plan(params), client=client)
    assert not [path for method, path in cluster.requests if method != "GET"]


def test_a_sagemaker_run_on_an_unconfigured_account_is_refused_before_any_step(home, capsys):
    """It ran two steps, then the train step failed with a traceback ending in the same reason."""
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "training_runtime=sagemaker",
                          "--param", "job_name=cifar10-hybrid", "--param", "data_uri=s3://bkt/cifar10")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith("dtrain: error: pipeline 'hybrid-cifar10' cannot submit job 'cifar10-hybrid' to the "
                          "sagemaker backend: SageMaker is not configured (sagemaker_role_arn and sagemaker_bucket "
                          "missing): pass --param sagemaker_role_arn="), err
    assert "or save them here with 'dtrain config sagemaker --role " in err, err
    assert not (home / "pipelines").exists()


def test_a_data_uri_sagemaker_cannot_read_is_refused_before_any_step(home, clients, code):  # noqa: F811
    """file:// passes the channel's own check (--local jobs read it) but no SageMaker job can."""
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    from test_sagemaker_backend import CFG

    be = SageMakerBackend(CFG, clients=clients, cwd=str(code))
    client = Client(home=home, backend="sagemaker", backends={"sagemaker": be})
    params = hybrid_params(training_runtime="sagemaker", job_name="sm-file-uri", data_uri="file:///data/cifar10")
    with pytest.raises(SpecError) as err:
        steps.check_plan("hybrid-cifar10", hybrid_plan(params), client=client)
    assert str(err.value).startswith("pipeline 'hybrid-cifar10' cannot submit job 'sm-file-uri' to the sagemaker "
                                     "backend: channel training=file:///data/cifar10 is a local folder, which only "
                                     "--local jobs can read: upload it"), err.value
    assert clients.sagemaker.list_training_jobs(NameContains="sm-file-uri")["TrainingJobSummaries"] == []
    clients.s3.put_object(Bucket=CFG.bucket, Key="cifar10/cifar-10-batches-py/data_batch_1", Body=b"-")
    steps.check_plan("hybrid-cifar10", hybrid_plan({**params, "data_uri": "s3://dtrain-test/cifar10"}), client=client)
    assert clients.sagemaker.list_training_jobs(NameContains="sm-file-uri")["TrainingJobSummaries"] == []


def test_the_jobs_a_plan_renders_are_the_jobs_the_steps_submit():
    """The dry run checks what the steps will send: the same specs, step for step."""
    from dtrain.pipelines import lanes, runner

    params = {**runner.parse_params(runner.load("lane-detection"), ["urls=https://example.com/a.tgz"]), "job_prefix": "p"}
    data, train, evaluate = lanes.plan(params).jobs
    assert data == steps.lanes_prepare_spec(job_name="p-data", urls="https://example.com/a.tgz")[0]
    assert train == steps.lanes_train_spec(job_name="p-train", volume="pvc-p-data-0")
    assert evaluate == steps.lanes_evaluate_spec(job_name="p-eval", volume="pvc-p-data-0", train_job="p-train")
    (job,) = hybrid_plan(hybrid_params(job_image="reg.example.com/c:1", job_name="cifar10-hybrid")).jobs
    assert job["image"] == "reg.example.com/c:1" and job["name"] == "cifar10-hybrid"


@pytest.mark.parametrize("prefix", ["BAD_", "a" * 43, "-a"])  # empty: the run's own (test_pipeline_rerun.py)
def test_a_bad_job_prefix_is_named_as_the_parameter_given(home, capsys, prefix):
    """'BAD_' or 43 characters were refused as "invalid job name 'BAD_-data'", a name the user never typed."""
    code, _out, err = cli(home, capsys, "run", "lane-detection", "--param", "urls=https://example.com/a.tgz", "--param", f"job_prefix={prefix}")
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"dtrain: error: invalid --param job_prefix={prefix!r}: use 1-42 lower-case letters, "), err
    assert not (home / "pipelines").exists()


def test_the_longest_job_prefix_makes_only_valid_names():
    from dtrain.names import check_name
    from dtrain.pipelines import lanes, runner

    params = runner.parse_params(runner.load("lane-detection"), ["urls=https://example.com/a.tgz", "job_prefix=" + "a" * 42])
    made = lanes.plan(params).makes
    assert ("volume", "pvc-" + "a" * 42 + "-data-0") in {(m.kind, m.name) for m in made}
    for m in made:
        check_name(m.name, m.kind)


# ---------------------------------------------------------------- an interrupted run


def test_an_interrupted_run_names_the_jobs_that_go_on(dt, home):
    """Ctrl-C ended `pipeline run` with exit 130 and nothing said, its job running on unseen."""
    dt("submit", "cifar10-hybrid", "--", "sleep", "60")
    dt.wait_for("cifar10-hybrid", {"Running"})
    client = Client(home=home)
    plan = hybrid_plan(hybrid_params(job_name="cifar10-hybrid"))
    assert steps.going_on("hybrid-cifar10", plan, client=client) == (
        "pipeline 'hybrid-cifar10' interrupted; its job 'cifar10-hybrid' (Running) goes on on the local backend: "
        "stop it with 'dtrain delete cifar10-hybrid' before running the pipeline again")
    dt("delete", "cifar10-hybrid")
    assert steps.going_on("hybrid-cifar10", plan, client=client) == (
        "pipeline 'hybrid-cifar10' interrupted; none of its jobs is left running")


@pytest.mark.slow
def test_sigterm_ends_a_run_as_ctrl_c_does(dt, home):
    """SIGTERM (a CI timeout) killed `pipeline run` where it stood: no word of the job it left
    running, and its steps' program folders in ROOT/.tmp for good."""
    import signal
    import subprocess

    from conftest import DTRAIN
    from dtrain.workloads.cifar10.data import write_synthetic

    dt("volume", "create", "cifar10", "--size", "1Gi")
    write_synthetic(Path(dt.json("volume", "describe", "cifar10")["extra"]["path"]), fmt="python", n_train=400,
                    n_test=10, seed=1)
    proc = subprocess.Popen([DTRAIN, "pipeline", "run", "hybrid-cifar10", "--param", "epochs=500", "--param",
                             "job_name=cifar10-hybrid"],
                            env={**dt.env, "PYTHONUNBUFFERED": "1"}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        for line in proc.stdout:  # the training job's first line, followed into the train step's log
            if "[cifar10-hybrid rank 0]" in line:
                break
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
        dt("delete", "cifar10-hybrid", check=False)
    assert proc.returncode == 130
    assert err.splitlines()[-1] == ("dtrain: pipeline 'hybrid-cifar10' interrupted; its job 'cifar10-hybrid' "
                                    "(Running) goes on on the local backend: stop it with 'dtrain delete "
                                    "cifar10-hybrid' before running the pipeline again")
    (run_tmp,) = (home / "pipelines" / ".tmp").iterdir()  # the steps' $TMPDIR: KFP's program folders are gone
    assert list(run_tmp.iterdir()) == []


# ---------------------------------------------------------------- a user's own pipeline's parameters


USERS = '''
from kfp import dsl

@dsl.component(base_image="python:3.11")
def show(xs: list, cfg: dict, x: float, n: int) -> str:
    return f"{xs} {cfg} {x} {n}"

@dsl.pipeline(name="mine")
def mine(xs: list = ["d"], cfg: dict = {"a": 1}, x: float = 1.0, n: int = 1):
    show(xs=xs, cfg=cfg, x=x, n=n)
'''


@pytest.fixture
def users(tmp_path) -> str:
    (tmp_path / "mine.py").write_text(USERS)
    return f"{tmp_path / 'mine.py'}:mine"


def test_a_list_or_dict_parameter_is_given_as_json(users):
    """A list parameter could not be given: 'a List parameter cannot be given on the command line'
    (a required one was a dead end: 'needs --param xs=VALUE', then that)."""
    from dtrain.pipelines import runner

    pipeline = runner.load(module=users)
    values = runner.parse_params(pipeline, ['xs=[1, "a", {"b": [2.5]}]', 'cfg={"k": []}'])
    assert values == {"xs": [1, "a", {"b": [2.5]}], "cfg": {"k": []}, "x": 1.0, "n": 1}
    deep = runner.parse_params(pipeline, ["xs=" + "[" * 32 + "]" * 32])["xs"]
    for _level in range(31):
        (deep,) = deep
    assert deep == []


@pytest.mark.parametrize("given, message", [
    ('xs={"a": 1}', "use a JSON list (at most 32 levels deep, "),
    ("xs=[1,", "use a JSON list (at most 32 levels deep, "),
    ('cfg=["a"]', "use a JSON object (at most 32 levels deep, "),
    ("xs=[NaN]", "its numbers finite"),
    ("xs=[1e400]", "its numbers finite"),
    ("xs=[9007199254740993]", "whole ones from -9007199254740992 to 9007199254740992"),
    ("xs=" + "[" * 33 + "]" * 33, "use a JSON list (at most 32 levels deep"),  # protobuf fails the run past ~49
    ("xs=" + "[" * 100_000, "use a JSON list"),  # json's RecursionError, not a traceback
    ("x=nan", "x=nan: use a finite number (KFP carries no nan or inf)"),
    ("x=-1e400", "x=-1e400: use a finite number"),  # as typed, not as Python reads it (-inf)
    ("n=99999999999999999999999", "use a whole number from -9007199254740992 to 9007199254740992 (KFP carries "
                                  "numbers as doubles"),  # it arrived as 99999999999999991611392
])
def test_what_kfp_would_change_or_refuse_mid_run_is_refused_first(home, capsys, users, given, message):
    """nan and inf failed the run in KFP's serializer (exit 1); a whole number past 2**53 ran, changed."""
    code, _out, err = cli(home, capsys, "run", "--module", users, "--param", given)
    assert code == 2 and err.count("\n") == 1 and err.startswith("dtrain: error: invalid --param "), err
    assert message in err
    assert not (home / "pipelines").exists()  # nothing ran


# ---------------------------------------------------------------- what ended runs left in ROOT/.tmp


def test_a_run_tidies_what_killed_and_failed_runs_left_but_not_what_is_in_use(tmp_path):
    """A run killed with SIGKILL left its steps' program folders in ROOT/.tmp for good, and every
    failed run its empty folder. The next run tidies them, except a folder another run holds or
    a still-running step has as its $TMPDIR, and anything a user or a job put there."""
    import fcntl
    import os
    import subprocess

    from dtrain.pipelines import runner

    root = tmp_path / "root"
    parent = root / ".tmp"
    parent.mkdir(parents=True)

    def run_folder(name: str, *programs: str) -> Path:
        folder = parent / name
        folder.mkdir()
        for program in programs:
            (folder / program).mkdir()
            (folder / program / "ephemeral_component.py").write_text("print(1)\n")
        return folder

    killed = run_folder("run-killed", "tmp.a1", "tmp.b2")
    failed = run_folder("run-failed")
    kept = run_folder("run-kept", "tmp.c3")
    (kept / "notes.txt").write_text("a user's")
    going = run_folder("run-going", "tmp.d4")
    stepping = run_folder("run-stepping", "tmp.e5")
    (parent / "run-link").symlink_to(run_folder("elsewhere-tmp.f6", "tmp.f6"))
    held = os.open(going, os.O_RDONLY | os.O_DIRECTORY)
    fcntl.flock(held, fcntl.LOCK_EX)  # another run, still going
    step = subprocess.Popen(["sleep", "60"], env={**os.environ, "TMPDIR": str(stepping)})
    try:
        with runner._step_tmpdir(root) as mine:
            during = sorted(p.name for p in parent.iterdir())
            mine.finished = True
    finally:
        step.kill()
        step.wait()
        os.close(held)
    assert during == sorted(["elsewhere-tmp.f6", "run-going", "run-kept", "run-link", "run-stepping", mine.path.name])
    assert sorted(p.name for p in kept.iterdir()) == ["notes.txt"]  # KFP's program folder went; the user's file stays
    assert sorted(p.name for p in going.iterdir()) == ["tmp.d4"]
    assert sorted(p.name for p in stepping.iterdir()) == ["tmp.e5"]
    assert (parent / "elsewhere-tmp.f6" / "tmp.f6" / "ephemeral_component.py").is_file()  # never through a link
    assert not killed.exists() and not failed.exists() and not mine.path.exists()
    with runner._step_tmpdir(root) as later:  # their owners gone, the next run tidies them
        later.finished = True
    assert sorted(p.name for p in parent.iterdir()) == ["elsewhere-tmp.f6", "run-kept", "run-link"]


# ---------------------------------------------------------------- small words


def test_compile_says_the_form_it_wrote(home, capsys, tmp_path):
    """`-o h.json` wrote JSON (KFP picks the form by the suffix) and said 'KFP IR YAML'."""
    import json

    code, out, err = cli(home, capsys, "compile", "hybrid-cifar10", "-o", str(tmp_path / "h.json"))
    assert code == 0 and out == f"compiled pipeline 'hybrid-cifar10' to {tmp_path / 'h.json'} (KFP IR JSON; " \
                                "submit it with kfp.Client)\n", err
    assert json.loads((tmp_path / "h.json").read_text())["pipelineInfo"]["name"] == "hybrid-cifar10"
    code, out, _err = cli(home, capsys, "compile", "hybrid-cifar10", "-o", str(tmp_path / "h.yaml"))
    assert code == 0 and "(KFP IR YAML; " in out


def test_a_float_too_small_to_hold_is_named_as_typed(home, capsys):
    """It said 'invalid lr 0.0', a value nobody typed."""
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "lr=1e-400")
    assert code == 2 and err == ("dtrain: error: invalid --param lr='1e-400': it is too small for a float (it reads "
                                 "as 0.0): use a larger number, e.g. lr=0.001\n"), err
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "lr=0e-5")
    assert code == 2 and err.startswith("dtrain: error: invalid lr 0e-5: use a learning rate with 0 < lr <= 10"), err


@pytest.mark.parametrize("param, said", [
    ("lr=1e99", "invalid lr 1e99: use a learning rate"),  # it said 1e+99
    ("lr=10.50", "invalid lr 10.50: use a learning rate"),
    ("epochs=0010001", "invalid epochs 0010001: use a whole number"),
])
def test_a_number_refused_is_quoted_as_typed(home, capsys, param, said):
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", param)
    assert code == 2 and err.startswith(f"dtrain: error: {said}"), err


def test_lanes_threshold_refused_as_typed_and_run_values_are_plain(tmp_path, home, capsys):
    """It said 'invalid threshold 2.0' for threshold=2; the run still gets plain numbers."""
    from dtrain.pipelines import runner
    archive = tmp_path / "a.tar.gz"
    archive.write_bytes(b"")
    code, _out, err = cli(home, capsys, "run", "lane-detection", "--param", f"urls={archive}", "--param", "threshold=2")
    assert code == 2 and err.startswith("dtrain: error: invalid threshold 2: use a number"), err
    values = runner.parse_params(runner.load("hybrid-cifar10"), ["lr=1e-2", "processes=03"])
    assert (type(values["lr"]), values["lr"], type(values["processes"]), values["processes"]) == (float, 0.01, int, 3)


def test_too_many_processes_are_named_as_the_pipelines_parameter(dt, home, capsys, monkeypatch):
    """The backend's 'lower --processes' named a flag `pipeline run` does not take."""
    from dtrain.backends.local import backend as local

    dt("volume", "create", "cifar10", "--size", "1Gi")
    monkeypatch.setattr(local, "max_local_processes", lambda: (2, "its CPUs"))
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "processes=3", "--param", "job_name=cifar10-hybrid")
    assert code == 2 and err == ("dtrain: error: pipeline 'hybrid-cifar10' cannot submit job 'cifar10-hybrid' to the "
                                 "local backend: job 'cifar10-hybrid' asks for 3 processes but this machine can run at "
                                 "most 2 (limited by its CPUs); lower --param processes\n"), err
    assert not (home / "pipelines").exists()


TYPED = '''
from typing import Dict, List

from kfp import dsl

@dsl.component(base_image="python:3.11")
def show(xs: List[int], cfg: Dict[str, float], ys: list[str]) -> str:
    return f"{xs} {cfg} {ys}"

@dsl.pipeline(name="typed")
def typed(xs: List[int] = [1], cfg: Dict[str, float] = {"a": 1.0}, ys: list[str] = ["b"]):
    show(xs=xs, cfg=cfg, ys=ys)
'''


def test_typing_list_and_dict_parameters_are_given_as_json(tmp_path):
    """typing.List[int] / Dict[str, float] parameters: 'a typing.List[int] parameter cannot be given'."""
    from dtrain.pipelines import runner

    (tmp_path / "typed.py").write_text(TYPED)
    pipeline = runner.load(module=f"{tmp_path / 'typed.py'}:typed")
    assert [(p.name, p.type) for p in pipeline.info.params] == [("xs", "List"), ("cfg", "Dict"), ("ys", "List")]
    values = runner.parse_params(pipeline, ["xs=[2, 3]", 'cfg={"b": 0.5}', 'ys=["c"]'])
    assert values == {"xs": [2, 3], "cfg": {"b": 0.5}, "ys": ["c"]}
    with pytest.raises(SpecError, match="use a JSON object"):
        runner.parse_params(pipeline, ["cfg=[1]"])

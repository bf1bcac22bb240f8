"""Kubeflow pipelines: compiled by KFP's own compiler, loaded back by its loader, run for real here.

Runs go through the `dtrain pipeline run` command, i.e. KFP's local SubprocessRunner: every step
is a real subprocess that talks to dtrain; the local branch launches a real 2-process torchrun
job, the Kubernetes branch drives the official client against the shipped fake API server while
this test plays the Training Operator.
"""

from __future__ import annotations

import json
import re
import textwrap
import threading
import time
from pathlib import Path

import pytest
import yaml

from conftest import Dtrain
from dtrain.backends.kubernetes.fake import FakeCluster, FakeKubeServer
from dtrain.cli.main import main
from dtrain.config import BACKENDS
from dtrain.errors import JobFailedError, SpecError
from dtrain.pipelines import steps
from dtrain.spec import JobSpec
from dtrain.workloads.cifar10.data import write_synthetic

kfp = pytest.importorskip("kfp", reason="pipelines need the KFP SDK: pip install 'dtrain[pipelines]'")

NS = "dtrain-default"
IMAGE = "ghcr.io/example/cifar10:1"
SHORT = ["--param", "max_steps=2", "--param", "batch_size=4", "--param", "epochs=1"]
NAMED = ["--param", "job_name=cifar10-hybrid"]  # a name given (the default is a new one per run)


def cli(home: Path, capsys, *args: str) -> tuple[int, str, str]:
    """`dtrain --home HOME pipeline ARGS` in this process (KFP loads once for every test)."""
    code = main(["--home", str(home), "pipeline", *args])
    out = capsys.readouterr()
    return code, out.out, out.err


def compiled(home: Path, tmp_path: Path, name: str) -> dict:
    out = tmp_path / f"{name}.yaml"
    assert main(["--home", str(home), "pipeline", "compile", name, "-o", str(out)]) == 0
    return yaml.safe_load(out.read_text())


def branches(ir: dict) -> dict[str, tuple[str, str]]:
    """training_runtime value -> (the branch's train task, the dtrain backend it passes), from the IR."""
    group = ir["root"]["dag"]["tasks"]["condition-branches-1"]["componentRef"]["name"]
    out = {}
    for task in ir["components"][group]["dag"]["tasks"].values():
        condition = task["triggerPolicy"]["condition"]
        value = re.findall(r"\['pipelinechannel--check-condition-Output'\] == '(\w+)'", condition)[-1]
        (name, train), = ir["components"][task["componentRef"]["name"]]["dag"]["tasks"].items()
        out[value] = (name, train["inputs"]["parameters"]["backend"]["runtimeValue"]["constant"])
    return out


def ran_tasks(home: Path, pipeline: str) -> set[str]:
    (run,) = (home / "pipelines").glob(f"{pipeline}-*")
    return {p.parent.name for p in run.glob("*/executor_output.json")}


def outputs(home: Path, pipeline: str, task: str) -> dict:
    (run,) = (home / "pipelines").glob(f"{pipeline}-*")
    data = json.loads((run / task / "executor_output.json").read_text())
    return data.get("parameterValues") or {}


@pytest.fixture
def cifar_volume(dt: Dtrain) -> Path:
    """A volume 'cifar10' holding tiny CIFAR10 data in the real python format."""
    dt("volume", "create", "cifar10", "--size", "1Gi")
    path = Path(dt.json("volume", "describe", "cifar10")["extra"]["path"])
    write_synthetic(path, fmt="python", n_train=40, n_test=10, seed=1)
    return path


# ---------------------------------------------------------------- list and compile


def test_list_names_both_pipelines_and_their_parameters(home, capsys):
    code, out, _err = cli(home, capsys, "list", "--json")
    pipelines = {p["name"]: {q["name"]: q for q in p["params"]} for p in json.loads(out)}
    assert code == 0 and set(pipelines) == {"hybrid-cifar10", "lane-detection"}
    assert pipelines["hybrid-cifar10"]["training_runtime"]["default"] == "local"
    assert pipelines["lane-detection"]["urls"]["required"] and pipelines["lane-detection"]["threshold"]["type"] == "Float"


def test_hybrid_compiles_to_one_branch_per_runtime_guarded_by_training_runtime(home, tmp_path):
    ir = compiled(home, tmp_path, "hybrid-cifar10")
    assert ir["pipelineInfo"]["name"] == "hybrid-cifar10"
    assert branches(ir) == {"local": ("train", "local"), "kubernetes": ("train-2", "kubernetes"),
                            "sagemaker": ("train-3", "sagemaker")}
    check = ir["root"]["dag"]["tasks"]["check-condition"]["inputs"]["parameters"]
    assert check["training_runtime"] == {"componentInputParameter": "training_runtime"}
    params = ir["root"]["inputDefinitions"]["parameters"]
    assert {"training_runtime", "processes", "epochs", "batch_size", "lr", "backend", "image"} <= set(params)
    assert params["training_runtime"]["defaultValue"] == "local" and params["lr"]["parameterType"] == "NUMBER_DOUBLE"
    # every step runs in the image the `image` parameter names, and never from KFP's cache
    executors = ir["deploymentSpec"]["executors"].values()
    assert {e["container"]["image"] for e in executors} == {"{{$.inputs.parameters['pipelinechannel--image']}}"}
    assert all("pip install" not in " ".join(e["container"]["command"]) for e in executors)

    loaded = kfp.components.load_component_from_file(str(tmp_path / "hybrid-cifar10.yaml"))
    assert loaded.name == "hybrid-cifar10"
    assert loaded.component_spec.inputs["training_runtime"].default == "local"
    assert loaded.pipeline_spec.root.dag.tasks["condition-branches-1"].component_ref.name == "comp-condition-branches-1"


def test_lane_detection_compiles_with_the_accuracy_condition(home, tmp_path):
    ir = compiled(home, tmp_path, "lane-detection")
    tasks = ir["root"]["dag"]["tasks"]
    assert {"prepare", "snapshot", "lanes-job", "train", "evaluate"} <= set(tasks)
    (cond,) = [t for t in tasks.values() if "triggerPolicy" in t]
    assert cond["triggerPolicy"]["condition"] == ("inputs.parameter_values['pipelinechannel--evaluate-Output'] >= "
                                                  "inputs.parameter_values['pipelinechannel--threshold']")
    assert list(ir["components"][cond["componentRef"]["name"]]["dag"]["tasks"]) == ["restore"]
    assert ir["components"]["comp-evaluate"]["outputDefinitions"]["artifacts"]["metrics"]["artifactType"][
        "schemaTitle"] == "system.Metrics"
    assert tasks["lanes-job"]["dependentTasks"] == ["prepare", "snapshot"]
    loaded = kfp.components.load_component_from_file(str(tmp_path / "lane-detection.yaml"))
    assert loaded.name == "lane-detection" and not loaded.component_spec.inputs["urls"].optional


def test_a_users_own_pipeline_module_compiles(home, capsys, tmp_path):
    module = tmp_path / "mine.py"
    module.write_text(textwrap.dedent("""
        from kfp import dsl
        from dtrain.pipelines.components import check_condition

        @dsl.pipeline(name="mine")
        def my_pipeline(training_runtime: str = "kubernetes"):
            check_condition(training_runtime=training_runtime)
    """))
    out = tmp_path / "mine.yaml"
    code, stdout, _err = cli(home, capsys, "compile", "--module", f"{module}:my_pipeline", "-o", str(out))
    assert code == 0 and f"compiled pipeline 'mine' to {out}" in stdout
    assert kfp.components.load_component_from_file(str(out)).name == "mine"
    code, _out, err = cli(home, capsys, "compile", "--module", f"{module}:nothing", "-o", str(out))
    # it said "'nothing' is not a @dsl.pipeline function", of a name the file does not have
    assert code == 2 and err.endswith(": there is no 'nothing' in mine.py; its @dsl.pipeline function my_pipeline: "
                                      "use it\n"), err
    code, _out, err = cli(home, capsys, "compile", "--module", f"{module}:my_pipelin", "-o", str(out))
    assert code == 2 and err.endswith(": there is no 'my_pipelin' in mine.py; did you mean 'my_pipeline'?\n"), err
    code, _out, err = cli(home, capsys, "compile", "--module", f"{module}:check_condition", "-o", str(out))
    assert code == 0  # a component, taken as before; it is not listed as a pipeline above


def test_compile_checks_where_it_writes_first(home, capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    (tmp_path / "folder.yaml").mkdir()
    for out, message in (("/proc/x.yaml", "cannot write -o '/proc/x.yaml': No such file or directory"),
                         (str(tmp_path / "folder.yaml"), "it is a folder; give a file path"),
                         (str(tmp_path / "file" / "x.yaml"), "is a file, not a folder"),
                         (str(tmp_path / "file" / "a" / "x.yaml"), "is a file, not a folder")):
        code, _out, err = cli(home, capsys, "compile", "hybrid-cifar10", "-o", out)
        assert code == 2 and err.count("\n") == 1 and message in err, err
    out = tmp_path / "new" / "deeper" / "p.yaml"  # missing folders are made, as before
    assert cli(home, capsys, "compile", "hybrid-cifar10", "-o", str(out))[0] == 0 and out.is_file()


@pytest.mark.parametrize("source, message", [
    ("syntax error(\n", "mod.py is not valid Python at line 1, column 13: '(' was never closed"),
    ("def f():\n  x = 1\n   y = 2\n", "mod.py is not valid Python at line 3, column 3: unexpected indent"),
    ("x = 1\n\0\n", "mod.py is not valid Python: source code string cannot contain null bytes"),
    ("import os\n\ndef g():\n    raise KeyError('k')\n\ng()\n", "importing mod.py failed at line 4 with KeyError: 'k'"),
    ("import no_such_module_here\n", "importing mod.py failed at line 1 with ModuleNotFoundError: No module named"),
])
def test_a_users_module_that_fails_to_load_is_one_line(home, capsys, tmp_path, source, message):
    module = tmp_path / "mod.py"
    module.write_text(source)
    for verb in (["run"], ["compile", "-o", str(tmp_path / "o.yaml")]):
        code, _out, err = cli(home, capsys, *verb, "--module", f"{module}:f")
        assert code == 2 and err.count("\n") == 1 and message in err, err
        assert "Traceback" not in err


def test_pipeline_processes_share_the_job_specs_bound(home, capsys):
    from dtrain.spec import MAX_PROCESSES

    assert steps.MAX_PROCESSES is MAX_PROCESSES
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", f"processes={MAX_PROCESSES + 1}")
    assert code == 2 and f"invalid processes {MAX_PROCESSES + 1}: use a whole number from 1 to {MAX_PROCESSES}" in err
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "processes=" + "9" * 4000)
    assert code == 2 and "<a whole number of about 4000 digits>" in err and len(err) < 300, err


@pytest.mark.slow
def test_a_run_leaves_nothing_in_the_users_tmpdir(tmp_path):
    """KFP's component command writes each step's source into `mktemp -d` and never removes it:
    a run's steps get a $TMPDIR of the run's own, emptied of those when the run ends, failed or
    not, and removed after a run that finished (a failed step may have left a job using it)."""
    module = tmp_path / "two.py"
    module.write_text(textwrap.dedent("""
        from kfp import dsl
        from dtrain.pipelines.components import check_condition

        @dsl.component
        def fail(value: str):
            raise SystemExit("step failed on purpose: " + value)

        @dsl.pipeline(name="two")
        def two(training_runtime: str = "local"):
            check_condition(training_runtime=training_runtime)
            check_condition(training_runtime=training_runtime)

        @dsl.pipeline(name="broken")
        def broken(training_runtime: str = "local"):
            fail(value=check_condition(training_runtime=training_runtime).output)
    """))
    users_tmp = tmp_path / "tmp"
    users_tmp.mkdir()
    dt = Dtrain(tmp_path / "home", env={"TMPDIR": str(users_tmp)})
    dt.env.pop("PYTHONDONTWRITEBYTECODE", None)  # as on a user's machine: the steps' Python writes bytecode
    proc = dt("pipeline", "run", "--module", f"{module}:two", timeout=120)
    assert "check-condition-2" in proc.stdout  # both steps ran
    assert list((dt.home / "pipelines" / ".tmp").iterdir()) == []
    assert dt("pipeline", "run", "--module", f"{module}:broken", check=False, timeout=120).returncode == 1
    (kept,) = (dt.home / "pipelines" / ".tmp").iterdir()
    assert kept.name.startswith("run-") and list(kept.iterdir()) == []
    assert list(users_tmp.iterdir()) == []


def test_only_kfps_program_folders_are_removed(tmp_path):
    from dtrain.pipelines import runner

    root = tmp_path / "root"
    root.mkdir()
    outside = tmp_path / "outside"
    (outside / "tmp.linked").mkdir(parents=True)
    (outside / "tmp.linked" / "ephemeral_component.py").write_text("x")
    with runner._step_tmpdir(root) as step_tmp:
        tmp = step_tmp.path
        step_tmp.finished = True
        for name, files in (("tmp.kfp1", ["ephemeral_component.py"]), ("tmp.kfp2", ["ephemeral_component.py"]),
                            ("tmp.mine", ["ephemeral_component.py", "notes.txt"]), ("job-scratch", [])):
            (tmp / name).mkdir()
            for f in files:
                (tmp / name / f).write_text("x")
        for name, cached in (("tmp.compiled", "ephemeral_component.cpython-311.pyc"), ("tmp.cached", "other.pyc")):
            (tmp / name / "__pycache__").mkdir(parents=True)
            (tmp / name / "ephemeral_component.py").write_text("x")
            (tmp / name / "__pycache__" / cached).write_text("x")
        (tmp / "tmp.link").symlink_to(outside / "tmp.linked")
        (tmp / "tmp.weird").mkdir()
        (tmp / "tmp.weird" / "ephemeral_component.py").symlink_to(outside / "tmp.linked" / "ephemeral_component.py")
    assert sorted(p.name for p in tmp.iterdir()) == ["job-scratch", "tmp.cached", "tmp.link", "tmp.mine", "tmp.weird"]
    assert (tmp / "tmp.cached" / "__pycache__" / "other.pyc").is_file()
    assert (outside / "tmp.linked" / "ephemeral_component.py").read_text() == "x"
    assert sorted(p.name for p in (tmp / "tmp.mine").iterdir()) == ["ephemeral_component.py", "notes.txt"]
    with runner._step_tmpdir(root) as failed:
        pass
    assert failed.path.is_dir() and list(failed.path.iterdir()) == []  # kept: a job may still use it
    with runner._step_tmpdir(root) as empty:
        empty.finished = True
    assert not empty.path.exists()
    (root / ".tmp").rename(tmp_path / "moved")
    (root / ".tmp").symlink_to(outside)
    with pytest.raises(SpecError, match=r"\.tmp is a symbolic link: remove it"):
        with runner._step_tmpdir(root):
            pass
    assert sorted(p.name for p in outside.iterdir()) == ["tmp.linked"]


@pytest.mark.parametrize("args, message", [
    (["run", "hybrid-cifar10", "--param", "training_runtime=cloud"], "invalid training_runtime 'cloud'"),
    (["run", "hybrid-cifar10", "--param", "processes=two"], "invalid --param processes='two'"),
    (["run", "hybrid-cifar10", "--param", "processes=0"], "invalid processes 0"),
    (["run", "hybrid-cifar10", "--param", "lr=-1"], "invalid lr -1: "),
    (["run", "hybrid-cifar10", "--param", "backend=mpi"], "invalid backend 'mpi'"),
    (["run", "hybrid-cifar10", "--param", "training_runtime=sagemaker"], "needs the CIFAR10 data in S3: add --param data_uri=s3://"),
    (["run", "hybrid-cifar10", "--param", "training_runtime=sagemaker", "--param", "data_uri=bkt/cifar"],
     "invalid data_uri 'bkt/cifar'"),
    (["run", "hybrid-cifar10", "--param", "gpus=1"], "invalid --param 'gpus=1'"),
    (["run", "hybrid-cifar10", "--param", "epochs=1", "--param", "epochs=2"], "--param epochs is given twice"),
    (["run", "lane-detection"], "needs --param urls=VALUE"),
    (["run", "lane-detection", "--param", "urls=https://example.com/a.tgz", "--param", "threshold=1.5"], "invalid threshold 1.5"),
    (["run", "no-such"], "no pipeline 'no-such'"),
    (["run"], "name one pipeline"),
    (["compile", "hybrid-cifar10", "-o", "x.txt"], "invalid -o 'x.txt'"),
])
def test_bad_input_is_one_line_and_exit_2(home, capsys, args, message):
    code, _out, err = cli(home, capsys, *args)
    assert code == 2 and err.count("\n") == 1 and err.startswith("dtrain: error: "), err
    assert message in err
    assert not (home / "pipelines").exists()  # nothing ran


# ---------------------------------------------------------------- specs and outputs (pure)


def test_each_runtime_gets_the_same_job_with_its_own_data_wiring():
    common = dict(job_name="c", processes=3, epochs=2, batch_size=8, lr=0.01, backend="gloo", data_volume="data")
    local, model = steps.cifar10_spec(runtime="local", **common)
    k8s, _ = steps.cifar10_spec(runtime="kubernetes", image="reg/cifar:1", **common)
    sm, sm_model = steps.cifar10_spec(runtime="sagemaker", data_uri="s3://bkt/cifar10", **common)
    assert local["command"] == k8s["command"] and local["volumes"] == k8s["volumes"] == ["data:/mnt"]
    assert (local["processes"], local["launcher"], k8s["image"]) == (3, "torchrun", "reg/cifar:1")
    assert local["command"][local["command"].index("--model-dir") + 1] == "/mnt/models/c"
    assert model == "data:/models/c/model.pth" and "S3" in sm_model
    assert "sagemaker" not in local and "sagemaker" not in k8s  # data_uri is the SageMaker branch's alone
    # SageMaker: data_uri is the `training` channel, read where SageMaker puts it; the model folder
    # is SM_MODEL_DIR, which the workload reads by itself
    assert sm["sagemaker"] == {"channels": ["training=s3://bkt/cifar10"]} and sm["volumes"] == []
    data_at = local["command"].index("--data-dir")
    assert sm["command"] == local["command"][:data_at] + ["--data-dir", "/opt/ml/input/data/training"]
    assert "--model-dir" not in sm["command"]
    for wired in (local, k8s, sm):  # a KFP struct holds no null, and carries numbers as doubles
        assert None not in wired.values() and "project" not in wired
        doubles = {k: float(v) if type(v) is int else v for k, v in wired.items()}
        job = JobSpec.from_dict(steps._unwire(doubles))
        assert job.processes == 3 and job.backend == wired["backend"]
    sm_job = JobSpec.from_dict(steps._unwire(sm))
    assert [(c.name, c.uri) for c in sm_job.sagemaker.channels] == [("training", "s3://bkt/cifar10")]
    with pytest.raises(SpecError, match="needs the CIFAR10 data in S3: add --param data_uri=s3://"):
        steps.cifar10_spec(runtime="sagemaker", **common)
    with pytest.raises(SpecError, match="invalid data_uri 'http://x/y': use s3://BUCKET/PREFIX"):
        steps.cifar10_spec(runtime="sagemaker", data_uri="http://x/y", **common)


def test_the_model_location_prefers_the_snapshot_then_the_backends_uri():
    from dtrain.backends.base import JobInfo, JobStatus
    from dtrain.spec import JobSpec

    def info(**kw):
        return JobInfo(name="j", spec=JobSpec(name="j", command=("x",)), status=JobStatus.SUCCEEDED, backend="b",
                       created=0.0, **kw)

    assert steps.model_location(info(snapshot="snap-1"), "vol:/m") == "snap-1"
    uri = "s3://bucket/dtrain/j/output/model.tar.gz"
    assert steps.model_location(info(extra={"model_artifacts": uri}), "vol:/m") == uri
    assert steps.model_location(info(), "vol:/m") == "vol:/m"


def test_prepare_spec_checks_urls_against_digests():
    spec, volume = steps.lanes_prepare_spec(job_name="d", urls="a.tgz, b.tgz", sha256="x,")
    assert volume == "pvc-d-0" and spec["volumes"] == ["local:10Gi:/mnt"]
    assert spec["command"][4:10] == ["--url", "a.tgz", "b.tgz", "--sha256", "x", "-"]
    with pytest.raises(SpecError, match="2 sha256 values for 1 urls"):
        steps.lanes_prepare_spec(job_name="d", urls="a.tgz", sha256="x,y")


# ---------------------------------------------------------------- failing jobs


def test_a_failed_job_raises_with_its_last_log_lines(dt, home):
    spec = {"name": "doomed", "command": ["python", "-c", "print('reading data'); print('no batches in /mnt'); "
                                                         "raise SystemExit(3)"]}
    seen: list[str] = []
    with pytest.raises(JobFailedError) as err:
        from dtrain.client import Client
        steps.train(spec, backend="local", client=Client(home=home), echo=seen.append)
    message = str(err.value)
    assert message.startswith("job 'doomed' ended Failed") and "no batches in /mnt" in message
    assert message.index("reading data") < message.index("no batches in /mnt")
    assert "submitted job 'doomed' to the local backend (Pending)" in seen[0]
    assert any("no batches in /mnt" in line for line in seen)  # followed into the step's log


@pytest.mark.slow
def test_a_failed_training_job_fails_its_pipeline_step(dt, tmp_path):
    dt("volume", "create", "cifar10", "--size", "1Gi")  # empty: the workload finds no batches
    decoy = Dtrain(tmp_path / "decoy")  # $DTRAIN_HOME says elsewhere: the steps must follow --home
    proc = decoy("--home", str(dt.home), "pipeline", "run", "hybrid-cifar10", "--param", "processes=1", *SHORT, *NAMED,
                 check=False, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    last = proc.stderr.strip().splitlines()[-1]
    assert "failed at step 'train' (train-local) in branch 'runtime-local':" in last
    assert "condition-" not in last  # KFP's own names for the If/Elif groups mean nothing to the user
    step_log = proc.stdout
    assert "JobFailedError: job 'cifar10-hybrid' ended Failed" in step_log
    assert "its last log lines:" in step_log and "no CIFAR10 batches in /mnt" in step_log
    assert dt.status("cifar10-hybrid") == "Failed"
    assert not (tmp_path / "decoy").exists()


# ---------------------------------------------------------------- runs


@pytest.mark.slow
def test_hybrid_local_runs_a_real_two_process_job(dt, cifar_volume, tmp_path):
    proc = dt("pipeline", "run", "hybrid-cifar10", "--param", "training_runtime=local", *SHORT, *NAMED,
              timeout=400)
    ir = compiled(dt.home, tmp_path, "hybrid-cifar10")
    local, skipped = branches(ir)["local"][0], {branches(ir)[r][0] for r in ("kubernetes", "sagemaker")}
    assert ran_tasks(dt.home, "hybrid-cifar10") == {"check-condition", "cifar10-job", local}
    assert not skipped & ran_tasks(dt.home, "hybrid-cifar10")
    assert outputs(dt.home, "hybrid-cifar10", local) == {
        "job": "cifar10-hybrid", "status": "Succeeded", "model": "cifar10:/models/cifar10-hybrid/model.pth"}
    assert "[cifar10-hybrid rank 0] cifar10: runtime=torchrun world_size=2 backend=gloo" in proc.stdout
    assert (cifar_volume / "models" / "cifar10-hybrid" / "model.pth").is_file()
    (job,) = dt.json("list")
    assert (job["name"], job["status"], job["spec"]["processes"], job["spec"]["launcher"]) == (
        "cifar10-hybrid", "Succeeded", 2, "torchrun")
    (run,) = (dt.home / "pipelines").glob("hybrid-cifar10-*")  # the job names the run that submitted it
    assert job["spec"]["labels"][steps.RUN_NAME_LABEL] == run.name and job["spec"]["labels"][steps.RUN_ID_LABEL]
    assert f"{steps.RUN_NAME_LABEL}: {run.name}" in dt("describe", "job", "cifar10-hybrid").stdout


def _operator(cluster: FakeCluster, seen: list[dict], done: threading.Event) -> None:
    """The Training Operator's part: pods for the PyTorchJob, logs, Running, then Succeeded."""
    deadline = time.monotonic() + 240
    while not cluster.items("kubeflow.org", "pytorchjobs", NS):
        if time.monotonic() > deadline or done.is_set():
            return
        time.sleep(0.1)
    (job,) = cluster.items("kubeflow.org", "pytorchjobs", NS)
    seen.append(json.loads(json.dumps(job)))
    name = job["metadata"]["name"]
    cluster.append_log(NS, f"{name}-master-0", "cifar10: runtime=torchrun world_size=2 backend=gloo")
    cluster.append_log(NS, f"{name}-master-0", "FINAL test_accuracy=0.5000 steps=2")
    pods = [p["metadata"]["name"] for p in cluster.run_pods(NS, name)]
    cluster.transition(NS, name, "Running")
    log_path = f"/namespaces/{NS}/pods/{name}-master-0/log"
    while not any(log_path in path for _, path in list(cluster.requests)):  # the step reads the logs first
        if time.monotonic() > deadline:
            return
        time.sleep(0.1)
    for pod in pods:
        cluster.set_pod_phase(NS, pod, "Succeeded", exit_code=0)
    cluster.transition(NS, name, "Succeeded")


@pytest.mark.slow
def test_hybrid_kubernetes_creates_a_valid_pytorchjob_and_follows_it(dt, tmp_path):
    from test_k8s_render import validate

    cluster = FakeCluster()
    cluster.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    cluster.create({"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "cifar10", "namespace": NS},
                    "spec": {"resources": {"requests": {"storage": "1Gi"}}, "accessModes": ["ReadWriteMany"]}})
    seen: list[dict] = []
    done = threading.Event()
    with FakeKubeServer(cluster) as server:
        kubeconfig = tmp_path / "kubeconfig"
        server.write_kubeconfig(kubeconfig)
        (dt.home / "config.yaml").write_text(yaml.safe_dump({"kubernetes": {"kubeconfig": str(kubeconfig),
                                                                             "image": IMAGE}}))
        operator = threading.Thread(target=_operator, args=(cluster, seen, done), daemon=True)
        operator.start()
        try:
            proc = dt("pipeline", "run", "hybrid-cifar10", "--param", "training_runtime=kubernetes", *SHORT, *NAMED,
                      timeout=300)
        finally:
            done.set()
            operator.join(5)
    (job,) = seen
    posted = {k: job[k] for k in ("apiVersion", "kind", "spec")}
    posted["metadata"] = {k: job["metadata"][k] for k in ("name", "namespace", "labels", "annotations")
                          if k in job["metadata"]}
    validate(posted)  # the CRD's schema, strictly, plus pod templates against the core API
    (run,) = (dt.home / "pipelines").glob("hybrid-cifar10-*")  # the PyTorchJob and its pods name the run
    for labels in (job["metadata"]["labels"], job["spec"]["pytorchReplicaSpecs"]["Worker"]["template"]["metadata"]
                   ["labels"]):
        assert labels[steps.RUN_NAME_LABEL] == run.name and labels[steps.RUN_ID_LABEL]
    replicas = job["spec"]["pytorchReplicaSpecs"]
    assert replicas["Master"]["replicas"] == 1 and replicas["Worker"]["replicas"] == 1
    container = replicas["Master"]["template"]["spec"]["containers"][0]
    assert container["image"] == IMAGE and "dtrain.workloads.cifar10" in " ".join(container["command"] +
                                                                                container.get("args", []))
    ir = compiled(dt.home, tmp_path, "hybrid-cifar10")
    k8s = branches(ir)["kubernetes"][0]
    assert ran_tasks(dt.home, "hybrid-cifar10") == {"check-condition", "cifar10-job", k8s}
    assert outputs(dt.home, "hybrid-cifar10", k8s)["status"] == "Succeeded"
    assert "submitted job 'cifar10-hybrid' to the kubernetes backend" in proc.stdout
    assert "FINAL test_accuracy=0.5000" in proc.stdout  # the pod's log, followed into the step's log
    assert dt.json("list") == []  # nothing ran on the local backend


@pytest.fixture(scope="module")
def tusimple_archives(tmp_path_factory) -> Path:
    """A tiny TuSimple download: train_set.tar.gz, test_set.tar.gz and test_label.json."""
    from dtrain.workloads.lanes import synth

    out = tmp_path_factory.mktemp("tusimple")
    assert synth.main(["--out", str(out), "--train", "24", "--test", "8", "--seed", "3", "--archive"]) == 0
    return out


@pytest.mark.slow
@pytest.mark.parametrize("threshold", [0.0, 1.0])
def test_lane_detection_runs_prepare_train_evaluate_and_the_condition(dt, tusimple_archives, threshold):
    urls = ",".join(str(tusimple_archives / f) for f in ("train_set.tar.gz", "test_set.tar.gz", "test_label.json"))
    proc = dt("pipeline", "run", "lane-detection", "--param", f"urls={urls}", "--param", "max_steps=3",
              "--param", "batch_size=2", "--param", f"threshold={threshold}", timeout=600)
    assert "pipeline 'lane-detection' succeeded" in proc.stdout
    (run,) = (dt.home / "pipelines").glob("lane-detection-*")
    metrics = json.loads((run / "evaluate" / "metrics").read_text())  # the Metrics artifact's content
    assert {"accuracy", "fp", "fn"} <= set(metrics) and metrics["frames"] == 8
    assert outputs(dt.home, "lane-detection", "evaluate")["Output"] == metrics["accuracy"]
    ran = ran_tasks(dt.home, "lane-detection")
    assert {"prepare", "snapshot", "lanes-job", "train", "evaluate"} <= ran
    assert ("restore" in ran) == (metrics["accuracy"] >= threshold)

    trained = outputs(dt.home, "lane-detection", "train")
    prefix = outputs(dt.home, "lane-detection", "prepare")["prefix"]  # the run's own: job_prefix left empty
    assert re.fullmatch(r"lanes-[0-9a-f]{16}", prefix), prefix
    job = dt.json("describe", "job", f"{prefix}-train")
    assert job["status"] == "Succeeded" and job["spec"]["processes"] == 2 and trained["model"] == job["snapshot"]
    snapshots = {s["name"]: s for s in dt.json("snapshot", "list")}
    assert snapshots[f"{prefix}-prepared"]["job"] == f"{prefix}-data" and job["snapshot"] in snapshots
    volumes = {v["name"] for v in dt.json("volume", "list")}
    if threshold == 0.0:  # any accuracy passes: the training snapshot becomes the candidate
        candidate = Path(dt.json("volume", "describe", f"{prefix}-candidate")["extra"]["path"])
        assert (candidate / "runs" / f"{prefix}-train" / "model.pt").is_file()
    else:  # three steps do not reach a perfect score: the branch is skipped
        assert metrics["accuracy"] < 1.0 and f"{prefix}-candidate" not in volumes


@pytest.mark.skipif("sagemaker" not in BACKENDS, reason="needs issue 13's SageMaker backend")
@pytest.mark.slow
def test_hybrid_sagemaker_creates_a_training_job_on_a_moto_server(dt, tmp_path):
    import socket

    import boto3
    from moto.server import ThreadedMotoServer

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    server.start()
    try:
        aws = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_ACCESS_KEY_ID": "testing",
               "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
        session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing",
                                        region_name="us-east-1")
        make = lambda name: session.client(name, endpoint_url=aws["AWS_ENDPOINT_URL"])  # noqa: E731
        make("s3").create_bucket(Bucket="dtrain-test")
        # the data SageMaker reads (a channel with no object under it is refused at submit)
        make("s3").put_object(Bucket="dtrain-test", Key="cifar10/cifar-10-batches-py/data_batch_1", Body=b"-")
        # no CloudWatch log group: a fresh account, and moto runs no container to write one
        assert make("logs").describe_log_groups()["logGroups"] == []
        sm = Dtrain(dt.home, env=aws)
        sm("config", "sagemaker", "--role", "arn:aws:iam::123456789012:role/sm", "--bucket", "dtrain-test",
           "--region", "us-east-1")
        proc = sm("pipeline", "run", "hybrid-cifar10", "--param", "training_runtime=sagemaker", *SHORT, *NAMED,
                  "--param", "data_uri=s3://dtrain-test/cifar10", timeout=300, cwd=tmp_path)
        desc = make("sagemaker").describe_training_job(TrainingJobName="cifar10-hybrid")
        tags = {t["Key"]: t["Value"] for t in make("sagemaker").list_tags(ResourceArn=desc["TrainingJobArn"])["Tags"]}
    finally:
        server.stop()
    ir = compiled(dt.home, tmp_path, "hybrid-cifar10")
    branch = branches(ir)["sagemaker"][0]
    assert ran_tasks(dt.home, "hybrid-cifar10") == {"check-condition", "cifar10-job", branch}
    assert outputs(dt.home, "hybrid-cifar10", branch) == {
        "job": "cifar10-hybrid", "status": "Succeeded", "model": desc["ModelArtifacts"]["S3ModelArtifacts"]}
    assert desc["ModelArtifacts"]["S3ModelArtifacts"].startswith("s3://dtrain-test/")
    # the CreateTrainingJob request carried data_uri as the `training` channel, read where SageMaker puts it
    (channel,) = desc["InputDataConfig"]
    assert channel["ChannelName"] == "training"
    assert channel["DataSource"]["S3DataSource"]["S3Uri"] == "s3://dtrain-test/cifar10"
    assert json.loads(desc["HyperParameters"]["data-dir"]) == "/opt/ml/input/data/training"
    (run,) = (dt.home / "pipelines").glob("hybrid-cifar10-*")  # the training job is tagged with the run
    assert tags[steps.RUN_NAME_LABEL] == run.name and tags[steps.RUN_ID_LABEL]
    assert "ResourceNotFoundException" not in proc.stdout + proc.stderr  # no log group yet: no lines, no error
    assert dt.json("list") == []  # nothing ran on the local backend

"""What a run before leaves behind, and what a run leaves: taken names refused before any step,
a job's log gone with its pods, the jobs' own temporary files, a --root that cannot be used."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from conftest import Dtrain
from dtrain.client import Client
from dtrain.errors import ConflictError, JobFailedError, NotFoundError
from dtrain.pipelines import steps
from dtrain.spec import JobSpec
from test_k8s_backend import backend, cluster, make_backend  # noqa: F401  (a fake API server per test, as there)
from test_sagemaker_backend import clients, code, moto_url  # noqa: F401  (a moto server for this module)
from test_pipelines import cli

kfp = pytest.importorskip("kfp", reason="pipelines need the KFP SDK: pip install 'dtrain[pipelines]'")

FAIL = ["python", "-c", "raise SystemExit(3)"]


def hybrid_params(**given) -> dict:
    """The hybrid pipeline's parameters as `pipeline run` passes them: its defaults, then `given`."""
    from dtrain.pipelines import runner

    return {**runner.parse_params(runner.load("hybrid-cifar10"), []), **given}


def failed_job(dt: Dtrain, name: str) -> None:
    dt("submit", name, "--", *FAIL)
    assert dt("wait", name, check=False).returncode != 0 and dt.status(name) == "Failed"


# ---------------------------------------------------------------- names taken by a run before


def test_a_rerun_after_a_failed_run_is_refused_before_any_step(dt, home, capsys):
    """The train step refused the taken job name ~10 s in, after check-condition and cifar10-job ran."""
    dt("volume", "create", "cifar10", "--size", "1Gi")
    failed_job(dt, "cifar10-hybrid")
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "job_name=cifar10-hybrid")
    assert code == 2 and err.count("\n") == 1, err
    assert err == ("dtrain: error: pipeline 'hybrid-cifar10' would make job 'cifar10-hybrid' (Failed), which the "
                   "local backend already has: pass --param job_name=NEW, or remove it with 'dtrain delete cifar10-hybrid' and "
                   "the checkpoints in cifar10:/models/cifar10-hybrid, which a new job of that name would resume\n")
    assert not (home / "pipelines").exists()  # no step ran: KFP made no run folder
    # a Deleted local job is replaced by a new one of its name: no refusal for it, but a data
    # volume this run would mount and that is missing is refused the same way
    dt("delete", "cifar10-hybrid")
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "data_volume=nosuch")
    assert code == 2 and err == ("dtrain: error: pipeline 'hybrid-cifar10' mounts volume 'nosuch' (data_volume), "
                                 "which the local backend does not have: create it ('dtrain volume create nosuch') "
                                 "or pass --param data_volume=NAME\n")
    assert not (home / "pipelines").exists()


def test_a_rerun_after_deleting_the_job_never_resumes_the_earlier_runs_checkpoints(dt, home, capsys):
    """After `dtrain delete cifar10-hybrid` a rerun resumed the old run's checkpoints in
    /mnt/models/cifar10-hybrid: it trained nothing, its new lr ignored. It is refused before any step."""
    dt("volume", "create", "cifar10", "--size", "1Gi")
    models = Path(dt.json("volume", "describe", "cifar10")["extra"]["path"]) / "models"
    (models / "cifar10-hybrid").mkdir(parents=True)
    (models / "other").mkdir()
    for step in (9, 10):
        (models / "cifar10-hybrid" / f"ckpt-{step}.pt").write_bytes(b"x")
    (models / "other" / ".ckpt-3.pt.tmp").write_bytes(b"x")  # no complete checkpoint: nothing to resume
    code, _out, err = cli(home, capsys, "run", "hybrid-cifar10", "--param", "lr=0.01", "--param",
                          "job_name=cifar10-hybrid")
    assert code == 2 and err == (
        "dtrain: error: pipeline 'hybrid-cifar10' would resume its job from the checkpoints an earlier run left in "
        "cifar10:/models/cifar10-hybrid (2, the newest ckpt-10.pt) and ignore this run's parameters: pass "
        f"--param job_name=NEW, or remove {models / 'cifar10-hybrid'} to use that name again\n"), err
    assert not (home / "pipelines").exists()  # no step ran
    assert sorted(p.name for p in (models / "cifar10-hybrid").iterdir()) == ["ckpt-10.pt", "ckpt-9.pt"]  # kept
    from dtrain.pipelines import hybrid

    client = Client(home=home, backend="local")
    steps.check_plan("hybrid-cifar10", hybrid.plan(hybrid_params(job_name="other")), client=client)
    steps.check_plan("hybrid-cifar10", hybrid.plan(hybrid_params(job_name="new")), client=client)


def test_the_lane_pipeline_names_everything_a_run_before_left(dt, home, capsys):
    """Its snapshot and candidate volume clashed only in later steps: after the data job, after training."""
    dt("volume", "create", "pvc-lanes-data-0", "--size", "1Gi")
    dt("snapshot", "create", "pvc-lanes-data-0", "--name", "lanes-prepared")
    dt("volume", "create", "lanes-candidate", "--size", "1Gi")
    failed_job(dt, "lanes-train")
    code, _out, err = cli(home, capsys, "run", "lane-detection", "--param", "urls=https://example.com/a.tgz", "--param", "job_prefix=lanes")
    assert code == 2 and err.count("\n") == 1, err
    assert err == ("dtrain: error: pipeline 'lane-detection' would make job 'lanes-train' (Failed), volume "
                   "'pvc-lanes-data-0', snapshot 'lanes-prepared', volume 'lanes-candidate', which the local backend "
                   "already has: remove them with 'dtrain delete lanes-train; dtrain volume delete pvc-lanes-data-0; "
                   "dtrain snapshot delete lanes-prepared; dtrain volume delete lanes-candidate' or pass "
                   "--param job_prefix=NEW or --param candidate_volume=NEW\n")
    assert not (home / "pipelines").exists()


def test_a_fresh_home_passes_the_lane_pipelines_check_though_its_later_jobs_mount_a_volume_made_on_the_way(home):
    """The dry run looks up the volumes a job mounts; the train and eval jobs mount the data job's new
    volume, which no run has made yet: the check leaves that mount out, and still refuses a mount of a
    volume that is missing and no step makes."""
    from dtrain.pipelines import lanes, runner

    client = Client(home=home, backend="local")
    params = {**runner.parse_params(runner.load("lane-detection"), ["urls=https://example.com/a.tgz", "job_prefix=lanes"])}
    steps.check_plan("lane-detection", lanes.plan(params), client=client)  # nothing refused
    plan = lanes.plan(params)
    stray = {**plan.jobs[1], "volumes": [*plan.jobs[1]["volumes"], "nothere:/extra"]}
    with pytest.raises(NotFoundError, match="cannot submit job 'lanes-train' .*no volume named 'nothere'"):
        steps.check_plan("lane-detection", steps.Plan(backend=plan.backend, makes=plan.makes,
                                                      jobs=(plan.jobs[0], stray, plan.jobs[2])), client=client)


def test_on_kubernetes_a_job_being_deleted_still_takes_its_name(home, backend):  # noqa: F811
    """What `pipeline run` checks on a backend other than the configured one: the delete command
    names it, and a job being deleted (its object still there) is taken, unlike a Deleted local job."""
    from dtrain.pipelines import hybrid

    backend.submit(JobSpec(name="cifar10-hybrid", command=("python", "train.py"), project="lanes"))
    client = Client(home=home, backend="kubernetes", backends={"kubernetes": backend})
    params = hybrid_params(training_runtime="kubernetes", job_name="cifar10-hybrid", data_volume="cifar10")
    plan = hybrid.plan(params)
    with pytest.raises(ConflictError) as err:
        steps.check_plan("hybrid-cifar10", plan, client=client)
    assert str(err.value) == ("pipeline 'hybrid-cifar10' would make job 'cifar10-hybrid' (Pending), which the "
                              "kubernetes backend already has: pass --param job_name=NEW, or remove it with 'dtrain "
                              "--backend kubernetes delete cifar10-hybrid' and the checkpoints in "
                              "cifar10:/models/cifar10-hybrid, which a new job of that name would resume")
    backend.delete("cifar10-hybrid")
    with pytest.raises(ConflictError, match=r"job 'cifar10-hybrid' \(Deleted\), which the kubernetes backend"):
        steps.check_plan("hybrid-cifar10", plan, client=client)
    with pytest.raises(NotFoundError) as err:
        steps.check_plan("hybrid-cifar10", hybrid.plan({**params, "job_name": "other"}), client=client)
    assert str(err.value) == ("pipeline 'hybrid-cifar10' mounts volume 'cifar10' (data_volume), which the kubernetes "
                              "backend does not have: create it ('dtrain --backend kubernetes volume create cifar10') "
                              "or pass --param data_volume=NAME")


def test_on_sagemaker_a_taken_name_can_only_be_changed(home, clients, code):  # noqa: F811
    """A SageMaker training job's name is free again only after DeleteTrainingJob (`delete --purge`), not
    a plain delete (StopTrainingJob): the fix is another job_name, or the purge."""
    from dtrain.backends.sagemaker.backend import SageMakerBackend
    from dtrain.pipelines import hybrid
    from test_sagemaker_backend import CFG

    be = SageMakerBackend(CFG, clients=clients, cwd=str(code))
    be.submit(JobSpec(name="sm-taken", command=("python", "train.py"), backend="sagemaker"))
    client = Client(home=home, backend="sagemaker", backends={"sagemaker": be})
    clients.s3.put_object(Bucket=CFG.bucket, Key="cifar10/cifar-10-batches-py/data_batch_1", Body=b"-")
    params = hybrid_params(training_runtime="sagemaker", job_name="sm-taken", data_uri=f"s3://{CFG.bucket}/cifar10")
    with pytest.raises(ConflictError) as err:
        steps.check_plan("hybrid-cifar10", hybrid.plan(params), client=client)
    assert str(err.value) == (f"pipeline 'hybrid-cifar10' would submit job 'sm-taken' ({be.get('sm-taken').status}), "
                              f"a name SageMaker already has: pass --param job_name=NEW, or free it once ended "
                              f"with 'dtrain --backend sagemaker delete sm-taken --purge' (DeleteTrainingJob)")
    steps.check_plan("hybrid-cifar10", hybrid.plan({**params, "job_name": "sm-free"}), client=client)  # no volume


@pytest.mark.parametrize("value, message", [
    ("cloud", "invalid backend 'cloud': use local or kubernetes"),
    ("sagemaker", "invalid backend 'sagemaker': use local or kubernetes (its steps make volumes and snapshots, "
                  "which SageMaker does not have)"),
])
def test_the_lane_pipelines_backend_is_checked_before_any_step(home, capsys, value, message):
    """It failed in the prepare step, with a traceback in the step's log."""
    code, _out, err = cli(home, capsys, "run", "lane-detection", "--param", "urls=https://example.com/a.tgz", "--param", f"backend={value}")
    assert code == 2 and err == f"dtrain: error: {message}\n"
    assert not (home / "pipelines").exists()


# ---------------------------------------------------------------- a job whose log is gone


class LogsGone(Client):
    """The local backend, but a job's log reads as a Kubernetes job's do once its pods are gone."""

    def __init__(self, home: Path, *, follow: bool):
        super().__init__(home=home)
        self.follow = follow  # following still works (the pods went once the job ended)

    def logs(self, name, **kw):
        if self.follow and kw.get("follow"):
            return super().logs(name, **kw)
        raise NotFoundError(f"job {name!r} ended and its pods are gone,\nwith the logs")


@pytest.mark.parametrize("follow", [True, False])
def test_a_failed_job_whose_log_is_gone_still_fails_with_its_status(dt, home, follow):
    spec = {"name": "doomed", "command": FAIL}
    seen: list[str] = []
    with pytest.raises(JobFailedError) as err:
        steps.run_job(spec, backend="local", client=LogsGone(home, follow=follow), echo=seen.append)
    assert str(err.value).splitlines()[0] == (
        "job 'doomed' ended Failed (rank 0 exited (exit code 3); see 'dtrain logs doomed --rank 0') on the local "
        "backend; (its log is not available: job 'doomed' ended and its pods are gone, with the logs)")
    assert dt.status("doomed") == "Failed"
    if not follow:
        assert "[doomed] its log is not available: job 'doomed' ended and its pods are gone, with the logs" in seen


def test_a_succeeded_job_whose_log_is_gone_succeeds_but_has_no_metric(dt, home):
    spec = {"name": "fine", "command": ["python", "-c", "print('{\"accuracy\": 1, \"fp\": 0, \"fn\": 0}')"]}
    info = steps.run_job(spec, backend="local", client=LogsGone(home, follow=False), echo=lambda _line: None)
    assert info.status.value == "Succeeded"
    with pytest.raises(JobFailedError) as err:
        steps.evaluate({**spec, "name": "fine-2"}, backend="local", client=LogsGone(home, follow=True),
                       echo=lambda _line: None)
    assert str(err.value) == ("job 'fine-2' Succeeded but its metric line (JSON with accuracy, fp, fn) could not be "
                              "read: job 'fine-2' ended and its pods are gone, with the logs")
    # with its log there, the same job's metric is read
    assert steps.evaluate({**spec, "name": "fine-3"}, backend="local", client=Client(home=home),
                          echo=lambda _line: None) == {"accuracy": 1, "fp": 0, "fn": 0}


# ---------------------------------------------------------------- what a run leaves


JOB_TMP = textwrap.dedent('''
    from kfp import dsl
    from dtrain.pipelines.components import train

    CODE = ("import os, tempfile; print('TMPDIR=' + os.environ.get('TMPDIR', '')); "
            "tempfile.mkdtemp(prefix='torchinductor_')")  # as torch makes its cache folder

    @dsl.pipeline(name="job-tmp")
    def job_tmp():
        train(backend="local", spec={"name": "tmp-job", "command": ["python", "-c", CODE]}).set_caching_options(False)
''')


@pytest.mark.slow
def test_the_jobs_a_step_starts_get_the_users_tmpdir(tmp_path):
    """Jobs inherited the steps' $TMPDIR, a folder of the run's: torch's torchinductor_<user> cache
    folder (made as torch loads in a training job) kept every finished run's .tmp/run-* for good."""
    module = tmp_path / "jobtmp.py"
    module.write_text(JOB_TMP)
    users_tmp = tmp_path / "tmp"
    users_tmp.mkdir()
    dt = Dtrain(tmp_path / "home", env={"TMPDIR": str(users_tmp)})
    try:
        proc = dt("pipeline", "run", "--module", f"{module}:job_tmp", timeout=180)
    finally:
        dt("delete", "tmp-job", check=False)
    assert f"[tmp-job rank 0] TMPDIR={users_tmp}\n" in proc.stdout
    assert list((dt.home / "pipelines" / ".tmp").iterdir()) == []
    (made,) = users_tmp.iterdir()
    assert made.name.startswith("torchinductor_")


# ---------------------------------------------------------------- where a run writes, what KFP says


def test_a_root_that_cannot_be_used_is_one_line(home, capsys, tmp_path):
    (tmp_path / "file").write_text("x")
    for root, message in ((tmp_path / "file", "it or a folder above it is a file"),
                          (tmp_path / "file" / "sub", "it or a folder above it is a file"),
                          (Path("/proc/x"), "cannot use --root '/proc/x': No such file or directory"),
                          (Path("/proc/sys"), "cannot use --root '/proc/sys': making /proc/sys/.tmp failed")):
        code, _out, err = cli(home, capsys, "run", "--module", f"{_noop(tmp_path)}:noop", "--root", str(root))
        assert code == 2 and err.count("\n") == 1 and message in err and "Traceback" not in err, err


def _noop(tmp_path: Path) -> Path:
    module = tmp_path / "noop.py"
    module.write_text(textwrap.dedent('''
        from kfp import dsl
        from dtrain.pipelines.components import check_condition

        @dsl.pipeline(name="noop")
        def noop():
            check_condition(training_runtime="local")
    '''))
    return module


KFP_LIMITS = textwrap.dedent('''
    from kfp import dsl

    @dsl.component(base_image="python:3.11")
    def show(x: str) -> str:
        return x

    @dsl.container_component
    def echo():
        return dsl.ContainerSpec(image="alpine", command=["echo", "hi"])

    @dsl.pipeline(name="loop")
    def loop():
        with dsl.ParallelFor(["a", "b"]) as item:
            show(x=item).set_caching_options(False)

    @dsl.pipeline(name="container")
    def container():
        echo().set_caching_options(False)
''')


def test_what_kfps_local_runner_says_and_does_is_reported(home, capsys, tmp_path):
    """A loop's tasks are a folder deeper (the table of outputs was empty); a container component,
    which the local runner cannot run, failed with 'the step's log above ends with why' and no why."""
    module = tmp_path / "limits.py"
    module.write_text(KFP_LIMITS)
    code, out, err = cli(home, capsys, "run", "--module", f"{module}:loop")
    assert code == 0, err
    assert '\nfor-loop-2-iteration-0/show  {"Output": "a"}\n' in out
    assert '\nfor-loop-2-iteration-1/show  {"Output": "b"}\n' in out
    code, out, err = cli(home, capsys, "run", "--module", f"{module}:container")
    last = err.strip().splitlines()[-1]
    assert code == 1 and last == ("dtrain: error: pipeline 'container' failed: The SubprocessRunner only supports "
                                  "running Lightweight Python Components. You are attempting to run a Container "
                                  "Component.; no step left outputs"), err


def test_a_run_leaves_a_workspace_folder_in_its_root_alone(home, capsys, tmp_path):
    """KFP's local runner removes its workspace folder when a run ends: it was ROOT/.workspace,
    where a user's own folder of that name (or another run's workspace) was deleted with it."""
    root = tmp_path / "root"
    (root / ".workspace").mkdir(parents=True)
    (root / ".workspace" / "mine.txt").write_text("keep")
    code, _out, err = cli(home, capsys, "run", "--module", f"{_noop(tmp_path)}:noop", "--root", str(root))
    assert code == 0, err
    assert (root / ".workspace" / "mine.txt").read_text() == "keep"
    assert list((root / ".tmp").iterdir()) == []  # the run's own workspace went with its folder


def test_a_failed_steps_whole_log_command_works_as_printed_off_the_default_backend(dt, home):
    """'the whole log: dtrain logs doomed (after 'dtrain config backend local')': as printed it
    looked on the default backend (Kubernetes here), and the way to it was to change config.yaml."""
    (home / "config.yaml").write_text("project: default\nbackend: kubernetes\n")
    with pytest.raises(JobFailedError) as err:
        steps.run_job({"name": "doomed", "command": FAIL}, backend="local", client=Client(home=home),
                      echo=lambda _line: None)
    whole = str(err.value).rsplit("\nthe whole log: ", 1)[1].split()
    assert whole[:3] == ["dtrain", "--backend", "local"]
    assert dt(*whole[1:]).returncode == 0

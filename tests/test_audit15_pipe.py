"""Pipelines on day two: the names a run makes for itself, and what a user meets running them again.

1. A run's own names (an empty job_name / job_prefix) ended in 8 hex digits (32 bits: 9,300 runs had a 1%
   chance that two met, and the second was then refused "name taken"); under kfp.local the cifar10-job and
   prepare steps used KFP's run id, at most 8 digits from Python's global `random` (a seeded program repeats
   it). Now 16 hex digits from the OS, and `dtrain pipeline run` passes over an id whose names are taken.
2. lane-detection's candidate_volume defaulted to 'lanes-candidate': a run after one that kept its model
   was refused until the user named another. Empty now: <prefix>-candidate, a new one per run.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from dtrain.client import Client
from dtrain.errors import ConflictError, SpecError
from dtrain.names import MAX_NAME, NAME_RE
from test_pipeline_leftovers import failed_job, hybrid_params
from test_pipelines import compiled

kfp = pytest.importorskip("kfp", reason="pipelines need the KFP SDK: pip install 'dtrain[pipelines]'")

from dtrain.pipelines import hybrid, lanes, runner, steps  # noqa: E402  (after the KFP check)

A, B = "a" * 16, "b" * 16


def repeating(*ids: str):
    """An id source that gives IDS in turn (a seeded one repeats what a run before got)."""
    given = iter(ids)
    return lambda: next(given)


def lane_params(**given) -> dict:
    return {**runner.parse_params(runner.load("lane-detection"), ["urls=https://example.com/a.tgz"]), **given}


# ---------------------------------------------------------------- 1. a run's own names never meet a run before's


def test_a_runs_own_name_has_64_random_bits_and_kfp_locals_short_id_is_not_used():
    names = {steps.run_job_name("cifar10") for _ in range(50)}
    assert len(names) == 50 and all(len(n) == len("cifar10-") + 16 for n in names)
    # kfp.local's run id comes from Python's `random`: seeded alike, two runs got the same id, and so one name
    ids = []
    for _ in range(2):
        random.seed(7)
        from kfp.local import placeholder_utils

        ids.append(placeholder_utils.make_random_id())
    assert ids[0] == ids[1]
    assert steps.run_job_name("cifar10", ids[0]) != steps.run_job_name("cifar10", ids[1])
    assert steps.run_job_name("cifar10", ids[0], new_id=lambda: A) == f"cifar10-{A}"
    # a server's UUID: its first 16 letters and digits, the same for every step of the run
    assert steps.lanes_prefix("", "1b4e28ba-2fa1-11d2-883f-0016d3cca427", new_id=lambda: A) == "lanes-1b4e28ba2fa111d2"


def test_every_name_made_of_a_runs_own_id_is_valid_for_every_backend():
    """Kubernetes: MAX_NAME (53) leaves room in a 63-character label for the pods and Services named after a
    job; a PyTorchJob's name starts with a letter (DNS-1035). SageMaker: a training job name is 63 at most."""
    from dtrain.backends.kubernetes.render import PYTORCH_JOB, check_workload_name
    from dtrain.spec import JobSpec

    prefix = lanes.fill(lane_params())["job_prefix"]
    spec, _ = steps.cifar10_spec(runtime="kubernetes", job_name="", processes=2, epochs=1, batch_size=1, lr=0.1,
                                 backend="gloo", data_volume="cifar10")
    plan = lanes.plan(lanes.fill(lane_params()))
    names = [spec["name"], *(thing.name for thing in plan.makes)]
    assert all(NAME_RE.fullmatch(n) and len(n) <= MAX_NAME for n in names), names
    lanes.check({**lane_params(), "job_prefix": prefix})  # a prefix of the run's own passes the prefix's bound
    for name in (spec["name"], f"{prefix}-train"):
        check_workload_name(JobSpec(name=name, command=["true"]), PYTORCH_JOB)


def checkpoints_left(client: Client, job: str) -> None:
    """What a run before of job JOB left on the cifar10 volume once its job was deleted: a checkpoint."""
    models = Path(client.get_volume("cifar10").extra["path"]) / "models" / job
    models.mkdir(parents=True)
    (models / "ckpt-3.pt").write_bytes(b"")


def test_pipeline_run_passes_over_an_id_whose_checkpoints_a_run_before_left(home):
    """The id source repeats the id of a run before: a new job of that name would resume its checkpoints (and
    before, check_plan refused the run), so the run takes the next id."""
    client = Client(home=home, backend="local")
    client.create_volume("cifar10", size="1Gi")
    checkpoints_left(client, f"cifar10-{A}")
    params = hybrid_params()
    filled = steps.fill_free(params, fill=hybrid.fill, plan=hybrid.plan, client=client, new_id=repeating(A, A, B))
    assert filled["job_name"] == f"cifar10-{B}"
    steps.check_plan("hybrid-cifar10", hybrid.plan(filled), client=client)  # nothing refused


@pytest.mark.slow  # a real job, failed
def test_pipeline_run_passes_over_an_id_a_job_has(dt, home):
    dt("volume", "create", "cifar10", "--size", "1Gi")
    failed_job(dt, f"cifar10-{A}")
    client = Client(home=home, backend="local")
    filled = steps.fill_free(hybrid_params(), fill=hybrid.fill, plan=hybrid.plan, client=client,
                             new_id=repeating(A, B))
    assert filled["job_name"] == f"cifar10-{B}"


def test_the_lane_pipeline_passes_over_an_id_whose_snapshot_or_candidate_a_run_before_left(home):
    client = Client(home=home, backend="local")
    client.create_volume("scratch", size="1Gi")
    client.create_snapshot("scratch", name=f"lanes-{A}-prepared")
    client.create_volume(f"lanes-{B}-candidate", size="1Gi")
    filled = steps.fill_free(lane_params(), fill=lanes.fill, plan=lanes.plan, client=client,
                             new_id=repeating(A, B, "c" * 16))
    assert (filled["job_prefix"], filled["candidate_volume"]) == (f"lanes-{'c' * 16}", f"lanes-{'c' * 16}-candidate")


def test_names_given_are_never_replaced_and_a_source_that_only_repeats_ends_in_the_refusal(home):
    client = Client(home=home, backend="local")
    client.create_volume("cifar10", size="1Gi")
    checkpoints_left(client, "mine")
    given = hybrid_params(job_name="mine")

    def never():
        raise AssertionError("a name given needs no id")

    assert steps.fill_free(given, fill=hybrid.fill, plan=hybrid.plan, client=client, new_id=never) is given
    checkpoints_left(client, f"cifar10-{A}")
    calls = []
    filled = steps.fill_free(hybrid_params(), fill=hybrid.fill, plan=hybrid.plan, client=client,
                             new_id=lambda: calls.append(A) or A)  # a broken source: FILL_TRIES tries, then refused
    assert len(calls) == steps.FILL_TRIES
    with pytest.raises(ConflictError, match=f"resume its job from the checkpoints an earlier run left in "
                                            f"cifar10:/models/cifar10-{A}"):
        steps.check_plan("hybrid-cifar10", hybrid.plan(filled), client=client)


def test_dtrain_pipeline_run_uses_the_free_name_before_its_checks(home, tmp_path):
    """runner.run fills the names with fill_free before check_plan: with the run before's id first, its checks
    pass (they refused the taken name); the --root that cannot be made stops it right after them."""
    client = Client(home=home, backend="local")
    client.create_volume("cifar10", size="1Gi")
    checkpoints_left(client, f"cifar10-{A}")
    pipeline = runner.load("hybrid-cifar10")
    (tmp_path / "file").write_text("")
    with pytest.raises(SpecError, match="invalid --root"):  # after check_plan: it passed with cifar10-B
        runner.run(pipeline, hybrid_params(), home=home, root=tmp_path / "file" / "root", new_id=repeating(A, B))
    with pytest.raises(ConflictError, match=f"cifar10-{A}"):
        runner.run(pipeline, hybrid_params(), home=home, root=tmp_path / "file" / "root", new_id=lambda: A)


# ---------------------------------------------------------------- 2. candidate_volume of the run's own


def test_the_candidate_volume_is_the_runs_own_unless_given(home):
    """The first run kept its model in <its prefix>-candidate (and one in the old default's lanes-candidate): the
    next run with the defaults names another; a candidate_volume given is used, and refused when taken."""
    client = Client(home=home, backend="local")
    assert lane_params()["candidate_volume"] == ""
    first = lanes.fill(lane_params())
    assert first["candidate_volume"] == f"{first['job_prefix']}-candidate"
    client.create_volume(first["candidate_volume"], size="1Gi")
    client.create_volume("lanes-candidate", size="1Gi")
    second = lanes.fill(lane_params())
    assert second["candidate_volume"] == f"{second['job_prefix']}-candidate" != first["candidate_volume"]
    steps.check_plan("lane-detection", lanes.plan(second), client=client)
    given = lanes.fill(lane_params(candidate_volume="lanes-candidate"))
    assert given["candidate_volume"] == "lanes-candidate"
    with pytest.raises(ConflictError, match="volume 'lanes-candidate', which the local backend already has: remove "
                                            "it with 'dtrain volume delete lanes-candidate' or pass "
                                            "--param candidate_volume=NEW"):
        steps.check_plan("lane-detection", lanes.plan(given), client=client)
    with pytest.raises(SpecError, match="invalid volume name 'Kept'"):
        lanes.check(lane_params(candidate_volume="Kept"))


def test_the_restore_step_names_the_candidate_after_the_runs_prefix(home, tmp_path, monkeypatch):
    """On a KFP server no `dtrain pipeline run` fills candidate_volume: the restore step gets the prefix the
    prepare step made, and restores into <prefix>-candidate when candidate_volume is empty."""
    from dtrain.pipelines.components import restore

    ir = compiled(home, tmp_path, "lane-detection")
    branch = next(c for c in ir["root"]["dag"]["tasks"].values() if c.get("taskInfo", {}).get("name") == "accurate-enough")
    inner = ir["components"][branch["componentRef"]["name"]]["dag"]["tasks"]["restore"]["inputs"]["parameters"]
    assert inner["to"] == {"componentInputParameter": "pipelinechannel--candidate_volume"}
    assert inner["default_to"] == {
        "runtimeValue": {"constant": "{{$.inputs.parameters['pipelinechannel--prepare-prefix']}}-candidate"}}
    client = Client(home=home, backend="local")
    client.create_volume("data", size="1Gi")
    client.create_snapshot("data", name="trained")
    monkeypatch.setenv("DTRAIN_HOME", str(home))
    assert restore.python_func(backend="local", snapshot="trained", to="", default_to="lanes-x-candidate") == \
        "lanes-x-candidate"
    assert restore.python_func(backend="local", snapshot="trained", to="kept", default_to="lanes-y-candidate") == "kept"
    assert {"lanes-x-candidate", "kept"} <= {v.name for v in client.list_volumes()}


# ---------------------------------------------------------------- 3. day two


def test_dtrain_backend_picks_where_a_shipped_pipelines_steps_run(home, capsys):
    """`dtrain --backend kubernetes pipeline run hybrid-cifar10` ran on the local machine: the flag was ignored and
    training_runtime's default won. It is now the pipeline's backend parameter where none is given."""
    from dtrain.cli.main import main

    def run(*args: str) -> tuple[int, str]:
        code = main(["--home", str(home), *args])
        return code, capsys.readouterr().err

    code, err = run("--backend", "kubernetes", "pipeline", "run", "hybrid-cifar10")
    # the run is a kubernetes one now: refused by the Kubernetes backend's dry run (no image configured)
    assert code == 2 and "to the kubernetes backend (a pipeline's --image for its jobs is --param job_image)" in err, err
    code, err = run("--backend", "sagemaker", "pipeline", "run", "lane-detection", "--param", "urls=https://example.com/a.tgz")
    assert code == 2 and err == ("dtrain: error: invalid backend 'sagemaker': use local or kubernetes (its steps make "
                                 "volumes and snapshots, which SageMaker does not have)\n")
    code, err = run("--backend", "kubernetes", "pipeline", "run", "hybrid-cifar10", "--param", "training_runtime=local")
    assert code == 2 and err == ("dtrain: error: dtrain --backend kubernetes and --param training_runtime='local' "
                                 "disagree: give one of them (the pipeline's steps use --param training_runtime)\n")
    assert not (home / "pipelines").exists()  # no step ran
    pipeline = runner.load("lane-detection")
    assert runner.with_backend(pipeline, ["backend=kubernetes"], "kubernetes") == ["backend=kubernetes"]
    assert runner.with_backend(pipeline, ["urls=a"], None) == ["urls=a"]
    assert runner.with_backend(pipeline, ["urls=a"], "kubernetes") == ["urls=a", "backend=kubernetes"]


def test_dtrain_backend_is_refused_for_a_module_pipeline(home, tmp_path, capsys):
    from dtrain.cli.main import main

    (tmp_path / "mine.py").write_text("from kfp import dsl\nfrom dtrain.pipelines.components import check_condition"
                                      "\n\n\n@dsl.pipeline(name='mine')\ndef mine(runtime: str = 'local'):\n"
                                      "    check_condition(training_runtime=runtime)\n")
    code = main(["--home", str(home), "--backend", "kubernetes", "pipeline", "run", "--module",
                 f"{tmp_path / 'mine.py'}:mine"])
    err = capsys.readouterr().err
    assert code == 2 and err.startswith("dtrain: error: dtrain --backend kubernetes does not reach the steps of a "
                                        "--module pipeline"), err


def test_a_failed_runs_line_names_the_volumes_and_snapshots_it_left(home):
    """A lane-detection run that failed after its prepare step left the data volume (the TuSimple set, 10Gi by
    default) and its snapshot; a run with the defaults makes new ones, so they stayed for good unsaid."""
    client = Client(home=home, backend="local")
    plan = lanes.plan(lanes.fill(lane_params(), lambda: A))
    assert steps.left_behind(plan, client=client) == ""
    client.create_volume(f"pvc-lanes-{A}-data-0", size="1Gi")
    client.create_snapshot(f"pvc-lanes-{A}-data-0", name=f"lanes-{A}-prepared")
    assert steps.left_behind(plan, client=client) == (
        f"it left volume 'pvc-lanes-{A}-data-0', snapshot 'lanes-{A}-prepared': remove them with 'dtrain snapshot "
        f"delete lanes-{A}-prepared; dtrain volume delete pvc-lanes-{A}-data-0' once you no longer need them")


@pytest.mark.slow  # a real run under kfp.local: its data job fails
def test_a_lane_run_whose_data_job_fails_says_the_volume_it_left(dt, tmp_path):
    (tmp_path / "train_set.tar.gz").write_bytes(b"not a tar archive")
    proc = dt("pipeline", "run", "lane-detection", "--param", f"urls={tmp_path / 'train_set.tar.gz'}", check=False,
              timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    (volume,) = [v["name"] for v in dt.json("volume", "list")]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("dtrain: error: pipeline 'lane-detection' failed at step 'prepare'"), last
    assert last.endswith(f"; it left volume '{volume}': remove it with 'dtrain volume delete {volume}' once you no "
                         f"longer need it"), last
    dt("volume", "delete", volume)  # the command it names works


def test_a_lane_runs_urls_are_checked_before_any_step(home, tmp_path, capsys):
    """A mistyped path failed the data job ~20 s in, after its 10Gi volume was made (and left); a scheme the data
    job does not read, the same. Both are refused before any step; a kubernetes run's paths are its pod's."""
    from test_pipelines import cli

    code, _out, err = cli(home, capsys, "run", "lane-detection", "--param", f"urls={tmp_path}/nosuch.tar.gz")
    assert code == 2 and err == (f"dtrain: error: invalid urls entry '{tmp_path}/nosuch.tar.gz': no file "
                                 f"{tmp_path}/nosuch.tar.gz on this machine, where the local backend's data job reads "
                                 f"it: give the TuSimple archives as paths here (e.g. $PWD/tusimple/train_set.tar.gz) "
                                 f"or http(s):// URLs\n"), err
    code, _out, err = cli(home, capsys, "run", "lane-detection", "--param", "urls=ftp://example.com/a.tgz")
    assert code == 2 and err.startswith("dtrain: error: invalid urls entry 'ftp://example.com/a.tgz': unsupported URL "
                                        "scheme 'ftp'"), err
    assert not (home / "pipelines").exists() and Client(home=home, backend="local").list_volumes() == []
    there = tmp_path / "train_set.tar.gz"
    there.write_bytes(b"")
    lanes.check(lane_params(urls=f"{there},file://{there},https://example.com/test_set.tar.gz"))
    lanes.check(lane_params(urls="/data/train_set.tar.gz", backend="kubernetes"))  # the pod's path: not read here

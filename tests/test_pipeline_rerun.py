"""A pipeline run again with its default parameters: hybrid-cifar10's job_name defaulted to the fixed
'cifar10-hybrid', so the second run was refused (the name taken, its checkpoints there). The default is now
empty: the cifar10-job step names the job cifar10-<the run's id> (KFP's PIPELINE_JOB_ID: a server's UUID; kfp.local's
8 random digits are too few, and random hex digits stand in), and `dtrain pipeline run` picks cifar10-<16 random
hex digits> before its checks (tests/test_audit15_pipe.py).
A job_name given is used as given, and a taken one still refused. So with lane-detection's job_prefix (it was
'lanes'): empty, the prepare step makes lanes-<the run's id> and the later steps name after its `prefix` output.
"""

from __future__ import annotations

import re

import pytest

from test_pipelines import cifar_volume, compiled  # noqa: F401  (a fixture)

from dtrain.client import Client
from dtrain.errors import ConflictError
from dtrain.pipelines import hybrid, lanes, runner, steps


def test_a_run_id_names_the_job_and_no_run_id_is_a_random_name():
    assert steps.run_job_name("cifar10", "1b4e28ba-2fa1-11d2-883f-0016d3cca427") == "cifar10-1b4e28ba2fa111d2"
    unresolved = {steps.run_job_name("cifar10", "{{$.pipeline_job_uuid}}") for _ in range(3)}  # outside a run
    assert len(unresolved) == 3 and all(len(n) == len("cifar10-") + 16 for n in unresolved)
    spec, model = steps.cifar10_spec(runtime="local", job_name="", processes=1, epochs=1, batch_size=1, lr=0.1,
                                     backend="gloo", data_volume="cifar10", run_id="1b4e28ba-2fa1-11d2-883f")
    assert spec["name"] == "cifar10-1b4e28ba2fa111d2" and model == "cifar10:/models/cifar10-1b4e28ba2fa111d2/model.pth"


def test_dtrain_pipeline_run_fills_a_new_name_per_run_and_keeps_a_given_one():
    given = {"job_name": "mine", "training_runtime": "local"}
    assert hybrid.fill(given) is given
    one, two = (hybrid.fill({"job_name": ""})["job_name"] for _ in range(2))
    assert one != two and one.startswith("cifar10-") and two.startswith("cifar10-")


@pytest.mark.slow  # two real runs under kfp.local, and KFP's compiler
def test_kfp_local_runs_the_pipeline_twice_with_its_defaults(dt, cifar_volume, tmp_path, monkeypatch):  # noqa: F811
    from kfp import local

    ir = compiled(dt.home, tmp_path, "hybrid-cifar10")
    job_task = ir["root"]["dag"]["tasks"]["cifar10-job"]["inputs"]["parameters"]
    assert job_task["run_id"] == {"runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}}
    assert ir["root"]["inputDefinitions"]["parameters"]["job_name"]["defaultValue"] == ""

    monkeypatch.setenv("DTRAIN_HOME", str(dt.home))
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "root"))
    for _ in range(2):
        hybrid.hybrid_cifar10(training_runtime="local", processes=1, max_steps=1, batch_size=4)
    names = sorted(j["name"] for j in dt.json("list"))
    assert len(names) == 2 and names[0] != names[1] and all(n.startswith("cifar10-") for n in names), names
    assert [j["status"] for j in dt.json("list")] == ["Succeeded", "Succeeded"]


# ---- lane-detection: job_prefix defaulted to 'lanes', so a second run met the first run's names -------------

def test_the_lane_pipeline_fills_a_new_prefix_per_run_and_keeps_a_given_one():
    given = {"job_prefix": "mine", "candidate_volume": "kept"}
    assert lanes.fill(given) is given
    one, two = (lanes.fill({"job_prefix": "", "candidate_volume": ""})["job_prefix"] for _ in range(2))
    assert one != two and all(re.fullmatch(r"lanes-[0-9a-f]{16}", p) for p in (one, two)), (one, two)
    assert steps.lanes_prefix("", "1b4e28ba-2fa1-11d2-883f-0016d3cca427") == "lanes-1b4e28ba2fa111d2"  # a server's
    assert steps.lanes_prefix("mine", "1b4e28ba") == "mine"


def test_a_second_lane_run_with_the_defaults_passes_the_check_the_first_runs_names_refuse(dt, home):
    """The first run's job, volume and snapshot left behind: the next run with the defaults names new ones; a
    job_prefix given (the first run's) is refused as before."""
    client = Client(home=home, backend="local")
    defaults = runner.parse_params(runner.load("lane-detection"), ["urls=https://example.com/a.tgz"])
    assert defaults["job_prefix"] == ""
    first = lanes.fill(defaults)["job_prefix"]
    dt("volume", "create", f"pvc-{first}-data-0", "--size", "1Gi")
    dt("snapshot", "create", f"pvc-{first}-data-0", "--name", f"{first}-prepared")
    steps.check_plan("lane-detection", lanes.plan(lanes.fill(defaults)), client=client)  # nothing refused
    with pytest.raises(ConflictError, match=f"would make volume 'pvc-{first}-data-0', snapshot '{first}-prepared'"):
        steps.check_plan("lane-detection", lanes.plan({**defaults, "job_prefix": first}), client=client)


def test_the_lane_steps_name_everything_after_the_prefix_the_prepare_step_made(home, tmp_path):
    """On a KFP server (and under kfp.local) no `dtrain pipeline run` fills job_prefix: the prepare step makes it
    of the run's id, and the snapshot, lanes-job and evaluate steps take it from there."""
    ir = compiled(home, tmp_path, "lane-detection")
    tasks = ir["root"]["dag"]["tasks"]
    assert ir["root"]["inputDefinitions"]["parameters"]["job_prefix"]["defaultValue"] == ""
    assert tasks["prepare"]["inputs"]["parameters"]["run_id"] == {"runtimeValue": {"constant": "{{$.pipeline_job_uuid}}"}}
    made = {"taskOutputParameter": {"outputParameterKey": "prefix", "producerTask": "prepare"}}
    assert tasks["lanes-job"]["inputs"]["parameters"]["job_prefix"] == made
    assert tasks["evaluate"]["inputs"]["parameters"]["job_prefix"] == made
    assert tasks["snapshot"]["inputs"]["parameters"]["name"] == {
        "runtimeValue": {"constant": "{{$.inputs.parameters['pipelinechannel--prepare-prefix']}}-prepared"}}

"""The SDK as a new user meets it (audit 8): job verbs reach a job on its project's backend,
SDK refusals name SDK arguments, records print as JSON-ready values."""

from __future__ import annotations

import json

import pytest

import dtrain
from dtrain.errors import NotFoundError, SpecError


@pytest.fixture
def team_b_on_kubernetes(home, tmp_path):
    """config.yaml maps project team-b to Kubernetes (an in-memory API server) and leaves the rest local."""
    from conftest import team_b_on_kubernetes as started

    server = started(home, tmp_path)
    yield home
    server.close()


def test_verbs_on_a_job_reach_it_on_the_backend_of_its_project(team_b_on_kubernetes):
    """The job went to Kubernetes (namespace dtrain-team-b), but get/logs/delete asked the local
    backend, and get(backend='kubernetes') the configured project's namespace."""
    client = dtrain.Client(home=team_b_on_kubernetes)
    info = client.submit(dtrain.JobSpec(name="kjob", project="team-b", command=["python", "t.py"]))
    assert info.backend == "kubernetes"
    assert client.get("kjob").extra["namespace"] == "dtrain-team-b"
    assert client.get("kjob", backend="kubernetes").backend == "kubernetes"
    assert list(client.logs("kjob")) == []
    other = dtrain.Client(home=team_b_on_kubernetes)  # did not submit it: project= says where, as -p does
    with pytest.raises(NotFoundError):
        other.get("kjob")
    assert other.get("kjob", project="team-b").spec.project == "team-b"
    assert client.delete("kjob").status == dtrain.JobStatus.DELETED


def test_a_project_given_to_a_job_verb_finds_only_that_projects_job(home):
    client = dtrain.Client(home=home)
    client.create_project("team-x")
    client.submit(dtrain.JobSpec(name="mine", command=["true"]))
    assert client.wait("mine", timeout=120, project="default").status == dtrain.JobStatus.SUCCEEDED
    with pytest.raises(NotFoundError, match=r"in project 'team-x': it is in project 'default' \(give project='default'"):
        client.delete("mine", project="team-x")
    assert client.get("mine").status == dtrain.JobStatus.SUCCEEDED  # nothing was deleted


@pytest.mark.parametrize(("given", "said"), [
    ({"gpu_quota": -1}, r"^invalid gpu_quota -1: use a whole number"),
    ({"gpu_quota": "2"}, r"^invalid gpu_quota '2': use a whole number"),
    ({"gpu_quota": 1, "no_gpu_quota": True}, r"^gpu_quota and no_gpu_quota contradict each other"),
])
def test_create_project_refusals_name_the_sdk_arguments_not_the_cli_flags(home, given, said):
    with pytest.raises(SpecError, match=said):
        dtrain.Client(home=home).create_project("team", **given)


def test_the_cli_still_names_its_flag(dt):
    bad = dt("project", "create", "team", "--gpu-quota", "-1", check=False)
    assert bad.returncode == 2 and "invalid --gpu-quota -1: use a whole number" in bad.stderr


def test_a_quota_above_the_machine_names_no_door(home, monkeypatch):
    """'use --gpu-quota 2 or less' from the SDK (and the HTTP API) named a flag neither has."""
    from dtrain.errors import QuotaError

    monkeypatch.setenv("DTRAIN_GPUS", "2")
    with pytest.raises(QuotaError, match=r"larger than this machine's 2 GPUs; give a quota of 2 or less$"):
        dtrain.Client(home=home).create_project("team", gpu_quota=3)


def test_a_quota_on_a_machine_without_gpus_names_the_stand_in(home, monkeypatch):
    """With no GPU the refusal said 'give a quota of 0 or less', and never how README's quota examples
    run here: DTRAIN_GPUS=N stands in N GPUs (as submit --gpu says on such a machine)."""
    from dtrain.errors import QuotaError

    monkeypatch.setenv("DTRAIN_GPUS", "0")
    with pytest.raises(QuotaError, match=r"0 GPUs; give a quota of 0, or set DTRAIN_GPUS=N, which stands in N GPUs"):
        dtrain.Client(home=home).create_project("team", gpu_quota=1)
    from conftest import Dtrain

    dt = Dtrain(home, env={"DTRAIN_GPUS": "0"})
    bad = dt("project", "create", "team", "--gpu-quota", "1", check=False)
    assert bad.returncode == 2 and "or less" not in bad.stderr and "DTRAIN_GPUS=N" in bad.stderr
    assert len(bad.stderr.strip().splitlines()) == 1
    assert "team" not in dt("project", "list").stdout  # nothing stored


def test_a_mount_takes_its_fields_by_position_in_the_order_of_its_pvc_string():
    """VolumeMount('data', '/mnt') was a TypeError from the generated __init__."""
    assert dtrain.VolumeMount("data", "/mnt", True) == dtrain.parse_pvc("data:/mnt:ro")
    assert dtrain.NewVolume("local", "1Gi", "/mnt/s") == dtrain.parse_pvc("local:1Gi:/mnt/s")


@pytest.mark.parametrize(("make", "said"), [
    (lambda: dtrain.VolumeMount(volume="data", mount_path="/mnt", readonly=True), r"readonly \(did you mean 'read_only'\?\)"),
    (lambda: dtrain.VolumeMount(name="data", mount_path="/mnt"), r"name \(did you mean 'volume'\?\)"),
    (lambda: dtrain.VolumeMount("data"), r"VolumeMount needs mount_path=\.\.\."),
    (lambda: dtrain.VolumeMount("data", "/mnt", False, 1), r"takes at most 3 values"),
    (lambda: dtrain.NewVolume("local", "1Gi", size="2Gi", mount_path="/m"), r"got size twice"),
])
def test_a_mount_made_wrong_is_a_spec_error_naming_the_field(make, said):
    with pytest.raises(SpecError, match=said):
        make()


def test_records_to_dict_give_lists_as_json_does(home, monkeypatch):
    """NodeInfo.to_dict() gave gpus as a tuple (and JobInfo's processes and events): not what the
    HTTP API's JSON and --json give, so a comparison with them failed."""
    monkeypatch.setenv("DTRAIN_GPUS", "2")
    client = dtrain.Client(home=home)
    node = client.nodes()[0].to_dict()
    assert isinstance(node["gpus"], list) and node == json.loads(json.dumps(node))
    client.submit(dtrain.JobSpec(name="one", command=["true"]))
    record = client.wait("one", timeout=120).to_dict()
    assert record == json.loads(json.dumps(record))


@pytest.mark.slow
def test_page_and_list_take_the_filters_the_http_list_takes(home):
    """The HTTP API paged the label_selector'd jobs itself (a twin of the backends' paging): now
    Client.page(selector=...) and Client.list(status=...) do it, and the route only calls them."""
    client = dtrain.Client(home=home)
    for name, team in (("a", "x"), ("b", "y"), ("c", "x"), ("d", "x")):
        client.submit(dtrain.JobSpec(name=name, labels={"team": team}, command=["true"]))
        client.wait(name, timeout=120)
    client.delete("d")
    page = client.page(selector="team=x", limit=1)
    assert (page.total, [j.name for j in page.jobs]) == (2, ["c"])
    assert [j.name for j in client.page(selector="team=x", offset=1).jobs] == ["a"]
    assert [j.name for j in client.page(selector="team=x", status="Deleted").jobs] == ["d"]
    assert [j.name for j in client.list(status=dtrain.JobStatus.DELETED, show_deleted=False)] == ["d"]
    assert [j.name for j in client.list(status="Succeeded", selector="team=x")] == ["a", "c"]
    with pytest.raises(SpecError, match="invalid status 'Done'"):
        client.list(status="Done")
    with pytest.raises(SpecError, match="invalid limit 0"):
        client.page(selector="team=x", limit=0)
    with pytest.raises(NotFoundError, match="no project named 'nope'"):
        client.page(project="nope", selector="team=x")

"""The Python SDK as a notebook uses it: one Client shared by threads, field names a Kubeflow or
SageMaker user writes, specs that round-trip through to_dict, and wrong argument types refused as
dtrain.errors, never a TypeError or a sqlite3 error from inside."""

from __future__ import annotations

import json
from concurrent.futures import ThreadPoolExecutor

import pytest

import dtrain
from dtrain.errors import NotFoundError, SpecError


@pytest.fixture
def client(home) -> dtrain.Client:
    return dtrain.Client(home=home)


def test_one_client_is_shared_by_threads(client):
    """Threads submitting and waiting through one Client shared its SQLite connection: one of them
    failed with sqlite3.OperationalError 'cannot start a transaction within a transaction'."""
    def run(i: int):
        client.submit(dtrain.JobSpec(name=f"t{i}", command=["sh", "-c", f"echo {i}"]))
        info = client.wait(f"t{i}", timeout=120)
        return info.status, [line.text for line in client.logs(f"t{i}")]

    with ThreadPoolExecutor(4) as pool:
        results = list(pool.map(run, range(4)))
    assert results == [(dtrain.JobStatus.SUCCEEDED, [str(i)]) for i in range(4)]
    assert sorted(j.name for j in client.list()) == [f"t{i}" for i in range(4)]


def test_a_client_made_backend_is_its_threads_own_and_an_injected_one_is_shared(home):
    from dtrain.backends.local.backend import LocalBackend

    injected = LocalBackend(home)
    client = dtrain.Client(home=home, backends={"other": injected})
    mine = client.backend("local")
    with ThreadPoolExecutor(1) as pool:
        theirs, shared = pool.submit(lambda: (client.backend("local"), client.backend("other"))).result()
    assert theirs is not mine and client.backend("local") is mine
    assert shared is injected


@pytest.mark.parametrize(("field", "meant"), [("gpus", "gpu"), ("replicas", "processes"), ("workingDir", "working_dir"),
                                              ("args", "command"), ("large-shm", "large_shm"), ("Image", "image")])
def test_an_unknown_job_file_field_names_the_field_meant(dt, tmp_path, field, meant):
    job = tmp_path / "job.yaml"
    job.write_text(f"name: a\ncommand: [echo, hi]\n{field}: 1\n")
    proc = dt("submit", "-f", str(job), check=False)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"unknown job field {field} (did you mean '{meant}'?)" in proc.stderr
    with pytest.raises(SpecError, match=rf"unknown job field {field} \(did you mean '{meant}'\?\)"):
        dtrain.JobSpec.from_dict({"name": "a", "command": ["x"], field: 1})


def test_an_unrelated_unknown_field_suggests_nothing():
    with pytest.raises(SpecError, match=r"unknown job field colour: known fields are") as caught:
        dtrain.JobSpec.from_dict({"name": "a", "command": ["x"], "colour": 1})
    assert "did you mean" not in str(caught.value)


@pytest.mark.parametrize(("kwargs", "args", "match"), [
    ({"name": "a", "command": ["x"], "gpus": 2}, (), r"unknown field gpus \(did you mean 'gpu'\?\)"),
    ({"name": "a"}, (), r"JobSpec needs command="),
    ({"command": ["x"]}, (), r"JobSpec needs name="),
    ({}, ("a", ["x"]), r"takes its fields by name, not 2 values by position"),
])
def test_job_spec_arguments_it_lacks_are_spec_errors(kwargs, args, match):
    """JobSpec(gpus=2) was a TypeError from the dataclass's __init__, unlike every other bad value."""
    with pytest.raises(SpecError, match=match):
        dtrain.JobSpec(*args, **kwargs)


def test_an_unset_project_and_backend_stay_unset_through_to_dict(home):
    """to_dict wrote project: default and backend: local for a spec that named neither, so the spec
    read back (a job file saved from a notebook) went to project 'default' where the original went
    to the configured project."""
    client = dtrain.Client(home=home)
    client.create_project("team-a")
    client.set_default_project("team-a")
    client.create_volume("data")  # a dry run refuses a volume that is not there, as submit does
    spec = dtrain.JobSpec(name="one", command=["true"], env={"A": "1"}, volumes=["data:/mnt:ro"])
    back = dtrain.JobSpec.from_dict(json.loads(json.dumps(spec.to_dict())))
    assert back == spec and "project" not in spec.to_dict() and "backend" not in spec.to_dict()
    assert client.render(back)[0]["project"] == "team-a"
    pinned = spec.replace(project="default")
    assert dtrain.JobSpec.from_dict(pinned.to_dict()).project == "default"
    assert client.render(dtrain.JobSpec.from_dict(pinned.to_dict()))[0]["project"] == "default"


def test_log_lines_have_to_dict_and_logs_json_prints_it(client, dt):
    client.submit(dtrain.JobSpec(name="talk", command=["sh", "-c", "echo one; echo two"]))
    client.wait("talk", timeout=120)
    lines = [json.loads(x) for x in dt("logs", "talk", "--json").stdout.splitlines()]
    assert lines == [line.to_dict() for line in client.logs("talk")]
    assert [x["text"] for x in lines] == ["one", "two"]


@pytest.mark.parametrize("verb", ["get", "wait", "delete", "suspend", "resume", "logs", "notebook_url"])
def test_a_job_name_that_is_no_string_is_a_spec_error(client, verb):
    """client.resume(['a']) reached the store's query: sqlite3.ProgrammingError."""
    with pytest.raises(SpecError, match=r"invalid (job|notebook) name \['a'\]: give the .* name as a string"):
        getattr(client, verb)(["a"])


@pytest.mark.parametrize("call", [
    lambda c: c.get_volume(["data"]), lambda c: c.delete_volume(["data"]), lambda c: c.create_snapshot(["data"]),
    lambda c: c.get_snapshot(["s"]), lambda c: c.delete_snapshot(["s"]), lambda c: c.diff_snapshots(["s"], "s"),
    lambda c: c.restore_snapshot(["s"], to="copy"), lambda c: c.list_snapshots(volume=["data"]),
    lambda c: c.update_volume(["data"], storage_class="local"),
])
def test_a_volume_or_snapshot_name_that_is_no_string_is_a_spec_error(client, call):
    with pytest.raises(SpecError, match=r"invalid (volume|snapshot) name \[.*\]: give the"):
        call(client)


def test_yes_no_arguments_take_only_booleans(client):
    """restore_snapshot(in_place='no') rolled the volume back, delete(purge='no') forgot the job."""
    client.create_volume("data", size="1Mi")
    client.create_snapshot("data", name="data-s1")
    client.submit(dtrain.JobSpec(name="kept", command=["true"]))
    client.wait("kept", timeout=120)
    with pytest.raises(SpecError, match=r"invalid in_place 'no': use True or False"):
        client.restore_snapshot("data-s1", in_place="no")
    with pytest.raises(SpecError, match=r"invalid purge 'no': use True or False"):
        client.delete("kept", purge="no")
    with pytest.raises(SpecError, match=r"invalid force 'no'"):
        client.delete_volume("data", force="no")
    with pytest.raises(SpecError, match=r"invalid show_deleted 'no'"):
        client.list(show_deleted="no")
    with pytest.raises(SpecError, match=r"invalid no_gpu_quota 'no'"):
        client.create_project("team", no_gpu_quota="no")
    assert client.get("kept").status == dtrain.JobStatus.SUCCEEDED
    assert client.get_volume("data").name == "data"
    assert [p.name for p in client.list_projects()] == ["default"]


def test_a_storage_class_name_that_is_no_string_is_refused_before_saving(client, home, tmp_path):
    """set_storage_class(5, ...) saved `5: /folder` in config.yaml; `volume classes` then failed with
    a TypeError comparing 5 with 'local'. A hand-written `5:` is refused alike."""
    with pytest.raises(SpecError, match=r"storage class 5: .*use a lower-case name"):
        client.set_storage_class(5, tmp_path / "disk")
    assert client.list_storage_classes()[0].name == "local"
    (home / "config.yaml").write_text(f"storage_classes: {{5: {tmp_path / 'disk'}}}\n")
    with pytest.raises(SpecError, match=r"config.yaml: storage class 5: "):
        dtrain.Client(home=home)


def test_one_storage_class_name_is_not_read_a_character_at_a_time(client, tmp_path):
    client.set_storage_class("fast", tmp_path / "fast")
    assert client.unset_storage_classes("fast").volumes == {"fast": 0}
    with pytest.raises(NotFoundError, match=r"no storage class 'slow'"):
        client.unset_storage_classes("slow")


@pytest.mark.parametrize("volumes", [5, "data:/home/jovyan/work"])
def test_notebook_volumes_must_be_a_list(client, volumes):
    with pytest.raises(SpecError, match=r"invalid volumes .*: must be a list, e.g. volumes=\['data:/mnt'\]"):
        client.notebook("lab", volumes=volumes)


@pytest.mark.parametrize("to", [None, 5, ""])
def test_artifacts_needs_a_folder(client, to):
    client.submit(dtrain.JobSpec(name="done", command=["true"]))
    client.wait("done", timeout=120)
    with pytest.raises(SpecError, match=r"invalid to .*: give the new folder"):
        client.artifacts("done", to=to)


def test_backends_must_be_a_mapping(home):
    with pytest.raises(SpecError, match=r"invalid backends \['local'\]: give a mapping"):
        dtrain.Client(home=home, backends=["local"])


def test_logs_since_names_the_unit_the_sdk_takes(client):
    client.submit(dtrain.JobSpec(name="quiet", command=["true"]))
    with pytest.raises(SpecError,
                       match=r"invalid since '10m': use a unix time in seconds from 0 to [0-9]+, e.g. time.time\(\) - 600"):
        client.logs("quiet", since="10m")
    client.wait("quiet", timeout=120)

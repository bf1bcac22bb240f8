"""The SDK's verbs give typed records: frozen dataclasses with `to_dict()`, the form `--json` and the
HTTP API print (the guide's "typed records out of every verb")."""

from __future__ import annotations

import dataclasses
import json

import pytest

import dtrain
from dtrain.backends.base import (Event, JobCount, JobInfo, JobPage, JobStatus, JobSummary, Notice, ProcessInfo,
                                  ProjectInfo)
from dtrain.errors import SpecError
from dtrain.spec import JobSpec
from dtrain.client_settings import Defaults, RemovedClasses, SavedSettings
from dtrain.client_lookup import ForgotBackend


def _record(value, kind):
    assert isinstance(value, kind)
    assert dataclasses.is_dataclass(value)
    with pytest.raises(dataclasses.FrozenInstanceError):
        value.__setattr__(dataclasses.fields(value)[0].name, None)
    return value.to_dict()


def test_the_settings_verbs_return_what_config_yaml_holds_as_records(home, tmp_path):
    """create_project, set_default_project and set_default_backend returned None; configure_sagemaker,
    configure_kubernetes, configure_node_labels and unset_storage_classes plain dicts, set_storage_class a str."""
    client = dtrain.Client(home=home)
    assert _record(client.create_project("team-a"), ProjectInfo)["name"] == "team-a"
    assert _record(client.set_default_project("team-a"), Defaults) == {
        "project": "team-a", "backend": "local", "project_backends": {}}
    assert _record(client.set_default_backend("local", project="team-b"), Defaults) == {
        "project": "team-a", "backend": "local", "project_backends": {"team-b": "local"}}
    saved = _record(client.configure_sagemaker(role="arn:aws:iam::123456789012:role/R", bucket="my-bucket"), SavedSettings)
    assert saved == {"section": "sagemaker", "settings": client.config.sagemaker}
    assert saved["settings"]["bucket"] == "my-bucket"
    assert _record(client.configure_kubernetes(namespace="ns"), SavedSettings) == {
        "section": "kubernetes", "settings": {"namespace": "ns"}}
    assert _record(client.configure_node_labels({"gpu-type": "a100"}), SavedSettings) == {
        "section": "node_labels", "settings": {"gpu-type": "a100"}}
    (tmp_path / "fast").mkdir()
    saved = client.set_storage_class("fast", tmp_path / "fast")
    assert _record(saved, SavedSettings) == {"section": "storage_classes", "settings": {"fast": str(tmp_path / "fast")}}
    assert _record(client.unset_storage_classes(["fast", "fast"]), RemovedClasses) == {
        "classes": ["fast"], "volumes": {"fast": 0}}


def test_forget_backend_returns_a_record_as_the_http_api_answers(home):
    """forget_backend returned a plain list of the reasons the backend is asked still, where the other settings
    verbs return records and POST /backends/NAME/forget answers {backend, still_asked}."""
    from dtrain.remotes import SentTo

    SentTo(home).record("sagemaker", "default")
    (home / "config.yaml").write_text("project_backends:\n  team-b: sagemaker\n")
    assert _record(dtrain.Client(home=home).forget_backend("sagemaker"), ForgotBackend) == {
        "backend": "sagemaker", "still_asked": ["project team-b's backend (config.yaml's project_backends)"]}


def test_create_project_returns_the_project_read_back(home, monkeypatch):
    monkeypatch.setenv("DTRAIN_GPUS", "2")
    client = dtrain.Client(home=home)
    made = client.create_project("team-a", gpu_quota=1)
    assert (made.name, made.backend, made.gpu_quota, made.jobs) == ("team-a", "local", 1, 0)
    assert client.create_project("team-a", no_gpu_quota=True).gpu_quota is None
    assert client.list_projects()[[p.name for p in client.list_projects()].index("team-a")] == \
        client.create_project("team-a")


def _job() -> JobInfo:
    spec = JobSpec(name="train", command=("python", "train.py"), processes=2, launcher="torchrun")
    return JobInfo(name="train", spec=spec, status=JobStatus.RUNNING, backend="local", created=1.0, started=2.0,
                   processes=(ProcessInfo(rank=0, status="Running", devices=("0",), node="n", pod="train-0"),
                              ProcessInfo(rank=1, status="Pending")),
                   events=(Event(time=1.0, status="Pending"), Event(time=2.0, status="Running", message="started")))


def test_pages_summaries_processes_and_events_have_the_form_json_and_the_http_api_print():
    """JobPage, JobSummary, Event and ProcessInfo had no to_dict() (the other records had)."""
    from dtrain.server import wire

    info = _job()
    http = json.loads(wire.job_out(info).model_dump_json())
    assert [p.to_dict() for p in info.processes] == http["processes"] == info.to_dict()["processes"]
    assert [e.to_dict() for e in info.events] == http["events"] == info.to_dict()["events"]
    notice = Notice(code="jobs-unlisted", message="jobs on the kubernetes backend not listed")
    page = JobPage(total=5, jobs=(info,), notices=(notice,))
    assert page.to_dict() == {"total": 5, "jobs": [info.to_dict()],
                              "notices": [{"code": "jobs-unlisted", "message": notice.message}]}
    summary = JobSummary(counts=(JobCount(project="default", status=JobStatus.RUNNING, jobs=1),), unfinished=(info,))
    assert summary.to_dict() == {"counts": [{"project": "default", "status": "Running", "jobs": 1}],
                                 "unfinished": [info.to_dict()]}
    for record in (page, summary, *info.processes, *info.events):
        assert json.loads(json.dumps(record.to_dict())) == record.to_dict()


def test_a_page_of_the_client_is_a_record_as_its_jobs_are(home):
    client = dtrain.Client(home=home)
    assert client.page(limit=10).to_dict() == {"total": 0, "jobs": [], "notices": []}
    assert client.page_volumes(limit=10).to_dict() == {"total": 0, "items": [], "notices": []}
    assert client.summary().to_dict() == {"counts": [], "unfinished": []}


def test_a_job_record_shows_as_its_name_status_backend_and_ranks():
    """repr(JobInfo) was the whole record: its spec, every event and the backend's details, pages long in a notebook."""
    info = _job()
    assert repr(info) == ("JobInfo(name='train', status='Running', backend='local', project='default', "
                          "processes={0: 'Running', 1: 'Pending'})")
    done = dataclasses.replace(info, processes=(ProcessInfo(rank=0, status="Failed", exit_code=3),))
    assert repr(done).endswith("processes={0: 'Failed (3)'})")
    assert "command" in info.to_dict()["spec"] and info.to_dict()["events"][1]["message"] == "started"


@pytest.mark.parametrize("key", ["volumes", "pvc"])
@pytest.mark.parametrize("bad", ["nocolon", "./data:/mnt", "data:/mnt:xx", "Fast:10Gi:/mnt", "data:/proc"])
def test_a_volumes_entry_the_sdk_refuses_is_named_as_its_field_not_as_the_flag(key, bad):
    """JobSpec.from_dict({'volumes': [...]}) and JobSpec(volumes=[...]) said 'invalid --pvc ...', a flag the SDK never took."""
    makes = [lambda: JobSpec.from_dict({"name": "j", "command": ["true"], key: [bad]})]
    if key == "volumes":
        makes.append(lambda: JobSpec(name="j", command=("true",), volumes=[bad]))
    for make in makes:
        with pytest.raises(SpecError) as err:
            make()
        said = str(err.value)
        assert said.startswith(f"invalid {key}: entry {bad!r}: "), said
        assert "--pvc" not in said.replace("copy-in --pvc", ""), said
    with pytest.raises(SpecError, match=r"^two volumes are mounted at /mnt: give each volume its own mount path$"):
        JobSpec.from_dict({"name": "j", "command": ["true"], key: ["a:/mnt", "b:/mnt"]})

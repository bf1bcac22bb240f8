"""A newcomer's pass over docs/sdk.md and docs/dashboard.md, each call as the page shows it."""

from __future__ import annotations

import time
import urllib.request

import pytest

import dtrain
from dtrain.errors import ConflictError, NotReadyError


@pytest.fixture
def client(home, monkeypatch):
    monkeypatch.setenv("DTRAIN_HOME", str(home))
    c = dtrain.Client(home=home)
    yield c
    for job in c.list():
        if not job.status.terminal:
            c.delete(job.name)


def test_notebook_url_with_wait_right_after_notebook_waits_for_the_scheduler_to_place_it(client):
    """docs/sdk.md's Notebooks: `client.notebook("nb", ...)` returns the record Pending ("queued: waiting
    for the scheduler to place it") and the scheduler places it a moment later; `notebook_url("nb",
    wait=60)` refused that moment at once as a queue ("is Pending ...: open it once it is Running"), so
    the page's example printed its except branch and never a URL."""
    pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server")
    client.create_volume("data", size="1Mi")
    first = client.notebook("nb", volumes=["data:/home/jovyan"])
    assert first.status == dtrain.JobStatus.PENDING
    url = client.notebook_url("nb", wait=60)
    with urllib.request.urlopen(url.replace("/?", "/api/status?"), timeout=10) as resp:
        assert resp.status == 200


def test_a_notebook_not_yet_placed_is_not_ready_and_one_queued_behind_gpus_is_refused(client, monkeypatch):
    """Not yet placed (the scheduler's first word to come): a NotReadyError, which `wait` asks again;
    one the scheduler keeps waiting (for GPUs) stays a ConflictError at once, not a wait of hours."""
    monkeypatch.setenv("DTRAIN_GPUS", "1")
    client.submit(dtrain.JobSpec(name="holder", gpu=1, command=["sleep", "60"]))
    queued = dtrain.Client(home=client.home)
    queued.notebook("nb", gpu=1)
    with pytest.raises(NotReadyError, match=r"^notebook 'nb' is Pending \(queued: waiting for the scheduler to place "
                                            r"it\)"):
        queued.notebook_url("nb")
    deadline = time.monotonic() + 30  # the scheduler's first word on it: "waiting: ..." for the GPU
    while (info := queued.get("nb")).message.endswith("to place it") and time.monotonic() < deadline:
        time.sleep(0.05)
    assert info.status == dtrain.JobStatus.PENDING and info.message.startswith("waiting: "), info.message
    with pytest.raises(ConflictError) as refused:
        queued.notebook_url("nb", wait=60)
    assert type(refused.value) is ConflictError and "is Pending (waiting: " in str(refused.value)


def test_a_snapshot_record_shows_without_its_jobs_whole_spec_and_a_count_its_status_as_a_word(client):
    """docs/sdk.md's Volumes and snapshots: `client.list_snapshots()` in a notebook cell showed each
    snapshot with its job's whole spec (~25 fields, 950 characters a snapshot); `client.summary()`
    showed each count's status as `<JobStatus.SUCCEEDED: 'Succeeded'>`, where a JobInfo shows its word."""
    client.create_volume("data", size="1Mi")
    client.submit(dtrain.JobSpec(name="writer", volumes=["data:/mnt"], snapshot_on_success="data",
                                 command=["sh", "-c", "echo weights > /mnt/model.txt"]))
    info = client.wait("writer")
    snap = client.get_snapshot(info.snapshot)
    assert snap.job_spec["command"] == ["sh", "-c", "echo weights > /mnt/model.txt"]
    assert "job_spec" not in repr(snap) and "echo weights" not in repr(snap)
    assert repr(snap).startswith(f"SnapshotInfo(name={info.snapshot!r}, backend='local', volume='data', ")
    assert "job='writer'" in repr(snap) and "files=" in repr(snap)
    assert snap.to_dict()["job_spec"]["command"] == ["sh", "-c", "echo weights > /mnt/model.txt"]
    counts = client.summary().counts
    assert repr(counts) == "(JobCount(project='default', status='Succeeded', jobs=1),)"
    assert counts[0].status is dtrain.JobStatus.SUCCEEDED


def test_set_default_project_refuses_a_project_that_does_not_exist_as_dtrain_config_project_does(client):
    """`client.set_default_project("vision")` saved a project no backend has (the CLI refuses it:
    "no project named ...; create it first"), and every later submit of the notebook then failed."""
    from dtrain.errors import NotFoundError

    client.create_project("team-a")
    with pytest.raises(NotFoundError, match=r"^no project named 'vision'; create it first with 'dtrain project "
                                            r"create vision' \(projects: default, team-a\)$"):
        client.set_default_project("vision")
    with pytest.raises(NotFoundError, match=r"did you mean 'team-a'\?"):
        client.set_default_project("team-aa")
    assert dtrain.Client(home=client.home).default_project == "default"  # nothing saved
    assert client.set_default_project("team-a").project == "team-a"
    assert client.set_default_project("default").project == "default"  # the one that always exists


@pytest.mark.parametrize("given", [{"local": None}, {"local": "x"}, {"kubernetes": {"namespace": "a"}}, {1: None}])
def test_a_backends_mapping_of_no_backend_objects_is_refused_at_once(home, given):
    """docs/sdk.md: "A `backend` or `backends` the client does not know is a `SpecError` at once, not at
    the first call"; `Client(backends={"local": None})` was made, and its first call was an
    AttributeError ('NoneType' object has no attribute 'submit') from inside."""
    from dtrain.errors import SpecError

    with pytest.raises(SpecError, match=r"^invalid backends\[.*\] .*: give a Backend object, e.g. "
                                        r"backends=\{'kubernetes': KubernetesBackend\(config\)\}$"):
        dtrain.Client(home=home, backends=given)


def test_a_backend_class_given_for_an_object_is_named_so(home):
    from dtrain.backends.kubernetes.backend import KubernetesBackend
    from dtrain.errors import SpecError

    with pytest.raises(SpecError, match=r"^invalid backends\['kubernetes'\] <class .*KubernetesBackend'>: give a "
                                        r"Backend object"):
        dtrain.Client(home=home, backends={"kubernetes": KubernetesBackend})


def test_a_client_shows_its_home_backend_and_default_project(home):
    """A notebook cell holding `client` showed `<dtrain.client.Client object at 0x7f...>`."""
    assert repr(dtrain.Client(home=home)) == (f"Client(home={str(home)!r}, backend='local', project='default')")
    k8s = dtrain.Client(home=home, backend="kubernetes")
    assert repr(k8s) == f"Client(home={str(home)!r}, backend='kubernetes', project='default')"

"""A Run:AI, kubectl or AWS CLI user on dtrain (audit 19): a status filter in their words, kubectl's
KIND/NAME on the job verbs, and the flags of their list, describe and delete named with dtrain's form."""

from __future__ import annotations

import dtrain
import pytest
from conftest import assert_usage_error
from dtrain.backends.records import check_status
from dtrain.cli.completion import script
from dtrain.cli.main import build_parser
from dtrain.errors import SpecError


# ---- runai list --status running; aws sagemaker list-training-jobs --status-equals InProgress --------
@pytest.mark.parametrize("word, status", [
    ("running", "Running"), ("SUCCEEDED", "Succeeded"), ("suspended", "Suspended"), ("InProgress", "Running"),
    ("inprogress", "Running"), ("Completed", "Succeeded"), ("Stopping", "Running"), ("Stopped", "Deleted"),
    ("Failed", "Failed"), (dtrain.JobStatus.PENDING, "Pending"),
])
def test_a_status_filter_takes_any_case_and_sagemakers_words(word, status):
    """`--status running` was "invalid status 'running'", and SageMaker's InProgress or Completed too."""
    assert check_status(word) is dtrain.JobStatus(status)


@pytest.mark.parametrize("word", ["Done", "", "runing", 5, ["Running"]])
def test_a_status_filter_no_word_names_is_still_refused(word):
    with pytest.raises(SpecError, match=r"^invalid status .*: use one of Pending, Running, Succeeded, Failed, "
                                        r"Deleted, Suspended$"):
        check_status(word)


def test_list_status_in_any_case_and_sagemakers_words_at_the_cli_and_the_sdk(dt, home):
    dt("submit", "done", "--", "true")
    dt("wait", "done")
    dt("submit", "gone", "--", "true")
    dt("wait", "gone")
    dt("delete", "gone")
    assert [j["name"] for j in dt.json("list", "--status", "succeeded")] == ["done"]
    assert [j["name"] for j in dt.json("list", "--status-equals", "Completed")] == ["done"]
    assert [j["name"] for j in dt.json("list", "--status", "stopped")] == ["gone"]
    assert dt("list", "--status", "InProgress").stdout == "No jobs in project 'default' match --status InProgress\n"
    client = dtrain.Client(home=home)
    assert [j.name for j in client.list(status="COMPLETED")] == ["done"]
    assert [j.name for j in client.page(status="succeeded").jobs] == ["done"]
    assert client.page_notebooks(status="inprogress").total == 0
    assert list(client.list_notebooks(status="Stopped")) == []  # a job of type Notebook alone, as page_notebooks


def _in_progress_and_done(dt) -> None:
    """`hold` Running on both injected GPUs, `queued` Pending behind it (the GPU it needs is held), `done` Succeeded."""
    dt("submit", "done", "--", "true")
    dt.wait_for("done", {"Succeeded"})
    dt("submit", "hold", "--gpu", "2", "--", "sleep", "600")
    dt.wait_for("hold", {"Running"})
    dt("submit", "queued", "--gpu", "1", "--", "true")
    assert dt.status("queued") == "Pending"


def test_inprogress_lists_the_pending_and_the_running_jobs_at_the_cli_and_the_sdk(dt_gpus, home, monkeypatch):
    """SageMaker's InProgress covers a job still Starting or Downloading (dtrain's Pending): it listed the
    Running jobs alone, so `--status InProgress` hid a queued job."""
    _in_progress_and_done(dt_gpus)
    for word in ("InProgress", "inprogress"):
        assert sorted(j["name"] for j in dt_gpus.json("list", "--status", word)) == ["hold", "queued"]
        assert sorted(j["name"] for j in dt_gpus.json("list", "-A", "--status-equals", word)) == ["hold", "queued"]
    assert [j["name"] for j in dt_gpus.json("list", "--status", "Running")] == ["hold"]  # the other words as they were
    assert [j["name"] for j in dt_gpus.json("list", "--status", "Stopping")] == ["hold"]
    assert [j["name"] for j in dt_gpus.json("list", "--status", "pending")] == ["queued"]
    monkeypatch.setenv("DTRAIN_GPUS", "2")
    client = dtrain.Client(home=home)
    assert [j.name for j in client.list(status="InProgress")] == ["hold", "queued"]
    for kw in ({}, {"project": "default"}, {"selector": "!nothing"}):
        page = client.page(status="INPROGRESS", **kw)
        assert page.total == 2 and [j.name for j in page.jobs] == ["queued", "hold"], kw
    page = client.page(status="InProgress", limit=1, offset=1)
    assert page.total == 2 and [j.name for j in page.jobs] == ["hold"]
    assert client.page(status="Running").total == 1
    assert client.page_notebooks(status="InProgress").total == 0  # jobs, no notebooks


def test_inprogress_lists_the_pending_and_the_running_jobs_over_http(dt_gpus, home, monkeypatch):
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    import httpx

    from dtrain.server.app import create_app
    from server_util import ThreadServer

    _in_progress_and_done(dt_gpus)
    monkeypatch.setenv("DTRAIN_GPUS", "2")
    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            answer = http.get("/api/v1/jobs?status=InProgress")
            assert answer.status_code == 200 and [j["name"] for j in answer.json()] == ["hold", "queued"], answer.text
            answer = http.get("/api/v1/jobs?status=inprogress&limit=5")
            assert [j["name"] for j in answer.json()] == ["queued", "hold"], answer.text
            assert [j["name"] for j in http.get("/api/v1/jobs?status=Running").json()] == ["hold"]
    finally:
        server.stop()


def test_the_http_status_filter_takes_the_same_words(home):
    """GET /jobs?status=running was pydantic's 422 where the SDK's status= took it."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    import httpx

    from dtrain.server.app import create_app
    from server_util import ThreadServer

    client = dtrain.Client(home=home)
    client.submit(dtrain.JobSpec(name="done", command=("true",)))
    client.wait("done", timeout=120)
    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    try:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            for query in ("status=succeeded", "status=Completed", "status=COMPLETED&limit=5"):
                answer = http.get(f"/api/v1/jobs?{query}")
                assert answer.status_code == 200 and [j["name"] for j in answer.json()] == ["done"], answer.text
            assert http.get("/api/v1/jobs?status=inprogress").json() == []
            assert http.get("/api/v1/notebooks?status=stopped").status_code == 200
            bad = http.get("/api/v1/jobs?status=done")
            assert bad.status_code == 422 and bad.json()["error"].startswith("invalid status 'done': use one of "
                                                                             "Pending, Running"), bad.text
    finally:
        server.stop()


# ---- kubectl describe pytorchjob/X ------------------------------------------------------------------
@pytest.mark.parametrize("words", [["describe", "pytorchjob/hello"], ["describe", "job", "mpijob/hello"],
                                   ["logs", "job/hello"], ["logs", "job", "pytorchjob/hello"],
                                   ["wait", "pytorchjobs/hello"], ["artifacts", "mpijob/hello", "--to", "out"]])
def test_kubectls_kind_slash_name_is_the_job(dt, tmp_path, words):
    """`describe pytorchjob/hello` was "invalid job name 'pytorchjob/hello'"."""
    dt("submit", "hello", "--", "sh", "-c", 'mkdir -p "$DTRAIN_MODEL_DIR"; echo w > "$DTRAIN_MODEL_DIR/w"')
    dt("wait", "hello")
    words = [str(tmp_path / w) if w == "out" else w for w in words]
    assert dt(*words).returncode == 0


def test_delete_takes_kind_slash_names_and_a_word_of_another_kind_is_sent_to_its_command(dt):
    dt("submit", "a", "--", "true")
    dt("submit", "b", "--", "true")
    dt("delete", "pytorchjob/a", "job/b")
    assert {j["name"]: j["status"] for j in dt.json("list", "--status", "deleted")} == {"a": "Deleted", "b": "Deleted"}
    assert_usage_error(dt("describe", "volume/a", check=False),  # test_audit20_runai: it was "invalid job name"
                       "'dtrain describe' is for jobs: use 'dtrain volume describe a'")


# ---- kubectl get -w, aws sagemaker describe-training-job --training-job-name, kubectl delete --force ---
@pytest.mark.parametrize("words, needle", [
    (["list", "-w"], "-w is kubectl's: 'dtrain list' prints once: follow a job with 'dtrain logs NAME -f', or wait "
                     "for its end with 'dtrain wait NAME' (see 'dtrain list --help')"),
    (["list", "--watch"], "--watch is kubectl's: 'dtrain list' prints once"),
    (["describe", "--training-job-name", "x"], "--training-job-name is the AWS CLI's: name the job after the verb: "
                                               "dtrain describe NAME"),
    (["describe", "--training-job-name=x"], "--training-job-name is the AWS CLI's: name the job after the verb"),
    (["delete", "x", "--force"], "--force is kubectl's: the one form is 'dtrain delete NAME': its processes get "
                                 "SIGTERM"),
    (["delete", "--force", "x", "--grace-period=0"], "--force is kubectl's: the one form is 'dtrain delete NAME'"),
    (["delete", "x", "--grace-period", "0"], "--grace-period is kubectl's: the one form is 'dtrain delete NAME'"),
])
def test_another_tools_flag_on_list_describe_or_delete_names_dtrains_form(dt, words, needle):
    dt("submit", "x", "--", "true")
    assert_usage_error(dt(*words, check=False), needle)
    assert [j["name"] for j in dt.json("list")] == ["x"]  # nothing deleted


# ---- completion: describe pytorchjob <TAB> ----------------------------------------------------------
def test_completion_offers_job_names_after_a_kubeflow_kind(tmp_path):
    """`describe pytorchjob <TAB>` offered nothing: the kind was taken for the job's name already given."""
    from test_cli_completion import SHIM, complete

    path = tmp_path / "dtrain.bash"
    path.write_text(script(build_parser(), "bash"))
    home, bin_dir = tmp_path / "home", tmp_path / "bin"
    home.mkdir()
    bin_dir.mkdir()
    (bin_dir / "dtrain").write_text(SHIM)
    (bin_dir / "dtrain").chmod(0o755)
    (bin_dir / "dtrain.answer").write_text('[\n  {\n    "name": "train",\n    "status": "Running"\n  }\n]\n')
    for kind in ("job", "pytorchjob", "mpijob", "notebook"):
        assert complete(path, f"dtrain describe {kind} t", home, bin_dir=bin_dir) == ["train"], kind
    assert complete(path, "dtrain describe train ", home, bin_dir=bin_dir) == []  # one name is enough


@pytest.mark.parametrize("word", ["running", "SUCCEEDED", "InProgress", "inPROGRESS", "Stopped", "Done", "runing", "",
                                  "?\U000f7899", "Running ", "\u212aompleted"])
def test_the_schemas_status_pattern_takes_what_check_status_takes(word):
    """The OpenAPI schema says which words ?status= takes, so a schema-valid request is never refused
    (schemathesis sent '?\\U000f7899', which the schema allowed and check_status refused)."""
    import re

    from dtrain.server.wire.common import STATUS_FILTER_PATTERN
    try:
        check_status(word)
        taken = True
    except SpecError:
        taken = False
    assert bool(re.fullmatch(STATUS_FILTER_PATTERN, word)) is taken, word

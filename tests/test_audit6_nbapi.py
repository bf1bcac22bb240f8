"""Notebooks through every door: `dtrain notebook start|list|open`, the SDK and the HTTP API make the
same notebook and say what is true of it (queued, not started, while its GPUs are busy)."""

from __future__ import annotations

import pytest

from conftest import Dtrain
from server_util import ServerProcess, wait_until

pytest.importorskip("jupyter_server", reason="notebooks need jupyter-server: pip install 'dtrain[notebook]'")

NB, JOB = "/api/v1/notebooks", "/api/v1/jobs"


def test_a_notebook_waiting_for_gpus_is_said_to_be_queued_not_started(dt_gpus: Dtrain):
    """`dtrain notebook NAME --gpu 1` printed 'started' while the notebook waited for a GPU."""
    dt = dt_gpus
    dt("submit", "hold", "--gpu", "2", "--", "sleep", "120")
    dt.wait_for("hold", {"Running"})
    said = dt("notebook", "nbq", "--gpu", "1").stdout
    assert dt.status("nbq") == "Pending"
    assert "'nbq' started" not in said and "'nbq' is queued, not started yet" in said, said
    assert "needs 1 GPU, 0 free" in said, said  # why, as `dtrain describe job` says it
    assert "dtrain describe job nbq" in said and "dtrain notebook open nbq" in said, said
    said = dt("notebook", "free").stdout  # no GPU asked: placed at once
    assert dt.status("free") == "Running" and "'free' started" in said, said


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("nbapi-home")
    srv = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path_factory.mktemp("nbapi-work"))
    srv.dtrain()("volume", "create", "code", "--size", "1Mi")
    yield srv
    srv.stop()


def _same_but_name(a: dict, b: dict) -> bool:
    return {**a, "name": "-"} == {**b, "name": "-"}


@pytest.mark.slow  # two real JupyterLabs started: about 20 s
def test_the_api_starts_lists_and_opens_a_notebook_as_the_cli_does(server):
    dt, http = server.dtrain(), server.http
    dt("notebook", "by-cli", "--pvc", "code:/home/jovyan/work", "--cpu", "1", "--idle-timeout", "1h")
    made = http.post(NB, json={"name": "by-api", "volumes": ["code:/home/jovyan/work"], "cpu": 1,
                               "idle_timeout": 3600})
    assert made.status_code == 201, made.text
    assert made.json()["kind"] == "Notebook"
    assert _same_but_name(made.json()["spec"], dt.json("describe", "job", "by-cli")["spec"])  # one spec, one default
    assert dt("describe", "job", "by-api").stdout.count("cpu: 1\n") == 1  # 1, as the CLI stores --cpu 1, not 1.0
    listed = http.get(NB)
    assert listed.status_code == 200, listed.text
    assert [(b["name"], b["spec"]) for b in listed.json()] == [(b["name"], b["spec"]) for b in dt.json(
        "notebook", "list", "-A")]
    dt.wait_for("by-api", {"Running"})
    url = wait_until(lambda: (r := http.get(f"{NB}/by-api/url")).status_code == 200 and r, timeout=90,
                     what="the notebook serving")
    assert url.json() == {"name": "by-api", "url": dt("notebook", "open", "by-api").stdout.strip()}
    assert "token=" in url.json()["url"] and url.headers["cache-control"] == "no-store"
    dt("delete", "by-api")
    assert [b["name"] for b in http.get(NB).json()] == ["by-cli"]  # a Deleted one only with status=Deleted
    assert [b["name"] for b in http.get(NB, params={"status": "Deleted"}).json()] == ["by-api"]
    gone = http.get(f"{NB}/by-api/url")
    assert gone.status_code == 409 and gone.json()["error"] == dt("notebook", "open", "by-api", check=False).stderr \
        .strip().removeprefix("dtrain: error: ")
    dt("delete", "by-cli")


def test_the_api_says_why_a_notebook_waits_as_its_record_does(server):
    dt, http = server.dtrain(), server.http
    dt("submit", "hold", "--gpu", "2", "--", "sleep", "120")
    try:
        dt.wait_for("hold", {"Running"})
        made = http.post(NB, json={"name": "waits", "gpu": 1})
        assert made.status_code == 201 and made.json()["status"] == "Pending", made.text
        wait_until(lambda: "0 free" in http.get(f"{JOB}/waits").json()["message"], what="the scheduler's reason")
        refused = http.get(f"{NB}/waits/url")
        assert refused.status_code == 409 and "is Pending (waiting: needs 1 GPU, 0 free" in refused.json()["error"]
    finally:
        dt("delete", "waits", check=False)
        dt("delete", "hold", check=False)


def test_a_read_only_server_hands_out_no_notebook_token(server, tmp_path):
    """GET is all a --read-only server takes, and a notebook's token runs code as its user."""
    read_only = ServerProcess(server.home, args=("--read-only",), env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    try:
        refused = read_only.http.get(f"{NB}/anything/url")
        assert refused.status_code == 403 and "read-only" in refused.json()["error"]
        assert "\n" not in refused.json()["error"]
        assert read_only.http.get(NB).status_code == 200  # the list is a read
    finally:
        read_only.http.close()
        read_only.proc.terminate()
        read_only.proc.wait(timeout=20)


def test_the_sdk_lists_notebooks_as_notebook_list_does(dt: Dtrain):
    from dtrain import Client

    client = Client(home=dt.home)
    client.notebook("kept")
    client.notebook("gone")
    client.delete("gone")
    assert [b.name for b in client.list_notebooks(show_deleted=False)] == ["kept"]
    assert [b["name"] for b in dt.json("notebook", "list")] == ["kept"]
    assert {b.name for b in client.list_notebooks()} == {"kept", "gone"}  # as before: every one by default


def test_the_schema_types_the_notebook_routes(server):
    paths = server.http.get("/api/v1/openapi.json").json()
    body = paths["paths"]["/api/v1/notebooks"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    model = paths["components"]["schemas"][body["$ref"].rsplit("/", 1)[1]]
    assert model["additionalProperties"] is False and model["required"] == ["name"]
    assert {"name", "volumes", "gpu", "cpu", "memory", "image", "idle_timeout", "node_selector", "tolerations",
            "project", "backend"} == \
        set(model["properties"])
    assert "403" in paths["paths"]["/api/v1/notebooks/{name}/url"]["get"]["responses"]


@pytest.mark.slow
def test_a_whole_cpu_count_is_stored_as_the_cli_stores_it_through_every_door(server, tmp_path):
    """JSON's `"cpu": 2` reached the spec as 2.0 (the body's number type), so a job posted to the API
    read `cpu: 2.0` in describe where `--cpu 2` reads `cpu: 2`; the SDK's float did the same."""
    import dtrain
    from dtrain.spec import JobSpec

    dt, http = server.dtrain(), server.http
    dt("submit", "by-cli", "--cpu", "2", "--", "true")
    made = http.post("/api/v1/jobs", json={"name": "by-api", "command": ["true"], "cpu": 2})
    assert made.status_code == 201, made.text
    sdk = dtrain.Client(home=server.home).submit(JobSpec(name="by-sdk", command=("true",), cpu=2.0))
    for name in ("by-cli", "by-api", "by-sdk"):
        assert "cpu: 2\n" in dt("describe", "job", name).stdout
        assert dt.json("describe", "job", name)["spec"]["cpu"] == 2
        assert "cpu: 2.0" not in dt("describe", "job", name).stdout
    assert sdk.spec.cpu == 2 and isinstance(sdk.spec.cpu, int)
    assert http.post("/api/v1/jobs", json={"name": "half", "command": ["true"], "cpu": 0.5}).json()["spec"]["cpu"] == 0.5
    for name in ("by-cli", "by-api", "by-sdk", "half"):
        dt("delete", name, check=False)

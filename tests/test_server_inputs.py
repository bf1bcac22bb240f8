"""A job submitted over HTTP is read as `dtrain submit` reads it: no value converted from another
type, the same bounds as the spec, SageMaker options that send the job to SageMaker, a mistyped
command that is the user's mistake (422, not a 503 "try later"), a mistyped project that is a 404
rather than an empty list. Nothing is stored for a refused request."""

from __future__ import annotations

import re

import pytest

from server_util import local_api

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
from dtrain import Client, JobSpec  # noqa: E402
from dtrain.errors import SpecError  # noqa: E402
from dtrain.names import check_name  # noqa: E402


@pytest.fixture
def http(home):
    with local_api(home) as client:
        yield client


def refused(http, body: dict, status: int = 422) -> str:
    r = http.post("/api/v1/jobs", json={"name": "j", "command": ["true"], **body})
    assert r.status_code == status, r.text
    assert http.get("/api/v1/jobs", params={"status": "Deleted"}).json() == []
    assert http.get("/api/v1/jobs").json() == []  # nothing stored
    return r.json()["error"]


@pytest.mark.parametrize("field, value, says", [
    ("large_shm", "yes", "large_shm: Input should be a valid boolean"),
    ("large_shm", 1, "large_shm: Input should be a valid boolean"),
    ("notebook", "off", "notebook: Input should be a valid boolean"),
    # a number field's refusal is the spec's own line, as `dtrain submit` gives it
    ("processes", True, "invalid --processes True: use a whole number from 1 to 4096"),
    ("processes", "2", "invalid --processes '2': use a whole number from 1 to 4096"),
    ("max_restarts", False, "invalid --max-restarts False: use a whole number from 0 to 100"),
    ("gpu", 0.5, "--gpu 0.5 is a fraction of a GPU"),
    ("cpu", "2", "invalid --cpu '2': use a number of CPU threads"),
    ("gpu", 17, "invalid --gpu 17: use a whole number from 0 to 16"),
    ("max_restarts", 101, "invalid --max-restarts 101: use a whole number from 0 to 100"),
])
def test_a_value_of_another_type_or_past_the_spec_bounds_is_refused_not_converted(http, field, value, says):
    assert says in refused(http, {field: value})


@pytest.mark.parametrize("field, value, says", [
    ("command", "python train.py --epochs 2",
     """invalid command 'python train.py --epochs 2': must be a list of strings, not one string: """
     """send ["python", "train.py", "--epochs", "2"]"""),
    ("volumes", "data:/mnt", """invalid volumes 'data:/mnt': must be a list of strings, not one string: """
     """send ["data:/mnt"]"""),
])
def test_one_string_for_a_list_says_which_list_to_send(http, field, value, says):
    """A command written as one shell line ("command": "python train.py") read "command: Input should be a
    valid list", where a job file's `command: python train.py` says it must be a list of strings."""
    assert refused(http, {field: value}) == says


def test_the_schema_states_the_spec_bounds(http):
    fields = http.get("/api/v1/openapi.json").json()["components"]["schemas"]["SpecIn"]["properties"]
    assert (fields["gpu"]["maximum"], fields["max_restarts"]["maximum"]) == (16, 100)


def test_json_numbers_are_read_as_json_schema_reads_them(http, tmp_path):
    """One kind of number: a whole number of CPUs is a number, 2.0 processes are 2 (JSON Schema's
    "integer"), which the job's spec then holds as the count 2."""
    r = http.post("/api/v1/jobs", json={"name": "two", "command": ["true"], "cpu": 2, "processes": 2.0,
                                        "launcher": "torchrun", "max_restarts": 1.0, "working_dir": str(tmp_path)})
    assert r.status_code == 201, r.text
    spec = r.json()["spec"]
    assert (spec["cpu"], spec["processes"], spec["max_restarts"]) == (2, 2, 1)
    assert type(spec["processes"]) is int and type(spec["max_restarts"]) is int


def test_sagemaker_options_send_the_job_to_sagemaker_or_are_refused_with_another_backend(http):
    # no backend named: SageMaker's, which is not configured here (what `dtrain submit --spot` says, in JSON)
    says = refused(http, {"sagemaker": {"instance_type": "ml.p3.2xlarge"}})
    assert says.startswith('the SageMaker options (instance_type) need "backend": "sagemaker" (this project\'s '
                           'backend is local), and SageMaker is not configured')
    says = refused(http, {"backend": "local", "sagemaker": {"spot": True, "instance_type": "ml.m5.xlarge"}})
    assert says == ("SageMaker options (instance_type, spot) need backend sagemaker, not 'local': use --backend "
                    "sagemaker (backend: sagemaker), or leave them out")
    with pytest.raises(SpecError, match="need backend sagemaker, not 'local'"):  # the SDK's spec alike
        JobSpec(name="j", command=("true",), sagemaker={"spot": True})


def test_a_mistyped_command_is_the_users_mistake(http):
    r = http.post("/api/v1/jobs", json={"name": "j", "command": ["nosuchcmd-" + "x" * 5000]})
    assert r.status_code == 422 and r.json()["kind"] == "SpecError", r.text
    assert "not found (looked in PATH); check the spelling after '--'" in r.json()["error"]
    assert len(r.json()["error"]) < 300  # the word shortened, not repeated whole


def test_a_mistyped_project_is_not_found_rather_than_without_jobs(http):
    for query in ({"project": "nope"}, {"project": "nope", "limit": 10}):
        r = http.get("/api/v1/jobs", params=query)
        assert r.status_code == 404 and r.json()["error"].startswith("no project named 'nope' (projects: "), r.text
    assert http.post("/api/v1/projects", json={"name": "team"}).status_code == 201
    r = http.get("/api/v1/jobs", params={"project": "team"})
    assert r.status_code == 200 and r.json() == []


def test_a_deleted_job_is_not_deleted_twice_and_purge_forgets_it(http, tmp_path):
    """As `dtrain delete`: a second DELETE is a 404 saying so (kubectl's not found), and ?purge=true
    forgets the job (`dtrain delete --purge`)."""
    r = http.post("/api/v1/jobs", json={"name": "d1", "command": ["sleep", "30"], "working_dir": str(tmp_path)})
    assert r.status_code == 201, r.text
    assert http.delete("/api/v1/jobs/d1").json()["status"] == "Deleted"
    again = http.delete("/api/v1/jobs/d1")
    assert again.status_code == 404 and again.json()["error"] == (
        "job 'd1' was already deleted; nothing was deleted (DELETE /api/v1/jobs/d1?purge=true also forgets it)")
    assert http.get("/api/v1/jobs/d1").json()["status"] == "Deleted"
    purged = http.delete("/api/v1/jobs/d1", params={"purge": "true"})
    assert purged.status_code == 200 and purged.json()["name"] == "d1"
    assert http.get("/api/v1/jobs/d1").status_code == 404
    assert http.get("/api/v1/jobs", params={"status": "Deleted"}).json() == []
    assert http.delete("/api/v1/jobs/d1", params={"purge": "yes please"}).status_code == 422


def test_a_command_and_environment_too_big_to_start_are_refused_at_submit(http):
    """Each value under its own bound (64 KiB), together past what the system starts a program
    with: refused at submit, not a job that fails with "Argument list too long"."""
    env = {f"K{i}": "v" * 60_000 for i in range(40)}
    says = refused(http, {"env": env})
    assert says.startswith("the command and environment of job 'j' take 2400195 bytes, more than the 1 MiB")
    assert "put large values in a file, on a volume" in says
    with pytest.raises(SpecError, match="more than the 1 MiB"):
        JobSpec(name="j", command=("echo", *["w" * 60_000] * 18))
    assert JobSpec(name="j", command=("echo", *["w" * 60_000] * 17)).command[1] == "w" * 60_000
    stored = {"name": "j", "command": ["true"], "env": env}
    assert JobSpec.from_stored(stored).env == env  # one stored before the bound is still read


def test_a_body_past_the_limit_is_refused_before_it_is_read_whole(http):
    big = b'{"name": "big", "command": ["' + b"x" * (9 * 2**20) + b'"]}'
    r = http.post("/api/v1/jobs", content=big, headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json() == {
        "error": f"the request body is {len(big)} bytes: the API takes at most 8 MiB (a job's command and "
                 f"environment at most 1 MiB; put large data in a file on a volume)", "kind": "SpecError"}

    def chunks():  # no Content-Length: counted as it arrives
        yield b'{"name": "big", "command": ["'
        for _ in range(20):
            yield b"x" * 2**19
        yield b'"]}'

    r = http.post("/api/v1/jobs", content=chunks(), headers={"content-type": "application/json"})
    assert r.status_code == 413 and r.json()["error"].startswith("the request body is more than 8 MiB")
    assert http.get("/api/v1/jobs").json() == []


def test_refusals_of_odd_bodies_and_paths_name_the_problem(http):
    def post(path: str, content: bytes):
        return http.post(path, content=content, headers={"content-type": "application/json"})

    r = post("/api/v1/jobs", b'{"name": "a", "command": ["true"], "processes": ' + b"9" * 5000 + b"}")
    assert r.status_code == 422 and "a number of more than 4300 digits" in r.json()["error"], r.text
    r = post("/api/v1/jobs", b'{"name": "a", "command": ["true"], "cpu": NaN}')
    assert r.status_code == 422 and r.json()["error"] == (  # what `dtrain submit --cpu NaN` says: as typed
        "invalid --cpu NaN: use a number of CPU threads from 0.01 to 1024, e.g. --cpu 2 or --cpu 0.5")
    r = http.get("/api/v1/nope")
    assert r.status_code == 404 and r.json()["error"] == (
        "no such path /api/v1/nope: the API is under /api/v1/ (its paths: /api/v1/openapi.json)")
    assert http.post("/api/v1/volumes", json={"name": "v"}).status_code == 201
    assert http.post("/api/v1/snapshots", json={"volume": "v", "name": "s"}).status_code == 201
    for body in ({"in_place": False}, {}, {"to": "w", "in_place": True}):
        says = ('invalid request: send {"to": "NEW_VOLUME"} to restore into a new volume, or {"in_place": true} '
                "to roll the snapshot's volume back (one of the two)")
        r = http.post("/api/v1/snapshots/s/restore", json=body)
        assert r.status_code == 422 and r.json()["error"] == says, (body, r.text)
    assert [v["name"] for v in http.get("/api/v1/volumes").json()] == ["v"]
    assert http.post("/api/v1/snapshots/s/restore", json={"to": "w"}).json()["origin_snapshot"] == "s"


def test_an_unknown_field_whose_name_holds_a_newline_is_still_one_line(http):
    """The fuzz test found a refusal of two lines: the made-up field's name was printed as sent."""
    r = http.patch("/api/v1/volumes/x", json={"storage_class": "fast", "a\nb": 1})
    assert r.status_code == 422, r.text
    error = r.json()["error"]
    assert "\n" not in error and "'a\\nb': Extra inputs are not permitted" in error, error


def test_an_unknown_field_near_a_known_one_names_it(http):
    """It said only pydantic's 'Extra inputs are not permitted', where a typo or a plural was plain."""
    r = http.post("/api/v1/jobs", json={"nme": "j", "command": ["true"]})
    assert r.status_code == 422 and r.json()["error"] == (
        "invalid request: name: Field required; nme: Extra inputs are not permitted (did you mean 'name'?)"), r.text
    r = http.post("/api/v1/projects", json={"name": "team-a", "gpus": 2})
    assert r.status_code == 422 and r.json()["error"] == (
        "invalid request: gpus: Extra inputs are not permitted (did you mean 'gpu_quota'?)"), r.text
    r = http.post("/api/v1/projects", json={"name": "team-a", "colour": "red"})
    assert r.status_code == 422 and r.json()["error"] == "invalid request: colour: Extra inputs are not permitted"
    assert http.get("/api/v1/jobs").json() == [] and "team-a" not in [p["name"] for p in http.get("/api/v1/projects").json()]


def test_a_query_parameter_the_route_does_not_take_is_refused_before_anything_happens(http, home):
    """FastAPI ignores a query parameter it does not know: `DELETE /jobs/j?projet=team-a` deleted job j of the
    default project, and `?stauts=Failed` listed every job as if filtered."""
    Client(home=home).submit(JobSpec(name="j", command=("sleep", "60")))
    r = http.delete("/api/v1/jobs/j", params={"projet": "team-a"})
    assert r.status_code == 422
    assert r.json()["error"] == ("unknown query parameter 'projet' on DELETE /api/v1/jobs/j: it takes backend, "
                                 "project, purge (see /api/v1/openapi.json)")
    assert http.get("/api/v1/jobs/j").json()["status"] in ("Pending", "Running")  # not deleted
    said = http.get("/api/v1/jobs", params={"stauts": "Failed"}).json()["error"]
    assert said.startswith("unknown query parameter 'stauts' on GET /api/v1/jobs: it takes label_selector, limit,")
    assert http.post("/api/v1/verify", params={"all": "1"}).json()["error"].endswith("it takes project "
                                                                                     "(see /api/v1/openapi.json)")
    assert http.get("/api/v1/jobs", params={"status": "Running", "project": ""}).status_code == 200  # the form's "any"
    assert http.delete("/api/v1/jobs/j").status_code == 200


def test_a_body_sent_to_a_route_that_reads_none_is_refused_before_anything_happens(http, home):
    """A body where the route reads none was ignored: `POST /jobs/j/suspend {"project": "team-a"}` suspended job j
    of the default project. An empty body and `{}` (what HTTP libraries send for "nothing") still pass."""
    Client(home=home).submit(JobSpec(name="j", command=("sleep", "60")))
    r = http.post("/api/v1/jobs/j/suspend", json={"project": "team-a"})
    assert r.status_code == 422
    assert r.json()["error"] == ("POST /api/v1/jobs/j/suspend takes no body: leave it out; its parameters go in the "
                                 "query (?backend=, ?project=)")
    assert http.get("/api/v1/jobs/j").json()["status"] in ("Pending", "Running")  # not suspended
    assert http.request("DELETE", "/api/v1/jobs/j", json={"purge": True}).status_code == 422
    assert http.post("/api/v1/jobs/j/suspend", json={}).status_code == 200
    big = http.post("/api/v1/jobs/j/resume", content=iter([b"x" * 2**20] * 9))  # chunked, past the limit
    assert big.status_code == 413
    assert http.post("/api/v1/jobs/j/resume").status_code == 200
    assert http.delete("/api/v1/jobs/j").status_code == 200


def test_a_key_given_twice_in_a_body_is_refused_at_any_depth(http):
    """Python's json keeps the last of two equal keys: `{"name": "x", "name": "y"}` created job y."""
    def post(path: str, content: bytes):
        return http.request("PATCH" if path.startswith("/api/v1/volumes/") else "POST", path, content=content,
                            headers={"content-type": "application/json"})

    for path, body, key in [
            ("/api/v1/jobs", b'{"name": "x", "name": "y", "command": ["true"]}', "name"),
            ("/api/v1/jobs", b'{"name": "x", "command": ["true"], "env": {"A": "1", "A": "2"}}', "A"),
            ("/api/v1/jobs", b'{"name": "x", "command": ["true"], "tolerations": [{"key": "a", "key": "b"}]}', "key"),
            ("/api/v1/notebooks", b'{"name": "n", "name": "m"}', "name"),
            ("/api/v1/volumes", b'{"name": "v", "size": "1Gi", "name": "w"}', "name"),
            ("/api/v1/volumes/v", b'{"storage_class": "a", "storage_class": "b"}', "storage_class"),
            ("/api/v1/projects", b'{"name": "p", "gpu_quota": 1, "gpu_quota": 2}', "gpu_quota")]:
        r = post(path, body)
        assert r.status_code == 422, (path, r.text)
        assert r.json()["error"] == (f"invalid request: the body's JSON gives the key '{key}' twice in one object: "
                                     f"send each key once"), r.text
    assert http.get("/api/v1/jobs", params={"status": "Deleted"}).json() == http.get("/api/v1/jobs").json() == []
    assert http.get("/api/v1/volumes").json() == [] and http.get("/api/v1/notebooks").json() == []
    assert "p" not in [p["name"] for p in http.get("/api/v1/projects").json()]
    ok = post("/api/v1/jobs", b'{"name": "x", "command": ["true"], "env": {"A": "1", "B": "1"}, "labels": {"A": "1"}}')
    assert ok.status_code == 201, ok.text  # one key in two objects is no duplicate


@pytest.mark.parametrize("path, what", [("/api/v1/jobs/a%2Fb", "job"), ("/api/v1/jobs/a%2F", "job"),
                                        ("/api/v1/jobs/a%2fb/logs", "job"), ("/api/v1/volumes/a%2Fb", "volume"),
                                        ("/api/v1/snapshots/a%2Fb/wait", "snapshot"),
                                        ("/api/v1/notebooks/a%2Fb/url", "notebook")])
def test_a_name_holding_an_encoded_slash_is_an_invalid_name_not_another_path(http, path, what):
    """`GET /jobs/a%2Fb` answered 404 "no such path /api/v1/jobs/a/b", and `/jobs/a%2F` a 307 to job a: the
    name rule's line now, as for any other invalid name (`GET /jobs/A_` is a 422 of check_name's)."""
    name = "a/" if path.endswith("%2F") else "a/b"
    with pytest.raises(SpecError) as rule:
        check_name(name, what)
    r = http.get(path, follow_redirects=False)
    assert (r.status_code, r.json()["error"]) == (422, str(rule.value)), r.text
    other = re.sub("a%2[fF]b?", "A_", path)  # the same path with a name the pattern refuses
    assert http.get(other).json()["error"] == str(rule.value).replace(repr(name), "'A_'")


def test_deleting_a_name_ending_in_an_encoded_slash_deletes_nothing(http, home):
    Client(home=home).submit(JobSpec(name="a", command=("sleep", "60")))
    r = http.delete("/api/v1/jobs/a%2F", follow_redirects=True)
    assert r.status_code == 422 and r.json()["error"].startswith("invalid job name 'a/'"), r.text
    assert http.get("/api/v1/jobs/a").json()["status"] in ("Pending", "Running")  # not deleted
    assert http.delete("/api/v1/jobs/a").status_code == 200

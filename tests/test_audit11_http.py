"""The HTTP API (audit 11): a JSON body's numbers keep their text, as a CLI flag's do. Python's json
read {"cpu": 1e9} as 1000000000.0, 1e400 as inf and -0 as 0, and a refusal quoted those where
`dtrain submit --cpu 1e9` quotes "1e9"; a number JSON does not write (017, +5, .5) got "Expecting ','
delimiter"; a number where a string is due ("size": 5e9) "Input should be a valid string"; a query's
?limit=-0 was named 0 and ?tail=1e400 '1e400' (a string). Answers still carry plain numbers."""

from __future__ import annotations

import pytest

import dtrain

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")

JOB = '"name": "x", "command": ["true"]'


@pytest.fixture
def http(home):
    """An API server on that home (a Client per worker thread), and an HTTP client to it."""
    import httpx

    from dtrain.server.app import create_app
    from server_util import ThreadServer

    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    with httpx.Client(base_url=server.url + "/api/v1", timeout=60) as client:
        yield client
    server.stop()


def post(http, path: str, raw: str):
    """POST `raw`, a body written by hand: json.dumps would write 1e9 as 1000000000.0."""
    return http.post(path, content=raw, headers={"content-type": "application/json"})


def refusal(answer) -> str:
    assert answer.status_code == 422, answer.text
    return answer.json()["error"]


@pytest.mark.parametrize("cli, method, path, raw", [
    (["submit", "x", "--cpu", "1e9", "--", "true"], "POST", "/jobs", f'{{{JOB}, "cpu": 1e9}}'),
    (["submit", "x", "--cpu", "1e400", "--", "true"], "POST", "/jobs", f'{{{JOB}, "cpu": 1e400}}'),
    (["submit", "x", "--cpu", "-0", "--", "true"], "POST", "/jobs", f'{{{JOB}, "cpu": -0}}'),
    (["submit", "x", "--gpu", "1E3", "--", "true"], "POST", "/jobs", f'{{{JOB}, "gpu": 1E3}}'),
    (["submit-dist", "x", "--launcher", "torchrun", "--processes", "1e9", "--", "true"], "POST", "/jobs",
     f'{{{JOB}, "processes": 1e9, "launcher": "torchrun"}}'),
    (["submit", "x", "--max-restarts", "1e400", "--", "true"], "POST", "/jobs", f'{{{JOB}, "max_restarts": 1e400}}'),
    (["notebook", "start", "nb", "--cpu", "1e9"], "POST", "/notebooks", '{"name": "nb", "cpu": 1e9}'),
    (["project", "create", "p", "--gpu-quota", "1e9"], "POST", "/projects", '{"name": "p", "gpu_quota": 1e9}'),
    (["logs", "x", "--limit-bytes", "1e400"], "GET", "/jobs/x/logs?limit_bytes=1e400", None),
])
def test_a_number_is_refused_as_typed_in_the_clis_words(http, dt, cli, method, path, raw):
    """The same number gets the same line from the CLI and the API: named as typed, with its range."""
    typed = dt(*cli, check=False)
    assert typed.returncode != 0
    said = typed.stderr.strip().splitlines()[-1].removeprefix("dtrain: error: ")
    answer = http.request(method, path, content=raw, headers={"content-type": "application/json"})
    assert refusal(answer) == said
    assert cli[cli.index("--") - 1 if "--" in cli else -1] in said  # '1e9', not 1000000000 or inf
    assert http.get("/jobs").json() == [] and http.get("/notebooks").json() == []  # nothing made


@pytest.mark.parametrize("raw, said", [
    (f'{{{JOB}, "gpu": 10000000000000000000000}}', "invalid --gpu 10000000000000000000000: use a whole number "
                                                  "from 0 to 16"),
    (f'{{{JOB}, "cpu": NaN}}', "invalid --cpu NaN: use a number of CPU threads from 0.01 to 1024"),
    (f'{{{JOB}, "cpu": -Infinity}}', "invalid --cpu -Infinity: use a number of CPU threads from 0.01 to 1024"),
    (f'{{{JOB}, "cpu": 1e-9}}', "invalid --cpu 1e-9: use a number of CPU threads from 0.01 to 1024"),
    (f'{{{JOB}, "sagemaker": {{"instance_count": 1e9}}}}', "invalid --instance-count 1e9: use a whole number from "
                                                           "1 to 1000"),
])
def test_a_job_body_number_is_named_as_typed(http, raw, said):
    assert refusal(post(http, "/jobs", raw)).startswith(said)


def test_a_notebooks_idle_timeout_is_named_as_typed(http):
    said = refusal(post(http, "/notebooks", '{"name": "nb", "idle_timeout": 1e9}'))
    assert said.startswith("invalid --idle-timeout 1e9 (seconds): give 1m to 30d, i.e. a whole number of seconds "
                           "from 60 to 2592000")


@pytest.mark.parametrize("typed, fix", [("017", "17"), ("-017", "-17"), ("+5", "5"), (".5", "0.5"), ("5.", "5.0"),
                                        ("-01.e3", "-1.0e3")])
def test_a_number_json_does_not_write_gets_its_field_and_the_json_form(http, typed, fix):
    """017 is no JSON number (nor +5, .5, 5.): Python's json said "Expecting ',' delimiter at character 38"."""
    said = refusal(post(http, "/jobs", f'{{{JOB}, "cpu": {typed}}}'))
    assert said == (f"invalid request: the body's field 'cpu' holds {typed}, which is not a JSON number (JSON writes "
                    f"no leading zero, no '+', and a digit on each side of a '.'): write {fix}")
    listed = refusal(post(http, "/jobs", f'{{{JOB}, "volumes": ["a", {typed}]}}'))
    assert listed.startswith(f"invalid request: the body's a value holds {typed}, which is not a JSON number")


def test_other_bad_json_is_still_named_as_json(http):
    for raw in (f'{{{JOB}, "cpu": 1e}}', f'{{{JOB}, "cpu": 5 6}}', f'{{{JOB}, "cpu": -}}'):
        assert refusal(post(http, "/jobs", raw)).startswith("invalid request: the body is not valid JSON (")


def test_a_number_where_a_string_is_due_says_how_to_send_it(http):
    """ "size": 5000000000 read "size: Input should be a valid string", naming neither value nor range."""
    assert refusal(post(http, "/volumes", '{"name": "v", "size": 5000000000}')) == \
        'invalid size 5000000000: size takes a JSON string, not a number: send "5000000000"'
    too_small = refusal(post(http, "/volumes", '{"name": "v", "size": -1}'))
    assert too_small.startswith("invalid volume size '-1': it cannot be negative; use a quantity from 1Mi to 1Ei")
    exponent = refusal(post(http, "/volumes", '{"name": "v", "size": 1e9}'))
    assert exponent.startswith("invalid volume size '1e9': the API takes a quantity from 1Mi to 1Ei without an exponent")
    assert http.get("/volumes").json() == []


def test_a_query_number_is_named_as_typed(http, dt):
    """?limit=-0 was named 0, ?tail=1e400 '1e400' (a string: the CLI's --tail 1e400 is 1e400)."""
    assert refusal(http.get("/jobs", params={"limit": "-0"})) == \
        "invalid limit -0: use a number of jobs from 1 to 1000, e.g. 20"
    assert refusal(http.get("/jobs", params={"offset": "1e400"})) == \
        "invalid offset 1e400: use a number of jobs from 0 to 10000000"
    tail = refusal(http.get("/jobs/x/logs", params={"tail": "1e400"}))
    assert tail == ("invalid tail 1e400: use a number of lines from 0 to 1000000000, or leave it out for all of "
                    "them (the default), e.g. -t 10")
    dt("submit", "x", "--", "true")
    cli = dt("logs", "x", "--tail", "1e400", check=False).stderr.strip().removeprefix("dtrain: error: ")
    assert cli == tail.replace("leave it out", "-1")  # the door's own word for every line, and nothing else
    # a whole count in another notation is read as the CLI reads `--tail 1E3` (audit 12: the one rule)
    assert http.get("/jobs/x/logs", params={"tail": "1E3"}).status_code == 200
    assert refusal(http.get("/jobs/x/metrics", params={"last": "1e9"})) == \
        "invalid last 1e9: use a whole number from 1 to 20000"


def test_numbers_accepted_in_any_notation_are_answered_and_stored_plain(http, home):
    """The text is for refusals only: a job made with 1E0 CPUs answers "cpu": 1.0, never "1E0"."""
    made = post(http, "/jobs", f'{{{JOB}, "cpu": 1E0, "gpu": -0, "max_restarts": 2.0E0}}')
    assert made.status_code == 201, made.text
    assert "1E0" not in made.text and "2.0E0" not in made.text
    for answer in (made.json(), http.get("/jobs/x").json()):
        spec = answer["spec"]
        assert (spec["cpu"], spec["gpu"], spec["max_restarts"]) == (1.0, 0, 2)
        assert {type(spec[k]) for k in ("cpu", "gpu", "max_restarts")} <= {int, float}  # numbers, not texts
    stored = dtrain.Client(home=home).get("x").spec
    assert {type(stored.cpu), type(stored.gpu), type(stored.max_restarts)} <= {int, float}  # no WrittenInt
    quota = post(http, "/projects", '{"name": "p", "gpu_quota": -0}')
    assert quota.status_code == 201 and '"gpu_quota":0' in quota.text

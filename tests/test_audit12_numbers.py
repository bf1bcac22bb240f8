"""Numbers a user types, read by one rule wherever they are typed (audit 12).

1. An HTTP query's whole number (?tail=, ?rank=, ?limit=, ?offset=, ?last=) and seconds (?timeout=,
   ?since=) are read as the CLI reads the same flag: ?tail=5. and ?offset=1E3 were refused ("write the
   whole number in digits") where `--tail 5.` and `--tail 1E3` are taken; a refusal is the CLI's line.
2. The lanes workload's BATCH_SIZE, NUM_WORKERS and VAL_BATCH_SIZE (`-e BATCH_SIZE=1.5`, as Run:AI sets
   them) said "use a whole number", with no range and no value to set, and refused 1e3 that the flag takes.
3. A refusal made after the number was read quoted the number, not the text: `--processes 1E3` was
   "--processes 1000 needs a launcher", `logs --rank 1E3` "invalid rank 1000".
4. A size with a far exponent ('--size 1e-99999999', '0e999999999') built 10**99999999 and hung; the rest
   of the quantity grammar is pinned against Kubernetes' ParseQuantity.
"""

from __future__ import annotations

import pytest

import dtrain


# 1. A query's number is read by the CLI flags' rule


@pytest.fixture
def http(home):
    """An API server on that home, and an HTTP client to it."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    import httpx

    from dtrain.server.app import create_app
    from server_util import ThreadServer

    server = ThreadServer(create_app(lambda: dtrain.Client(home=home), sample_every=3600))
    with httpx.Client(base_url=server.url + "/api/v1", timeout=60) as client:
        yield client
    server.stop()


@pytest.fixture
def done(http, dt):
    """A one-process job that has ended, with one line of log."""
    dt("submit", "x", "--", "echo", "hello")
    assert http.get("/jobs/x/wait", params={"timeout": "60"}).json()["status"] == "Succeeded"
    return "x"


WHOLE = ["1_0", "5.", "1E3", "2.0", "+7", "010", " 3"]  # each a whole number to `--tail`


def test_a_query_takes_a_whole_number_as_the_cli_flag_does(http, dt, done):
    for text in WHOLE:
        assert dt("logs", done, "--tail", text).returncode == 0  # the flag's rule takes it
        for path, name in (("/jobs/x/logs", "tail"), ("/jobs/x/logs", "limit_bytes"), ("/jobs", "limit"),
                           ("/jobs", "offset"), ("/jobs/x/metrics", "last"), ("/lineage", "jobs"),
                           ("/lineage", "per_volume")):
            answer = http.get(path, params={name: text})
            assert answer.status_code == 200, (name, text, answer.text)


def test_a_query_takes_a_rank_and_seconds_as_the_cli_flags_do(http, dt, done):
    for text in ("0.", "0_0", "0E3", "-0"):
        assert dt("logs", done, "--rank", text).stdout == "hello\n"
        answer = http.get("/jobs/x/logs", params={"rank": text})
        assert answer.status_code == 200 and "hello" in answer.text, (text, answer.text)
    for text in ("1_0", "5.", "6E1", ".5"):
        assert dt("wait", done, "--timeout", text).returncode == 0
        assert http.get("/jobs/x/wait", params={"timeout": text}).status_code == 200, text
        assert http.get("/jobs/x/logs", params={"since": text}).status_code == 200, text
        assert http.get("/nodes/history", params={"since": text}).status_code == 200, text


REFUSED = [("tail", "--tail", "1.5"), ("tail", "--tail", "1_0.5"), ("tail", "--tail", "0x10"),
           ("tail", "--tail", "2E9"), ("limit_bytes", "--limit-bytes", "0.5"), ("rank", "--rank", "1.5"),
           ("rank", "--rank", "1__0")]


def test_a_query_refuses_what_the_cli_flag_refuses_in_its_words(http, dt, done):
    for name, flag, text in REFUSED:
        cli = dt("logs", done, flag, text, check=False)
        assert cli.returncode != 0, text
        answer = http.get("/jobs/x/logs", params={name: text})
        assert answer.status_code == 422, answer.text
        said = cli.stderr.strip().removeprefix("dtrain: error: ").removeprefix("dtrain: ")
        assert answer.json()["error"] == said.replace("-1 for all", "leave it out for all").replace(
            "or 'all' for every", "or leave it out for every")  # each door's own word for "every"


def test_a_query_refuses_seconds_as_the_cli_flag_does_naming_them_as_typed(http, dt, done):
    answer = http.get("/jobs/x/wait", params={"timeout": "6_0_0.5"})  # 600.5: past the API's 600
    assert answer.status_code == 422
    assert answer.json()["error"].startswith("invalid --timeout '6_0_0.5': use seconds from 0 to 600")


def test_the_volume_and_snapshot_waits_read_seconds_as_the_job_wait_does(http, home):
    """The volume class wait (GET /volumes/{name}/wait, new) and the snapshot wait share one timeout
    (routes_storage.WAIT_TIMEOUT), read as `dtrain wait --timeout` and GET /jobs/{name}/wait read it."""
    client = dtrain.Client(home=home)
    client.create_volume("data", size="1Mi")
    client.create_snapshot("data", name="data-v1")
    for path in ("/volumes/data/wait", "/snapshots/data-v1/wait"):
        for text in ("1_0", "5.", "6E1"):
            assert http.get(path, params={"timeout": text}).status_code == 200, (path, text)
        answer = http.get(path, params={"timeout": "6_0_0.5"})
        assert answer.status_code == 422, answer.text
        assert answer.json()["error"].startswith("invalid --timeout '6_0_0.5': use seconds from 0 to 600"), path


# 2. A lanes workload's number from the environment names its range and a value to set


@pytest.mark.parametrize("env, says", [
    ({"BATCH_SIZE": "1.5"}, "BATCH_SIZE=1.5 is not a whole number: give 1 to 65536, e.g. BATCH_SIZE=2"),
    ({"BATCH_SIZE": "x"}, "BATCH_SIZE=x is not a whole number: give 1 to 65536, e.g. BATCH_SIZE=1"),
    ({"BATCH_SIZE": "0"}, "BATCH_SIZE=0 is out of range: give 1 to 65536, e.g. BATCH_SIZE=1"),
    ({"NUM_WORKERS": "2.5"}, "NUM_WORKERS=2.5 is not a whole number: give 0 to 64, e.g. NUM_WORKERS=2"),
    ({"NUM_WORKERS": "-1"}, "NUM_WORKERS=-1 is out of range: give 0 to 64, e.g. NUM_WORKERS=0"),
    ({"VAL_BATCH_SIZE": "7e4"}, "VAL_BATCH_SIZE=7e4 is out of range: give 1 to 65536, e.g. VAL_BATCH_SIZE=65536"),
])
def test_a_lanes_environment_number_is_refused_naming_its_range_and_a_fix(env, says):
    from dtrain.errors import SpecError
    from dtrain.workloads.lanes import train

    with pytest.raises(SpecError) as refused:
        train.parse_config([], env)
    assert str(refused.value) == says


def test_a_lanes_environment_number_is_read_as_its_flag_reads_it():
    """`-e BATCH_SIZE=1e3` was "use a whole number" where `--batch-size 1e3` is 1000."""
    from dtrain.workloads.lanes import train

    for text, number in (("1e3", 1000), ("5.", 5), (" 8 ", 8), ("1_6", 16)):
        assert train.parse_config([], {"BATCH_SIZE": text}).recipe.batch_size == number
        assert train.parse_config(["--batch-size", text], {}).recipe.batch_size == number


# 3. A refusal made once the number is read names it as typed


def test_a_launcher_refusal_names_the_processes_as_typed():
    """--processes 1E3 (a flag's, a job file's) was refused as "--processes 1000 needs a launcher"."""
    from dtrain.cli.jobs import whole_number
    from dtrain.errors import SpecError
    from dtrain.spec import JobSpec

    with pytest.raises(SpecError, match=r"^--processes 1E3 needs a launcher: use dtrain submit-dist"):
        JobSpec.from_dict({"name": "x", "command": ["true"], "processes": whole_number("1E3")}, door="cli")
    with pytest.raises(SpecError, match=r"^processes=1E3 needs a launcher: give launcher='torchrun'"):  # the SDK's
        JobSpec(name="x", command=("true",), processes=whole_number("1E3"))


def test_a_rank_past_the_jobs_is_named_as_typed(http, dt, done):
    """`--rank 1E3` (and ?rank=1E3) was refused as "invalid rank 1000: job 'x' has 1 process"."""
    said = dt("logs", done, "--rank", "1E3", check=False).stderr
    assert "invalid rank 1E3: job 'x' has 1 process, rank 0" in said, said
    answer = http.get("/jobs/x/logs", params={"rank": "1E3"})
    assert answer.status_code == 422
    assert answer.json()["error"] == "invalid rank 1E3: job 'x' has 1 process, rank 0"
    assert dt("logs", done, "--rank", "0.").stdout == "hello\n"  # in range: read as the number


# 4. Sizes keep Kubernetes' quantity grammar, their bounds checked on the typed text


@pytest.mark.parametrize("text", ["1e-99999999", "0e999999999", "0.0E-99999999999", "1e-9999999999999999999999999"])
def test_a_size_with_a_far_exponent_is_answered_at_once(text):
    """'--size 1e-99999999' built 10**99999999 and hung the CLI (and an API worker, whose refusal of a
    size outside its schema reads it with the same parser)."""
    import subprocess
    import sys

    code = (f"from dtrain.names import parse_size, parse_volume_size\n"
            f"print(parse_size({text!r}))\n"
            f"try:\n    parse_volume_size({text!r})\nexcept Exception as e:\n    print(e)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=20)
    size, refusal = out.stdout.splitlines()
    assert size == ("0" if text.startswith("0") else "1")  # Kubernetes rounds a fraction of a byte up
    assert refusal.startswith(f"invalid volume size {text!r}: ") and "use a quantity from 1Mi to 1Ei" in refusal


@pytest.mark.parametrize("text, size", [
    ("1Ei", 2**60), ("1.152921504606846976e18", 2**60), ("1E", 10**18), ("1e3Mi", None), ("5.Gi", 5 * 2**30),
    (".5Gi", 2**29), ("+1Gi", 2**30), ("1.0000000000000001Ei", None), ("1152921504606846977", None),
    ("0.99999999999999999Mi", None), ("1048575.9999999999999", None), ("1E3Gi", None), ("0x10Gi", None),
    ("1_0Gi", None), ("1ki", None), ("1e", None), ("1.5e3Mi", None), ("1 Gi", None), ("１Gi", None),
])
def test_a_volume_size_is_taken_or_refused_as_kubernetes_quantity_reads_it_in_one_line(text, size):
    """Kubernetes' ParseQuantity: an optional sign, digits with at most one '.', then a binary suffix, a
    decimal one, or an exponent (e/E and digits) - never two of them, no '_', no hex; exactly read, so a
    size a float rounds onto a bound (1.0000000000000001Ei) is past it."""
    from dtrain.errors import SpecError
    from dtrain.names import parse_volume_size

    if size is not None:
        assert parse_volume_size(text) == size
        return
    with pytest.raises(SpecError) as refused:
        parse_volume_size(text)
    assert str(refused.value).startswith(f"invalid volume size {text!r}: ") and "\n" not in str(refused.value)


def test_memory_under_its_floor_by_a_rounding_is_refused(dt):
    said = dt("submit", "m", "--memory", "3.9999999999999999Mi", "--dry-run", "--", "true", check=False).stderr
    assert "invalid --memory '3.9999999999999999Mi': use a quantity from 4Mi to 1Ei" in said, said  # under 4Mi
    said = dt("submit", "m", "--memory", "1e-99999999", "--dry-run", "--", "true", check=False).stderr
    assert "invalid --memory '1e-99999999': that is 1 byte; use a quantity from 4Mi to 1Ei" in said, said


def test_the_api_refuses_a_far_exponent_size_at_once(http):
    answer = http.post("/volumes", json={"name": "v", "size": "1e-99999999"}, timeout=20)
    assert answer.status_code == 422
    said = answer.json()["error"]
    assert said.startswith("invalid volume size '1e-99999999': that is 1 byte; use a quantity from 1Mi"), said
    assert http.get("/volumes").json() == []

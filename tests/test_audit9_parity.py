"""The same mistake, the same line from the CLI, the SDK and the HTTP API (audit 9): a rank past
any job's names the job's ranks at every door, the SDK refuses the `since` the API refuses, every
numeric flag of the CLI names itself and its bounds, `config storage-class NAME --unset` works,
and an --image the local backend cannot use is said to be unused."""

from __future__ import annotations

import pytest

from conftest import usage_line

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")

from server_util import ServerProcess  # noqa: E402  (needs the extra)

from dtrain import Client  # noqa: E402
from dtrain.errors import SpecError  # noqa: E402

JOB = "/api/v1/jobs"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    srv = ServerProcess(tmp_path_factory.mktemp("parity9-home"), cwd=tmp_path_factory.mktemp("parity9-work"))
    dt = srv.dtrain()
    dt("submit-dist", "three", "--processes", "3", "--", "sh", "-c", "echo line")
    dt("wait", "three")
    yield srv
    srv.stop()


@pytest.mark.slow
@pytest.mark.parametrize("rank", ["3", "5000", "9" * 30])
def test_a_rank_past_the_jobs_names_its_ranks_at_every_door(server, rank):
    """HTTP's ?rank=5000 was a general line ("use a process rank such as 0 (at most 4095)") where
    `dtrain logs JOB --rank 5000` and Client.logs named the job's ranks."""
    said = usage_line(server.dtrain()("logs", "three", "--rank", rank, check=False))
    assert "job 'three' has 3 processes, ranks 0 to 2" in said, said
    with pytest.raises(SpecError) as err:
        list(Client(home=server.home).logs("three", rank=int(rank)))
    assert str(err.value) == said
    for path in (f"{JOB}/three/logs", f"{JOB}/three/logs/stream"):
        r = server.http.get(path, params={"rank": rank})
        assert (r.status_code, r.json()["error"]) == (422, said), r.text


@pytest.mark.parametrize("since", [-1, -0.5, float("inf"), 1e300, True])
def test_the_sdk_refuses_the_since_the_api_refuses(server, since):
    """Client.logs(since=-1) read every line where GET /logs?since=-1 was refused."""
    with pytest.raises(SpecError) as err:
        list(Client(home=server.home).logs("three", since=since))
    if since is not True:  # a query has no bool
        r = server.http.get(f"{JOB}/three/logs", params={"since": repr(since)})
        # a query names a number as typed, as a number (inf, 1e+300: not 'inf'): the SDK's very line
        assert (r.status_code, r.json()["error"]) == (422, str(err.value)), r.text
    assert str(err.value).startswith(f"invalid since {since!r}: use a unix time in seconds from 0 to ")
    assert [x.text for x in Client(home=server.home).logs("three", since=0)] == ["line"] * 3


def test_a_since_time_before_1970_is_every_line(server):
    """--since-time 1960-...: before any line, as kubectl takes it, not the SDK's refusal of a negative time."""
    out = server.dtrain()("logs", "three", "--since-time", "1960-01-01T00:00:00Z").stdout
    assert out.count("line") == 3, out


# Every numeric flag of the CLI (its `type=`: cli.jobs.whole_number or real): a word that is no number was argparse's
# "argument --cpu: invalid float value: 'x'"; now the flag's own check names it, its bounds and the fix.
NUMERIC_FLAGS = [
    (["submit-dist", "j", "--processes", "{}", "--", "true"], "--processes", "use a whole number from 1 to"),
    (["submit", "j", "--cpu", "{}", "--", "true"], "--cpu", "use a number of CPU threads from"),
    (["submit", "j", "--gpu", "{}", "--", "true"], "--gpu", "use a whole number from 0 to"),
    (["submit", "j", "--max-restarts", "{}", "--", "true"], "--max-restarts", "use a whole number from 0 to"),
    (["submit", "j", "--instance-count", "{}", "--", "true"], "--instance-count", "use a whole number from 1 to"),
    (["submit", "j", "--max-runtime", "{}", "--", "true"], "--max-runtime", "use a whole number from 1 to"),
    (["submit", "j", "--spot", "--max-wait", "{}", "--", "true"], "--max-wait", "use a whole number from 1 to"),
    (["submit", "j", "--volume-size", "{}", "--", "true"], "--volume-size", "use a whole number from 1 to"),
    (["notebook", "nb", "--cpu", "{}"], "--cpu", "use a number of CPU threads from"),
    (["project", "create", "p", "--gpu-quota", "{}"], "--gpu-quota", "use a whole number from 0 to"),
    (["logs", "three", "-t", "{}"], "tail", "use a number of lines from 0 to"),
    (["logs", "three", "--tail", "{}"], "tail", "use a number of lines from 0 to"),
    (["logs", "three", "--limit-bytes", "{}"], "--limit-bytes", "use a number of bytes from 1 to"),
    (["logs", "three", "--rank", "{}"], "--rank", "use a process rank such as 0"),
    (["wait", "three", "--timeout", "{}"], "--timeout", "use seconds from 0 to"),
    (["server", "--port", "{}"], "--port", "use 1-65535"),
]


@pytest.mark.slow  # a CLI run per flag and value
@pytest.mark.parametrize("words, flag, rule", NUMERIC_FLAGS, ids=[w[2] if w[0] != "server" else "port"
                                                                 for w, _, _ in NUMERIC_FLAGS])
@pytest.mark.parametrize("value", ["x", "abc", "1e3x"])
def test_every_numeric_flag_names_itself_and_its_bounds(server, words, flag, rule, value):
    said = usage_line(server.dtrain()(*[w.format(value) for w in words], check=False))
    assert said.startswith(f"invalid {flag} {value!r}: {rule}"), said


@pytest.mark.parametrize("flag, field, value", [("-t", "tail", "x"), ("--limit-bytes", "limit_bytes", "abc")])
def test_a_logs_word_that_is_no_number_is_the_apis_line(server, flag, field, value):
    """`dtrain logs JOB -t x` and GET /logs?tail=x: the same words (each door's way to ask for every line)."""
    said = usage_line(server.dtrain()("logs", "three", flag, value, check=False))
    r = server.http.get(f"{JOB}/three/logs", params={field: value})
    assert (r.status_code, r.json()["error"]) == (422, said.replace("or -1 for", "or leave it out for")), r.text


def test_a_body_number_and_its_flag_say_the_same(server):
    """POST /jobs {"cpu": "x"} and `dtrain submit --cpu x`: one line."""
    said = usage_line(server.dtrain()("submit", "j", "--cpu", "x", "--", "true", check=False))
    r = server.http.post(JOB, json={"name": "j", "command": ["true"], "cpu": "x"})
    assert (r.status_code, r.json()["error"]) == (422, said), r.text


def test_config_storage_class_takes_unset_after_the_name(tmp_path):
    """`dtrain config storage-class fast --unset` was argparse's "expected at least one argument"."""
    from conftest import Dtrain

    dt = Dtrain(tmp_path / "home")
    for words in (["fast", "--unset"], ["--unset", "fast"]):
        dt("config", "storage-class", "fast", str(tmp_path / "disk"))
        assert dt("config", "storage-class", *words).stdout == "storage class 'fast' removed\n"
        assert "fast" not in dt("config", "storage-class").stdout
    said = usage_line(dt("config", "storage-class", "--unset", check=False))
    assert said.startswith("'dtrain config storage-class --unset' needs the classes to remove, e.g."), said
    said = usage_line(dt("config", "sagemaker", "--unset", check=False))
    assert said.startswith("--unset needs the settings to remove, e.g. --unset image"), said


def test_an_image_the_local_backend_cannot_use_is_one_warning(tmp_path):
    """`dtrain submit -i IMAGE` on the local backend ran without the image and without a word."""
    from conftest import Dtrain

    dt = Dtrain(tmp_path / "home")
    proc = dt("submit", "img", "-i", "pytorch/pytorch:2.5.1", "--", "true")
    [line] = [x for x in proc.stderr.splitlines() if "warning" in x]
    assert line.startswith("dtrain: warning: --image pytorch/pytorch:2.5.1 is not used by the local backend"), line
    assert "used on Kubernetes and SageMaker" in line
    assert "warning" not in dt("submit", "plain", "--", "true").stderr
    (tmp_path / "home" / "config.yaml").write_text("kubernetes: {image: 'team/train:1'}\n")  # the default: no word
    assert "warning" not in dt("submit", "dflt", "-i", "team/train:1", "--", "true").stderr


def test_the_api_says_an_image_the_local_backend_cannot_use_in_its_warning_header(tmp_path):
    """POST /jobs with an image on the local backend put the warning in the server's log alone: the
    caller (the dashboard, a script) learned nothing; it now reads the CLI's words in `Warning`."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain.client import Client
    from dtrain.server.app import create_app
    home = tmp_path / "home"
    home.mkdir()
    http = TestClient(create_app(lambda: Client(home=home)), base_url="http://127.0.0.1:8000")
    r = http.post("/api/v1/jobs", json={"name": "img", "command": ["true"], "image": "pytorch/pytorch:2.5.1"})
    assert r.status_code == 201, r.text
    assert r.headers["warning"].startswith('299 dtrain "--image pytorch/pytorch:2.5.1 is not used by the local '
                                           'backend'), r.headers
    plain = http.post("/api/v1/jobs", json={"name": "plain", "command": ["true"]})
    assert plain.status_code == 201 and "warning" not in plain.headers
    assert Client(home=home).wait("img", timeout=60).status.value == "Succeeded"  # the job ran all the same

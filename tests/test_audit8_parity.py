"""The same mistake gets the same answer from the CLI, the SDK and the HTTP API (audit 8): a
malformed name is named as such by every job verb, an unknown volume or job filtering the
snapshot list is refused by every door, and `dtrain logs` takes kubectl's --limit-bytes."""

from __future__ import annotations

import pytest

from conftest import Dtrain

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")

from server_util import ServerProcess  # noqa: E402  (needs the extra)

from dtrain import Client  # noqa: E402
from dtrain.errors import NotFoundError, SpecError  # noqa: E402

JOB = "/api/v1/jobs"
BAD = "Bad_Name!"
RULE = "use 1-53 lower-case letters, digits or '-'"


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    home = tmp_path_factory.mktemp("parity-home")
    srv = ServerProcess(home, cwd=tmp_path_factory.mktemp("parity-work"))
    dt = srv.dtrain()
    dt("volume", "create", "data", "--size", "1Mi")
    dt("volume", "create", "empty", "--size", "1Mi")
    dt("submit", "done", "--", "sh", "-c", "printf 'first line\\nsecond line\\nthird line\\n'")
    dt("wait", "done")
    dt("snapshot", "create", "data", "--name", "data-s1", "--job", "done")
    yield srv
    srv.stop()


def _cli_line(proc) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0].removeprefix("dtrain: error: ")


# (CLI words, method, path, the API's status): one line each, the same
CASES = [
    (["describe", BAD], "GET", f"{JOB}/{BAD}", 422),
    (["describe", "job", BAD], "GET", f"{JOB}/{BAD}", 422),
    (["logs", BAD], "GET", f"{JOB}/{BAD}/logs", 422),
    (["wait", BAD], "GET", f"{JOB}/{BAD}/wait", 422),
    (["delete", BAD], "DELETE", f"{JOB}/{BAD}", 422),
    (["suspend", BAD], "POST", f"{JOB}/{BAD}/suspend", 422),
    (["resume", BAD], "POST", f"{JOB}/{BAD}/resume", 422),
    (["notebook", "open", BAD], "GET", f"/api/v1/notebooks/{BAD}/url", 422),
    (["volume", "describe", BAD], "GET", f"/api/v1/volumes/{BAD}", 422),
    (["volume", "delete", BAD], "DELETE", f"/api/v1/volumes/{BAD}", 422),
    (["snapshot", "describe", BAD], "GET", f"/api/v1/snapshots/{BAD}", 422),
    (["snapshot", "delete", BAD], "DELETE", f"/api/v1/snapshots/{BAD}", 422),
    (["snapshot", "list", "--volume", "nope"], "GET", "/api/v1/snapshots?volume=nope", 404),
    (["snapshot", "list", "--job", "nope"], "GET", "/api/v1/snapshots?job=nope", 404),
    (["snapshot", "list", "--volume", BAD], "GET", f"/api/v1/snapshots?volume={BAD}", 422),
]


@pytest.mark.slow  # a CLI run per case
@pytest.mark.parametrize("words, method, path, status", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_the_cli_and_the_api_give_one_line(server, words, method, path, status):
    said = _cli_line(server.dtrain()(*words, check=False))
    r = server.http.request(method, path)
    assert r.status_code == status, r.text
    assert r.json()["error"] == said


@pytest.mark.parametrize("verb", ["describe", "logs", "wait", "delete", "suspend", "resume", "artifacts"])
def test_a_malformed_job_name_is_named_as_such_by_every_job_verb(tmp_path, verb):
    """It read "no job named 'Bad_Name!'", as if a job could have that name; the HTTP API said the rule."""
    dt = Dtrain(tmp_path / "home")
    words = [verb, BAD] + (["--to", str(tmp_path / "out")] if verb == "artifacts" else [])
    line = _cli_line(dt(*words, check=False))
    assert line.startswith(f"invalid job name {BAD!r}: {RULE}"), line


def test_the_sdk_names_a_malformed_name_and_keeps_not_found_for_a_good_one(tmp_path):
    c = Client(home=tmp_path / "home")
    for call in (lambda: c.get(BAD), lambda: c.wait(BAD, timeout=0), lambda: c.delete(BAD),
                 lambda: c.suspend(BAD), lambda: c.resume(BAD), lambda: list(c.logs(BAD))):
        with pytest.raises(SpecError, match=rf"^invalid job name '{BAD}': {RULE}"):
            call()
    with pytest.raises(SpecError, match=r"^invalid notebook name 'Lab!'"):
        c.notebook_url("Lab!")
    with pytest.raises(SpecError, match=r"^invalid volume name 'V!'"):
        c.get_volume("V!")
    with pytest.raises(NotFoundError, match=r"^no job named 'nope'"):
        c.get("nope")


def test_the_sdk_refuses_a_snapshot_filter_naming_nothing(server):
    """Client.list_snapshots(volume='nope') was [] (and the HTTP list too): a typo read as a volume
    without snapshots, where `dtrain snapshot list --volume nope` refuses."""
    c = Client(home=server.home)
    with pytest.raises(NotFoundError, match=r"^no volume named 'nope'"):
        c.list_snapshots(volume="nope")
    with pytest.raises(NotFoundError, match=r"^no job named 'nope'"):
        c.list_snapshots(job="nope")
    assert c.list_snapshots(volume="empty") == []  # a volume without snapshots: an empty list, as before
    assert server.http.get("/api/v1/snapshots?volume=empty").json() == []
    assert server.dtrain().json("snapshot", "list", "--volume", "empty") == []
    assert [s.name for s in c.list_snapshots(volume="data")] == ["data-s1"]
    assert [s.name for s in c.list_snapshots(job="done")] == ["data-s1"]

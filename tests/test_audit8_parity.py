"""The same mistake gets the same answer from the CLI, the SDK and the HTTP API (audit 8): a
malformed name is named as such by every job verb, an unknown volume or job filtering the
snapshot list is refused by every door, and `dtrain logs` takes kubectl's --limit-bytes."""

from __future__ import annotations

import pytest

from conftest import Dtrain, usage_line

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")

from server_util import ServerProcess  # noqa: E402  (needs the extra)

from dtrain import Client  # noqa: E402
from dtrain.errors import NotFoundError, SpecError  # noqa: E402
from dtrain.names import EVERY, MAX_HTTP_WAIT, MAX_PROCESSES, MAX_TAIL, MAX_TIME, MAX_WAIT  # noqa: E402

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
    said = usage_line(server.dtrain()(*words, check=False))
    r = server.http.request(method, path)
    assert r.status_code == status, r.text
    assert r.json()["error"] == said


@pytest.mark.parametrize("verb", ["describe", "logs", "wait", "delete", "suspend", "resume", "artifacts"])
def test_a_malformed_job_name_is_named_as_such_by_every_job_verb(tmp_path, verb):
    """It read "no job named 'Bad_Name!'", as if a job could have that name; the HTTP API said the rule."""
    dt = Dtrain(tmp_path / "home")
    words = [verb, BAD] + (["--to", str(tmp_path / "out")] if verb == "artifacts" else [])
    line = usage_line(dt(*words, check=False))
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


@pytest.mark.slow
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


def test_logs_limit_bytes_as_kubectl(server):
    """`kubectl logs --limit-bytes N` was argparse's "unrecognized arguments"; now at most N bytes of
    the lines (text and newline), the last line cut short, the same from the CLI, the SDK and HTTP."""
    dt, http = server.dtrain(), server.http
    whole = dt("logs", "done").stdout
    for n in (1, 5, len("first line\n"), len("first line\n") + 4, len(whole), 10_000):
        out = dt("logs", "done", "--limit-bytes", str(n)).stdout
        assert len(out.encode()) <= n and whole.startswith(out.rstrip("\n")), (n, out)
        assert len(out.encode()) >= min(n, len(whole)) - 1, (n, out)  # only the cut line's newline may be missing
        sdk = [line.text for line in Client(home=server.home).logs("done", limit_bytes=n)]
        assert sdk == out.splitlines()
        api = http.get(f"{JOB}/done/logs", params={"limit_bytes": n})
        assert [line["text"] for line in api.json()] == sdk, api.text
    assert dt("logs", "done", "--limit-bytes", "12", "-t", "1").stdout == "third line\n"  # after --tail, as kubelet
    with http.stream("GET", f"{JOB}/done/logs/stream", params={"limit_bytes": 11}) as r:
        events = "".join(r.iter_text())
    assert events.count("data: {\"rank\"") == 1 and "first line" in events and "event: end" in events


@pytest.mark.parametrize("value", ["0", "-5", "1152921504606846977", "x"])
def test_a_limit_bytes_out_of_bounds_is_one_line_from_every_door(server, value):
    said = usage_line(server.dtrain()("logs", "done", "--limit-bytes", value, check=False))
    typed = value if value != "x" else repr(value)  # not a number: named as typed, by the CLI as by the query
    assert said.startswith(f"invalid --limit-bytes {typed}: use a number of bytes from 1 to"), said
    assert said == (f"invalid --limit-bytes {typed}: use a number of bytes from 1 to {2**60} (leave it out for the "
                    f"whole log), e.g. --limit-bytes 10000")
    with pytest.raises(SpecError) as err:  # one line too, naming the SDK's argument
        Client(home=server.home).logs("done", limit_bytes=int(value) if value != "x" else value)
    assert str(err.value) == (f"invalid limit_bytes {typed}: use a number of bytes from 1 to {2**60} (None, the "
                              f"default, for the whole log), e.g. limit_bytes=10000")
    r = server.http.get(f"{JOB}/done/logs", params={"limit_bytes": value})
    assert r.status_code == 422, r.text
    assert r.json()["error"] == said


@pytest.mark.parametrize("words, flag", [(["-c", "main"], "-c/--container"), (["--container=main"], "-c/--container"),
                                         (["--all-containers"], "--all-containers")])
def test_kubectl_container_flags_name_the_rank(server, words, flag):
    said = usage_line(server.dtrain()("logs", "done", *words, check=False))
    assert said.startswith(f"{flag} is kubectl's") and "--rank R" in said and "dtrain logs done --rank 0" in said


@pytest.mark.slow  # a job whose supervisor is frozen, then killed
def test_a_lost_supervisors_job_gets_its_logs_in_the_snapshot_its_message_asks_for(tmp_path):
    """A supervisor killed after every rank exited 0 but before its --snapshot-on-success snapshot
    leaves the job Failed, naming `dtrain snapshot create VOL --job JOB`; that snapshot holds the
    job's logs (.dtrain/logs/JOB/), as the supervisor's own would have."""
    from test_audit6_ft import _lose_the_supervisor_after_its_ranks_exited_0

    dt = Dtrain(tmp_path / "home")
    dt("volume", "create", "data")
    dt("submit", "snap", "--snapshot-on-success", "data", "--pvc", "data:/mnt/data", "--",
       "bash", "-c", "sleep 1; echo trained; echo run >> /mnt/data/runs.txt")
    _lose_the_supervisor_after_its_ranks_exited_0(dt, "snap")
    job = dt.wait_for("snap", {"Succeeded", "Failed"}, timeout=60)
    assert job["message"].endswith("take it with 'dtrain snapshot create data --job snap'"), job["message"]
    snap = dt.json("snapshot", "create", "data", "--job", "snap")
    dt("snapshot", "restore", snap["name"], "--to", "copy")
    from pathlib import Path
    logs = Path(dt.json("volume", "describe", "copy")["extra"]["path"]) / ".dtrain" / "logs" / "snap"
    assert (logs / "rank-0.log").read_text().splitlines()[-1].endswith("trained")
    assert {p.name for p in logs.iterdir()} >= {"launcher.log", "attempts.json", "rank-0.log"}


# The numbers of `dtrain logs` and `dtrain wait` as each door spells them: a query's refusal was
# pydantic's ("query.tail: Input should be greater than or equal to 0"), the SDK's another line; now
# every door says the CLI's, each naming only its own way to ask for the default (names.EVERY), and
# the SDK its arguments (rank, tail=10), not the CLI's flags.
def _as_door(line: str, door: str) -> str:
    """The CLI's line as `door` words it: its -1 / 'all' become that door's; the SDK's names its arguments."""
    for cli, other in zip(EVERY["cli"], EVERY[door]):
        line = line.replace(f"or {cli} for", f"or {other} for")
    if door == "sdk":
        line = line.replace("invalid --rank ", "invalid rank ", 1).replace("e.g. -t 10", "e.g. tail=10")
    return line


@pytest.mark.parametrize("flag, field, value", [("-t", "tail", "-5"), ("--tail", "tail", "-100"),
                                                ("--rank", "rank", "-1"), ("--rank", "rank", "x")])
def test_a_logs_number_is_refused_in_each_doors_words(server, flag, field, value):
    said = usage_line(server.dtrain()("logs", "done", flag, value, check=False))
    assert said.startswith(f"invalid {'--rank' if field == 'rank' else field} "), said
    with pytest.raises(SpecError) as err:
        list(Client(home=server.home).logs("done", **{field: int(value) if value != "x" else value}))
    typed = f"'{value}'" if field == "rank" else value  # the CLI names a rank as typed, the SDK the number
    assert str(err.value) == _as_door(said, "sdk").replace(typed, repr(int(value)) if value != "x" else typed, 1)
    for path in (f"{JOB}/done/logs", f"{JOB}/done/logs/stream"):
        r = server.http.get(path, params={field: value})
        assert r.status_code == 422 and r.json()["kind"] == "SpecError", r.text
        assert r.json()["error"] == _as_door(said, "http"), r.text


def test_a_tail_or_rank_the_cli_takes_the_api_takes(server):
    """?tail= stopped at 100000 while `dtrain logs -t` takes up to MAX_TAIL; a rank past the job's
    last is the job's own line at every door."""
    lines = server.dtrain()("logs", "done", "-t", "200000").stdout.splitlines()
    r = server.http.get(f"{JOB}/done/logs", params={"tail": 200_000})
    assert r.status_code == 200 and [x["text"] for x in r.json()] == lines, r.text
    said = usage_line(server.dtrain()("logs", "done", "--rank", "3", check=False))
    assert "job 'done' has 1 process, rank 0" in said, said
    assert server.http.get(f"{JOB}/done/logs", params={"rank": 3}).json()["error"] == said
    past = server.http.get(f"{JOB}/done/logs", params={"rank": MAX_PROCESSES}).json()["error"]  # no job's rank:
    assert past == usage_line(server.dtrain()("logs", "done", "--rank", str(MAX_PROCESSES), check=False))  # its line


@pytest.mark.parametrize("value", ["-1", "x"])
def test_a_wait_timeout_is_refused_in_each_doors_words(server, value):
    said = usage_line(server.dtrain()("wait", "done", "--timeout", value, check=False))
    assert said.startswith(f"invalid --timeout '{value}': use seconds from 0 to {MAX_WAIT} (366 days) or a duration")
    with pytest.raises(SpecError) as err:
        Client(home=server.home).wait("done", timeout=int(value) if value != "x" else value)
    # the SDK's argument, which takes seconds alone
    assert str(err.value) == (f"invalid timeout {value if value != 'x' else repr(value)}: use seconds from 0 to "
                              f"{MAX_WAIT} (366 days), e.g. timeout=600 (None: wait until it ends)")
    r = server.http.get(f"{JOB}/done/wait", params={"timeout": value})
    assert r.status_code == 422, r.text  # the API's own bound (a request holds a thread): named, in the same words
    assert r.json()["error"].startswith(f"invalid --timeout '{value}': use seconds from 0 to {MAX_HTTP_WAIT} "), r.text
    over = server.http.get(f"{JOB}/done/wait", params={"timeout": MAX_HTTP_WAIT + 1}).json()["error"]
    assert over == r.json()["error"].replace(f"'{value}'", f"'{MAX_HTTP_WAIT + 1}'", 1)
    assert server.dtrain()("wait", "done", "--timeout", str(MAX_HTTP_WAIT + 1)).returncode == 0


@pytest.mark.parametrize("path, query, sdk", [
    (JOB, {"status": "Bogus"}, lambda c: c.list(status="Bogus")),
    (JOB, {"status": "Bogus", "limit": 5}, lambda c: c.page(status="Bogus", limit=5)),
    ("/api/v1/notebooks", {"status": "Bogus"}, lambda c: c.list(status="Bogus")),
    (JOB, {"limit": 0}, lambda c: c.page(limit=0)),
    (JOB, {"limit": 1001}, lambda c: c.page(limit=1001)),
    (JOB, {"offset": -1}, lambda c: c.page(offset=-1)),
    (f"{JOB}/done/logs", {"since": "nan"}, lambda c: list(c.logs("done", since=float("nan")))),
])
def test_a_list_or_since_query_is_refused_in_the_sdks_words(server, path, query, sdk):
    """`?status=Bogus` was pydantic's enum message, `?limit=0` its "greater than or equal to"."""
    with pytest.raises(SpecError) as err:
        sdk(Client(home=server.home))
    r = server.http.get(path, params=query)
    assert r.status_code == 422 and r.json()["kind"] == "SpecError", r.text
    if "since" in query:  # the same words and range (0 to MAX_TIME), the value named as the query typed it
        assert f" from 0 to {MAX_TIME:.0f}, e.g." in str(err.value)
        assert r.json()["error"] == str(err.value)  # nan named as a number, as the SDK names it
    else:
        assert r.json()["error"] == str(err.value)


@pytest.mark.parametrize("path, name, value", [(f"{JOB}/done/metrics", "last", "0"),
                                               (f"{JOB}/done/metrics", "last", "x"),
                                               ("/api/v1/lineage", "jobs", "1001"),
                                               ("/api/v1/lineage", "per_volume", "2.5")])
def test_an_api_only_number_names_itself_and_the_schemas_bounds(server, path, name, value):
    """A number only the API takes (a chart's `last`) has no CLI line: its name and the schema's range."""
    op = server.http.get("/api/v1/openapi.json").json()["paths"][path.replace("/done/", "/{name}/")]["get"]
    schema = next(p["schema"] for p in op["parameters"] if p["name"] == name)
    r = server.http.get(path, params={name: value})
    assert r.status_code == 422, r.text
    shown = repr(value) if value == "x" else value
    assert r.json()["error"] == f"invalid {name} {shown}: use a whole number from {schema['minimum']} to " \
                                f"{schema['maximum']}", r.text


def test_the_schema_keeps_the_bounds_of_the_logs_and_wait_numbers(server):
    """The refusal's words changed, not what the schema says: a generated client still checks them."""
    paths = server.http.get("/api/v1/openapi.json").json()["paths"]
    for path in ("/api/v1/jobs/{name}/logs", "/api/v1/jobs/{name}/logs/stream"):
        params = {p["name"]: p["schema"].get("anyOf", [p["schema"]])[0] for p in paths[path]["get"]["parameters"]}
        assert (params["tail"]["minimum"], params["tail"]["maximum"]) == (0, MAX_TAIL)
        assert (params["rank"]["minimum"], params["rank"]["maximum"]) == (0, MAX_PROCESSES - 1)
        assert (params["limit_bytes"]["minimum"], params["limit_bytes"]["maximum"]) == (1, 2**60)
    waits = paths["/api/v1/jobs/{name}/wait"]["get"]["parameters"]
    timeout = next(p["schema"] for p in waits if p["name"] == "timeout")
    assert (timeout["minimum"], timeout["maximum"]) == (0, MAX_HTTP_WAIT)

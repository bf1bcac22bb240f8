"""The HTTP API against a real `dtrain server` (uvicorn on a free loopback port, a real DTRAIN_HOME,
real jobs): every verb, the error codes with the CLI's own messages, a live log stream."""

from __future__ import annotations

import json
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest

from server_util import ServerProcess, wait_until

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")

WAIT_FOR_GO = "echo before; while [ ! -e GO ]; do sleep 0.1; done; echo after"


@pytest.fixture
def server(home, tmp_path):
    s = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    yield s
    s.stop()


def submit(server: ServerProcess, name: str, script: str, cwd: Path, **fields) -> dict:
    r = server.http.post("/api/v1/jobs", json={"name": name, "command": ["sh", "-c", script],
                                               "working_dir": str(cwd), **fields})
    assert r.status_code == 201, r.text
    return r.json()


def cli_error(server: ServerProcess, *args: str, cwd=None) -> str:
    """The one line the CLI prints for the same mistake, without its 'dtrain: error: ' prefix."""
    proc = server.dtrain()(*args, check=False, cwd=cwd)
    assert proc.returncode == 2, proc
    return proc.stderr.strip().removeprefix("dtrain: error: ")


@pytest.mark.slow
def test_job_verbs_and_errors(server, tmp_path):
    http = server.http
    unknown = http.post("/api/v1/jobs", json={"name": "hello", "command": ["true"], "project": "team-a"})
    assert unknown.status_code == 404, unknown.text  # the local backend's rule, as the CLI meets it
    assert unknown.json()["error"] == cli_error(server, "submit", "hello", "-p", "team-a", "--", "true")
    assert http.get("/api/v1/jobs").json() == []
    assert http.post("/api/v1/projects", json={"name": "team-a"}).status_code == 201
    job = submit(server, "hello", "echo one; echo two", tmp_path, project="team-a")
    assert job["name"] == "hello" and job["project"] == "team-a" and job["status"] in ("Pending", "Running")
    done = http.get("/api/v1/jobs/hello/wait", params={"timeout": 120}).json()
    assert done["status"] == "Succeeded" and done["finished"] >= done["created"]
    assert [e["status"] for e in done["events"]][-1] == "Succeeded"
    assert [ln["text"] for ln in http.get("/api/v1/jobs/hello/logs").json()] == ["one", "two"]
    assert [ln["text"] for ln in http.get("/api/v1/jobs/hello/logs", params={"tail": 1}).json()] == ["two"]
    no_rank = http.get("/api/v1/jobs/hello/logs", params={"rank": 3})  # issue 12: a rank the job lacks is an error
    assert no_rank.status_code == 422 and "1 process, rank 0" in no_rank.json()["error"]

    submit(server, "sleeper", WAIT_FOR_GO, tmp_path)
    wait_until(lambda: http.get("/api/v1/jobs/sleeper").json()["status"] == "Running", what="sleeper running")
    names = lambda **q: [j["name"] for j in http.get("/api/v1/jobs", params=q).json()]  # noqa: E731
    assert names() == ["hello", "sleeper"]
    assert names(project="team-a") == ["hello"] and names(status="Running") == ["sleeper"]
    assert http.get("/api/v1/jobs", params={"project": "nobody"}).status_code == 404  # a typo, as `list -p`
    timed_out = http.get("/api/v1/jobs/sleeper/wait", params={"timeout": 0.5})
    assert timed_out.status_code == 408 and "still Running" in timed_out.json()["error"]
    assert timed_out.json()["kind"] == "TimeoutError"  # its word before WaitTimeoutError was named so

    deleted = http.delete("/api/v1/jobs/sleeper")
    assert deleted.status_code == 200 and deleted.json()["status"] == "Deleted"
    assert http.get("/api/v1/jobs/sleeper").json()["status"] == "Deleted"
    assert names() == ["hello"] and names(status="Deleted") == ["sleeper"]  # as `dtrain list jobs` shows them

    # errors: the status code, and the same line the CLI prints
    missing = http.get("/api/v1/jobs/nope")
    assert missing.status_code == 404
    assert missing.json() == {"error": cli_error(server, "describe", "job", "nope"), "kind": "NotFoundError"}
    for path in ("/api/v1/jobs/nope/logs", "/api/v1/jobs/nope/wait", "/api/v1/jobs/nope/metrics"):
        assert http.get(path).status_code == 404, path
    assert http.delete("/api/v1/jobs/nope").status_code == 404
    clash = http.post("/api/v1/jobs", json={"name": "hello", "command": ["true"]})
    assert clash.status_code == 409 and clash.json()["error"] == cli_error(server, "submit", "hello", "--", "true")
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: two\ncommand: [\"true\"]\nprocesses: 2\n")  # quoted: YAML reads a bare true as a boolean
    bad = http.post("/api/v1/jobs", json={"name": "two", "command": ["true"], "processes": 2})
    # the API answers in the CLI's flag words; a job file's line names the file's own field (FileDoor)
    assert bad.status_code == 422 and bad.json()["error"] == ("--processes 2 needs a launcher: use dtrain submit-dist "
                                                              "--launcher torchrun or dtrain submit-mpi")
    assert cli_error(server, "submit", "-f", str(spec)) == (f"job file '{spec}': processes: 2 needs a launcher: give "
                                                           f"launcher: torchrun (or launcher: mpi) as well")
    bad_name = http.get("/api/v1/jobs/Bad_Name")  # names are checked before anything looks them up
    assert bad_name.status_code == 422
    assert bad_name.json()["error"] == cli_error(server, "submit", "Bad_Name", "--", "true")
    quota = http.post("/api/v1/jobs", json={"name": "big", "command": ["true"], "gpu": 3})
    assert quota.status_code == 409 and quota.json()["error"] == cli_error(server, "submit", "big", "-g", "3", "--",
                                                                           "true")
    wrong_type = http.post("/api/v1/jobs", json={"name": "x", "command": 5, "surprise": 1})
    assert wrong_type.status_code == 422 and wrong_type.json()["error"].startswith("invalid request: ")
    one_string = http.post("/api/v1/jobs", json={"name": "x", "command": "true", "surprise": 1})
    assert one_string.status_code == 422  # a shell line where a list goes: the list to send
    assert one_string.json()["error"] == ("invalid command 'true': must be a list of strings, not one string: "
                                          'send ["true"]')
    memory = http.post("/api/v1/jobs", json={"name": "mem", "command": ["true"], "memory": "8GB"})
    assert memory.status_code == 422
    assert memory.json()["error"] == cli_error(server, "submit", "mem", "--memory", "8GB", "--", "true")
    for body, headers, says in bad_bodies():
        refused = http.post("/api/v1/jobs", content=body, headers=headers)
        assert refused.status_code == 422 and refused.json()["kind"] == "SpecError", refused.text
        assert says in refused.json()["error"] and "\n" not in refused.json()["error"], refused.text
    assert names() == ["hello"] and names(status="Deleted") == ["sleeper"]  # nothing stored
    assert names(project="", status="") == ["hello"]  # empty filters, as a form sends "any": no filter


def bad_bodies() -> list[tuple[bytes, dict[str, str], str]]:
    """Bodies that FastAPI alone answers with a bare 400 or a message that does not say what to send."""
    job = json.dumps({"name": "x", "command": ["true"]}).encode()
    as_json = {"content-type": "application/json"}
    return [(job, {"content-type": "application/x-www-form-urlencoded"}, "'Content-Type: application/json'"),
            (job, {"content-type": "text/plain"}, "'Content-Type: application/json'"),
            (b'{"name": "\xff", "command": ["true"]}', as_json, "not UTF-8"),
            (b"[" * 100_000 + b"]" * 100_000, as_json, "nested too deeply"),
            (b'{"name": ', as_json, "not valid JSON")]


def test_log_stream_receives_a_line_written_after_the_request(server, tmp_path):
    submit(server, "talker", WAIT_FOR_GO, tmp_path)
    events: list[str] = []
    got_before = threading.Event()

    def read():
        with server.http.stream("GET", "/api/v1/jobs/talker/logs/stream") as resp:
            assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
            for line in resp.iter_lines():
                events.append(line)
                if '"before"' in line:
                    got_before.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    assert got_before.wait(90), events
    assert not any('"after"' in e for e in events)
    (tmp_path / "GO").touch()  # only now does the job write its second line
    reader.join(90)
    assert not reader.is_alive(), "the stream did not end when the job did"
    data = [json.loads(e[len("data: "):]) for e in events if e.startswith("data: {\"rank")]
    assert [d["text"] for d in data] == ["before", "after"] and {d["rank"] for d in data} == {0}
    assert events[events.index("event: end") + 1] == 'data: {"status": "Succeeded"}'
    assert server.http.get("/api/v1/jobs/nope/logs/stream").status_code == 404

    # a suspension stops the stream too, and says so: the lines of a resumed job come on a new one
    submit(server, "paused", "echo started; while true; do sleep 0.1; done", tmp_path)
    wait_until(lambda: server.http.get("/api/v1/jobs/paused").json()["status"] == "Running", what="running")
    with server.http.stream("GET", "/api/v1/jobs/paused/logs/stream") as resp:
        lines = resp.iter_lines()
        assert next(line for line in lines if line.startswith("data: ")).endswith('"text": "started"}')
        assert server.http.post("/api/v1/jobs/paused/suspend").status_code == 200
        rest = list(lines)
    assert rest[rest.index("event: end") + 1] == 'data: {"status": "Suspended"}'
    assert server.http.delete("/api/v1/jobs/paused").status_code == 200


def test_nodes_projects_and_gpu_allocation(server, tmp_path):
    http = server.http
    [node] = http.get("/api/v1/nodes").json()
    assert node["gpus_allocatable"] == 2 and [g["job"] for g in node["gpus"]] == [None, None]
    submit(server, "gpu-job", WAIT_FOR_GO, tmp_path, gpu=1)
    held = wait_until(lambda: [g for g in http.get("/api/v1/nodes").json()[0]["gpus"] if g["job"]], what="a GPU held")
    assert [g["job"] for g in held] == ["gpu-job"]
    assert http.get("/api/v1/jobs/gpu-job").json()["gpus_allocated"] == 1
    (tmp_path / "GO").touch()
    http.get("/api/v1/jobs/gpu-job/wait", params={"timeout": 120})
    assert http.get("/api/v1/nodes").json()[0]["gpus_allocated"] == 0

    made = http.post("/api/v1/projects", json={"name": "lanes", "gpu_quota": 1})
    assert made.status_code == 201
    assert {k: made.json()[k] for k in ("name", "gpu_quota", "gpus_allocated", "jobs")} == \
        {"name": "lanes", "gpu_quota": 1, "gpus_allocated": 0, "jobs": 0}
    assert "lanes" in [p["name"] for p in http.get("/api/v1/projects").json()]
    too_big = http.post("/api/v1/projects", json={"name": "huge", "gpu_quota": 5})
    assert too_big.status_code == 409 and too_big.json()["kind"] == "QuotaError"
    assert http.post("/api/v1/projects", json={"name": "neg", "gpu_quota": -1}).status_code == 422
    again = http.post("/api/v1/projects", json={"name": "lanes"})
    assert again.status_code == 200 and again.json()["gpu_quota"] == 1  # there already; its quota left as it is
    assert http.post("/api/v1/projects", json={"name": "lanes", "no_gpu_quota": True}).json()["gpu_quota"] is None
    both = http.post("/api/v1/projects", json={"name": "lanes", "gpu_quota": 1, "no_gpu_quota": True})
    assert both.status_code == 422 and "contradict each other" in both.json()["error"], both.text


def test_openapi_is_served_and_versioned(server):
    schema = server.http.get("/api/v1/openapi.json").json()
    assert schema["info"]["title"] == "dtrain"
    assert all(p.startswith("/api/v1/") for p in schema["paths"])
    assert {"get", "post"} <= set(schema["paths"]["/api/v1/jobs"])
    assert "text/event-stream" in json.dumps(schema["paths"]["/api/v1/jobs/{name}/logs/stream"])


def test_read_only_server_refuses_changes(home, tmp_path):
    s = ServerProcess(home, args=("--read-only",), cwd=tmp_path)
    try:
        assert "(read-only)" in s.banner
        refused = s.http.post("/api/v1/jobs", json={"name": "x", "command": ["true"]})
        assert refused.status_code == 403 and "read-only" in refused.json()["error"]
        assert s.http.delete("/api/v1/jobs/x").status_code == 403
        assert s.http.get("/api/v1/jobs").json() == []
        assert s.http.get("/").status_code == 200
    finally:
        s.stop()


def test_loopback_server_refuses_foreign_host_headers(server):
    """DNS rebinding: a page on evil.example resolving to 127.0.0.1 must not reach the API."""
    r = httpx.get(server.url + "/api/v1/jobs", headers={"host": "evil.example"})
    assert r.status_code == 421
    assert server.http.get("/api/v1/jobs", headers={"host": "localhost"}).status_code == 200


def test_volume_and_snapshot_verbs_and_lineage(server, tmp_path):
    http = server.http
    made = http.post("/api/v1/volumes", json={"name": "exp", "size": "1Gi"})
    assert made.status_code == 201 and made.json()["name"] == "exp" and made.json()["size"] == "1Gi"
    data = Path(http.get("/api/v1/volumes/exp").json()["extra"]["path"])
    (data / "dataset.txt").write_text("frames")
    assert http.post("/api/v1/snapshots", json={"volume": "exp", "name": "data-v1"}).status_code == 201
    code = "open('/mnt/model.pt', 'w').write('weights'); print('trained')"
    r = http.post("/api/v1/jobs", json={"name": "train", "command": ["python", "-c", code], "volumes": ["exp:/mnt"],
                                        "snapshot_on_success": "exp", "working_dir": str(tmp_path)})
    assert r.status_code == 201, r.text
    job = http.get("/api/v1/jobs/train/wait", params={"timeout": 120}).json()
    assert job["status"] == "Succeeded" and job["source_snapshot"] == "data-v1" and job["snapshot"]
    result = http.get(f"/api/v1/snapshots/{job['snapshot']}").json()
    assert (result["volume"], result["job"], result["source_snapshot"]) == ("exp", "train", "data-v1")
    assert [s["name"] for s in http.get("/api/v1/snapshots", params={"job": "train"}).json()] == [job["snapshot"]]
    assert {s["name"] for s in http.get("/api/v1/snapshots", params={"volume": "exp"}).json()} == {"data-v1",
                                                                                                 job["snapshot"]}
    diff = http.get("/api/v1/snapshots/data-v1/diff", params={"to": job["snapshot"]}).json()
    assert {(c["path"], c["kind"]) for c in diff} >= {("model.pt", "added")}

    restored = http.post(f"/api/v1/snapshots/{job['snapshot']}/restore", json={"to": "restored"})
    assert restored.status_code == 201 and restored.json()["origin_snapshot"] == job["snapshot"]
    assert (Path(restored.json()["extra"]["path"]) / "model.pt").read_text() == "weights"
    # the restore's record is not measured (a walk of every file); a get measures, as du would
    assert restored.json()["used_bytes"] is None and made.json()["used_bytes"] is None
    model = Path(restored.json()["extra"]["path"]) / "model.pt"
    assert http.get("/api/v1/volumes/restored").json()["used_bytes"] >= model.stat().st_blocks * 512 > 0
    assert {v["name"]: v["used_bytes"] for v in http.get("/api/v1/volumes").json()}["restored"] > 0
    again = http.post(f"/api/v1/snapshots/{job['snapshot']}/restore", json={"to": "restored"})
    assert again.status_code == 409
    assert again.json()["error"] == cli_error(server, "snapshot", "restore", job["snapshot"], "--to", "restored")
    both = http.post("/api/v1/snapshots/data-v1/restore", json={"to": "x", "in_place": True})
    assert both.status_code == 422
    (data / "dataset.txt").write_text("changed")
    assert http.post("/api/v1/snapshots/data-v1/restore", json={"in_place": True}).status_code == 200
    assert (data / "dataset.txt").read_text() == "frames"

    graph = http.get("/api/v1/lineage").json()
    edges = {(e["source"], e["label"], e["target"]) for e in graph["edges"]}
    assert {("volume:exp", "snapshot", "snapshot:data-v1"), ("snapshot:data-v1", "started", "job:train"),
            ("volume:exp", "mounted", "job:train"), ("job:train", "results", f"snapshot:{job['snapshot']}"),
            (f"snapshot:{job['snapshot']}", "restored", "volume:restored")} <= edges

    for path in ("/api/v1/volumes/nope", "/api/v1/snapshots/nope", "/api/v1/snapshots/data-v1/diff?to=nope"):
        assert http.get(path).status_code == 404, path
    missing = http.post("/api/v1/snapshots", json={"volume": "nope"})
    assert missing.status_code == 404 and missing.json()["error"] == cli_error(server, "snapshot", "create", "nope")
    bad = http.post("/api/v1/volumes", json={"name": "UPPER"})
    assert bad.status_code == 422 and bad.json()["error"] == cli_error(server, "volume", "create", "UPPER")
    for field, value, flag in (("size", "100GB", "--size"), ("size", "0", "--size"),
                               ("storage_class", "Bad_", "--class")):  # the CLI's line, not the schema's pattern
        bad = http.post("/api/v1/volumes", json={"name": "big", field: value})
        assert bad.status_code == 422 and bad.json()["error"] == cli_error(server, "volume", "create", "big", flag,
                                                                           value)
    narrower = http.post("/api/v1/volumes", json={"name": "big", "size": "1e9"})  # the CLI takes it, the API not
    assert narrower.status_code == 422 and "such as 512Mi" in narrower.json()["error"]
    assert "(?:" not in narrower.text and "big" not in {v["name"] for v in http.get("/api/v1/volumes").json()}

    freed = http.delete("/api/v1/snapshots/data-v1")
    assert freed.status_code == 200 and freed.json()["snapshot"] == "data-v1" and freed.json()["bytes"] is not None
    assert http.get("/api/v1/snapshots/data-v1").status_code == 404
    status = {n["id"]: n["status"] for n in http.get("/api/v1/lineage").json()["nodes"]}
    assert status["snapshot:data-v1"] == "gone"  # still the job's source, shown as a deleted volume is
    assert status[f"snapshot:{job['snapshot']}"] is None and status["volume:exp"] is None
    assert http.delete("/api/v1/volumes/restored").status_code == 204
    assert [v["name"] for v in http.get("/api/v1/volumes").json()] == ["exp"]

    # A new job under the deleted job's name: the snapshot still holds the earlier job's results
    assert http.delete("/api/v1/jobs/train").status_code == 200
    taken = http.get(f"/api/v1/snapshots/{job['snapshot']}").json()["created"]
    while time.time() < int(taken) + 1:  # a snapshot's time has whole seconds: submit in a later one
        time.sleep(0.05)
    again = http.post("/api/v1/jobs", json={"name": "train", "command": ["true"], "working_dir": str(tmp_path)})
    assert again.status_code == 201, again.text
    graph = http.get("/api/v1/lineage").json()
    earlier = f"job:train@{job['snapshot']}"
    assert ({"id": earlier, "kind": "job", "name": "train", "status": "gone", "project": None, "count": None}
            in graph["nodes"])
    edges = {(e["source"], e["label"], e["target"]) for e in graph["edges"]}
    assert (earlier, "results", f"snapshot:{job['snapshot']}") in edges
    assert ("job:train", "results", f"snapshot:{job['snapshot']}") not in edges


def test_server_command_refuses_bad_ports_in_one_line(home):
    from conftest import Dtrain

    dt = Dtrain(home)
    bad = dt("server", "--port", "70000", check=False, timeout=60)
    assert bad.returncode == 2 and bad.stderr.strip() == \
        "dtrain: error: invalid --port 70000: use 1-65535 (or 0 for any free port), e.g. --port 8500"
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        busy = dt("server", "--port", str(port), check=False, timeout=60)
        # a port typed as --port takes whole numbers (0NNNN, NNNN.0, 1e3) went on as typed, and
        # getaddrinfo refused that int ("OSError: Int or String expected", a traceback)
        spelled = [dt("server", "--port", text, check=False, timeout=60) for text in (f"0{port}", f"{port}.0")]
    for said in (busy, *spelled):
        assert said.returncode == 2 and said.stderr.startswith(f"dtrain: error: cannot listen on 127.0.0.1:{port}")
        assert "Traceback" not in said.stderr and said.stderr.count("\n") == 1, said.stderr


def test_the_submit_body_has_the_job_spec_fields():
    """One spec behind every door: the HTTP body cannot drift from JobSpec's fields."""
    import dataclasses

    from dtrain.server.wire import SpecIn
    from dtrain.spec import JobSpec

    assert set(SpecIn.model_fields) == {f.name for f in dataclasses.fields(JobSpec)}


def test_head_answers_wherever_get_does_and_405_lists_every_method(server, tmp_path):
    http = server.http
    for path in ("/", "/metrics", "/api/v1/jobs", "/api/v1/nodes", "/api/v1/openapi.json", "/static/app.js"):
        get, head = http.get(path), http.head(path)
        assert head.status_code == 200 and head.content == b"", (path, head.status_code, head.text)
        assert head.headers["content-type"] == get.headers["content-type"], path
    assert http.head("/api/v1/jobs/nope").status_code == 404
    submit(server, "quiet", WAIT_FOR_GO, tmp_path)
    stream = http.head("/api/v1/jobs/quiet/logs/stream", timeout=30)  # the headers, not the job's whole life
    assert stream.status_code == 200 and stream.headers["content-type"].startswith("text/event-stream")
    for method, path, allowed in (("PUT", "/api/v1/jobs", "GET, HEAD, POST"),
                                  ("PUT", "/api/v1/volumes/exp", "GET, HEAD, PATCH, DELETE"),
                                  ("POST", "/api/v1/nodes", "GET, HEAD"),
                                  ("GET", "/api/v1/snapshots/s/restore", "POST"),
                                  ("POST", "/static/app.js", "GET, HEAD")):
        refused = http.request(method, path)
        assert refused.status_code == 405 and refused.headers["allow"] == allowed, (method, path, refused.headers)
        assert refused.json()["error"] == f"{method} is not allowed on {path}: use {allowed}"


def test_only_the_delete_that_deleted_a_volume_answers_204(server):
    """Six concurrent deletes of one volume: one 204 and five 404s, in every round."""
    http = server.http
    for _ in range(5):
        assert http.post("/api/v1/volumes", json={"name": "cv", "size": "1Mi"}).status_code == 201
        codes: list[int] = []
        barrier = threading.Barrier(6)

        def delete() -> None:
            with httpx.Client(base_url=server.url, timeout=60) as own:
                barrier.wait()
                codes.append(own.delete("/api/v1/volumes/cv").status_code)
        threads = [threading.Thread(target=delete) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert sorted(codes) == [204, 404, 404, 404, 404, 404]


def test_the_api_and_describe_json_give_a_job_the_same_record(server, tmp_path):
    """One typed record out of every door: GET /jobs/NAME and `dtrain describe NAME --json`."""
    r = server.http.post("/api/v1/jobs", json={"name": "jf", "command": ["true"], "working_dir": str(tmp_path)})
    assert r.status_code == 201, r.text
    api = server.http.get("/api/v1/jobs/jf/wait", params={"timeout": 120}).json()
    proc = server.dtrain()("describe", "jf", "--json")
    cli = json.loads(proc.stdout)
    assert set(api) == set(cli)
    assert api == cli
    assert api["extra"]["cwd"] == str(tmp_path) and api["project"] == "default" and api["kind"] == "Train"


def test_a_volume_restored_from_a_snapshot_whose_name_was_reused_points_at_the_earlier_one(server):
    http = server.http
    assert http.post("/api/v1/volumes", json={"name": "v", "size": "1Mi"}).status_code == 201
    assert http.post("/api/v1/snapshots", json={"volume": "v", "name": "s1"}).status_code == 201
    assert http.post("/api/v1/snapshots/s1/restore", json={"to": "r1"}).status_code == 201
    restored = http.get("/api/v1/volumes/r1").json()["created"]
    assert http.delete("/api/v1/snapshots/s1").status_code == 200
    while time.time() < int(restored) + 1:  # times have whole seconds: the new s1 in a later one
        time.sleep(0.05)
    assert http.post("/api/v1/snapshots", json={"volume": "v", "name": "s1"}).status_code == 201
    graph = http.get("/api/v1/lineage").json()
    edges = {(e["source"], e["label"], e["target"]) for e in graph["edges"]}
    assert ("snapshot:s1@r1", "restored", "volume:r1") in edges and ("snapshot:s1", "restored", "volume:r1") not in edges
    assert {"id": "snapshot:s1@r1", "kind": "snapshot", "name": "s1", "status": "gone", "project": None,
            "count": None} in graph["nodes"]
    assert ("volume:v", "snapshot", "snapshot:s1") in edges


def test_the_dashboards_files_are_checked_again_at_every_load(server):
    """Served without a Cache-Control, the page's scripts were kept by browsers for a share of their
    age without asking: after an upgrade, the new index.html ran the old app.js. Now each load asks,
    and an unchanged file costs a 304."""
    for path in ("/static/app.js", "/static/charts.js", "/static/style.css"):
        r = server.http.get(path)
        assert r.status_code == 200 and r.headers["cache-control"] == "no-cache", (path, r.headers)
        again = server.http.get(path, headers={"if-none-match": r.headers["etag"]})
        assert again.status_code == 304 and again.headers["cache-control"] == "no-cache", again.headers
    assert server.http.get("/").headers["cache-control"] == "no-store"

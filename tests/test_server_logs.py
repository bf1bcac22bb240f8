"""A job's logs over HTTP, as `dtrain logs` gives them: a pod that cannot start beside pods that
wrote lines, on the list and on the live stream; bounds on `since`; a long log; a stream whose
reader stalls.

The Kubernetes tests drive the official client against the shipped fake API server through a
real uvicorn server (test_server_kubernetes's fixture); the local ones run a real job.
"""

from __future__ import annotations

import json
import tracemalloc

import httpx
import pytest

from server_util import ThreadServer, wait_until

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
pytest.importorskip("kubernetes", reason="the 'kubernetes' extra is not installed")

from dtrain.client import Client  # noqa: E402
from dtrain.server.app import create_app  # noqa: E402
from dtrain.spec import JobSpec  # noqa: E402

from test_k8s_faults import _set_container  # noqa: E402
from test_server_kubernetes import NS, k8s_api  # noqa: E402,F401  (its fixture)

MiB = 1 << 20
HEALTHY = ["train-master-0 step 1", "train-worker-0 step 1", "train-master-0 step 2", "train-worker-0 step 2"]
STUCK = "pod train-worker-1 of job 'train' cannot start (ImagePullBackOff: pull access denied)"


def _one_worker_stuck(http: httpx.Client, cluster) -> None:
    """A three-pod PyTorchJob whose master and first worker wrote lines, while the second
    worker's image cannot be pulled."""
    r = http.post("/api/v1/jobs", json={"name": "train", "command": ["python", "train.py"], "project": "lanes",
                                        "launcher": "torchrun", "processes": 3, "backend": "kubernetes"})
    assert r.status_code == 201, r.text
    cluster.run_pods(NS, "train")
    for i, pod in enumerate(("train-master-0", "train-worker-0")):
        cluster.append_log(NS, pod, f"{pod} step 1", at=1000.0 + i)
        cluster.append_log(NS, pod, f"{pod} step 2", at=1010.0 + i)
    cluster.set_pod_phase(NS, "train-worker-1", "Pending")
    _set_container(cluster, "train-worker-1", {"waiting": {"reason": "ImagePullBackOff",
                                                           "message": "pull access denied"}})


def test_a_stuck_pod_keeps_the_other_pods_lines_and_is_named_last(k8s_api):
    """One worker at ImagePullBackOff turned the whole answer into a 502 and the lines the master
    and the other worker had written were lost; `dtrain logs` prints them, then the error."""
    server, cluster = k8s_api
    with httpx.Client(base_url=server.url, timeout=60) as http:
        _one_worker_stuck(http, cluster)
        r = http.get("/api/v1/jobs/train/logs")
        assert r.status_code == 200, r.text
        *lines, failure = r.json()
        assert [x["text"] for x in lines] == HEALTHY and [x["rank"] for x in lines] == [0, 1, 0, 1]
        assert set(failure) == {"error", "kind"} and failure["kind"] == "PodStuck"
        assert failure["error"].startswith(STUCK) and "\n" not in failure["error"]

        *lines, failure = http.get("/api/v1/jobs/train/logs", params={"tail": 1}).json()
        assert [x["text"] for x in lines] == ["train-worker-0 step 2"] and failure["error"].startswith(STUCK)
        healthy_rank = http.get("/api/v1/jobs/train/logs", params={"rank": 1}).json()
        assert [x["text"] for x in healthy_rank] == ["train-worker-0 step 1", "train-worker-0 step 2"]

        only_stuck = http.get("/api/v1/jobs/train/logs", params={"rank": 2})  # nothing to keep: the error is the answer
        assert only_stuck.status_code == 502 and only_stuck.json()["error"].startswith(STUCK)
        missing = http.get("/api/v1/jobs/nope/logs")
        assert missing.status_code == 404 and missing.json()["kind"] == "NotFoundError"


def _events(http: httpx.Client, path: str, **params) -> list[tuple[str, str]]:
    """(event, data) of every event of a server-sent stream, read until the server ends it."""
    out, kind = [], "message"
    with http.stream("GET", path, params=params) as resp:
        assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
        for line in resp.iter_lines():
            if line.startswith("event: "):
                kind = line.removeprefix("event: ")
            elif line.startswith("data: "):
                out.append((kind, line.removeprefix("data: ")))
                kind = "message"
    return out


@pytest.mark.timeout(120)
def test_a_log_stream_with_a_stuck_pod_ends_with_an_error_event(k8s_api):
    """The stream's reader thread died with a traceback on the server's stderr, and the stream sent
    keepalives for ever: the error never reached the user and the stream never ended."""
    server, cluster = k8s_api
    with httpx.Client(base_url=server.url, timeout=60) as http:
        _one_worker_stuck(http, cluster)
        *lines, (kind, data) = _events(http, "/api/v1/jobs/train/logs/stream", rank=2)
        assert lines == [] and kind == "error"
        assert json.loads(data)["error"].startswith(STUCK) and json.loads(data)["kind"] == "PodStuck"

        *lines, (kind, data) = _events(http, "/api/v1/jobs/train/logs/stream")
        assert kind == "error" and json.loads(data)["error"].startswith(STUCK)
        assert {k for k, _ in lines} <= {"message"}
        assert {json.loads(d)["text"] for _, d in lines} <= set(HEALTHY)  # the pods' readers race the error

        cluster.set_pod_phase(NS, "train-master-0", "Succeeded")  # a healthy pod that ended: its lines, then the end
        *lines, end = _events(http, "/api/v1/jobs/train/logs/stream", rank=0)
        assert [json.loads(d)["text"] for _, d in lines] == ["train-master-0 step 1", "train-master-0 step 2"]
        assert end[0] == "end" and set(json.loads(end[1])) == {"status"}  # the job's, as the stream ends
        *lines, end = _events(http, "/api/v1/jobs/train/logs/stream", rank=0, since=1005)  # as `dtrain logs -f --since`
        assert [json.loads(d)["text"] for _, d in lines] == ["train-master-0 step 2"] and end[0] == "end"
        streams = server.server.config.app.state.streams
        wait_until(lambda: streams.open == 0, what="every reader thread gone")  # it ends just after its last event


@pytest.mark.parametrize("since", ["nan", "inf", "-inf", "1e400", "-1", "253402300800"])
def test_since_beyond_any_time_is_refused_in_one_line(k8s_api, since):
    """`since=nan` (or inf) reached the Kubernetes backend's arithmetic (sinceSeconds): 500 and a
    traceback. Now the schema bounds it, on the stream as well."""
    server, cluster = k8s_api
    with httpx.Client(base_url=server.url, timeout=60) as http:
        _one_worker_stuck(http, cluster)
        for path in ("/api/v1/jobs/train/logs", "/api/v1/jobs/train/logs/stream"):
            r = http.get(path, params={"since": since, "rank": 0})
            assert r.status_code == 422, (path, r.status_code, r.text)
            error = r.json()["error"]
            assert error.startswith("invalid since ") and "use a unix time in seconds from 0 to" in error, error
            assert "\n" not in error
        kept = http.get("/api/v1/jobs/train/logs", params={"since": 1005, "rank": 0})
        assert kept.status_code == 200 and [x["text"] for x in kept.json()] == ["train-master-0 step 2"], kept.text


@pytest.fixture
def local_api(home, tmp_path):
    server = ThreadServer(create_app(lambda: Client(home=home), sample_every=3600))
    yield server
    server.stop()


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_long_log_is_sent_without_being_held_whole(local_api, home, tmp_path):
    """The route built every line of the log as a model in one list before it sent a byte: 100,000
    lines (a 9.6 MiB answer) took 80 MiB of the server's memory, and a days-long job's log could
    take all of it. Now the server holds a few batches of lines and the reader's block, whatever the log."""
    Client(home=home).submit(JobSpec(name="big", command=["true"], working_dir=str(tmp_path)))
    assert httpx.get(local_api.url + "/api/v1/jobs/big/wait", params={"timeout": 120}, timeout=150).json()[
        "status"] == "Succeeded"
    count, text = 100_000, "x" * 60
    with open(home / "jobs" / "big" / "logs" / "rank-0.log", "a") as log:  # as rankrun writes them
        log.write(f"2026-01-01T00:00:00.000000Z {text}\n" * count)
    item = {"rank": 0, "time": 1767225600.0, "text": text}
    assert httpx.get(local_api.url + "/api/v1/jobs/big/logs", params={"tail": 2}).json() == [item] * 2  # warm
    size, items, head, last = 0, 0, b"", b""
    tracemalloc.start()
    try:
        with httpx.stream("GET", local_api.url + "/api/v1/jobs/big/logs", timeout=120) as resp:
            assert resp.status_code == 200 and resp.headers["content-type"] == "application/json"
            for chunk in resp.iter_bytes():
                head, last, size = head or chunk[:1], chunk[-1:] or last, size + len(chunk)
                items += chunk.count(b"}")  # one a line: the text holds none
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert head == b"[" and last == b"]" and items == count
    assert peak < 8 * MiB, f"the server held {peak / MiB:.1f} MiB at its peak for a {size / MiB:.1f} MiB answer"



@pytest.mark.slow
@pytest.mark.timeout(180)
def test_a_stream_whose_reader_stalled_ends_saying_so(local_api, home, tmp_path, monkeypatch):
    """A follower that took no line for GONE_AFTER_S (`curl -N ... | less`, paused) was dropped by the
    server's reader thread, but its stream went on with keepalives for ever: no more lines, no end,
    and nothing said why. Now the lines queued before the drop arrive, in order, then one error event."""
    from dtrain.server import routes_jobs

    monkeypatch.setattr(routes_jobs, "GONE_AFTER_S", 1.0)
    Client(home=home).submit(JobSpec(name="chatty", command=["true"], working_dir=str(tmp_path)))
    assert httpx.get(local_api.url + "/api/v1/jobs/chatty/wait", params={"timeout": 120}, timeout=150).json()[
        "status"] == "Succeeded"
    count = 100_000  # more than the sockets' buffers and the queue hold: the reader thread must wait for us
    with open(home / "jobs" / "chatty" / "logs" / "rank-0.log", "a") as log:
        log.writelines(f"2026-01-01T00:00:00.000000Z line {i}\n" for i in range(count))
    streams = local_api.server.config.app.state.streams
    with httpx.Client(base_url=local_api.url, timeout=60) as http:
        with http.stream("GET", "/api/v1/jobs/chatty/logs/stream") as resp:
            assert resp.status_code == 200
            wait_until(lambda: streams.open == 0, what="the reader thread giving up on a reader that reads nothing")
            events, kind = [], "message"
            for line in resp.iter_lines():
                if line.startswith("event: "):
                    kind = line.removeprefix("event: ")
                elif line.startswith("data: "):
                    events.append((kind, json.loads(line.removeprefix("data: "))))
                    kind = "message"
    *lines, (kind, error) = events
    assert 0 < len(lines) < count and [x["text"] for _, x in lines] == [f"line {i}" for i in range(len(lines))]
    assert kind == "error" and error == {"kind": "HTTPError", "error": "the lines of job 'chatty' were not read for "
                                         "1s, so the server stopped sending them; read them again (with tail or "
                                         "since for fewer)"}

"""The server under load and faults: concurrent requests, forks from a threaded server, bad metrics files."""

from __future__ import annotations

import concurrent.futures
import os
import threading
import weakref
from pathlib import Path

import httpx
import pytest

from conftest import Dtrain
from server_util import ServerProcess, wait_until

pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
from dtrain.server import curves  # noqa: E402
from dtrain.server.auth import TOKEN_FILE, load_or_create_token  # noqa: E402
from dtrain.server.clients import Clients  # noqa: E402


def test_a_fork_leaves_the_clients_of_other_threads_alone():
    """A submit forks (procs.spawn_detached) while other worker threads hold Clients. A forked
    child clears every other thread's threading.local: the Clients kept there were freed in the
    child, and their finalizers closed SQLite connections, which needs SQLite's global mutex
    (held, under load, by a thread that the child no longer has): the child hung for ever."""
    read, write = os.pipe()

    class Held:
        pass

    finalizers: list[weakref.finalize] = []

    def make() -> Held:
        held = Held()
        finalizers.append(weakref.finalize(held, os.write, write, b"x"))  # as db.py closes a Client's connection
        return held

    clients = Clients(make)
    ready, done = threading.Barrier(5), threading.Event()

    def worker() -> None:
        clients.get()
        ready.wait()
        done.wait()
    threads = [threading.Thread(target=worker) for _ in range(4)]
    for t in threads:
        t.start()
    try:
        ready.wait()
        pid = os.fork()
        if pid == 0:
            os._exit(0)  # whatever the fork itself freed has run by now
        os.waitpid(pid, 0)
    finally:
        done.set()
        for t in threads:
            t.join()
    for f in finalizers:
        f.detach()  # the pipe closes next; the Clients go with this test
    os.close(write)
    with os.fdopen(read, "rb") as f:
        assert f.read() == b""  # no Client was finalized: the parent's own are still alive


def test_clients_of_ended_threads_are_dropped():
    """Log streams and waits run in threads of their own: their Clients must not pile up."""
    class Held:
        pass
    alive: list[weakref.finalize] = []
    clients = Clients(lambda: (held := Held(), alive.append(weakref.finalize(held, lambda: None)))[0])
    for _ in range(3):
        t = threading.Thread(target=clients.get)
        t.start()
        t.join()
    mine = clients.get()
    assert clients.get() is mine and len(alive) == 4
    assert [f.alive for f in alive] == [False, False, False, True]


@pytest.mark.slow
def test_concurrent_submits_and_reads_all_answer(home, tmp_path):
    """50 submits and 50 reads at once through real HTTP: every one answers, none 500 or 'locked'."""
    server = ServerProcess(home, env={"DTRAIN_GPUS": "0"}, cwd=tmp_path)

    def submit(i: int) -> httpx.Response:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            return http.post("/api/v1/jobs", json={"name": f"j{i}", "command": ["true"],
                                                   "working_dir": str(tmp_path)})

    def read(i: int) -> httpx.Response:
        with httpx.Client(base_url=server.url, timeout=120) as http:
            return http.get(("/api/v1/jobs", "/api/v1/volumes", "/metrics")[i % 3])
    try:
        with concurrent.futures.ThreadPoolExecutor(50) as pool:
            made = [pool.submit(submit, i) for i in range(50)]
            reads = [pool.submit(read, i) for i in range(50)]
            answers = [f.result() for f in made + reads]
        assert [r.status_code for r in answers] == [201] * 50 + [200] * 50, [r.text for r in answers if r.is_error]
        jobs = wait_until(lambda: (js := server.http.get("/api/v1/jobs").json()) and
                          all(j["status"] == "Succeeded" for j in js) and js, what="every job done")
        assert sorted(j["name"] for j in jobs) == sorted(f"j{i}" for i in range(50))
    finally:
        server.stop()


# The job writes records around a line nested deeper than Python's JSON reader recurses.
DEEP = ("import json, os, time\n"
        "with open(os.environ['DTRAIN_METRICS_FILE'], 'a') as f:\n"
        "    f.write(json.dumps({'step': 1, 'loss': 2.0, 'images_per_s': 5.0}) + '\\n')\n"
        "    f.write('[' * 5000 + '\\n')\n"
        "    f.write(json.dumps({'step': 2, 'loss': 1.0}) + '\\n')\n"
        "print('logged', flush=True)\n"
        "while not os.path.exists('GO'): time.sleep(0.1)\n")


def test_a_metrics_line_nested_too_deeply_is_skipped(home, tmp_path):
    """json.loads raises RecursionError (not ValueError) on it: the curve and /metrics answered 500."""
    server = ServerProcess(home, env={"DTRAIN_GPUS": "0"}, cwd=tmp_path)
    try:
        r = server.http.post("/api/v1/jobs", json={"name": "deep", "command": ["python", "-c", DEEP],
                                                   "working_dir": str(tmp_path)})
        assert r.status_code == 201, r.text
        wait_until(lambda: any(ln["text"] == "logged" for ln in server.http.get("/api/v1/jobs/deep/logs").json()),
                   what="the job's metrics logged")
        r = server.http.get("/api/v1/jobs/deep/metrics")
        assert r.status_code == 200, r.text
        assert [(x["step"], x["loss"]) for x in r.json()] == [(1, 2.0), (2, 1.0)]
        scrape = server.http.get("/metrics")
        assert scrape.status_code == 200
        assert 'dtrain_job_step{job_name="deep",project="default"} 2.0' in scrape.text
        assert 'dtrain_job_images_per_second{job_name="deep",project="default"} 5.0' in scrape.text
    finally:
        (tmp_path / "GO").touch()
        server.stop()


class _Job:
    """What curves reads of a JobInfo: the local backend's job folder."""

    def __init__(self, folder: Path):
        self.extra = {"job_dir": str(folder)}


def _bytes_read() -> int:
    return int(dict(line.split(": ") for line in Path("/proc/self/io").read_text().splitlines())["rchar"])


def test_a_curve_reads_the_end_of_a_huge_metrics_file_only(tmp_path):
    """The dashboard asks for the curve every few seconds; the whole file was read (and parsed)
    each time, and a line without an end was held whole in memory."""
    path = tmp_path / curves.METRICS_FILE
    with open(path, "wb") as f:
        f.truncate(64 << 20)  # a hole: 64 MiB of NULs and no newline, then records
        f.seek(0, os.SEEK_END)
        f.write(b"\n" + b"".join(b'{"step": %d, "loss": 0.5}\n' % i for i in range(100)))
    before = _bytes_read()
    records = curves.curve(_Job(tmp_path), last=10)
    assert _bytes_read() - before < 4 << 20
    assert [r["step"] for r in records] == list(range(90, 100))
    assert [r["step"] for r in curves.curve(_Job(tmp_path), last=1000)] == list(range(100))  # the NUL line skipped


def test_a_metrics_file_that_is_a_fifo_or_symlink_shows_no_curve(tmp_path):
    (tmp_path / "real.jsonl").write_text('{"step": 1}\n')
    os.symlink(tmp_path / "real.jsonl", tmp_path / curves.METRICS_FILE)
    assert curves.curve(_Job(tmp_path), last=10) == [] and curves.latest(_Job(tmp_path), ("step",)) == {}
    os.unlink(tmp_path / curves.METRICS_FILE)
    os.mkfifo(tmp_path / curves.METRICS_FILE)
    assert curves.curve(_Job(tmp_path), last=10) == [] and curves.latest(_Job(tmp_path), ("step",)) == {}


def test_servers_starting_at_once_share_one_token(tmp_path):
    """Two `dtrain server --host 0.0.0.0` starting at the same moment on one home: the token
    file was created, then written; the second server could read it empty in between and
    refuse to start ("the server token ... is too short; remove it"), which would end the first's."""
    for i in range(100):
        home = tmp_path / str(i)
        home.mkdir()
        start = threading.Barrier(2)
        got: list[object] = []

        def serve() -> None:
            start.wait()
            try:
                got.append(load_or_create_token(home))
            except Exception as err:  # noqa: BLE001  the refusal is what this test looks for
                got.append(err)
        threads = [threading.Thread(target=serve) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(isinstance(x, tuple) for x in got), got  # no server refused to start
        assert sorted(made for _, made in got) == [False, True], got  # one made it, the other read it
        assert got[0][0] == got[1][0] == (home / TOKEN_FILE).read_text().strip()
        assert sorted(p.name for p in home.iterdir()) == [TOKEN_FILE]  # no scratch file left


def test_a_server_without_the_injected_gpus_says_which_a_job_was_scheduled_with(tmp_path, monkeypatch):
    """A GPU job the CLI scheduled with DTRAIN_GPUS=2, suspended, then resumed by a `dtrain server`
    started from a shell without it: the refusal names the inventory the job was scheduled with and
    how to start the server (it said this machine has no GPU, to drop --gpu, of a job already there)."""
    from dtrain.backends.local.devices import inventory

    monkeypatch.delenv("DTRAIN_GPUS", raising=False)
    if inventory():
        pytest.skip("this machine has GPUs: a server without DTRAIN_GPUS schedules on them")
    home = tmp_path / "home"
    cli = Dtrain(home, env={"DTRAIN_GPUS": "2"})
    cli("submit", "held", "--gpu", "1", "--", "sh", "-c", "sleep 600")
    cli("suspend", "held")
    server = ServerProcess(home, cwd=tmp_path)
    try:
        refused = server.http.post("/api/v1/jobs/held/resume")
        assert refused.status_code == 409, refused.text  # the CLI's QuotaError
        assert refused.json()["error"] == (
            "job 'held' was scheduled with DTRAIN_GPUS=2 but this process sees 0 GPUs (DTRAIN_GPUS unset): "
            "start it with the same inventory, e.g. 'DTRAIN_GPUS=2 dtrain server' or 'DTRAIN_GPUS=2 dtrain resume held'")
        assert server.http.get("/api/v1/jobs/held").json()["status"] == "Suspended"  # nothing changed
    finally:
        server.stop()
    cli("resume", "held")  # with the inventory it was scheduled with, it is queued again
    cli("delete", "held")

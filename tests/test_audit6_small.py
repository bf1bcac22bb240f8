"""Small defects of the job and snapshot verbs and the HTTP API (audit 6, small): kubectl's
--tail=-1, `wait job X` and several jobs, snapshot verify's words, snapshot list of an unknown
volume or job, a NaN `since`."""

from __future__ import annotations

import json
import os

import pytest

from dtrain.storage import Storage


@pytest.fixture
def done(dt):
    """A finished one-process job named three printing three lines."""
    dt("submit", "three", "--", "sh", "-c", "echo a; echo b; echo c")
    assert dt.wait_for("three", {"Succeeded"})["status"] == "Succeeded"
    return dt


def test_logs_tail_minus_one_is_every_line_as_kubectl(done):
    """kubectl's --tail default is -1 (all lines): `dtrain logs JOB --tail=-1` was refused."""
    dt = done
    every = dt("logs", "three").stdout
    assert every.splitlines() == ["a", "b", "c"]
    for argv in (["--tail=-1"], ["-t", "-1"]):
        assert dt("logs", "three", *argv).stdout == every
    assert dt("logs", "three", "-t", "1").stdout == "c\n"
    for bad in ("-2", "-100"):  # only -1 among the negatives
        proc = dt("logs", "three", f"--tail={bad}", check=False)
        assert proc.returncode == 2 and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert f"invalid tail {bad}" in proc.stderr and "-1 for all" in proc.stderr
    assert "-1" in dt("logs", "--help").stdout


@pytest.mark.slow
def test_wait_takes_the_word_job_and_several_jobs(done):
    """`dtrain wait job X` was refused though `describe job X` takes it; kubectl wait takes several."""
    dt = done
    proc = dt("wait", "job", "three", check=False)
    assert proc.returncode == 0 and proc.stdout.startswith("three: Succeeded"), proc.stderr
    dt("submit", "bad", "--", "false")
    proc = dt("wait", "three", "bad", check=False)
    assert proc.returncode == 1, proc.stderr
    assert [line.split(":")[0] for line in proc.stdout.splitlines()] == ["three", "bad"]
    assert dt("wait", "job", "three", "three").returncode == 0
    dt("submit", "long", "--", "sleep", "60")
    proc = dt("wait", "three", "long", "--timeout", "1", check=False)
    assert proc.returncode == 124 and "'long'" in proc.stderr and len(proc.stderr.splitlines()) == 1
    proc = dt("wait", "three", "nosuch", check=False)  # an unknown name before any waiting
    assert proc.returncode == 2 and "no job named 'nosuch'" in proc.stderr and proc.stdout == ""
    assert "exit 0 if all succeeded, 1 if any did not" in " ".join(dt("wait", "--help").stdout.split())


def _corrupt_first_file(home, snapshot: str) -> None:
    """Flip bytes of the first file's first object of `snapshot` in its pack."""
    storage = Storage(home)
    entries = storage.engine.load(storage.get_snapshot(snapshot).id).entries
    path, offset, _ = storage.engine.packs.locate(next(e.chunks[0] for e in entries if e.kind == "file"))
    os.chmod(path, 0o644)
    with open(path, "r+b") as f:
        f.seek(offset + 10)
        f.write(b"flipped bits")
    storage.close()


def test_snapshot_verify_names_hits_in_words_and_a_second_verify_still_says_corrupt(dt):
    """hits printed as a Python tuple ('s1', 'f.bin'); a second verify said 'missing' for the
    object the first found corrupt (and took out of the store)."""
    dt("volume", "create", "vd")
    (dt.home / "volumes/vd/data/f.bin").write_bytes(os.urandom(100_000))
    dt("snapshot", "create", "vd", "--name", "s1")
    _corrupt_first_file(dt.home, "s1")
    first = dt("snapshot", "verify", "s1", check=False)
    assert first.returncode == 1 and "problem: corrupt\n" in first.stdout
    assert "hits: f.bin in s1\n" in first.stdout and "('" not in first.stdout, first.stdout
    second = dt("snapshot", "verify", "s1", check=False)
    assert second.returncode == 1, second.stderr  # still damaged
    assert "problem: corrupt, found by an earlier verify and set aside" in second.stdout, second.stdout
    assert "missing" not in second.stdout
    (damage,) = json.loads(dt("snapshot", "verify", "s1", "--json", check=False).stdout)["damaged"]
    assert damage["problem"] == "corrupt" and damage["earlier"] is True


def test_snapshot_list_of_a_volume_or_job_that_never_was_is_an_error(done):
    """--volume NOSUCH / --job NOSUCH printed an empty table and exited 0."""
    dt = done
    for flag, kind, fix in (("--volume", "volume", "dtrain volume list"), ("--job", "job", "dtrain list jobs")):
        proc = dt("snapshot", "list", flag, "nosuch", check=False)
        assert proc.returncode == 2 and proc.stdout == "" and len(proc.stderr.splitlines()) == 1, proc.stderr
        assert f"no {kind} named 'nosuch'" in proc.stderr and fix in proc.stderr
    assert dt.json("snapshot", "list", "--job", "three") == []  # a job that is there, without snapshots
    dt("volume", "create", "gone")
    assert dt.json("snapshot", "list", "--volume", "gone") == []
    dt("snapshot", "create", "gone", "--name", "kept")
    dt("volume", "delete", "gone")  # its snapshot remains, and is listed by the volume's name
    assert [s["name"] for s in dt.json("snapshot", "list", "--volume", "gone")] == ["kept"]


def test_a_since_or_timeout_that_is_no_finite_number_is_named_so(done):
    """`?since=nan` answered 'Input should be less than or equal to 253402300799'."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from fastapi.testclient import TestClient

    from dtrain.client import Client
    from dtrain.server.app import create_app
    http = TestClient(create_app(lambda: Client(home=done.home)), base_url="http://127.0.0.1:8000")
    for path, field in (("/api/v1/jobs/three/logs", "since"), ("/api/v1/jobs/three/logs/stream", "since"),
                        ("/api/v1/nodes/history", "since"), ("/api/v1/jobs/three/wait", "timeout")):
        for value in ("nan", "inf", "-inf", "NaN"):
            r = http.get(f"{path}?{field}={value}")
            assert r.status_code == 422, (path, value, r.text)
            said = r.json()["error"]  # the SDK's line (the CLI's for a timeout), naming the value as typed
            assert said.startswith(f"invalid {'--timeout' if field == 'timeout' else field} "), r.text
            assert ("use a unix time in seconds" if field == "since" else "use seconds from 0 to 600") in said, r.text
    assert http.get("/api/v1/jobs/three/logs?since=-1").status_code == 422  # the bounds stay
    assert [line["text"] for line in http.get("/api/v1/jobs/three/logs?since=0").json()] == ["a", "b", "c"]

"""Local backend faults (audit 6): a supervisor lost at the wrong moment, a database held locked,
a state database removed under a running job."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from conftest import Dtrain, rank_record, stored_job


def _lose_the_supervisor_after_its_ranks_exited_0(dt: Dtrain, name: str) -> int:
    """Freeze job `name`'s supervisor while its only rank runs, let the rank exit 0, then kill the
    supervisor: what a kill -9 (or a database write refused) between the exit and its record leaves."""
    rank_record(dt.home, name, 0)
    pid = stored_job(dt.home, name)["supervisor_pid"]
    os.kill(pid, signal.SIGSTOP)
    path = dt.home / "jobs" / name / "ranks" / "rank-0.json"
    deadline = time.monotonic() + 60
    while json.loads(path.read_text()).get("exit_code") is None:
        assert time.monotonic() < deadline, "the rank never ended"
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    return pid


@pytest.mark.slow
def test_a_supervisor_lost_after_every_rank_exited_0_leaves_the_job_succeeded_not_trained_again(tmp_path):
    """Before: the next command relaunched the job (restarts left: it trained again) or read it
    Failed, 'lost ... no restarts left', though every process had exited 0."""
    dt = Dtrain(tmp_path / "home")
    runs = tmp_path / "runs.txt"
    dt("submit", "once", "--max-restarts", "2", "--", "bash", "-c", f"sleep 1; echo run >> {runs}")
    dt("submit", "last", "--", "bash", "-c", "sleep 1")
    pids = [_lose_the_supervisor_after_its_ranks_exited_0(dt, name) for name in ("once", "last")]
    for name, pid in zip(("once", "last"), pids):
        job = dt.wait_for(name, {"Succeeded", "Failed"}, timeout=60)
        assert (job["status"], job["restarts"]) == ("Succeeded", 0), job
        assert job["message"].startswith("all processes exited 0; its supervisor (pid "
                                         f"{pid}) was lost before it recorded this"), job["message"]
    time.sleep(1.5)  # a relaunched attempt would have run again by now
    assert runs.read_text() == "run\n"
    assert dt.status("once") == "Succeeded"


def test_a_supervisor_lost_after_every_rank_exited_0_before_its_snapshot_says_how_to_take_it(tmp_path):
    dt = Dtrain(tmp_path / "home")
    dt("volume", "create", "data")
    dt("submit", "snap", "--snapshot-on-success", "data", "--max-restarts", "2", "--pvc", "data:/mnt/data", "--",
       "bash", "-c", "sleep 1; echo run >> /mnt/data/runs.txt")
    _lose_the_supervisor_after_its_ranks_exited_0(dt, "snap")
    job = dt.wait_for("snap", {"Succeeded", "Failed"}, timeout=60)
    assert (job["status"], job["restarts"]) == ("Failed", 0), job
    assert job["message"].endswith("after every process exited 0, while taking the snapshot of volume data: the "
                                   "results are on the volume; take it with 'dtrain snapshot create data --job "
                                   "snap'"), job["message"]
    assert (dt.home / "volumes" / "data" / "data" / "runs.txt").read_text() == "run\n"


def test_a_database_locked_past_the_busy_timeout_is_one_line_naming_the_holder(tmp_path, monkeypatch, capsys):
    """Before: a traceback ending in sqlite3.OperationalError: database is locked, after 30 s."""
    import subprocess
    import sys

    from dtrain import db
    from dtrain.cli.main import main

    home = tmp_path / "home"
    Dtrain(home)("list")  # the database exists
    holder = subprocess.Popen([sys.executable, "-c", f"import sqlite3, time; c = sqlite3.connect({str(home / 'state.db')!r}, "
                               f"isolation_level=None); c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); "
                               f"time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        monkeypatch.setenv("DTRAIN_HOME", str(home))
        monkeypatch.setattr(db, "BUSY_S", 0.5)
        assert main(["project", "create", "team"]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"dtrain: error: {home / 'state.db'} is held locked by pid {holder.pid} (")
        assert err.rstrip().endswith("for more than 0.5 s, so this command could not write it: wait for that "
                                     "process to finish, or stop it, and retry; nothing stored was changed")
    finally:
        holder.kill()
        holder.wait()
    assert "team" not in Dtrain(home)("project", "list").stdout


@pytest.mark.slow
def test_a_job_whose_state_database_was_removed_is_stopped_not_left_running_unseen(tmp_path):
    """Before: the job ran on, seen by no command (`list` empty, `delete` 'no job named'), and a job
    submitted again under its name ran beside it in the same folder."""
    from dtrain.procs import Ident

    dt = Dtrain(tmp_path / "home")
    dt("submit", "gone", "--", "sleep", "300")
    rank = Ident.from_record(rank_record(dt.home, "gone", 0))
    sup = stored_job(dt.home, "gone")["supervisor_pid"]
    for f in dt.home.glob("state.db*"):
        f.unlink()
    deadline = time.monotonic() + 30
    while rank.alive() or os.path.exists(f"/proc/{sup}"):
        assert time.monotonic() < deadline, "the forgotten job still runs"
        time.sleep(0.1)
    log = (dt.home / "jobs" / "gone" / "supervisor.log").read_text()
    assert "the state database" in log and "was removed or replaced while the job ran" in log, log
    assert dt.json("list", "-A") == []


def test_the_http_api_answers_a_locked_database_with_the_clis_line_not_a_500(tmp_path, monkeypatch):
    """The dashboard and API answered 500 (an sqlite3.OperationalError) where the CLI gives one line."""
    import subprocess
    import sys

    import httpx
    from server_util import ThreadServer

    from dtrain import db
    from dtrain.client import Client
    from dtrain.server.app import create_app

    home = tmp_path / "home"
    Dtrain(home)("list")
    monkeypatch.setattr(db, "BUSY_S", 0.5)
    server = ThreadServer(create_app(lambda: Client(home=home), sample_every=3600))
    holder = subprocess.Popen([sys.executable, "-c", f"import sqlite3, time; c = sqlite3.connect({str(home / 'state.db')!r}, "
                               f"isolation_level=None); c.execute('BEGIN IMMEDIATE'); print('locked', flush=True); "
                               f"time.sleep(60)"], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "locked"
        answer = httpx.post(f"{server.url}/api/v1/projects", json={"name": "team"}, timeout=60)
        assert answer.status_code == 503, answer.text
        assert answer.json()["error"].startswith(f"{home / 'state.db'} is held locked by pid {holder.pid} (")
    finally:
        holder.kill()
        holder.wait()
        server.stop()
    assert "team" not in Dtrain(home)("project", "list").stdout


def test_the_last_status_is_written_again_while_the_database_stays_locked(monkeypatch, capsys):
    """A database held locked past the busy timeout when a job ended made the supervisor's last write
    fail: it exited with a traceback and the job read 'lost' without its exit code."""
    import sqlite3

    from dtrain import db
    from dtrain.backends.local import supervisor

    monkeypatch.setattr(db, "_opened", set())
    monkeypatch.setattr(supervisor.time, "sleep", lambda s: None)
    tries = []

    def write():
        tries.append(1)
        if len(tries) < 3:
            raise sqlite3.OperationalError("database is locked")
        return "written"

    assert supervisor.written_when_unlocked(write, what="job j's end", give_up_s=60) == "written"
    assert len(tries) == 3
    said = capsys.readouterr().err.splitlines()
    assert len(said) == 2 and said[0].startswith("could not record job j's end yet: ") and "trying again" in said[0]

    def failing(message: str):
        def write():
            raise sqlite3.OperationalError(message)
        return write

    with pytest.raises(sqlite3.OperationalError, match="disk I/O"):  # not a lock: not retried
        supervisor.written_when_unlocked(failing("disk I/O error"), what="x", give_up_s=60)
    with pytest.raises(sqlite3.OperationalError, match="locked"):  # given up at the deadline
        supervisor.written_when_unlocked(failing("database is locked"), what="x", give_up_s=0)

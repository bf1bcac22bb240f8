"""Local backend and CLI leftovers: the GPU inventory a server runs with, a supervisor meeting a full
disk as it records itself, a node selector this machine cannot meet, the exec refusals' counts."""

from __future__ import annotations

import select
import time

import pytest

from conftest import Dtrain, job_store, stored_job
from test_local_leftovers2 import _kill_supervisor


def _first_stderr_line(server) -> str:
    """The server's first line on stderr, printed before its banner: '' if it printed none by then."""
    poll = select.poll()
    poll.register(server.proc.stderr, select.POLLIN)
    return server.proc.stderr.readline() if poll.poll(0) else ""


def test_a_server_started_without_the_injected_gpus_warns_and_a_queued_job_it_relaunches_names_them(tmp_path, monkeypatch):
    """`dtrain server` started from a shell without the DTRAIN_GPUS its jobs were submitted with said
    nothing at its start, and the queued GPU job whose lost supervisor it restarted then read 'this
    machine now has 0: ... delete it', as if the machine had lost its GPUs."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from server_util import ServerProcess

    from dtrain.backends.local.devices import inventory

    monkeypatch.delenv("DTRAIN_GPUS", raising=False)
    if inventory():
        pytest.skip("this machine has GPUs: a server without DTRAIN_GPUS schedules on them")
    home = tmp_path / "home"
    cli = Dtrain(home, env={"DTRAIN_GPUS": "2"})
    cli("submit", "holder", "-g", "2", "--", "sleep", "300")
    cli.wait_for("holder", {"Running"})
    cli("submit", "big", "-g", "2", "--", "true")
    cli("submit", "cpu", "--", "sleep", "300")  # asks for no GPU: any inventory runs it
    cli.wait_for("big", {"Pending"})
    _kill_supervisor(cli, "big")
    cli("delete", "holder")
    server = ServerProcess(home, cwd=tmp_path)
    try:
        assert _first_stderr_line(server) == (
            "dtrain: warning: job big was submitted with DTRAIN_GPUS=2, but this server has DTRAIN_GPUS unset: it "
            "cannot schedule or resume it on the GPUs it was submitted with; stop it and start it as "
            "'DTRAIN_GPUS=2 dtrain server'\n")
        needle = ("waiting: needs 2 GPUs but this machine now has 0 (its supervisor has DTRAIN_GPUS unset; it was "
                  "submitted with DTRAIN_GPUS=2): it never starts so; 'dtrain suspend big', then 'DTRAIN_GPUS=2 "
                  "dtrain resume big' queues it with the GPUs it was submitted with, or delete it and submit it "
                  "with fewer")
        assert server.http.get("/api/v1/jobs").status_code == 200  # finds the lost supervisor, starts a new one
        deadline = time.monotonic() + 60  # the new supervisor asks the scheduler at once; this only ends a hang
        info = server.http.get("/api/v1/jobs/big").json()
        while info["message"] != needle and time.monotonic() < deadline:
            time.sleep(0.2)
            info = server.http.get("/api/v1/jobs/big").json()
        assert info["status"] == "Pending" and info["message"] == needle, info["message"]
        cli("suspend", "big")  # as the message says: resumed with the inventory it was submitted with, it runs
        cli("resume", "big")
        assert cli("wait", "big", "--timeout", "120").returncode == 0
    finally:
        server.stop()


def test_a_server_with_the_jobs_inventory_says_nothing_of_it(tmp_path, monkeypatch):
    """The warning is for another inventory only: a server started as the jobs were submitted is silent."""
    pytest.importorskip("fastapi", reason="the 'server' extra is not installed")
    from server_util import ServerProcess

    monkeypatch.delenv("DTRAIN_GPUS", raising=False)
    home = tmp_path / "home"
    cli = Dtrain(home, env={"DTRAIN_GPUS": "2"})
    cli("submit", "held", "-g", "1", "--", "sleep", "300")
    cli("suspend", "held")
    server = ServerProcess(home, env={"DTRAIN_GPUS": "2"}, cwd=tmp_path)
    try:
        assert server.http.get("/api/v1/jobs").status_code == 200
    finally:
        server.stop()
    assert server.proc.stderr.read() == ""


def test_a_supervisor_refused_its_own_record_by_a_full_disk_fails_the_job_naming_the_disk(tmp_path, monkeypatch):
    """A supervisor whose submit was slow (or killed) records itself; a full disk refusing that one
    write ended it with a traceback in supervisor.log, and the job read 'lost' at the next command."""
    import signal
    import sqlite3

    from dtrain import JobSpec
    from dtrain.backends.local import supervisor
    from dtrain.backends.local.store import JobStore

    home = tmp_path / "home"
    (home / "jobs" / "adopted").mkdir(parents=True)
    with job_store(home) as store:
        store.insert_job(JobSpec(name="adopted", command=("true",)), cwd="/", node="this-host")  # no supervisor recorded

    def full(*_args, **_kw):
        raise sqlite3.OperationalError("database or disk is full")

    monkeypatch.setattr(supervisor, "ADOPT_S", 0.0)  # its submit never records it: it records itself at once
    monkeypatch.setattr(supervisor, "leave_rank_cgroups", lambda: None)  # this test process stays where it is
    monkeypatch.setattr(signal, "signal", lambda *_: None)  # nor takes the supervisor's SIGTERM handler
    monkeypatch.setattr(JobStore, "replace_supervisor", full)
    assert supervisor.main([str(home), "adopted"]) == 0
    row = stored_job(home, "adopted")
    assert row["status"] == "Failed", row["message"]
    assert row["message"].startswith(f"the supervisor could not write what it needs: database or disk is full; "
                                     f"the disk holding {home} "), row["message"]
    assert row["message"].endswith("then submit the job again"), row["message"]

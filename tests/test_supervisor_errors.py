"""Local backend leftovers: a supervisor that raises once its launcher has started stops it first."""

from __future__ import annotations

import errno
import signal
import sys

import pytest
from conftest import stored_job
from test_local_leftovers4 import _supervised_here

from dtrain import JobSpec
from dtrain.backends.local import supervisor
from dtrain.procs import Ident, signal_session

SLEEPER = (sys.executable, "-c", "import time; time.sleep(60)")


def _launchers(monkeypatch) -> list:
    """The launcher processes the supervisor starts, kept to check (and clean up) afterwards."""
    started, popen = [], supervisor.subprocess.Popen

    def kept(*args, **kwargs):
        proc = popen(*args, **kwargs)
        started.append((proc, Ident.of(proc.pid)))
        return proc

    monkeypatch.setattr(supervisor.subprocess, "Popen", kept)
    return started


def _gone(started) -> None:
    """Each launcher killed and reaped by the supervisor itself (a zombie still holds its pid)."""
    try:
        assert len(started) == 1
        for proc, ident in started:
            assert proc.returncode == -signal.SIGKILL, proc.returncode  # reaped: its wait() bounded by GRACE_S
            assert Ident.of(proc.pid) != ident
    finally:
        for proc, ident in started:
            signal_session(ident, signal.SIGKILL)
            if proc.returncode is None:
                proc.kill()
                proc.wait(timeout=30)


def test_a_full_disk_refusing_launcher_json_stops_the_launcher_it_could_not_record(tmp_path, monkeypatch):
    """launcher.json refused by a full disk: the job failed saying so, but its launcher, recorded nowhere
    (neither `delete` nor the supervisor's final kill_ranks could find it), trained on unwatched."""
    home = tmp_path / "home"
    _supervised_here(home, JobSpec(name="full", command=SLEEPER, max_restarts=2), monkeypatch)
    started = _launchers(monkeypatch)

    def full(path, data):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(supervisor, "_write_json", full)
    supervisor.main([str(home), "full"])
    _gone(started)
    assert stored_job(home, "full")["status"] == "Failed"


def test_a_supervisor_error_while_it_watches_stops_and_reaps_the_launcher(tmp_path, monkeypatch):
    """An unexpected error in the watch loop ended the supervisor with the launcher left behind
    (killed only through launcher.json by the final kill_ranks, and never reaped)."""
    home = tmp_path / "home"
    _supervised_here(home, JobSpec(name="bug", command=SLEEPER), monkeypatch)
    started = _launchers(monkeypatch)

    def broken(self, attempt, access=None):
        raise RuntimeError("a bug")

    monkeypatch.setattr(supervisor.Supervisor, "_watch", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        supervisor.main([str(home), "bug"])
    _gone(started)
    row = stored_job(home, "bug")
    assert (row["status"], row["message"].splitlines()[0]) == ("Failed", "supervisor error: a bug"), row["message"]

"""`dtrain exec`/`bash` (Client.exec) wait for a job still Pending or a process still being launched,
up to --pod-running-timeout (1m), as `kubectl exec` and `runai bash` wait for the pod to run: a
script that submits and then execs no longer fails "has not started yet" on a busy machine."""

from __future__ import annotations

import subprocess
import time

import pytest

from conftest import DTRAIN, Dtrain, assert_usage_error
from dtrain.backends.base import JobStatus
from dtrain.errors import NotReadyError, SpecError


@pytest.mark.slow
def test_exec_waits_for_a_queued_job_to_run_and_refuses_once_its_time_runs_out(dt_gpus: Dtrain):
    dt = dt_gpus
    dt("submit", "holder", "--gpu", "2", "--", "sleep", "300")
    dt.wait_running("holder")
    dt("submit", "queued", "--gpu", "1", "--", "sleep", "300")
    assert dt.status("queued") == "Pending"
    proc = dt("exec", "queued", "--pod-running-timeout", "0.5", "--", "echo", "in", check=False)
    assert proc.returncode != 0 and proc.stdout == ""
    assert "job 'queued' is Pending after 0.5s: exec needs a Running job (see 'dtrain describe job queued')" in proc.stderr
    # the holder ends while an exec waits: the exec then runs beside the started job
    waiting = subprocess.Popen([DTRAIN, "exec", "queued", "--", "sh", "-c", "echo rank $RANK"], env=dt.env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    time.sleep(1.0)
    assert waiting.poll() is None  # still waiting, not refused
    dt("delete", "holder")
    out, err = waiting.communicate(timeout=90)
    assert waiting.returncode == 0, err
    assert out == "rank 0\n"


def test_the_running_timeout_is_bounded_and_an_ended_job_is_refused_at_once(dt: Dtrain):
    dt("submit", "done", "--", "true")
    dt.wait_for("done", {"Succeeded"})
    started = time.monotonic()
    proc = dt("exec", "done", "--", "true", check=False)
    assert "job 'done' is Succeeded: exec needs a Running job" in proc.stderr and proc.returncode != 0
    assert time.monotonic() - started < 30  # not the minute a Pending job gets
    for bad in ("-1", "nan", "1e400", "soon", "367d"):
        assert_usage_error(dt("exec", "done", "--pod-running-timeout", bad, "--", "true", check=False),
                           f"invalid --pod-running-timeout '{bad}'", "e.g. --pod-running-timeout 5m")


def test_a_rank_being_launched_is_asked_again_until_it_runs():
    """The backend's NotReadyError (a rank's record not written yet; a pod not Running) is retried."""
    from dtrain.backends.base import Backend, JobInfo
    from dtrain.spec import JobSpec

    class Launching(Backend):
        name = "launching"
        tries = 0

        def _get(self, name):
            return JobInfo(name=name, spec=JobSpec(name=name, command=("true",)), status=JobStatus.RUNNING,
                           backend=self.name, created=0.0)

        def _exec(self, name, command, *, rank):
            self.tries += 1
            if self.tries < 3:
                raise NotReadyError(f"rank {rank} of job {name!r} has not started yet")
            return 7

    for hook in Backend.__abstractmethods__ - set(vars(Launching)):
        setattr(Launching, hook, lambda self, *a, **kw: None)
    Launching.__abstractmethods__ = frozenset()
    b = Launching()
    assert b.exec("j", ["true"]) == 7 and b.tries == 3
    b.tries = -100
    started = time.monotonic()
    with pytest.raises(NotReadyError, match="has not started yet"):
        b.exec("j", ["true"], running_timeout=0.3)
    assert 0.3 <= time.monotonic() - started < 5
    for bad in (True, -1, float("nan"), "60"):
        with pytest.raises(SpecError, match="invalid running_timeout"):
            b.exec("j", ["true"], running_timeout=bad)
